//! Telling a port that does not speak HTTP from an HTTP server that fails.
//!
//! Pointed at the wrong port (SSH, a database, a TLS-only listener, a service that hangs up),
//! every request fails at once and the engine would reconnect at once, thousands of times a
//! second, to report a table of `malformed` or `closed` errors. A worker that has never seen a
//! response instead counts the attempts whose answer shows the port is not HTTP — bytes that
//! cannot start a status line, or a close before any byte — and gives up after
//! [`Detector::new`]'s number of them. One HTTP response on the thread silences the detector for
//! good: from then on the same failures are the server's errors, counted as usual.

use std::fmt;

/// What the attempts got that an HTTP server never sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotHttp {
    /// The first bytes of the answer cannot begin an `HTTP/1.x` status line (up to
    /// [`FIRST_BYTES`] of them kept, to show).
    Answered(Vec<u8>),
    /// The server closed (or reset) the connection before sending a byte, on every attempt.
    ClosedWithoutAnswer,
}

/// How many of the first bytes of a non-HTTP answer are kept for the message.
pub const FIRST_BYTES: usize = 48;

/// The start every HTTP/1.x response has.
const STATUS_LINE_START: &[u8] = b"HTTP/1.";

/// A TLS record's first byte when it carries an alert (RFC 8446 §5.1, ContentType alert(21)):
/// what a TLS server answers to a plain-text request.
const TLS_ALERT: u8 = 0x15;
/// A TLS handshake record's first byte (ContentType handshake(22)).
const TLS_HANDSHAKE: u8 = 0x16;

impl NotHttp {
    /// The evidence in one failed attempt: `received` are the response bytes buffered and not
    /// yet parsed, `started` whether the parser consumed any (then the answer began as HTTP),
    /// `closed` whether the connection ended (closed, reset, malformed) rather than timing out.
    pub fn of_attempt(received: &[u8], started: bool, closed: bool) -> Option<NotHttp> {
        if started {
            return None;
        }
        if received.is_empty() {
            return closed.then_some(NotHttp::ClosedWithoutAnswer);
        }
        let n = received.len().min(STATUS_LINE_START.len());
        (received[..n] != STATUS_LINE_START[..n])
            .then(|| NotHttp::Answered(received[..received.len().min(FIRST_BYTES)].to_vec()))
    }
}

impl fmt::Display for NotHttp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotHttp::Answered(b) if b.first() == Some(&TLS_ALERT) => write!(
                f,
                "it answered with a TLS alert (the port speaks TLS: use https://)"
            ),
            NotHttp::Answered(b) if b.first() == Some(&TLS_HANDSHAKE) => write!(
                f,
                "it answered with a TLS handshake record (the port speaks TLS: use https://)"
            ),
            NotHttp::Answered(b) => write!(
                f,
                "it answered \"{}\" instead of an HTTP/1.x status line",
                printable(b)
            ),
            NotHttp::ClosedWithoutAnswer => write!(
                f,
                "it closed every connection without answering (not an HTTP server, or one \
                 refusing connections)"
            ),
        }
    }
}

/// The first line of `bytes` as text to quote: printable ASCII as is, the rest escaped.
fn printable(bytes: &[u8]) -> String {
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or(bytes);
    line.strip_suffix(b"\r")
        .unwrap_or(line)
        .iter()
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect()
}

/// One worker's count of attempts that showed the port is not HTTP.
#[derive(Debug)]
pub(crate) struct Detector {
    /// A response was complete on this thread: the port speaks HTTP.
    answered: bool,
    strikes: u32,
    give_up_after: u32,
    /// The last attempt's evidence, once `give_up_after` attempts showed it.
    verdict: Option<NotHttp>,
}

impl Detector {
    /// Give up after `connections` attempts (at least 3), so each connection of the thread has
    /// failed about once.
    pub(crate) fn new(connections: usize) -> Detector {
        Detector {
            answered: false,
            strikes: 0,
            give_up_after: (connections as u32).max(3),
            verdict: None,
        }
    }

    /// A response was complete.
    #[inline]
    pub(crate) fn answered(&mut self) {
        self.answered = true;
    }

    /// An attempt failed with what [`NotHttp::of_attempt`] reads from it.
    pub(crate) fn failed(&mut self, received: &[u8], started: bool, closed: bool) {
        if self.answered || self.verdict.is_some() {
            return;
        }
        match NotHttp::of_attempt(received, started, closed) {
            Some(e) => {
                self.strikes += 1;
                if self.strikes >= self.give_up_after {
                    self.verdict = Some(e);
                }
            }
            // One attempt that looked like HTTP (or just timed out): not conclusive.
            None => self.strikes = 0,
        }
    }

    /// The port does not speak HTTP: stop.
    #[inline]
    pub(crate) fn gave_up(&self) -> bool {
        self.verdict.is_some()
    }

    /// What the attempts showed, if the worker gave up.
    pub(crate) fn into_verdict(self) -> Option<NotHttp> {
        self.verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_attempt() {
        let ssh = b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n";
        assert_eq!(
            NotHttp::of_attempt(ssh, false, true),
            Some(NotHttp::Answered(ssh.to_vec()))
        );
        let long = [b'x'; 100];
        assert_eq!(
            NotHttp::of_attempt(&long, false, true),
            Some(NotHttp::Answered(long[..FIRST_BYTES].to_vec()))
        );
        // A status line cut short is HTTP so far; so is a head the parser already consumed.
        assert_eq!(NotHttp::of_attempt(b"HTTP/1", false, true), None);
        assert_eq!(
            NotHttp::of_attempt(b"HTTP/1.1 200 OK\r\n", false, true),
            None
        );
        assert_eq!(NotHttp::of_attempt(b"garbage", true, true), None);
        assert_eq!(
            NotHttp::of_attempt(b"", false, true),
            Some(NotHttp::ClosedWithoutAnswer)
        );
        // Silence is a timeout, not evidence.
        assert_eq!(NotHttp::of_attempt(b"", false, false), None);
        assert_eq!(
            NotHttp::of_attempt(b"HTTX", false, false),
            Some(NotHttp::Answered(b"HTTX".to_vec()))
        );
    }

    #[test]
    fn names_what_it_saw() {
        let text = |b: &[u8]| NotHttp::of_attempt(b, false, true).unwrap().to_string();
        assert_eq!(
            text(b"SPAM 200 hello\r\n\r\n"),
            "it answered \"SPAM 200 hello\" instead of an HTTP/1.x status line"
        );
        assert!(text(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46]).contains("TLS alert"));
        assert!(text(b"\x00\x01\xff").contains("\\x00\\x01\\xff"));
        assert!(text(b"").contains("closed every connection"));
    }

    #[test]
    fn gives_up_only_before_any_answer() {
        let mut d = Detector::new(2);
        d.failed(b"", false, true);
        d.failed(b"x", false, true);
        assert!(!d.gave_up(), "fewer attempts than the minimum");
        d.failed(b"x", false, true);
        assert!(d.gave_up());
        assert_eq!(d.into_verdict(), Some(NotHttp::Answered(b"x".to_vec())));

        let mut d = Detector::new(1);
        d.failed(b"x", false, true);
        d.failed(b"x", false, true);
        d.failed(b"", false, false); // a timeout in between starts the count again
        d.failed(b"x", false, true);
        assert!(!d.gave_up());
        d.answered();
        for _ in 0..10 {
            d.failed(b"x", false, true);
        }
        assert!(
            !d.gave_up(),
            "an HTTP server that fails is the server's error"
        );
    }
}
