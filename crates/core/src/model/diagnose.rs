//! `latscope diagnose`: the measurements it ran, the findings, and the latency budget.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Meta;
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
    /// A URL's request broken into phases: DNS, connect, TLS, time to first byte, transfer.
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

/// Which side a finding blames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The client host or application.
    Client,
    /// The server host or application.
    Server,
    /// Both ends (a setting on one side meets a behaviour of the other).
    Both,
    /// The network between the hosts.
    Network,
    /// The kernel's network stack on the measured host.
    Kernel,
}

impl Side {
    /// The side's name in plain words.
    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Server => "server",
            Side::Both => "client and server",
            Side::Network => "network path",
            Side::Kernel => "kernel",
        }
    }
}

/// The named rules of diagnose (their JSON names are stable identifiers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleId {
    /// Nagle on one side holds a segment until the other side's delayed ACK.
    NagleDelayedAck,
    /// The server's application takes the time before it answers.
    ThinkTime,
    /// Requests wait in the server's socket before it reads them: latency that grows with
    /// concurrency, or the kernel's view of data queued long before the application's read.
    /// The kernel's view was once a rule of its own, `socket_read_wait` (one cause, one fix,
    /// two findings): reports that name it still read, as this rule.
    #[serde(alias = "socket_read_wait")]
    SocketQueueing,
    /// The connection set-up (SYN → SYN-ACK) is slow or retried.
    SlowHandshake,
    /// Retransmissions (loss) add timeouts.
    Retransmissions,
    /// The receiver delays ACKs that the sender waits for.
    DelayedAck,
    /// Packets wait in the kernel before TCP sees them (qdisc, netfilter, softirq).
    PreTcpKernel,
    /// Queues on the path fill under load (latency grows with throughput).
    Bufferbloat,
    /// The network path itself is most of the time.
    PathDominates,
    /// A URL's DNS lookup dominates a new connection's request.
    SlowDns,
    /// A URL's TLS handshake takes milliseconds beyond its round trips.
    SlowTls,
    /// The server's cgroup runs out of CPU quota and is throttled.
    CpuThrottling,
    /// The server's threads wait for a CPU (run-queue delay).
    RunQueueDelay,
    /// Serialisation at the path's bottleneck rate is a material part of a request.
    BottleneckBandwidth,
    /// Idle single requests have a heavy tail that neither the path, nor TCP's timers, nor a
    /// measured CPU wait explains: the server's own (its scheduling, GC, locks).
    ServerTailLatency,
    /// Time in the client's own stack: its packets wait between `send()` and the driver
    /// (netfilter OUTPUT, qdisc) or between the driver and `recv()` (softirq, CPU).
    ClientHostStack,
    /// The client's receive window limits a transfer (its rcvbuf, `tcp_rmem`, window scaling).
    ReceiveWindowLimited,
    /// The server's send buffer (SO_SNDBUF) limits a transfer.
    SendBufferLimited,
    /// Full-size segments are lost on the path while small ones pass, and a lower MSS gets
    /// through: a smaller MTU on the path whose ICMP "fragmentation needed" does not arrive.
    PmtuBlackHole,
    /// One address family of the target's name does not answer (e.g. a dead AAAA record):
    /// every new connection waits for it before it tries the other.
    DeadAddressFamily,
    /// The server answered with errors (not 2xx/3xx): what was measured are error pages.
    ErrorResponses,
    /// A material share of a request that no named rule explains, with where it sits.
    Unexplained,
}

impl RuleId {
    /// Whether the finding stands on evidence about connections, the path or the server's
    /// limits, so it can explain requests that never completed (lost SYNs, retransmission
    /// timeouts, a slow DNS or TLS set-up, CPU quota). The other rules state a cost per
    /// completed request (a queue wait, think time, a timer): without one they have no basis.
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
        )
    }

    /// The stable identifier (the JSON word).
    pub const fn name(self) -> &'static str {
        match self {
            RuleId::NagleDelayedAck => "nagle_delayed_ack",
            RuleId::ThinkTime => "think_time",
            RuleId::SocketQueueing => "socket_queueing",
            RuleId::SlowHandshake => "slow_handshake",
            RuleId::Retransmissions => "retransmissions",
            RuleId::DelayedAck => "delayed_ack",
            RuleId::PreTcpKernel => "pre_tcp_kernel",
            RuleId::Bufferbloat => "bufferbloat",
            RuleId::PathDominates => "path_dominates",
            RuleId::SlowDns => "slow_dns",
            RuleId::SlowTls => "slow_tls",
            RuleId::CpuThrottling => "cpu_throttling",
            RuleId::RunQueueDelay => "run_queue_delay",
            RuleId::BottleneckBandwidth => "bottleneck_bandwidth",
            RuleId::ServerTailLatency => "server_tail_latency",
            RuleId::ClientHostStack => "client_host_stack",
            RuleId::ReceiveWindowLimited => "receive_window_limited",
            RuleId::SendBufferLimited => "send_buffer_limited",
            RuleId::PmtuBlackHole => "pmtu_black_hole",
            RuleId::DeadAddressFamily => "dead_address_family",
            RuleId::ErrorResponses => "error_responses",
            RuleId::Unexplained => "unexplained",
        }
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
    /// Round trips per minute idle and under load (when the load step ran).
    #[serde(default)]
    pub responsiveness: Option<Responsiveness>,
    /// The run's time budget, ms (`--max-time`); steps still running when it ran out are
    /// cut short.
    #[serde(default)]
    pub max_time_ms: u64,
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
}
