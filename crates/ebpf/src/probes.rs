//! The probe registry: the receive path's seven hook points (netstacklat's) and the transmit
//! path's eight stages, and for each the implementations latscope can use, in the order they are
//! tried at start-up.
//!
//! Receive: every implementation ends in the same BPF function (`record()` in
//! `bpf/record.bpf.h`): latency is "now − the skb's software receive timestamp". Implementations
//! differ in *where* in the kernel "now" is taken; [`Hook::semantics`] says where.
//!
//! Transmit: a stage is the time between two [`Boundary`]s a packet passes (`bpf/tx.bpf.h`);
//! each boundary has its own implementations, shared by the two stages it separates.
//! docs/stack.md explains each.

use latscope_core::model::stack::{HookKind, Probe};

/// The implementations of each probe: a probe's name and meaning are the result model's
/// (`latscope_core::model::stack::Probe`); how the kernel is hooked for it is this crate's.
pub trait ProbeHooks {
    /// Implementations, in the order they are tried (receive probes; a transmit stage's are its
    /// boundaries', [`ProbeHooks::span`]).
    fn hooks(self) -> &'static [Hook];

    /// A transmit stage's two boundaries (from, to); `None` for receive probes.
    fn span(self) -> Option<(Boundary, Boundary)>;
}

impl ProbeHooks for Probe {
    fn hooks(self) -> &'static [Hook] {
        match self {
            Probe::IpStart => &IP_START,
            Probe::TcpStart => &TCP_START,
            Probe::UdpStart => &UDP_START,
            Probe::TcpSocketEnqueued => &TCP_ENQUEUED,
            Probe::UdpSocketEnqueued => &UDP_ENQUEUED,
            Probe::TcpSocketRead => &TCP_READ,
            Probe::UdpSocketRead => &UDP_READ,
            _ => &[],
        }
    }

    fn span(self) -> Option<(Boundary, Boundary)> {
        use Boundary as B;
        Some(match self {
            Probe::TcpSendQueue => (B::TcpWrite, B::IpOut),
            Probe::UdpSend => (B::UdpWrite, B::IpOut),
            Probe::LocalOut => (B::IpOut, B::LocalOutDone),
            Probe::PostRouting => (B::LocalOutDone, B::PostRoutingDone),
            Probe::DevEgress => (B::PostRoutingDone, B::DevQueue),
            Probe::Qdisc => (B::DevQueue, B::DriverStart),
            Probe::Driver => (B::DriverStart, B::DriverDone),
            Probe::TxCompletion => (B::DriverDone, B::Freed),
            _ => return None,
        })
    }
}

/// One implementation of a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hook {
    /// How the implementation attaches (fentry, tracepoint, kprobe, …).
    pub kind: HookKind,
    /// What `--list-probes` shows, e.g. `fentry/tcp_v4_rcv+tcp_v6_rcv`.
    pub label: &'static str,
    /// BPF programs (function names in stack.bpf.c) that together implement the probe.
    pub programs: &'static [&'static str],
    /// Where "now" is taken, in one line.
    pub semantics: &'static str,
}

/// The stamping program for skbs without `skb->tstamp`: the earliest hook latscope sees.
pub const STAMP_HOOKS: [Hook; 2] = [
    Hook {
        kind: HookKind::TpBtf,
        label: "tp_btf/netif_receive_skb",
        programs: &["lsstk_stamp_tp"],
        semantics: "stamps skbs without skb->tstamp when they enter __netif_receive_skb_core()",
    },
    Hook {
        kind: HookKind::RawTp,
        label: "raw_tp/netif_receive_skb",
        programs: &["lsstk_stamp_raw"],
        semantics: "stamps skbs without skb->tstamp when they enter __netif_receive_skb_core()",
    },
];

const IP_START: [Hook; 3] = [
    Hook {
        kind: HookKind::Fentry,
        label: "fentry/ip_rcv_core+ip6_rcv_core",
        programs: &["lsstk_ip_fe", "lsstk_ip6_fe"],
        semantics: "entry of ip_rcv_core()/ip6_rcv_core(): past tc ingress, before netfilter PREROUTING",
    },
    Hook {
        kind: HookKind::TpBtf,
        label: "tp_btf/netif_receive_skb",
        programs: &["lsstk_ip_tp"],
        semantics: "net:netif_receive_skb in __netif_receive_skb_core(): after GRO, just before tc ingress and IP",
    },
    Hook {
        kind: HookKind::RawTp,
        label: "raw_tp/netif_receive_skb",
        programs: &["lsstk_ip_raw"],
        semantics: "net:netif_receive_skb in __netif_receive_skb_core(): after GRO, just before tc ingress and IP",
    },
];

const TCP_START: [Hook; 2] = [
    Hook {
        kind: HookKind::Fentry,
        label: "fentry/tcp_v4_rcv+tcp_v6_rcv",
        programs: &["lsstk_tcp_fe4", "lsstk_tcp_fe6"],
        semantics: "entry of tcp_v4_rcv()/tcp_v6_rcv(): past IP, routing and netfilter INPUT",
    },
    Hook {
        kind: HookKind::CgroupSkb,
        label: "cgroup_skb/ingress",
        programs: &["lsstk_tcp_cg"],
        semantics: "cgroup_skb ingress via tcp_filter() in tcp_v4_rcv(): past IP, routing, netfilter INPUT and the socket lookup",
    },
];

const UDP_START: [Hook; 2] = [
    Hook {
        kind: HookKind::Fentry,
        label: "fentry/udp_rcv+udpv6_rcv",
        programs: &["lsstk_udp_fe4", "lsstk_udp_fe6"],
        semantics: "entry of udp_rcv()/udpv6_rcv(): past IP, routing and netfilter INPUT",
    },
    Hook {
        kind: HookKind::CgroupSkb,
        label: "cgroup_skb/ingress",
        programs: &["lsstk_udp_cg"],
        semantics: "cgroup_skb ingress in udp_queue_rcv_one_skb(): past IP, netfilter INPUT and the socket lookup",
    },
];

const TCP_ENQUEUED: [Hook; 4] = [
    Hook {
        kind: HookKind::Fentry,
        label: "fexit/tcp_queue_rcv+tcp_data_queue_ofo",
        programs: &["lsstk_tcpq_fx", "lsstk_tcpq_fxo"],
        semantics: "return of tcp_queue_rcv()/tcp_data_queue_ofo(): the segment is in the socket's queue",
    },
    // Kernels that inline tcp_data_queue_ofo() (Debian's 6.1) have no BTF for it to hook.
    Hook {
        kind: HookKind::Fentry,
        label: "fexit/tcp_queue_rcv",
        programs: &["lsstk_tcpq_fx"],
        semantics: "return of tcp_queue_rcv(): in-order segments in the socket's queue (out-of-order ones, queued by tcp_data_queue_ofo(), are not seen)",
    },
    Hook {
        kind: HookKind::TpBtf,
        label: "tp_btf/sk_data_ready",
        programs: &["lsstk_tcpq_tp"],
        semantics: "sock:sk_data_ready (reader woken after queueing); the skb is the receive queue's tail",
    },
    Hook {
        kind: HookKind::RawTp,
        label: "raw_tp/sk_data_ready",
        programs: &["lsstk_tcpq_raw"],
        semantics: "sock:sk_data_ready (reader woken after queueing); the skb is the receive queue's tail",
    },
];

const UDP_ENQUEUED: [Hook; 3] = [
    Hook {
        kind: HookKind::Fentry,
        label: "fexit/__udp_enqueue_schedule_skb",
        programs: &["lsstk_udpq_fx"],
        semantics: "successful return of __udp_enqueue_schedule_skb(): the datagram is queued",
    },
    Hook {
        kind: HookKind::TpBtf,
        label: "tp_btf/sk_data_ready",
        programs: &["lsstk_udpq_tp"],
        semantics: "sock:sk_data_ready (reader woken after queueing); the skb is the receive queue's tail",
    },
    Hook {
        kind: HookKind::RawTp,
        label: "raw_tp/sk_data_ready",
        programs: &["lsstk_udpq_raw"],
        semantics: "sock:sk_data_ready (reader woken after queueing); the skb is the receive queue's tail",
    },
];

/// tcp-socket-read tries the tracepoint first: netstacklat's fentry/tcp_recv_timestamp fires only
/// for readers that asked for timestamps (tcp_recvmsg() calls it only then), so it is the last
/// resort here, where it would silently miss most applications.
const TCP_READ: [Hook; 3] = [
    Hook {
        kind: HookKind::TpBtf,
        label: "tp_btf/skb_copy_datagram_iovec",
        programs: &["lsstk_tcpr_tp"],
        semantics: "skb:skb_copy_datagram_iovec: each skb whose payload recvmsg()/read() copies to user space",
    },
    Hook {
        kind: HookKind::RawTp,
        label: "raw_tp/skb_copy_datagram_iovec",
        programs: &["lsstk_tcpr_raw"],
        semantics: "skb:skb_copy_datagram_iovec: each skb whose payload recvmsg()/read() copies to user space",
    },
    Hook {
        kind: HookKind::Fentry,
        label: "fentry/tcp_recv_timestamp",
        programs: &["lsstk_tcpr_fe"],
        semantics: "tcp_recv_timestamp() at the end of tcp_recvmsg(): stamp of the last skb read (reader must ask for timestamps)",
    },
];

const UDP_READ: [Hook; 3] = [
    Hook {
        kind: HookKind::Fentry,
        label: "fentry/skb_consume_udp",
        programs: &["lsstk_udpr_fe"],
        semantics: "skb_consume_udp(): the datagram was copied to user space",
    },
    Hook {
        kind: HookKind::TpBtf,
        label: "tp_btf/sock_recv_length+sk_data_ready",
        programs: &["lsstk_udpr_tp", "lsstk_udpr_q"],
        semantics: "sock:sock_recv_length after udp_recvmsg() returned a datagram; its stamp was queued per socket at sk_data_ready (FIFO)",
    },
    Hook {
        kind: HookKind::RawTp,
        label: "raw_tp/sock_recv_length+sk_data_ready",
        programs: &["lsstk_udpr_raw", "lsstk_udpr_rawq"],
        semantics: "sock:sock_recv_length after udp_recvmsg() returned a datagram; its stamp was queued per socket at sk_data_ready (FIFO)",
    },
];

/// A point on the transmit path (`BND_*` in stack.bpf.c). A transmit stage is the time between
/// two adjacent boundaries; each boundary's implementation is chosen once, for both stages it
/// separates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Boundary {
    /// A TCP write puts data in the socket.
    TcpWrite,
    /// A UDP `sendmsg()` starts.
    UdpWrite,
    /// IP output starts, before netfilter LOCAL_OUT.
    IpOut,
    /// Netfilter LOCAL_OUT is done.
    LocalOutDone,
    /// Netfilter POST_ROUTING is done.
    PostRoutingDone,
    /// The device layer queues the packet (`net:net_dev_queue`), right before the qdisc.
    DevQueue,
    /// The driver is handed the packet (`net:net_dev_start_xmit`).
    DriverStart,
    /// The driver's transmit returned (`net:net_dev_xmit`).
    DriverDone,
    /// The skb is freed after transmission (`skb:consume_skb`).
    Freed,
}

impl Boundary {
    /// Every boundary, in path order.
    pub const ALL: [Boundary; 9] = [
        Boundary::TcpWrite,
        Boundary::UdpWrite,
        Boundary::IpOut,
        Boundary::LocalOutDone,
        Boundary::PostRoutingDone,
        Boundary::DevQueue,
        Boundary::DriverStart,
        Boundary::DriverDone,
        Boundary::Freed,
    ];

    /// Implementations, in the order they are tried.
    pub fn hooks(self) -> &'static [Hook] {
        match self {
            Boundary::TcpWrite => &TCP_WRITE,
            Boundary::UdpWrite => &UDP_WRITE,
            Boundary::IpOut => &IP_OUT,
            Boundary::LocalOutDone => &LOCAL_OUT_DONE,
            Boundary::PostRoutingDone => &POST_ROUTING_DONE,
            Boundary::DevQueue => &DEV_QUEUE,
            Boundary::DriverStart => &DRIVER_START,
            Boundary::DriverDone => &DRIVER_DONE,
            Boundary::Freed => &FREED,
        }
    }
}

/// The write, for TCP. Before 6.5, sendfile/splice and kTLS send through do_tcp_sendpages();
/// from 6.5 everything goes through tcp_sendmsg_locked(), and do_tcp_sendpages() is gone.
const TCP_WRITE: [Hook; 6] = [
    Hook {
        kind: HookKind::Fentry,
        label: "fentry/tcp_sendmsg_locked+do_tcp_sendpages",
        programs: &["lsstk_tw_fe", "lsstk_tw_fep"],
        semantics: "entry of tcp_sendmsg_locked()/do_tcp_sendpages(): every write, sendfile and splice",
    },
    Hook {
        kind: HookKind::Fentry,
        label: "fentry/tcp_sendmsg_locked",
        programs: &["lsstk_tw_fe"],
        semantics: "entry of tcp_sendmsg_locked(): every write, sendfile and splice (6.5+)",
    },
    Hook {
        kind: HookKind::TpBtf,
        label: "tp_btf/tcp_sendmsg_locked",
        programs: &["lsstk_tw_tp"],
        semantics: "tcp:tcp_sendmsg_locked in tcp_sendmsg_locked()'s copy loop: every skb a write fills",
    },
    Hook {
        kind: HookKind::RawTp,
        label: "raw_tp/tcp_sendmsg_locked",
        programs: &["lsstk_tw_raw"],
        semantics: "tcp:tcp_sendmsg_locked in tcp_sendmsg_locked()'s copy loop: every skb a write fills",
    },
    Hook {
        kind: HookKind::Kprobe,
        label: "kprobe/tcp_sendmsg_locked+do_tcp_sendpages",
        programs: &["lsstk_tw_kp", "lsstk_tw_kpp"],
        semantics: "entry of tcp_sendmsg_locked()/do_tcp_sendpages(): every write, sendfile and splice",
    },
    Hook {
        kind: HookKind::Kprobe,
        label: "kprobe/tcp_sendmsg_locked",
        programs: &["lsstk_tw_kp"],
        semantics: "entry of tcp_sendmsg_locked(): every write, sendfile and splice (6.5+)",
    },
];

/// The write, for UDP: no tracepoint marks the start of a UDP send.
const UDP_WRITE: [Hook; 2] = [
    Hook {
        kind: HookKind::Fentry,
        label: "fentry/udp_sendmsg+udpv6_sendmsg",
        programs: &["lsstk_uw_fe", "lsstk_uw_fe6"],
        semantics: "entry of udp_sendmsg()/udpv6_sendmsg()",
    },
    Hook {
        kind: HookKind::Kprobe,
        label: "kprobe/udp_sendmsg+udpv6_sendmsg",
        programs: &["lsstk_uw_kp", "lsstk_uw_kp6"],
        semantics: "entry of udp_sendmsg()/udpv6_sendmsg()",
    },
];

const IP_OUT: [Hook; 3] = [
    Hook {
        kind: HookKind::Fentry,
        label: "fentry/__ip_local_out+__ip6_local_out+ip6_xmit",
        programs: &["lsstk_io_fe", "lsstk_io_fe6", "lsstk_io_fex6"],
        semantics: "entry of __ip_local_out()/__ip6_local_out()/ip6_xmit(), right before netfilter LOCAL_OUT, in every namespace",
    },
    Hook {
        kind: HookKind::Netfilter,
        label: "netfilter/local_out@first",
        programs: &["lsstk_io_nf"],
        semantics: "a netfilter program at LOCAL_OUT's first priority (IPv4 and IPv6), in one network namespace",
    },
    Hook {
        kind: HookKind::Kprobe,
        label: "kprobe/__ip_local_out+__ip6_local_out+ip6_xmit",
        programs: &["lsstk_io_kp", "lsstk_io_kp6", "lsstk_io_kpx6"],
        semantics: "entry of __ip_local_out()/__ip6_local_out()/ip6_xmit(), right before netfilter LOCAL_OUT, in every namespace",
    },
];

const LOCAL_OUT_DONE: [Hook; 3] = [
    Hook {
        kind: HookKind::Fentry,
        label: "fentry/ip_output+ip6_output",
        programs: &["lsstk_lo_fe", "lsstk_lo_fe6"],
        semantics: "entry of ip_output()/ip6_output(), which dst_output() calls once LOCAL_OUT accepted the packet",
    },
    Hook {
        kind: HookKind::Netfilter,
        label: "netfilter/local_out@last",
        programs: &["lsstk_lo_nf"],
        semantics: "a netfilter program at LOCAL_OUT's last priority (IPv4 and IPv6), in one network namespace",
    },
    Hook {
        kind: HookKind::Kprobe,
        label: "kprobe/ip_output+ip6_output",
        programs: &["lsstk_lo_kp", "lsstk_lo_kp6"],
        semantics: "entry of ip_output()/ip6_output(), which dst_output() calls once LOCAL_OUT accepted the packet",
    },
];

const POST_ROUTING_DONE: [Hook; 3] = [
    Hook {
        kind: HookKind::Fentry,
        label: "fentry/ip_finish_output+ip6_finish_output",
        programs: &["lsstk_pr_fe", "lsstk_pr_fe6"],
        semantics: "entry of ip_finish_output()/ip6_finish_output(), POST_ROUTING's okfn",
    },
    Hook {
        kind: HookKind::Netfilter,
        label: "netfilter/post_routing@last",
        programs: &["lsstk_pr_nf"],
        semantics: "a netfilter program at POST_ROUTING's last priority (IPv4 and IPv6), in one network namespace",
    },
    Hook {
        kind: HookKind::Kprobe,
        label: "kprobe/ip_finish_output+ip6_finish_output",
        programs: &["lsstk_pr_kp", "lsstk_pr_kp6"],
        semantics: "entry of ip_finish_output()/ip6_finish_output(), POST_ROUTING's okfn",
    },
];

const DEV_QUEUE: [Hook; 2] = [
    Hook {
        kind: HookKind::TpBtf,
        label: "tp_btf/net_dev_queue",
        programs: &["lsstk_dq_tp"],
        semantics: "net:net_dev_queue in __dev_queue_xmit(): after netdev/tc egress, right before the qdisc",
    },
    Hook {
        kind: HookKind::RawTp,
        label: "raw_tp/net_dev_queue",
        programs: &["lsstk_dq_raw"],
        semantics: "net:net_dev_queue in __dev_queue_xmit(): after netdev/tc egress, right before the qdisc",
    },
];

const DRIVER_START: [Hook; 2] = [
    Hook {
        kind: HookKind::TpBtf,
        label: "tp_btf/net_dev_start_xmit",
        programs: &["lsstk_ds_tp"],
        semantics: "net:net_dev_start_xmit: the driver's ndo_start_xmit() is called",
    },
    Hook {
        kind: HookKind::RawTp,
        label: "raw_tp/net_dev_start_xmit",
        programs: &["lsstk_ds_raw"],
        semantics: "net:net_dev_start_xmit: the driver's ndo_start_xmit() is called",
    },
];

const DRIVER_DONE: [Hook; 2] = [
    Hook {
        kind: HookKind::TpBtf,
        label: "tp_btf/net_dev_xmit",
        programs: &["lsstk_dd_tp"],
        semantics: "net:net_dev_xmit: the driver's ndo_start_xmit() returned",
    },
    Hook {
        kind: HookKind::RawTp,
        label: "raw_tp/net_dev_xmit",
        programs: &["lsstk_dd_raw"],
        semantics: "net:net_dev_xmit: the driver's ndo_start_xmit() returned",
    },
];

const FREED: [Hook; 2] = [
    Hook {
        kind: HookKind::TpBtf,
        label: "tp_btf/consume_skb",
        programs: &["lsstk_fr_tp"],
        semantics: "skb:consume_skb: the driver's completion (or the qdisc layer) frees the skb after use",
    },
    Hook {
        kind: HookKind::RawTp,
        label: "raw_tp/consume_skb",
        programs: &["lsstk_fr_raw"],
        semantics: "skb:consume_skb: the driver's completion (or the qdisc layer) frees the skb after use",
    },
];

/// Netfilter hook numbers (`enum nf_inet_hooks`).
pub const NF_INET_LOCAL_OUT: u32 = 3;
/// See [`NF_INET_LOCAL_OUT`].
pub const NF_INET_POST_ROUTING: u32 = 4;

/// Where a netfilter program attaches: (hook number, priority). The first and last priorities
/// the kernel allows a BPF link (`NF_IP_PRI_FIRST`/`LAST` themselves are reserved) bracket
/// every other hook function of the chain: nftables' and iptables' chains, conntrack, NAT.
pub fn netfilter_point(program: &str) -> Option<(u32, i32)> {
    match program {
        "lsstk_io_nf" => Some((NF_INET_LOCAL_OUT, i32::MIN + 1)),
        "lsstk_lo_nf" => Some((NF_INET_LOCAL_OUT, i32::MAX - 1)),
        "lsstk_pr_nf" => Some((NF_INET_POST_ROUTING, i32::MAX - 1)),
        _ => None,
    }
}

/// Attach sites shared by several probes (`SITE_*` in stack.bpf.c): every program at a site runs
/// the same dispatcher, which serves the probes whose bits are set in `site_mask[site]`, so a
/// single program per site is attached once the probes are chosen.
pub const NSITES: usize = 5;

/// The shared site of program `name`, if it has one.
pub fn program_site(name: &str) -> Option<usize> {
    match name {
        "lsstk_stamp_tp" | "lsstk_ip_tp" => Some(0),
        "lsstk_stamp_raw" | "lsstk_ip_raw" => Some(1),
        "lsstk_tcp_cg" | "lsstk_udp_cg" => Some(2),
        "lsstk_tcpq_tp" | "lsstk_udpq_tp" | "lsstk_udpr_q" => Some(3),
        "lsstk_tcpq_raw" | "lsstk_udpq_raw" | "lsstk_udpr_rawq" => Some(4),
        _ => None,
    }
}

/// Every BPF program name the object defines (for tests and leak checks).
pub fn all_program_names() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = STAMP_HOOKS
        .iter()
        .flat_map(|h| h.programs.iter().copied())
        .collect();
    for p in Probe::ALL {
        for h in p.hooks() {
            v.extend(h.programs.iter().copied());
        }
    }
    for b in Boundary::ALL {
        for h in b.hooks() {
            for n in h.programs {
                if !v.contains(n) {
                    v.push(n);
                }
            }
        }
    }
    v
}

/// Prefix of every BPF program and map latscope stack loads (`bpftool prog list | grep lsstk_`).
pub const NAME_PREFIX: &str = "lsstk_";

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use latscope_core::model::stack::{Direction, Directions};

    use super::*;

    #[test]
    fn every_probe_has_fentry_and_a_fallback() {
        for p in Probe::ALL
            .into_iter()
            .filter(|p| p.direction() == Direction::Rx)
        {
            let hooks = p.hooks();
            let first = if p == Probe::TcpSocketRead {
                HookKind::TpBtf
            } else {
                HookKind::Fentry
            };
            assert_eq!(hooks[0].kind, first, "{p}");
            assert!(hooks.iter().any(|h| h.kind == HookKind::Fentry), "{p}");
            assert!(
                hooks.iter().any(|h| h.kind != HookKind::Fentry),
                "{p} has no fallback"
            );
        }
    }

    #[test]
    fn transmit_stages_chain_their_boundaries_in_path_order() {
        let tx = Directions::Tx.probes();
        assert_eq!(tx.len(), 8);
        // The two socket stages end where IP output begins; each later stage starts where the
        // one before it ends, so a packet's stages add up.
        for pair in tx[1..].windows(2) {
            let (a, b) = (pair[0].span().unwrap(), pair[1].span().unwrap());
            assert_eq!(a.1, b.0, "{} → {}", pair[0], pair[1]);
        }
        assert_eq!(
            Probe::TcpSendQueue.span().unwrap().1,
            Probe::UdpSend.span().unwrap().1
        );
        // Boundary ids in BPF: IpOut = 1 … Freed = 7, stage = 7 + the boundary it ends at.
        for p in &tx[2..] {
            let end = p.span().unwrap().1;
            let bnd = Boundary::ALL.iter().position(|b| *b == end).unwrap() - 1;
            assert_eq!(p.id() as usize, 7 + bnd, "{p}");
        }
        for p in Directions::Rx.probes() {
            assert!(p.span().is_none() && !p.hooks().is_empty(), "{p}");
        }
        for b in Boundary::ALL {
            assert!(!b.hooks().is_empty(), "{b:?}");
            for h in b.hooks() {
                let nf = h.kind == HookKind::Netfilter;
                for prog in h.programs {
                    assert_eq!(netfilter_point(prog).is_some(), nf, "{prog}");
                }
            }
        }
        assert_eq!(Directions::Both.probes().len(), Probe::ALL.len());
    }

    #[test]
    fn programs_sharing_a_site_share_its_attach_point() {
        // Consolidation keeps one program per site: they must hook the same place.
        let mut site_kind: [Option<HookKind>; NSITES] = [None; NSITES];
        let hooks = STAMP_HOOKS
            .iter()
            .chain(Probe::ALL.iter().flat_map(|p| p.hooks().iter()));
        let mut seen = 0;
        for h in hooks {
            for prog in h.programs {
                if let Some(site) = program_site(prog) {
                    seen |= 1 << site;
                    let kind = site_kind[site].get_or_insert(h.kind);
                    assert_eq!(*kind, h.kind, "{prog}");
                    assert_ne!(h.kind, HookKind::Fentry, "{prog}");
                }
            }
        }
        assert_eq!(seen, (1 << NSITES) - 1, "every site is used");
    }

    #[test]
    fn program_names_fit_the_kernel_limit_and_carry_the_prefix() {
        // BPF_OBJ_NAME_LEN is 16 including the NUL: longer names are truncated by the kernel.
        for n in all_program_names() {
            assert!(n.len() <= 15, "{n}");
            assert!(n.starts_with(NAME_PREFIX), "{n}");
        }
    }
}
