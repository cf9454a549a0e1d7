//! What a final response's head says about the connection and about where the resource is:
//! the HTTP version, whether the server will close the connection (`Connection: close`,
//! HTTP/1.0 without keep-alive), how long it keeps an idle connection (`Keep-Alive:
//! timeout=N`, RFC 2068 §19.7.1, sent by Apache and others), and a redirect's `Location`.
//!
//! The load engine's parser ([`crate::parse`]) reads only the framing, in place and without
//! allocating; these facts are read once per measured request (diagnose's round-trip step), by
//! httparse from the response's first bytes.

/// The facts of one final response's head.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeadFacts {
    /// Status code of the final response (interim 1xx heads skipped).
    pub status: u16,
    /// The response is HTTP/1.0.
    pub http10: bool,
    /// The server says it closes the connection after this response: `Connection: close`, or
    /// HTTP/1.0 without `Connection: keep-alive`.
    pub says_close: bool,
    /// `Keep-Alive: timeout=N`: how long the server says it keeps an idle connection, s.
    pub keep_alive_timeout_s: Option<u32>,
    /// A redirect's target (`Location`, as sent), for a 3xx status.
    pub location: Option<String>,
    /// Bytes of the head (status line and headers, interim heads included).
    pub bytes: u64,
}

/// Most headers read in one head.
const MAX_HEADERS: usize = 128;

/// The facts of the final response whose head starts `buf` (interim 1xx heads before it are
/// skipped); `None` when `buf` holds no complete final head or it does not parse.
pub fn facts(buf: &[u8]) -> Option<HeadFacts> {
    let mut at = 0;
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut r = httparse::Response::new(&mut headers);
        let len = match r.parse(&buf[at..]).ok()? {
            httparse::Status::Complete(n) => n,
            httparse::Status::Partial => return None,
        };
        let status = r.code?;
        at += len;
        if (100..200).contains(&status) {
            continue;
        }
        let http10 = r.version == Some(0);
        let mut f = HeadFacts {
            status,
            http10,
            says_close: http10,
            bytes: at as u64,
            ..HeadFacts::default()
        };
        for h in r.headers.iter() {
            let value = String::from_utf8_lossy(h.value);
            if h.name.eq_ignore_ascii_case("connection") {
                for token in value.split(',').map(str::trim) {
                    if token.eq_ignore_ascii_case("close") {
                        f.says_close = true;
                    } else if token.eq_ignore_ascii_case("keep-alive") && http10 {
                        f.says_close = false;
                    }
                }
            } else if h.name.eq_ignore_ascii_case("keep-alive") {
                f.keep_alive_timeout_s = keep_alive_timeout(&value).or(f.keep_alive_timeout_s);
            } else if h.name.eq_ignore_ascii_case("location") && (300..400).contains(&status) {
                f.location = Some(value.trim().to_string());
            }
        }
        return Some(f);
    }
}

/// `timeout=5, max=100` → 5.
fn keep_alive_timeout(value: &str) -> Option<u32> {
    value.split(',').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("timeout")
            .then(|| v.trim().trim_matches('"').parse().ok())
            .flatten()
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_keep_alive_response_with_apaches_timeout() {
        let f = facts(
            b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5, max=100\r\nConnection: Keep-Alive\r\nContent-Length: 3\r\n\r\nabc",
        )
        .unwrap();
        assert_eq!(f.status, 200);
        assert!(!f.says_close && !f.http10);
        assert_eq!(f.keep_alive_timeout_s, Some(5));
        assert_eq!(f.bytes, 94, "the head, not its body");
        assert_eq!(f.location, None);
    }

    #[test]
    fn http10_closes_unless_it_asks_to_keep_alive() {
        let f = facts(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").unwrap();
        assert!(f.http10 && f.says_close);
        let f = facts(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n").unwrap();
        assert!(f.http10 && !f.says_close);
        let f = facts(b"HTTP/1.1 200 OK\r\nconnection: Upgrade, close\r\n\r\n").unwrap();
        assert!(!f.http10 && f.says_close);
    }

    #[test]
    fn a_redirect_after_an_interim_response() {
        let f = facts(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 301 Moved Permanently\r\nLocation: https://example.org/x/\r\nContent-Length: 0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(f.status, 301);
        assert_eq!(f.location.as_deref(), Some("https://example.org/x/"));
        // A Location on a 201 is not a redirect.
        let f = facts(b"HTTP/1.1 201 Created\r\nLocation: /new\r\n\r\n").unwrap();
        assert_eq!(f.location, None);
    }

    #[test]
    fn an_incomplete_or_broken_head_has_no_facts() {
        assert_eq!(facts(b"HTTP/1.1 200 OK\r\nContent-"), None);
        assert_eq!(facts(b"garbage\r\n\r\n"), None);
        assert_eq!(facts(b""), None);
    }
}
