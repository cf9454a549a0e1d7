//! The result model of `latscope stack` (the `--json` contract): the receive path's hook points
//! (netstacklat's), the transmit path's stages, what start-up made of each, and the histograms
//! read from the kernel. Plain data: the eBPF crate
//! fills it (`latscope_ebpf::session`), `render::stack` and the HTML report read it.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Log2Histogram;
use crate::model::Meta;

/// A receive hook point (netstacklat's) or a transmit stage. The discriminant is the probe id the
/// BPF side uses.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Probe {
    /// The packet enters the IP layer.
    IpStart = 0,
    /// The packet reaches TCP's receive function.
    TcpStart = 1,
    /// The datagram reaches UDP's receive function.
    UdpStart = 2,
    /// The segment is queued on the TCP socket's receive queue.
    TcpSocketEnqueued = 3,
    /// The datagram is queued on the UDP socket's receive queue.
    UdpSocketEnqueued = 4,
    /// The application reads the data from the TCP socket.
    TcpSocketRead = 5,
    /// The application reads the datagram from the UDP socket.
    UdpSocketRead = 6,
    /// Transmit: from the write that put a segment's first byte in the socket to its first
    /// transmission entering IP (TCP's send queue: Nagle, cork, cwnd, TSQ, pacing).
    TcpSendQueue = 7,
    /// Transmit: from `sendmsg()` to the datagram entering IP.
    UdpSend = 8,
    /// Transmit: netfilter LOCAL_OUT (the OUTPUT chains, conntrack).
    LocalOut = 9,
    /// Transmit: routing and netfilter POST_ROUTING (the POSTROUTING chains, NAT).
    PostRouting = 10,
    /// Transmit: neighbour output, netdev and tc egress hooks, up to the device's queue.
    DevEgress = 11,
    /// Transmit: the queueing discipline, until the driver is handed the packet.
    Qdisc = 12,
    /// Transmit: the driver's `ndo_start_xmit()`.
    Driver = 13,
    /// Transmit: from the driver's return until the device hands the buffer back.
    TxCompletion = 14,
}

/// Which way a probe's packets go.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Received: each hook point's figure is the time since the packet's receive timestamp.
    Rx,
    /// Transmitted: each stage's figure is the time spent in it; a packet's stages add up.
    Tx,
}

impl Direction {
    /// `rx` or `tx`, as in Prometheus labels and `--direction`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Rx => "rx",
            Direction::Tx => "tx",
        }
    }
}

/// `--direction`: the probes attached when none are named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Directions {
    /// The receive path (netstacklat's seven hook points).
    #[default]
    Rx,
    /// The transmit path's eight stages.
    Tx,
    /// Both.
    Both,
}

impl Directions {
    /// Whether `d` is included.
    pub fn includes(self, d: Direction) -> bool {
        matches!(
            (self, d),
            (Directions::Both, _)
                | (Directions::Rx, Direction::Rx)
                | (Directions::Tx, Direction::Tx)
        )
    }

    /// Every probe of the included directions, in probe order.
    pub fn probes(self) -> Vec<Probe> {
        Probe::ALL
            .into_iter()
            .filter(|p| self.includes(p.direction()))
            .collect()
    }

    /// The directions `probes` cover (`Rx` for none).
    pub fn of(probes: &[Probe]) -> Directions {
        let rx = probes.iter().any(|p| p.direction() == Direction::Rx);
        let tx = probes.iter().any(|p| p.direction() == Direction::Tx);
        match (rx, tx) {
            (_, false) => Directions::Rx,
            (false, true) => Directions::Tx,
            (true, true) => Directions::Both,
        }
    }
}

impl Probe {
    /// All probes: the receive path's, then the transmit path's, each in packet-path order.
    pub const ALL: [Probe; 15] = [
        Probe::IpStart,
        Probe::TcpStart,
        Probe::UdpStart,
        Probe::TcpSocketEnqueued,
        Probe::UdpSocketEnqueued,
        Probe::TcpSocketRead,
        Probe::UdpSocketRead,
        Probe::TcpSendQueue,
        Probe::UdpSend,
        Probe::LocalOut,
        Probe::PostRouting,
        Probe::DevEgress,
        Probe::Qdisc,
        Probe::Driver,
        Probe::TxCompletion,
    ];

    /// Which way its packets go.
    pub fn direction(self) -> Direction {
        if self.id() >= Probe::TcpSendQueue.id() {
            Direction::Tx
        } else {
            Direction::Rx
        }
    }

    /// The id used as `hist_key.probe` in BPF.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The probe with BPF id `id`.
    pub fn from_id(id: u32) -> Option<Probe> {
        Probe::ALL.get(id as usize).copied()
    }

    /// The name, e.g. `tcp-socket-read` (netstacklat's, for the receive path) or `qdisc`.
    pub fn name(self) -> &'static str {
        match self {
            Probe::IpStart => "ip-start",
            Probe::TcpStart => "tcp-start",
            Probe::UdpStart => "udp-start",
            Probe::TcpSocketEnqueued => "tcp-socket-enqueued",
            Probe::UdpSocketEnqueued => "udp-socket-enqueued",
            Probe::TcpSocketRead => "tcp-socket-read",
            Probe::UdpSocketRead => "udp-socket-read",
            Probe::TcpSendQueue => "tcp-send-queue",
            Probe::UdpSend => "udp-send",
            Probe::LocalOut => "local-out",
            Probe::PostRouting => "post-routing",
            Probe::DevEgress => "dev-egress",
            Probe::Qdisc => "qdisc",
            Probe::Driver => "driver",
            Probe::TxCompletion => "tx-completion",
        }
    }

    /// What reaching this point means (netstacklat's wording), or what a stage holds.
    pub fn description(self) -> &'static str {
        match self {
            Probe::IpStart => {
                "packet has reached the IP stack, i.e. past the traffic control layer"
            }
            Probe::TcpStart => {
                "packet has reached the local TCP stack, i.e. past the IP (and routing) stack"
            }
            Probe::UdpStart => {
                "packet has reached the local UDP stack, i.e. past the IP (and routing) stack"
            }
            Probe::TcpSocketEnqueued => {
                "packet has been enqueued to a TCP socket, i.e. end of the kernel receive stack"
            }
            Probe::UdpSocketEnqueued => {
                "packet has been enqueued to a UDP socket, i.e. end of the kernel receive stack"
            }
            Probe::TcpSocketRead => {
                "packet payload has been read from a TCP socket, i.e. delivered to user space"
            }
            Probe::UdpSocketRead => {
                "packet payload has been read from a UDP socket, i.e. delivered to user space"
            }
            Probe::TcpSendQueue => {
                "from the write of a segment's first byte to its first transmission entering IP: Nagle, cork, cwnd and receive window, TCP small queues, pacing"
            }
            Probe::UdpSend => {
                "from sendmsg() to the datagram entering IP: the copy, the route, a full send buffer, corking"
            }
            Probe::LocalOut => "netfilter LOCAL_OUT: the OUTPUT chains, conntrack",
            Probe::PostRouting => "routing and netfilter POST_ROUTING: the POSTROUTING chains, NAT",
            Probe::DevEgress => {
                "neighbour output (ARP/ND), netdev and tc egress hooks, up to the device's queue"
            }
            Probe::Qdisc => {
                "the queueing discipline: enqueue, backlog, dequeue, until the driver is handed the packet"
            }
            Probe::Driver => "the driver's ndo_start_xmit()",
            Probe::TxCompletion => {
                "from the driver's return until the device hands the buffer back (TX completion)"
            }
        }
    }

    /// Whether the current task is the reading application (so `--pid` can apply).
    pub fn in_task_context(self) -> bool {
        matches!(self, Probe::TcpSocketRead | Probe::UdpSocketRead)
    }

    /// Whether `--pid` selects this probe's packets: the reader's, at the socket-read probes;
    /// the packets of the sockets the process writes to, at every transmit stage.
    pub fn pid_applies(self) -> bool {
        self.in_task_context() || self.direction() == Direction::Tx
    }
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `--probes` named something that is not a probe.
#[derive(Debug, thiserror::Error)]
#[error(
    "unknown probe '{0}' (receive: ip-start, tcp-start, udp-start, tcp-socket-enqueued, udp-socket-enqueued, tcp-socket-read, udp-socket-read; transmit: tcp-send-queue, udp-send, local-out, post-routing, dev-egress, qdisc, driver, tx-completion)"
)]
pub struct UnknownProbe(pub String);

impl FromStr for Probe {
    type Err = UnknownProbe;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Probe::ALL
            .into_iter()
            .find(|p| p.name() == s.trim())
            .ok_or_else(|| UnknownProbe(s.to_string()))
    }
}

/// The BPF program type an implementation uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HookKind {
    /// fentry/fexit on a kernel function: netstacklat's choice; needs BPF trampolines.
    Fentry,
    /// A BTF-typed raw tracepoint (stable tracepoint, typed arguments).
    TpBtf,
    /// A raw tracepoint (same events as tp_btf, untyped arguments; kernels without tp_btf).
    RawTp,
    /// A cgroup_skb ingress program on the root of the cgroup v2 hierarchy.
    CgroupSkb,
    /// A netfilter program (Linux 6.4+) at a hook's first or last priority, in one network
    /// namespace.
    Netfilter,
    /// A kprobe on a kernel function (kernels with kprobes but without BPF trampolines).
    Kprobe,
}

/// How samples are split into histograms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    #[default]
    /// One histogram per probe.
    None,
    /// One histogram per probe and receiving interface.
    Interface,
    /// One histogram per probe and cgroup (v2) of the reading process.
    Cgroup,
}

/// Filters applied in the kernel; `None` = no filter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Filters {
    /// Receiving interface index (skb_iif).
    pub ifindex: Option<u32>,
    /// Network namespace inode (as in `ls -i /proc/PID/ns/net`).
    pub netns_inode: Option<u64>,
    /// Reading process (tgid); socket-read probes only.
    pub tgid: Option<u32>,
    /// cgroup v2 id (inode of the cgroup directory).
    pub cgroup_id: Option<u64>,
    /// Local (destination) port.
    pub local_port: Option<u16>,
    /// Remote (source) port.
    pub remote_port: Option<u16>,
    /// Local (destination) address; an IPv4 address also matches its v4-mapped IPv6 form on
    /// dual-stack sockets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_addr: Option<std::net::IpAddr>,
    /// Remote (source) address, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_addr: Option<std::net::IpAddr>,
}

/// Why one implementation could not be used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HookAttempt {
    /// e.g. `fentry/tcp_v4_rcv+tcp_v6_rcv`.
    pub hook: String,
    /// Why it was refused (the loader or kernel error).
    pub error: String,
    /// Set when the kernel could run the hook but the system lacks something it needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<Prerequisite>,
}

/// Something a hook needs besides the kernel's features; a probe refused for it could work
/// on this kernel once it is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Prerequisite {
    /// A mounted cgroup v2 hierarchy: cgroup_skb programs attach to its root. `ip netns exec`
    /// mounts a fresh /sys without it.
    Cgroup2Mount,
}

/// The outcome of start-up for one probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProbeStatus {
    /// The hook point.
    pub probe: Probe,
    /// The implementation in use, if any.
    pub hook: Option<String>,
    /// The kind of the implementation in use, if any.
    pub hook_kind: Option<HookKind>,
    /// Where "now" is taken with that implementation.
    pub semantics: Option<String>,
    /// Implementations that were refused, and why.
    pub refused: Vec<HookAttempt>,
    /// Implementations after the chosen one that would also work (only with `try_all`).
    pub also_available: Vec<String>,
}

impl ProbeStatus {
    /// Whether an implementation of the probe is attached.
    pub fn available(&self) -> bool {
        self.hook.is_some()
    }

    /// What the system lacks for an implementation the kernel could run, when the probe is
    /// unavailable for that reason rather than for the kernel's.
    pub fn missing(&self) -> Option<Prerequisite> {
        if self.available() {
            return None;
        }
        self.refused.iter().find_map(|r| r.missing)
    }
}

/// Counters the BPF side keeps per probe about timestamps (receive) or starts (transmit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StampStats {
    /// Samples whose skb had no `skb->tstamp`; latency measured from latscope's earliest hook.
    pub fallback_stamped: u64,
    /// Samples dropped: no timestamp at all (receive); not timed because latscope did not see
    /// the packet start the stage (transmit).
    pub no_stamp: u64,
    /// Samples dropped: timestamp in the future (clock stepped?).
    pub bad_stamp: u64,
    /// Transmit, `tx-completion`: packets a virtual device (loopback, veth, bridge, VLAN,
    /// tunnel) handed on to a receive path or another device, which has no completion to time.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub handed_on: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One probe's histogram (for one group when grouping).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProbeHistogram {
    /// The hook point.
    pub probe: Probe,
    /// The implementation that recorded it, e.g. `tp_btf/skb_copy_datagram_iovec`.
    pub hook: String,
    /// Group: interface name (or `if<N>` when not in this namespace), cgroup id, or `all`.
    pub group: String,
    /// Packets timed.
    pub count: u64,
    /// Mean latency, ns.
    pub mean_ns: f64,
    /// Estimated from the log2 buckets (linear inside the bucket; off by at most 2×).
    pub p50_ns: f64,
    /// Estimated like `p50_ns`.
    pub p99_ns: f64,
    /// The log2 histogram the statistics come from.
    pub hist: Log2Histogram,
}

impl ProbeHistogram {
    /// Build with the statistics derived from `hist`.
    pub fn new(probe: Probe, hook: &str, group: String, hist: Log2Histogram) -> Self {
        ProbeHistogram {
            probe,
            hook: hook.to_string(),
            group,
            count: hist.count(),
            mean_ns: hist.mean_ns(),
            p50_ns: hist.quantile_ns(0.50),
            p99_ns: hist.quantile_ns(0.99),
            hist,
        }
    }
}

/// One transmit stage's part of a packet's way out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StageShare {
    /// The stage.
    pub probe: Probe,
    /// Its mean time per packet, ns.
    pub mean_ns: f64,
    /// Its part of the sum of the stages' means (0–1).
    pub share: f64,
}

/// The transmit stages' mean times (over groups), in path order, and each one's part of their
/// sum: a packet's stages add up, so the sum is the mean time from the write to the completion of
/// the packets that pass every stage shown. `tcp-send-queue` and `udp-send` are one stage for
/// a packet (its protocol's): their means are weighted by their counts.
pub fn tx_stage_shares(hists: &[ProbeHistogram]) -> Vec<StageShare> {
    // (stage, Σ time, packets) per stage, over groups; the socket stage under the protocol
    // that had more packets.
    let mut acc: Vec<(Probe, f64, u64)> = Vec::new();
    for h in hists
        .iter()
        .filter(|h| h.probe.direction() == Direction::Tx && h.count > 0)
    {
        let socket = |p: Probe| matches!(p, Probe::TcpSendQueue | Probe::UdpSend);
        let sum = h.mean_ns * h.count as f64;
        match acc
            .iter_mut()
            .find(|(p, _, _)| *p == h.probe || (socket(*p) && socket(h.probe)))
        {
            Some((p, s, n)) => {
                if h.count > *n {
                    *p = h.probe;
                }
                *s += sum;
                *n += h.count;
            }
            None => acc.push((h.probe, sum, h.count)),
        }
    }
    acc.sort_by_key(|(p, _, _)| *p);
    let total: f64 = acc.iter().map(|(_, s, n)| s / *n as f64).sum();
    acc.into_iter()
        .map(|(probe, sum, n)| {
            let mean_ns = sum / n as f64;
            StageShare {
                probe,
                mean_ns,
                share: if total > 0.0 { mean_ns / total } else { 0.0 },
            }
        })
        .collect()
}

/// Timestamp bookkeeping of one probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProbeStamps {
    /// The hook point.
    pub probe: Probe,
    #[serde(flatten)]
    /// Samples timed from the fallback stamp, or dropped for a missing or bad timestamp.
    pub stats: StampStats,
}

/// `latscope stack --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StackReport {
    /// Tool, version and command.
    pub meta: Meta,
    /// How histograms are split (`--group-by`).
    pub group_by: GroupBy,
    /// Filters applied in the kernel.
    pub filters: Filters,
    /// Each requested probe: the implementation in use, or why none could be used.
    pub probes: Vec<ProbeStatus>,
    /// Hook that stamps skbs arriving without `skb->tstamp` (none: such packets are not counted).
    pub stamp_hook: Option<String>,
    /// One packet in this many was timed at each probe (`--sample`; 1 = every packet): counts
    /// are then about 1/N of the packets.
    pub sample_every: u32,
    /// How long the probes were attached, ns.
    pub duration_ns: u64,
    /// Stopped by Ctrl-C.
    pub interrupted: bool,
    /// Cumulative histograms since start, in probe order then group.
    pub histograms: Vec<ProbeHistogram>,
    /// Timestamp bookkeeping per probe.
    pub stamps: Vec<ProbeStamps>,
}

/// One `--json-lines` record per `-r` interval: histograms of that interval only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StackInterval {
    /// Always "interval".
    pub event: String,
    /// Always "stack".
    pub command: String,
    /// Start of the interval, ns since the start of the run.
    pub start_ns: u64,
    /// End of the interval, ns since the start of the run.
    pub end_ns: u64,
    /// This interval's histograms, in probe order then group.
    pub histograms: Vec<ProbeHistogram>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_ids_match_order() {
        for (i, p) in Probe::ALL.iter().enumerate() {
            assert_eq!(p.id() as usize, i);
            assert_eq!(Probe::from_id(p.id()), Some(*p));
            assert_eq!(p.name().parse::<Probe>().ok(), Some(*p));
        }
        assert!("tcp-begin".parse::<Probe>().is_err());
    }

    #[test]
    fn stage_shares_add_up_and_count_the_socket_stage_once() {
        let h = |p: Probe, v: &[u64]| {
            let mut hist = Log2Histogram::new();
            for x in v {
                hist.record(*x);
            }
            ProbeHistogram::new(p, "x", "all".into(), hist)
        };
        let hists = [
            h(Probe::TcpStart, &[5_000]),
            h(Probe::Qdisc, &[9_000, 11_000]),
            h(Probe::TcpSendQueue, &[1_000, 1_000, 1_000]),
            h(Probe::UdpSend, &[5_000]),
            h(Probe::LocalOut, &[0]),
        ];
        let s = tx_stage_shares(&hists);
        let names: Vec<Probe> = s.iter().map(|x| x.probe).collect();
        // Path order; one socket stage, named after the protocol with more packets.
        assert_eq!(names, [Probe::TcpSendQueue, Probe::LocalOut, Probe::Qdisc]);
        assert!((s[0].mean_ns - 2_000.0).abs() < 1.0, "{s:?}");
        assert!((s[2].mean_ns - 10_000.0).abs() < 1.0, "{s:?}");
        let total: f64 = s.iter().map(|x| x.share).sum();
        assert!((total - 1.0).abs() < 1e-9);
        assert!((s[2].share - 10.0 / 12.0).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn directions_select_their_probes() {
        assert_eq!(Directions::Rx.probes().len(), 7);
        assert_eq!(Directions::Tx.probes().len(), 8);
        assert_eq!(Directions::Both.probes().len(), Probe::ALL.len());
        assert!(
            Directions::Tx
                .probes()
                .iter()
                .all(|p| p.direction() == Direction::Tx)
        );
        assert_eq!(Directions::of(&[]), Directions::Rx);
        assert_eq!(Directions::of(&[Probe::Qdisc]), Directions::Tx);
        assert_eq!(
            Directions::of(&[Probe::Qdisc, Probe::TcpStart]),
            Directions::Both
        );
    }
}
