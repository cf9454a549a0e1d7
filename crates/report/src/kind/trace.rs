//! `latscope trace`: per hop, the spread of its round trips and the share of probes that got no
//! answer (mtr's report, drawn), with the hop table.

use latscope_core::model::ping::{HopStats, TraceHop, TraceReport};
use latscope_core::units::format_ns;
use latscope_core::{LatencyHistogram, Summary};

use super::interrupted;
use crate::error::ReportError;
use crate::html::{facts, figure, para, table};
use crate::plot::hops::{HopDist, hop_loss, hop_rtts};

pub(crate) fn body(r: &TraceReport) -> Result<String, ReportError> {
    let port = r.port.map(|p| format!(" port {p}")).unwrap_or_default();
    let mut out = interrupted(r.interrupted);
    out += &facts(&[
        ("target", format!("{} ({}{port})", r.target, r.address)),
        ("probe", r.mode.name().to_string()),
        (
            "reached",
            match (r.reached, r.destination_reply, &r.unreachable) {
                (true, Some(k), _) => format!("yes ({})", k.label()),
                (true, None, _) => "yes".into(),
                (false, _, Some(u)) => format!(
                    "no: {} {} at hop {}",
                    u.kind.label(),
                    u.kind.trace_mark().unwrap_or_default(),
                    u.ttl
                ),
                (false, _, None) => "no".into(),
            },
        ),
        ("hops", hop_count(r).to_string()),
        (
            "probes",
            match r.rounds {
                Some(n) => format!("{n} rounds, 1 per hop each"),
                None => format!("{} per hop", r.queries),
            },
        ),
        ("timestamps", r.timestamps.clone()),
    ]);
    out += &para("note", &r.flow);
    let dists = match &r.report {
        Some(stats) => stats.iter().map(from_stats).collect(),
        None => r.hops.iter().map(from_probes).collect::<Vec<_>>(),
    };
    if dists.is_empty() {
        return Ok(out + &para("note", "No hop was probed."));
    }
    out += &figure(
        "hop-rtt",
        &hop_rtts(&dists)?,
        "Round trip to each hop (dots: probes; whisker: min to max; box: p50 to p90; bar: \
         median): latency that rises at one hop and stays up after it was added there; a jump \
         at one hop that later hops do not share is that router answering slowly, not the path.",
    );
    out += &figure(
        "hop-loss",
        &hop_loss(&dists)?,
        "Probes without an answer, per hop: loss that starts at a hop and continues to the \
         destination is real; loss at one hop only is a router that rate-limits or never sends \
         time exceeded.",
    );
    out += &hop_table(r);
    Ok(out)
}

impl crate::page::Page for TraceReport {
    fn body(&self) -> Result<String, ReportError> {
        body(self)
    }

    fn headline(&self) -> Option<(&'static str, latscope_core::Summary)> {
        destination(self).map(|s| ("round trip to the destination", s))
    }

    fn not_comparable(&self) -> &'static str {
        "the destination never answered"
    }
}

fn hop_count(r: &TraceReport) -> usize {
    r.report.as_ref().map_or(r.hops.len(), Vec::len)
}

fn from_probes(h: &TraceHop) -> HopDist {
    let mut samples: Vec<f64> = h
        .probes
        .iter()
        .filter_map(|p| p.rtt_ns.map(|v| v as f64))
        .collect();
    samples.sort_by(f64::total_cmp);
    let sent = h.probes.len().max(1) as f64;
    // A router's unreachable is an answer without a round trip: not lost, not timed.
    let lost = h.probes.iter().filter(|p| p.from.is_none()).count() as f64;
    HopDist {
        ttl: h.ttl,
        range: samples.first().zip(samples.last()).map(|(a, b)| (*a, *b)),
        band: None,
        p50: samples.get(samples.len() / 2).copied(),
        loss_pct: 100.0 * lost / sent,
        samples,
    }
}

fn from_stats(h: &HopStats) -> HopDist {
    let s = &h.rtt;
    let some = s.count > 0;
    HopDist {
        ttl: h.ttl,
        samples: Vec::new(),
        range: some.then_some((s.min_ns as f64, s.max_ns as f64)),
        // p90 is a real figure from ten answers on.
        band: (s.count >= 10).then_some((s.p50_ns as f64, s.p90_ns as f64)),
        p50: some.then_some(s.p50_ns as f64),
        loss_pct: h.loss_percent,
    }
}

fn hop_table(r: &TraceReport) -> String {
    let rows: Vec<Vec<String>> = match &r.report {
        Some(stats) => stats
            .iter()
            .map(|h| {
                let who = if h.addresses.is_empty() {
                    "???".to_string()
                } else {
                    h.addresses.join(", ")
                };
                let mut row = vec![
                    h.ttl.to_string(),
                    who,
                    format!("{:.1}%", h.loss_percent),
                    h.sent.to_string(),
                ];
                row.extend(h.rtt.cells().into_iter().take(6));
                row
            })
            .collect(),
        None => r
            .hops
            .iter()
            .map(|h| {
                let who = h
                    .probes
                    .iter()
                    .find_map(|p| p.from.clone())
                    .unwrap_or_else(|| "*".into());
                let answered = h.probes.iter().filter(|p| p.from.is_some()).count();
                let rtts: Vec<String> = h
                    .probes
                    .iter()
                    .map(|p| match (p.rtt_ns, p.kind.and_then(|k| k.trace_mark())) {
                        (Some(v), _) => format_ns(v as f64),
                        (None, Some(mark)) if p.from.is_some() => mark.to_string(),
                        _ => "*".into(),
                    })
                    .collect();
                vec![
                    h.ttl.to_string(),
                    who,
                    format!("{answered} of {}", h.probes.len()),
                    rtts.join("  "),
                ]
            })
            .collect(),
    };
    let head: &[&str] = if r.report.is_some() {
        &[
            "hop", "host", "loss", "sent", "min", "mean", "stddev", "p50", "p90", "p99",
        ]
    } else {
        &["hop", "host", "answered", "round trips"]
    };
    table("hops", head, &rows)
}

/// The destination's round trips (the comparison's headline): `--stats` keeps its summary; a
/// plain trace's few probes are summarised here.
fn destination(r: &TraceReport) -> Option<Summary> {
    if let Some(stats) = &r.report {
        return stats.iter().find(|h| h.destination).map(|h| h.rtt.clone());
    }
    let hop = r.hops.iter().find(|h| h.destination)?;
    let mut hist = LatencyHistogram::new();
    for v in hop.probes.iter().filter_map(|p| p.rtt_ns) {
        hist.record(v);
    }
    Some(hist.summary())
}
