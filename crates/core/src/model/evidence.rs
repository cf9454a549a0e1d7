//! The two-ended diagnosis exchange (`latscope diagnose --server-agent`): the
//! [`EvidenceRequest`] a client sends to the server's agent and the [`ServerEvidence`] it gets
//! back (`latscope schema evidence`), with the server-side observations both ends' diagnose
//! pipelines read (sockets, CPU, kernel stack, TCP counters). Plain data, here beside the other
//! output models so that the parsers of the exchange build without the observers that fill it
//! (latscope-diagnose runs them; latscope-net carries the exchange and fuzzes its parsers).

use std::net::IpAddr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The version of the request and of the evidence: a server answers only its own.
pub const EVIDENCE_VERSION: u32 = 1;

/// What a client asks the server's agent to observe. Anything else in the request (another
/// process, another address's connections, a file) is refused: unknown fields are errors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvidenceRequest {
    /// [`EVIDENCE_VERSION`].
    pub version: u32,
    /// The server's local TCP port whose connections from the client are observed.
    pub port: u16,
}

/// Why a request is malformed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestError {
    /// Not the request's JSON (the parser's message).
    Malformed(String),
    /// Another version of the exchange.
    Version(u32),
    /// Port 0.
    NoPort,
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::Malformed(e) => write!(f, "malformed evidence request: {e}"),
            RequestError::Version(v) => write!(
                f,
                "evidence request version {v}; this latscope answers version {EVIDENCE_VERSION}"
            ),
            RequestError::NoPort => f.write_str("an evidence request names a port (1–65535)"),
        }
    }
}

impl std::error::Error for RequestError {}

impl EvidenceRequest {
    /// Parse and check a request's bytes (a frame body).
    pub fn parse(body: &[u8]) -> Result<EvidenceRequest, RequestError> {
        let r: EvidenceRequest =
            serde_json::from_slice(body).map_err(|e| RequestError::Malformed(e.to_string()))?;
        if r.version != EVIDENCE_VERSION {
            return Err(RequestError::Version(r.version));
        }
        if r.port == 0 {
            return Err(RequestError::NoPort);
        }
        Ok(r)
    }
}

/// One observer's outcome at the server's end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "status", content = "value", rename_all = "snake_case")]
pub enum Observed<T> {
    /// It ran: what it measured.
    Ran(T),
    /// It does not apply there (e.g. no cgroup limit and no eBPF): why.
    Skipped(String),
    /// It tried and failed: why.
    Failed(String),
}

impl<T> Observed<T> {
    /// The value, when it ran.
    pub fn value(&self) -> Option<&T> {
        match self {
            Observed::Ran(v) => Some(v),
            _ => None,
        }
    }
}

/// What the server's agent observed of the client's connections to one port.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ServerEvidence {
    /// [`EVIDENCE_VERSION`].
    pub version: u32,
    /// The port observed.
    pub port: u16,
    /// The client's address as the server sees it: every per-connection figure is of this
    /// address's connections only.
    pub peer: IpAddr,
    /// How long the observers ran, ns (the server's monotonic clock).
    pub observed_ns: u64,
    /// The server's wall clock when the client said it was done (ns since the Unix epoch);
    /// absent when the window ended first. Used only to estimate the clocks' offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_unix_ns: Option<u64>,
    /// How long the server took from reading "done" to having its evidence ready, ns (its
    /// monotonic clock): the part of the client's wait that is not the network's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_delay_ns: Option<u64>,
    /// The server's end of the peer's connections: options and MSS (its sockets).
    pub sockets: Observed<ServerSockets>,
    /// The port owner's run-queue waits and its cgroup's CPU throttling.
    pub cpu: Observed<CpuEvidence>,
    /// Receive-path latency of the peer's packets to the port (eBPF).
    pub kernel_stack: Observed<StackEvidence>,
    /// The TCP counters of the server's network namespace over the window (namespace-wide:
    /// the kernel counts no finer).
    pub counters: Observed<NsCounters>,
}

/// The server's agent's answer as the client's diagnose received it (`--server-agent`): the
/// evidence, who sent it, and how its clock compares. Not part of any `--json` document; the
/// steps of both ends receive it as data.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerEnd {
    /// The agent, as named on the command line with its address.
    pub agent: String,
    /// What it observed.
    pub evidence: ServerEvidence,
    /// The offset between the clocks, when the agent stamped the end of the window.
    pub clock: Option<ClockOffset>,
}

/// How far the server's wall clock reads ahead of this host's (negative: behind), estimated
/// from one exchange: the server stamped the moment it read our "done" between our sending it
/// and our reading its answer, less the time it says it took to answer (NTP's estimate, RFC
/// 5905 §8, with one server stamp), so the offset lies within ± half the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockOffset {
    /// The server's clock minus this host's, ns.
    pub server_ahead_ns: i64,
    /// The estimate lies within ± this, ns.
    pub uncertainty_ns: u64,
}

impl ClockOffset {
    /// From our clock when "done" left (`sent`) and when the answer arrived (`answered`), the
    /// server's clock when it read "done", and how long it then took to answer.
    pub fn estimate(
        sent_ns: u64,
        answered_ns: u64,
        server_ns: u64,
        server_delay_ns: u64,
    ) -> ClockOffset {
        let half = answered_ns
            .saturating_sub(sent_ns)
            .saturating_sub(server_delay_ns)
            / 2;
        let mid = sent_ns.saturating_add(half);
        ClockOffset {
            server_ahead_ns: server_ns as i64 - mid as i64,
            uncertainty_ns: half,
        }
    }
}

/// Differences of a network namespace's TCP counters (`nstat` names) over the measured span.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub struct NsCounters {
    /// Tcp OutSegs: segments sent.
    pub out_segs: u64,
    /// Tcp InSegs: segments received.
    pub in_segs: u64,
    /// Tcp RetransSegs: every retransmission, SYNs included.
    pub retrans_segs: u64,
    /// TcpExt TCPSynRetrans: SYN and SYN-ACK retransmissions.
    pub syn_retrans: u64,
    /// TcpExt TCPOFOQueue: segments that arrived out of order (after a gap).
    pub ofo_queued: u64,
    /// TcpExt TCPDSACKRecvSegs (or TCPDSACKRecv + TCPDSACKOfoRecv on kernels without it):
    /// D-SACKs received, the peer saying a segment
    /// this side sent again had arrived already — a spurious retransmission (a timer or a
    /// tail-loss probe that fired because the ACK was late), not a loss.
    pub dsack_recv: u64,
    /// TcpExt ListenOverflows: SYNs or handshakes a full listen queue dropped.
    pub listen_overflows: u64,
    /// TcpExt ListenDrops (overflows included).
    pub listen_drops: u64,
    /// Ip OutRequests: packets the stack handed to IP for sending.
    pub ip_out_requests: u64,
    /// Ip OutTransmits (kernel 6.3+): packets that left IP for a device. `OutRequests −
    /// OutTransmits` is what the host's own output path dropped (netfilter, routing); `None`
    /// on kernels without the counter.
    pub ip_out_transmits: Option<u64>,
}

impl NsCounters {
    /// The difference from an earlier reading.
    pub fn since(&self, b: &NsCounters) -> NsCounters {
        NsCounters {
            out_segs: self.out_segs.saturating_sub(b.out_segs),
            in_segs: self.in_segs.saturating_sub(b.in_segs),
            retrans_segs: self.retrans_segs.saturating_sub(b.retrans_segs),
            syn_retrans: self.syn_retrans.saturating_sub(b.syn_retrans),
            ofo_queued: self.ofo_queued.saturating_sub(b.ofo_queued),
            dsack_recv: self.dsack_recv.saturating_sub(b.dsack_recv),
            listen_overflows: self.listen_overflows.saturating_sub(b.listen_overflows),
            listen_drops: self.listen_drops.saturating_sub(b.listen_drops),
            ip_out_requests: self.ip_out_requests.saturating_sub(b.ip_out_requests),
            ip_out_transmits: self
                .ip_out_transmits
                .zip(b.ip_out_transmits)
                .map(|(a, b)| a.saturating_sub(b)),
        }
    }

    /// Packets the host's own output path dropped before they left (netfilter output rules,
    /// no route): TCP sends them again after a timer, as if the network had lost them.
    pub fn local_out_drops(&self) -> u64 {
        self.ip_out_transmits
            .map_or(0, |t| self.ip_out_requests.saturating_sub(t))
    }

    /// Retransmitted segments other than SYNs and SYN-ACKs: data (or FIN) sent again.
    pub fn data_retrans(&self) -> u64 {
        self.retrans_segs.saturating_sub(self.syn_retrans)
    }

    /// Data retransmissions the peer did not report as duplicates (D-SACK): segments that
    /// were lost, as far as the counters can tell.
    pub fn lost_retrans(&self) -> u64 {
        self.data_retrans().saturating_sub(self.dsack_recv)
    }

    /// Whether the listen queue dropped anything.
    pub fn listen_overflowed(&self) -> bool {
        self.listen_overflows + self.listen_drops > 0
    }
}

/// Per-hook medians of how long the server's received packets had waited (latscope stack).
#[derive(
    Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct StackEvidence {
    /// Packets seen at the hooks.
    pub packets: u64,
    /// Median wait from the driver to IP receive, ns.
    pub ip_start_ns: Option<f64>,
    /// Median wait to TCP receive, ns.
    pub tcp_start_ns: Option<f64>,
    /// Median wait until queued on the socket, ns.
    pub enqueued_ns: Option<f64>,
    /// Median wait until the application read it, ns.
    pub read_ns: Option<f64>,
    /// The log2 bucket holding the median read latency, e.g. "(33.6ms, 67.1ms]".
    pub read_bucket: Option<String>,
    /// The 90th percentile of the read latency: a server that serves concurrent requests one
    /// at a time keeps most of them waiting in its socket, a minority of the window's packets
    /// when the one-at-a-time steps are as many, so the median can miss them (absent from an
    /// agent that predates it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_p90_ns: Option<f64>,
    /// The same host's way out for the connections' packets it sends (the transmit stages;
    /// absent from an agent that predates them, or where eBPF cannot see them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressEvidence>,
}

/// How long one host's own outgoing packets of the measured connections spent in each stage of
/// its way out (`latscope stack --direction tx`): the stages add up, per packet, from the
/// socket write to the TX completion.
#[derive(
    Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct EgressEvidence {
    /// The stages with packets, in path order.
    pub stages: Vec<EgressStage>,
}

/// One transmit stage's times.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct EgressStage {
    /// The stage (`local-out`, `qdisc`, …).
    pub stage: crate::model::stack::Probe,
    /// Packets timed in it.
    pub packets: u64,
    /// Median, ns (log2 histogram estimate).
    pub p50_ns: f64,
    /// 99th percentile, ns (log2 histogram estimate).
    pub p99_ns: f64,
    /// Mean, ns (exact).
    pub mean_ns: f64,
}

impl EgressEvidence {
    /// The stage's figures, if it had packets.
    pub fn stage(&self, stage: crate::model::stack::Probe) -> Option<&EgressStage> {
        self.stages.iter().find(|s| s.stage == stage)
    }
}

impl StackEvidence {
    /// How long the server's application left the connections' data in the socket before
    /// reading it, at the 90th percentile: the read latency's p90 less the median time to the
    /// socket.
    pub fn socket_wait_p90_ns(&self) -> Option<u64> {
        let (read, enq) = (self.read_p90_ns?, self.enqueued_ns.unwrap_or(0.0));
        Some((read - enq).max(0.0) as u64)
    }
}

/// Options of the server's sockets, read from the sockets themselves.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct ServerSockets {
    /// e.g. "nginx[1234]".
    pub process: String,
    /// The server's ends of our connections that were read.
    pub connections: usize,
    /// Connections with TCP_NODELAY off (Nagle on).
    pub nagle_on: usize,
    /// Connections with TCP_CORK on.
    pub corked: usize,
    /// The connections' send MSS from TCP_INFO (the largest), when read.
    pub snd_mss: Option<u32>,
    /// Who limited the server's sending, over the server's ends of our connections (tcp_info's
    /// busy time and its receive-window- and send-buffer-limited parts), when read.
    pub limits: Option<crate::model::transfer::TransferLimits>,
    /// The largest congestion window among them, bytes (tcpi_snd_cwnd × tcpi_snd_mss): what the
    /// network would let the server have in flight.
    pub cwnd_bytes: Option<u64>,
}

/// CPU scheduling of the server's processes while the requests ran.
#[derive(
    Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct CpuEvidence {
    /// e.g. "nginx[1234]" (the first process listening on the port).
    pub process: String,
    /// CPU bandwidth throttling of its cgroup (or an ancestor's), when the cgroup has a limit.
    pub throttling: Option<Throttling>,
    /// Run-queue waits of its threads (eBPF), when the probes could be attached.
    pub run_queue: Option<RunQueueWaits>,
    /// The same for latscope's own threads (the client) meanwhile: waits that both show are
    /// the whole host's contention, not the server's.
    pub client_run_queue: Option<RunQueueWaits>,
}

/// `cpu.stat` differences over the measured span (cgroup v1 or v2).
#[derive(
    Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct Throttling {
    /// The cgroup, e.g. "/system.slice/web.service".
    pub cgroup: String,
    /// The limit, e.g. "10ms per 100ms" (`cpu.max` / `cpu.cfs_quota_us`).
    pub limit: Option<String>,
    /// Enforcement periods that elapsed.
    pub periods: u64,
    /// Periods in which it ran out of quota.
    pub throttled: u64,
    /// Time its threads were held back, summed over the CPUs (the kernel adds up each CPU's
    /// throttled run queue: two CPUs held for 90 ms count 180 ms).
    pub throttled_ns: u64,
    /// Its CPU quota per period, µs (`cpu.max`, v1 `cpu.cfs_quota_us`), when limited.
    pub quota_us: Option<u64>,
    /// The period, µs (`cpu.max`, v1 `cpu.cfs_period_us`), when limited.
    pub period_us: Option<u64>,
    /// CPUs its processes may run on (`Cpus_allowed_list`: affinity and cpuset), when read.
    pub cpus: Option<u32>,
}

/// A throttled period as the requests felt it: wall clock, not summed over CPUs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeldPerPeriod {
    /// How long the group's threads were held back in a throttled period, ns.
    pub held_ns: u64,
    /// How many CPUs were held at once, estimated (1 where the limit is unknown).
    pub cpus_held: f64,
}

impl Throttling {
    /// The cgroup as a person reads it: its path, and for "/" with a limit — a hierarchy's root
    /// never has one, so that is the root of a cgroup namespace, a container's own cgroup —
    /// says so.
    pub fn cgroup_label(&self) -> String {
        if self.cgroup == "/" && self.limit.is_some() {
            "/ (the root of its cgroup namespace: a container's own cgroup)".into()
        } else {
            self.cgroup.clone()
        }
    }

    /// The wall-clock time a throttled period held the group back — what a request arriving
    /// as it was throttled waits for the next period — or `None` when nothing was throttled.
    ///
    /// `throttled_ns / throttled` is S, the held time of one throttled period summed over the
    /// CPUs held (each CPU's run queue is throttled and unthrottled on its own: kernel/sched/
    /// fair.c, `throttle_cfs_rq` / `unthrottle_cfs_rq` add each one's span to the group's
    /// `throttled_time`). The wall-clock figure is S / k, k the CPUs held at once. In a
    /// throttled period each such CPU first runs its share of the quota Q and is then held
    /// until the period P ends (the quota is spent before any CPU is held), so k·P = Q + S:
    /// k = (Q + S) / P. That is exact for a group kept busy through the period, on 1 or N
    /// CPUs. Where its threads also slept within the period the true k is larger: the
    /// estimate is then high, but never above P − Q / ncpus (spending Q on at most `cpus`
    /// CPUs takes at least Q / ncpus of the period), nor above P. k is kept within 1..=cpus.
    ///
    /// Not used: the CPUs the group ran on over the window (v1 `cpuacct.usage_percpu`
    /// deltas). One thread that migrates touches every CPU but is held on one at a time, so
    /// dividing by them halves a single-threaded server's hold on 2 CPUs; and v1 mounts
    /// cpuacct apart from cpu as often as not, leaving the process in cpuacct's root (the
    /// whole host). cgroup v2 keeps no per-CPU figures (`cpu.stat.local` sums them too).
    ///
    /// Without the limit, S over the CPUs it may run on (or S itself): the lower estimate.
    pub fn held_per_period(&self) -> Option<HeldPerPeriod> {
        if self.throttled == 0 {
            return None;
        }
        let sum_ns = (self.throttled_ns / self.throttled) as f64;
        let cpus = self.cpus.map(|n| f64::from(n.max(1)));
        let (Some(quota_us), Some(period_us)) = (self.quota_us, self.period_us) else {
            let k = cpus.unwrap_or(1.0);
            return Some(HeldPerPeriod {
                held_ns: (sum_ns / k) as u64,
                cpus_held: k,
            });
        };
        let (quota_ns, period_ns) = (quota_us as f64 * 1e3, period_us.max(1) as f64 * 1e3);
        let k = ((quota_ns + sum_ns) / period_ns).clamp(1.0, cpus.unwrap_or(f64::MAX).max(1.0));
        let most = (period_ns - quota_ns / cpus.unwrap_or(k)).max(0.0);
        Some(HeldPerPeriod {
            held_ns: (sum_ns / k).min(most) as u64,
            cpus_held: k,
        })
    }
}

/// How long the server's threads waited for a CPU after becoming runnable.
#[derive(
    Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct RunQueueWaits {
    /// Waits counted.
    pub waits: u64,
    /// Their sum, ns.
    pub total_ns: u64,
    /// Median wait, ns.
    pub p50_ns: f64,
    /// 99th percentile, ns.
    pub p99_ns: f64,
}

impl RunQueueWaits {
    /// From a run-queue histogram (`None` when nothing waited).
    pub fn of(h: &crate::Log2Histogram) -> Option<RunQueueWaits> {
        (h.count() > 0).then(|| RunQueueWaits {
            waits: h.count(),
            total_ns: (h.mean_ns() * h.count() as f64) as u64,
            p50_ns: h.quantile_ns(0.5),
            p99_ns: h.quantile_ns(0.99),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_limited_root_cgroup_is_a_namespaces_root() {
        let t = |cgroup: &str, limit: Option<&str>| Throttling {
            cgroup: cgroup.into(),
            limit: limit.map(String::from),
            periods: 10,
            throttled: 2,
            throttled_ns: 1_000_000,
            quota_us: None,
            period_us: None,
            cpus: None,
        };
        assert!(
            t("/", Some("10ms of CPU per 100ms"))
                .cgroup_label()
                .contains("cgroup namespace")
        );
        assert_eq!(t("/", None).cgroup_label(), "/");
        assert_eq!(t("/ci/job7", Some("x")).cgroup_label(), "/ci/job7");
    }

    #[test]
    fn the_offset_lies_within_half_the_exchange() {
        // Sent at 1000, answered at 1400 (our clock); the server read "done" at 5200 (its
        // clock): it is about 4000 ahead, ± 200.
        let c = ClockOffset::estimate(1000, 1400, 5200, 0);
        assert_eq!((c.server_ahead_ns, c.uncertainty_ns), (4000, 200));
        let behind = ClockOffset::estimate(10_000, 10_010, 2_000, 0);
        assert_eq!(behind.server_ahead_ns, 2_000 - 10_005);
        // The server took 300 of the 400 to answer: the network's share is 100, ± 50.
        let c = ClockOffset::estimate(1000, 1400, 1050, 300);
        assert_eq!((c.server_ahead_ns, c.uncertainty_ns), (0, 50));
    }

    #[test]
    fn requests_parse_strictly() {
        assert_eq!(
            EvidenceRequest::parse(br#"{"version":1,"port":80}"#),
            Ok(EvidenceRequest {
                version: 1,
                port: 80
            })
        );
        for (bad, what) in [
            (
                &br#"{"version":1,"port":80,"pid":1}"#[..],
                "another process",
            ),
            (br#"{"version":1}"#, "no port"),
            (br#"{"version":1,"port":70000}"#, "port out of range"),
            (br#"{"version":1,"port":-1}"#, "negative port"),
            (br#""port 80""#, "not an object"),
            (b"\xff\xfe", "not UTF-8"),
            (b"", "empty"),
        ] {
            assert!(
                matches!(EvidenceRequest::parse(bad), Err(RequestError::Malformed(_))),
                "{what}"
            );
        }
        assert_eq!(
            EvidenceRequest::parse(br#"{"version":2,"port":80}"#),
            Err(RequestError::Version(2))
        );
        assert_eq!(
            EvidenceRequest::parse(br#"{"version":1,"port":0}"#),
            Err(RequestError::NoPort)
        );
    }

    #[test]
    fn evidence_round_trips_through_json() {
        let e = ServerEvidence {
            version: EVIDENCE_VERSION,
            port: 80,
            peer: "10.0.0.1".parse().unwrap(),
            observed_ns: 5_000_000_000,
            done_unix_ns: Some(1),
            answer_delay_ns: Some(2),
            sockets: Observed::Skipped("no connection".into()),
            cpu: Observed::Failed("x".into()),
            kernel_stack: Observed::Ran(StackEvidence::default()),
            counters: Observed::Ran(NsCounters {
                retrans_segs: 3,
                ..Default::default()
            }),
        };
        let j = serde_json::to_string(&e).unwrap();
        assert!(
            j.contains(r#""sockets":{"status":"skipped","value":"no connection"}"#),
            "{j}"
        );
        let back: ServerEvidence = serde_json::from_str(&j).unwrap();
        assert_eq!(back, e);
    }

    /// Ten throttled periods of a group limited to `quota_ms` per 100 ms, on `cpus` CPUs, whose
    /// held time sums to `sum_ms` a period over the CPUs held.
    fn throttled(quota_ms: u64, cpus: Option<u32>, sum_ms: u64) -> Throttling {
        Throttling {
            cgroup: "/web".into(),
            limit: Some(format!("{quota_ms}ms of CPU per 100ms")),
            periods: 10,
            throttled: 10,
            throttled_ns: 10 * sum_ms * 1_000_000,
            quota_us: Some(quota_ms * 1000),
            period_us: Some(100_000),
            cpus,
        }
    }

    fn held_ms(t: &Throttling) -> (f64, f64) {
        let h = t.held_per_period().expect("throttled");
        (h.held_ns as f64 / 1e6, h.cpus_held)
    }

    #[test]
    fn a_throttled_period_is_wall_clock_on_one_two_and_four_cpus() {
        // 20 ms of CPU per 100 ms, threads busy through the period: each CPU runs its share
        // of the quota, then waits for the next period. cpu.stat sums the CPUs held.
        // 1 CPU: runs 20 ms, held 80 ms.
        assert_eq!(held_ms(&throttled(20, Some(1), 80)), (80.0, 1.0));
        // 2 CPUs: each runs 10 ms and is held 90 ms; cpu.stat says 180 ms.
        assert_eq!(held_ms(&throttled(20, Some(2), 180)), (90.0, 2.0));
        // 4 CPUs: each runs 5 ms and is held 95 ms; cpu.stat says 380 ms.
        assert_eq!(held_ms(&throttled(20, Some(4), 380)), (95.0, 4.0));
        // One busy thread on a 4-CPU host: one CPU held at a time, 80 ms — not a quarter.
        assert_eq!(held_ms(&throttled(20, Some(4), 80)), (80.0, 1.0));
    }

    #[test]
    fn a_throttled_period_never_holds_longer_than_the_quota_leaves() {
        // A group that slept part of the period: two CPUs ran 10 ms each from 50 ms and were
        // held 40 ms each (80 ms summed). The counters cannot tell it from one CPU held 80 ms:
        // the estimate is the higher one, within a period less the quota.
        let (h, k) = held_ms(&throttled(20, Some(2), 80));
        assert_eq!((h, k), (80.0, 1.0));
        // Counters beyond the model (a burst, a cgroup shared with other CPUs' tasks): at most
        // the period less the quota spread over every CPU it may run on.
        assert_eq!(held_ms(&throttled(20, Some(2), 250)), (90.0, 2.0));
        // The two-ended fleet test's figures: 5 ms per 100 ms on 2 CPUs, 60–186 ms summed.
        let (h, k) = held_ms(&throttled(5, Some(2), 186));
        assert!(
            (97.0..=97.5).contains(&h) && (1.9..2.0).contains(&k),
            "{h} {k}"
        );
        assert_eq!(held_ms(&throttled(5, Some(2), 60)), (60.0, 1.0));
        // CPUs unknown: the model alone, still under a period.
        let (h, _) = held_ms(&throttled(20, None, 380));
        assert!((94.9..=95.0).contains(&h), "{h}");
    }

    #[test]
    fn without_the_limit_the_sum_is_shared_by_the_cpus() {
        let mut t = throttled(20, Some(2), 180);
        (t.quota_us, t.period_us) = (None, None);
        assert_eq!(held_ms(&t), (90.0, 2.0));
        t.cpus = None;
        assert_eq!(held_ms(&t), (180.0, 1.0));
        t.throttled = 0;
        assert_eq!(t.held_per_period(), None);
    }
}
