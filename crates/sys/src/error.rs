//! Classification of I/O errors shared by the engines' loops.

use std::io;

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
