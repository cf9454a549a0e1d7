//! `latscope rr`: request/response ping-pong.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Meta;
use crate::bins::LogBins;
use crate::summary::Summary;
use crate::sweep::SizeJump;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
/// The transport a request/response test runs over.
pub enum Transport {
    /// TCP.
    Tcp,
    /// UDP datagrams.
    Udp,
    /// Unix-domain stream sockets.
    Unix,
}

impl Transport {
    /// The transport's name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "TCP",
            Transport::Udp => "UDP",
            Transport::Unix => "unix",
        }
    }
}

/// How the server writes a response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// The whole response in one write.
    #[default]
    Single,
    /// Two writes: the first `split_at` bytes ("header"), then the rest ("body") — what an HTTP
    /// server with `sendfile` and `tcp_nodelay off` does.
    Split,
}

/// Socket options that decide request/response latency, as requested for one side.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SockOpts {
    /// TCP_NODELAY: disable Nagle's algorithm.
    pub nodelay: bool,
    /// TCP_QUICKACK, re-armed after every read (the kernel clears it on its own).
    pub quickack: bool,
    /// TCP_CORK around each message.
    pub cork: bool,
    /// SO_SNDBUF to request, bytes.
    pub sndbuf: Option<u32>,
    /// SO_RCVBUF to request, bytes.
    pub rcvbuf: Option<u32>,
}

/// What the server was asked to do for each request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ServerBehaviour {
    /// One write or two.
    pub write_mode: WriteMode,
    /// First-write length in split mode.
    pub split_at: u32,
    /// Time the server waits before replying (application think time), ns.
    pub think_ns: u64,
    /// Socket options the server applies.
    pub sockopts: SockOpts,
    /// UDP only: the server drops every Nth request (fault injection); 0 = never.
    pub drop_every: u32,
}

/// Closed loop (next request when the previous response arrived) or open loop at a fixed rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LoadMode {
    /// Next request as soon as the previous response arrived.
    Closed,
    /// Requests at a constant total rate; latency counted from each request's intended send
    /// time (coordinated-omission corrected).
    Open {
        /// Requests per second, all connections together.
        rate_per_sec: f64,
    },
}

/// Figures for one request/response size pair.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RrSizeResult {
    /// Request size, bytes.
    pub request_bytes: u32,
    /// Response size, bytes.
    pub response_bytes: u32,
    /// Completed transactions counted in the statistics (warm-up excluded).
    pub transactions: u64,
    /// Measured time, ns (warm-up excluded).
    pub elapsed_ns: u64,
    /// Completed transactions per second.
    pub transactions_per_sec: f64,
    /// Round-trip time: request write started → last response byte read.
    pub rtt: Summary,
    /// Open loop only: latency from the intended send time (includes waiting to send).
    pub rtt_from_intended: Option<Summary>,
    /// The round trips as a histogram in log bins (what `latscope report` draws; absent in
    /// results of older versions).
    #[serde(default)]
    pub rtt_bins: Option<LogBins>,
    /// Open loop only: the latency from the intended send time in log bins.
    #[serde(default)]
    pub rtt_from_intended_bins: Option<LogBins>,
    /// Estimated one-way latency, RTT p50 / 2: assumes a symmetric path.
    pub one_way_p50_ns: u64,
    /// UDP: requests whose response never arrived before the per-request timeout.
    pub lost: u64,
    /// UDP: responses that arrived after their request had been given up on.
    pub late_responses: u64,
    /// TCP/unix: requests that hit the timeout (the run stops on the first one per connection).
    pub timeouts: u64,
    /// Open loop: requests sent more than 1 ms after their intended time.
    pub late_sends: u64,
    /// Errors that ended a connection early, "conn N: message".
    pub errors: Vec<String>,
}

/// The report of `latscope rr`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RrReport {
    /// Tool version, host and time of the run.
    pub meta: Meta,
    /// "HOST:PORT" or "unix:PATH".
    pub target: String,
    /// Which of the name's addresses was used, and the RFC 8305 race that chose it (absent for
    /// unix sockets and in results of older versions).
    #[serde(default)]
    pub address_choice: Option<crate::model::address::AddressChoice>,
    /// TCP, UDP or unix.
    pub transport: Transport,
    /// The server measured: "latscope" (behaviour negotiated) or "sockperf".
    pub peer: String,
    /// Connections (concurrent request streams).
    pub connections: u32,
    /// Closed or open loop.
    pub load: LoadMode,
    /// Socket options the client applied.
    pub client: SockOpts,
    /// What the server was asked to do.
    pub server: ServerBehaviour,
    /// Warm-up excluded from the statistics, ns.
    pub warmup_ns: u64,
    /// One entry per size (one entry without `--sizes`).
    pub results: Vec<RrSizeResult>,
    /// With `--sizes`: sizes whose latency jumped far above the rest.
    pub size_jump: Option<SizeJump>,
    /// The run was cut short by Ctrl-C; figures cover what was measured.
    pub interrupted: bool,
    /// The client host's own stack on an extra connection after the run (TCP against latscope
    /// serve): send() → qdisc, qdisc → driver, driver → recv(), from SO_TIMESTAMPING.
    #[serde(default)]
    pub client_stack: Option<crate::model::hoststack::HostStackTimes>,
}
