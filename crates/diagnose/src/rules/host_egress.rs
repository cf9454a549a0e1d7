//! `host_egress`: a host's own way out holds the connections' packets.

use latscope_core::model::stack::Probe;

use super::*;

/// The stages a host's set-up holds packets in. TCP's send queue (Nagle, cork, windows, pacing)
/// is the transport's, which its own rules read; UDP's send is the application's copy.
const HELD: [Probe; 6] = [
    Probe::LocalOut,
    Probe::PostRouting,
    Probe::DevEgress,
    Probe::Qdisc,
    Probe::Driver,
    Probe::TxCompletion,
];

/// The median at which a stage holds packets: a healthy stage takes 0.2–2 µs a packet (the
/// probes' own cost included), 10,000 netfilter rules ~140 µs, a shaper's backlog milliseconds.
pub const EGRESS_FLOOR_NS: f64 = 50_000.0;

/// The slowest held stage of one host's way out, when it holds packets.
fn worst(e: Option<&EgressEvidence>) -> Option<&EgressStage> {
    e?.stages
        .iter()
        .filter(|s| HELD.contains(&s.stage) && s.p50_ns >= EGRESS_FLOOR_NS)
        .max_by(|a, b| a.p50_ns.total_cmp(&b.p50_ns))
}

/// The slowest held stage of the way out of the host on `side`, as the rule read it.
fn worst_of(e: &Evidence, side: Side) -> Option<&EgressStage> {
    match side {
        Side::Client => worst(e.client_egress.as_ref()),
        Side::Server => worst(e.stack.as_ref().and_then(|s| s.egress.as_ref())),
        _ => None,
    }
}

/// Whether the way out of the host on `side` holds its packets in the device's queue (the
/// qdisc, the driver, its completion): where a slow link's serialisation shows on the sender.
pub fn held_by_the_device(e: &Evidence, side: Side) -> bool {
    worst_of(e, side)
        .is_some_and(|s| matches!(s.stage, Probe::Qdisc | Probe::Driver | Probe::TxCompletion))
}

/// What to look at and change for a stage.
fn fix(stage: Probe) -> &'static str {
    match stage {
        Probe::LocalOut => {
            "count and trim the netfilter OUTPUT rules (`nft list ruleset | wc -l`, `iptables-save | grep -c -- '-A OUTPUT'`): remove redundant ones, match with sets and maps instead of long chains, and skip conntrack for traffic that needs no state (`notrack`)"
        }
        Probe::PostRouting => {
            "count and trim the POSTROUTING rules and NAT (`nft list ruleset`, `iptables-save -t nat`): long SNAT/masquerade chains, sets instead of rule lists"
        }
        Probe::DevEgress => {
            "look at the device's egress hooks (`tc filter show dev DEV egress`, `nft list ruleset` netdev egress chains) and neighbour resolution (`ip neigh`: entries stuck INCOMPLETE or FAILED)"
        }
        Probe::Qdisc => {
            "the device's queueing discipline holds packets: its backlog (`tc -s qdisc show dev DEV`: backlog, drops) — lower its limit, give it an AQM (fq_codel, cake), or raise a shaper's rate to what the link carries — or its classifiers (`tc filter show dev DEV`: long u32 lists; hash tables or flower instead)"
        }
        Probe::Driver => {
            "the driver's transmit is slow (`ethtool -S DEV` for queue stops and restarts; a virtual NIC's host side, `ethtool -l DEV` for its TX queues)"
        }
        _ => {
            "the device hands transmitted buffers back late: interrupt coalescing (`ethtool -c DEV`), the TX ring (`ethtool -g DEV`), and the CPU serving its interrupts (softirq time in `mpstat -P ALL`)"
        }
    }
}

/// The host's way out holds every packet: the stage, its median and tail, and the fix. Read on
/// the client's host (its packets to the server) and the server's (its packets to the client,
/// local or from its agent); the slower is the finding, the other a line of its evidence.
pub fn host_egress(e: &Evidence) -> Option<Diagnosis> {
    let server = e.stack.as_ref().and_then(|s| s.egress.as_ref());
    let hosts = [
        (Side::Client, "client", worst(e.client_egress.as_ref())),
        (Side::Server, "server", worst(server)),
    ];
    let (side, host, stage) = hosts
        .iter()
        .filter_map(|(side, host, s)| Some((*side, *host, (*s)?)))
        .max_by(|a, b| a.2.p50_ns.total_cmp(&b.2.p50_ns))?;
    // One packet of each request crosses each host's way out on its critical path: the
    // request the client's, the response the server's. The median is a log2 histogram's
    // estimate (off by up to 2x inside its bucket) and the mean is exact: the lower of the two.
    let mut explains = stage.p50_ns.min(stage.mean_ns) as u64;
    if let Some(single) = &e.single {
        explains = explains.min(single.p50_ns);
    }
    let mut evidence = vec![format!(
        "the {host}'s way out (eBPF, transmit stages): {} packets spent p50 {}, p99 {} (mean {}) in {} — {}",
        stage.packets,
        format_ns(stage.p50_ns),
        format_ns(stage.p99_ns),
        format_ns(stage.mean_ns),
        stage.stage,
        stage.stage.description()
    )];
    if let Some(single) = &e.single {
        evidence.push(format!(
            "one request takes {} (p50): its {} packet pays this once",
            format_ns(single.p50_ns as f64),
            if side == Side::Client {
                "request"
            } else {
                "response"
            }
        ));
    }
    for (_, h, s) in hosts.iter().filter(|(s, _, _)| *s != side) {
        if let Some(s) = s {
            evidence.push(format!(
                "the {h}'s way out holds packets too: {} p50 {}",
                s.stage,
                format_ns(s.p50_ns)
            ));
        }
    }
    Some(Diagnosis {
        rule: RuleId::HostEgress,
        title: format!(
            "the {host}'s own way out holds its packets in {}: {} each (p50)",
            stage.stage,
            format_ns(stage.p50_ns)
        ),
        explains_ns: explains,
        confidence: 0.85,
        side,
        evidence,
        fix: format!("on the {host}: {}", fix(stage.stage)),
        caused_by: None,
        causes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use latscope_core::Summary;

    fn stage(stage: Probe, p50_us: f64) -> EgressStage {
        EgressStage {
            stage,
            packets: 300,
            p50_ns: p50_us * 1e3,
            p99_ns: p50_us * 1.6e3,
            mean_ns: p50_us * 1.05e3,
        }
    }

    /// A clean way out: every stage a few hundred ns, TCP's send queue a microsecond.
    fn clean() -> EgressEvidence {
        EgressEvidence {
            stages: vec![
                stage(Probe::TcpSendQueue, 1.0),
                stage(Probe::LocalOut, 0.2),
                stage(Probe::PostRouting, 0.15),
                stage(Probe::DevEgress, 0.2),
                stage(Probe::Qdisc, 0.2),
                stage(Probe::Driver, 0.4),
            ],
        }
    }

    fn with(mut e: EgressEvidence, slow: EgressStage) -> EgressEvidence {
        e.stages.retain(|s| s.stage != slow.stage);
        e.stages.push(slow);
        e
    }

    fn requests(p50_us: u64) -> Evidence {
        Evidence {
            single: Some(Summary {
                count: 100,
                p50_ns: p50_us * 1000,
                p99_ns: p50_us * 1100,
                ..Summary::default()
            }),
            ..Evidence::default()
        }
    }

    #[test]
    fn output_rules_on_the_client_name_local_out_and_the_fix() {
        let mut e = requests(400);
        e.client_egress = Some(with(clean(), stage(Probe::LocalOut, 139.0)));
        let f = host_egress(&e).expect("fires");
        assert_eq!((f.rule, f.side), (RuleId::HostEgress, Side::Client));
        assert_eq!(f.explains_ns, 139_000);
        assert!(f.title.contains("client's own way out") && f.title.contains("local-out"));
        assert!(
            f.evidence[0].contains("p50 139") && f.evidence[0].contains("p99 222"),
            "{f:?}"
        );
        assert!(f.fix.contains("OUTPUT rules"), "{}", f.fix);
    }

    #[test]
    fn a_backlog_on_the_servers_qdisc_is_the_servers_and_never_more_than_a_request() {
        let mut e = requests(15_000);
        e.stack = Some(StackEvidence {
            egress: Some(with(clean(), stage(Probe::Qdisc, 18_000.0))),
            ..StackEvidence::default()
        });
        // The client's way out is slow too, less so: a line of the evidence.
        e.client_egress = Some(with(clean(), stage(Probe::PostRouting, 90.0)));
        let f = host_egress(&e).expect("fires");
        assert_eq!(f.side, Side::Server);
        assert_eq!(f.explains_ns, 15_000_000, "capped at the request's median");
        assert!(f.fix.contains("tc -s qdisc") && f.fix.contains("fq_codel"));
        assert!(
            f.evidence
                .iter()
                .any(|l| l.contains("client's way out holds packets too: post-routing"))
        );
    }

    #[test]
    fn silent_on_a_clean_way_out_and_on_tcps_own_send_queue() {
        let mut e = requests(100);
        e.client_egress = Some(clean());
        e.stack = Some(StackEvidence {
            egress: Some(clean()),
            ..StackEvidence::default()
        });
        assert_eq!(host_egress(&e), None);
        // Nagle or a full window holds data in TCP's queue: other rules' evidence, not this.
        e.client_egress = Some(with(clean(), stage(Probe::TcpSendQueue, 40_000.0)));
        assert_eq!(host_egress(&e), None);
        // Nothing measured: nothing said.
        assert_eq!(host_egress(&Evidence::default()), None);
    }

    fn finding(rule: RuleId, side: Side, explains_ns: u64) -> Diagnosis {
        Diagnosis {
            rule,
            title: "x".into(),
            explains_ns,
            confidence: 0.8,
            side,
            evidence: vec![],
            fix: String::new(),
            caused_by: None,
            causes: vec![],
        }
    }

    #[test]
    fn a_slow_links_serialisation_is_the_cause_of_the_senders_qdisc_wait() {
        // The lab's slow link: a 2.8 Mbit/s shaper on the server's device, each response's
        // later packets waiting for its earlier ones there.
        let mut e = requests(2_180);
        e.stack = Some(StackEvidence {
            egress: Some(with(clean(), stage(Probe::Qdisc, 3_500.0))),
            ..StackEvidence::default()
        });
        let held = host_egress(&e).unwrap();
        assert!(held_by_the_device(&e, Side::Server));
        let link = finding(RuleId::BottleneckBandwidth, Side::Network, 2_170_000);
        let ranked = rank(&e, vec![held.clone(), link]);
        assert_eq!(ranked[0].rule, RuleId::BottleneckBandwidth);
        assert_eq!(ranked[1].caused_by, Some(RuleId::BottleneckBandwidth));
        // Netfilter rules are no serialisation: they stay a root of their own.
        e.stack = Some(StackEvidence {
            egress: Some(with(clean(), stage(Probe::LocalOut, 900.0))),
            ..StackEvidence::default()
        });
        let rules = host_egress(&e).unwrap();
        let link = finding(RuleId::BottleneckBandwidth, Side::Network, 2_170_000);
        let ranked = rank(&e, vec![rules, link]);
        assert!(ranked.iter().all(|f| f.caused_by.is_none()), "{ranked:?}");
    }

    #[test]
    fn the_stage_explains_the_client_hosts_cost_it_covers() {
        let mut e = requests(400);
        e.client_egress = Some(with(clean(), stage(Probe::LocalOut, 139.0)));
        let cause = host_egress(&e).unwrap();
        let effect = finding(RuleId::ClientHostStack, Side::Client, 150_000);
        let ranked = rank(&e, vec![effect, cause]);
        assert_eq!(ranked[0].rule, RuleId::HostEgress);
        assert_eq!(ranked[1].caused_by, Some(RuleId::HostEgress));
    }
}
