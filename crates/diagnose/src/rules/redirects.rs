//! `redirects`: the URL answers with a redirect, so a client pays another exchange — and, to
//! another scheme, host or port, another connection's round trips — before the page.

use super::*;

/// The round-trip step's first response was a redirect (3xx with a `Location`). Whatever it
/// costs, it is said: every other step measured the redirect's response, not the page's.
pub fn redirects(e: &Evidence) -> Option<Diagnosis> {
    let (p, rtt) = browser(e)?;
    let last = p.redirects.last()?;
    let cost: u64 = p.redirects.iter().map(|h| h.cost_ns).sum();
    let rounds: u32 = p.redirects.iter().map(|h| h.round_trips).sum();
    let mut evidence: Vec<String> = p
        .redirects
        .iter()
        .map(|h| {
            format!(
                "{} answers {} → {}: {} ({}){}",
                h.from,
                h.status,
                h.to,
                count(u64::from(h.round_trips), "round trip"),
                format_ns(h.cost_ns as f64),
                if h.same_origin {
                    ", on the same connection"
                } else {
                    ", then a new connection to another origin"
                }
            )
        })
        .collect();
    evidence.push(format!(
        "{} of {} before the page; the other steps measured the redirect's response, not the page",
        count(u64::from(rounds), "round trip"),
        format_ns(rtt as f64)
    ));
    Some(Diagnosis {
        rule: RuleId::Redirects,
        title: format!(
            "the URL redirects to {}: every request to it pays {} before the page",
            last.to,
            count(u64::from(rounds), "more round trip")
        ),
        explains_ns: cost,
        confidence: 0.95,
        side: Side::Both,
        evidence,
        fix: format!(
            "request {} directly (update the link, the bookmark or the client's configuration), and run `latscope diagnose` on it; on the server, redirect in one hop, and for http → https send HSTS so that browsers go straight to https",
            last.to
        ),
        caused_by: None,
        causes: Vec::new(),
    })
}
