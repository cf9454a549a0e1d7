//! `latscope diagnose`: the verdict, each finding with its evidence and fix, the latency budget
//! and the distributions the steps measured.

use latscope_core::model::diagnose::{Budget, DiagnoseReport, Diagnosis};
use latscope_core::units::format_ns;

use super::{interrupted, latency_block};
use crate::error::ReportError;
use crate::html::{esc, facts, figure, para, table};
use crate::plot::bars::{Bar, stacked};
use latscope_core::model::diagnose::StepName;

pub(crate) fn body(r: &DiagnoseReport) -> Result<String, ReportError> {
    let mut out = interrupted(r.interrupted);
    out += &facts(&[
        ("target", r.target.clone()),
        ("target kind", r.target_kind.name().to_string()),
        ("findings", r.findings.len().to_string()),
        ("path RTT", opt_ns(r.budget.path_rtt_ns)),
        ("one request", opt_ns(r.budget.single_request_ns)),
        (
            "concurrent requests",
            format!(
                "{} ({} at once)",
                opt_ns(r.budget.concurrent_request_ns),
                r.budget.concurrency
            ),
        ),
        ("hosts (request − path)", opt_ns(r.budget.host_ns)),
    ]);
    out += &para("verdict", &r.verdict);
    for f in &r.findings {
        out += &finding(f);
    }
    if let Some(svg) = budget(&r.budget, &r.findings)? {
        out += &figure(
            "budget",
            &svg,
            "Where a request's time goes (medians): the network path against the time spent in \
             the hosts and in queueing; the last bar is what the findings explain — when it \
             covers the host time, the cause is found.",
        );
    }
    out += &super::round_trips::section(r.round_trips.as_ref())?;
    let rows: Vec<(String, &latscope_core::Summary)> = r
        .distributions
        .iter()
        .map(|(n, s)| (n.label().to_string(), s))
        .collect();
    if !rows.is_empty() {
        out += "<h3>Distributions measured</h3>\n";
        out += &latency_block(&rows)?;
    }
    let steps: Vec<Vec<String>> = r
        .steps
        .iter()
        .map(|s| {
            vec![
                s.name.label().to_string(),
                s.status.name().to_string(),
                s.detail.clone(),
            ]
        })
        .collect();
    out += "<h3>Steps</h3>\n";
    out += &table("steps", &["step", "status", "what it measured"], &steps);
    Ok(out)
}

impl crate::page::Page for DiagnoseReport {
    fn body(&self) -> Result<String, ReportError> {
        body(self)
    }

    fn headline(&self) -> Option<(&'static str, latscope_core::Summary)> {
        self.distribution(StepName::OneRequest)
            .map(|s| (StepName::OneRequest.label(), s.clone()))
    }

    fn not_comparable(&self) -> &'static str {
        "the diagnosis measured no single request"
    }
}

fn opt_ns(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format_ns(v as f64))
}

fn finding(f: &Diagnosis) -> String {
    let mut out = format!(
        "<div class=\"finding\" data-rule=\"{}\"><h3>{}</h3><p>Explains {} per request · \
         confidence {:.0}% · side: {}</p><ul>",
        esc(f.rule.name()),
        esc(&f.title),
        esc(&format_ns(f.explains_ns as f64)),
        f.confidence * 100.0,
        esc(f.side.name())
    );
    for e in &f.evidence {
        out += &format!("<li>{}</li>", esc(e));
    }
    out += &format!("</ul><p><strong>Fix:</strong> {}</p></div>\n", esc(&f.fix));
    out
}

const PATH: &str = "network path";
const HOSTS: &str = "hosts (kernel + app)";
const QUEUE: &str = "queueing";

/// The budget bars, when the diagnosis measured at least the path or one request.
fn budget(b: &Budget, findings: &[Diagnosis]) -> Result<Option<String>, ReportError> {
    let path = b.path_rtt_ns.map(|v| v as f64);
    let single = b.single_request_ns.map(|v| v as f64);
    let host = b.host_ns.map(|v| v as f64).or(match (single, path) {
        (Some(s), Some(p)) => Some((s - p).max(0.0)),
        _ => None,
    });
    let mut bars = Vec::new();
    if let Some(p) = path {
        bars.push(Bar {
            label: "connection set-up".into(),
            parts: vec![(PATH.into(), p)],
        });
    }
    if let Some(s) = single {
        let parts = match (path, host) {
            (Some(p), Some(h)) => vec![(PATH.into(), p), (HOSTS.into(), h)],
            _ => vec![(HOSTS.into(), s)],
        };
        bars.push(Bar {
            label: "one request".into(),
            parts,
        });
        if let Some(c) = b.concurrent_request_ns.map(|v| v as f64) {
            let mut parts = bars.last().map(|b| b.parts.clone()).unwrap_or_default();
            parts.push((QUEUE.into(), (c - s).max(0.0)));
            bars.push(Bar {
                label: format!("{} at once", b.concurrency),
                parts,
            });
        }
    }
    if bars.is_empty() {
        return Ok(None);
    }
    if !findings.is_empty() {
        bars.push(Bar {
            label: "explained by findings".into(),
            parts: findings
                .iter()
                .map(|f| (f.rule.name().to_string(), f.explains_ns as f64))
                .collect(),
        });
    }
    stacked(&bars, "median time per request (time)").map(Some)
}
