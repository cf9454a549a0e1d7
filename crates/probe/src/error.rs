//! Errors of the probe engines, each mapped to a documented exit code by the binary (`src/exit.rs`).

use latscope_sys::error::{MissingPrivilege, SysError};
use thiserror::Error;

/// Why a ping or a trace could not run.
#[derive(Debug, Error)]
pub enum ProbeError {
    /// Bad parameters (exit code 2).
    #[error("{0}")]
    Invalid(String),
    /// The name did not resolve, or no route leads to it (exit code 3).
    #[error("cannot reach {target}: {reason}")]
    Unreachable {
        /// The target as given.
        target: String,
        /// Why it cannot be reached.
        reason: String,
    },
    /// A capability is missing for the requested mode (exit code 4).
    #[error(transparent)]
    Privilege(#[from] MissingPrivilege),
    /// A socket call failed (exit code 5).
    #[error(transparent)]
    Io(#[from] SysError),
}

impl ProbeError {
    /// Wrap an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        ProbeError::Io(SysError {
            context: context.into(),
            source,
        })
    }
}
