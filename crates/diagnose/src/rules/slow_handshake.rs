//! `slow_handshake`: connects take a second or more, or time out (SYNs or SYN-ACKs resent) —
//! including the accept queue's pattern: connects wait for a resent SYN only when several
//! arrive at once.

use super::*;
use latscope_core::Summary;

/// A connect this slow waited for a resent SYN (TCP_TIMEOUT_INIT, 1 s, less scheduling).
const RESENT_SYN_NS: u64 = 900_000_000;
/// How long a connect may take before the handshakes step gives up on it (its timeout).
const CONNECT_TIMEOUT_NS: u64 = 3_000_000_000;

/// Connects with slow ones (a p99 of a resent SYN) or time-outs.
fn waited(connect: &Summary, f: &ConnectFailures) -> bool {
    connect.p99_ns >= RESENT_SYN_NS || f.timed_out > 0
}

/// What a connection waits on average for its handshake beyond the usual one (`usual_ns`: the
/// one-at-a-time connects' median, a handshake that waited for nothing): the connections that
/// waited × their wait ÷ the connections (the mean's excess over the usual handshake), and each
/// timed-out attempt its whole timeout. Not the burst's own median: when most connects of a
/// burst wait for a resent SYN, that median is the wait itself (a python http.server's burst:
/// p50 1.02 s, read as 'waits 0 ns').
fn wait_per_connection(connect: &Summary, f: &ConnectFailures, usual_ns: u64) -> u64 {
    let done = connect.count;
    let usual = usual_ns.min(connect.p50_ns) as f64;
    let excess = (connect.mean_ns - usual).max(0.0) * done as f64;
    let total = excess as u64 + f.timed_out * CONNECT_TIMEOUT_NS;
    total / (done + f.timed_out).max(1)
}

/// What the handshake waits cost a request on average, and the line that says how it was
/// counted. The concurrent requests' own connections are the measurement (HTTP: the server
/// closes them or not): their connect times' excess over the usual one, and the time of the
/// connects still waiting when the step ended (a connect that waits for a second resent SYN,
/// 3 s, outlasts the 2 s step: counting completed connects only charged 6 µs a request where
/// the step's 8 connections had spent most of their time connecting), summed and shared over
/// the requests — a client that keeps its connections open pays a slow handshake once per
/// connection, one whose server closes them once per request. Without it (a latscope server's
/// rr test keeps its connections), a connection's average wait, as a client opening one per
/// request would pay it.
fn per_request(e: &Evidence, per_connection: u64) -> (u64, String) {
    let Some(k) = e.request_connects.as_ref().filter(|k| k.requests > 0) else {
        return (
            per_connection,
            format!(
                "a connection waits {} for its handshake on average: charged per request as if each request opened one (how the requests used their connections was not measured)",
                format_ns(per_connection as f64)
            ),
        );
    };
    let excess = (k.connect.mean_ns - k.connect.p50_ns as f64).max(0.0) * k.connections as f64
        + k.pending_ns as f64;
    let paid = (excess / k.requests as f64) as u64;
    let pending = if k.pending > 0 {
        format!(
            ", and {} still waiting when the step ended ({} of waits no completed connect shows)",
            count(k.pending, "connect"),
            format_ns(k.pending_ns as f64)
        )
    } else {
        String::new()
    };
    let line = format!(
        "a connection waits {} for its handshake on average (the worst of the connects above); the {} concurrent requests opened {} ({:.2} per request: {}), whose handshakes took p50 {}, p99 {}{pending} — {} per request on average, what this finding is charged",
        format_ns(per_connection as f64),
        k.requests,
        count(k.connections, "connection"),
        k.per_request(),
        if k.per_request() >= 0.5 {
            "the server closes them, so a request pays a handshake"
        } else {
            "kept open, so a slow handshake costs once per connection"
        },
        format_ns(k.connect.p50_ns as f64),
        format_ns(k.connect.p99_ns as f64),
        format_ns(paid as f64),
    );
    (paid, line)
}

/// Slow handshakes: connects take a second or more, or time out — SYNs (or SYN-ACKs) dropped
/// and retransmitted after TCP_TIMEOUT_INIT (1 s). Who dropped them is told by the server's
/// listen-queue counters where they can be read: overflows blame its backlog; none, with the
/// SYNs retransmitted all the same, means they were lost on the way. Without them (the client's
/// seat), connects that wait only when several arrive at once point at the backlog too: a
/// path that drops SYNs drops them one at a time as well. Ranked by what a request pays for its
/// handshake on average ([`per_request`]).
pub fn slow_handshake(e: &Evidence) -> Option<Diagnosis> {
    let p = e.handshake.as_ref()?;
    let f = &e.connect_failures;
    let one_at_a_time = waited(p, f);
    let burst = e
        .connect_burst
        .as_ref()
        .filter(|b| waited(&b.connect, &b.failures));
    let server = e.counters.and_then(|c| c.server);
    let overflowed = server.is_some_and(|s| s.listen_overflowed());
    if !one_at_a_time && burst.is_none() && !overflowed {
        return None;
    }
    let mut per_connection = wait_per_connection(p, f, p.p50_ns);
    let mut evidence = vec![
        format!(
            "connect one at a time: p50 {}, p99 {}; {} timed out",
            format_ns(p.p50_ns as f64),
            format_ns(p.p99_ns as f64),
            of(f.timed_out, f.attempts, "attempt")
        ),
        "a ~1 s step is the initial retransmission timeout of a dropped SYN (TCP_TIMEOUT_INIT)"
            .into(),
    ];
    if let Some(b) = &e.connect_burst {
        let burst_cost = wait_per_connection(&b.connect, &b.failures, p.p50_ns);
        per_connection = per_connection.max(burst_cost);
        evidence.push(format!(
            "{} connects at once: p50 {}, p99 {}; {} timed out; a connection waits {} on average",
            b.connections,
            format_ns(b.connect.p50_ns as f64),
            format_ns(b.connect.p99_ns as f64),
            of(b.failures.timed_out, b.failures.attempts, "attempt"),
            format_ns(burst_cost as f64)
        ));
    }
    let (cost, paid) = per_request(e, per_connection);
    evidence.push(paid);
    const BACKLOG_FIX: &str = "raise the listen backlog (the server's listen() backlog argument, e.g. nginx `listen … backlog=N`, capped by net.core.somaxconn; net.ipv4.tcp_max_syn_backlog for half-open ones) and accept connections faster (more acceptor threads, an accept loop that does not block)";
    let (title, side, confidence, fix) = match server {
        Some(s) if s.listen_overflowed() => {
            evidence.push(format!(
                "the server's listen queue overflowed: ListenOverflows +{}, ListenDrops +{} — each SYN it dropped was resent a second later",
                s.listen_overflows, s.listen_drops
            ));
            (
                "slow or failing handshakes: the server's listen queue (accept backlog) overflows and drops SYNs",
                Side::Server,
                0.85,
                BACKLOG_FIX.to_string(),
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
                "find where handshake packets are dropped: firewall rules and SYN rate limits on the path and hosts (`nft list ruleset`, `iptables -L -v`), interface and queue drops (`ip -s link`, `tc -s qdisc`)".to_string(),
            )
        }
        None if burst.is_some() && !one_at_a_time => {
            evidence.push(
                "connects wait for a resent SYN only when several arrive at once, never one at a time on the idle server: the pattern of a listen queue (accept backlog) that overflows — a path that drops SYNs drops them one at a time too".into(),
            );
            evidence.push(
                "the server's counters are not visible from here: on the server, `nstat -az TcpExtListenOverflows TcpExtListenDrops` growing during a burst confirms it (and `ss -ltn`: Recv-Q reaching Send-Q, the backlog)".into(),
            );
            (
                "slow handshakes under concurrency: connects arriving together wait ~1 s for a resent SYN — the server's listen backlog overflows",
                Side::Server,
                0.7,
                format!(
                    "{BACKLOG_FIX}; confirm first with `nstat -az TcpExtListenOverflows` on the server"
                ),
            )
        }
        None => (
            "slow or failing handshakes: SYNs are dropped and retransmitted",
            Side::Server,
            0.7,
            "check the listen backlog (`ss -ltn` Recv-Q vs Send-Q, net.core.somaxconn, the listen() backlog) and `nstat` ListenOverflows/ListenDrops; if they do not grow, look for SYN drops on the path (firewall rules, rate limits)".to_string(),
        ),
    };
    Some(Diagnosis {
        rule: RuleId::SlowHandshake,
        title: title.into(),
        explains_ns: cost,
        confidence,
        side,
        evidence,
        fix,
        caused_by: None,
        causes: Vec::new(),
    })
}
