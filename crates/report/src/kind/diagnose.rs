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
const SERIALISATION: &str = "serialisation";

/// The parts of a bar, left to right, cut where their sum reaches `total`: each bar is as long
/// as the figure it stands for. The budget's parts are medians of different distributions (a
/// path's SYN round trip can exceed a request's median on loopback, where `host_ns` is then
/// 0), and stacking them whole drew "8 at once: 66.1us" beside a measured 40.9 µs (issue 41).
fn up_to(parts: &[(String, f64)], total: f64) -> Vec<(String, f64)> {
    let mut left = total.max(0.0);
    let mut out = Vec::new();
    for (label, ns) in parts {
        let w = ns.max(0.0).min(left);
        left -= w;
        if w > 0.0 {
            out.push((label.clone(), w));
        }
    }
    out
}

/// The budget bars, when the diagnosis measured at least the path or one request. Each bar's
/// length is its measured median: one request is the path, the serialisation and the hosts'
/// share up to its median; several at once are that, cut at their own median when it is
/// shorter, and the queueing beyond one request's median.
fn budget(b: &Budget, findings: &[Diagnosis]) -> Result<Option<String>, ReportError> {
    let path = b.path_rtt_ns.map(|v| v as f64);
    let single = b.single_request_ns.map(|v| v as f64);
    let mut bars = Vec::new();
    if let Some(p) = path {
        bars.push(Bar {
            label: "connection set-up".into(),
            parts: vec![(PATH.into(), p)],
        });
    }
    if let Some(s) = single {
        let mut parts = Vec::new();
        if let Some(p) = path {
            parts.push((PATH.into(), p));
            if let Some(ser) = b.serialisation_ns {
                parts.push((SERIALISATION.into(), ser as f64));
            }
        }
        // The hosts' share is what the request's median leaves beyond the path.
        parts.push((HOSTS.into(), s));
        let parts = up_to(&parts, s);
        bars.push(Bar {
            label: "one request".into(),
            parts: parts.clone(),
        });
        if let Some(c) = b.concurrent_request_ns.map(|v| v as f64) {
            let mut parts = up_to(&parts, c);
            if c > s {
                parts.push((QUEUE.into(), c - s));
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 41: on loopback the path's SYN round trip (42 µs) exceeded a request's median
    /// (17 µs); the chart stacked the path whole under the queueing and drew "8 at once:
    /// 66.1us" where the card, the table and the JSON said 40.9 µs. Every bar is as long as the
    /// median it stands for.
    #[test]
    fn each_budget_bar_is_as_long_as_its_median() {
        let b = Budget {
            path_rtt_ns: Some(42_000),
            single_request_ns: Some(17_000),
            concurrent_request_ns: Some(40_900),
            concurrency: 8,
            host_ns: Some(0),
            ..Budget::default()
        };
        let svg = budget(&b, &[]).expect("draws").expect("a chart");
        for label in [
            "connection set-up: 42us",
            "one request: 17us",
            "8 at once: 40.9us",
        ] {
            assert!(svg.contains(label), "{label} missing: {svg}");
        }
        // The usual case: the path within the request, serialisation and hosts after it.
        let b = Budget {
            path_rtt_ns: Some(100_000),
            single_request_ns: Some(300_000),
            concurrent_request_ns: Some(900_000),
            concurrency: 4,
            host_ns: Some(150_000),
            serialisation_ns: Some(50_000),
            ..Budget::default()
        };
        let one = up_to(
            &[
                (PATH.into(), 100_000.0),
                (SERIALISATION.into(), 50_000.0),
                (HOSTS.into(), 300_000.0),
            ],
            300_000.0,
        );
        assert_eq!(one[2], (HOSTS.to_string(), 150_000.0), "host_ns");
        let svg = budget(&b, &[]).expect("draws").expect("a chart");
        assert!(svg.contains("one request: 300us"), "{svg}");
        assert!(svg.contains("4 at once: 900us"), "{svg}");
    }
}
