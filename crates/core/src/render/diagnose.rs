use std::fmt::Write;

use super::{Human, Table};
use crate::model::diagnose::{DiagnoseReport, Diagnosis, StepStatus};
use crate::units::format_ns;

/// The numbered findings with their evidence and fix, each line prefixed by `indent`.
pub(crate) fn render_findings(findings: &[Diagnosis], indent: &str, out: &mut String) {
    for (i, x) in findings.iter().enumerate() {
        let _ = writeln!(
            out,
            "\n{indent}{}. {} [{}]\n{indent}   explains {} per request · confidence {:.0}% · side to fix: {}",
            i + 1,
            x.title,
            x.rule.name(),
            format_ns(x.explains_ns as f64),
            x.confidence * 100.0,
            x.side.name()
        );
        for e in &x.evidence {
            let _ = writeln!(out, "{indent}   - {e}");
        }
        let _ = writeln!(out, "{indent}   fix: {}", x.fix);
    }
}

impl Human for DiagnoseReport {
    fn render_human(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "latscope diagnose {} ({})\n",
            self.target,
            self.target_kind.name()
        );
        let _ = writeln!(out, "  Steps");
        for s in &self.steps {
            let mark = match s.status {
                StepStatus::Ran => "✓",
                StepStatus::Skipped => "-",
                StepStatus::CutShort => "…",
                StepStatus::Failed => "✗",
            };
            let _ = writeln!(out, "    {mark} {:<22} {}", s.name.label(), s.detail);
        }
        let b = &self.budget;
        let f = |v: Option<u64>| v.map(|n| format_ns(n as f64)).unwrap_or_else(|| "-".into());
        let _ = writeln!(out, "\n  Latency budget (medians)");
        let mut t = Table::new(&["", "time"]);
        t.row(vec!["network path RTT".into(), f(b.path_rtt_ns)]);
        t.row(vec!["hosts: kernel + application".into(), f(b.host_ns)]);
        t.row(vec!["one request".into(), f(b.single_request_ns)]);
        if b.concurrency > 1 {
            t.row(vec![
                format!("with {} concurrent", b.concurrency),
                f(b.concurrent_request_ns),
            ]);
        }
        t.render("    ", out);
        if self.findings.is_empty() && self.unmeasurable().is_some() {
            let _ = writeln!(
                out,
                "\n  The target could not be measured: no verdict on its latency."
            );
        } else if self.findings.is_empty() {
            let _ = writeln!(out, "\n  No latency problem found.");
        } else {
            let _ = writeln!(out, "\n  Findings, by the latency they explain");
            render_findings(&self.findings, "  ", out);
        }
        let _ = writeln!(out, "\n  Verdict: {}", self.verdict);
        if self.interrupted {
            let _ = writeln!(
                out,
                "\n  (interrupted: the verdict covers the steps that ran)"
            );
        }
    }
}
