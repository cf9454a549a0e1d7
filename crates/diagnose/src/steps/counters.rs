//! The kernel's TCP counters (what `nstat` shows: `/proc/net/snmp` and `/proc/net/netstat`) of
//! the client's network namespace and, for a server on this host, of the server's, read before
//! the handshakes and after the single requests. Their differences say whether segments were
//! retransmitted (and which side sent them again), whether segments arrived out of order (the one
//! before was lost on the way to that side), and whether the server's listen queue overflowed —
//! which tells a SYN dropped by a full backlog from a SYN lost on the path.

use std::collections::HashMap;

use latscope_core::model::diagnose::StepName;

use super::step::{NotRun, Observe};
use crate::context::Context;
use crate::evidence::{Evidence, NsCounters, TcpCounters};

pub struct Counters;

/// The counters at the start, and where to read them again.
pub struct Before {
    client: NsCounters,
    /// The server's namespace, read through one of its processes, when it is another one.
    server: Option<(u32, NsCounters)>,
    shared: bool,
}

impl Observe for Counters {
    const NAME: StepName = StepName::TcpCounters;
    const FROM: StepName = StepName::Handshakes;
    const UNTIL: StepName = StepName::OneRequest;
    type Running = Before;
    type Output = TcpCounters;

    fn start(cx: &Context, _ev: &Evidence) -> Result<Before, NotRun> {
        let client = read("self").map_err(NotRun::Skipped)?;
        let (server, shared) = match cx.server {
            Some(s) if s.own_netns => (None, true),
            Some(s) => {
                let pid = super::cpu::listeners(cx.plan.addr.port(), s.netns_inode)
                    .ok()
                    .and_then(|(_, pids)| pids.first().copied());
                (
                    pid.and_then(|p| read(&p.to_string()).ok().map(|c| (p, c))),
                    false,
                )
            }
            None => (None, false),
        };
        Ok(Before {
            client,
            server,
            shared,
        })
    }

    fn finish(_cx: &Context, b: Before) -> Result<TcpCounters, NotRun> {
        let client = read("self").map_err(NotRun::Failed)?.since(&b.client);
        let server = b
            .server
            .and_then(|(pid, before)| read(&pid.to_string()).ok().map(|c| c.since(&before)));
        Ok(TcpCounters {
            client,
            server: if b.shared { Some(client) } else { server },
            shared: b.shared,
        })
    }

    fn detail(_cx: &Context, c: &TcpCounters) -> String {
        let side = describe;
        match (&c.server, c.shared) {
            (Some(s), true) => format!("client and server (one namespace): {}", side(s)),
            (Some(s), false) => format!(
                "client namespace: {}; server namespace: {}",
                side(&c.client),
                side(s)
            ),
            (None, _) => format!(
                "client namespace: {}; the server's not readable here",
                side(&c.client)
            ),
        }
    }

    fn store(ev: &mut Evidence, c: TcpCounters) {
        ev.counters = Some(c);
    }
}

/// One namespace's counters in words, for the step's line.
pub(crate) fn describe(n: &NsCounters) -> String {
    format!(
        "{} segments sent, {} retransmitted ({} SYN/SYN-ACK, {} reported duplicate by the receiver), {} received, {} out of order; listen overflows {}, drops {}; {}",
        n.out_segs,
        n.retrans_segs,
        n.syn_retrans,
        n.dsack_recv,
        n.in_segs,
        n.ofo_queued,
        n.listen_overflows,
        n.listen_drops,
        match n.ip_out_transmits {
            Some(_) => format!(
                "{} of {} outgoing IP packets dropped before leaving",
                n.local_out_drops(),
                n.ip_out_requests
            ),
            None => "no IP OutTransmits counter (kernel < 6.3)".into(),
        }
    )
}

/// The counters of the network namespace of process `pid` ("self": ours).
pub(crate) fn read(pid: &str) -> Result<NsCounters, String> {
    let mut all = HashMap::new();
    for file in ["snmp", "netstat"] {
        let path = format!("/proc/{pid}/net/{file}");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        parse_into(&text, &mut all);
    }
    Ok(counters_of(&all))
}

/// `/proc/net/snmp` and `/proc/net/netstat` come as pairs of lines, a header of names and a
/// line of values under the same prefix ("Tcp:", "TcpExt:"); every value keyed "Prefix:Name".
fn parse_into(text: &str, out: &mut HashMap<String, u64>) {
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [names, values] = pair else { continue };
        let mut n = names.split_whitespace();
        let mut v = values.split_whitespace();
        let (Some(prefix), Some(vp)) = (n.next(), v.next()) else {
            continue;
        };
        if prefix != vp {
            continue;
        }
        for (name, value) in n.zip(v) {
            if let Ok(x) = value.parse::<i64>() {
                out.insert(format!("{prefix}{name}"), x.max(0) as u64);
            }
        }
    }
}

fn counters_of(all: &HashMap<String, u64>) -> NsCounters {
    let get = |k: &str| all.get(k).copied().unwrap_or(0);
    NsCounters {
        out_segs: get("Tcp:OutSegs"),
        in_segs: get("Tcp:InSegs"),
        retrans_segs: get("Tcp:RetransSegs"),
        syn_retrans: get("TcpExt:TCPSynRetrans"),
        ofo_queued: get("TcpExt:TCPOFOQueue"),
        // Segments covered by the D-SACKs where the kernel counts them, or else the D-SACK blocks.
        dsack_recv: all
            .get("TcpExt:TCPDSACKRecvSegs")
            .copied()
            .unwrap_or_else(|| get("TcpExt:TCPDSACKRecv") + get("TcpExt:TCPDSACKOfoRecv")),
        listen_overflows: get("TcpExt:ListenOverflows"),
        listen_drops: get("TcpExt:ListenDrops"),
        ip_out_requests: get("Ip:OutRequests"),
        ip_out_transmits: all.get("Ip:OutTransmits").copied(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_snmp_and_netstat_pairs() {
        let snmp = "Ip: Forwarding DefaultTTL OutRequests OutTransmits\nIp: 1 64 900 880\nTcp: RtoAlgorithm ActiveOpens InSegs OutSegs RetransSegs\nTcp: 1 7 1000 1200 30\n";
        let netstat = "TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPOFOQueue TCPSynRetrans TCPDSACKRecv TCPDSACKOfoRecv\nTcpExt: 0 2 3 40 5 6 1\nIpExt: InNoRoutes\nIpExt: 0\n";
        let mut all = HashMap::new();
        parse_into(snmp, &mut all);
        parse_into(netstat, &mut all);
        let c = counters_of(&all);
        assert_eq!(
            c,
            NsCounters {
                out_segs: 1200,
                in_segs: 1000,
                retrans_segs: 30,
                syn_retrans: 5,
                ofo_queued: 40,
                dsack_recv: 7,
                listen_overflows: 2,
                listen_drops: 3,
                ip_out_requests: 900,
                ip_out_transmits: Some(880),
            }
        );
        assert_eq!(c.local_out_drops(), 20);
        assert_eq!(
            c.lost_retrans(),
            30 - 5 - 7,
            "not the SYNs, nor what the peer already had"
        );
        // Newer kernels count the segments the D-SACKs cover.
        parse_into("TcpExt: TCPDSACKRecvSegs\nTcpExt: 9\n", &mut all);
        assert_eq!(counters_of(&all).dsack_recv, 9);
        let later = NsCounters {
            out_segs: 1300,
            retrans_segs: 31,
            syn_retrans: 6,
            ..c
        };
        let d = later.since(&c);
        assert_eq!((d.out_segs, d.retrans_segs, d.data_retrans()), (100, 1, 0));
    }

    #[test]
    fn reads_our_own_namespace() {
        // Every Linux kernel latscope supports has both files.
        let c = read("self").expect("counters");
        assert!(c.out_segs >= c.retrans_segs);
    }
}
