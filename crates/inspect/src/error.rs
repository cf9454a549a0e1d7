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
        /// What was attempted.
        what: String,
        /// The capability that would allow it.
        capability: &'static str,
    },
    /// The kernel does not offer an interface this needs.
    #[error("{what}: not supported by this kernel ({detail})")]
    Unsupported {
        /// What was attempted.
        what: String,
        /// What the kernel said.
        detail: String,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was attempted.
        what: String,
        /// The system call's error.
        #[source]
        source: io::Error,
    },
    /// The kernel answered something that could not be parsed.
    #[error("{what}: malformed kernel reply ({detail})")]
    Malformed {
        /// What was being read.
        what: String,
        /// What was wrong with it.
        detail: String,
    },
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
