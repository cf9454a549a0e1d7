//! The latscope peer protocol, version 1.
//!
//! A TCP (or unix) connection starts with a greeting in each direction, sent by both sides at
//! once without waiting (so a client can pipeline greeting, test request and first message, and
//! a per-connection test like TCP_CRR costs one round trip):
//!
//! ```text
//! greeting = "LATSCOPE" u16-be(version) frame(Hello)
//! frame    = u32-be(length ≤ 64 KiB) JSON
//! client → server: greeting(ClientHello), frame(Start)
//! server → client: greeting(ServerHello), frame(Accepted | Refused)
//! ```
//!
//! After `Accepted`, a stream-socket test switches to its data phase on the same connection
//! (rr: the client writes `request_bytes`, the server answers `response_bytes`, until the
//! client closes or the server's deadline passes). A UDP test keeps the control connection open
//! as its lifetime and exchanges datagrams with the server's UDP socket on the same port; every
//! datagram carries [`UdpHeader`] with the token from `Accepted`, so the server never answers
//! datagrams it did not agree to (no reflection or amplification).
//!
//! Authentication is optional ([`crate::auth`]): a server started with a key puts a challenge in
//! its hello and refuses (`auth`) a client hello without the right answer. A client with a key
//! therefore reads the server's greeting before sending its own (one round trip more).

use std::io::{self, Read, Write};

use latscope_core::model::rr::{ServerBehaviour, Transport};
use latscope_core::model::stream::{
    Cost, Direction, StreamInterval, StreamOptions, TcpFigures, UdpFigures,
};
use serde::{Deserialize, Serialize};

use crate::auth::AuthProof;

/// The protocol version this build speaks.
pub const VERSION: u16 = 1;
/// The greeting's magic bytes.
pub const MAGIC: &[u8; 8] = latscope_core::PEER_MAGIC;
/// Default TCP and UDP port of `latscope serve`.
pub const DEFAULT_PORT: u16 = 7373;
/// Largest control frame.
pub const MAX_FRAME: usize = 64 * 1024;

/// UDP echo for probes (`latscope ping --udp`): `LSP1` + 0x01, answered with the same bytes
/// and 0x02 in byte 4. Same length back, so it cannot amplify.
pub const UDP_ECHO_MAGIC: &[u8; 4] = b"LSP1";
/// Byte 4 of an echo request.
pub const UDP_ECHO_REQUEST: u8 = 0x01;
/// Byte 4 of an echo reply.
pub const UDP_ECHO_REPLY: u8 = 0x02;

/// Magic of test datagrams.
pub const UDP_TEST_MAGIC: &[u8; 4] = b"LSU1";
/// Bytes of [`UdpHeader`] at the start of every test datagram.
pub const UDP_HEADER_LEN: usize = 20;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
/// The client's half of the greeting.
pub struct ClientHello {
    /// e.g. "latscope 0.1.0".
    pub software: String,
    /// The answer to the server's challenge, when the client has a key (see [`crate::auth`]).
    pub auth: Option<AuthProof>,
}

/// Limits the server enforces, announced in its hello so clients can check before asking.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Tests that may run at once.
    pub max_tests: u32,
    /// Longest test, ms.
    pub max_duration_ms: u64,
    /// Largest request, response or buffer, bytes.
    pub max_message_bytes: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
/// The server's half of the greeting.
pub struct ServerHello {
    /// e.g. "latscope 0.1.0".
    pub software: String,
    /// The limits it enforces.
    pub limits: Limits,
    /// True when the server wants `auth` in the client hello.
    pub auth_required: bool,
    /// With `auth_required`: this connection's challenge (hex), which the client's `auth`
    /// answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge: Option<String>,
}

/// What kind of test the client asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestKind {
    /// Request/response on this stream connection.
    Rr,
    /// One request/response, then the server closes (TCP_CRR).
    Crr,
    /// Request/response over UDP datagrams; this connection is the test's lifetime.
    UdpRr,
    /// A throughput test: this connection is its control channel; data flows on the
    /// connections (or UDP flows) that join it.
    Stream,
    /// A data connection joining a stream test (see [`Join`]).
    StreamJoin,
    /// An evidence request (`diagnose --server-agent`): the server observes one of its ports
    /// while the client measures, then answers with what it saw (see [`crate::serve::evidence`]).
    Evidence,
}

/// What a stream test moves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamSpec {
    /// TCP, UDP or unix.
    pub transport: Transport,
    /// Who sends: client, server, or both.
    pub direction: Direction,
    /// Streams per direction.
    pub streams: u32,
    /// How long senders send (0 with `bytes_per_stream`).
    pub duration_ms: u64,
    /// Stop each stream after this many bytes (instead of a duration).
    pub bytes_per_stream: Option<u64>,
    /// Write (or datagram) size.
    pub buffer_bytes: u32,
    /// UDP: rate per stream, bit/s.
    pub udp_rate_bps: Option<f64>,
    /// Socket options for the data connections.
    pub options: StreamOptions,
    /// How often each side reports an interval, ms.
    pub interval_ms: u64,
}

impl StreamSpec {
    /// Data connections (or UDP flows) the client opens: one per stream and direction.
    /// Index `i < streams` carries client→server data unless the test only receives.
    pub fn flows(&self) -> u32 {
        if self.direction == Direction::Both {
            2 * self.streams
        } else {
            self.streams
        }
    }

    /// Whether flow `index` carries data from the client to the server.
    pub fn client_sends(&self, index: u32) -> bool {
        match self.direction {
            Direction::Send => true,
            Direction::Receive => false,
            Direction::Both => index < self.streams,
        }
    }
}

/// A data connection's introduction: which test and which flow it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Join {
    /// The test's token from `Accepted`.
    pub token: u64,
    /// Which flow of the test.
    pub index: u32,
}

/// The server's figures for one flow at the end of a stream test.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowFinal {
    /// The flow's index.
    pub index: u32,
    /// Bytes the server received on it.
    pub bytes_received: u64,
    /// Bytes the server sent on it.
    pub bytes_sent: u64,
    /// ns from Go to the last byte received / sent.
    pub receive_ns: u64,
    /// ns from Go to the last byte sent.
    pub send_ns: u64,
    /// The server as UDP receiver.
    pub udp_rx: Option<UdpFigures>,
    /// The server as UDP sender: datagrams sent.
    pub udp_sent: u64,
    /// The server as TCP sender.
    pub tcp: Option<TcpFigures>,
}

/// Control messages of a stream test, after `Accepted`, both ways.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Control {
    /// Server → client: every flow has joined; the test starts now.
    Go,
    /// Server → client: the server's view of an interval.
    Interval(StreamInterval),
    /// Client → server: stop now. For UDP client→server flows, the datagrams the client sent.
    Stop {
        /// (flow index, datagrams sent) per client→server UDP flow.
        udp_sent: Vec<(u32, u64)>,
    },
    /// Server → client: the server's figures.
    Final {
        /// Per flow.
        flows: Vec<FlowFinal>,
        /// CPU cost of the server's sending flows.
        cost_as_sender: Cost,
        /// CPU cost of the server's receiving flows.
        cost_as_receiver: Cost,
    },
    /// Either way: the test failed.
    Error {
        /// What went wrong.
        message: String,
    },
}

/// Magic of stream-test datagrams.
pub const UDP_STREAM_MAGIC: &[u8; 4] = b"LSS1";
/// magic(4) token(8) index(4) seq(8) send_ns(8).
pub const UDP_STREAM_HEADER_LEN: usize = 32;
/// The sequence number of a join datagram.
pub const UDP_JOIN_SEQ: u64 = u64::MAX;

/// The header of a stream-test datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamDatagram {
    /// The test's token.
    pub token: u64,
    /// The flow's index.
    pub index: u32,
    /// Sequence number ([`UDP_JOIN_SEQ`] for a join).
    pub seq: u64,
    /// Sender's monotonic clock, ns (for RFC 3550 jitter: only differences matter).
    pub send_ns: u64,
}

impl StreamDatagram {
    /// Write the header into the first [`UDP_STREAM_HEADER_LEN`] bytes of `buf`.
    pub fn write(&self, buf: &mut [u8]) {
        buf[..4].copy_from_slice(UDP_STREAM_MAGIC);
        buf[4..12].copy_from_slice(&self.token.to_be_bytes());
        buf[12..16].copy_from_slice(&self.index.to_be_bytes());
        buf[16..24].copy_from_slice(&self.seq.to_be_bytes());
        buf[24..32].copy_from_slice(&self.send_ns.to_be_bytes());
    }

    /// Parse a header; None when too short or of another magic.
    pub fn parse(buf: &[u8]) -> Option<StreamDatagram> {
        if buf.len() < UDP_STREAM_HEADER_LEN || &buf[..4] != UDP_STREAM_MAGIC {
            return None;
        }
        Some(StreamDatagram {
            token: u64::from_be_bytes(buf[4..12].try_into().ok()?),
            index: u32::from_be_bytes(buf[12..16].try_into().ok()?),
            seq: u64::from_be_bytes(buf[16..24].try_into().ok()?),
            send_ns: u64::from_be_bytes(buf[24..32].try_into().ok()?),
        })
    }
}

/// Reassembles frames from a socket read with a timeout, so a timeout in the middle of a
/// frame loses nothing.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// Read what is available (blocking at most the socket's timeout) and return the next
    /// complete frame, if any. `Ok(None)`: nothing complete yet. EOF is an error.
    pub fn poll<T: for<'de> Deserialize<'de>>(
        &mut self,
        r: &mut impl Read,
    ) -> Result<Option<T>, FrameError> {
        if let Some(f) = self.take()? {
            return Ok(Some(f));
        }
        let mut chunk = [0u8; 4096];
        match r.read(&mut chunk) {
            Ok(0) => Err(FrameError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the control connection",
            ))),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                self.take()
            }
            Err(e) if latscope_sys::error::is_transient(&e) => Ok(None),
            Err(e) => Err(FrameError::Io(e)),
        }
    }

    fn take<T: for<'de> Deserialize<'de>>(&mut self) -> Result<Option<T>, FrameError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge(len));
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let v = serde_json::from_slice(&self.buf[4..4 + len]).map_err(FrameError::Json);
        self.buf.drain(..4 + len);
        v.map(Some)
    }
}

/// A test request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Start {
    /// What test.
    pub kind: TestKind,
    /// Request size, bytes.
    pub request_bytes: u32,
    /// Response size, bytes.
    pub response_bytes: u32,
    /// How long the test may last; the server closes it after that (bounded by its limit).
    pub duration_ms: u64,
    /// What the client asks the server to do; a server started with forced behaviour overrides
    /// this and says so in `Accepted`.
    pub server: ServerBehaviour,
    /// Stream tests: what to move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamSpec>,
    /// Data connections of a stream test: which test and flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<Join>,
}

/// The server's answer to [`Start`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// The server runs the test.
    Accepted {
        /// The server's id of the test (for its log).
        test_id: u64,
        /// The behaviour the server will actually apply.
        server: ServerBehaviour,
        /// UDP tests: the token every datagram must carry.
        udp_token: Option<u64>,
    },
    /// The server will not run the test.
    Refused {
        /// Machine-readable reason: what the client may act on.
        code: RefusalCode,
        /// What to change, for people.
        message: String,
        /// `busy`: the tests running on the server.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        running_tests: Option<u32>,
    },
}

/// Why a server refused a test, as it travels in [`Reply::Refused`]: clients decide on this,
/// never on the message text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalCode {
    /// A size, count or rate beyond the server's limits.
    Limit,
    /// The test is longer than the server's `--max-duration` (its hello says how long).
    DurationLimit,
    /// Every test or connection slot is taken: retry later.
    Busy,
    /// This client's address already holds its share of the server (per-source quota).
    Quota,
    /// A malformed or inconsistent request.
    Invalid,
    /// Authentication required or wrong.
    Auth,
    /// Incompatible protocol version.
    Version,
    /// A code this build does not know (a newer server).
    #[serde(other)]
    Other,
}

/// Why reading a frame failed.
#[derive(Debug)]
pub enum FrameError {
    /// Reading or writing the socket failed.
    Io(io::Error),
    /// The peer is not speaking this protocol: the first bytes it sent.
    NotLatscope(Vec<u8>),
    /// A latscope peer of another, incompatible version.
    Version(u16),
    /// A frame longer than [`MAX_FRAME`], bytes.
    TooLarge(usize),
    /// A frame that is not the expected JSON message.
    Json(serde_json::Error),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Io(e) => write!(f, "{e}"),
            FrameError::NotLatscope(b) => write!(f, "it sent {}", printable(b)),
            FrameError::Version(v) => {
                write!(f, "protocol version {v}, this latscope speaks {VERSION}")
            }
            FrameError::TooLarge(n) => write!(f, "a {n}-byte control frame (limit {MAX_FRAME})"),
            FrameError::Json(e) => write!(f, "malformed control message: {e}"),
        }
    }
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io(e)
    }
}

/// Show the first bytes a foreign peer sent, e.g. `"HTTP/1.1 400 Bad Re…"`.
pub fn printable(b: &[u8]) -> String {
    let s: String = b
        .iter()
        .take(40)
        .map(|&c| {
            if (0x20..0x7f).contains(&c) {
                c as char
            } else {
                '.'
            }
        })
        .collect();
    if b.len() > 40 {
        format!("\"{s}…\"")
    } else {
        format!("\"{s}\"")
    }
}

/// Encode a greeting followed by its hello frame.
pub fn encode_greeting<T: Serialize>(hello: &T, out: &mut Vec<u8>) {
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    encode_frame(hello, out);
}

/// Encode one frame.
pub fn encode_frame<T: Serialize>(msg: &T, out: &mut Vec<u8>) {
    // Our own message types always serialise; an empty object is the safe fallback.
    let body = serde_json::to_vec(msg).unwrap_or_else(|_| b"{}".to_vec());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
}

/// Read and check a greeting, then its hello frame.
pub fn read_greeting<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> Result<T, FrameError> {
    let mut head = [0u8; 10];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            Ok(0) => {
                return Err(if got == 0 {
                    FrameError::Io(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "closed without a greeting",
                    ))
                } else {
                    FrameError::NotLatscope(head[..got].to_vec())
                });
            }
            Ok(n) => {
                got += n;
                // Fail fast on a foreign greeting, before waiting for all ten bytes.
                let k = got.min(MAGIC.len());
                if head[..k] != MAGIC[..k] {
                    // One more read (bounded by the socket's timeout) so the message can show
                    // what the peer is, e.g. a whole HTTP status line.
                    let mut seen = head[..got].to_vec();
                    let mut more = [0u8; 40];
                    if let Ok(m) = r.read(&mut more) {
                        seen.extend_from_slice(&more[..m]);
                    }
                    return Err(FrameError::NotLatscope(seen));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    let version = u16::from_be_bytes([head[8], head[9]]);
    if version != VERSION {
        return Err(FrameError::Version(version));
    }
    read_frame(r)
}

/// Read one frame.
pub fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(FrameError::Json)
}

/// Read one frame's body as bytes, refusing one longer than `max` (at most [`MAX_FRAME`])
/// before reading it: a parser above this sees only a bounded body.
pub fn read_frame_bytes(r: &mut impl Read, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > max.min(MAX_FRAME) {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(body)
}

/// Write a frame in one write.
pub fn write_frame<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    let mut buf = Vec::with_capacity(128);
    encode_frame(msg, &mut buf);
    w.write_all(&buf)
}

/// The header of every UDP test datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpHeader {
    /// The test's token from `Accepted`.
    pub token: u64,
    /// Sequence number (the response echoes it).
    pub seq: u64,
}

impl UdpHeader {
    /// Write the header into the first [`UDP_HEADER_LEN`] bytes of `buf`.
    pub fn write(&self, buf: &mut [u8]) {
        buf[..4].copy_from_slice(UDP_TEST_MAGIC);
        buf[4..12].copy_from_slice(&self.token.to_be_bytes());
        buf[12..20].copy_from_slice(&self.seq.to_be_bytes());
    }

    /// Parse a header; None when too short or of another magic.
    pub fn parse(buf: &[u8]) -> Option<UdpHeader> {
        if buf.len() < UDP_HEADER_LEN || &buf[..4] != UDP_TEST_MAGIC {
            return None;
        }
        let token = u64::from_be_bytes(buf[4..12].try_into().ok()?);
        let seq = u64::from_be_bytes(buf[12..20].try_into().ok()?);
        Some(UdpHeader { token, seq })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greeting_roundtrip() {
        let hello = ClientHello {
            software: "latscope test".into(),
            auth: None,
        };
        let mut buf = Vec::new();
        encode_greeting(&hello, &mut buf);
        let start = Start {
            kind: TestKind::Rr,
            request_bytes: 64,
            response_bytes: 128,
            duration_ms: 1000,
            server: ServerBehaviour::default(),
            stream: None,
            join: Some(Join { token: 7, index: 1 }),
        };
        encode_frame(&start, &mut buf);
        let mut r = &buf[..];
        let got: ClientHello = read_greeting(&mut r).expect("greeting");
        assert_eq!(got, hello);
        let got: Start = read_frame(&mut r).expect("start");
        assert_eq!(got, start);
    }

    #[test]
    fn foreign_peer_is_recognised() {
        let mut r = &b"HTTP/1.1 400 Bad Request\r\n"[..];
        match read_greeting::<ServerHello>(&mut r) {
            Err(FrameError::NotLatscope(b)) => assert!(b.starts_with(b"H")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn wrong_version_and_oversize() {
        let mut buf = MAGIC.to_vec();
        buf.extend_from_slice(&9u16.to_be_bytes());
        assert!(matches!(
            read_greeting::<ServerHello>(&mut &buf[..]),
            Err(FrameError::Version(9))
        ));
        let big = ((MAX_FRAME + 1) as u32).to_be_bytes();
        assert!(matches!(
            read_frame::<Start>(&mut &big[..]),
            Err(FrameError::TooLarge(_))
        ));
        let mut bad = 3u32.to_be_bytes().to_vec();
        bad.extend_from_slice(b"{x}");
        assert!(matches!(
            read_frame::<Start>(&mut &bad[..]),
            Err(FrameError::Json(_))
        ));
    }

    #[test]
    fn frame_reader_survives_split_frames() {
        let mut wire = Vec::new();
        encode_frame(&Control::Go, &mut wire);
        encode_frame(
            &Control::Stop {
                udp_sent: vec![(0, 5)],
            },
            &mut wire,
        );
        let mut fr = FrameReader::default();
        // Feed one byte at a time, as a slow socket might.
        let mut got = Vec::new();
        for b in &wire {
            let mut one = &[*b][..];
            if let Some(c) = fr.poll::<Control>(&mut one).expect("frame") {
                got.push(c);
            }
        }
        assert_eq!(
            got,
            vec![
                Control::Go,
                Control::Stop {
                    udp_sent: vec![(0, 5)]
                }
            ]
        );
        assert!(fr.poll::<Control>(&mut &[][..]).is_err(), "EOF is reported");
    }

    #[test]
    fn stream_datagram() {
        let d = StreamDatagram {
            token: 1,
            index: 2,
            seq: 3,
            send_ns: 4,
        };
        let mut b = [0u8; 40];
        d.write(&mut b);
        assert_eq!(StreamDatagram::parse(&b), Some(d));
        assert_eq!(StreamDatagram::parse(&b[..31]), None);
    }

    #[test]
    fn udp_header() {
        let mut b = [0u8; 32];
        let h = UdpHeader {
            token: 0xdead_beef_0102_0304,
            seq: 42,
        };
        h.write(&mut b);
        assert_eq!(UdpHeader::parse(&b), Some(h));
        assert_eq!(UdpHeader::parse(&b[..19]), None);
        b[0] = b'X';
        assert_eq!(UdpHeader::parse(&b), None);
    }
}
