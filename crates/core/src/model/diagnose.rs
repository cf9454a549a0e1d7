//! `latscope diagnose`: the measurements it ran, the findings, and the latency budget.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Meta;
use super::http::CertificateCheck;
use super::round_trips::{RequestKind, RoundTripFix, RoundTripKind};
use crate::named::registry_enum;
use crate::summary::Summary;

/// The steps of the investigation, in the order the pipeline runs them. The JSON names are the
/// words the human report shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum StepName {
    /// The network path without the application (SYN or connect ping).
    #[serde(rename = "path")]
    Path,
    /// Plain connects: handshake time and failures, and what speaks on the port.
    #[serde(rename = "handshakes")]
    Handshakes,
    /// The server's end of our connections, read from its sockets (local servers).
    #[serde(rename = "server sockets")]
    ServerSockets,
    /// A packet capture of the single-request step, run through latscope analyze's detectors.
    #[serde(rename = "packet capture")]
    PacketCapture,
    /// Kernel receive-path latency of the server's packets (eBPF, local servers).
    #[serde(rename = "kernel stack")]
    KernelStack,
    /// One request at a time.
    #[serde(rename = "one request")]
    OneRequest,
    /// The same with TCP_QUICKACK re-armed by the client after every read.
    #[serde(rename = "quick-ack experiment")]
    QuickAckExperiment,
    /// Several connections at once.
    #[serde(rename = "concurrent requests")]
    ConcurrentRequests,
    /// A small request while a bulk transfer (or, for a URL, a ramp of concurrent requests)
    /// loads the same path.
    #[serde(rename = "latency under load")]
    LatencyUnderLoad,
    /// A URL's request broken into phases: DNS, connect, TLS, time to first byte, transfer;
    /// the first one a browser's, whose connection then carries the next request and one after
    /// an idle pause, and a second connection offering its TLS session: what the server lets a
    /// client reuse, and the rounds of each response's transfer.
    #[serde(rename = "request phases")]
    RequestPhases,
    /// The server's threads waiting for a CPU: run-queue delay (eBPF) and its cgroup's CPU
    /// throttling (local servers).
    #[serde(rename = "cpu scheduling")]
    CpuScheduling,
    /// The TCP counters (`nstat`: retransmitted segments, out-of-order arrivals, listen-queue
    /// overflows) of the client's and the server's network namespaces across the handshakes and
    /// the single requests.
    #[serde(rename = "tcp counters")]
    TcpCounters,
    /// When no request completed: the URL fetched as usual and with a smaller MSS announced,
    /// to tell a path-MTU black hole.
    #[serde(rename = "mss experiment")]
    MssExperiment,
    /// A name's address families (IPv6, IPv4), one connect to each: a dead one is found.
    #[serde(rename = "address families")]
    AddressFamilies,
    /// The server's agent asked to observe its end while the other steps run
    /// (`--server-agent`): its evidence fills the server-side steps.
    #[serde(rename = "server agent")]
    ServerAgent,
    /// latscope's own CPU while the requests run (it is the client): its cgroup's quota and
    /// throttling, its threads' waits for a CPU.
    #[serde(rename = "client cpu")]
    ClientCpu,
    /// A URL's host name looked up query by query as this host's stub resolver does it: the
    /// search list's names, A and AAAA to each nameserver, what each answered and when.
    #[serde(rename = "name queries")]
    NameQueries,
}

impl StepName {
    /// The name as the report shows it (the same words as the JSON).
    pub const fn label(self) -> &'static str {
        match self {
            StepName::Path => "path",
            StepName::Handshakes => "handshakes",
            StepName::ServerSockets => "server sockets",
            StepName::PacketCapture => "packet capture",
            StepName::KernelStack => "kernel stack",
            StepName::OneRequest => "one request",
            StepName::QuickAckExperiment => "quick-ack experiment",
            StepName::ConcurrentRequests => "concurrent requests",
            StepName::LatencyUnderLoad => "latency under load",
            StepName::RequestPhases => "request phases",
            StepName::CpuScheduling => "cpu scheduling",
            StepName::TcpCounters => "tcp counters",
            StepName::MssExperiment => "mss experiment",
            StepName::AddressFamilies => "address families",
            StepName::ServerAgent => "server agent",
            StepName::ClientCpu => "client cpu",
            StepName::NameQueries => "name queries",
        }
    }
}

/// What became of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// It measured; `detail` says what.
    Ran,
    /// It did not apply to this target or this host; `detail` says why.
    Skipped,
    /// It tried and failed; `detail` has the error.
    Failed,
    /// It was not run or was stopped early: Ctrl-C, or the run's time budget ran out.
    CutShort,
}

impl StepStatus {
    /// The JSON word.
    pub const fn name(self) -> &'static str {
        match self {
            StepStatus::Ran => "ran",
            StepStatus::Skipped => "skipped",
            StepStatus::Failed => "failed",
            StepStatus::CutShort => "cut_short",
        }
    }
}

/// One step of the investigation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Step {
    /// Which step.
    pub name: StepName,
    /// Whether it ran, was skipped, or failed.
    pub status: StepStatus,
    /// What was measured, or why it was skipped.
    pub detail: String,
    /// Which end measured it, when the run had both (`--server-agent`); absent: the host
    /// latscope ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_at: Option<End>,
    /// How long the step took on this host's clock, in milliseconds: a measuring step from its
    /// start to its end, an observer from its start (before the first step it watches) to its
    /// finish (after the last). Absent where nothing ran here (an agent's observation, a step
    /// cut short before it started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_ms: Option<u64>,
}

/// The end of the connection a step was measured at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// The host latscope diagnose ran on.
    Client,
    /// The server's host, by its agent (`latscope serve --evidence-ports`).
    Server,
}

/// What answers at the target, which decides the steps that can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// A latscope server: every step.
    Latscope,
    /// An http:// or https:// URL: the HTTP load engine makes the requests.
    Http,
    /// Any other TCP service: the path only.
    Tcp,
}

impl TargetKind {
    /// The JSON word.
    pub const fn name(self) -> &'static str {
        match self {
            TargetKind::Latscope => "latscope",
            TargetKind::Http => "http",
            TargetKind::Tcp => "tcp",
        }
    }

    /// Whether requests can be made (latscope or HTTP), not only connections.
    pub const fn speaks_requests(self) -> bool {
        matches!(self, TargetKind::Latscope | TargetKind::Http)
    }
}

/// Which host a finding says to fix: always a host (or the path between them), never a layer —
/// a kernel, an application or a socket option lives on one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The client host or application.
    Client,
    /// The server host: its application, its kernel, its cgroup. Reports written before sides
    /// named hosts said "kernel" for the one finding that had it (`pre_tcp_kernel`, always
    /// measured on the server's receive path): they still read, as the server.
    #[serde(alias = "kernel")]
    Server,
    /// Both ends (a setting on one side meets a behaviour of the other).
    Both,
    /// The network between the hosts.
    Network,
}

impl Side {
    /// The side's name in plain words.
    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Server => "server",
            Side::Both => "client and server",
            Side::Network => "network path",
        }
    }
}

registry_enum! {
/// The named rules of diagnose (their JSON names are stable identifiers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleId {
    /// Nagle on one side holds a segment until the other side's delayed ACK.
    NagleDelayedAck = "nagle_delayed_ack",
    /// The server's application takes the time before it answers.
    ThinkTime = "think_time",
    /// Requests wait in the server's socket before it reads them: latency that grows with
    /// concurrency, or the kernel's view of data queued long before the application's read.
    /// The kernel's view was once a rule of its own, `socket_read_wait` (one cause, one fix,
    /// two findings): reports that name it still read, as this rule.
    #[serde(alias = "socket_read_wait")]
    SocketQueueing = "socket_queueing",
    /// The connection set-up (SYN → SYN-ACK) is slow or retried.
    SlowHandshake = "slow_handshake",
    /// Retransmissions (loss) add timeouts.
    Retransmissions = "retransmissions",
    /// The receiver delays ACKs that the sender waits for.
    DelayedAck = "delayed_ack",
    /// Packets wait in the kernel before TCP sees them (qdisc, netfilter, softirq).
    PreTcpKernel = "pre_tcp_kernel",
    /// Queues on the path fill under load (latency grows with throughput).
    Bufferbloat = "bufferbloat",
    /// The network path itself is most of the time. Only a path that is the floor: where a
    /// request pays round trips a fix would save, those are named by their own rules
    /// (connection reuse, TLS, windows, redirects), never booked to the path; a healthy far
    /// server is no finding at all ("the path is the floor: nothing to save").
    PathDominates = "path_dominates",
    /// A URL's DNS lookup dominates a new connection's request.
    SlowDns = "slow_dns",
    /// A URL's TLS handshake takes milliseconds beyond its round trips.
    SlowTls = "slow_tls",
    /// The server's cgroup runs out of CPU quota and is throttled.
    CpuThrottling = "cpu_throttling",
    /// The server's threads wait for a CPU (run-queue delay).
    RunQueueDelay = "run_queue_delay",
    /// Serialisation at the path's bottleneck rate is a material part of a request.
    BottleneckBandwidth = "bottleneck_bandwidth",
    /// Idle single requests have a heavy tail (at the p99 or p99.9, or rare long stalls that
    /// take a tenth of their time) that neither the path, nor TCP's timers, nor a measured CPU
    /// wait explains: the server's own (its scheduling, a CPU quota, GC, locks).
    ServerTailLatency = "server_tail_latency",
    /// Time in the client's own stack: its packets wait between `send()` and the driver
    /// (netfilter OUTPUT, qdisc) or between the driver and `recv()` (softirq, CPU).
    ClientHostStack = "client_host_stack",
    /// A host's own way out holds the connections' packets (eBPF, `latscope stack --direction
    /// tx`): netfilter OUTPUT/POSTROUTING rules, a qdisc's backlog, tc egress, the driver or its
    /// TX completion — on the client's host, or on the server's (local, or its evidence agent).
    HostEgress = "host_egress",
    /// The client's receive window limits a transfer (its rcvbuf, `tcp_rmem`, window scaling).
    ReceiveWindowLimited = "receive_window_limited",
    /// The server's send buffer (SO_SNDBUF) limits a transfer.
    SendBufferLimited = "send_buffer_limited",
    /// Full-size segments are lost on the path while small ones pass, and a lower MSS gets
    /// through: a smaller MTU on the path whose ICMP "fragmentation needed" does not arrive.
    PmtuBlackHole = "pmtu_black_hole",
    /// One address family of the target's name does not answer (e.g. a dead AAAA record):
    /// every new connection waits for it before it tries the other.
    DeadAddressFamily = "dead_address_family",
    /// The server answered with errors (not 2xx/3xx): what was measured are error pages.
    ErrorResponses = "error_responses",
    /// A material share of a request that no named rule explains, with where it sits.
    Unexplained = "unexplained",
    /// Connections are not reused: the server closes them after each response (`Connection:
    /// close`, HTTP/1.0 without keep-alive) or sooner than a client's next request (a
    /// keep-alive timeout shorter than the client's gap), so every request pays a new
    /// connection's round trips (TCP, and TLS for https). Fix: keep-alive on the server (or,
    /// for a client that closes its own connections, a connection pool).
    ConnectionNotReused = "connection_not_reused",
    /// TLS sessions are not resumed: a new connection with the server's session ticket (or
    /// session ID) gets a full handshake again — a TLS 1.2 full handshake is two round trips
    /// where a resumed one is one. Fix: session tickets or a shared session cache.
    TlsNotResumed = "tls_not_resumed",
    /// The server negotiates TLS 1.2 (or older) with a client that offers TLS 1.3: a full
    /// handshake costs two round trips where TLS 1.3 takes one. Fix: enable TLS 1.3.
    OldTlsVersion = "old_tls_version",
    /// A keep-alive connection idle for longer than its retransmission timeout restarts slow
    /// start (`net.ipv4.tcp_slow_start_after_idle`, on by default): the next response on it
    /// needs the round trips of a new connection's slow start again. Fix on the sender (the
    /// server): `net.ipv4.tcp_slow_start_after_idle = 0`.
    SlowStartAfterIdle = "slow_start_after_idle",
    /// The URL answers with a redirect: every request to it pays another exchange (and, to
    /// another host or scheme, another connection's round trips) before the page. Fix: link
    /// to the final URL.
    Redirects = "redirects",
    /// The server's first flight of a response (its initial congestion window) is smaller
    /// than the 10 segments of RFC 6928: a response that needs several round trips of slow
    /// start needs more of them. Fix: `initcwnd 10` (the Linux default) on the server's route.
    SmallInitialWindow = "small_initial_window",
    /// latscope itself could not run when it needed to: its cgroup's CPU quota throttled it,
    /// its threads waited for a CPU, or its timers woke late. The client's own starvation is
    /// then in what it measured (the cause, where the requests show it), and figures it makes
    /// unreliable are said to be so — never "no problem found".
    ClientCpuStarved = "client_cpu_starved",
}
}

impl RuleId {
    /// Whether the finding stands on evidence about connections, the path or the server's
    /// limits, so it can explain requests that never completed (lost SYNs, retransmission
    /// timeouts, a slow DNS or TLS set-up, CPU quota — the server's, or latscope's own: under
    /// 5 ms of CPU per 100 ms, throttled in 22 of 32 periods, it completed no request and read
    /// "not measured"). The other rules state a cost per completed request (a queue wait, think
    /// time, a timer): without one they have no basis.
    pub const fn explains_failed_requests(self) -> bool {
        matches!(
            self,
            RuleId::SlowHandshake
                | RuleId::Retransmissions
                | RuleId::SlowDns
                | RuleId::SlowTls
                | RuleId::CpuThrottling
                | RuleId::PmtuBlackHole
                | RuleId::DeadAddressFamily
                | RuleId::ErrorResponses
                | RuleId::ClientHostStack
                | RuleId::ClientCpuStarved
        )
    }
}

/// A named rule that fired: a diagnosis of where latency comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Diagnosis {
    /// Stable rule name, e.g. "nagle_delayed_ack".
    pub rule: RuleId,
    /// One-line statement of the finding.
    pub title: String,
    /// Latency per request this finding explains, ns.
    pub explains_ns: u64,
    /// 0.0 ..= 1.0.
    pub confidence: f64,
    /// Which side to fix.
    pub side: Side,
    /// The figures behind it.
    pub evidence: Vec<String>,
    /// What to change, and where.
    pub fix: String,
    /// The finding that explains this one, when both fired (this one is its consequence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caused_by: Option<RuleId>,
    /// The findings this one explains (its consequences), when they fired too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<RuleId>,
}

/// Where a request's time goes (medians, ns).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Budget {
    /// Connection set-up (SYN → SYN-ACK): the network path without the application.
    pub path_rtt_ns: Option<u64>,
    /// One request at a time.
    pub single_request_ns: Option<u64>,
    /// Under concurrency.
    pub concurrent_request_ns: Option<u64>,
    /// Concurrent requests in flight for `concurrent_request_ns`.
    pub concurrency: u32,
    /// single − path − serialisation: time spent in the hosts (kernel + application).
    pub host_ns: Option<u64>,
    /// Of the hosts' time, what the client's own host adds: its packets between `send()` and
    /// the driver and between the driver and `recv()` (kernel timestamps on latscope's own
    /// sockets), when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_host_ns: Option<u64>,
    /// The path's bottleneck rate, measured by a bulk transfer (bit/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bottleneck_bps: Option<f64>,
    /// Time one request and its response take to cross the bottleneck at that rate (headers
    /// included): part of the network's share, not the hosts'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serialisation_ns: Option<u64>,
    /// Of the hosts' time, what the server spends before its first response byte that no TCP
    /// timer explains (its application time), when the evidence shows it.
    #[serde(default)]
    pub server_app_ns: Option<u64>,
}

/// The round trips of the requests a diagnose run measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RoundTrips {
    /// The path's round trip the counts are in (the SYN or connect ping's median), ns.
    pub rtt_ns: u64,
    /// One account per kind of request measured, in the order a client meets them.
    pub requests: Vec<RequestRounds>,
}

impl RoundTrips {
    /// The account with the most time a fix would save (the first of equals); `None` when no
    /// account has an avoidable round trip.
    pub fn most_avoidable(&self) -> Option<&RequestRounds> {
        self.requests.iter().filter(|r| r.avoidable_ns() > 0).fold(
            None,
            |best: Option<&RequestRounds>, r| match best {
                Some(b) if b.avoidable_ns() >= r.avoidable_ns() => Some(b),
                _ => Some(r),
            },
        )
    }
}

/// One request's time, part by part, in round trips of the path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RequestRounds {
    /// Which request.
    pub request: RequestKind,
    /// What it measured in all, ns (its parts' costs added up).
    pub measured_ns: u64,
    /// For [`RequestKind::AfterIdle`]: how long the connection was idle, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_ms: Option<u64>,
    /// Its parts, in the order they happen.
    pub parts: Vec<RoundTrip>,
}

impl RequestRounds {
    /// Round trips of the path the request takes (DNS lookups and retransmission timeouts are
    /// waits of their own, counted apart).
    pub fn round_trips(&self) -> u32 {
        self.parts
            .iter()
            .filter(|p| p.kind.is_path_round())
            .map(|p| p.count)
            .sum()
    }

    /// The round trips that would do: [`RequestRounds::round_trips`] less the avoidable ones.
    pub fn needed(&self) -> u32 {
        self.round_trips().saturating_sub(
            self.parts
                .iter()
                .filter(|p| p.kind.is_path_round())
                .map(|p| p.avoidable)
                .sum(),
        )
    }

    /// Time a fix of every avoidable part would save, ns.
    pub fn avoidable_ns(&self) -> u64 {
        self.parts.iter().map(|p| p.avoidable_ns).sum()
    }

    /// The parts a fix would save.
    pub fn avoidable(&self) -> impl Iterator<Item = &RoundTrip> {
        self.parts.iter().filter(|p| p.avoidable_ns > 0)
    }
}

/// One part of a request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RoundTrip {
    /// What part.
    pub kind: RoundTripKind,
    /// Round trips of the path it takes (DNS: lookups; retransmission timeouts: timeouts).
    pub count: u32,
    /// What it took as measured, ns.
    pub cost_ns: u64,
    /// How many of `count` a fix would save.
    pub avoidable: u32,
    /// Of `cost_ns`, what the fix would save, ns (never more than `cost_ns`).
    pub avoidable_ns: u64,
    /// The finding that names the avoidable part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<RuleId>,
    /// What saves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<RoundTripFix>,
    /// What it is, e.g. "TLS 1.2, full handshake" or "a 256 KiB response: 4 rounds after a
    /// first flight of 14.1 KiB".
    pub detail: String,
}

impl RoundTrip {
    /// A part that cannot be saved.
    pub fn needed(kind: RoundTripKind, count: u32, cost_ns: u64, detail: String) -> RoundTrip {
        RoundTrip {
            kind,
            count,
            cost_ns,
            avoidable: 0,
            avoidable_ns: 0,
            rule: None,
            fix: None,
            detail,
        }
    }

    /// Mark `avoidable` of its round trips (and `ns` of its cost, at most all of it) as saved
    /// by `fix`, named by `rule`.
    pub fn avoid(mut self, avoidable: u32, ns: u64, rule: RuleId, fix: RoundTripFix) -> RoundTrip {
        self.avoidable = avoidable.min(self.count);
        self.avoidable_ns = ns.min(self.cost_ns);
        self.rule = Some(rule);
        self.fix = Some(fix);
        self
    }
}

/// One URL request phase by phase (medians, ns), as `curl -w` / httpstat show it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RequestPhases {
    /// How many requests the medians come from.
    pub requests: u32,
    /// Name resolution.
    pub dns_ns: u64,
    /// TCP connect.
    pub connect_ns: u64,
    /// TLS handshake (`None` for http://).
    pub tls_ns: Option<u64>,
    /// The client's own CPU over the TLS handshake (its key exchange and the certificate's
    /// verification): a part of `tls_ns` that is not the server's. Absent for http://, and in
    /// reports written before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_cpu_ns: Option<u64>,
    /// Request sent → first response byte (one round trip plus the server's time).
    pub ttfb_ns: u64,
    /// First → last response byte.
    pub transfer_ns: u64,
}

impl RequestPhases {
    /// The whole request: the sum of the phases.
    pub fn total_ns(&self) -> u64 {
        self.dns_ns + self.connect_ns + self.tls_ns.unwrap_or(0) + self.ttfb_ns + self.transfer_ns
    }
}

/// Responsiveness in round trips per minute (60 s ÷ the probe's median round trip), idle and
/// under load — the figure of the IETF responsiveness method (draft-ietf-ippm-responsiveness,
/// Apple's `networkQuality`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Responsiveness {
    /// Round trips per minute with the path idle.
    pub idle_rpm: f64,
    /// Round trips per minute while the load ran.
    pub loaded_rpm: f64,
    /// What the load was, e.g. "1 bulk TCP stream, 9.4 Gbit/s" or "32 concurrent GET".
    pub load: String,
}

impl Responsiveness {
    /// Round trips per minute of a round trip of `rtt_ns`.
    pub fn rpm(rtt_ns: u64) -> f64 {
        60e9 / rtt_ns.max(1) as f64
    }
}

/// The report of `latscope diagnose`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DiagnoseReport {
    /// Tool version, host and time of the run.
    pub meta: Meta,
    /// The target as given.
    pub target: String,
    /// What answered at the target.
    pub target_kind: TargetKind,
    /// The steps, in the order they ran.
    pub steps: Vec<Step>,
    /// Where a request's time goes.
    pub budget: Budget,
    /// Distributions measured, by step.
    pub distributions: Vec<(StepName, Summary)>,
    /// Ranked by the latency they explain.
    pub findings: Vec<Diagnosis>,
    /// One sentence: the answer.
    pub verdict: String,
    /// True when Ctrl-C ended the run (steps not run are marked so).
    pub interrupted: bool,
    /// A URL request's phases (URL targets).
    #[serde(default)]
    pub phases: Option<RequestPhases>,
    /// The URL's host name looked up query by query as this host's resolver does it (the
    /// name-queries step), when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<super::names::NameLookup>,
    /// Round trips per minute idle and under load (when the load step ran).
    #[serde(default)]
    pub responsiveness: Option<Responsiveness>,
    /// The run's time budget, ms (`--max-time`); steps still running when it ran out are
    /// cut short.
    #[serde(default)]
    pub max_time_ms: u64,
    /// What the requests cost in round trips of the path, and the ones a fix would save.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round_trips: Option<RoundTrips>,
    /// How an https:// target's certificate was checked (absent for other targets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<CertificateCheck>,
}

impl DiagnoseReport {
    /// Why the target could not be measured, if it could not: the handshake step did not run
    /// (refused, unreachable, unresolvable), no request to a target that speaks requests
    /// completed (a server that accepts and never answers), or no step ran at all. Such a run is never "no
    /// problem found".
    pub fn unmeasurable(&self) -> Option<String> {
        // A handshake step stopped by its time budget after connections did complete (a lossy
        // path retrying SYNs) measured the target; one that completed none did not.
        let connected = self
            .distributions
            .iter()
            .any(|(n, d)| *n == StepName::Handshakes && d.count > 0);
        if let Some(h) = self.step(StepName::Handshakes).filter(|s| {
            s.status != StepStatus::Ran && !(s.status == StepStatus::CutShort && connected)
        }) {
            return Some(format!("cannot connect to {}: {}", self.target, h.detail));
        }
        // The single-request step can fail on its own (its one connection's SYN and the retry
        // both lost on a lossy path) while other steps completed requests and rules found the
        // cause: only a target where no request completed anywhere, and nothing was found, is
        // not measured.
        if self.target_kind.speaks_requests()
            && !self.requests_completed()
            && !self
                .findings
                .iter()
                .any(|f| f.rule.explains_failed_requests())
            && let Some(one) = self
                .step(StepName::OneRequest)
                .filter(|s| s.status == StepStatus::Failed)
        {
            return Some(format!(
                "no request to {} completed: {}",
                self.target, one.detail
            ));
        }
        if self.steps.iter().all(|s| s.status != StepStatus::Ran) {
            return Some(format!(
                "nothing could be measured at {}: {}",
                self.target,
                self.steps.first().map(|s| s.detail.as_str()).unwrap_or("")
            ));
        }
        None
    }

    /// Whether any step completed a request (single, concurrent, or the request phases).
    pub fn requests_completed(&self) -> bool {
        self.distributions.iter().any(|(n, d)| {
            matches!(n, StepName::OneRequest | StepName::ConcurrentRequests) && d.count > 0
        }) || self.phases.as_ref().is_some_and(|p| p.requests > 0)
    }

    /// The record of step `name`, if the pipeline reached it.
    pub fn step(&self, name: StepName) -> Option<&Step> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// The distribution step `name` measured.
    pub fn distribution(&self, name: StepName) -> Option<&Summary> {
        self.distributions
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| s)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A report written when `pre_tcp_kernel` said side "kernel" reads, as the server (the
    /// host whose receive path it measured); new reports never write a layer for a side.
    #[test]
    fn the_old_kernel_side_reads_as_the_server() {
        let s: Side = serde_json::from_str("\"kernel\"").unwrap();
        assert_eq!(s, Side::Server);
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"server\"");
        assert_eq!(Side::Server.name(), "server");
    }

    /// The kernel's view of socket queueing was once a rule of its own: reports that name it
    /// still read, as the one rule; new reports only write the one name.
    #[test]
    fn the_old_socket_read_wait_reads_as_socket_queueing() {
        let r: RuleId = serde_json::from_str("\"socket_read_wait\"").unwrap();
        assert_eq!(r, RuleId::SocketQueueing);
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            "\"socket_queueing\"",
            "written under its one name"
        );
    }

    fn example() -> DiagnoseReport {
        serde_json::from_str(include_str!("../../../../tests/data/report/diagnose.json")).unwrap()
    }

    fn fail_one_request(r: &mut DiagnoseReport) {
        for s in &mut r.steps {
            if s.name == StepName::OneRequest {
                s.status = StepStatus::Failed;
            }
        }
    }

    /// The single-request step failing alone (its connection lost on a lossy path) does not
    /// undo what the other steps measured; a target where no request completed anywhere and
    /// nothing was found is not measured.
    #[test]
    fn a_failed_single_request_step_alone_is_not_unmeasurable() {
        let mut r = example();
        assert_eq!(r.unmeasurable(), None);
        fail_one_request(&mut r);
        assert_eq!(r.unmeasurable(), None, "concurrent requests completed");
        r.distributions
            .retain(|(n, _)| !matches!(n, StepName::OneRequest | StepName::ConcurrentRequests));
        let rules: Vec<RuleId> = r.findings.iter().map(|f| f.rule).collect();
        assert_eq!(
            r.unmeasurable().is_none(),
            rules.iter().any(|k| k.explains_failed_requests()),
            "{rules:?}"
        );
        r.findings[0].rule = RuleId::Retransmissions;
        assert_eq!(
            r.unmeasurable(),
            None,
            "loss explains requests that never completed"
        );
        // latscope itself starved of CPU (its cgroup throttled in 22 of 32 periods): why no
        // request completed, said as such rather than "not measured".
        r.findings[0].rule = RuleId::ClientCpuStarved;
        assert_eq!(r.unmeasurable(), None, "the client's own starvation");
        r.findings[0].rule = RuleId::SocketQueueing;
        r.findings.truncate(1);
        assert!(
            r.unmeasurable().is_some(),
            "a per-request cost with no completed request is no measurement"
        );
        r.findings.clear();
        assert!(
            r.unmeasurable()
                .is_some_and(|why| why.starts_with("no request to")),
            "{:?}",
            r.unmeasurable()
        );
    }

    #[test]
    fn every_rule_name_is_its_json_word_and_has_a_description() {
        for (i, r) in RuleId::ALL.iter().enumerate() {
            assert_eq!(
                serde_json::to_value(r).ok(),
                Some(serde_json::Value::from(r.name()))
            );
            assert!(RuleId::ALL[..i].iter().all(|o| o.name() != r.name()));
            assert!(r.about().len() > 20, "{r:?}: {}", r.about());
            assert!(!r.about().contains('\n'));
        }
        assert_eq!(
            serde_json::from_str::<RuleId>("\"socket_read_wait\"").ok(),
            Some(RuleId::SocketQueueing)
        );
    }

    fn part(kind: RoundTripKind, count: u32, ms: u64) -> RoundTrip {
        RoundTrip::needed(kind, count, ms * 1_000_000, String::new())
    }

    /// A request on a server that closes every connection, over TLS 1.2: TCP and the TLS
    /// handshake are avoidable (4 round trips where 1 would do); DNS is no round trip of the path.
    #[test]
    fn an_account_counts_the_path_rounds_and_what_a_fix_saves() {
        let r = RequestRounds {
            request: RequestKind::Next,
            measured_ns: 164_000_000,
            idle_ms: None,
            parts: vec![
                part(RoundTripKind::Dns, 1, 3),
                part(RoundTripKind::TcpHandshake, 1, 40).avoid(
                    1,
                    40_000_000,
                    RuleId::ConnectionNotReused,
                    RoundTripFix::KeepAlive,
                ),
                part(RoundTripKind::TlsHandshake, 2, 81).avoid(
                    5,
                    u64::MAX,
                    RuleId::ConnectionNotReused,
                    RoundTripFix::KeepAlive,
                ),
                part(RoundTripKind::Request, 1, 40),
            ],
        };
        assert_eq!(r.round_trips(), 4);
        assert_eq!(
            r.needed(),
            1,
            "an avoidable count is capped at the part's count"
        );
        assert_eq!(
            r.avoidable_ns(),
            121_000_000,
            "and its time at the part's cost"
        );
        assert_eq!(r.avoidable().count(), 2);
        let all = RoundTrips {
            rtt_ns: 40_000_000,
            requests: vec![
                RequestRounds {
                    request: RequestKind::First,
                    measured_ns: 80_000_000,
                    idle_ms: None,
                    parts: vec![part(RoundTripKind::Request, 2, 80)],
                },
                r,
            ],
        };
        assert_eq!(
            all.most_avoidable().map(|r| r.request),
            Some(RequestKind::Next)
        );
        let json = serde_json::to_value(&all).unwrap();
        assert_eq!(
            json["requests"][1]["parts"][1]["rule"],
            "connection_not_reused"
        );
        assert_eq!(json["requests"][1]["parts"][1]["fix"], "keep_alive");
        assert!(json["requests"][0]["parts"][0].get("rule").is_none());
    }
}
