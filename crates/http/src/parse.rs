//! An incremental, allocation-free HTTP/1.1 response parser (RFC 9112).
//!
//! The engine reads into a per-connection buffer and calls [`ResponseParser::feed`] with the
//! unread bytes. The parser consumes what it can and says whether a whole response has been
//! seen. It never copies or allocates: the status line and headers are examined in place, and
//! body bytes are only counted (a load generator needs their length, not their content).
//!
//! What it understands: status line (HTTP/1.0 and 1.1), `Content-Length`, `Transfer-Encoding:
//! chunked` (chunk extensions and trailers skipped), bodies delimited by the connection closing,
//! responses without a body (HEAD, 1xx, 204, 304), interim 1xx responses before the final one,
//! and `Connection: close` / HTTP/1.0 keep-alive rules. Anything else is a [`ParseError`]: a
//! counted error for the engine, never a panic.

use thiserror::Error;

/// Longest status line + header block accepted (the engine's read buffer is at least this big).
pub const MAX_HEAD_BYTES: usize = 32 * 1024;
/// Longest chunk-size or trailer line accepted.
const MAX_LINE_BYTES: usize = 4096;

/// Why a response could not be parsed.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    #[error("malformed status line")]
    /// The status line is not `HTTP/1.x NNN[ reason]`.
    StatusLine,
    #[error("malformed header line")]
    /// A header line has no colon or an invalid name.
    Header,
    #[error("invalid or conflicting Content-Length")]
    /// `Content-Length` is not a number, or two of them disagree.
    ContentLength,
    #[error("unsupported Transfer-Encoding")]
    /// A transfer coding other than chunked frames the body.
    TransferEncoding,
    #[error("malformed chunked body")]
    /// A chunk size, chunk end or trailer line is malformed.
    Chunk,
    #[error("response head larger than {MAX_HEAD_BYTES} bytes")]
    /// The status line and headers exceed [`MAX_HEAD_BYTES`].
    HeadTooLarge,
    #[error("unexpected 101 Switching Protocols")]
    /// The server switched protocols, which was never asked for.
    Upgrade,
    #[error("connection closed before the response was complete")]
    /// The connection closed before the response was complete.
    Truncated,
}

/// What one call to [`ResponseParser::feed`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// More bytes are needed.
    NeedMore,
    /// A final response is complete.
    Complete(Response),
}

/// A complete final response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// Status code, 100..=599.
    pub status: u16,
    /// The server will close the connection after this response.
    pub close: bool,
    /// Body bytes (without chunk framing).
    pub body_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Fixed { remaining: u64 },
    ChunkSize,
    ChunkData { remaining: u64 },
    ChunkDataEnd,
    Trailers,
    UntilClose,
}

/// Parser state for one response at a time; [`ResponseParser::reset`] before the next request.
#[derive(Debug, Clone)]
pub struct ResponseParser {
    state: State,
    head_request: bool,
    status: u16,
    close: bool,
    body_bytes: u64,
    /// Bytes of the response seen so far (head included), to tell "nothing received" apart.
    seen: u64,
}

impl ResponseParser {
    /// A parser for the response to a request; `head_request` when the method was HEAD
    /// (responses to HEAD have no body whatever their headers say).
    pub fn new(head_request: bool) -> Self {
        ResponseParser {
            state: State::Head,
            head_request,
            status: 0,
            close: false,
            body_bytes: 0,
            seen: 0,
        }
    }

    /// Prepare for the next response on the same connection.
    pub fn reset(&mut self) {
        *self = ResponseParser::new(self.head_request);
    }

    /// Whether any byte of the current response has been consumed.
    pub fn started(&self) -> bool {
        self.seen > 0
    }

    /// Consume a prefix of `buf`. Returns how many bytes were consumed and whether a response is
    /// complete. Bytes that were not consumed must be presented again (with more appended) on
    /// the next call; the parser only leaves bytes unconsumed while it waits for the end of a
    /// line, so the caller's buffer needs room for [`MAX_HEAD_BYTES`].
    pub fn feed(&mut self, buf: &[u8]) -> Result<(usize, Step), ParseError> {
        let mut pos = 0;
        loop {
            let rest = &buf[pos..];
            match self.state {
                State::Head => {
                    let Some((end, head)) = scan_head(rest)? else {
                        if rest.len() >= MAX_HEAD_BYTES {
                            return Err(ParseError::HeadTooLarge);
                        }
                        return Ok((pos, Step::NeedMore));
                    };
                    self.apply_head(head);
                    pos += end;
                    self.seen += end as u64;
                    // Interim responses (100 Continue, 103 Early Hints) precede the final one.
                    if (100..200).contains(&self.status) {
                        if self.status == 101 {
                            return Err(ParseError::Upgrade);
                        }
                        self.status = 0;
                        self.close = false;
                        continue;
                    }
                    if let Some(r) = self.finish_if_done() {
                        return Ok((pos, Step::Complete(r)));
                    }
                }
                State::Fixed { remaining } => {
                    let take = remaining.min(rest.len() as u64);
                    pos += take as usize;
                    self.body(take);
                    let remaining = remaining - take;
                    if remaining == 0 {
                        return Ok((pos, Step::Complete(self.response())));
                    }
                    self.state = State::Fixed { remaining };
                    return Ok((pos, Step::NeedMore));
                }
                State::ChunkSize => {
                    let Some(nl) = line_end(rest, MAX_LINE_BYTES, ParseError::Chunk)? else {
                        return Ok((pos, Step::NeedMore));
                    };
                    let size = parse_chunk_size(&rest[..nl])?;
                    pos += nl + 1;
                    self.seen += nl as u64 + 1;
                    self.state = if size == 0 {
                        State::Trailers
                    } else {
                        State::ChunkData { remaining: size }
                    };
                }
                State::ChunkData { remaining } => {
                    let take = remaining.min(rest.len() as u64);
                    pos += take as usize;
                    self.body(take);
                    let remaining = remaining - take;
                    if remaining > 0 {
                        self.state = State::ChunkData { remaining };
                        return Ok((pos, Step::NeedMore));
                    }
                    self.state = State::ChunkDataEnd;
                }
                State::ChunkDataEnd => {
                    let Some(nl) = line_end(rest, 2, ParseError::Chunk)? else {
                        return Ok((pos, Step::NeedMore));
                    };
                    if trim_cr(&rest[..nl]).is_empty() {
                        pos += nl + 1;
                        self.seen += nl as u64 + 1;
                        self.state = State::ChunkSize;
                    } else {
                        return Err(ParseError::Chunk);
                    }
                }
                State::Trailers => {
                    let Some(nl) = line_end(rest, MAX_LINE_BYTES, ParseError::Chunk)? else {
                        return Ok((pos, Step::NeedMore));
                    };
                    pos += nl + 1;
                    self.seen += nl as u64 + 1;
                    if trim_cr(&rest[..nl]).is_empty() {
                        return Ok((pos, Step::Complete(self.response())));
                    }
                }
                State::UntilClose => {
                    pos += rest.len();
                    self.body(rest.len() as u64);
                    return Ok((pos, Step::NeedMore));
                }
            }
        }
    }

    /// The connection reached end of file: completes a body delimited by the close, otherwise
    /// the response was cut short.
    pub fn eof(&mut self) -> Result<Response, ParseError> {
        match self.state {
            State::UntilClose => Ok(self.response()),
            _ => Err(ParseError::Truncated),
        }
    }

    fn body(&mut self, n: u64) {
        self.body_bytes += n;
        self.seen += n;
    }

    fn response(&self) -> Response {
        Response {
            status: self.status,
            close: self.close,
            body_bytes: self.body_bytes,
        }
    }

    /// After the head: a response without a body is complete at once.
    fn finish_if_done(&mut self) -> Option<Response> {
        match self.state {
            State::Fixed { remaining: 0 } | State::Head => Some(self.response()),
            _ => None,
        }
    }

    /// Take over what the head says and set the body state (RFC 9112 §6.3).
    fn apply_head(&mut self, head: Head) {
        self.status = head.status;
        self.close = head.close;
        let status = head.status;
        let no_body =
            self.head_request || (100..200).contains(&status) || status == 204 || status == 304;
        self.state = if no_body {
            State::Head
        } else if head.chunked {
            State::ChunkSize
        } else if let Some(n) = head.content_length {
            State::Fixed { remaining: n }
        } else {
            self.close = true;
            State::UntilClose
        };
    }
}

/// What a response head says about framing and the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    status: u16,
    http10: bool,
    /// The server will close the connection (HTTP/1.0 without keep-alive, `Connection: close`).
    close: bool,
    content_length: Option<u64>,
    chunked: bool,
}

impl Head {
    /// From the status line `HTTP/1.x SSS[ reason]`.
    fn from_status_line(line: &[u8]) -> Result<Head, ParseError> {
        let (http10, status) = parse_status_line(line)?;
        Ok(Head {
            status,
            http10,
            close: http10,
            content_length: None,
            chunked: false,
        })
    }

    /// One header line (without its line end). The name is checked and found in one scan:
    /// token characters up to the colon. Only three names matter for framing; their lengths
    /// (10, 14, 17) rule out most others before any comparison, and the value of any other
    /// header is never looked at.
    fn header(&mut self, line: &[u8]) -> Result<(), ParseError> {
        let name_len = line
            .iter()
            .position(|&b| !is_tchar(b))
            .unwrap_or(line.len());
        if name_len == 0 || line.get(name_len) != Some(&b':') {
            return Err(ParseError::Header);
        }
        if !matches!(name_len, 10 | 14 | 17) {
            return Ok(());
        }
        let (name, value) = (&line[..name_len], trim_ows(&line[name_len + 1..]));
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_decimal(value).ok_or(ParseError::ContentLength)?;
            if self.content_length.is_some_and(|c| c != n) {
                return Err(ParseError::ContentLength);
            }
            self.content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // Only `chunked` as the final coding frames the body; other codings (gzip) before
            // it are content, not framing.
            let last = value
                .rsplit(|&b| b == b',')
                .next()
                .map(trim_ows)
                .unwrap_or_default();
            if last.eq_ignore_ascii_case(b"chunked") {
                self.chunked = true;
            } else if !value.is_empty() {
                return Err(ParseError::TransferEncoding);
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(trim_ows) {
                if token.eq_ignore_ascii_case(b"close") {
                    self.close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && self.http10 {
                    self.close = false;
                }
            }
        }
        Ok(())
    }
}

/// The response head at the start of `buf`, in one pass over its lines (hot path: once per
/// response; line ends found with memchr, SIMD): `Ok(None)` until the empty line that ends it
/// has arrived, else its length and content. A malformed line is reported only once the whole
/// head is in, so the outcome does not depend on how the bytes arrive, and a head cut short by
/// the connection closing is `Truncated`, not malformed.
fn scan_head(buf: &[u8]) -> Result<Option<(usize, Head)>, ParseError> {
    let mut lines = memchr::memchr_iter(b'\n', buf);
    let Some(first) = lines.next() else {
        return Ok(None);
    };
    let mut head = match Head::from_status_line(trim_cr(&buf[..first])) {
        Ok(h) => h,
        Err(e) => return error_once_complete(buf, e),
    };
    let mut start = first + 1;
    for nl in lines {
        let line = trim_cr(&buf[start..nl]);
        start = nl + 1;
        if line.is_empty() {
            if start > MAX_HEAD_BYTES {
                return Err(ParseError::HeadTooLarge);
            }
            return Ok(Some((start, head)));
        }
        if let Err(e) = head.header(line) {
            return error_once_complete(buf, e);
        }
    }
    Ok(None)
}

/// `e`, found in the head at the start of `buf`, if that head is complete (and not too large).
fn error_once_complete(buf: &[u8], e: ParseError) -> Result<Option<(usize, Head)>, ParseError> {
    match head_end(buf) {
        None => Ok(None),
        Some(end) if end > MAX_HEAD_BYTES => Err(ParseError::HeadTooLarge),
        Some(_) => Err(e),
    }
}

/// Index just past the empty line that ends a head, if present: the first `\n` followed by
/// `\n` or `\r\n`.
fn head_end(buf: &[u8]) -> Option<usize> {
    for nl in memchr::memchr_iter(b'\n', buf) {
        match &buf[nl + 1..] {
            [b'\n', ..] => return Some(nl + 2),
            [b'\r', b'\n', ..] => return Some(nl + 3),
            _ => {}
        }
    }
    None
}

/// Position of the next `\n`, or `None` when the line is not complete yet; lines longer than
/// `max` are an error.
fn line_end(buf: &[u8], max: usize, err: ParseError) -> Result<Option<usize>, ParseError> {
    match buf.iter().take(max + 1).position(|&b| b == b'\n') {
        Some(i) => Ok(Some(i)),
        None if buf.len() > max => Err(err),
        None => Ok(None),
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// `HTTP/1.x SSS[ reason]` → (is HTTP/1.0, status).
fn parse_status_line(line: &[u8]) -> Result<(bool, u16), ParseError> {
    let rest = line
        .strip_prefix(b"HTTP/1.")
        .ok_or(ParseError::StatusLine)?;
    let (minor, rest) = rest.split_first().ok_or(ParseError::StatusLine)?;
    if !minor.is_ascii_digit() {
        return Err(ParseError::StatusLine);
    }
    let rest = rest.strip_prefix(b" ").ok_or(ParseError::StatusLine)?;
    if rest.len() < 3
        || (rest.len() > 3 && rest[3] != b' ')
        || !rest[..3].iter().all(u8::is_ascii_digit)
    {
        return Err(ParseError::StatusLine);
    }
    let status = rest[..3]
        .iter()
        .fold(0u16, |a, &d| a * 10 + u16::from(d - b'0'));
    if !(100..=599).contains(&status) {
        return Err(ParseError::StatusLine);
    }
    Ok((*minor == b'0', status))
}

fn parse_decimal(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 {
        return None;
    }
    v.iter().try_fold(0u64, |a, &d| {
        d.is_ascii_digit().then(|| a * 10 + u64::from(d - b'0'))
    })
}

/// `1a3f[;ext=val]` (hex size, optional extensions) → size.
fn parse_chunk_size(line: &[u8]) -> Result<u64, ParseError> {
    let line = trim_cr(line);
    let end = line.iter().position(|&b| b == b';').unwrap_or(line.len());
    let hex = trim_ows(&line[..end]);
    if hex.is_empty() || hex.len() > 15 {
        return Err(ParseError::Chunk);
    }
    hex.iter().try_fold(0u64, |a, &d| {
        let v = (d as char).to_digit(16).ok_or(ParseError::Chunk)?;
        Ok(a * 16 + u64::from(v))
    })
}

/// RFC 9110 token characters, as a table (checked for every byte of every header name).
fn is_tchar(b: u8) -> bool {
    TCHAR[b as usize]
}

const TCHAR: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric();
        i += 1;
    }
    let extra = b"!#$%&'*+-.^_`|~";
    let mut k = 0;
    while k < extra.len() {
        t[extra[k] as usize] = true;
        k += 1;
    }
    t
};

/// Feed `data` to a parser the way the engine does, in pieces whose sizes come from `splits`
/// (cycled; 0 counts as 1), presenting unconsumed bytes again with the next piece, and check the
/// parser's contract on the way: it never consumes more than it was given, it only keeps bytes
/// back while waiting for the end of a line (so never a full [`MAX_HEAD_BYTES`] buffer), and a
/// complete response is reported at most once per byte. Returns the responses parsed, then the
/// error if one ended the stream. For the fuzz target (`fuzz/fuzz_targets/http_response.rs`) and
/// the randomized tests; panics if the contract is broken.
pub fn drive(
    data: &[u8],
    splits: &[u8],
    head_request: bool,
) -> (Vec<Response>, Option<ParseError>) {
    let mut p = ResponseParser::new(head_request);
    let mut buf: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    let mut rest = data;
    let mut k = 0;
    while !rest.is_empty() {
        let n = splits
            .get(k % splits.len().max(1))
            .map_or(rest.len(), |&s| usize::from(s.max(1)))
            .min(rest.len());
        k += 1;
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        loop {
            match p.feed(&buf) {
                Ok((used, Step::Complete(r))) => {
                    assert!(used <= buf.len(), "consumed {used} of {}", buf.len());
                    buf.drain(..used);
                    out.push(r);
                    assert!(out.len() <= data.len() + 1, "more responses than bytes");
                    p.reset();
                    if buf.is_empty() {
                        break;
                    }
                }
                Ok((used, Step::NeedMore)) => {
                    assert!(used <= buf.len(), "consumed {used} of {}", buf.len());
                    buf.drain(..used);
                    assert!(buf.len() < MAX_HEAD_BYTES, "kept a full buffer back");
                    break;
                }
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain line scan `head_end` replaced: the first empty line (after trimming `\r`) that
    /// is not the first line.
    fn head_end_reference(buf: &[u8]) -> Option<usize> {
        let mut start = 0;
        while let Some(i) = buf[start..].iter().position(|&b| b == b'\n') {
            let nl = start + i;
            if trim_cr(&buf[start..nl]).is_empty() && start > 0 {
                return Some(nl + 1);
            }
            start = nl + 1;
        }
        None
    }

    /// A seeded xorshift64 generator (Marsaglia 2003): the randomised tests below draw the
    /// same inputs on every run.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        /// Up to `max_parts - 1` parts, each one of `pieces` or, one time in `noise_one_in`,
        /// up to `max_noise - 1` random bytes.
        fn input(
            &mut self,
            pieces: &[&[u8]],
            max_parts: u64,
            noise_one_in: u64,
            max_noise: u64,
        ) -> Vec<u8> {
            let mut data = Vec::new();
            for _ in 0..self.next() % max_parts {
                if self.next() % noise_one_in == 0 {
                    for _ in 0..self.next() % max_noise {
                        data.push((self.next() & 0xff) as u8);
                    }
                } else {
                    data.extend_from_slice(pieces[(self.next() % pieces.len() as u64) as usize]);
                }
            }
            data
        }
    }

    /// Inputs built from pieces of real responses and random bytes, fed in random splits: the
    /// parser's contract holds (see [`drive`]), and the same input gives the same responses
    /// and error however it is split.
    #[test]
    fn random_responses_in_random_pieces_keep_the_contract() {
        const PIECES: &[&[u8]] = &[
            b"HTTP/1.1 200 OK\r\n",
            b"HTTP/1.0 204 No Content\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\n",
            b"Content-Length: 5\r\n",
            b"Content-Length: 18446744073709551615\r\n",
            b"Transfer-Encoding: chunked\r\n",
            b"Transfer-Encoding: gzip, chunked\r\n",
            b"Connection: close\r\n",
            b"\r\n",
            b"\n",
            b"5\r\nhello\r\n",
            b"0\r\n\r\n",
            b"ffffffffffffffff\r\n",
            b"hello",
            b": \t",
        ];
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for _ in 0..20_000 {
            let data = rng.input(PIECES, 12, 4, 8);
            let splits: Vec<u8> = (0..1 + rng.next() % 5)
                .map(|_| (rng.next() % 9) as u8)
                .collect();
            let head = rng.next() % 5 == 0;
            let whole = drive(&data, &[], head);
            let split = drive(&data, &splits, head);
            assert_eq!(
                whole,
                split,
                "{:?} split {splits:?}",
                String::from_utf8_lossy(&data)
            );
        }
    }

    /// The two-pass head parser that [`scan_head`] replaced (find the end, then parse every
    /// line): the reference it must agree with.
    fn scan_head_reference(buf: &[u8]) -> Result<Option<(usize, Head)>, ParseError> {
        let Some(end) = head_end_reference(buf) else {
            return Ok(None);
        };
        if end > MAX_HEAD_BYTES {
            return Err(ParseError::HeadTooLarge);
        }
        let head = &buf[..end];
        let mut lines = head.split(|&b| b == b'\n').map(trim_cr);
        let mut h = Head::from_status_line(lines.next().ok_or(ParseError::StatusLine)?)?;
        for line in lines {
            if line.is_empty() {
                continue;
            }
            let colon = line
                .iter()
                .position(|&b| b == b':')
                .ok_or(ParseError::Header)?;
            if colon == 0 || !line[..colon].iter().all(|&b| is_tchar(b)) {
                return Err(ParseError::Header);
            }
            h.header(line)?;
        }
        Ok(Some((end, h)))
    }

    /// Random heads built from header-like pieces: the one-pass scan gives the same length,
    /// content or error as the two-pass reference, on every prefix too.
    #[test]
    fn scan_head_agrees_with_the_two_pass_reference() {
        const PIECES: &[&[u8]] = &[
            b"HTTP/1.1 200 OK\r\n",
            b"HTTP/1.0 304 x\n",
            b"HTTP/1.1 2000\r\n",
            b"Content-Length: 5\r\n",
            b"content-length:7\n",
            b"Transfer-Encoding: gzip, chunked\r\n",
            b"Transfer-Encoding: gzip\r\n",
            b"Connection: keep-alive, close\r\n",
            b"Connection: Keep-Alive\r\n",
            b"X-Long-Header-Name: v\r\n",
            b"Bad Name: v\r\n",
            b"NoColon\r\n",
            b": empty\r\n",
            b"\r\n",
            b"\n",
            b"\r",
            b":",
        ];
        let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
        for _ in 0..20_000 {
            let data = rng.input(PIECES, 10, 5, 6);
            for cut in 0..=data.len() {
                let d = &data[..cut];
                assert_eq!(
                    scan_head(d),
                    scan_head_reference(d),
                    "{:?}",
                    String::from_utf8_lossy(d)
                );
            }
        }
        let big = [
            b"HTTP/1.1 200 OK\r\nX: ".as_slice(),
            &[b'a'; MAX_HEAD_BYTES],
            b"\r\n\r\n",
        ]
        .concat();
        assert_eq!(scan_head(&big), Err(ParseError::HeadTooLarge));
        assert_eq!(scan_head_reference(&big), Err(ParseError::HeadTooLarge));
    }

    #[test]
    fn head_end_agrees_with_the_line_scan_on_every_short_input() {
        let alphabet = [b'a', b'\r', b'\n', b':'];
        for len in 0..=8u32 {
            for code in 0..4usize.pow(len) {
                let mut c = code;
                let buf: Vec<u8> = (0..len)
                    .map(|_| {
                        let b = alphabet[c % 4];
                        c /= 4;
                        b
                    })
                    .collect();
                assert_eq!(head_end(&buf), head_end_reference(&buf), "{buf:?}");
            }
        }
    }

    /// Feed `data` in pieces of `step` bytes the way the engine does (unconsumed bytes are
    /// presented again), returning every response and the error if one occurred.
    fn run(data: &[u8], step: usize, head: bool) -> (Vec<Response>, Option<ParseError>, bool) {
        let mut p = ResponseParser::new(head);
        let mut buf: Vec<u8> = Vec::new();
        let mut out = vec![];
        for piece in data.chunks(step.max(1)) {
            buf.extend_from_slice(piece);
            loop {
                match p.feed(&buf) {
                    Ok((n, Step::Complete(r))) => {
                        buf.drain(..n);
                        out.push(r);
                        p.reset();
                        if buf.is_empty() {
                            break;
                        }
                    }
                    Ok((n, Step::NeedMore)) => {
                        buf.drain(..n);
                        break;
                    }
                    Err(e) => return (out, Some(e), p.started()),
                }
            }
        }
        (out, None, p.started())
    }

    fn all_steps(data: &[u8], head: bool) -> Vec<Response> {
        let (want, err, _) = run(data, data.len(), head);
        assert_eq!(err, None);
        for step in 1..=data.len().min(40) {
            let (got, err, _) = run(data, step, head);
            assert_eq!(err, None, "step {step}");
            assert_eq!(got, want, "step {step}");
        }
        want
    }

    #[test]
    fn content_length_keep_alive() {
        let r = all_steps(
            b"HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Length: 5\r\n\r\nhello",
            false,
        );
        assert_eq!(
            r,
            vec![Response {
                status: 200,
                close: false,
                body_bytes: 5
            }]
        );
    }

    #[test]
    fn two_responses_back_to_back() {
        let r = all_steps(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nConnection: close\r\n\r\n",
            false,
        );
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[1],
            Response {
                status: 404,
                close: true,
                body_bytes: 0
            }
        );
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n4;name=x\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nExpires: never\r\n\r\n";
        let r = all_steps(data, false);
        assert_eq!(
            r,
            vec![Response {
                status: 200,
                close: false,
                body_bytes: 23
            }]
        );
    }

    #[test]
    fn chunked_overrides_content_length() {
        let r = all_steps(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n", false);
        assert_eq!(r[0].body_bytes, 1);
    }

    #[test]
    fn interim_responses_are_skipped() {
        let r = all_steps(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx",
            false,
        );
        assert_eq!(
            r,
            vec![Response {
                status: 201,
                close: false,
                body_bytes: 1
            }]
        );
    }

    #[test]
    fn head_and_bodyless_statuses() {
        let r = all_steps(b"HTTP/1.1 200 OK\r\nContent-Length: 612\r\n\r\n", true);
        assert_eq!(
            r,
            vec![Response {
                status: 200,
                close: false,
                body_bytes: 0
            }]
        );
        let r = all_steps(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 612\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", false);
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn http10_and_until_close() {
        let mut p = ResponseParser::new(false);
        let data = b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\nbody bytes";
        let (n, step) = p.feed(data).unwrap();
        assert_eq!((n, step), (data.len(), Step::NeedMore));
        assert_eq!(
            p.eof(),
            Ok(Response {
                status: 200,
                close: true,
                body_bytes: 10
            })
        );
        let r = all_steps(
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
            false,
        );
        assert!(!r[0].close);
    }

    #[test]
    fn bare_lf_line_endings() {
        let r = all_steps(b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok", false);
        assert_eq!(r[0].body_bytes, 2);
    }

    #[test]
    fn malformed_inputs_are_errors() {
        let cases: &[(&[u8], ParseError)] = &[
            (b"garbage\r\n\r\n", ParseError::StatusLine),
            (b"HTTP/1.1 2000 OK\r\n\r\n", ParseError::StatusLine),
            (b"HTTP/1.1 099 Low\r\n\r\n", ParseError::StatusLine),
            (b"HTTP/2 200\r\n\r\n", ParseError::StatusLine),
            (
                b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
                ParseError::Header,
            ),
            (
                b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
                ParseError::Header,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                ParseError::ContentLength,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                ParseError::ContentLength,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
                ParseError::TransferEncoding,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                ParseError::Chunk,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n",
                ParseError::Chunk,
            ),
            (
                b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
                ParseError::Upgrade,
            ),
        ];
        for (data, want) in cases {
            for step in [1, 3, data.len()] {
                let (_, err, _) = run(data, step, false);
                assert_eq!(
                    err,
                    Some(*want),
                    "{:?} step {step}",
                    String::from_utf8_lossy(data)
                );
            }
        }
    }

    #[test]
    fn oversized_head_is_an_error_not_a_hang() {
        let mut data = b"HTTP/1.1 200 OK\r\n".to_vec();
        while data.len() <= MAX_HEAD_BYTES {
            data.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        let (_, err, _) = run(&data, 4096, false);
        assert_eq!(err, Some(ParseError::HeadTooLarge));
    }

    #[test]
    fn truncated_body_on_eof() {
        let mut p = ResponseParser::new(false);
        let (_, step) = p
            .feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
            .unwrap();
        assert_eq!(step, Step::NeedMore);
        assert!(p.started());
        assert_eq!(p.eof(), Err(ParseError::Truncated));
        let mut p = ResponseParser::new(false);
        assert!(!p.started());
        assert_eq!(p.eof(), Err(ParseError::Truncated));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap deterministic fuzz: xorshift bytes biased towards HTTP punctuation.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let alphabet = b"HTTP/1.1 200\r\n:chunkedContent-Length0123456789abcdefTransfer-Encoding; ";
        for _ in 0..3000 {
            let len = (x % 200) as usize;
            let mut data = b"HTTP/1.1 200 OK\r\n".to_vec();
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                data.push(alphabet[(x % alphabet.len() as u64) as usize]);
            }
            let _ = run(&data, (x % 7 + 1) as usize, x % 2 == 0);
        }
    }
}
