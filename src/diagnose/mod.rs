//! `latscope diagnose`: runs the measurements a latency hunt needs, in order, and applies the
//! named rules of [`rules`] to what they found. Each measurement is a step of [`steps`], run by
//! the pipeline in [`collect`] into the typed [`evidence`]; rules are pure and tested on their
//! own.

pub mod collect;
pub mod evidence;
pub mod rules;
pub mod steps;

use latscope_core::model::diagnose::{Budget, DiagnoseReport, Diagnosis};
use latscope_core::units::format_ns;

use evidence::Evidence;

/// Where a request's time goes, from the evidence.
pub fn budget(ev: &Evidence) -> Budget {
    Budget {
        path_rtt_ns: ev.path.as_ref().map(|s| s.p50_ns),
        single_request_ns: ev.single.as_ref().map(|s| s.p50_ns),
        concurrent_request_ns: ev.concurrent.as_ref().map(|c| c.latency.p50_ns),
        concurrency: ev.concurrent.as_ref().map(|c| c.connections).unwrap_or(1),
        host_ns: match (&ev.single, &ev.path) {
            (Some(s), Some(pth)) => Some(s.p50_ns.saturating_sub(pth.p50_ns)),
            _ => None,
        },
    }
}

/// One sentence: the answer to "where does the latency come from?".
pub fn verdict(findings: &[Diagnosis], budget: &Budget) -> String {
    if let Some(top) = findings.first() {
        return format!(
            "{} — {} of each request; fix on the {} side: {}",
            top.title,
            format_ns(top.explains_ns as f64),
            top.side.name(),
            top.fix
        );
    }
    match (budget.single_request_ns, budget.path_rtt_ns, budget.host_ns) {
        (Some(s), Some(p), Some(h)) => format!(
            "no latency problem found: a request takes {} — {} network path, {} in the hosts (kernel and application)",
            format_ns(s as f64),
            format_ns(p as f64),
            format_ns(h as f64)
        ),
        (None, Some(p), _) => format!(
            "no problem on the path (connect RTT {}); the application was not measured",
            format_ns(p as f64)
        ),
        _ => "nothing could be measured".into(),
    }
}

/// What a run amounts to, which decides the exit code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Ctrl-C: partial results.
    Interrupted,
    /// The target could not be measured (no connection, or no step ran): never "no problem".
    Unmeasurable(String),
    /// At least one rule fired.
    Findings,
    /// Measured, and nothing is wrong.
    Clean,
}

impl Outcome {
    /// Classify a finished report from its typed steps.
    pub fn of(r: &DiagnoseReport) -> Outcome {
        if r.interrupted {
            return Outcome::Interrupted;
        }
        if let Some(why) = r.unmeasurable() {
            return Outcome::Unmeasurable(why);
        }
        if r.findings.is_empty() {
            Outcome::Clean
        } else {
            Outcome::Findings
        }
    }
}
