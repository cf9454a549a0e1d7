//! Errors that stop a run before or while it starts. Errors of single requests are counted in
//! [`crate::stats::ErrorCounts`], never returned.

use thiserror::Error;

/// A run could not be started.
#[derive(Debug, Error)]
pub enum HttpError {
    #[error("invalid URL {0}")]
    /// The URL cannot be used.
    Url(String),
    #[error("invalid header {0}")]
    /// A `-H` header is not `Name: value`.
    Header(String),
    #[error("invalid method '{0}': use an upper-case token such as GET, POST or HEAD")]
    /// The method is not an upper-case token.
    Method(String),
    #[error("invalid option: {0}")]
    /// An option is out of range or conflicts with another.
    Config(String),
    #[error("cannot reach {host}: {source}")]
    /// The host name did not resolve.
    Resolve {
        /// The name looked up.
        host: String,
        /// The resolver's error (worded as every command words it).
        source: latscope_sys::happy::ResolveError,
    },
    #[error(
        "cannot connect to {addr}: {source} (is a server listening there? check the URL or --connect-to)"
    )]
    /// No resolved address accepted a connection.
    Connect {
        /// The address tried (the last one when several were).
        addr: String,
        /// The connect error.
        source: std::io::Error,
    },
    #[error("{addr} does not speak HTTP: {what}")]
    /// Every attempt showed that the port is not an HTTP server (the run stopped at once).
    NotHttp {
        /// The address connected to.
        addr: String,
        /// What the attempts got.
        what: crate::not_http::NotHttp,
    },
    #[error("TLS handshake with {addr} failed: {failure}")]
    /// The TLS handshake failed (in a load run: every one, the same way; the run stopped).
    Handshake {
        /// The address connected to.
        addr: String,
        /// How the handshakes failed.
        failure: crate::handshake::HandshakeFailure,
    },
    #[error("TLS set-up failed: {0}")]
    /// The TLS client could not be configured (CA file, server name).
    Tls(String),
    /// One request's exchange failed after the connection was made ([`crate::request_phases`]).
    #[error("{phase} failed: {source}")]
    Exchange {
        /// The phase that failed.
        phase: Phase,
        /// What failed (a timeout is `TimedOut`, a bad response `InvalidData`).
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    /// A local system call failed (threads, epoll, timers).
    System {
        /// What was being done.
        what: &'static str,
        /// The system error.
        source: std::io::Error,
    },
}

impl HttpError {
    /// Whether the target (not the input or the local system) is at fault.
    pub fn is_target(&self) -> bool {
        matches!(
            self,
            HttpError::Resolve { .. }
                | HttpError::Connect { .. }
                | HttpError::Exchange { .. }
                | HttpError::NotHttp { .. }
                | HttpError::Handshake { .. }
        )
    }

    /// Whether the user's input is at fault.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            HttpError::Url(_)
                | HttpError::Header(_)
                | HttpError::Method(_)
                | HttpError::Config(_)
                | HttpError::Tls(_)
        )
    }
}

/// The phase of a request that failed ([`HttpError::Exchange`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The TLS handshake.
    Tls,
    /// Writing the request.
    Request,
    /// Waiting for the first byte of the response.
    FirstByte,
    /// Reading the rest of the response.
    Transfer,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Tls => "TLS handshake",
            Phase::Request => "sending the request",
            Phase::FirstByte => "waiting for the response",
            Phase::Transfer => "reading the response",
        })
    }
}
