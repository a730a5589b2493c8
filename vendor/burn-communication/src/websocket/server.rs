use std::net::SocketAddr;

use crate::base::{CommunicationChannel, CommunicationError, Message, ProtocolServer};
use axum::{
    Router,
    extract::{
        State, WebSocketUpgrade,
        ws::{self, WebSocket},
    },
    routing::get,
};
use futures::StreamExt;

#[derive(Clone, Debug)]
pub struct WsServer {
    port: u16,
    // curriculum-ssl patch: the host to listen on (0.0.0.0 unless given), or a listener already
    // bound (so that its address, port 0 resolved, is known before the server runs).
    host: String,
    listener: Option<std::sync::Arc<std::sync::Mutex<Option<std::net::TcpListener>>>>,
    router: Router<()>,
}

pub struct WsServerChannel {
    inner: WebSocket,
}

impl WsServer {
    pub fn new(port: u16) -> Self {
        Self::on("0.0.0.0", port)
    }

    /// curriculum-ssl patch: a server listening on `host:port` only (e.g. a loopback address).
    pub fn on(host: &str, port: u16) -> Self {
        Self {
            port,
            host: host.to_string(),
            listener: None,
            router: Router::new(),
        }
    }

    /// curriculum-ssl patch: a server on a listener already bound by the caller.
    pub fn from_listener(listener: std::net::TcpListener) -> Self {
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        Self {
            port,
            host: String::new(),
            listener: Some(std::sync::Arc::new(std::sync::Mutex::new(Some(listener)))),
            router: Router::new(),
        }
    }
}

impl ProtocolServer for WsServer {
    type Channel = WsServerChannel;
    type Error = WsServerError;

    async fn serve<F>(self, shutdown: F) -> Result<(), Self::Error>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        // curriculum-ssl patch: no global tracing subscriber installed by a library (0.21.0 called
        // `init_logging` here, printing every INFO line of the process on standard output).

        let taken = self
            .listener
            .as_ref()
            .and_then(|l| l.lock().unwrap_or_else(|e| e.into_inner()).take());
        let listener = match taken {
            Some(listener) => {
                listener.set_nonblocking(true)?;
                tokio::net::TcpListener::from_std(listener)?
            }
            None => {
                let host = if self.host.contains(':') && !self.host.starts_with('[') {
                    format!("[{}]", self.host)
                } else {
                    self.host.clone()
                };
                let address = format!("{host}:{}", self.port);
                log::info!("Starting server {address}");
                match tokio::net::TcpListener::bind(&address).await {
                    // A host this machine does not have (an address another machine reaches
                    // it at through NAT, a proxy, a container's port mapping): every interface.
                    Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => {
                        log::warn!(
                            "{address} is not an address of this machine ({e}); listening on \
                             every interface, port {}",
                            self.port
                        );
                        tokio::net::TcpListener::bind(format!("0.0.0.0:{}", self.port)).await?
                    }
                    bound => bound?,
                }
            }
        };

        axum::serve(
            listener,
            self.router
                .into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown)
        .await?;

        Ok(())
    }

    fn route<C, Fut>(mut self, path: &str, callback: C) -> Self
    where
        C: FnOnce(WsServerChannel) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        // Format path: should start with a /
        let path = if path.starts_with("/") {
            path.to_owned()
        } else {
            format!("/{path}")
        };

        let method = get(|ws: WebSocketUpgrade, _: State<()>| async {
            ws.on_upgrade(async move |socket| {
                callback(WsServerChannel { inner: socket }).await;
            })
        });

        self.router = self.router.route(&path, method);

        self
    }
}

impl CommunicationChannel for WsServerChannel {
    type Error = WsServerError;

    async fn send(&mut self, message: Message) -> Result<(), WsServerError> {
        self.inner.send(ws::Message::Binary(message.data)).await?;

        Ok(())
    }

    async fn recv(&mut self) -> Result<Option<Message>, WsServerError> {
        match self.inner.next().await {
            Some(next) => match next {
                Ok(ws::Message::Binary(data)) => Ok(Some(Message { data })),
                Ok(ws::Message::Close(_close_frame)) => Ok(None),
                Err(err) => Err(WsServerError::Axum(err)),
                msg => Err(WsServerError::UnknownMessage(format!("{msg:?}"))),
            },
            // curriculum-ssl patch: the stream ended (the peer is gone) — closed, not a panic.
            None => Ok(None),
        }
    }

    async fn close(&mut self) -> Result<(), WsServerError> {
        let reason = "Peer is closing".to_string();

        self.inner
            .send(ws::Message::Close(Some(ws::CloseFrame {
                code: 1000, // code: Normal
                reason: reason.clone().into(),
            })))
            .await?;

        Ok(())
    }
}

#[derive(Debug)]
pub enum WsServerError {
    Io(std::io::Error),
    Axum(axum::Error),
    UnknownMessage(String),
    Other(String),
}

impl CommunicationError for WsServerError {}

impl From<std::io::Error> for WsServerError {
    fn from(err: std::io::Error) -> Self {
        Self::Io(err)
    }
}

impl From<axum::Error> for WsServerError {
    fn from(err: axum::Error) -> Self {
        Self::Axum(err)
    }
}
