//! The `[evidence]` endpoint: this host's end of its peers' diagnose runs. It is `latscope
//! serve`'s server (crates/net `serve`: the HMAC challenge, the handshake deadline, the evidence
//! exchange's window, its per-source and server-wide rate limits) configured to answer evidence
//! requests only, with the diagnose crate's observers behind it
//! (`latscope_diagnose::remote::server`): the same code as `latscope serve --auth-file KEY
//! --evidence-ports PORTS`, on its own port, beside the `latscope serve` the mesh measures.
//! Off unless the section is present.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use latscope_diagnose::remote::server::EvidenceServer;
use latscope_net::auth::AuthKey;
use latscope_net::serve::{ServeConfig, ServeEvent, Server, ServerHandle};

use crate::config::Evidence;
use crate::metrics::Metrics;

/// Connections the endpoint holds at once (handshakes included): two requests observe at a
/// time (`latscope_net::serve::evidence::MAX_RUNNING`), the rest are refused or wait briefly.
const MAX_CONNECTIONS: u32 = 16;
/// Time a client has to authenticate and send its request.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The key file is missing, empty, or readable by other users.
    #[error("[evidence] auth_file: {0}")]
    Key(String),
    /// The address cannot be bound.
    #[error("[evidence] cannot listen on {addr}: {why}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        why: String,
    },
}

/// The running endpoint; stopped on drop.
pub(crate) struct Endpoint {
    /// Where it listens.
    pub bound: SocketAddr,
    handle: ServerHandle,
}

impl Endpoint {
    /// Read the key, bind and serve on a background thread.
    pub fn start(cfg: &Evidence, metrics: &Metrics) -> Result<Endpoint, EndpointError> {
        let key =
            AuthKey::from_file(&cfg.auth_file).map_err(|e| EndpointError::Key(e.to_string()))?;
        let serve = ServeConfig {
            bind: cfg.listen.ip(),
            port: cfg.listen.port(),
            max_connections: MAX_CONNECTIONS,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            auth: Some(key),
            evidence: Some(EvidenceServer::new(cfg.ports.clone())),
            evidence_only: true,
            ..ServeConfig::default()
        };
        let requests = metrics.evidence_requests.clone();
        let count = move |result: &str| {
            requests
                .get_or_create(&vec![("result".to_string(), result.to_string())])
                .inc();
        };
        let listen_err = |e: latscope_net::NetError| EndpointError::Listen {
            addr: cfg.listen,
            why: e.to_string(),
        };
        let server = Server::bind(
            serve,
            Arc::new(AtomicBool::new(false)),
            move |ev| match ev {
                ServeEvent::TestEnded { .. } => count("answered"),
                ServeEvent::Refused { .. } => count("refused"),
                _ => {}
            },
        )
        .map_err(listen_err)?;
        let bound = server.tcp_addr();
        let handle = server.spawn().map_err(listen_err)?;
        Ok(Endpoint { bound, handle })
    }

    /// Close the listener (requests observing end within their window's poll).
    pub fn stop(self) {
        self.handle.stop();
    }
}
