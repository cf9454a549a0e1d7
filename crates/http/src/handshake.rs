//! Telling a server whose TLS handshakes all fail from one that fails now and then.
//!
//! A certificate this client does not trust fails every handshake at once, and the engine would
//! reconnect at once, a thousand times a second, to report a table of `tls` errors (with `-n`,
//! forever: no request is ever sent). A worker that has never completed a handshake instead
//! counts the handshakes that failed the same way in a row, and gives up after
//! [`Detector::new`]'s number of them; the run then stops with that reason, as it does on a
//! refused port. One completed handshake on the thread silences the detector for good: from
//! then on failures are the server's errors, counted as usual.

use std::fmt;

use rustls::AlertDescription;

use crate::cert::CertIssue;

/// Why a TLS handshake failed, worded for the reader (each with its remedy where there is one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// This client refused the server's certificate.
    Certificate(CertIssue),
    /// The server ended the handshake with this alert.
    Alert(AlertDescription),
    /// The server agreed to none of the protocols offered in ALPN (`h2` with `--http2`).
    NoProtocol {
        /// The protocol offered.
        offered: &'static str,
    },
    /// The server closed the connection during the handshake.
    Closed,
    /// Anything else, as rustls words it.
    Other(String),
}

impl HandshakeFailure {
    /// What rustls' error `e` means; `offered` is the ALPN protocol the client offered.
    pub fn of(e: &rustls::Error, offered: &'static str) -> HandshakeFailure {
        if let Some(issue) = CertIssue::carried_by(e) {
            return HandshakeFailure::Certificate(issue.clone());
        }
        match e {
            rustls::Error::AlertReceived(AlertDescription::NoApplicationProtocol)
            | rustls::Error::NoApplicationProtocol => HandshakeFailure::NoProtocol { offered },
            rustls::Error::AlertReceived(a) => HandshakeFailure::Alert(*a),
            other => HandshakeFailure::Other(other.to_string()),
        }
    }

    /// What an I/O error of a TLS stream (tokio-rustls') means: a rustls error inside, an end of
    /// file, or another socket error (`None`: not the handshake's own failure).
    pub fn of_io(e: &std::io::Error, offered: &'static str) -> Option<HandshakeFailure> {
        if let Some(r) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            return Some(HandshakeFailure::of(r, offered));
        }
        (e.kind() == std::io::ErrorKind::UnexpectedEof).then_some(HandshakeFailure::Closed)
    }
}

impl fmt::Display for HandshakeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeFailure::Certificate(issue) => fmt::Display::fmt(issue, f),
            HandshakeFailure::Alert(AlertDescription::HandshakeFailure) => f.write_str(
                "the server refused the handshake (alert handshake_failure: no TLS version or \
                 cipher in common, or it wants a client certificate)",
            ),
            HandshakeFailure::Alert(AlertDescription::CertificateRequired) => {
                f.write_str("the server wants a client certificate, which latscope does not send")
            }
            HandshakeFailure::Alert(a) => {
                write!(f, "the server ended the handshake with alert {a:?}")
            }
            HandshakeFailure::NoProtocol { offered: "h2" } => f.write_str(
                "the server did not agree to HTTP/2 (ALPN h2): it speaks HTTP/1.1 over TLS, so \
                 drop --http2",
            ),
            HandshakeFailure::NoProtocol { offered } => {
                write!(
                    f,
                    "the server agreed to no protocol offered (ALPN {offered})"
                )
            }
            HandshakeFailure::Closed => {
                f.write_str("the server closed the connection during the TLS handshake")
            }
            HandshakeFailure::Other(what) => f.write_str(what),
        }
    }
}

/// One worker's count of handshakes that failed the same way in a row.
#[derive(Debug)]
pub(crate) struct Detector {
    /// A handshake completed on this thread: the server speaks TLS with this client.
    completed: bool,
    last: Option<HandshakeFailure>,
    strikes: u32,
    give_up_after: u32,
    verdict: Option<HandshakeFailure>,
}

impl Detector {
    /// Give up after `connections` identical failures in a row (at least 3), so each
    /// connection of the thread has failed about once.
    pub(crate) fn new(connections: usize) -> Detector {
        Detector {
            completed: false,
            last: None,
            strikes: 0,
            give_up_after: (connections as u32).max(3),
            verdict: None,
        }
    }

    /// A handshake completed.
    #[inline]
    pub(crate) fn completed(&mut self) {
        self.completed = true;
    }

    /// A handshake failed with `f`.
    pub(crate) fn failed(&mut self, f: HandshakeFailure) {
        if self.completed || self.verdict.is_some() {
            return;
        }
        if self.last.as_ref() == Some(&f) {
            self.strikes += 1;
        } else {
            self.strikes = 1;
        }
        if self.strikes >= self.give_up_after {
            self.verdict = Some(f);
        } else {
            self.last = Some(f);
        }
    }

    /// Every handshake so far failed the same way: stop.
    #[inline]
    pub(crate) fn gave_up(&self) -> bool {
        self.verdict.is_some()
    }

    /// How the handshakes failed, if the worker gave up.
    pub(crate) fn into_verdict(self) -> Option<HandshakeFailure> {
        self.verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_up_on_the_same_failure_before_any_handshake() {
        let cert = || HandshakeFailure::Certificate(CertIssue::SelfSigned);
        let mut d = Detector::new(2);
        d.failed(cert());
        d.failed(HandshakeFailure::Closed); // another failure starts the count again
        d.failed(cert());
        d.failed(cert());
        assert!(!d.gave_up(), "two of the same in a row, three needed");
        d.failed(cert());
        assert!(d.gave_up());
        assert_eq!(d.into_verdict(), Some(cert()));

        let mut d = Detector::new(1);
        d.completed();
        for _ in 0..10 {
            d.failed(cert());
        }
        assert!(
            !d.gave_up(),
            "a server that has spoken TLS with us fails on its own"
        );
    }

    #[test]
    fn reads_rustls_errors() {
        let alert = rustls::Error::AlertReceived(AlertDescription::NoApplicationProtocol);
        let f = HandshakeFailure::of(&alert, "h2");
        assert!(f.to_string().contains("drop --http2"), "{f}");
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, alert);
        assert_eq!(HandshakeFailure::of_io(&io, "h2"), Some(f));
        let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        assert_eq!(
            HandshakeFailure::of_io(&eof, "h2"),
            Some(HandshakeFailure::Closed)
        );
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(HandshakeFailure::of_io(&refused, "h2"), None);
    }
}
