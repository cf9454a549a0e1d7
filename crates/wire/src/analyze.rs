//! TCP flow tracking, Wireshark-compatible segment analysis and the stall detectors.
//!
//! Memory is proportional to the connections open at once: each connection keeps a bounded
//! amount of state (at most [`MAX_UNACKED`] unacknowledged segments, [`MAX_TX_KEPT`]
//! transactions); when it closes it is summarised into a few counters (and, if it is among
//! the `top` worst, a [`ConnSummary`]) and its state is dropped.
//!
//! ## Segment analysis
//! The classification follows Wireshark's `tcp_analyze_sequence_number()` (epan/dissectors/
//! packet-tcp.c, documented in the Wireshark User's Guide §7.5 "TCP Analysis"): relative
//! sequence numbers, "next expected sequence" per direction, the zero-window, lost-segment,
//! keep-alive, window-update, window-full, duplicate-ACK checks, then for segments that do not
//! advance the sequence: spurious (already ACKed) → fast retransmission (≥ 2 duplicate ACKs for
//! this sequence within 20 ms) → out-of-order (within the first RTT, 3 ms if unknown, of the
//! highest segment) → retransmission. Counts therefore match `tshark`'s `tcp.analysis.*`.
//!
//! ## Stall detectors (the rules, from the Linux TCP stack's behaviour)
//! * **Nagle × delayed ACK.** Nagle (RFC 896; Linux implements Minshall's variant in
//!   `tcp_nagle_check()`/`tcp_minshall_check()`) holds a sub-MSS segment while an earlier
//!   *sub-MSS* segment is unacknowledged. The receiver delays its ACK (RFC 1122 §4.2.3.2; Linux
//!   `TCP_DELACK_MIN` = 40 ms, up to 200 ms) unless it is in quick-ack mode, which it is at the
//!   start of a connection (`tcp_incr_quickack()`: up to 16 segments) and leaves once the
//!   exchange becomes interactive ("pingpong"). Evidence in a capture: a small segment D1, then
//!   a *pure* ACK from the peer that acknowledges exactly up to D1's end after ≥ 15 ms beyond the
//!   round trip, then the sender's next small segment D2 within one capture-point→sender round
//!   trip of that ACK (the ACK released it), with no peer data in between. That is why the first
//!   response of a keep-alive connection is fast and the following ones stall.
//! * **Delayed ACK without Nagle.** The same release by a delayed ACK, but D1 or D2 is
//!   full-sized: Nagle does not hold full segments, so the sender was limited by its congestion
//!   or receive window and an odd segment count left the receiver waiting for a second one.
//! * **TCP_CORK.** A small segment sent 180–260 ms after the sender's previous data with no
//!   packet from the peer in the preceding round trip: the kernel's 200 ms cork timer
//!   (`TCP_CORK` in tcp(7)) released it, not an ACK.
//! * **RTO retransmission.** Wireshark's plain "retransmission" (not fast, not spurious): a timer
//!   fired. Time lost is the gap since the original transmission.
//! * **Zero-window stall.** From the first zero-window advertisement to the next non-zero window
//!   from the same side.
//! * **Application think time.** Last request byte to first response byte, minus the round trip
//!   between the capture point and the server (from the handshake), when ≥ 10 ms.
//!
//! Where the capture was taken matters: near the server the ACK→release gap is microseconds,
//! near the client it is a full round trip. The handshake tells us: SYN→SYN-ACK is the round
//! trip to the server, SYN-ACK→ACK the round trip to the client.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use latscope_core::LatencyHistogram;

use crate::packet::{Addr, Decoded, SkipReason, TcpView, Transport, flags};
use crate::report::{
    ConnSummary, Finding, Ladder, LadderRow, Skipped, StallExample, StallKind, TcpCounts,
    Transaction,
};

/// Unacknowledged segments kept per direction (Wireshark keeps 10 000; the oldest are dropped).
pub const MAX_UNACKED: usize = 4096;
/// Transactions kept in full per connection.
pub const MAX_TX_KEPT: usize = 256;
/// Ladder rows kept for `--conn`.
pub const MAX_LADDER_ROWS: usize = 100_000;
// A closed connection (both FINs, or a RST) stays LINGER_NS of capture time, so that
// stragglers — a FIN retransmitted because the last ACK was lost, the duplicate ACK answering
// it — are analysed in their connection, as Wireshark does; then it is summarised and dropped.

const DELACK_MIN_NS: u64 = 15_000_000;
const CORK_MIN_NS: u64 = 180_000_000;
const CORK_MAX_NS: u64 = 260_000_000;
const THINK_MIN_NS: u64 = 10_000_000;
/// A closed connection stays in the table this long (capture time) to absorb late ACKs and
/// retransmitted FINs before it is summarised and dropped.
const LINGER_NS: u64 = 2_000_000_000;
/// How often (capture time) closed connections past their linger are swept out.
const SWEEP_EVERY_NS: u64 = 500_000_000;

/// Options of one analysis run.
#[derive(Debug, Clone)]
pub struct AnalyzeOptions {
    /// Record the ladder of this connection index.
    pub trace_conn: Option<u64>,
    /// Keep full summaries of this many worst connections.
    pub top: usize,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            trace_conn: None,
            top: 20,
        }
    }
}

/// FxHash-style hasher: the flow key is trusted-size data from our own parser, and SipHash's
/// DoS resistance is not worth its cost on the per-packet path.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A canonical (direction-independent) TCP flow key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FlowKey {
    a: Addr,
    ap: u16,
    b: Addr,
    bp: u16,
}

impl FlowKey {
    fn new(src: Addr, sp: u16, dst: Addr, dp: u16) -> Self {
        if (src, sp) <= (dst, dp) {
            FlowKey {
                a: src,
                ap: sp,
                b: dst,
                bp: dp,
            }
        } else {
            FlowKey {
                a: dst,
                ap: dp,
                b: src,
                bp: sp,
            }
        }
    }
}

// Wireshark's per-segment analysis flags.
const A_RETRANS: u32 = 1 << 0;
const A_LOST: u32 = 1 << 1;
const A_ACK_LOST: u32 = 1 << 2;
const A_KEEP_ALIVE: u32 = 1 << 3;
const A_DUP_ACK: u32 = 1 << 4;
const A_ZERO_WIN: u32 = 1 << 5;
const A_ZWP: u32 = 1 << 6;
const A_ZWP_ACK: u32 = 1 << 7;
const A_KA_ACK: u32 = 1 << 8;
const A_OOO: u32 = 1 << 9;
const A_FAST: u32 = 1 << 10;
const A_WIN_UPDATE: u32 = 1 << 11;
const A_WIN_FULL: u32 = 1 << 12;
const A_SPURIOUS: u32 = 1 << 14;

#[inline]
fn lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}
#[inline]
fn gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}
#[inline]
fn le(a: u32, b: u32) -> bool {
    !gt(a, b)
}

#[derive(Debug, Clone, Copy)]
struct Unacked {
    frame: u64,
    seq: u32,
    nextseq: u32,
    ts: u64,
}

#[derive(Debug, Default)]
struct Dir {
    base_set: bool,
    base: u32,
    nextseq: u32,
    nextseq_ts: u64,
    maxseqtobeacked: u32,
    lastack: u32,
    lastack_ts: u64,
    lastacklen: u32,
    window: u32,
    /// -1 unknown, -2 no scaling, ≥ 0 the shift.
    win_scale: i8,
    dupacknum: i32,
    lastsegmentflags: u32,
    unacked: VecDeque<Unacked>,
    /// MSS this side advertised in its SYN.
    mss_opt: Option<u16>,
    timestamps: bool,
    max_seg: u32,
    bytes: u64,
    fin: bool,
    // Stall tracking.
    last_data: Option<DataSeg>,
    last_pkt_ts: u64,
    last_pkt_frame: u64,
    last_pkt_len: u32,
    last_pkt_ack: u32,
    last_pkt_pure_ack: bool,
    last_data_ts: u64,
    /// When this side last retransmitted: a release after a retransmission is loss recovery,
    /// not a delayed ACK or cork.
    last_rexmit_ts: Option<u64>,
    zero_since: Option<(u64, u64)>,
}

#[derive(Debug, Clone, Copy)]
struct DataSeg {
    ts: u64,
    frame: u64,
    len: u32,
    end: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxState {
    Idle,
    Request,
    Response,
}

#[derive(Debug)]
struct TxCur {
    req_frame: u64,
    req_start: u64,
    req_last: u64,
    resp_first: u64,
    resp_last: u64,
    resp_last_frame: u64,
    http_request: String,
    http_status: Option<u16>,
    stall: Option<StallKind>,
    stall_lost: u64,
    think: u64,
}

struct Conn {
    id: u64,
    client: (Addr, u16),
    server: (Addr, u16),
    dirs: [Dir; 2],
    first_ts: u64,
    first_frame: u64,
    last_ts: u64,
    frames: u64,
    syn_ts: Option<u64>,
    synack_ts: Option<u64>,
    first_rtt: Option<u64>,
    rtt_to_server: Option<u64>,
    rtt_to_client: Option<u64>,
    closed_at: Option<u64>,
    rst: bool,
    counts: TcpCounts,
    tx_state: TxState,
    tx: Option<TxCur>,
    txs: Vec<Transaction>,
    tx_count: u64,
    stall_lost: u64,
    client_isn: Option<u32>,
}

#[derive(Default)]
struct FindingAcc {
    count: u64,
    lost: u64,
    examples: Vec<StallExample>,
}

/// The streaming analyzer: feed frames with [`Analyzer::push`], then [`Analyzer::finish`].
pub struct Analyzer {
    opts: AnalyzeOptions,
    table: HashMap<FlowKey, usize, BuildHasherDefault<FxHasher>>,
    slab: Vec<Option<Conn>>,
    free: Vec<usize>,
    next_id: u64,
    open: u64,
    peak_open: u64,
    frames: u64,
    tcp_frames: u64,
    udp_frames: u64,
    skipped: Skipped,
    first_ts: Option<u64>,
    last_ts: u64,
    counts: TcpCounts,
    last_sweep_ts: u64,
    acc: Acc,
    top: Vec<ConnSummary>,
    ladder_conn: Option<ConnSummary>,
}

/// What the per-packet code accumulates across connections. Kept apart from the connection
/// table so a connection can be borrowed in place while this is updated (moving a connection
/// out of the table and back cost a quarter of the run time in memcpy).
struct Acc {
    findings: [FindingAcc; 6],
    tx_total: u64,
    // Allocated on first use (≈ 270 KiB each): small inputs, e.g. under a fuzzer, stay cheap.
    tx_hist: Option<LatencyHistogram>,
    think_hist: Option<LatencyHistogram>,
    hs_hist: Option<LatencyHistogram>,
    ladder: Vec<LadderRow>,
    ladder_base_ts: u64,
    /// Per-packet scratch notes for the ladder.
    notes: Vec<String>,
}

/// What [`Analyzer::finish`] returns (the report minus metadata the caller adds).
pub struct Analysis {
    /// Frames seen.
    pub frames: u64,
    /// TCP frames analysed.
    pub tcp_frames: u64,
    /// UDP frames.
    pub udp_frames: u64,
    /// Skipped frames by reason.
    pub skipped: Skipped,
    /// First to last timestamp.
    pub capture_span_ns: u64,
    /// Connections seen.
    pub connections: u64,
    /// Peak simultaneously tracked connections.
    pub peak_open_connections: u64,
    /// Totals.
    pub counts: TcpCounts,
    /// Transactions.
    pub transactions: u64,
    /// Transaction durations (None: no transaction).
    pub tx_hist: Option<LatencyHistogram>,
    /// Think times.
    pub think_hist: Option<LatencyHistogram>,
    /// Handshake RTTs.
    pub handshake_hist: Option<LatencyHistogram>,
    /// Findings ranked by time lost.
    pub findings: Vec<Finding>,
    /// Worst connections.
    pub top_connections: Vec<ConnSummary>,
    /// The traced connection.
    pub ladder: Option<Ladder>,
}

fn fmt_ms(ns: u64) -> String {
    format!("{:.1}ms", ns as f64 / 1e6)
}

fn endpoint(a: (Addr, u16)) -> String {
    match a.0.ip() {
        std::net::IpAddr::V4(v4) => format!("{v4}:{}", a.1),
        std::net::IpAddr::V6(v6) => format!("[{v6}]:{}", a.1),
    }
}

fn flag_string(f: u8) -> String {
    let mut v = Vec::new();
    for (bit, name) in [
        (flags::SYN, "SYN"),
        (flags::FIN, "FIN"),
        (flags::RST, "RST"),
        (flags::PSH, "PSH"),
        (flags::ACK, "ACK"),
        (flags::URG, "URG"),
    ] {
        if f & bit != 0 {
            v.push(name);
        }
    }
    v.join(",")
}

const HTTP_METHODS: [&[u8]; 9] = [
    b"GET ",
    b"POST ",
    b"HEAD ",
    b"PUT ",
    b"DELETE ",
    b"OPTIONS ",
    b"PATCH ",
    b"CONNECT ",
    b"TRACE ",
];

fn http_request_line(p: &[u8]) -> Option<String> {
    if !HTTP_METHODS.iter().any(|m| p.starts_with(m)) {
        return None;
    }
    let end = p
        .iter()
        .take(120)
        .position(|&c| c == b'\r' || c == b'\n')
        .unwrap_or(p.len().min(120));
    Some(String::from_utf8_lossy(&p[..end]).into_owned())
}

fn http_status(p: &[u8]) -> Option<u16> {
    if p.len() < 12 || !p.starts_with(b"HTTP/1.") {
        return None;
    }
    std::str::from_utf8(&p[9..12]).ok()?.parse().ok()
}

impl Default for Analyzer {
    fn default() -> Self {
        Self::new(AnalyzeOptions::default())
    }
}

impl Analyzer {
    /// A fresh analyzer.
    pub fn new(opts: AnalyzeOptions) -> Self {
        Analyzer {
            opts,
            table: HashMap::default(),
            slab: Vec::new(),
            free: Vec::new(),
            next_id: 0,
            open: 0,
            peak_open: 0,
            frames: 0,
            tcp_frames: 0,
            udp_frames: 0,
            skipped: Skipped::default(),
            first_ts: None,
            last_ts: 0,
            counts: TcpCounts::default(),
            last_sweep_ts: 0,
            acc: Acc {
                findings: Default::default(),
                tx_total: 0,
                tx_hist: None,
                think_hist: None,
                hs_hist: None,
                ladder: Vec::new(),
                ladder_base_ts: 0,
                notes: Vec::new(),
            },
            top: Vec::new(),
            ladder_conn: None,
        }
    }

    /// Connections tracked right now.
    pub fn open_connections(&self) -> u64 {
        self.open
    }

    /// Feed one decoded (or undecodable) frame.
    #[inline]
    pub fn push(&mut self, frame: u64, ts_ns: u64, decoded: Result<Decoded<'_>, SkipReason>) {
        self.frames += 1;
        if self.first_ts.is_none() {
            self.first_ts = Some(ts_ns);
        }
        if ts_ns > self.last_ts {
            self.last_ts = ts_ns;
        }
        match decoded {
            Ok(d) => match d.transport {
                Transport::Tcp { tcp, payload_len } => {
                    self.tcp_frames += 1;
                    self.on_tcp(frame, ts_ns, d.src, d.dst, &tcp, payload_len);
                }
                Transport::Udp(_) => self.udp_frames += 1,
            },
            Err(r) => {
                let s = &mut self.skipped;
                match r {
                    SkipReason::UnknownLinkType => s.unknown_link_type += 1,
                    SkipReason::NotIp => s.not_ip += 1,
                    SkipReason::NotTcpUdp => s.not_tcp_udp += 1,
                    SkipReason::Truncated => s.truncated += 1,
                    SkipReason::Malformed => s.malformed += 1,
                    SkipReason::Fragment => s.fragment += 1,
                }
            }
        }
        if ts_ns >= self.last_sweep_ts.saturating_add(SWEEP_EVERY_NS) {
            self.last_sweep_ts = ts_ns;
            self.sweep(ts_ns);
        }
    }

    fn sweep(&mut self, now: u64) {
        let mut done = Vec::new();
        for (k, &i) in &self.table {
            if let Some(c) = &self.slab[i] {
                if c.closed_at
                    .is_some_and(|t| now.saturating_sub(t) > LINGER_NS)
                {
                    done.push(*k);
                }
            }
        }
        for k in done {
            if let Some(i) = self.table.remove(&k) {
                self.retire(i);
            }
        }
    }

    fn retire(&mut self, i: usize) {
        if let Some(c) = self.slab[i].take() {
            self.free.push(i);
            self.open -= 1;
            self.finalize(c);
        }
    }

    fn new_conn(
        &mut self,
        frame: u64,
        ts: u64,
        src: (Addr, u16),
        dst: (Addr, u16),
        fl: u8,
    ) -> Conn {
        // Who is the client: the SYN sender; the SYN-ACK's receiver; else the higher port.
        let src_is_client = if fl & flags::SYN != 0 {
            fl & flags::ACK == 0
        } else {
            src.1 > dst.1
        };
        let (client, server) = if src_is_client {
            (src, dst)
        } else {
            (dst, src)
        };
        let id = self.next_id;
        self.next_id += 1;
        if self.opts.trace_conn == Some(id) {
            self.acc.ladder_base_ts = ts;
        }
        let mut dirs: [Dir; 2] = Default::default();
        for d in &mut dirs {
            d.win_scale = -1;
        }
        Conn {
            id,
            client,
            server,
            dirs,
            first_ts: ts,
            first_frame: frame,
            last_ts: ts,
            frames: 0,
            syn_ts: None,
            synack_ts: None,
            first_rtt: None,
            rtt_to_server: None,
            rtt_to_client: None,
            closed_at: None,
            rst: false,
            counts: TcpCounts::default(),
            tx_state: TxState::Idle,
            tx: None,
            txs: Vec::new(),
            tx_count: 0,
            stall_lost: 0,
            client_isn: None,
        }
    }

    fn on_tcp(
        &mut self,
        frame: u64,
        ts: u64,
        src: Addr,
        dst: Addr,
        tcp: &TcpView<'_>,
        seglen: u32,
    ) {
        let sp = tcp.src_port();
        let dp = tcp.dst_port();
        let fl = tcp.flags();
        let key = FlowKey::new(src, sp, dst, dp);
        let slot = match self.table.get(&key) {
            Some(&i) => {
                // A new SYN on a finished connection (port reuse) starts a new connection.
                let reuse = fl & (flags::SYN | flags::ACK) == flags::SYN
                    && self.slab[i].as_ref().is_some_and(|c| {
                        (c.closed_at.is_some() || c.rst)
                            || c.client_isn.is_some_and(|isn| isn != tcp.seq())
                    });
                if reuse {
                    self.table.remove(&key);
                    self.retire(i);
                    None
                } else {
                    Some(i)
                }
            }
            None => None,
        };
        let slot = match slot {
            Some(i) => i,
            None => {
                let c = self.new_conn(frame, ts, (src, sp), (dst, dp), fl);
                let i = if let Some(i) = self.free.pop() {
                    self.slab[i] = Some(c);
                    i
                } else {
                    self.slab.push(Some(c));
                    self.slab.len() - 1
                };
                self.table.insert(key, i);
                self.open += 1;
                self.peak_open = self.peak_open.max(self.open);
                i
            }
        };
        let Some(c) = self.slab[slot].as_mut() else {
            return;
        };
        let tracing = self.opts.trace_conn == Some(c.id);
        self.acc.notes.clear();
        self.acc
            .process(c, frame, ts, src, sp, tcp, seglen, tracing);
    }
}

impl Acc {
    #[allow(clippy::too_many_arguments)]
    fn process(
        &mut self,
        c: &mut Conn,
        frame: u64,
        ts: u64,
        src: Addr,
        sp: u16,
        tcp: &TcpView<'_>,
        seglen: u32,
        tracing: bool,
    ) {
        let fl = tcp.flags();
        let d = if (src, sp) == c.client {
            0usize
        } else {
            1usize
        };
        let r = 1 - d;
        c.frames += 1;
        c.last_ts = ts;
        let raw_seq = tcp.seq();
        let raw_ack = tcp.ack();
        let syn = fl & flags::SYN != 0;
        let ackf = fl & flags::ACK != 0;

        // Handshake timing and options.
        if syn {
            let o = tcp.options();
            let fwd = &mut c.dirs[d];
            fwd.mss_opt = o.mss;
            fwd.timestamps = o.timestamps.is_some();
            fwd.win_scale = o.wscale.map_or(-1, |w| w as i8);
            // Wireshark's verify_tcp_window_scaling().
            if fwd.win_scale == -1 {
                c.dirs[d].win_scale = -2;
                c.dirs[r].win_scale = -2;
            } else if ackf && c.dirs[r].win_scale == -2 {
                c.dirs[d].win_scale = -2;
            }
            if ackf {
                if let Some(s) = c.syn_ts {
                    c.synack_ts = Some(ts);
                    c.rtt_to_server.get_or_insert(ts.saturating_sub(s));
                }
            } else {
                c.syn_ts = Some(ts);
                c.client_isn = Some(raw_seq);
            }
        } else if ackf && c.first_rtt.is_none() {
            if let Some(s) = c.syn_ts {
                c.first_rtt = Some(ts.saturating_sub(s));
                if let Some(sa) = c.synack_ts {
                    c.rtt_to_client = Some(ts.saturating_sub(sa));
                }
                self.hs_hist
                    .get_or_insert_with(LatencyHistogram::new)
                    .record(ts.saturating_sub(s).max(1));
            }
        }

        // Relative sequence numbers, as Wireshark shows them.
        if !c.dirs[d].base_set {
            c.dirs[d].base = if syn {
                raw_seq
            } else {
                raw_seq.wrapping_sub(1)
            };
            c.dirs[d].base_set = true;
        }
        if ackf && !c.dirs[r].base_set {
            c.dirs[r].base = raw_ack.wrapping_sub(1);
            c.dirs[r].base_set = true;
        }
        let seq = raw_seq.wrapping_sub(c.dirs[d].base);
        let ack = if ackf {
            raw_ack.wrapping_sub(c.dirs[r].base)
        } else {
            0
        };
        let raw_win = u32::from(tcp.window());
        let window = if syn || c.dirs[d].win_scale < 0 {
            raw_win
        } else {
            raw_win << c.dirs[d].win_scale
        };

        // Stall detection looks at the state *before* this segment updates it.
        let advances = seglen > 0 && (c.dirs[d].nextseq == 0 || seq == c.dirs[d].nextseq);
        let aflags = self.seq_analysis(c, d, frame, ts, seq, ack, seglen, fl, window, tracing);

        if seglen > 0 && aflags & (A_RETRANS | A_FAST | A_SPURIOUS | A_OOO) == 0 && advances {
            self.detect_release(c, d, frame, ts, seglen, tracing);
            self.transactions(c, d, frame, ts, tcp.payload(), tracing);
        }

        // Zero-window stall.
        if fl & (flags::SYN | flags::FIN | flags::RST) == 0 {
            if raw_win == 0 {
                if c.dirs[d].zero_since.is_none() {
                    c.dirs[d].zero_since = Some((ts, frame));
                }
            } else if let Some((t0, f0)) = c.dirs[d].zero_since.take() {
                let lost = ts.saturating_sub(t0);
                self.stall(c, StallKind::ZeroWindow, frame, f0, lost, tracing);
            }
        }

        // Bookkeeping for the release detector.
        let fwd = &mut c.dirs[d];
        fwd.last_pkt_ts = ts;
        fwd.last_pkt_frame = frame;
        fwd.last_pkt_len = seglen;
        fwd.last_pkt_ack = ack;
        fwd.last_pkt_pure_ack =
            seglen == 0 && fl & (flags::SYN | flags::FIN | flags::RST) == 0 && ackf;
        if seglen > 0 {
            fwd.bytes += u64::from(seglen);
            fwd.max_seg = fwd.max_seg.max(seglen);
            fwd.last_data_ts = ts;
        }

        // Connection end.
        if fl & flags::RST != 0 {
            c.rst = true;
            c.closed_at.get_or_insert(ts);
        }
        if fl & flags::FIN != 0 {
            c.dirs[d].fin = true;
        }
        if c.dirs[0].fin && c.dirs[1].fin && c.closed_at.is_none() {
            c.closed_at = Some(ts);
        }

        if tracing && self.ladder.len() < MAX_LADDER_ROWS {
            self.ladder.push(LadderRow {
                frame,
                t_ns: ts.saturating_sub(self.ladder_base_ts),
                from_client: d == 0,
                flags: flag_string(fl),
                seq,
                ack,
                len: seglen,
                win: window,
                notes: std::mem::take(&mut self.notes),
            });
        }
    }

    /// Wireshark's tcp_analyze_sequence_number(), returning the analysis flags of this segment.
    #[allow(clippy::too_many_arguments)]
    fn seq_analysis(
        &mut self,
        c: &mut Conn,
        d: usize,
        frame: u64,
        ts: u64,
        seq: u32,
        ack: u32,
        seglen: u32,
        fl: u8,
        window: u32,
        tracing: bool,
    ) -> u32 {
        let r = 1 - d;
        let mut a = 0u32;
        let sfr = fl & (flags::SYN | flags::FIN | flags::RST);
        let synfin = fl & (flags::SYN | flags::FIN) != 0;
        let mut rto: Option<(u64, u64)> = None;

        'fwd: {
            let (f, rv) = (&c.dirs[d], &c.dirs[r]);
            if seglen == 1 && seq == f.nextseq && rv.window == 0 {
                a |= A_ZWP;
                break 'fwd;
            }
            if window == 0 && sfr == 0 {
                a |= A_ZERO_WIN;
            }
            if f.nextseq != 0 && gt(seq, f.nextseq) && fl & flags::RST == 0 {
                a |= A_LOST;
            }
            if seglen <= 1 && seq == f.nextseq.wrapping_sub(1) && sfr == 0 {
                a |= A_KEEP_ALIVE;
            }
            if seglen == 0
                && window != 0
                && window != f.window
                && seq == f.nextseq
                && ack == f.lastack
                && sfr == 0
            {
                a |= A_WIN_UPDATE;
            }
            if seglen > 0
                && rv.win_scale != -1
                && seq.wrapping_add(seglen) == rv.lastack.wrapping_add(rv.window)
                && sfr == 0
            {
                a |= A_WIN_FULL;
            }
            if seglen == 0
                && window != 0
                && window == f.window
                && seq == f.nextseq
                && ack == f.lastack
                && rv.lastsegmentflags & A_KEEP_ALIVE != 0
                && sfr == 0
            {
                a |= A_KA_ACK;
                break 'fwd;
            }
            if seglen == 0
                && window == 0
                && window == f.window
                && seq == f.nextseq
                && ack == f.lastack
                && rv.lastsegmentflags & A_ZWP != 0
                && sfr == 0
            {
                a |= A_ZWP_ACK;
                break 'fwd;
            }
            if seglen == 0
                && window != 0
                && window == f.window
                && seq == f.nextseq
                && ack == f.lastack
                && sfr == 0
            {
                let f = &mut c.dirs[d];
                f.dupacknum = if f.dupacknum == -1 {
                    1
                } else {
                    f.dupacknum + 1
                };
                a |= A_DUP_ACK;
                if tracing {
                    self.notes.push(format!("dup ACK #{}", f.dupacknum));
                }
            }
        }
        if ack != c.dirs[d].lastack {
            c.dirs[d].dupacknum = 0;
        }
        // ACKed unseen segment.
        if c.dirs[r].maxseqtobeacked != 0
            && gt(ack, c.dirs[r].maxseqtobeacked)
            && fl & flags::ACK != 0
        {
            let rv = &mut c.dirs[r];
            if lt(rv.maxseqtobeacked, rv.nextseq) {
                rv.maxseqtobeacked = rv.nextseq;
                a |= A_ACK_LOST;
            } else {
                if rv.dupacknum == 0 {
                    a |= A_ACK_LOST;
                }
                rv.dupacknum = -1;
            }
        }

        // Retransmission / fast retransmission / spurious / out-of-order.
        if (seglen > 0 || synfin) && a & A_KEEP_ALIVE == 0 {
            let (f, rv) = (&c.dirs[d], &c.dirs[r]);
            let mut not_advanced = f.nextseq != 0 && lt(seq, f.nextseq);
            if seglen > 1 && f.nextseq.wrapping_sub(1) == seq {
                not_advanced = false;
            }
            'class: {
                if seglen > 0 && rv.lastack != 0 && le(seq.wrapping_add(seglen), rv.lastack) {
                    a |= A_SPURIOUS;
                    break 'class;
                }
                let t = ts.wrapping_sub(rv.lastack_ts);
                if not_advanced && rv.dupacknum >= 2 && rv.lastack == seq && t < 20_000_000 {
                    a |= A_FAST;
                    break 'class;
                }
                let t = ts.wrapping_sub(f.nextseq_ts);
                let ooo_thres = c.first_rtt.filter(|&v| v > 0).unwrap_or(3_000_000);
                if not_advanced && t < ooo_thres {
                    let end = seq.wrapping_add(seglen).wrapping_add(u32::from(synfin));
                    if f.nextseq != end || f.lastacklen == 0 {
                        a |= A_OOO;
                        break 'class;
                    }
                }
                if not_advanced {
                    a |= A_RETRANS;
                    let mut r0 = (f.nextseq_ts, 0u64);
                    for u in f.unacked.iter() {
                        if !lt(u.seq, seq) {
                            r0 = (u.ts, u.frame);
                            break;
                        }
                    }
                    rto = Some(r0);
                }
            }
        }

        // Update the forward state (after classification, as Wireshark does).
        let mut nextseq = seq.wrapping_add(seglen);
        if seglen > 0 || synfin {
            if synfin {
                nextseq = nextseq.wrapping_add(1);
            }
            let f = &mut c.dirs[d];
            if f.unacked.len() >= MAX_UNACKED {
                f.unacked.pop_front();
            }
            // Kept sorted by arrival; Wireshark pushes at the head and scans all, we push at the
            // back and scan from the oldest.
            f.unacked.push_back(Unacked {
                frame,
                seq,
                nextseq,
                ts,
            });
        }
        {
            let f = &mut c.dirs[d];
            let inc = u32::from(synfin);
            if f.nextseq == 0 || gt(nextseq, f.nextseq.wrapping_add(inc)) {
                f.lastacklen = seglen;
            }
            if (gt(nextseq, f.nextseq) || f.nextseq == 0) && a & A_ZWP == 0 {
                f.nextseq = nextseq;
                f.nextseq_ts = ts;
            }
            if (seq == f.maxseqtobeacked || f.maxseqtobeacked == 0) && a & A_ZWP == 0 {
                f.maxseqtobeacked = f.nextseq;
            }
            f.window = window;
            f.lastack = ack;
            f.lastack_ts = ts;
            f.lastsegmentflags = a;
        }
        // Drop what this ACK covers from the reverse list.
        if fl & flags::ACK != 0 {
            let rv = &mut c.dirs[r];
            rv.unacked.retain_mut(|u| {
                if gt(ack, u.seq) && lt(ack, u.nextseq) {
                    u.seq = ack;
                    true
                } else {
                    gt(u.nextseq, ack)
                }
            });
        }

        if a & (A_RETRANS | A_FAST | A_SPURIOUS | A_OOO) != 0 {
            c.dirs[d].last_rexmit_ts = Some(ts);
        }
        // Count.
        let k = &mut c.counts;
        if a & A_RETRANS != 0 {
            k.retransmission += 1;
        }
        if a & A_FAST != 0 {
            k.fast_retransmission += 1;
        }
        if a & A_SPURIOUS != 0 {
            k.spurious_retransmission += 1;
        }
        if a & A_OOO != 0 {
            k.out_of_order += 1;
        }
        if a & A_DUP_ACK != 0 {
            k.duplicate_ack += 1;
        }
        if a & A_ZERO_WIN != 0 {
            k.zero_window += 1;
        }
        if a & A_WIN_FULL != 0 {
            k.window_full += 1;
        }
        if a & A_LOST != 0 {
            k.lost_segment += 1;
        }
        if a & A_KEEP_ALIVE != 0 {
            k.keep_alive += 1;
        }
        if tracing {
            for (bit, n) in [
                (A_FAST, "fast retransmission"),
                (A_SPURIOUS, "spurious retransmission"),
                (A_OOO, "out-of-order"),
                (A_ZERO_WIN, "zero window"),
                (A_WIN_FULL, "window full"),
                (A_LOST, "previous segment not captured"),
                (A_KEEP_ALIVE, "keep-alive"),
                (A_WIN_UPDATE, "window update"),
                (A_ZWP, "zero-window probe"),
            ] {
                if a & bit != 0 {
                    self.notes.push(n.to_string());
                }
            }
        }
        if let Some((t0, f0)) = rto {
            let lost = ts.saturating_sub(t0);
            if tracing {
                self.notes.push(format!(
                    "retransmission (timer, {} after #{f0})",
                    fmt_ms(lost)
                ));
            }
            self.stall(c, StallKind::RtoRetransmission, frame, f0, lost, false);
        }
        a
    }

    /// Was this new data segment released by a delayed ACK, or by the cork timer?
    fn detect_release(
        &mut self,
        c: &mut Conn,
        d: usize,
        frame: u64,
        ts: u64,
        seglen: u32,
        tracing: bool,
    ) {
        let r = 1 - d;
        let rtt_to_sender = if d == 1 {
            c.rtt_to_server
        } else {
            c.rtt_to_client
        };
        let rtt_to_peer = if d == 1 {
            c.rtt_to_client
        } else {
            c.rtt_to_server
        };
        let release_window = rtt_to_sender.map_or(2_000_000, |v| 2 * v + 1_000_000);
        // Effective MSS of the sender: what the peer advertised, minus the timestamp option.
        let smss = match c.dirs[r].mss_opt {
            Some(m) => u32::from(m).saturating_sub(if c.dirs[d].timestamps { 12 } else { 0 }),
            // No handshake captured: the largest segment seen, but at least Ethernet's MSS.
            None => c.dirs[d].max_seg.max(1460),
        };
        let new_seg = DataSeg {
            ts,
            frame,
            len: seglen,
            end: 0,
        };
        let prev = c.dirs[d].last_data;
        c.dirs[d].last_data = Some(DataSeg {
            end: c.dirs[d].nextseq,
            ..new_seg
        });
        let Some(d1) = prev else { return };
        if c.dirs[d].last_rexmit_ts.is_some_and(|t| t >= d1.ts) {
            return;
        }
        let p = &c.dirs[r];
        let gap = ts.saturating_sub(d1.ts);
        // The peer's last packet: a pure ACK of exactly up to D1's end, after D1, no peer data
        // since D1, and this segment followed within a round trip to the sender.
        if p.last_pkt_pure_ack
            && p.last_pkt_ts >= d1.ts
            && p.last_data_ts <= d1.ts
            && p.last_pkt_ack == d1.end
            && ts.saturating_sub(p.last_pkt_ts) <= release_window
        {
            let ack_delay = p
                .last_pkt_ts
                .saturating_sub(d1.ts)
                .saturating_sub(rtt_to_peer.unwrap_or(0));
            if ack_delay >= DELACK_MIN_NS {
                let small = d1.len < smss && seglen < smss;
                let kind = if small {
                    StallKind::NagleDelayedAck
                } else {
                    StallKind::DelayedAck
                };
                let ack_frame = p.last_pkt_frame;
                if tracing {
                    self.notes.push(format!(
                        "<< STALL {}: held since #{} ({}), released by delayed ACK #{} ({} late)",
                        kind.label(),
                        d1.frame,
                        fmt_ms(gap),
                        ack_frame,
                        fmt_ms(ack_delay)
                    ));
                    if let Some(row) = self.ladder.iter_mut().rev().find(|r| r.frame == ack_frame) {
                        row.notes.push(format!(
                            "delayed ACK ({} after #{})",
                            fmt_ms(ack_delay),
                            d1.frame
                        ));
                    }
                }
                self.stall(c, kind, frame, d1.frame, gap, false);
                return;
            }
        }
        // Cork: small, ~200 ms after the previous data, nothing from the peer just before.
        if seglen < smss
            && (CORK_MIN_NS..=CORK_MAX_NS).contains(&gap)
            && ts.saturating_sub(c.dirs[r].last_pkt_ts) > release_window
            && c.dirs[r].last_data_ts <= d1.ts
        {
            if tracing {
                self.notes.push(format!(
                    "<< STALL TCP_CORK: {} after #{} with no trigger from the peer",
                    fmt_ms(gap),
                    d1.frame
                ));
            }
            self.stall(c, StallKind::Cork, frame, d1.frame, gap, false);
        }
    }

    fn transactions(
        &mut self,
        c: &mut Conn,
        d: usize,
        frame: u64,
        ts: u64,
        payload: &[u8],
        tracing: bool,
    ) {
        if d == 0 {
            if c.tx_state == TxState::Response {
                self.close_tx(c);
            }
            if c.tx_state == TxState::Idle {
                c.tx = Some(TxCur {
                    req_frame: frame,
                    req_start: ts,
                    req_last: ts,
                    resp_first: 0,
                    resp_last: 0,
                    resp_last_frame: 0,
                    http_request: http_request_line(payload).unwrap_or_default(),
                    http_status: None,
                    stall: None,
                    stall_lost: 0,
                    think: 0,
                });
                c.tx_state = TxState::Request;
            } else if let Some(t) = &mut c.tx {
                t.req_last = ts;
            }
        } else {
            match c.tx_state {
                TxState::Request => {
                    let rtt = c.rtt_to_server.unwrap_or(0);
                    let Some(t) = c.tx.as_mut() else { return };
                    t.resp_first = ts;
                    t.resp_last = ts;
                    t.resp_last_frame = frame;
                    t.http_status = http_status(payload);
                    t.think = ts.saturating_sub(t.req_last).saturating_sub(rtt);
                    let think = t.think;
                    let req_frame = t.req_frame;
                    c.tx_state = TxState::Response;
                    self.think_hist
                        .get_or_insert_with(LatencyHistogram::new)
                        .record(think.max(1));
                    if think >= THINK_MIN_NS {
                        if tracing {
                            self.notes.push(format!(
                                "<< STALL think time: server answered {} after the request",
                                fmt_ms(think)
                            ));
                        }
                        self.stall(c, StallKind::ThinkTime, frame, req_frame, think, false);
                    }
                }
                TxState::Response => {
                    if let Some(t) = &mut c.tx {
                        t.resp_last = ts;
                        t.resp_last_frame = frame;
                    }
                }
                TxState::Idle => {}
            }
        }
    }

    fn close_tx(&mut self, c: &mut Conn) {
        if let Some(t) = c.tx.take() {
            if c.tx_state == TxState::Response {
                let dur = t.resp_last.saturating_sub(t.req_start);
                self.tx_hist
                    .get_or_insert_with(LatencyHistogram::new)
                    .record(dur.max(1));
                self.tx_total += 1;
                c.tx_count += 1;
                if c.txs.len() < MAX_TX_KEPT {
                    c.txs.push(Transaction {
                        request_frame: t.req_frame,
                        last_response_frame: t.resp_last_frame,
                        duration_ns: dur,
                        think_ns: t.think,
                        http_request: t.http_request,
                        http_status: t.http_status,
                        stall: t.stall,
                        stall_lost_ns: t.stall_lost,
                    });
                }
            }
        }
        c.tx_state = TxState::Idle;
    }

    fn stall(
        &mut self,
        c: &mut Conn,
        kind: StallKind,
        frame: u64,
        since: u64,
        lost: u64,
        _tracing: bool,
    ) {
        c.stall_lost += lost;
        if let Some(t) = &mut c.tx {
            // The largest stall names the transaction's cause.
            if t.stall.is_none() || lost > t.stall_lost {
                t.stall = Some(kind);
            }
            t.stall_lost += lost;
        }
        let acc = &mut self.findings[kind.index()];
        acc.count += 1;
        acc.lost += lost;
        let ex = StallExample {
            conn: c.id,
            frame,
            since_frame: since,
            lost_ns: lost,
        };
        if acc.examples.len() < 5 {
            acc.examples.push(ex);
        } else if let Some(min) = acc.examples.iter_mut().min_by_key(|e| e.lost_ns) {
            if min.lost_ns < lost {
                *min = ex;
            }
        }
    }
}

impl Analyzer {
    fn summarise(&self, c: &Conn) -> ConnSummary {
        let capture_point = match (c.rtt_to_server, c.rtt_to_client) {
            (Some(s), Some(cl)) if s.saturating_mul(4) < cl => "server",
            (Some(s), Some(cl)) if cl.saturating_mul(4) < s => "client",
            (Some(_), Some(_)) => "middle",
            _ => "unknown",
        };
        ConnSummary {
            id: c.id,
            client: endpoint(c.client),
            server: endpoint(c.server),
            first_frame: c.first_frame,
            duration_ns: c.last_ts.saturating_sub(c.first_ts),
            frames: c.frames,
            bytes_to_server: c.dirs[0].bytes,
            bytes_to_client: c.dirs[1].bytes,
            handshake_rtt_ns: c.first_rtt,
            capture_point: capture_point.into(),
            counts: c.counts.clone(),
            transactions: c.txs.clone(),
            transaction_count: c.tx_count,
            stall_lost_ns: c.stall_lost,
            end: if c.rst {
                "rst".into()
            } else if c.dirs[0].fin && c.dirs[1].fin {
                "fin".into()
            } else {
                "open".into()
            },
        }
    }

    fn finalize(&mut self, mut c: Conn) {
        self.acc.close_tx(&mut c);
        self.counts.add(&c.counts);
        let traced = self.opts.trace_conn == Some(c.id);
        if traced {
            self.ladder_conn = Some(self.summarise(&c));
        }
        if self.opts.top == 0 {
            return;
        }
        if self.top.len() < self.opts.top {
            let s = self.summarise(&c);
            self.top.push(s);
        } else if let Some((mi, min)) = self
            .top
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| (s.stall_lost_ns, std::cmp::Reverse(s.id)))
        {
            if min.stall_lost_ns < c.stall_lost {
                let s = self.summarise(&c);
                self.top[mi] = s;
            }
        }
    }

    /// Close every open connection and build the result.
    pub fn finish(mut self) -> Analysis {
        let slots: Vec<usize> = self.table.drain().map(|(_, i)| i).collect();
        let mut slots = slots;
        // Finalize in connection order so the kept summaries are deterministic.
        slots.sort_by_key(|&i| self.slab[i].as_ref().map_or(u64::MAX, |c| c.id));
        for i in slots {
            self.retire(i);
        }
        let mut findings: Vec<Finding> = StallKind::ALL
            .iter()
            .filter(|k| self.acc.findings[k.index()].count > 0)
            .map(|&k| {
                let acc = &self.acc.findings[k.index()];
                let mut examples = acc.examples.clone();
                examples.sort_by(|a, b| b.lost_ns.cmp(&a.lost_ns).then(a.frame.cmp(&b.frame)));
                Finding {
                    kind: k,
                    title: k.label().into(),
                    count: acc.count,
                    lost_ns: acc.lost,
                    examples,
                    explanation: explain(k),
                }
            })
            .collect();
        findings.sort_by_key(|f| std::cmp::Reverse(f.lost_ns));
        let mut top = std::mem::take(&mut self.top);
        top.sort_by(|a, b| b.stall_lost_ns.cmp(&a.stall_lost_ns).then(a.id.cmp(&b.id)));
        let ladder = self.opts.trace_conn.map(|_| Ladder {
            conn: self.ladder_conn.take(),
            rows: std::mem::take(&mut self.acc.ladder),
        });
        Analysis {
            frames: self.frames,
            tcp_frames: self.tcp_frames,
            udp_frames: self.udp_frames,
            skipped: self.skipped,
            capture_span_ns: self
                .last_ts
                .saturating_sub(self.first_ts.unwrap_or(self.last_ts)),
            connections: self.next_id,
            peak_open_connections: self.peak_open,
            counts: self.counts,
            transactions: self.acc.tx_total,
            tx_hist: self.acc.tx_hist,
            think_hist: self.acc.think_hist,
            handshake_hist: self.acc.hs_hist,
            findings,
            top_connections: top,
            ladder,
        }
    }
}

/// The plain-language reasoning behind each detector.
pub fn explain(k: StallKind) -> String {
    match k {
        StallKind::NagleDelayedAck => "The sender wrote a response in pieces; Nagle held the second small piece until the first was \
ACKed, and the receiver delayed that ACK (Linux: 40 ms minimum, up to 200 ms). The first exchange of a connection escapes \
because the receiver starts in quick-ack mode; later ones stall once it switches to delayed ACKs. Fix: write the response in \
one call (writev), or set TCP_NODELAY on the sender; TCP_QUICKACK on the receiver only helps per read."
            .into(),
        StallKind::DelayedAck => "The sender waited for a delayed ACK with full-sized segments outstanding (congestion or receive \
window limit), so Nagle was not the cause. Larger windows or TCP_QUICKACK on the receiver avoid it."
            .into(),
        StallKind::Cork => "A small segment left ~200 ms after the previous data without any packet from the peer: the TCP_CORK \
timer flushed it. Uncork (setsockopt TCP_CORK 0) after the last write, or use MSG_MORE only on non-final writes."
            .into(),
        StallKind::RtoRetransmission => "A segment was resent after a timer (RTO or tail-loss probe) rather than after duplicate \
ACKs: the loss was only repaired after waiting. Look for loss on the path, or too few segments in flight for fast retransmit."
            .into(),
        StallKind::ZeroWindow => "The receiver's buffer was full (window 0) and the sender waited until it reopened: the \
receiving application did not read fast enough."
            .into(),
        StallKind::ThinkTime => "The server took this long to start answering after the request arrived (network round trip \
from the capture point already subtracted): time spent in the application, not the network."
            .into(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::packet::tests::eth_ipv4_tcp;
    use crate::packet::{LinkType, decode};

    struct Sim {
        a: Analyzer,
        frame: u64,
        cseq: u32,
        sseq: u32,
    }
    const C: [u8; 4] = [10, 0, 0, 1];
    const S: [u8; 4] = [10, 0, 0, 2];

    impl Sim {
        fn new() -> Self {
            Sim {
                a: Analyzer::new(AnalyzeOptions {
                    trace_conn: Some(0),
                    top: 10,
                }),
                frame: 0,
                cseq: 1000,
                sseq: 5000,
            }
        }
        fn pkt(&mut self, ms: f64, from_client: bool, fl: u8, payload: &[u8], opts: &[u8]) {
            self.frame += 1;
            let (src, dst, sp, dp, seq, ack) = if from_client {
                (C, S, 40000, 80, self.cseq, self.sseq)
            } else {
                (S, C, 80, 40000, self.sseq, self.cseq)
            };
            let f = eth_ipv4_tcp(src, dst, sp, dp, seq, ack, fl, 1000, opts, payload);
            let adv = payload.len() as u32 + u32::from(fl & (flags::SYN | flags::FIN) != 0);
            if from_client {
                self.cseq += adv;
            } else {
                self.sseq += adv;
            }
            let ts = (ms * 1e6) as u64;
            self.a.push(self.frame, ts, decode(LinkType::Ethernet, &f));
        }
        fn handshake(&mut self) {
            let mss = [2, 4, 0x05, 0xb4];
            self.pkt(0.0, true, flags::SYN, b"", &mss);
            self.pkt(0.1, false, flags::SYN | flags::ACK, b"", &mss);
            self.pkt(0.2, true, flags::ACK, b"", &[]);
        }
    }

    #[test]
    fn nagle_delayed_ack_is_flagged_and_first_is_not() {
        let mut s = Sim::new();
        s.handshake();
        let a = flags::ACK | flags::PSH;
        // Transaction 1: quick ACK → body follows at once.
        s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
        s.pkt(1.1, false, a, b"HTTP/1.1 200 OK\r\n", &[]);
        s.pkt(1.2, true, flags::ACK, b"", &[]);
        s.pkt(1.3, false, a, b"body", &[]);
        // Transaction 2: ACK delayed 40 ms → body released right after it.
        s.pkt(10.0, true, a, b"GET /2 HTTP/1.1\r\n\r\n", &[]);
        s.pkt(10.1, false, a, b"HTTP/1.1 200 OK\r\n", &[]);
        s.pkt(50.1, true, flags::ACK, b"", &[]);
        s.pkt(50.2, false, a, b"body", &[]);
        s.pkt(60.0, true, flags::ACK, b"", &[]);
        let r = s.a.finish();
        assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
        let f = &r.findings[0];
        assert_eq!(f.kind, StallKind::NagleDelayedAck);
        assert_eq!(f.count, 1);
        assert_eq!(f.examples[0].frame, 11);
        assert_eq!(f.examples[0].since_frame, 9);
        let conn = &r.top_connections[0];
        assert_eq!(conn.transactions.len(), 2);
        assert_eq!(conn.transactions[0].stall, None);
        assert_eq!(conn.transactions[1].stall, Some(StallKind::NagleDelayedAck));
        assert_eq!(conn.transactions[1].http_request, "GET /2 HTTP/1.1");
        assert_eq!(conn.transactions[1].http_status, Some(200));
        let ladder = r.ladder.unwrap();
        assert!(
            ladder
                .rows
                .iter()
                .any(|r| r.frame == 11 && r.notes.iter().any(|n| n.contains("STALL")))
        );
    }

    /// The same split response seen from either end of a 20 ms path: the rule uses the
    /// handshake to place the capture point, so both are flagged, and the time lost is the
    /// delayed-ACK wait as seen there.
    #[test]
    fn nagle_seen_from_client_side_and_server_side() {
        let mss = [2, 4, 0x05, 0xb4];
        let a = flags::ACK | flags::PSH;
        // (SYN-ACK time, ACK time, header, delayed ACK, body) as seen at the capture point.
        for (name, t) in [
            ("client side", [20.0, 20.01, 50.0, 90.0, 110.0]),
            ("server side", [0.01, 20.01, 30.01, 90.0, 90.02]),
        ] {
            let mut s = Sim::new();
            s.pkt(0.0, true, flags::SYN, b"", &mss);
            s.pkt(t[0], false, flags::SYN | flags::ACK, b"", &mss);
            s.pkt(t[1], true, flags::ACK, b"", &[]);
            // First exchange, quick ACK.
            s.pkt(t[1] + 1.0, true, a, b"GET /0 HTTP/1.1\r\n\r\n", &[]);
            s.pkt(t[1] + 2.0, false, a, b"HTTP/1.1 200 OK\r\n", &[]);
            s.pkt(t[1] + 3.0, true, flags::ACK, b"", &[]);
            s.pkt(t[1] + 3.1, false, a, b"body", &[]);
            // Second exchange, delayed ACK.
            s.pkt(t[2] - 5.0 + 100.0, true, a, b"GET /1 HTTP/1.1\r\n\r\n", &[]);
            s.pkt(t[2] + 100.0, false, a, b"HTTP/1.1 200 OK\r\n", &[]);
            s.pkt(t[3] + 100.0, true, flags::ACK, b"", &[]);
            s.pkt(t[4] + 100.0, false, a, b"body", &[]);
            let r = s.a.finish();
            let f: Vec<_> = r.findings.iter().map(|f| (f.kind, f.count)).collect();
            assert_eq!(f, vec![(StallKind::NagleDelayedAck, 1)], "{name}");
            let lost = r.findings[0].lost_ns as f64 / 1e6;
            assert!(
                (lost - (t[4] - t[2])).abs() < 0.01,
                "{name}: lost {lost} ms"
            );
            let cp = &r.top_connections[0].capture_point;
            assert_eq!(
                cp,
                if name == "client side" {
                    "client"
                } else {
                    "server"
                }
            );
        }
    }

    #[test]
    fn delayed_ack_without_nagle_when_segments_are_full() {
        let mut s = Sim::new();
        s.handshake();
        let a = flags::ACK;
        s.pkt(1.0, true, a | flags::PSH, b"GET /big HTTP/1.1\r\n\r\n", &[]);
        // Full-sized segment (MSS 1460): Nagle never holds it; the sender was window-limited.
        s.pkt(1.1, false, a, &[0u8; 1460], &[]);
        s.pkt(41.1, true, a, b"", &[]);
        s.pkt(41.2, false, a, &[0u8; 1460], &[]);
        let r = s.a.finish();
        assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
        assert_eq!(r.findings[0].kind, StallKind::DelayedAck);
    }

    #[test]
    fn cork_timer_flush() {
        let mut s = Sim::new();
        s.handshake();
        let a = flags::ACK | flags::PSH;
        s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
        s.pkt(1.1, false, a, &[1u8; 1460], &[]);
        s.pkt(1.2, true, flags::ACK, b"", &[]);
        // The corked tail leaves 200 ms later, with nothing from the client in between.
        s.pkt(201.1, false, a, &[1u8; 100], &[]);
        let r = s.a.finish();
        assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
        assert_eq!(r.findings[0].kind, StallKind::Cork);
        assert_eq!(r.findings[0].lost_ns, 200_000_000);
    }

    #[test]
    fn think_time_is_not_nagle() {
        let mut s = Sim::new();
        s.handshake();
        let a = flags::ACK | flags::PSH;
        s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
        s.pkt(41.0, true, flags::ACK, b"", &[]);
        s.pkt(101.0, false, a, b"HTTP/1.1 200 OK\r\n\r\nbody", &[]);
        s.pkt(141.0, true, flags::ACK, b"", &[]);
        let r = s.a.finish();
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].kind, StallKind::ThinkTime);
        assert!(r.findings[0].lost_ns > 99_000_000);
    }

    #[test]
    fn retransmission_classes() {
        let mut s = Sim::new();
        s.handshake();
        let a = flags::ACK | flags::PSH;
        s.pkt(1.0, false, a, &[1; 100], &[]);
        // Timer retransmission of the same bytes 300 ms later.
        s.sseq -= 100;
        s.pkt(301.0, false, a, &[1; 100], &[]);
        s.pkt(301.1, true, flags::ACK, b"", &[]);
        // Spurious: the same bytes again after they were ACKed.
        s.sseq -= 100;
        s.pkt(600.0, false, a, &[1; 100], &[]);
        let r = s.a.finish();
        assert_eq!(r.counts.retransmission, 1);
        assert_eq!(r.counts.spurious_retransmission, 1);
        assert_eq!(r.counts.tshark_retransmission(), 2);
        assert!(
            r.findings
                .iter()
                .any(|f| f.kind == StallKind::RtoRetransmission && f.lost_ns == 300_000_000)
        );
    }

    #[test]
    fn fast_retransmission_after_dup_acks() {
        let mut s = Sim::new();
        s.handshake();
        let a = flags::ACK;
        let base = s.sseq;
        s.pkt(1.0, false, a, &[1; 100], &[]); // lost in the network, but captured here
        s.pkt(1.01, false, a, &[1; 100], &[]);
        s.pkt(1.02, false, a, &[1; 100], &[]);
        s.pkt(1.03, false, a, &[1; 100], &[]);
        let end = s.sseq;
        // The receiver repeats its ACK of `base` three times (all duplicates of the handshake ACK).
        s.sseq = base;
        s.pkt(1.5, true, flags::ACK, b"", &[]);
        s.pkt(1.6, true, flags::ACK, b"", &[]);
        s.pkt(1.7, true, flags::ACK, b"", &[]);
        s.pkt(1.8, false, a, &[1; 100], &[]);
        s.sseq = end;
        let r = s.a.finish();
        assert_eq!(r.counts.duplicate_ack, 3);
        assert_eq!(r.counts.fast_retransmission, 1);
        assert_eq!(r.counts.retransmission, 0);
    }

    #[test]
    fn zero_window_stall() {
        let mut s = Sim::new();
        s.handshake();
        s.pkt(1.0, false, flags::ACK, &[1; 100], &[]);
        s.frame += 1;
        let f = eth_ipv4_tcp(C, S, 40000, 80, s.cseq, s.sseq, flags::ACK, 0, &[], b"");
        s.a.push(s.frame, 2_000_000, decode(LinkType::Ethernet, &f));
        s.pkt(502.0, true, flags::ACK, b"", &[]);
        let r = s.a.finish();
        assert_eq!(r.counts.zero_window, 1);
        let z = r
            .findings
            .iter()
            .find(|f| f.kind == StallKind::ZeroWindow)
            .unwrap();
        assert_eq!(z.lost_ns, 500_000_000);
    }

    #[test]
    fn closed_connections_are_dropped() {
        let mut a = Analyzer::default();
        let mut frame = 0;
        for i in 0..200u16 {
            let sp = 10000 + i;
            let t0 = u64::from(i) * 3_000_000_000;
            for (k, (src, dst, s, d, fl)) in [
                (C, S, sp, 80, flags::SYN),
                (S, C, 80, sp, flags::SYN | flags::ACK),
                (C, S, sp, 80, flags::ACK | flags::FIN),
                (S, C, 80, sp, flags::ACK | flags::FIN),
            ]
            .into_iter()
            .enumerate()
            {
                frame += 1;
                let f = eth_ipv4_tcp(src, dst, s, d, 1, 1, fl, 100, &[], b"");
                a.push(frame, t0 + k as u64, decode(LinkType::Ethernet, &f));
            }
            a.sweep(t0);
        }
        assert!(a.open_connections() <= 2, "{}", a.open_connections());
        let r = a.finish();
        assert_eq!(r.connections, 200);
    }
}
