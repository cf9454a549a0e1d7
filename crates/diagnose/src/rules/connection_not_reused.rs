//! `connection_not_reused`: a request that could go on an open connection pays a new one — the
//! TCP handshake's round trip and the TLS handshake's — because the server closes connections
//! after every response, or closes an idle one sooner than a client's next request comes.

use crate::rounds::probe::{AfterPause, Opened, RoundTripProbe, handshake_saving};

use super::*;

/// Why the connection could not be reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Closer {
    /// The response said so: `Connection: close`, or HTTP/1.0 without keep-alive.
    Said { http10: bool },
    /// The server closed it after the response without saying so.
    Silently,
    /// The server closed the idle connection this long into a pause (its keep-alive timeout).
    Idle { after_ns: u64, pause_ns: u64 },
}

fn closer(p: &RoundTripProbe) -> Option<Closer> {
    use crate::rounds::probe::Reuse;
    match p.reuse {
        Reuse::SaidClose => Some(Closer::Said {
            http10: p.first_exchange.head.http10,
        }),
        Reuse::ClosedSilently => Some(Closer::Silently),
        Reuse::Kept => match &p.idle {
            Some(i) => match i.outcome {
                AfterPause::Closed { after_ns } => Some(Closer::Idle {
                    after_ns,
                    pause_ns: i.pause_ns,
                }),
                AfterPause::Open(_) => None,
            },
            None => None,
        },
    }
}

/// What reusing the connection saves a request: its TCP set-up — the round trip and both
/// hosts' connect and accept work, all of which a kept connection skips — as the connects step
/// measured it (the median of its connects; at least the path's round trip, never more than
/// this connection's own connect), and the TLS handshake's round trips (its CPU is
/// `slow_tls`'s). On a fast path the round trip is the smaller part of a connect: the lab's
/// nginx at ~0 connected in 62 µs over a 37 µs SYN ping, and counting only the round trip put a
/// server that closes every connection at the edge of materiality (one run in three clean).
fn reuse_saving(e: &Evidence, setup: &Opened, rtt: u64) -> u64 {
    let connects = e.handshake.as_ref().map_or(0, |h| h.p50_ns);
    let tcp = connects.max(rtt).min(setup.connect_ns);
    let tls = setup
        .tls
        .map_or(0, |t| handshake_saving(&t, t.round_trips(), rtt));
    tcp + tls
}

/// The server does not let a client reuse its connection: the round-trip step's next request
/// found it closed (the server said so, or closed it silently), or the server closed it during
/// an idle pause of about a second. What a request then pays is the new connection's round
/// trips (TCP, TLS) — never more than the set-up measured; the handshakes' CPU is `slow_tls`'s.
/// Every request pays it, so over a LAN too it is a finding when material (a share of a
/// request, [`material`]); the TLS rules, paid on new connections only, ask for a millisecond.
pub fn connection_not_reused(e: &Evidence) -> Option<Diagnosis> {
    let (p, rtt) = browser(e)?;
    let why = closer(p)?;
    let setup = p.new_connection();
    let explains = reuse_saving(e, &setup, rtt);
    if explains == 0 {
        return None;
    }
    let rounds = setup.round_trips();
    let tls = setup
        .tls
        .map(|t| {
            format!(
                " and the {} ({})",
                t.describe(),
                format_ns(t.handshake_ns as f64)
            )
        })
        .unwrap_or_default();
    let mut evidence = vec![match why {
        Closer::Said { http10: true } => "the server answers in HTTP/1.0 without keep-alive: it closes the connection after every response".to_string(),
        Closer::Said { http10: false } => "the server's response says `Connection: close` (or ends its body by closing): it closes the connection after every response".to_string(),
        Closer::Silently => "the server closed the connection after the response without saying so: the next request on it found it closed".to_string(),
        Closer::Idle { after_ns, pause_ns } => format!(
            "the server closed an idle connection {} into a pause of {}: a client whose next request comes later than that finds it closed",
            format_ns(after_ns as f64),
            format_ns(pause_ns as f64)
        ),
    }];
    if let Some(t) = p.first_exchange.head.keep_alive_timeout_s {
        evidence.push(format!("its responses say `Keep-Alive: timeout={t}`"));
    }
    evidence.push(format!(
        "a new connection costs the TCP handshake ({}){tls}: {} of {} each, {} a request that could have gone on an open connection",
        format_ns(setup.connect_ns as f64),
        count(u64::from(rounds), "round trip"),
        format_ns(rtt as f64),
        format_ns(explains as f64)
    ));
    if let Some(h) = e
        .handshake
        .as_ref()
        .filter(|h| h.p50_ns.min(setup.connect_ns) * 4 > rtt * 5)
    {
        evidence.push(format!(
            "connects took {} at the median (of {}) over the path's round trip of {}: the round trip and both hosts' connect and accept work, all of which a kept connection skips",
            format_ns(h.p50_ns as f64),
            count(h.count, "connect"),
            format_ns(rtt as f64)
        ));
    }
    if let Some(c) = e
        .request_connects
        .as_ref()
        .filter(|c| c.per_request() >= 0.5)
    {
        evidence.push(format!(
            "the concurrent requests opened {} for {} requests",
            count(c.connections, "connection"),
            c.requests
        ));
    }
    let (title, fix, confidence) = match why {
        Closer::Idle { after_ns, .. } => (
            format!(
                "the server closes idle connections after {}: a request after a longer pause pays a new connection's {}",
                format_ns(after_ns as f64),
                count(u64::from(rounds), "round trip")
            ),
            "keep idle connections open longer than the clients' pauses between requests: nginx `keepalive_timeout 75s`, Apache `KeepAliveTimeout`, a proxy's or load balancer's idle timeout (the shortest on the path decides)",
            0.75,
        ),
        _ => (
            format!(
                "connections are not reused: the server closes them after each response, so every request pays a new connection's {}",
                count(u64::from(rounds), "round trip")
            ),
            "keep connections open between requests (HTTP/1.1 keep-alive): nginx `keepalive_timeout` above 0 and `keepalive_requests` not 1, Apache `KeepAlive On`, no `Connection: close` from the application or a proxy in front of it; serve HTTP/1.1, not 1.0",
            if matches!(why, Closer::Said { .. }) {
                0.9
            } else {
                0.8
            },
        ),
    };
    Some(Diagnosis {
        rule: RuleId::ConnectionNotReused,
        title,
        explains_ns: explains,
        confidence,
        side: Side::Server,
        evidence,
        fix: fix.into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
