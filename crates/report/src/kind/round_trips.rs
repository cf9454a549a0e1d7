//! diagnose's round-trip accounts on its page: one bar per request measured, its parts in
//! round trips of the path (the avoidable ones named by their fix), and the parts as a table.

use latscope_core::model::diagnose::RoundTrips;
use latscope_core::render::round_trips::account_line;
use latscope_core::units::format_ns;

use crate::error::ReportError;
use crate::html::{esc, figure, table};
use crate::plot::bars::{Bar, stacked};

/// The section, or nothing without accounts.
pub(crate) fn section(r: Option<&RoundTrips>) -> Result<String, ReportError> {
    let Some(r) = r.filter(|r| !r.requests.is_empty()) else {
        return Ok(String::new());
    };
    let mut out = format!(
        "<h3>Round trips (path RTT {})</h3>\n<ul class=\"round-trips\">",
        esc(&format_ns(r.rtt_ns as f64))
    );
    for a in &r.requests {
        out += &format!("<li>{}</li>", esc(&account_line(a)));
    }
    out += "</ul>\n";
    let bars: Vec<Bar> = r
        .requests
        .iter()
        .map(|a| Bar {
            label: a.request.label().to_string(),
            parts: a
                .parts
                .iter()
                .flat_map(|p| {
                    let kept = (
                        p.kind.label().to_string(),
                        (p.cost_ns - p.avoidable_ns) as f64,
                    );
                    let saved = p
                        .fix
                        .filter(|_| p.avoidable_ns > 0)
                        .map(|f| (format!("avoidable: {}", f.label()), p.avoidable_ns as f64));
                    std::iter::once(kept).chain(saved)
                })
                .filter(|(_, v)| *v > 0.0)
                .collect(),
        })
        .collect();
    out += &figure(
        "round-trips",
        &stacked(&bars, "time per request (time)")?,
        "Each request measured, part by part: what a fix would save is marked avoidable with \
         its fix; the rest is the path's floor and the hosts' time.",
    );
    let rows: Vec<Vec<String>> = r
        .requests
        .iter()
        .flat_map(|a| {
            a.parts.iter().map(move |p| {
                vec![
                    a.request.label().to_string(),
                    p.kind.label().to_string(),
                    p.count.to_string(),
                    format_ns(p.cost_ns as f64),
                    match p.avoidable_ns {
                        0 => String::new(),
                        ns => format!("{}: {}", p.avoidable, format_ns(ns as f64)),
                    },
                    match (p.fix, p.rule) {
                        (Some(f), Some(r)) => format!("{} [{}]", f.label(), r.name()),
                        _ => String::new(),
                    },
                    p.detail.clone(),
                ]
            })
        })
        .collect();
    out += &table(
        "round-trips",
        &[
            "request",
            "part",
            "round trips",
            "time",
            "to save",
            "fix",
            "what",
        ],
        &rows,
    );
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use latscope_core::model::diagnose::{RequestRounds, RoundTrip, RuleId};
    use latscope_core::model::round_trips::{RequestKind, RoundTripFix, RoundTripKind};

    /// A server that closes every connection 40 ms away: the next request's TCP handshake is
    /// drawn and listed as avoidable by keep-alive, the request as the floor.
    #[test]
    fn the_avoidable_parts_are_drawn_and_listed_with_their_fix() {
        let r = RoundTrips {
            rtt_ns: 40_000_000,
            requests: vec![RequestRounds {
                request: RequestKind::Next,
                measured_ns: 80_000_000,
                idle_ms: None,
                parts: vec![
                    RoundTrip::needed(
                        RoundTripKind::TcpHandshake,
                        1,
                        40_000_000,
                        "SYN → SYN-ACK".into(),
                    )
                    .avoid(
                        1,
                        40_000_000,
                        RuleId::ConnectionNotReused,
                        RoundTripFix::KeepAlive,
                    ),
                    RoundTrip::needed(RoundTripKind::Request, 1, 40_000_000, "200".into()),
                ],
            }],
        };
        let html = section(Some(&r)).unwrap();
        assert!(html.contains("data-plot=\"round-trips\""), "{html}");
        assert!(html.contains("avoidable: keep-alive"), "{html}");
        assert!(
            html.contains("keep-alive [connection_not_reused]"),
            "{html}"
        );
        assert!(
            html.contains("the next request: 2 round trips where 1 would do"),
            "{html}"
        );
        assert_eq!(section(None).unwrap(), "");
    }
}
