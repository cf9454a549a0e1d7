//! The result model of `latscope analyze`: one serde struct is both the `--json` document and
//! what the human rendering is made from.

use latscope_core::model::Meta;
use latscope_core::summary::Summary;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::packet::SkipReason;

/// The kinds of stall the analyzer recognises.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum StallKind {
    /// A small segment held by the sender's Nagle algorithm until the peer's delayed ACK.
    NagleDelayedAck,
    /// The sender waited for a delayed ACK although Nagle was not the cause (full-sized
    /// segments: congestion or receive window).
    DelayedAck,
    /// A small segment sent ~200 ms after the previous one without any trigger from the peer:
    /// the TCP_CORK timer.
    Cork,
    /// A retransmission after a timer expired (RTO or tail-loss probe), not after duplicate ACKs.
    RtoRetransmission,
    /// The receiver advertised a zero window; the sender waited until it reopened.
    ZeroWindow,
    /// The server took long to start its response (after subtracting the network round trip).
    ThinkTime,
    /// A sender on a long path limited by its congestion window: it sends a window, then waits
    /// one round trip for the ACKs before the next one leaves.
    CwndLimited,
    /// A connection set-up waited for a resent SYN or SYN-ACK (the first one was lost or
    /// dropped, e.g. by a full accept queue): a retransmission timeout of the handshake.
    SynRetransmission,
    /// The sender filled the receiver's advertised window (Wireshark's
    /// `tcp.analysis.window_full`) and waited for it to open: the receiver's buffer (rcvbuf,
    /// `tcp_rmem`, window scaling) limited the transfer.
    ReceiveWindowFull,
    /// Full-size segments resent again and again and never acknowledged while smaller ones
    /// from the same sender pass: a path MTU black hole (ICMP "fragmentation needed" lost).
    PmtuBlackHole,
    /// The sender stopped with its windows open and went on only when the peer's delayed ACK
    /// reached it: what it had sent never arrived —
    /// dropped before the capture point (by its own netfilter or a policer, which TCP retries on
    /// the next ACK or its timer, or lost on the way and resent unseen).
    UnseenLoss,
}

impl StallKind {
    /// Every kind, in a fixed order.
    pub const ALL: [StallKind; 11] = [
        StallKind::NagleDelayedAck,
        StallKind::DelayedAck,
        StallKind::Cork,
        StallKind::RtoRetransmission,
        StallKind::ZeroWindow,
        StallKind::ThinkTime,
        StallKind::CwndLimited,
        StallKind::SynRetransmission,
        StallKind::ReceiveWindowFull,
        StallKind::PmtuBlackHole,
        StallKind::UnseenLoss,
    ];

    /// Short human label.
    pub fn label(self) -> &'static str {
        match self {
            StallKind::NagleDelayedAck => "Nagle x delayed ACK",
            StallKind::DelayedAck => "delayed ACK (no Nagle)",
            StallKind::Cork => "TCP_CORK timer",
            StallKind::RtoRetransmission => "retransmission timeout",
            StallKind::ZeroWindow => "zero-window stall",
            StallKind::ThinkTime => "application think time",
            StallKind::CwndLimited => "cwnd-limited: waits one RTT per window",
            StallKind::SynRetransmission => "connection set-up waited for a resent SYN",
            StallKind::ReceiveWindowFull => "receive window full",
            StallKind::PmtuBlackHole => "path MTU black hole",
            StallKind::UnseenLoss => "segments lost before the capture point",
        }
    }

    /// Index into per-kind arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One place a stall happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StallExample {
    /// Connection index (like Wireshark's `tcp.stream`).
    pub conn: u64,
    /// Frame number where the stall ended (the released segment, the retransmission, …).
    pub frame: u64,
    /// Frame number where it began (the held segment, the zero window, the request).
    pub since_frame: u64,
    /// Time lost.
    pub lost_ns: u64,
}

/// One stall detector's result, ranked in [`Analysis::findings`] by time lost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StallFinding {
    /// Which detector.
    pub kind: StallKind,
    /// Human label.
    pub title: String,
    /// How many stalls.
    pub count: u64,
    /// Total time lost.
    pub lost_ns: u64,
    /// The largest examples (up to 5, or `--examples N`).
    pub examples: Vec<StallExample>,
    /// Why the detector believes this, in plain words.
    pub explanation: String,
}

/// Wireshark-style per-segment analysis counts (`tcp.analysis.*`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TcpCounts {
    /// Plain retransmissions (timer driven).
    pub retransmission: u64,
    /// Fast retransmissions (after ≥ 2 duplicate ACKs, within 20 ms).
    pub fast_retransmission: u64,
    /// Retransmissions of data the receiver had already acknowledged.
    pub spurious_retransmission: u64,
    /// Segments below the highest sequence seen, too soon to be a retransmission.
    pub out_of_order: u64,
    /// Duplicate ACKs.
    pub duplicate_ack: u64,
    /// Zero window advertisements.
    pub zero_window: u64,
    /// Segments that filled the receiver's advertised window.
    pub window_full: u64,
    /// Gaps: a segment beyond the next expected sequence (previous segment not captured).
    pub lost_segment: u64,
    /// Keep-alives.
    pub keep_alive: u64,
}

impl Skipped {
    /// Count one frame skipped for `r`.
    pub fn add(&mut self, r: SkipReason) {
        match r {
            SkipReason::UnknownLinkType => self.unknown_link_type += 1,
            SkipReason::NotIp => self.not_ip += 1,
            SkipReason::NotTcpUdp => self.not_tcp_udp += 1,
            SkipReason::Truncated => self.truncated += 1,
            SkipReason::Malformed => self.malformed += 1,
            SkipReason::Fragment => self.fragment += 1,
            SkipReason::Encrypted => self.encrypted += 1,
        }
    }
}

impl TcpCounts {
    /// What tshark's `tcp.analysis.retransmission` filter matches: plain, fast and spurious
    /// retransmissions all carry that expert item.
    pub fn tshark_retransmission(&self) -> u64 {
        self.retransmission + self.fast_retransmission + self.spurious_retransmission
    }

    /// Add another set of counts.
    pub fn add(&mut self, o: &TcpCounts) {
        self.retransmission += o.retransmission;
        self.fast_retransmission += o.fast_retransmission;
        self.spurious_retransmission += o.spurious_retransmission;
        self.out_of_order += o.out_of_order;
        self.duplicate_ack += o.duplicate_ack;
        self.zero_window += o.zero_window;
        self.window_full += o.window_full;
        self.lost_segment += o.lost_segment;
        self.keep_alive += o.keep_alive;
    }
}

/// One request/response exchange.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Transaction {
    /// Frame of the first request byte.
    pub request_frame: u64,
    /// Frame of the last response byte.
    pub last_response_frame: u64,
    /// Request start to last response byte.
    pub duration_ns: u64,
    /// Last request byte to first response byte, minus the network round trip to the server
    /// as seen from the capture point.
    pub think_ns: u64,
    /// `GET /path HTTP/1.1` for HTTP/1, empty otherwise.
    pub http_request: String,
    /// HTTP status code, if the response was HTTP/1.
    pub http_status: Option<u16>,
    /// The stall that hit this transaction, if any.
    pub stall: Option<StallKind>,
    /// Time the stall(s) cost this transaction.
    pub stall_lost_ns: u64,
}

/// One connection's summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConnSummary {
    /// Index in order of first appearance (like Wireshark's `tcp.stream`).
    pub id: u64,
    /// "ip:port" of the side that sent the SYN (or the higher port if no SYN was captured).
    pub client: String,
    /// "ip:port" of the other side.
    pub server: String,
    /// First frame of the connection.
    pub first_frame: u64,
    /// Time from the first to the last frame.
    pub duration_ns: u64,
    /// Frames.
    pub frames: u64,
    /// Payload bytes client → server.
    pub bytes_to_server: u64,
    /// Payload bytes server → client.
    pub bytes_to_client: u64,
    /// SYN to the ACK of the SYN-ACK (Wireshark's iRTT), when the handshake was captured.
    pub handshake_rtt_ns: Option<u64>,
    /// Where the capture was taken, judged from the handshake: "client", "server" or "middle".
    pub capture_point: String,
    /// Analysis counts.
    pub counts: TcpCounts,
    /// Transactions kept, in order: the 16 that lost the most time (the first 256 for the
    /// connection drawn with `--conn`).
    pub transactions: Vec<Transaction>,
    /// Number of transactions (including any not kept in the list).
    pub transaction_count: u64,
    /// Time lost to stalls.
    pub stall_lost_ns: u64,
    /// How the connection ended: "fin", "rst" or "open".
    pub end: String,
}

/// One line of the `--conn N` ladder.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LadderRow {
    /// Frame number.
    pub frame: u64,
    /// Time since the connection's first frame.
    pub t_ns: u64,
    /// True when the client sent it.
    pub from_client: bool,
    /// Flags, e.g. "SYN,ACK".
    pub flags: String,
    /// Relative sequence number.
    pub seq: u32,
    /// Relative acknowledgement number.
    pub ack: u32,
    /// Payload length.
    pub len: u32,
    /// Scaled window.
    pub win: u32,
    /// Analysis and stall notes.
    pub notes: Vec<String>,
}

/// The `--conn N` ladder.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Ladder {
    /// The connection.
    pub conn: Option<ConnSummary>,
    /// Its frames (up to 100 000).
    pub rows: Vec<LadderRow>,
}

/// Frames that were not analysed, by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Skipped {
    /// Unknown link-layer type.
    pub unknown_link_type: u64,
    /// Not IP.
    pub not_ip: u64,
    /// IP but neither TCP nor UDP.
    pub not_tcp_udp: u64,
    /// A header cut short by the snap length or by damage.
    pub truncated: u64,
    /// An impossible header field.
    pub malformed: u64,
    /// Non-first IP fragments.
    pub fragment: u64,
    /// Encrypted 802.11 frames (the Protected bit: WEP/WPA/WPA2), unreadable without keys.
    #[serde(default)]
    pub encrypted: u64,
}

/// What the capture itself got wrong, found up front, once, before any detector looks: the
/// evidence the detectors check before they claim anything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CaptureQuality {
    /// Frames that repeat the same side's previous segment exactly (the same IPv4
    /// identification, or for IPv6 the same sequence, acknowledgement, window and TCP
    /// timestamp within 1 ms): one packet captured twice (two VLANs, a router's hop with the
    /// TTL one lower). The sequence analysis counts them as tshark does; detectors skip them.
    pub duplicate_frames: u64,
    /// Frames stamped earlier than the frame before them (merged or reordered captures): no
    /// detector times a gap across them.
    pub time_backwards: u64,
    /// Connections of which one direction only was captured: no detector that needs the
    /// peer's ACKs or requests (all but zero window) judged them.
    pub one_way_connections: u64,
    /// Connections with segments missing from the capture (Wireshark's "previous segment not
    /// captured", or an ACK for data never seen): their transactions are not timed and no
    /// release is credited across the gap.
    pub connections_with_gaps: u64,
    /// Connections whose handshake was not captured: no round-trip time, so no think time,
    /// cork or cwnd-limited finding on them.
    pub connections_without_handshake: u64,
}

impl CaptureQuality {
    /// Add another set of counts.
    pub fn add(&mut self, o: &CaptureQuality) {
        self.duplicate_frames += o.duplicate_frames;
        self.time_backwards += o.time_backwards;
        self.one_way_connections += o.one_way_connections;
        self.connections_with_gaps += o.connections_with_gaps;
        self.connections_without_handshake += o.connections_without_handshake;
    }
}

/// A path MTU black hole's figures: full-size segments of one sender resent and never
/// acknowledged while its smaller ones were.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PmtuEvidence {
    /// Connection index.
    pub conn: u64,
    /// "ip:port" of the sender whose large segments were lost.
    pub sender: String,
    /// Payload bytes of the segment that never got through.
    pub lost_segment_bytes: u32,
    /// IP + TCP header bytes on it: the IP packet was `lost_segment_bytes` + this.
    pub header_bytes: u32,
    /// How often it was resent.
    pub resends: u32,
    /// The largest segment of the same sender that was acknowledged (0: none carried data).
    pub largest_acked_bytes: u32,
    /// The MSS the receiver advertised in its SYN, if captured.
    pub advertised_mss: Option<u16>,
    /// Frame of the first transmission of the lost segment.
    pub first_frame: u64,
}

/// What the analyzer found in the frames: the body of the `latscope analyze` result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Analysis {
    /// Frames read.
    pub frames: u64,
    /// TCP frames analysed.
    pub tcp_frames: u64,
    /// UDP frames seen.
    pub udp_frames: u64,
    /// Frames not analysed.
    pub skipped: Skipped,
    /// First to last frame timestamp.
    pub capture_span_ns: u64,
    /// TCP connections seen.
    pub connections: u64,
    /// Highest number of connections tracked at once (memory is proportional to it).
    pub peak_open_connections: u64,
    /// Totals of the per-segment analysis.
    pub counts: TcpCounts,
    /// Transactions found.
    pub transactions: u64,
    /// Transaction durations (request start to last response byte).
    pub transaction_time: Option<Summary>,
    /// Server think time.
    pub think_time: Option<Summary>,
    /// Handshake RTTs.
    pub handshake_rtt: Option<Summary>,
    /// Stall detectors that fired, ranked by time lost (largest first).
    pub findings: Vec<StallFinding>,
    /// Resent SYNs and SYN-ACKs: what the handshakes waited.
    #[serde(default)]
    pub handshake_resends: crate::handshake::HandshakeResends,
    /// What the capture itself got wrong (duplicates, time going back, one direction, gaps),
    /// found once for every detector.
    #[serde(default)]
    pub capture_quality: CaptureQuality,
    /// The figures of the worst path MTU black hole found, if any.
    #[serde(default)]
    pub pmtu_black_hole: Option<PmtuEvidence>,
    /// The connections that lost the most time (up to `--top`).
    pub top_connections: Vec<ConnSummary>,
    /// The `--conn N` ladder, when asked for.
    pub ladder: Option<Ladder>,
}

impl Analysis {
    /// Frames were read but none could be decoded down to IP (unknown link type, not IP,
    /// truncated or malformed headers): nothing was analysed, which is not "no stalls".
    pub fn nothing_readable(&self) -> bool {
        let k = &self.skipped;
        self.frames > 0
            && self.tcp_frames == 0
            && self.udp_frames == 0
            && k.not_tcp_udp == 0
            && k.fragment == 0
    }
}

/// The whole `latscope analyze` result: where the frames came from, the analysis, warnings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AnalyzeReport {
    /// Who and when.
    pub meta: Meta,
    /// The file (or "live:IFACE").
    pub source: String,
    /// "pcap", "pcapng" or "live".
    pub format: String,
    /// What was found (its fields appear at the top level of the JSON document).
    #[serde(flatten)]
    pub analysis: Analysis,
    /// Things the reader should know (truncated file, skipped blocks …).
    pub warnings: Vec<String>,
}

/// The `latscope capture` result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CaptureReport {
    /// Who and when.
    pub meta: Meta,
    /// Interface captured on.
    pub interface: String,
    /// Output file ("-" for stdout).
    pub file: String,
    /// The filter expression ("" = everything).
    pub filter: String,
    /// "kernel (classic BPF, N instructions)" or "user space".
    pub filter_mode: String,
    /// Link type written to the file (pcap LINKTYPE_ number).
    pub link_type: u32,
    /// Bytes kept per packet.
    pub snaplen: u32,
    /// Packets written.
    pub packets: u64,
    /// Captured bytes written.
    pub bytes: u64,
    /// Packets the kernel's socket received (after the filter).
    pub kernel_received: u64,
    /// Packets the kernel dropped because the ring was full.
    pub kernel_drops: u64,
    /// Wall time.
    pub duration_ns: u64,
    /// Stopped by Ctrl-C.
    pub interrupted: bool,
}

impl latscope_core::render::Human for CaptureReport {
    fn render_human(&self, out: &mut latscope_core::render::Page) {
        use latscope_core::units::count;
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "{} captured on {} in {:.1}s ({}) -> {}",
            count(self.packets, "packet"),
            self.interface,
            self.duration_ns as f64 / 1e9,
            latscope_core::units::format_bytes(self.bytes as f64),
            self.file
        );
        let _ = writeln!(
            out,
            "{} received by filter ({}), {} dropped by kernel",
            count(self.kernel_received, "packet"),
            self.filter_mode,
            self.kernel_drops
        );
        if self.kernel_drops > 0 {
            let _ = writeln!(
                out,
                "  warning: the ring overflowed; use a larger --buffer, a narrower filter or a smaller --snaplen"
            );
        }
    }
}
