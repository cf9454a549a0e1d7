//! `slow_start_after_idle`: a keep-alive connection left idle longer than its retransmission
//! timeout restarts slow start (Linux `tcp_cwnd_restart`, RFC 5681 §4.1, while
//! `net.ipv4.tcp_slow_start_after_idle` is 1, the default): the next response on it needs the
//! rounds of a new connection's slow start again, although the connection is open.

use latscope_core::units::format_bytes;

use crate::rounds::probe::AfterPause;

use super::*;

/// The first flight after the pause must be at most this share of the back-to-back one.
pub const SHRUNK: f64 = 0.75;

/// The same response on the same connection needed more rounds after the pause than back to
/// back, from a first flight at most [`SHRUNK`] of the back-to-back one: the congestion window
/// shrank during the pause. Linux halves it for every retransmission timeout of idle time,
/// down to the initial window (`tcp_cwnd_restart`), and decays an application-limited one
/// (`tcp_cwnd_application_limited`) — both only while `tcp_slow_start_after_idle` is on. The
/// extra rounds are the finding, never more than the transfer took.
pub fn slow_start_after_idle(e: &Evidence) -> Option<Diagnosis> {
    let (p, rtt) = browser(e)?;
    let before = p.next.as_ref()?;
    let pause = p.idle.as_ref()?;
    let AfterPause::Open(after) = &pause.outcome else {
        return None;
    };
    let (f_before, f_after) = (*before.flights.first()?, *after.flights.first()?);
    let restarted = (f_after as f64) <= SHRUNK * f_before as f64;
    let extra = after
        .further_rounds()
        .saturating_sub(before.further_rounds());
    if !restarted || extra == 0 {
        return None;
    }
    let explains = after.rounds_saving(before.further_rounds(), rtt);
    if explains < PHASE_FLOOR_NS {
        return None;
    }
    let rto = pause
        .rto_us
        .map(|r| {
            format!(
                " (its retransmission timeout {})",
                format_ns(f64::from(r) * 1e3)
            )
        })
        .unwrap_or_default();
    let evidence = vec![
        format!(
            "back to back on one connection, a {} response took {} after its first flight of {}",
            format_bytes(before.wire_bytes as f64),
            count(u64::from(before.further_rounds()), "round trip"),
            format_bytes(f_before as f64)
        ),
        format!(
            "after the connection was idle {}{rto}, the same response took {} after a first flight of {} (the congestion window shrank while idle), {} in all against {}",
            format_ns(pause.pause_ns as f64),
            count(u64::from(after.further_rounds()), "round trip"),
            format_bytes(f_after as f64),
            format_ns(after.transfer_ns as f64),
            format_ns(before.transfer_ns as f64)
        ),
        format!(
            "{} of {} lost to slow start restarting on an open connection",
            count(u64::from(extra), "round trip"),
            format_ns(rtt as f64)
        ),
    ];
    Some(Diagnosis {
        rule: RuleId::SlowStartAfterIdle,
        title: format!(
            "slow start restarts after an idle pause on a keep-alive connection: a response after a pause takes {} more",
            count(u64::from(extra), "round trip")
        ),
        explains_ns: explains,
        confidence: 0.8,
        side: Side::Server,
        evidence,
        fix: "on the server (the sender): `sysctl -w net.ipv4.tcp_slow_start_after_idle=0` (and in /etc/sysctl.d/ to keep it), so an idle keep-alive connection keeps its congestion window; a CDN or proxy in front of it has its own setting".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
