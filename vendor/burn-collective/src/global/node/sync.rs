use std::{
    marker::PhantomData,
    sync::{Arc, Mutex},
    vec,
};

use burn_communication::{CommunicationChannel, Message, Protocol, ProtocolClient};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, RwLock};

use crate::{NodeId, global::shared::GlobalCollectiveError, node::base::NodeState};

/// Handles the status of sync requests from other nodes
pub(crate) struct SyncService<P: Protocol> {
    /// Current node's state, shared with the thread that does aggregations
    node_state: Arc<RwLock<Option<NodeState>>>,
    /// The number of peers that have requested to sync with us since the last successful sync.
    syncing_peers: Mutex<Vec<NodeId>>,
    /// Notification on each incoming sync request
    sync_notif: Notify,
    /// curriculum-ssl patch: the longest wait for the other nodes (`None`: forever).
    timeout: Option<std::time::Duration>,

    _p: PhantomData<P>,
}

#[derive(Debug, Serialize, Deserialize)]
struct SyncRequest(NodeId);

impl<P: Protocol> SyncService<P> {
    pub fn new(
        node_state: Arc<RwLock<Option<NodeState>>>,
        timeout: Option<std::time::Duration>,
    ) -> Self {
        Self {
            node_state,
            syncing_peers: Mutex::new(vec![]),
            sync_notif: Notify::new(),
            timeout,
            _p: PhantomData,
        }
    }

    /// curriculum-ssl patch: the longest wait for the other nodes.
    pub fn timeout(&self) -> Option<std::time::Duration> {
        self.timeout
    }

    fn add_syncing_peer(&self, peer: NodeId) {
        let mut syncing_peers = self.syncing_peers.lock().unwrap_or_else(|e| e.into_inner());
        syncing_peers.push(peer);
    }

    /// Sync with all peers. curriculum-ssl patch: an error, not a panic, when a peer cannot be
    /// reached, and at the timeout, naming the nodes that did not arrive (0.21.0 waited
    /// forever).
    pub async fn sync(&self) -> Result<(), GlobalCollectiveError> {
        let started = tokio::time::Instant::now();
        // we can't sync while we register
        let node_state = self.node_state.read().await;
        let node_state = node_state
            .as_ref()
            .ok_or(GlobalCollectiveError::AllReduceBeforeRegister)?;

        // this peer is syncing
        self.add_syncing_peer(node_state.node_id);
        for (id, addr) in &node_state.nodes {
            if *id == node_state.node_id {
                continue;
            }

            let connect = P::Client::connect(addr.clone(), "sync");
            let connected = match self.timeout {
                Some(timeout) => tokio::time::timeout_at(started + timeout, connect)
                    .await
                    .map_err(|_| GlobalCollectiveError::SyncTimeout {
                        missing: vec![addr.clone()],
                        waited_ms: started.elapsed().as_millis() as u64,
                    })?,
                None => connect.await,
            };
            let Some(mut connection) = connected else {
                return Err(GlobalCollectiveError::PeerUnreachable(addr.clone()));
            };
            let msg = SyncRequest(node_state.node_id);
            let sync_bytes = rmp_serde::to_vec(&msg).unwrap();
            if connection
                .send(Message::new(sync_bytes.into()))
                .await
                .is_err()
            {
                return Err(GlobalCollectiveError::PeerUnreachable(addr.clone()));
            }
        }
        let mut all_node_ids = node_state.nodes.keys().cloned().collect::<Vec<_>>();
        all_node_ids.sort();
        loop {
            // curriculum-ssl patch: registered before the check, so that a peer's request
            // arriving in between is not missed (`notify_waiters` wakes only existing futures).
            let notified = self.sync_notif.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                // compare currently synced peers with list of all nodes (each node once: a fast
                // peer's request of the next round stays for that round)
                let mut syncing_peers =
                    self.syncing_peers.lock().unwrap_or_else(|e| e.into_inner());
                let mut round: Vec<NodeId> = Vec::new();
                for id in syncing_peers.iter() {
                    if !round.contains(id) {
                        round.push(*id);
                    }
                }
                round.sort();

                if round == all_node_ids {
                    // all nodes have synced. curriculum-ssl patch: remove one request per node
                    // from the shared list (0.21.0 cleared a copy of it, so every sync after
                    // the first waited forever).
                    for id in &all_node_ids {
                        if let Some(at) = syncing_peers.iter().position(|p| p == id) {
                            syncing_peers.remove(at);
                        }
                    }
                    return Ok(());
                }
                if let Some(timeout) = self.timeout
                    && started.elapsed() >= timeout
                {
                    let missing = all_node_ids
                        .iter()
                        .filter(|id| !round.contains(id))
                        .filter_map(|id| node_state.nodes.get(id).cloned())
                        .collect();
                    return Err(GlobalCollectiveError::SyncTimeout {
                        missing,
                        waited_ms: started.elapsed().as_millis() as u64,
                    });
                }
            }
            // Wait for the next sync to come in (or the timeout)
            match self.timeout {
                Some(timeout) => {
                    let _ = tokio::time::timeout_at(started + timeout, notified).await;
                }
                None => notified.await,
            }
        }
    }

    pub async fn handle_sync_connection<C: CommunicationChannel>(&self, mut channel: C) {
        // curriculum-ssl patch: a connection that drops or sends something else is ignored.
        let Ok(Some(msg)) = channel.recv().await else {
            return;
        };

        let Ok(msg) = rmp_serde::from_slice::<SyncRequest>(&msg.data) else {
            return;
        };

        self.add_syncing_peer(msg.0);

        self.sync_notif.notify_waiters();
    }
}
