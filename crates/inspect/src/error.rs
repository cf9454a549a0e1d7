//! Errors of the inspection engine.

use std::io;

/// What can go wrong while inspecting sockets.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// `--pid` named a process that does not exist (or exited before the scan reached it).
    #[error("no process with pid {0} (it does not exist or has exited)")]
    NoSuchProcess(u32),
    /// A kernel interface refused for lack of a capability.
    #[error("{what}: permission denied (needs {capability})")]
    Privilege {
        what: String,
        capability: &'static str,
    },
    /// The kernel does not offer an interface this needs.
    #[error("{what}: not supported by this kernel ({detail})")]
    Unsupported { what: String, detail: String },
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// The kernel answered something that could not be parsed.
    #[error("{what}: malformed kernel reply ({detail})")]
    Malformed { what: String, detail: String },
}

impl InspectError {
    /// Wrap an I/O error with what was being done.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        InspectError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, InspectError>;
