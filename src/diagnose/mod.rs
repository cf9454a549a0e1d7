//! `latscope diagnose`: runs the measurements a latency hunt needs, in order, and applies the
//! named rules of [`rules`] to what they found. Evidence collection is in [`collect`]; rules
//! are pure and tested on their own.

pub mod collect;
pub mod rules;

use latscope_core::model::diagnose::{Budget, DiagnoseReport, Finding};
use latscope_core::units::format_ns;

/// One sentence: the answer to "where does the latency come from?".
pub fn verdict(findings: &[Finding], budget: &Budget) -> String {
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

/// Exit code: 0 no finding, 1 findings, 130 interrupted.
pub fn exit_code(r: &DiagnoseReport) -> u8 {
    if r.interrupted {
        crate::exit::INTERRUPTED
    } else if r.findings.is_empty() {
        crate::exit::OK
    } else {
        crate::exit::FINDINGS
    }
}
