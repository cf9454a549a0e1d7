//! The result model of `latscope analyze` (the `--json` contract): stall findings, per-segment
//! counts, transactions, connections, the `--conn N` ladder and what the capture itself got
//! wrong. Plain data: the wire analyzer (`latscope_wire::analyze`) fills it, `render::analyze`
//! and the HTML report read it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::Meta;
use crate::model::diagnose::RuleId;
use crate::named::registry_enum;
use crate::summary::Summary;

/// Why a frame could not be decoded down to TCP/UDP. Counted as a skip, never fatal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// The capture's link type is not one we decode.
    UnknownLinkType,
    /// Not IPv4/IPv6 (ARP, LLDP, …).
    NotIp,
    /// Neither TCP nor UDP.
    NotTcpUdp,
    /// Cut short: a header does not fit in the captured bytes (snap length, corruption).
    Truncated,
    /// A header field is impossible (IHL < 5, TCP data offset < 5, bad version).
    Malformed,
    /// An IPv4 fragment other than the first: no transport header.
    Fragment,
    /// An 802.11 frame with the Protected bit (WEP/WPA/WPA2): its payload is encrypted and
    /// cannot be read without the keys.
    Encrypted,
}

registry_enum! {
/// The kinds of stall the analyzer recognises.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum StallKind {
    /// A small segment held by the sender's Nagle algorithm until the peer's delayed ACK.
    NagleDelayedAck = "nagle_delayed_ack",
    /// The sender waited for a delayed ACK although Nagle was not the cause (full-sized
    /// segments: congestion or receive window).
    DelayedAck = "delayed_ack",
    /// A small segment sent ~200 ms after the previous one without any trigger from the peer:
    /// the TCP_CORK timer.
    Cork = "cork",
    /// A retransmission after a timer expired (RTO or tail-loss probe), not after duplicate ACKs.
    RtoRetransmission = "rto_retransmission",
    /// The receiver advertised a zero window; the sender waited until it reopened.
    ZeroWindow = "zero_window",
    /// The server took long to start its response (after subtracting the network round trip).
    ThinkTime = "think_time",
    /// A sender on a long path limited by its congestion window: it sends a window, then waits
    /// one round trip for the ACKs before the next one leaves.
    CwndLimited = "cwnd_limited",
    /// A connection set-up waited for a resent SYN or SYN-ACK (the first one was lost or
    /// dropped, e.g. by a full accept queue): a retransmission timeout of the handshake.
    SynRetransmission = "syn_retransmission",
    /// The sender filled the receiver's advertised window (Wireshark's
    /// `tcp.analysis.window_full`) and waited for it to open: the receiver's buffer (rcvbuf,
    /// `tcp_rmem`, window scaling) limited the transfer.
    ReceiveWindowFull = "receive_window_full",
    /// Full-size segments resent again and again and never acknowledged while smaller ones
    /// from the same sender pass: a path MTU black hole (ICMP "fragmentation needed" lost).
    PmtuBlackHole = "pmtu_black_hole",
    /// The sender stopped with its windows open and went on only when the peer's delayed ACK
    /// reached it: what it had sent never arrived —
    /// dropped before the capture point (by its own netfilter or a policer, which TCP retries on
    /// the next ACK or its timer, or lost on the way and resent unseen).
    UnseenLoss = "unseen_loss",
}
}

impl StallKind {
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

    /// The plain-language reasoning behind the detector, shown with its finding: what the
    /// packets showed and what fixes it.
    pub fn explanation(self) -> &'static str {
        match self {
            StallKind::NagleDelayedAck => {
                "The sender wrote a response in pieces; Nagle held the second small piece until the first was \
    ACKed, and the receiver delayed that ACK (Linux: 40 ms minimum, up to 200 ms). The first exchange of a connection escapes \
    because the receiver starts in quick-ack mode; later ones stall once it switches to delayed ACKs. Fix: write the response in \
    one call (writev), or set TCP_NODELAY on the sender; TCP_QUICKACK on the receiver only helps per read."
            }
            StallKind::DelayedAck => {
                "The sender waited for a delayed ACK with full-sized segments outstanding (congestion or receive \
    window limit), so Nagle was not the cause. Larger windows or TCP_QUICKACK on the receiver avoid it."
            }
            StallKind::Cork => {
                "A small segment left ~200 ms after the previous data without any packet from the peer: the TCP_CORK \
    timer flushed it. Uncork (setsockopt TCP_CORK 0) after the last write, or use MSG_MORE only on non-final writes."
            }
            StallKind::RtoRetransmission => {
                "A segment was resent after a timer (RTO or tail-loss probe) rather than after duplicate \
    ACKs: the loss was only repaired after waiting. Look for loss on the path, or too few segments in flight for fast retransmit."
            }
            StallKind::ZeroWindow => {
                "The receiver's buffer was full (window 0) and the sender waited until it reopened: the \
    receiving application did not read fast enough."
            }
            StallKind::ThinkTime => {
                "The server took this long to start answering after the request arrived (network round trip \
    from the capture point already subtracted): time spent in the application, not the network."
            }
            StallKind::CwndLimited => {
                "The sender had a full window in flight, stopped, and its next segments left only as the \
    ACKs for that window reached it, one round trip later: its congestion window, not the application or a timer, set the pace. \
    On a long path each window costs a whole round trip. A larger initial window, a congestion control that grows faster \
    (BBR), fewer round trips per transfer (connection reuse, larger responses) or a shorter path help."
            }
            StallKind::SynRetransmission => {
                "A SYN (or SYN-ACK) got no answer and was sent again after the handshake's \
    retransmission timeout (Linux: 1 s, then 2 s, 4 s ...): the connection set-up waited that long before any request could \
    leave. A full accept queue drops SYNs this way (nstat ListenOverflows/ListenDrops on the server: raise the listen backlog, \
    net.core.somaxconn, or accept faster); otherwise a filter, a SYN-flood guard or loss on the path."
            }
            StallKind::ReceiveWindowFull => {
                "The sender filled the receiver's advertised window (Wireshark: window full) and had to \
    wait for the receiver to ACK and open it again: the receiver's buffer limited the transfer, not the path or the sender. \
    Raise the receiver's buffer (SO_RCVBUF, or net.ipv4.tcp_rmem's maximum), keep window scaling on, and read faster."
            }
            StallKind::PmtuBlackHole => {
                "Full-size segments were resent again and again and never acknowledged while smaller ones \
    from the same sender got through: a link on the path has a smaller MTU and the ICMP \"fragmentation needed\" (IPv6: \
    \"packet too big\") that should tell the sender is filtered. Let that ICMP through, clamp the MSS on the router \
    (iptables -t mangle ... TCPMSS --clamp-mss-to-pmtu), or enable net.ipv4.tcp_mtu_probing=1 on the sender."
            }
            StallKind::UnseenLoss => {
                "The sender stopped with less in flight than it had already sent at once on this connection \
    and room in the receiver's window, and went on only when the receiver's (delayed) ACK reached it or, with everything \
    acknowledged, when its own retransmission timer sent one segment after numbering packets the capture never saw (its \
    IPv4 identification skipped them). Neither window held it back, Nagle holds no full segment and an application writes \
    on its own clock, not the ACK's: what it sent was lost before the capture point, and TCP sent it again on the next ACK or its timer without the capture seeing a \
    retransmission (a drop in the sender's own netfilter OUTPUT path or a policer fails the send locally; a tail lost on the \
    path is resent unseen). Look for drops on the sender's host (nstat IpOutRequests vs IpOutTransmits, nft/iptables \
    counters, tc -s qdisc) and along the path towards the receiver."
            }
        }
    }

    /// The diagnose rule that names the same cause, if any. A stall is one pattern in one
    /// capture, a rule a cause judged from a whole run's evidence (of which the capture's
    /// stalls are one part), so the names need not agree: both window stalls are the
    /// receiver's buffer, both losses `retransmissions`; cork and cwnd-limited pacing have no rule.
    pub const fn rule(self) -> Option<RuleId> {
        Some(match self {
            StallKind::NagleDelayedAck => RuleId::NagleDelayedAck,
            StallKind::DelayedAck => RuleId::DelayedAck,
            StallKind::Cork | StallKind::CwndLimited => return None,
            StallKind::RtoRetransmission | StallKind::UnseenLoss => RuleId::Retransmissions,
            StallKind::ZeroWindow | StallKind::ReceiveWindowFull => RuleId::ReceiveWindowLimited,
            StallKind::ThinkTime => RuleId::ThinkTime,
            StallKind::SynRetransmission => RuleId::SlowHandshake,
            StallKind::PmtuBlackHole => RuleId::PmtuBlackHole,
        })
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

/// Why the capture could not decide a stall a detector saw the shape of: the evidence that
/// would prove or refute it is not in the capture.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Undecided {
    /// Packets are missing from the capture (one side echoed TCP timestamps of the other's
    /// packets never captured): the packet whose absence the claim rests on may have been
    /// sent, and received, unseen.
    CaptureMissedPackets,
    /// The server's acknowledgement of the request arrived late and its answer right after:
    /// the request or the acknowledgement was held on the way, or the server was busy before
    /// it acknowledged; the capture cannot tell which.
    AckAndAnswerLate,
    /// The sender's IPv4 identification does not count its packets (zero, random, or IPv6
    /// with none): whether it sent segments the capture missed cannot be shown.
    SenderUncounted,
}

impl Undecided {
    /// Every reason, in a fixed order.
    pub const ALL: [Undecided; 3] = [
        Undecided::CaptureMissedPackets,
        Undecided::AckAndAnswerLate,
        Undecided::SenderUncounted,
    ];

    /// Short human label.
    pub fn label(self) -> &'static str {
        match self {
            Undecided::CaptureMissedPackets => "packets are missing from the capture",
            Undecided::AckAndAnswerLate => "acknowledgement and answer both late",
            Undecided::SenderUncounted => "the sender's IP identification counts nothing",
        }
    }

    /// Index into per-reason arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Stalls of one kind a detector saw the shape of but the capture could not decide, for one
/// reason: neither claimed nor ruled out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UndecidedFinding {
    /// The stall it would be.
    pub kind: StallKind,
    /// What the capture lacks.
    pub reason: Undecided,
    /// How many.
    pub count: u64,
    /// The most they could have cost, in total.
    pub lost_ns: u64,
    /// The largest (up to 5, or `--examples N`).
    pub examples: Vec<StallExample>,
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
    /// Stalls the capture could not decide (the evidence that would prove or refute them is
    /// missing), by kind and reason: not findings.
    #[serde(default)]
    pub undecided: Vec<UndecidedFinding>,
    /// Resent SYNs and SYN-ACKs: what the handshakes waited.
    #[serde(default)]
    pub handshake_resends: HandshakeResends,
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

/// Which handshake segment was sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HandshakeSegment {
    /// The client's SYN (no answer: lost, dropped by a full accept queue or a filter).
    Syn,
    /// The server's SYN-ACK (the client's ACK, or the SYN-ACK itself, was lost — or the server
    /// dropped the ACK because its accept queue was full).
    SynAck,
}

/// The resends of one kind of handshake segment, in total.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ResendTotal {
    /// Resends seen.
    pub count: u64,
    /// Time their senders waited, summed: each resend adds only the wait since the previous
    /// transmission, so a handshake's total never exceeds its span.
    pub waited_ns: u64,
    /// The longest single wait.
    pub longest_ns: u64,
}

impl ResendTotal {
    /// Count one resend after `waited_ns`.
    pub fn add(&mut self, waited_ns: u64) {
        self.count += 1;
        self.waited_ns = self.waited_ns.saturating_add(waited_ns);
        self.longest_ns = self.longest_ns.max(waited_ns);
    }
}

/// What the handshakes' resends cost, by segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HandshakeResends {
    /// Resent SYNs (the client waited for an answer).
    pub syn: ResendTotal,
    /// Resent SYN-ACKs (the server waited for the handshake's last ACK).
    pub syn_ack: ResendTotal,
}

impl HandshakeResends {
    /// No resend at all.
    pub fn is_empty(&self) -> bool {
        self.syn.count == 0 && self.syn_ack.count == 0
    }

    /// SYNs and SYN-ACKs together.
    pub fn total(&self) -> ResendTotal {
        ResendTotal {
            count: self.syn.count + self.syn_ack.count,
            waited_ns: self.syn.waited_ns.saturating_add(self.syn_ack.waited_ns),
            longest_ns: self.syn.longest_ns.max(self.syn_ack.longest_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stall_kind_is_named_labelled_and_explained() {
        for (i, k) in StallKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
            assert_eq!(
                serde_json::to_value(k).ok(),
                Some(serde_json::Value::from(k.name()))
            );
            assert!(!k.label().is_empty() && k.explanation().len() > 80, "{k:?}");
            assert!(k.about().len() > 20, "{k:?}");
        }
    }

    /// Where a stall and a rule share a name they name the same cause.
    #[test]
    fn a_stall_named_like_a_rule_is_evidence_for_that_rule() {
        for k in StallKind::ALL {
            if let Some(r) = RuleId::ALL.into_iter().find(|r| r.name() == k.name()) {
                assert_eq!(k.rule(), Some(r), "{k:?}");
            }
        }
    }
}
