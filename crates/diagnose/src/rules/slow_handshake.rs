//! `slow_handshake`: connects take a second or more, or time out (SYNs or SYN-ACKs resent).

use super::*;

/// Slow handshakes: connects take a second or more, or time out — SYNs (or SYN-ACKs) dropped
/// and retransmitted after TCP_TIMEOUT_INIT (1 s). Who dropped them is told by the server's
/// listen-queue counters where they can be read: overflows blame its backlog; none, with the
/// SYNs retransmitted all the same, means they were lost on the way.
pub fn slow_handshake(e: &Evidence) -> Option<Diagnosis> {
    let p = e.handshake.as_ref()?;
    let (attempts, timed_out) = (e.connect_failures.attempts, e.connect_failures.timed_out);
    let slow = p.p99_ns >= 900_000_000;
    if !slow && timed_out == 0 {
        return None;
    }
    let mut evidence = vec![
        format!(
            "connect p50 {}, p99 {}",
            format_ns(p.p50_ns as f64),
            format_ns(p.p99_ns as f64)
        ),
        format!("{} timed out", of(timed_out, attempts, "attempt")),
        "a ~1 s step is the initial retransmission timeout of a dropped SYN".into(),
    ];
    let server = e.counters.and_then(|c| c.server);
    let (title, side, confidence, fix) = match server {
        Some(s) if s.listen_overflowed() => {
            evidence.push(format!(
                "the server's listen queue overflowed: ListenOverflows +{}, ListenDrops +{}",
                s.listen_overflows, s.listen_drops
            ));
            (
                "slow or failing handshakes: the server's listen queue overflows and drops SYNs",
                Side::Server,
                0.85,
                "raise the listen backlog (the listen() backlog, net.core.somaxconn, net.ipv4.tcp_max_syn_backlog) and accept connections faster (more acceptor threads)",
            )
        }
        Some(s) => {
            evidence.push(format!(
                "the server's listen queue did not overflow (ListenOverflows and ListenDrops unchanged) while {} SYN/SYN-ACKs were retransmitted: they were lost on the way, not refused by a full backlog",
                s.syn_retrans + e.counters.map_or(0, |c| if c.shared { 0 } else { c.client.syn_retrans })
            ));
            (
                "slow or failing handshakes: SYNs or SYN-ACKs are lost and retransmitted",
                Side::Network,
                0.75,
                "find where handshake packets are dropped: firewall rules and SYN rate limits on the path and hosts (`nft list ruleset`, `iptables -L -v`), interface and queue drops (`ip -s link`, `tc -s qdisc`)",
            )
        }
        None => (
            "slow or failing handshakes: SYNs are dropped and retransmitted",
            Side::Server,
            0.7,
            "check the listen backlog (`ss -ltn` Recv-Q vs Send-Q, net.core.somaxconn, the listen() backlog) and `nstat` ListenOverflows/ListenDrops; if they do not grow, look for SYN drops on the path (firewall rules, rate limits)",
        ),
    };
    Some(Diagnosis {
        rule: RuleId::SlowHandshake,
        title: title.into(),
        explains_ns: if slow {
            p.p99_ns.saturating_sub(p.p50_ns)
        } else {
            1_000_000_000
        },
        confidence,
        side,
        evidence,
        fix: fix.into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
