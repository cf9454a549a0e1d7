//! The catalogue of findings. Each rule is a pure function of the evidence, so each is tested
//! on its own with synthetic figures; the collection of evidence lives in `steps/`.

use latscope_core::model::diagnose::{Diagnosis, RuleId, Side};
use latscope_core::timer::{TcpTimer, describe_stall};
use latscope_core::units::format_ns;

pub use super::evidence::*;

/// A rule: the evidence in, a finding out when it fires.
pub type Rule = fn(&Evidence) -> Option<Diagnosis>;

/// Rules in the order they are tried; the report ranks what fires by latency explained.
pub const RULES: &[Rule] = &[
    nagle_delayed_ack,
    think_time,
    socket_queueing,
    slow_handshake,
    retransmissions,
    delayed_ack,
    pre_tcp_kernel,
    socket_read_wait,
    bufferbloat,
    path_dominates,
];

/// Apply every rule, most latency explained first.
pub fn apply(e: &Evidence) -> Vec<Diagnosis> {
    let mut out: Vec<Diagnosis> = RULES.iter().filter_map(|r| r(e)).collect();
    out.sort_by_key(|f| std::cmp::Reverse(f.explains_ns));
    out
}

/// Excess of the single-request median over the path median (time spent in the hosts).
fn host_excess(e: &Evidence) -> Option<(u64, u64, u64)> {
    let single = e.single.as_ref()?.p50_ns;
    let path = e.path.as_ref().map(|p| p.p50_ns).unwrap_or(0);
    Some((single, path, single.saturating_sub(path)))
}

/// Nagle × delayed ACK: requests take ~40 ms more than the path, and the stall disappears when
/// the client ACKs at once (TCP_QUICKACK). The server's Nagle algorithm held the rest of a
/// response until the client ACKed the first part; the client, with nothing to send, delayed
/// that ACK (TCP_ATO_MIN = 40 ms on Linux). The server is the side to fix.
pub fn nagle_delayed_ack(e: &Evidence) -> Option<Diagnosis> {
    let (single, path, excess) = host_excess(e)?;
    if !matches!(
        TcpTimer::classify(excess),
        Some(TcpTimer::DelayedAckMin | TcpTimer::DelayedAckMaxOrRtoMin)
    ) {
        return None;
    }
    // Decisive evidence, either way: an immediate ACK from the client removes the stall, or
    // the capture shows Nagle-held segments released by delayed ACKs in most transactions.
    let quick = e
        .quickack
        .as_ref()
        .map(|q| q.p50_ns)
        .filter(|q| q.saturating_mul(10) <= single);
    let wire = e.capture.as_ref().and_then(|c| {
        c.nagle
            .filter(|n| c.transactions > 0 && n.total.count * 2 >= c.transactions)
    });
    if quick.is_none() && wire.is_none() {
        return None;
    }
    let mut evidence = vec![
        format!(
            "one request: p50 {} against a path RTT of {}",
            format_ns(single as f64),
            format_ns(path as f64)
        ),
        format!(
            "the extra {} matches a TCP timer: {}",
            format_ns(excess as f64),
            describe_stall(excess)
        ),
    ];
    if let Some(q) = quick {
        evidence.push(format!(
            "with TCP_QUICKACK on the client the same requests take {} (p50): the stall is the client's delayed ACK releasing data the server held back",
            format_ns(q as f64)
        ));
    }
    let mut confidence = 0.9;
    if let Some(c) = &e.capture
        && let Some(n) = c.nagle
    {
        evidence.push(format!(
            "on the wire: {} of {} transactions stalled by Nagle × delayed ACK, {} lost in all (e.g. connection {}, frames {} → {})",
            n.total.count,
            c.transactions,
            format_ns(n.total.lost_ns as f64),
            n.example.conn,
            n.example.since_frame,
            n.example.frame
        ));
        confidence = 0.95;
    }
    if let Some(ss) = &e.server_sockets
        && ss.connections > 0
    {
        evidence.push(format!(
            "the server's sockets ({}): TCP_NODELAY off on {} of {} connections{}",
            ss.process,
            ss.nagle_on,
            ss.connections,
            if ss.corked > 0 {
                format!(", TCP_CORK on {}", ss.corked)
            } else {
                String::new()
            }
        ));
        confidence = if ss.nagle_on > 0 {
            f64::max(confidence, 0.97)
        } else {
            0.75
        };
    }
    Some(Diagnosis {
        rule: RuleId::NagleDelayedAck,
        title: "Nagle × delayed ACK: the server holds part of each response until the client's delayed ACK".into(),
        explains_ns: single.saturating_sub(quick.unwrap_or(path)),
        confidence,
        side: Side::Server,
        evidence,
        fix: "server: set TCP_NODELAY (nginx: `tcp_nodelay on`) or write each response in one call; client: re-arm TCP_QUICKACK after every read where the server cannot be changed".into(),
    })
}

/// Application think time: the hosts add milliseconds that no TCP timer explains and that
/// TCP_QUICKACK does not change. The server spends the time before answering.
pub fn think_time(e: &Evidence) -> Option<Diagnosis> {
    let (single, path, excess) = host_excess(e)?;
    if excess < 1_000_000 || excess < 5 * path {
        return None;
    }
    if e.capture.as_ref().is_some_and(|c| {
        c.nagle
            .is_some_and(|n| n.total.count * 2 >= c.transactions.max(1))
    }) {
        return None;
    }
    if TcpTimer::classify(excess).is_some() {
        // A timer-shaped excess: Nagle/delayed-ACK territory, unless quick-ack left it alone.
        let quick = e.quickack.as_ref()?.p50_ns;
        if quick.saturating_mul(10) <= single {
            return None;
        }
    }
    if let Some(q) = &e.quickack
        && (q.p50_ns as f64) < 0.8 * single as f64
    {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::ThinkTime,
        title: "application think time: the server takes milliseconds before it answers".into(),
        explains_ns: excess,
        confidence: if e.quickack.is_some() { 0.8 } else { 0.6 },
        side: Side::Server,
        evidence: vec![
            format!("one request: p50 {} against a path RTT of {}", format_ns(single as f64), format_ns(path as f64)),
            format!("the hosts add {}, and no TCP timer has that length", format_ns(excess as f64)),
            match &e.quickack {
                Some(q) => format!("TCP_QUICKACK on the client leaves it unchanged (p50 {}): not a delayed ACK", format_ns(q.p50_ns as f64)),
                None => "the quick-ack experiment did not run".into(),
            },
        ],
        fix: "profile the server's request handling (the time is spent before the first response byte); look for slow back-ends, locks or synchronous I/O".into(),
    })
}

/// Socket queueing: with N concurrent connections each request takes about N times as long as
/// alone — the server handles one request at a time and the rest wait in its socket queues.
pub fn socket_queueing(e: &Evidence) -> Option<Diagnosis> {
    let c = e.concurrent.as_ref()?;
    let (n, conc) = (c.connections, &c.latency);
    let single = e.single.as_ref()?.p50_ns;
    if n < 2 || single < 200_000 {
        return None;
    }
    let ratio = conc.p50_ns as f64 / single as f64;
    if ratio < 0.6 * f64::from(n) {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::SocketQueueing,
        title: "requests wait in the server's socket queue: it serves one at a time".into(),
        explains_ns: conc.p50_ns.saturating_sub(single),
        confidence: if ratio >= 0.8 * f64::from(n) { 0.85 } else { 0.65 },
        side: Side::Server,
        evidence: vec![
            format!("one request at a time: p50 {}", format_ns(single as f64)),
            format!("{n} at once: p50 {} — {:.1}× longer, close to {n}× (serialised)", format_ns(conc.p50_ns as f64), ratio),
        ],
        fix: "add workers (nginx `worker_processes`, more threads or processes) or make request handling concurrent".into(),
    })
}

/// Slow handshakes: connects take a second or more, or time out — SYNs dropped (listen backlog
/// full, SYN flood protection) and retransmitted after TCP_TIMEOUT_INIT (1 s).
pub fn slow_handshake(e: &Evidence) -> Option<Diagnosis> {
    let p = e.handshake.as_ref()?;
    let (attempts, timed_out) = (e.connect_failures.attempts, e.connect_failures.timed_out);
    let slow = p.p99_ns >= 900_000_000;
    if !slow && timed_out == 0 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::SlowHandshake,
        title: "slow or failing handshakes: SYNs are dropped and retransmitted".into(),
        explains_ns: if slow { p.p99_ns.saturating_sub(p.p50_ns) } else { 1_000_000_000 },
        confidence: 0.7,
        side: Side::Server,
        evidence: vec![
            format!("connect p50 {}, p99 {}", format_ns(p.p50_ns as f64), format_ns(p.p99_ns as f64)),
            format!("{timed_out} of {attempts} attempts timed out"),
            "a ~1 s step is the initial retransmission timeout of a dropped SYN".into(),
        ],
        fix: "check the listen backlog (`ss -ltn` Recv-Q vs Send-Q, net.core.somaxconn, the listen() backlog) and `nstat` ListenOverflows/ListenDrops; accept connections faster".into(),
    })
}

/// Retransmissions: segments were lost (or their ACKs were) and sent again; a timer-driven
/// retransmission costs at least TCP_RTO_MIN (200 ms).
pub fn retransmissions(e: &Evidence) -> Option<Diagnosis> {
    let c = e.capture.as_ref()?;
    let rto = c.rto_stalls.unwrap_or_default();
    let (rto_n, rto_lost) = (rto.count, rto.lost_ns);
    // Material only: a loss rate of at least 1 in 1000 frames, or retransmission timeouts that
    // cost at least a tenth of a request's median (and 100 µs) per request. A handful of
    // retransmissions among a hundred thousand frames explains nothing.
    let per_request = rto_lost.checked_div(c.transactions).unwrap_or(rto_lost);
    let median = e.single.as_ref().map(|s| s.p50_ns).unwrap_or(0);
    let rate_material = c.retransmissions * 1000 >= c.frames.max(1);
    let time_material = per_request >= 100_000 && per_request * 10 >= median;
    if c.retransmissions == 0 || !(rate_material || time_material) {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::Retransmissions,
        title: "packet loss: segments retransmitted".into(),
        explains_ns: per_request,
        confidence: 0.9,
        side: Side::Network,
        evidence: vec![format!(
            "on the wire: {} retransmissions in {} frames; {rto_n} waited for the retransmission timer ({} lost)",
            c.retransmissions,
            c.frames,
            format_ns(rto_lost as f64)
        )],
        fix: "find where packets are dropped: `nstat`/`ip -s link` on both hosts, interface errors, queue drops (`tc -s qdisc`), firewall rules; losses on a path you don't own need its operator".into(),
    })
}

/// Delayed ACK alone: the capture shows segments waiting for a delayed ACK without Nagle being
/// the reason (e.g. a sender whose window or TCP_CORK needs the ACK), in a material share of
/// transactions.
pub fn delayed_ack(e: &Evidence) -> Option<Diagnosis> {
    let c = e.capture.as_ref()?;
    let StallTotal {
        count: n,
        lost_ns: lost,
    } = c.delayed_ack?;
    let per_request = lost.checked_div(c.transactions).unwrap_or(lost);
    if n * 10 < c.transactions.max(1) || per_request < 1_000_000 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::DelayedAck,
        title: "delayed ACKs hold data back (without Nagle)".into(),
        explains_ns: per_request,
        confidence: 0.8,
        side: Side::Client,
        evidence: vec![format!(
            "on the wire: {n} of {} transactions waited for a delayed ACK, {} in all",
            c.transactions,
            format_ns(lost as f64)
        )],
        fix: "the receiver (client) should ACK at once: re-arm TCP_QUICKACK after reads, or per route `ip route change … quickack 1`; the sender can avoid waiting on ACKs by writing each message in one call".into(),
    })
}

/// Pre-TCP kernel latency: packets wait between the IP layer and TCP (netfilter rules,
/// routing) — netstacklat's ip-start → tcp-start gap.
pub fn pre_tcp_kernel(e: &Evidence) -> Option<Diagnosis> {
    let st = e.stack.as_ref()?;
    let (ip, tcp) = (st.ip_start_ns?, st.tcp_start_ns?);
    let gap = tcp - ip;
    if gap < 20_000.0 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::PreTcpKernel,
        title: "packets wait inside the kernel before TCP (netfilter rules or routing)".into(),
        explains_ns: gap as u64,
        confidence: 0.75,
        side: Side::Kernel,
        evidence: vec![format!(
            "kernel stack (eBPF), server side: packets reach the IP layer after {} and TCP after {} (median): {} between them",
            format_ns(ip),
            format_ns(tcp),
            format_ns(gap)
        )],
        fix: "count and trim the netfilter rules on the input path (`nft list ruleset | wc -l`, `iptables-save | wc -l`); remove redundant ones, use sets instead of long rule chains".into(),
    })
}

/// Requests wait in the socket: the kernel had them queued long before the application read
/// them (netstacklat's tcp-socket-enqueued vs tcp-socket-read) — too few workers, or a busy one.
pub fn socket_read_wait(e: &Evidence) -> Option<Diagnosis> {
    let st = e.stack.as_ref()?;
    let (enq, read) = (st.enqueued_ns?, st.read_ns?);
    if read < 1_000_000.0 || read < 10.0 * enq.max(1.0) {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::SocketReadWait,
        title: "requests wait in the socket before the server reads them".into(),
        explains_ns: (read - enq) as u64,
        confidence: 0.85,
        side: Side::Server,
        evidence: vec![format!(
            "kernel stack (eBPF), server side: queued on the socket after {} but read by the application after {} (median{})",
            format_ns(enq),
            format_ns(read),
            st.read_bucket.as_ref().map(|b| format!(", bucket {b}")).unwrap_or_default()
        )],
        fix: "add workers (nginx `worker_processes`), or find what keeps the workers from reading (blocking calls, CPU starvation)".into(),
    })
}

/// Bufferbloat: a bulk transfer on the same path multiplies a small request's latency — it
/// waits behind the bulk data in an oversized queue.
pub fn bufferbloat(e: &Evidence) -> Option<Diagnosis> {
    let UnderLoad { idle, loaded } = e.under_load.as_ref()?;
    let added = loaded.p50_ns.saturating_sub(idle.p50_ns);
    if loaded.p50_ns < 5 * idle.p50_ns.max(1) || added < 5_000_000 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::Bufferbloat,
        title: "latency under load: bulk traffic makes small requests wait in a queue (bufferbloat)".into(),
        explains_ns: added,
        confidence: 0.8,
        side: Side::Network,
        evidence: vec![format!(
            "a 64 B request/response: p50 {} idle, {} while a bulk transfer runs ({:.0}×)",
            format_ns(idle.p50_ns as f64),
            format_ns(loaded.p50_ns as f64),
            loaded.p50_ns as f64 / idle.p50_ns.max(1) as f64
        )],
        fix: "use an AQM on the bottleneck (`tc qdisc replace dev IFACE root fq_codel` or cake), shrink oversized queues (tbf/htb limit, BQL); separate bulk and interactive traffic".into(),
    })
}

/// The network path dominates: most of a request's time is the round trip itself.
pub fn path_dominates(e: &Evidence) -> Option<Diagnosis> {
    let (single, path, _) = host_excess(e)?;
    if path < 1_000_000 || (path as f64) < 0.6 * single as f64 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::PathDominates,
        title: "the network path dominates: the round trip is most of each request".into(),
        explains_ns: path,
        confidence: 0.9,
        side: Side::Network,
        evidence: vec![format!(
            "path RTT {} of a {} request ({:.0}%)",
            format_ns(path as f64),
            format_ns(single as f64),
            100.0 * path as f64 / single.max(1) as f64
        )],
        fix: "shorten the path (closer server, fewer hops, a CDN) or make fewer round trips per request (keep-alive, pipelining, batching)".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use latscope_core::Summary;

    fn nagle(count: u64, lost_ns: u64, example: (u64, u64, u64)) -> Option<NagleStalls> {
        Some(NagleStalls {
            total: StallTotal { count, lost_ns },
            example: StallExample {
                conn: example.0,
                since_frame: example.1,
                frame: example.2,
            },
        })
    }

    fn stalls(count: u64, lost_ns: u64) -> Option<StallTotal> {
        Some(StallTotal { count, lost_ns })
    }

    fn s(p50_us: u64) -> Summary {
        Summary {
            count: 100,
            p50_ns: p50_us * 1000,
            p99_ns: p50_us * 1100,
            max_ns: p50_us * 1200,
            ..Summary::default()
        }
    }

    fn base(path_us: u64, single_us: u64) -> Evidence {
        Evidence {
            path: Some(s(path_us)),
            single: Some(s(single_us)),
            ..Evidence::default()
        }
    }

    #[test]
    fn nagle_needs_the_quickack_evidence() {
        let mut e = base(40, 44_000);
        assert_eq!(
            nagle_delayed_ack(&e),
            None,
            "a 40 ms excess alone is not enough"
        );
        e.quickack = Some(s(60));
        let f = nagle_delayed_ack(&e).expect("fires");
        assert_eq!(f.side, Side::Server);
        assert!(f.explains_ns > 43_000_000);
        assert_eq!(think_time(&e), None, "not think time");
        e.quickack = Some(s(43_000));
        assert_eq!(
            nagle_delayed_ack(&e),
            None,
            "quick-ack did not help: not a delayed ACK"
        );
        // Without the experiment (HTTP targets), the wire is enough.
        e.quickack = None;
        e.capture = Some(CaptureEvidence {
            frames: 90,
            transactions: 20,
            nagle: nagle(19, 800_000_000, (0, 5, 6)),
            ..CaptureEvidence::default()
        });
        assert!(nagle_delayed_ack(&e).is_some());
        assert_eq!(think_time(&e), None);
    }

    #[test]
    fn think_time_is_not_nagle() {
        let mut e = base(40, 20_040);
        e.quickack = Some(s(20_030));
        let f = think_time(&e).expect("fires");
        assert_eq!(f.rule, RuleId::ThinkTime);
        assert_eq!(nagle_delayed_ack(&e), None);
        // A healthy server: nothing.
        let e = base(40, 60);
        assert_eq!(think_time(&e), None);
        assert!(apply(&e).is_empty());
    }

    #[test]
    fn queueing_scales_with_concurrency() {
        let mut e = base(40, 10_000);
        e.concurrent = Some(Concurrent {
            connections: 8,
            latency: s(78_000),
        });
        let f = socket_queueing(&e).expect("fires");
        assert!(f.explains_ns >= 67_000_000);
        e.concurrent = Some(Concurrent {
            connections: 8,
            latency: s(12_000),
        });
        assert_eq!(socket_queueing(&e), None, "a concurrent server");
    }

    #[test]
    fn capture_evidence_strengthens_and_adds() {
        let mut e = base(40, 44_000);
        e.quickack = Some(s(60));
        e.capture = Some(CaptureEvidence {
            frames: 500,
            transactions: 40,
            nagle: nagle(38, 1_600_000_000, (1, 17, 18)),
            retransmissions: 3,
            rto_stalls: stalls(1, 210_000_000),
            ..CaptureEvidence::default()
        });
        let f = nagle_delayed_ack(&e).expect("fires");
        assert!(f.confidence >= 0.95);
        assert!(f.evidence.iter().any(|l| l.contains("frames 17 → 18")));
        let r = retransmissions(&e).expect("fires");
        assert_eq!(r.explains_ns, 210_000_000 / 40);
        // 8 retransmissions in 130k frames, 1.2 µs per request: noise, not a finding.
        e.capture = Some(CaptureEvidence {
            frames: 130_256,
            transactions: 32_560,
            retransmissions: 8,
            rto_stalls: stalls(8, 39_700_000),
            ..CaptureEvidence::default()
        });
        assert_eq!(retransmissions(&e), None);
    }

    #[test]
    fn kernel_stack_rules() {
        let mut e = base(40, 60_000);
        e.stack = Some(StackEvidence {
            packets: 400,
            ip_start_ns: Some(2_000.0),
            tcp_start_ns: Some(90_000.0),
            enqueued_ns: Some(95_000.0),
            read_ns: Some(60_000_000.0),
            read_bucket: Some("(33.6ms, 67.1ms]".into()),
        });
        let f = pre_tcp_kernel(&e).expect("fires");
        assert_eq!(f.side, Side::Kernel);
        assert_eq!(f.explains_ns, 88_000);
        let f = socket_read_wait(&e).expect("fires");
        assert!(f.evidence[0].contains("(33.6ms, 67.1ms]"));
        // A healthy stack: neither fires.
        e.stack = Some(StackEvidence {
            packets: 400,
            ip_start_ns: Some(2_000.0),
            tcp_start_ns: Some(4_000.0),
            enqueued_ns: Some(6_000.0),
            read_ns: Some(9_000.0),
            read_bucket: None,
        });
        assert_eq!(pre_tcp_kernel(&e), None);
        assert_eq!(socket_read_wait(&e), None);
    }

    #[test]
    fn delayed_ack_alone() {
        let mut e = base(40, 41_000);
        e.capture = Some(CaptureEvidence {
            frames: 200,
            transactions: 40,
            delayed_ack: stalls(38, 1_520_000_000),
            ..CaptureEvidence::default()
        });
        let f = delayed_ack(&e).expect("fires");
        assert_eq!(f.explains_ns, 38_000_000);
        e.capture = Some(CaptureEvidence {
            frames: 200,
            transactions: 40,
            delayed_ack: stalls(1, 40_000_000),
            ..CaptureEvidence::default()
        });
        assert_eq!(delayed_ack(&e), None, "one in forty is not a pattern");
    }

    #[test]
    fn handshakes_bloat_and_path() {
        let mut e = base(1_000, 1_200);
        e.handshake = Some(Summary {
            p50_ns: 1_000_000,
            p99_ns: 1_003_000_000,
            count: 10,
            ..Summary::default()
        });
        e.connect_failures = ConnectFailures {
            attempts: 10,
            ..ConnectFailures::default()
        };
        assert!(slow_handshake(&e).is_some());
        let mut e = base(20_000, 21_000);
        assert!(path_dominates(&e).is_some());
        e.under_load = Some(UnderLoad {
            idle: s(20_000),
            loaded: s(180_000),
        });
        let f = bufferbloat(&e).expect("fires");
        assert_eq!(f.side, Side::Network);
        let ranked = apply(&e);
        assert_eq!(
            ranked[0].rule,
            RuleId::Bufferbloat,
            "ranked by latency explained"
        );
    }
}
