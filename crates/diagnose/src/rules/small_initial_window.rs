//! `small_initial_window`: the server's first flight of a response on a new connection — its
//! initial congestion window — is smaller than the ten segments of RFC 6928, so a response that
//! needs several rounds of slow start needs more of them.

use latscope_core::units::format_bytes;

use crate::rounds::flights::INITIAL_WINDOW_SEGMENTS;

use super::*;

/// A first flight below this share of ten segments is a smaller initial window: the flight
/// also carries the response's head and, over TLS, its records' overhead, and a TLS handshake
/// lets the window grow before the response.
const SMALL_SHARE: f64 = 0.8;

/// The second flight must be at least this many times the first: a window that grows round by
/// round (slow start) held the first flight back, not an application that had written no more.
const GROWTH: f64 = 1.5;

/// The browser's first response on a new connection arrived in flights that start below ten
/// segments and grow, and took more round trips than ten segments doubling would have.
/// The extra rounds are the finding, never more than the transfer took.
pub fn small_initial_window(e: &Evidence) -> Option<Diagnosis> {
    let (p, rtt) = browser(e)?;
    let x = &p.first_exchange;
    let mss = x.mss?;
    let (f1, f2) = (*x.flights.first()?, *x.flights.get(1)?);
    let iw = INITIAL_WINDOW_SEGMENTS * u64::from(mss);
    if (f1 as f64) >= SMALL_SHARE * iw as f64 || (f2 as f64) < GROWTH * f1 as f64 {
        return None;
    }
    // A client that advertised less than ten segments bounds every flight itself: what the
    // server would have sent first cannot show (the lab's receive-window 20 ms away, a 7.9 KiB
    // window: a 243 B head alone in the first flight read as "an initial window of 0 segments"
    // in one run of three). `receive_window_limited` names that window.
    if x.window.is_some_and(|w| u64::from(w) < iw) {
        return None;
    }
    let floor = x.floor_rounds();
    let extra = x.further_rounds().saturating_sub(floor);
    let explains = x.rounds_saving(floor, rtt);
    if extra == 0 || explains < PHASE_FLOOR_NS {
        return None;
    }
    let sizes: Vec<String> = x
        .flights
        .iter()
        .take(5)
        .map(|&f| format_bytes(f as f64))
        .collect();
    let evidence = vec![
        format!(
            "a new connection's response of {} arrived in {}: {}{} — a first flight of about {} segments of {} B, then growing",
            format_bytes(x.wire_bytes as f64),
            count(x.flights.len() as u64, "flight"),
            sizes.join(", "),
            if x.flights.len() > 5 { ", …" } else { "" },
            (f1 as f64 / f64::from(mss)).round(),
            mss
        ),
        format!(
            "its transfer took {} of {} after the first flight; from ten segments, doubling, it would need {}: {} lost",
            count(u64::from(x.further_rounds()), "round trip"),
            format_ns(rtt as f64),
            floor,
            count(u64::from(extra), "round trip")
        ),
    ];
    Some(Diagnosis {
        rule: RuleId::SmallInitialWindow,
        title: format!(
            "the server starts a response with fewer than ten segments: a new connection's response takes {} more",
            count(u64::from(extra), "round trip")
        ),
        explains_ns: explains,
        confidence: 0.75,
        side: Side::Server,
        evidence,
        fix: "raise the server's initial congestion window to 10 segments (RFC 6928; Linux's default since 2.6.39): check `ip route show` for an `initcwnd` below 10 on the route to the clients (`ip route change … initcwnd 10`), or the sending OS's default".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
