//! Errors of the socket engines, each mapped to a documented exit code by the binary (`src/exit.rs`).

use latscope_sys::error::{MissingPrivilege, SysError};
use thiserror::Error;

use crate::proto::RefusalCode;

/// How a refusal reads: `busy: 12 tests running, retry later`, or the server's reason.
fn refusal_text(code: RefusalCode, message: &str) -> String {
    match code {
        RefusalCode::Busy => format!("busy: {message}"),
        // "authentication required: pass --auth-file …" says it all.
        RefusalCode::Auth => message.to_string(),
        _ => format!("the server refused the test: {message}"),
    }
}

#[derive(Debug, Error)]
/// An error of the socket engines.
pub enum NetError {
    /// The name did not resolve, or no route leads to it.
    #[error("cannot reach {target}: {reason}")]
    Unreachable {
        /// The target as given.
        target: String,
        /// Why.
        reason: String,
    },
    /// Nothing listens on the port.
    #[error("connection to {target} refused: is `latscope serve` (or the service) running there?")]
    Refused {
        /// The target as given.
        target: String,
    },
    /// No answer within the timeout.
    #[error("{target} did not answer within {timeout}")]
    Timeout {
        /// The target as given.
        target: String,
        /// The timeout, formatted.
        timeout: String,
    },
    /// Something answered, but not the latscope protocol.
    #[error(
        "{target} does not speak the latscope protocol ({detail}); start `latscope serve` there or pick its port"
    )]
    WrongProtocol {
        /// The target as given.
        target: String,
        /// What it answered instead.
        detail: String,
    },
    /// The latscope server refused the test (a limit, busy, a malformed request).
    #[error("{}", refusal_text(*.code, .message))]
    ServerRefused {
        /// The protocol's machine-readable reason.
        code: RefusalCode,
        /// The server's explanation.
        message: String,
    },
    /// A stream test failed on the server's side after it started.
    #[error("the server ended the test: {0}")]
    ServerFailed(String),
    /// The peer broke the protocol mid-test.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Bad parameters for the engine.
    #[error("{0}")]
    Invalid(String),
    /// A capability is missing.
    #[error(transparent)]
    Privilege(#[from] MissingPrivilege),
    /// A local system error.
    #[error(transparent)]
    Io(#[from] SysError),
}

impl NetError {
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        NetError::Io(SysError {
            context: context.into(),
            source,
        })
    }
}
