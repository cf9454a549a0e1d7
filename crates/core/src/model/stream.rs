//! `latscope stream`: throughput per direction, per stream and per interval, with its cost.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Meta;
use super::rr::Transport;
use crate::summary::Summary;

/// Which way data flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The client sends, the server receives (default).
    Send,
    /// The server sends (`--reverse`).
    Receive,
    /// Both at once (`--bidir`), reported separately.
    Both,
}

/// Socket options of the data connections (both sides apply them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StreamOptions {
    /// TCP_NODELAY on the data connections.
    pub nodelay: bool,
    /// TCP_MAXSEG before connecting/accepting.
    pub mss: Option<u32>,
    /// IP_TOS / IPV6_TCLASS byte (DSCP << 2 | ECN).
    pub tos: Option<u8>,
    /// TCP_CONGESTION, e.g. "cubic", "bbr".
    pub congestion: Option<String>,
    /// SO_SNDBUF requested, bytes (the kernel doubles it for bookkeeping).
    pub sndbuf: Option<u32>,
    /// SO_RCVBUF requested, bytes (the kernel doubles it for bookkeeping).
    pub rcvbuf: Option<u32>,
    /// Send with sendfile(2) from an in-memory file instead of write(2) (no user-space copy).
    pub zerocopy: bool,
}

/// What one side spent moving its bytes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Cost {
    /// False where the CPU time could not be attributed: the server's shared UDP receiver while
    /// other traffic reached it too.
    pub cpu_measured: bool,
    /// User CPU time over the measured time, % of one core.
    pub cpu_user_pct: f64,
    /// System (kernel) CPU time over the measured time, % of one core.
    pub cpu_sys_pct: f64,
    /// read/write/send/recv/sendfile calls on the data sockets.
    pub io_calls: u64,
    /// Mean bytes moved per I/O call.
    pub bytes_per_call: f64,
    /// Mean time per I/O call, µs (nuttcp's msec/call, in µs); 0 where not measured (the
    /// server's shared UDP receiver).
    pub us_per_call: f64,
    /// Voluntary plus involuntary context switches of the side's data threads.
    pub context_switches: u64,
}

/// One side's view of one direction.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SideView {
    /// "client" or "server".
    pub side: String,
    /// "sender" or "receiver".
    pub role: String,
    /// Bytes this side counted (sent or received).
    pub bytes: u64,
    /// Time this side measured over, ns.
    pub elapsed_ns: u64,
    /// This side's rate, bit/s.
    pub rate_bps: f64,
    /// CPU and system-call cost of this side.
    pub cost: Cost,
}

/// TCP's own figures (TCP_INFO on the sending sockets), summed or maxed over streams.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TcpFigures {
    /// Segments retransmitted (sum over streams).
    pub retransmits: u64,
    /// Congestion window at the end, segments (largest over streams).
    pub cwnd: u32,
    /// Smoothed RTT at the end, µs (largest over streams).
    pub rtt_us: u32,
    /// RTT variation at the end, µs (largest over streams).
    pub rtt_var_us: u32,
    /// Who limited the transfer: this side's busy, receive-window-limited and
    /// send-buffer-limited times, the windows and buffers (absent from older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<crate::model::transfer::TransferLimits>,
}

/// UDP delivery figures (receiver's sequence tracking, sender's count).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UdpFigures {
    /// Datagrams the sender sent.
    pub sent: u64,
    /// Distinct datagrams received.
    pub received: u64,
    /// sent − received.
    pub lost: u64,
    /// lost / sent, %.
    pub loss_pct: f64,
    /// Of `lost`, datagrams the receiving socket had no buffer room for: how much the
    /// receiver's namespace's UDP RcvbufErrors counter grew during the test (receivers on this
    /// host only, one UDP direction at a time; capped at `lost`). `None`: not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_in_rcvbuf: Option<u64>,
    /// Datagrams received after a higher sequence number.
    pub out_of_order: u64,
    /// Datagrams received more than once.
    pub duplicates: u64,
    /// Interarrival jitter (RFC 3550 §6.4.1), ns.
    pub jitter_ns: f64,
}

/// One stream (connection) of one direction.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StreamFigures {
    /// Stream number, from 0.
    pub index: u32,
    /// Bytes the sender wrote on this stream.
    pub bytes_sent: u64,
    /// Bytes the receiver read on this stream.
    pub bytes_received: u64,
    /// Receiver's bytes over the measured time.
    pub rate_bps: f64,
    /// TCP_INFO figures of this stream's sender (TCP only).
    pub tcp: Option<TcpFigures>,
    /// Delivery figures of this stream (UDP only).
    pub udp: Option<UdpFigures>,
}

/// Average, minimum and maximum of the per-interval rates (nepim's avg/min/max lines).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IntervalStats {
    /// Mean of the per-interval rates, bit/s.
    pub avg_bps: f64,
    /// Lowest per-interval rate, bit/s.
    pub min_bps: f64,
    /// Highest per-interval rate, bit/s.
    pub max_bps: f64,
}

/// One direction's result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DirectionResult {
    /// "client→server" or "server→client".
    pub direction: String,
    /// The receiver's count: the truth for delivered bytes.
    pub bytes_delivered: u64,
    /// Delivered bytes over the measured time, bit/s.
    pub rate_bps: f64,
    /// The sending side's view.
    pub sender: SideView,
    /// The receiving side's view.
    pub receiver: SideView,
    /// Per-stream figures.
    pub streams: Vec<StreamFigures>,
    /// Spread of the per-interval rates; null when no full-length interval was measured (a
    /// run shorter than two intervals): nothing to report, which is not a rate of 0.
    pub intervals: Option<IntervalStats>,
    /// TCP_INFO figures of the senders, over all streams (TCP only).
    pub tcp: Option<TcpFigures>,
    /// The client's receiving sockets when the client receives (TCP only): the windows it
    /// advertised, its window scale and receive buffer — the receiver's half of who limited
    /// the transfer.
    #[serde(default)]
    pub receiver_limits: Option<crate::model::transfer::TransferLimits>,
    /// Delivery figures over all streams (UDP only).
    pub udp: Option<UdpFigures>,
}

/// A per-interval record (also one `--json-lines` event).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StreamInterval {
    /// Always "stream_interval".
    pub event: String,
    /// "client→server" or "server→client".
    pub direction: String,
    /// Whose count: "client" or "server".
    pub side: String,
    /// "sender" or "receiver".
    pub role: String,
    /// Interval start, ns since the test started.
    pub start_ns: u64,
    /// Interval end, ns since the test started.
    pub end_ns: u64,
    /// Bytes per stream in this interval.
    pub stream_bytes: Vec<u64>,
    /// Bytes in this interval, all streams.
    pub bytes: u64,
    /// Rate in this interval, bit/s.
    pub rate_bps: f64,
    /// TCP senders: retransmits in this interval, cwnd and RTT at its end.
    pub tcp: Option<TcpFigures>,
    /// UDP receivers: datagrams missing so far (sequence gaps below the highest received).
    pub udp_lost: Option<u64>,
    /// UDP receivers: distinct datagrams received so far (with `udp_lost`, the loss of each
    /// interval; absent in results of older versions).
    #[serde(default)]
    pub udp_received: Option<u64>,
    /// UDP receivers: RFC 3550 interarrival jitter at the interval's end, ns (the largest over
    /// the streams; absent in results of older versions).
    #[serde(default)]
    pub udp_jitter_ns: Option<f64>,
}

/// Latency of a request/response probe run on its own connection, idle and under load.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LatencyProbe {
    /// Before the bulk transfer started.
    pub idle: Summary,
    /// While it ran.
    pub loaded: Summary,
}

impl LatencyProbe {
    /// Whether the transfer made a small request's median latency jump (2× and 1 ms above
    /// idle, [`crate::sweep::is_jump`]): a finding, as a latency jump between sizes is in rr.
    pub fn jumped(&self) -> bool {
        self.idle.count > 0
            && self.loaded.count > 0
            && crate::sweep::is_jump(self.idle.p50_ns as f64, self.loaded.p50_ns as f64)
    }
}

impl StreamReport {
    /// Datagrams lost in any direction (UDP; 0 for TCP).
    pub fn udp_lost(&self) -> u64 {
        self.results
            .iter()
            .filter_map(|r| r.udp.as_ref())
            .map(|u| u.lost)
            .sum()
    }
}

/// The report of `latscope stream`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StreamReport {
    /// Tool version, host and time of the run.
    pub meta: Meta,
    /// The server as given on the command line.
    pub target: String,
    /// Which of the name's addresses was used, and the RFC 8305 race that chose it (absent for
    /// unix sockets and in results of older versions).
    #[serde(default)]
    pub address_choice: Option<crate::model::address::AddressChoice>,
    /// TCP or UDP.
    pub transport: Transport,
    /// Which way data flowed.
    pub direction: Direction,
    /// Parallel streams per direction.
    pub streams: u32,
    /// Requested duration (ns) or byte count (per direction).
    pub duration_ns: Option<u64>,
    /// Requested byte count per direction (instead of a duration).
    pub bytes: Option<u64>,
    /// Write size.
    pub buffer_bytes: u32,
    /// UDP target rate, bit/s (total per direction).
    pub udp_rate_bps: Option<f64>,
    /// Socket options both sides applied.
    pub options: StreamOptions,
    /// One result per direction measured.
    pub results: Vec<DirectionResult>,
    /// Every interval of both sides' views, in order.
    pub intervals: Vec<StreamInterval>,
    /// Request/response latency idle and under the transfer (`--latency-probe`).
    pub latency_probe: Option<LatencyProbe>,
    /// An error that ended the test early (partial figures above).
    pub error: Option<String>,
    /// True when Ctrl-C ended the test early.
    pub interrupted: bool,
}
