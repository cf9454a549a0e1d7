//! Errors that stop a run before or while it starts. Errors of single requests are counted in
//! [`crate::stats::ErrorCounts`], never returned.

use thiserror::Error;

/// A run could not be started.
#[derive(Debug, Error)]
pub enum HttpError {
    #[error("invalid URL {0}")]
    Url(String),
    #[error("invalid header {0}")]
    Header(String),
    #[error("invalid method '{0}': use an upper-case token such as GET, POST or HEAD")]
    Method(String),
    #[error("invalid option: {0}")]
    Config(String),
    #[error("cannot resolve '{host}': {source}")]
    Resolve {
        host: String,
        source: std::io::Error,
    },
    #[error(
        "cannot connect to {addr}: {source} (is a server listening there? check the URL or --connect-to)"
    )]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("TLS set-up failed: {0}")]
    Tls(String),
    /// One request's exchange failed after the connection was made ([`crate::request_phases`]).
    #[error("{phase} failed: {source}")]
    Exchange {
        phase: crate::phases::Phase,
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    System {
        what: &'static str,
        source: std::io::Error,
    },
}

impl HttpError {
    /// Whether the target (not the input or the local system) is at fault.
    pub fn is_target(&self) -> bool {
        matches!(
            self,
            HttpError::Resolve { .. } | HttpError::Connect { .. } | HttpError::Exchange { .. }
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
