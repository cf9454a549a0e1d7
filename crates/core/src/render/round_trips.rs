//! The round-trip accounts of a diagnose report, as the human view shows them: each request's
//! parts in round trips of the path, and what a fix would save.

use std::fmt::Write;

use super::{Page, Table};
use crate::model::diagnose::{RequestRounds, RoundTrips};
use crate::units::{count, format_ns};

/// "the next request: 4 round trips where 1 would do — 164ms, 121ms to save", or "…: 1 round
/// trip, 40.5ms" when nothing can be saved.
pub fn account_line(a: &RequestRounds) -> String {
    let n = u64::from(a.round_trips());
    let head = match a.idle_ms {
        Some(ms) => format!("{} ({ms} ms)", a.request.label()),
        None => a.request.label().to_string(),
    };
    if a.avoidable_ns() == 0 {
        format!(
            "{head}: {}, {}",
            count(n, "round trip"),
            format_ns(a.measured_ns as f64)
        )
    } else {
        format!(
            "{head}: {} where {} would do — {}, {} to save",
            count(n, "round trip"),
            a.needed(),
            format_ns(a.measured_ns as f64),
            format_ns(a.avoidable_ns() as f64)
        )
    }
}

/// The accounts: a line per request, and its parts in a table.
pub(crate) fn render(r: &RoundTrips, out: &mut Page) {
    let _ = writeln!(
        out,
        "\n  Round trips (path RTT {})",
        format_ns(r.rtt_ns as f64)
    );
    for a in &r.requests {
        let _ = writeln!(out, "    {}", account_line(a));
        let mut t = Table::new(&["part", "round trips", "time", "to save", "fix"]);
        t.drop_first(&["fix", "to save"]);
        for p in &a.parts {
            let rounds = if p.kind.is_path_round() {
                p.count.to_string()
            } else {
                format!("({})", p.count)
            };
            let save = match (p.avoidable_ns, p.avoidable) {
                (0, _) => String::new(),
                (ns, 0) => format_ns(ns as f64),
                (ns, n) => format!("{n}: {}", format_ns(ns as f64)),
            };
            let fix = match (p.fix, p.rule) {
                (Some(f), Some(r)) => format!("{} [{}]", f.label(), r.name()),
                (Some(f), None) => f.label().to_string(),
                _ => String::new(),
            };
            t.row(vec![
                p.kind.label().to_string(),
                rounds,
                format_ns(p.cost_ns as f64),
                save,
                fix,
            ]);
        }
        t.render("      ", out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::diagnose::RoundTrip;
    use crate::model::diagnose::RuleId;
    use crate::model::round_trips::{RequestKind, RoundTripFix, RoundTripKind};

    #[test]
    fn an_account_says_how_many_round_trips_would_do() {
        let r = RoundTrips {
            rtt_ns: 40_000_000,
            requests: vec![RequestRounds {
                request: RequestKind::Next,
                measured_ns: 123_000_000,
                idle_ms: None,
                parts: vec![
                    RoundTrip::needed(RoundTripKind::TcpHandshake, 1, 41_000_000, String::new())
                        .avoid(
                            1,
                            41_000_000,
                            RuleId::ConnectionNotReused,
                            RoundTripFix::KeepAlive,
                        ),
                    RoundTrip::needed(RoundTripKind::TlsHandshake, 1, 41_000_000, String::new())
                        .avoid(
                            1,
                            41_000_000,
                            RuleId::ConnectionNotReused,
                            RoundTripFix::KeepAlive,
                        ),
                    RoundTrip::needed(RoundTripKind::Request, 1, 41_000_000, String::new()),
                ],
            }],
        };
        let line = account_line(&r.requests[0]);
        assert!(
            line.starts_with("the next request: 3 round trips where 1 would do"),
            "{line}"
        );
        let mut page = Page::new(100);
        render(&r, &mut page);
        let text = page.finish();
        assert!(
            text.contains("keep-alive [connection_not_reused]"),
            "{text}"
        );
        assert!(text.contains("Round trips (path RTT 40"), "{text}");
    }
}
