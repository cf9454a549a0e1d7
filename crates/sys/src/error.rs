//! Classification of I/O errors shared by the engines' loops, and the error parts every
//! engine's error enum has in common ([`MissingPrivilege`], [`SysError`]): one message and one
//! exit class for each, whichever engine meets it.

use std::io;

/// A capability (or permission) the process lacks for what it was asked to do.
#[derive(Debug, thiserror::Error)]
#[error("{what} needs {capability}: {remedy}")]
pub struct MissingPrivilege {
    /// What needs it.
    pub what: String,
    /// The capability (or permission) missing.
    pub capability: String,
    /// What to do, and what works without it.
    pub remedy: String,
}

/// A system call that failed, with what was being done.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
pub struct SysError {
    /// What was being done.
    pub context: String,
    /// The OS error.
    #[source]
    pub source: io::Error,
}

/// Whether an error only means "nothing yet, try again": a read or write timed out on a socket
/// with a timeout (WouldBlock / TimedOut) or a signal interrupted the call. Loops that poll
/// with a timeout check their deadline and stop flag, then retry.
pub fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Whether an error means the process or system ran out of descriptors (EMFILE / ENFILE), or
/// of the memory the kernel needs for a socket (ENOBUFS / ENOMEM): an accept loop must back
/// off rather than retry at once.
pub fn is_resource_exhaustion(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS) | Some(libc::ENOMEM)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert!(is_transient(&io::Error::from(io::ErrorKind::WouldBlock)));
        assert!(is_transient(&io::Error::from_raw_os_error(libc::EINTR)));
        assert!(!is_transient(&io::Error::from(
            io::ErrorKind::ConnectionReset
        )));
        assert!(is_resource_exhaustion(&io::Error::from_raw_os_error(
            libc::EMFILE
        )));
        assert!(!is_resource_exhaustion(&io::Error::from_raw_os_error(
            libc::EAGAIN
        )));
    }
}
