//! `latscope analyze`: the stall findings, the connections that lost the most time, the
//! transaction-time spectrum, and the ladder around the longest gap of a `--conn N` result.

use latscope_core::model::analyze::{AnalyzeReport, LadderRow};
use latscope_core::units::{format_ns, format_si};

use super::latency_block;
use crate::error::ReportError;
use crate::html::{esc, facts, figure, para, table};
use crate::plot::bars::{Bar, stacked};

/// Connections drawn in the stall bar chart.
const TOP: usize = 10;
/// Ladder rows shown before and after the longest gap.
const BEFORE: usize = 6;
const AFTER: usize = 4;

pub(crate) fn body(r: &AnalyzeReport) -> Result<String, ReportError> {
    let mut out = String::new();
    for w in &r.warnings {
        out += &para("warn", w);
    }
    out += &facts(&[
        ("source", format!("{} ({})", r.source, r.format)),
        ("frames", format_si(r.analysis.frames as f64)),
        ("span", format_ns(r.analysis.capture_span_ns as f64)),
        ("TCP connections", format_si(r.analysis.connections as f64)),
        ("transactions", format_si(r.analysis.transactions as f64)),
        (
            "retransmissions",
            r.analysis.counts.retransmission.to_string(),
        ),
    ]);
    let rows: Vec<Vec<String>> = r
        .analysis
        .findings
        .iter()
        .map(|f| {
            let ex = f.examples.first().map_or_else(String::new, |e| {
                format!("conn {}, frames {} → {}", e.conn, e.since_frame, e.frame)
            });
            vec![
                f.kind.label().to_string(),
                format_si(f.count as f64),
                format_ns(f.lost_ns as f64),
                ex,
            ]
        })
        .collect();
    if rows.is_empty() {
        out += &para("note", "No stall detector fired.");
    } else {
        out += &table(
            "stalls",
            &["stall", "times", "time lost", "first example"],
            &rows,
        );
        for f in &r.analysis.findings {
            out += &para("note", &format!("{}: {}", f.kind.label(), f.explanation));
        }
    }
    out += &connections(r)?;
    let mut dists = Vec::new();
    for (label, s) in [
        ("transaction", &r.analysis.transaction_time),
        ("server think time", &r.analysis.think_time),
        ("handshake RTT", &r.analysis.handshake_rtt),
    ] {
        if let Some(s) = s {
            dists.push((label.to_string(), s));
        }
    }
    if !dists.is_empty() {
        out += &latency_block(&dists)?;
    }
    if let Some(l) = &r.analysis.ladder {
        out += &ladder(&l.rows);
    }
    Ok(out)
}

impl crate::page::Page for AnalyzeReport {
    fn body(&self) -> Result<String, ReportError> {
        body(self)
    }

    fn headline(&self) -> Option<(&'static str, latscope_core::Summary)> {
        self.analysis
            .transaction_time
            .clone()
            .map(|s| ("transaction time", s))
    }

    fn not_comparable(&self) -> &'static str {
        "the capture holds no complete transaction"
    }
}

fn connections(r: &AnalyzeReport) -> Result<String, ReportError> {
    let bars: Vec<Bar> = r
        .analysis
        .top_connections
        .iter()
        .filter(|c| c.stall_lost_ns > 0)
        .take(TOP)
        .map(|c| Bar {
            label: format!(
                "conn {}: {} → {}, {} transactions",
                c.id, c.client, c.server, c.transaction_count
            ),
            parts: vec![("time lost to stalls".to_string(), c.stall_lost_ns as f64)],
        })
        .collect();
    if bars.is_empty() {
        return Ok(String::new());
    }
    Ok(figure(
        "connection-stalls",
        &stacked(&bars, "time lost to stalls, whole capture (time)")?,
        "Time each connection lost to the stalls above, worst first: one long bar is one bad \
         connection; many similar bars are a setting shared by all (e.g. Nagle on the server).",
    ))
}

/// The rows around the longest gap between consecutive frames, as a two-column ladder with
/// the gap marked.
fn ladder(rows: &[LadderRow]) -> String {
    let gap_at = (1..rows.len()).max_by_key(|&i| rows[i].t_ns.saturating_sub(rows[i - 1].t_ns));
    let Some(gap_at) = gap_at else {
        return String::new();
    };
    let gap = rows[gap_at].t_ns - rows[gap_at - 1].t_ns;
    let mut out = format!(
        "<h3>Ladder around the longest gap ({}, frames {} → {})</h3>\n<div class=\"scroll\"><table class=\"ladder\"><thead><tr><th>frame</th><th>time</th><th>client</th><th></th><th>server</th><th>notes</th></tr></thead><tbody>",
        esc(&format_ns(gap as f64)),
        rows[gap_at - 1].frame,
        rows[gap_at].frame
    );
    for (i, row) in rows
        .iter()
        .enumerate()
        .take(gap_at + AFTER)
        .skip(gap_at.saturating_sub(BEFORE))
    {
        if i == gap_at {
            out += &format!(
                "<tr class=\"gap\"><td colspan=\"6\">⋯ {} with nothing on the wire ⋯</td></tr>",
                esc(&format_ns(gap as f64))
            );
        }
        let seg = format!(
            "{} seq={} ack={} len={}",
            row.flags, row.seq, row.ack, row.len
        );
        let (c, arrow, s) = if row.from_client {
            (seg.as_str(), "──▶", "")
        } else {
            ("", "◀──", seg.as_str())
        };
        out += &format!(
            "<tr><th>#{}</th><td>{}</td><td>{}</td><td>{arrow}</td><td>{}</td><td>{}</td></tr>",
            row.frame,
            esc(&format_ns(row.t_ns as f64)),
            esc(c),
            esc(s),
            esc(&row.notes.join("; "))
        );
    }
    out += "</tbody></table></div>\n";
    out
}
