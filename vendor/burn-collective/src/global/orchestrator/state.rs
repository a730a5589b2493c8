use crate::{
    PeerId,
    global::{
        NodeId,
        shared::{
            CollectiveMessageResponse, GlobalCollectiveError, RemoteRequest, RemoteResponse,
            RequestId, SessionId,
        },
    },
};
use burn_communication::Address;
use std::collections::HashMap;
use tokio::sync::mpsc::{Receiver, Sender};

pub(crate) struct Session {
    response_sender: Sender<CollectiveMessageResponse>,
    response_receiver: Option<Receiver<CollectiveMessageResponse>>,
}

impl Session {
    fn new() -> Self {
        // curriculum-ssl patch: room for the few answers a session gets, sent without waiting
        // (`try_send`): the state's lock is held while answering, and a session whose response
        // socket never connected must not stall the orchestrator (0.21.0: capacity 1, `send`).
        let (response_sender, recv) = tokio::sync::mpsc::channel::<CollectiveMessageResponse>(64);
        Self {
            response_sender,
            response_receiver: Some(recv),
        }
    }

    async fn respond(&mut self, response: CollectiveMessageResponse) {
        // curriculum-ssl patch: a node that has gone is not a panic of the orchestrator.
        if self.response_sender.try_send(response).is_err() {
            log::warn!("a node's answer could not be queued (its connection is gone or stalled)");
        }
    }
}

pub(crate) struct GlobalCollectiveState {
    /// The ids passed to each register so far, and their addresses
    registered_nodes: HashMap<SessionId, NodeId>,
    /// Address for each node
    node_addresses: HashMap<NodeId, Address>,
    /// Peer on each node
    node_peers: HashMap<NodeId, Vec<PeerId>>,

    /// How many total nodes for the current register operation, as defined by the first caller
    cur_num_nodes: Option<u32>,
    /// How many peers have registered total
    num_global_peers: u32,

    register_requests: Vec<(SessionId, RequestId, NodeId)>,

    sessions: HashMap<SessionId, Session>,

    /// curriculum-ssl patch: the registration round under way (counts rounds), when its
    /// deadline is, and when it began.
    round: u64,
    round_deadline: Option<(tokio::time::Instant, tokio::time::Instant)>,
    /// Whether a deadline was just set and needs its timer.
    deadline_new: bool,
}

impl GlobalCollectiveState {
    pub fn new() -> Self {
        Self {
            registered_nodes: HashMap::new(),
            node_addresses: HashMap::new(),
            node_peers: HashMap::new(),
            cur_num_nodes: None,
            num_global_peers: 0,
            register_requests: Vec::new(),
            sessions: HashMap::new(),
            round: 0,
            round_deadline: None,
            deadline_new: false,
        }
    }

    /// curriculum-ssl patch: the round a registration deadline belongs to, if a round with a
    /// deadline has just begun and needs a timer (see [`Self::expire_round`]).
    pub(crate) fn take_new_deadline(&mut self) -> Option<(u64, tokio::time::Instant)> {
        if !std::mem::take(&mut self.deadline_new) {
            return None;
        }
        self.round_deadline
            .filter(|_| !self.register_requests.is_empty())
            .map(|(deadline, _)| (self.round, deadline))
    }

    /// curriculum-ssl patch: at a round's deadline, answers every node still waiting with the
    /// nodes that registered, and forgets the round, so that the nodes can start again.
    pub(crate) async fn expire_round(&mut self, round: u64) {
        if round != self.round || self.register_requests.is_empty() {
            return;
        }
        let waited_ms = self
            .round_deadline
            .map_or(0, |(deadline, began)| (deadline - began).as_millis() as u64);
        let registered: Vec<(Address, Vec<PeerId>)> = {
            let mut nodes: Vec<NodeId> = self.node_addresses.keys().cloned().collect();
            nodes.sort();
            nodes
                .iter()
                .map(|id| {
                    (
                        self.node_addresses[id].clone(),
                        self.node_peers.get(id).cloned().unwrap_or_default(),
                    )
                })
                .collect()
        };
        let expected_nodes = self.cur_num_nodes.unwrap_or(0);
        log::warn!(
            "registration timed out after {waited_ms} ms: {} of {expected_nodes} nodes registered",
            registered.len()
        );
        let waiting = std::mem::take(&mut self.register_requests);
        for (session, request, _) in waiting {
            let content = RemoteResponse::Error(GlobalCollectiveError::RegisterTimeout {
                expected_nodes,
                registered: registered.clone(),
                waited_ms,
            });
            let response = CollectiveMessageResponse {
                request_id: request,
                content,
            };
            self.respond(session, response).await;
        }
        self.forget_round();
    }

    /// curriculum-ssl patch: a node's connection closed: it leaves a registration still under
    /// way (a node that stopped before the others arrived is not counted, and may register
    /// again), and its session is dropped.
    pub(crate) fn close_session(&mut self, session_id: SessionId) {
        self.sessions.remove(&session_id);
        if self
            .register_requests
            .iter()
            .any(|(s, _, _)| *s == session_id)
        {
            self.register_requests.retain(|(s, _, _)| *s != session_id);
            if let Some(node) = self.registered_nodes.remove(&session_id) {
                self.node_addresses.remove(&node);
                if let Some(peers) = self.node_peers.remove(&node) {
                    self.num_global_peers =
                        self.num_global_peers.saturating_sub(peers.len() as u32);
                }
            }
            if self.register_requests.is_empty() {
                self.forget_round();
            }
        } else if let Some(node) = self.registered_nodes.remove(&session_id) {
            // A registered node that stopped: the run it was part of is over.
            self.node_addresses.remove(&node);
            self.node_peers.remove(&node);
            if self.registered_nodes.is_empty() {
                self.forget_round();
            }
        }
    }

    fn forget_round(&mut self) {
        self.registered_nodes.clear();
        self.node_addresses.clear();
        self.node_peers.clear();
        self.cur_num_nodes = None;
        self.num_global_peers = 0;
        self.register_requests.clear();
        self.round += 1;
        self.round_deadline = None;
        self.deadline_new = false;
    }

    pub(crate) fn init_session(&mut self, id: SessionId) {
        if self.sessions.contains_key(&id) {
            return;
        }
        self.sessions.insert(id, Session::new());
    }

    /// Create the session with given id if necessary, and get the response receiver
    pub(crate) fn get_session_responder(
        &mut self,
        id: SessionId,
    ) -> Receiver<CollectiveMessageResponse> {
        self.init_session(id);
        let session = self.sessions.get_mut(&id).unwrap();
        let response_recv = session.response_receiver.take();

        response_recv.unwrap()
    }

    pub(crate) async fn respond(
        &mut self,
        session_id: SessionId,
        response: CollectiveMessageResponse,
    ) {
        // curriculum-ssl patch: a session that has closed gets no answer (not a panic).
        if let Some(session) = self.sessions.get_mut(&session_id) {
            session.respond(response).await;
        }
    }

    /// Process an incoming node's request
    pub(crate) async fn process_request(
        &mut self,
        session_id: SessionId,
        request_id: RequestId,
        request: RemoteRequest,
    ) {
        if let Err(err) = match request {
            RemoteRequest::Register {
                node_addr,
                num_nodes,
                peers,
                timeout_ms,
            } => {
                if self.register_requests.is_empty()
                    && let Some(ms) = timeout_ms
                {
                    let began = tokio::time::Instant::now();
                    self.round_deadline =
                        Some((began + std::time::Duration::from_millis(ms), began));
                    self.deadline_new = true;
                }
                self.register(session_id, request_id, node_addr, num_nodes, peers)
                    .await
            }
            RemoteRequest::Finish => self.finish(session_id, request_id).await,
        } {
            // Error occurred, send it as response
            let content = RemoteResponse::Error(err);
            self.respond(
                session_id,
                CollectiveMessageResponse {
                    request_id,
                    content,
                },
            )
            .await;
        }
    }

    /// Un-register a node. Any pending requests will be cancelled, returning error responses.
    async fn finish(
        &mut self,
        session_id: SessionId,
        request_id: RequestId,
    ) -> Result<(), GlobalCollectiveError> {
        let node_id = self
            .registered_nodes
            .remove(&session_id)
            .ok_or(GlobalCollectiveError::NotRegisteredOnFinish)?;
        self.node_addresses.remove(&node_id);
        self.node_peers.remove(&node_id);
        self.num_global_peers = 0;

        let mut register_requests = vec![];
        core::mem::swap(&mut register_requests, &mut self.register_requests);
        for (session, req, node_id) in register_requests {
            if session == session_id {
                // Send a response if we are finishing a session with a pending register request
                let content = RemoteResponse::Error(GlobalCollectiveError::PendingRegisterOnFinish);
                let response = CollectiveMessageResponse {
                    request_id: req,
                    content,
                };
                self.respond(session_id, response).await;
            } else {
                // keep the register request
                self.register_requests.push((session, req, node_id));
            }
        }

        self.respond(
            session_id,
            CollectiveMessageResponse {
                request_id,
                content: RemoteResponse::FinishAck,
            },
        )
        .await;

        // curriculum-ssl patch: no registration waits any more: its deadline is void; and once
        // every node has finished, the next run starts afresh (another --nodes is no mismatch).
        if self.register_requests.is_empty() {
            self.round += 1;
            self.round_deadline = None;
            self.deadline_new = false;
        }
        if self.registered_nodes.is_empty() {
            self.forget_round();
        }

        Ok(())
    }

    async fn register(
        &mut self,
        session_id: SessionId,
        request_id: RequestId,
        node_addr: Address,
        num_nodes: u32,
        peers: Vec<PeerId>,
    ) -> Result<(), GlobalCollectiveError> {
        if self.cur_num_nodes.is_some_and(|n| n != num_nodes) {
            return Err(GlobalCollectiveError::RegisterParamsMismatch);
        }
        // curriculum-ssl patch: checked before anything changes (0.21.0 counted the node first),
        // and a node takes the smallest id no node holds (a node that left a registration must
        // not leave two nodes with one id).
        if self.node_addresses.values().any(|addr| node_addr == *addr) {
            return Err(GlobalCollectiveError::DoubleRegister);
        }
        self.cur_num_nodes = Some(num_nodes);
        self.num_global_peers += peers.len() as u32;

        let node_id: NodeId = (0u32..)
            .map(NodeId::from)
            .find(|id| !self.node_addresses.contains_key(id))
            .expect("fewer nodes than ids");
        self.registered_nodes.insert(session_id, node_id);
        self.node_addresses.insert(node_id, node_addr);
        self.node_peers.insert(node_id, peers);

        self.register_requests
            .push((session_id, request_id, node_id));

        if self.registered_nodes.len() == num_nodes as usize {
            let mut callbacks = vec![];
            core::mem::swap(&mut callbacks, &mut self.register_requests);
            // curriculum-ssl patch: the round is complete; its deadline no longer applies.
            self.round += 1;
            self.round_deadline = None;

            for (session, request, node_id) in callbacks {
                let content = RemoteResponse::Register {
                    node_id,
                    nodes: self.node_addresses.clone(),
                    num_global_devices: self.num_global_peers,
                };
                let resp = CollectiveMessageResponse {
                    request_id: request,
                    content,
                };
                self.respond(session, resp).await;
            }
        }

        Ok(())
    }
}
