//! The probe registry: netstacklat's seven hook points, and for each the implementations
//! latscope can use, in the order they are tried at start-up.
//!
//! Every implementation ends in the same BPF function (`record()` in `bpf/stack.bpf.c`): latency
//! is "now − the skb's software receive timestamp". Implementations differ in *where* in the
//! kernel "now" is taken; [`Hook::semantics`] says where, and docs/stack.md explains each.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One of netstacklat's hook points. The discriminant is the probe id the BPF side uses.
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
}

impl Probe {
    /// All probes, in packet-path order.
    pub const ALL: [Probe; 7] = [
        Probe::IpStart,
        Probe::TcpStart,
        Probe::UdpStart,
        Probe::TcpSocketEnqueued,
        Probe::UdpSocketEnqueued,
        Probe::TcpSocketRead,
        Probe::UdpSocketRead,
    ];

    /// The id used as `hist_key.probe` in BPF.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The probe with BPF id `id`.
    pub fn from_id(id: u32) -> Option<Probe> {
        Probe::ALL.get(id as usize).copied()
    }

    /// netstacklat's name, e.g. `tcp-socket-read`.
    pub fn name(self) -> &'static str {
        match self {
            Probe::IpStart => "ip-start",
            Probe::TcpStart => "tcp-start",
            Probe::UdpStart => "udp-start",
            Probe::TcpSocketEnqueued => "tcp-socket-enqueued",
            Probe::UdpSocketEnqueued => "udp-socket-enqueued",
            Probe::TcpSocketRead => "tcp-socket-read",
            Probe::UdpSocketRead => "udp-socket-read",
        }
    }

    /// What reaching this point means (netstacklat's wording).
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
        }
    }

    /// Whether the current task is the reading application (so `--pid` can apply).
    pub fn in_task_context(self) -> bool {
        matches!(self, Probe::TcpSocketRead | Probe::UdpSocketRead)
    }

    /// Implementations, in the order they are tried.
    pub fn hooks(self) -> &'static [Hook] {
        match self {
            Probe::IpStart => &IP_START,
            Probe::TcpStart => &TCP_START,
            Probe::UdpStart => &UDP_START,
            Probe::TcpSocketEnqueued => &TCP_ENQUEUED,
            Probe::UdpSocketEnqueued => &UDP_ENQUEUED,
            Probe::TcpSocketRead => &TCP_READ,
            Probe::UdpSocketRead => &UDP_READ,
        }
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
    "unknown probe '{0}' (expected one of: ip-start, tcp-start, udp-start, tcp-socket-enqueued, udp-socket-enqueued, tcp-socket-read, udp-socket-read)"
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
    v
}

/// Prefix of every BPF program and map latscope stack loads (`bpftool prog list | grep lsstk_`).
pub const NAME_PREFIX: &str = "lsstk_";

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
    fn every_probe_has_fentry_and_a_fallback() {
        for p in Probe::ALL {
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
