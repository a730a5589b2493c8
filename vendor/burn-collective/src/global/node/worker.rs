use std::{collections::HashMap, marker::PhantomData, sync::Arc, time::Duration};

use burn_communication::{Address, CommunicationChannel, Message, ProtocolClient};
use tokio::{
    runtime::Runtime,
    sync::{
        Mutex,
        mpsc::{Receiver, Sender},
    },
    task::JoinHandle,
};
use tokio_util::sync::CancellationToken;

use crate::global::shared::{
    CollectiveMessage, CollectiveMessageResponse, GlobalCollectiveError, RemoteRequest,
    RemoteResponse, RequestId, SessionId,
};

/// Worker that handles communication with the orchestrator for global collective operations.
pub(crate) struct GlobalClientWorker<P: ProtocolClient> {
    handle: Option<JoinHandle<Result<(), GlobalCollectiveError>>>,
    cancel_token: CancellationToken,
    request_sender: Sender<ClientRequest>,
    // curriculum-ssl patch: why the worker ended, when it ended before a request (the
    // orchestrator could not be reached), and the longest wait for an answer.
    ended: Arc<std::sync::Mutex<Option<GlobalCollectiveError>>>,
    timeout: Option<Duration>,
    _phantom_data: PhantomData<P>,
}

// Rename
struct GlobalClientWorkerState {
    requests: HashMap<RequestId, Sender<RemoteResponse>>,
}

impl GlobalClientWorkerState {
    fn new() -> Self {
        Self {
            requests: HashMap::new(),
        }
    }
}

#[derive(Debug)]
pub(crate) struct ClientRequest {
    pub request: RemoteRequest,
    pub callback: Sender<RemoteResponse>,
}

impl ClientRequest {
    pub(crate) fn new(request: RemoteRequest, callback: Sender<RemoteResponse>) -> Self {
        Self { request, callback }
    }
}

impl<C: ProtocolClient> GlobalClientWorker<C> {
    /// Create a new global client worker and start the tasks.
    pub(crate) fn new(
        runtime: &Runtime,
        cancel_token: CancellationToken,
        global_address: &Address,
        timeout: Option<Duration>,
    ) -> Self {
        let (request_sender, request_recv) = tokio::sync::mpsc::channel::<ClientRequest>(10);

        let state = Arc::new(Mutex::new(GlobalClientWorkerState::new()));
        let ended = Arc::new(std::sync::Mutex::new(None));

        let handle = runtime.spawn(Self::start(
            state,
            cancel_token.clone(),
            global_address.clone(),
            request_recv,
            timeout,
            ended.clone(),
        ));

        Self {
            handle: Some(handle),
            cancel_token,
            request_sender,
            ended,
            timeout,
            _phantom_data: PhantomData,
        }
    }

    /// Start the global client tasks
    async fn start(
        state: Arc<Mutex<GlobalClientWorkerState>>,
        cancel_token: CancellationToken,
        global_address: Address,
        request_recv: Receiver<ClientRequest>,
        timeout: Option<Duration>,
        ended: Arc<std::sync::Mutex<Option<GlobalCollectiveError>>>,
    ) -> Result<(), GlobalCollectiveError> {
        // Init the connection. curriculum-ssl patch: why it failed is noted before the request
        // channel closes (a waiting request then reads it).
        let (request, response) = match Self::init_connection(&global_address, timeout).await {
            Ok(streams) => streams,
            Err(err) => {
                *ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(err.clone());
                drop(request_recv);
                return Err(err);
            }
        };

        // Websocket async worker loading responses from the server.
        let response_handle = tokio::spawn(Self::response_loader(
            state.clone(),
            response,
            cancel_token.clone(),
        ));

        // Channel async worker sending operations to the server.
        let request_handle = tokio::spawn(Self::request_sender(
            request_recv,
            state,
            request,
            cancel_token.clone(),
        ));

        if let Err(e) = response_handle.await {
            log::error!("Response handler failed: {e:?}");
        }
        if let Err(e) = request_handle.await {
            log::error!("Request handler failed: {e:?}");
        }

        Ok(())
    }

    async fn init_connection(
        address: &Address,
        timeout: Option<Duration>,
    ) -> Result<(C::Channel, C::Channel), GlobalCollectiveError> {
        let session_id = SessionId::new();
        // curriculum-ssl patch: one attempt a second for as long as the timeout allows (0.21.0
        // retried forever).
        let retry_max = timeout.map(|t| t.as_secs().max(1).min(u64::from(u32::MAX)) as u32);

        let stream_request = tokio::spawn(Self::connect_with_retry(
            address.clone(),
            "request",
            std::time::Duration::from_secs(1),
            retry_max,
            session_id,
        ));
        let stream_response = tokio::spawn(Self::connect_with_retry(
            address.clone(),
            "response",
            std::time::Duration::from_secs(1),
            retry_max,
            session_id,
        ));

        let Ok(Some(request)) = stream_request.await else {
            return Err(GlobalCollectiveError::OrchestratorUnreachable);
        };
        let Ok(Some(response)) = stream_response.await else {
            return Err(GlobalCollectiveError::OrchestratorUnreachable);
        };

        Ok((request, response))
    }

    /// Connect with websocket with retries.
    async fn connect_with_retry(
        address: Address,
        route: &str,
        retry_pause: Duration,
        retry_max: Option<u32>,
        session_id: SessionId,
    ) -> Option<C::Channel> {
        let mut retries = 0;
        loop {
            if let Some(max) = retry_max
                && retries >= max
            {
                log::warn!("Failed to connect to {address} after {max} retries.");
                return None;
            }

            // Try to connect to the request address. curriculum-ssl patch: log lines, not
            // println! on standard output.
            log::debug!("Connecting to {address} ...");
            let result = C::connect(address.clone(), route).await;

            if let Some(mut stream) = result {
                let init_msg = CollectiveMessage::Init(session_id);
                let bytes: bytes::Bytes = rmp_serde::to_vec(&init_msg).unwrap().into();
                if stream.send(Message::new(bytes)).await.is_ok() {
                    return Some(stream);
                }
            }

            if retries == 0 {
                log::info!("Waiting for the orchestrator at {address} ...");
            }
            log::debug!("Failed to connect to {address}, retrying... Attempt #{retries}");
            tokio::time::sleep(retry_pause).await;
            retries += 1;
        }
    }

    /// Unregister the worker and close the connection.
    pub(crate) async fn close_connection(&mut self) -> Result<(), GlobalCollectiveError> {
        if let Some(handle) = self.handle.take() {
            // Un-register from server
            let req = RemoteRequest::Finish;
            let resp = self.request(req, self.timeout).await?;
            if resp != RemoteResponse::FinishAck {
                log::error!("Requested to finish, did not get FinishAck; got {resp:?}");
                return Err(GlobalCollectiveError::WrongOrchestratorResponse);
            }

            self.cancel_token.cancel();

            if let Ok(Err(e)) = handle.await {
                log::error!("Connection error {e:?}");
            }
        }

        Ok(())
    }

    async fn response_loader(
        state: Arc<Mutex<GlobalClientWorkerState>>,
        mut stream_response: C::Channel,
        cancel_token: CancellationToken,
    ) {
        loop {
            tokio::select! {
                // Check if the cancel token is cancelled
                _ = cancel_token.cancelled() => {
                    break;
                }
                // .. Or get a message from the websocket
                response = stream_response.recv() => {
                    match response {
                        Err(err) => {
                            log::error!("Error receiving message from websocket: {err:?}");
                            break;
                        }
                        Ok(response) => {
                            let Some(response) = response else {
                                log::warn!("Closed connection");
                                break;
                            };

                            // curriculum-ssl patch: what cannot be read, or whose requester is
                            // gone, is logged, not a panic on the runtime's thread.
                            let Ok(response) =
                                rmp_serde::from_slice::<CollectiveMessageResponse>(&response.data)
                            else {
                                log::warn!("An orchestrator's message could not be read");
                                continue;
                            };
                            let state_resp = state.lock().await;
                            let Some(response_callback) =
                                state_resp.requests.get(&response.request_id)
                            else {
                                log::warn!("Got a response to an unknown request");
                                continue;
                            };
                            let _ = response_callback.send(response.content).await;
                        }
                    }
                }
            }
        }

        log::info!("Worker closing connection");
        let _ = stream_response.close().await;
    }

    async fn request_sender(
        mut request_recv: Receiver<ClientRequest>,
        worker: Arc<Mutex<GlobalClientWorkerState>>,
        mut stream_request: C::Channel,
        cancel_token: CancellationToken,
    ) {
        loop {
            tokio::select! {
                _ = cancel_token.cancelled() => {
                    break;
                },
                request = request_recv.recv() => {
                    let Some(request) = request else {
                        continue;
                    };

                    let id = RequestId::new();

                    // Register the callback if there is one
                    {
                        let mut state = worker.lock().await;
                        state.requests.insert(id, request.callback);
                    }

                    let request = CollectiveMessage::Request(id, request.request);

                    let bytes = rmp_serde::to_vec::<CollectiveMessage>(&request)
                        .expect("Can serialize tasks to bytes.")
                        .into();
                    if let Err(err) = stream_request.send(Message::new(bytes)).await {
                        log::warn!("The orchestrator's connection dropped: {err:?}");
                        break;
                    }
                }
            }
        }

        log::info!("Worker closing connection");
        let _ = stream_request.close().await;
    }

    /// curriculum-ssl patch: the orchestrator's answer, or an error when it could not be reached,
    /// went away, or did not answer within `timeout` (0.21.0 panicked or waited forever).
    pub(crate) async fn request(
        &self,
        req: RemoteRequest,
        timeout: Option<Duration>,
    ) -> Result<RemoteResponse, GlobalCollectiveError> {
        let ended = || {
            self.ended
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or(GlobalCollectiveError::OrchestratorLost)
        };
        let (callback, mut response_recv) = tokio::sync::mpsc::channel::<RemoteResponse>(10);
        let client_req = ClientRequest::new(req, callback);
        if self.request_sender.send(client_req).await.is_err() {
            return Err(ended());
        }
        let answer = match timeout {
            Some(timeout) => tokio::time::timeout(timeout, response_recv.recv())
                .await
                .map_err(|_| GlobalCollectiveError::OrchestratorLost)?,
            None => response_recv.recv().await,
        };
        answer.ok_or_else(ended)
    }
}
