//! `think_time`: the server's application takes the time before its first response byte.

use super::*;

/// Application think time: the time before the first response byte that no TCP timer on the
/// wire explains is the server's own (its application). It fires whenever the hosts add
/// ≥ 1 ms and ≥ 5× the path — on a far path, a quarter of the request and 10× the path's
/// spread ([`beyond_the_path`]) — and no timer is shown to be the cause (the quick-ack experiment
/// changed nothing, the capture shows no delayed-ACK releases). An excess of a timer's length
/// without that evidence is still reported — with a lower confidence and a line saying which
/// experiment would tell — rather than "no problem" while the hosts add 1,000× the path.
///
/// The time is the server's only when something places it there: the server's end was
/// observed, or this host's own stack was measured and ruled out ([`server_end_located`]).
/// Otherwise a packet held in the client's own netfilter would be booked as the server's
/// application; [`unexplained`] then says where the time can be. What this host's own stack
/// was measured to cost an exchange ([`client_stack_ns`]) is the client's, never the
/// server's thinking, wherever the server's end was observed: 6,000 rules on the client's
/// output, seen from the server's host, cost 521 µs of a 1.21 ms request, which was think time
/// of 1.17 ms before.
pub fn think_time(e: &Evidence) -> Option<Diagnosis> {
    if !server_end_located(e) {
        return None;
    }
    let (single, path, host) = host_excess(e)?;
    // What a delayed ACK explains is not the application's: when one is shown, what is left is
    // the time with TCP_QUICKACK on (a server can have both Nagle and think time).
    let excess = if timer_explains(e) {
        match &e.quickack {
            Some(q) if quickack_helped(e) => q.p50_ns.saturating_sub(path),
            _ => return None,
        }
    } else {
        host
    };
    // Only a stack measured high is taken off: a ruled-out one's figure (a connect's few
    // microseconds beyond the SYN ping) is within the requests' own noise.
    let client = if client_stack_high(e) {
        client_stack_ns(e).unwrap_or(0)
    } else {
        0
    };
    let excess = before_first_byte(e, excess, path)?.saturating_sub(client);
    if !beyond_the_path(e, excess) {
        return None;
    }
    let timer = TcpTimer::classify(excess).filter(|t| t.is_delayed_ack());
    let mut evidence = vec![
        format!(
            "one request: p50 {} against a path RTT of {}",
            format_ns(single as f64),
            format_ns(path as f64)
        ),
        match timer {
            None if client > 0 => format!(
                "the hosts add {}, and no TCP timer has that length, beside this host's own stack ({} an exchange, measured: the client's, not counted here)",
                format_ns(excess as f64),
                format_ns(client as f64)
            ),
            None => format!(
                "the hosts add {}, and no TCP timer has that length",
                format_ns(excess as f64)
            ),
            Some(_) => format!(
                "the hosts add {} ({}), yet no delayed ACK is shown to cause it",
                format_ns(excess as f64),
                describe_stall(excess)
            ),
        },
        match &e.quickack {
            Some(q) if excess < host => format!(
                "with TCP_QUICKACK on the client requests still take {} (p50): beyond the delayed ACK, {} is the server's",
                format_ns(q.p50_ns as f64),
                format_ns(excess as f64)
            ),
            Some(q) => format!(
                "TCP_QUICKACK on the client leaves it unchanged (p50 {}): not a delayed ACK",
                format_ns(q.p50_ns as f64)
            ),
            None => "the quick-ack experiment did not run".into(),
        },
    ];
    if let Some(c) = &e.capture {
        evidence.push(format!(
            "on the wire: {} transactions{}",
            c.transactions,
            c.think
                .map(|t| format!(
                    "; {} waited for the server's first response byte ({} in all)",
                    t.count,
                    format_ns(t.lost_ns as f64)
                ))
                .unwrap_or_default()
        ));
    }
    if let Some(ph) = &e.phases {
        evidence.push(format!(
            "request phases: time to first byte {} of which {} beyond the path's round trip",
            format_ns(ph.ttfb_ns as f64),
            format_ns(ph.ttfb_ns.saturating_sub(path) as f64)
        ));
    }
    let ruled_out = e.quickack.is_some() || e.capture.is_some();
    let confidence = match (ruled_out, timer) {
        (true, _) => 0.8,
        (false, None) => 0.65,
        (false, Some(_)) => 0.5,
    };
    Some(Diagnosis {
        rule: RuleId::ThinkTime,
        title: "server application time: the server takes milliseconds before its first response byte".into(),
        explains_ns: excess,
        confidence,
        side: Side::Server,
        evidence,
        fix: "profile the server's request handling (the time is spent before the first response byte); look for slow back-ends, locks or synchronous I/O".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// A response whose transfer (first byte → last) takes most of the excess: only the wait before
/// its first byte can be the application's thinking (the request phases' time to first byte
/// beyond the path's round trip); the transfer's pace is a window's, a buffer's or the path's.
/// Without the phases (their step cut short or failed) the split is unmeasured: a response that
/// needs rounds beyond its first flight may spend the whole excess on its way, so none of it is
/// booked to the application (`None`); a response that fits one flight keeps the excess.
fn before_first_byte(e: &Evidence, excess: u64, path: u64) -> Option<u64> {
    match (e.download, &e.phases) {
        (Some(d), Some(ph)) if d.transfer_ns.saturating_mul(2) >= excess => {
            Some(excess.min(ph.ttfb_ns.saturating_sub(path)))
        }
        (_, Some(_)) => Some(excess),
        (_, None) => match e.sizes {
            Some(s) if crate::rounds::flights::floor_rounds(s.response, ASSUMED_MSS) > 0 => None,
            _ => Some(excess),
        },
    }
}

/// The segment size a response's first flight is counted in when none was measured: Ethernet's.
const ASSUMED_MSS: u32 = 1448;
