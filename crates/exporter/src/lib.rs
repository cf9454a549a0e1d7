//! latscope's Prometheus exporter, shared by `latscope stack --prometheus` and `latscope agent`:
//! metrics are kept in a [`prometheus_client`] registry (or produced by its collectors) and
//! encoded as OpenMetrics text (<https://prometheus.io/docs/specs/om/open_metrics_spec/>);
//! an HTTP/1.1 server (hyper on tokio) serves them.
//!
//! The server is meant to sit next to production services, so every resource a client can hold
//! is bounded ([`Limits`]): request head size (a longer head is answered 431 without being
//! buffered), the time to send a head, connections open at once (further ones are closed at
//! once), and each connection's lifetime (a client that never reads its answer is dropped).
//! Each connection is its own task, so a slow client never delays another scrape.
//!
//! Routes: `GET /metrics`, `GET /healthz` (`ok`), `GET /` (a pointer to /metrics), and whatever
//! [`Routes::route`] adds (the agent's `/probe`). Other methods: 405.

#![warn(missing_docs)]

pub mod fuzzing;
mod server;

pub use server::{Server, serve};

use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::time::Duration;

use prometheus_client::registry::Registry;

/// The Content-Type of `/metrics`: OpenMetrics 1.0 text (Prometheus ≥ 2.5 asks for it first).
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Bounds on what one client can make the server hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest request head (request line + headers) read, bytes; hyper's minimum is 8192.
    /// A larger head is answered `431 Request Header Fields Too Large` and the connection closed.
    pub max_head_bytes: usize,
    /// The most header fields in one request.
    pub max_headers: usize,
    /// A client must send a whole request head within this time.
    pub head_timeout: Duration,
    /// Connections served at once; further ones are closed as soon as they are accepted.
    pub max_connections: usize,
    /// A connection (keep-alive included) lives at most this long; then it is asked to close
    /// after its current answer and dropped [`Limits::drain_timeout`] later.
    pub max_connection_lifetime: Duration,
    /// How long a connection past its lifetime may take to finish its answer.
    pub drain_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: 16 * 1024,
            max_headers: 64,
            head_timeout: Duration::from_secs(5),
            max_connections: 128,
            max_connection_lifetime: Duration::from_secs(120),
            drain_timeout: Duration::from_secs(10),
        }
    }
}

/// One answer of an extra route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// Content-Type header.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl Reply {
    /// A `text/plain` answer.
    pub fn text(status: u16, body: impl Into<String>) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }

    /// An OpenMetrics answer (status 200).
    pub fn metrics(body: String) -> Reply {
        Reply {
            status: 200,
            content_type: OPENMETRICS_CONTENT_TYPE,
            body,
        }
    }
}

/// An answer still being worked out (a `/probe` runs a measurement first).
pub type ReplyFuture = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// What a server serves.
pub trait Routes: Send + Sync + 'static {
    /// The `/metrics` page, OpenMetrics text ending in `# EOF` (see [`encode`]).
    fn metrics(&self) -> String;

    /// A GET on any other path than `/`, `/metrics` and `/healthz`: `None` is 404. `query` is the
    /// raw query string (without `?`).
    fn route(&self, path: &str, query: &str) -> Option<ReplyFuture> {
        let _ = (path, query);
        None
    }

    /// The text served at `/` (names the routes).
    fn index(&self) -> String {
        "latscope exporter: metrics at /metrics, health at /healthz\n".into()
    }
}

/// A registry's OpenMetrics text, `# EOF` included.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail; a collector's own error leaves a partial page, which
    // Prometheus rejects as a whole (no `# EOF`) rather than storing wrong figures.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// Serves a fixed registry at `/metrics`.
impl Routes for Registry {
    fn metrics(&self) -> String {
        encode(self)
    }
}

/// The exporter's default port (`--prometheus` with no value, the agent's default `listen`).
pub const DEFAULT_PORT: u16 = 9573;

/// `9573`, `:9573`, `127.0.0.1:9573`, `[::1]:9573`, `localhost:9573` → a socket address.
/// A bare port binds loopback: exposing metrics to other hosts takes an explicit address.
pub fn parse_listen_addr(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    let port_only = s.strip_prefix(':').unwrap_or(s);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.to_socket_addrs()
        .map_err(|e| {
            format!(
                "bad listen address '{s}': {e} (use PORT or HOST:PORT, e.g. 127.0.0.1:{DEFAULT_PORT})"
            )
        })?
        .next()
        .ok_or_else(|| format!("listen address '{s}' resolves to nothing"))
}

/// Whether the address is reachable from other hosts (for the start-up line that says so).
pub fn is_exposed(addr: &SocketAddr) -> bool {
    !addr.ip().is_loopback()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn listen_address_forms() {
        assert_eq!(
            parse_listen_addr("9573").ok(),
            Some("127.0.0.1:9573".parse().unwrap())
        );
        assert_eq!(
            parse_listen_addr(":9000").ok(),
            Some("127.0.0.1:9000".parse().unwrap())
        );
        assert_eq!(
            parse_listen_addr("0.0.0.0:1").ok(),
            Some("0.0.0.0:1".parse().unwrap())
        );
        assert!(is_exposed(&"0.0.0.0:1".parse().unwrap()));
        assert!(!is_exposed(&"[::1]:1".parse().unwrap()));
        assert!(parse_listen_addr("nonsense").is_err());
    }

    #[test]
    fn registry_text_is_openmetrics() {
        use prometheus_client::metrics::counter::Counter;
        let mut r = Registry::default();
        let c: Counter = Counter::default();
        r.register("latscope_test", "A test counter", c.clone());
        c.inc_by(3);
        let text = r.metrics();
        assert!(text.contains("# TYPE latscope_test counter"), "{text}");
        assert!(text.contains("latscope_test_total 3"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
