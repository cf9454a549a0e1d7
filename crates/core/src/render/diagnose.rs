use std::fmt::Write;

use super::{Human, Page, Table};
use crate::model::diagnose::{DiagnoseReport, Diagnosis, StepStatus};
use crate::model::http::CertificateCheck;
use crate::units::format_ns;

/// What a finding costs a request; a finding whose cost was not measured says so rather than
/// "explains 0 ns".
fn explains(ns: u64) -> String {
    match ns {
        0 => "its cost per request was not measured".into(),
        ns => format!("explains {} per request", format_ns(ns as f64)),
    }
}

/// The numbered findings with their evidence and fix, each line prefixed by `indent`.
pub(crate) fn render_findings(findings: &[Diagnosis], indent: &str, out: &mut Page) {
    for (i, x) in findings.iter().enumerate() {
        let _ = writeln!(
            out,
            "\n{indent}{}. {} [{}]\n{indent}   {} · confidence {:.0}% · side to fix: {}",
            i + 1,
            x.title,
            x.rule.name(),
            explains(x.explains_ns),
            x.confidence * 100.0,
            x.side.name()
        );
        if let Some(c) = x.caused_by {
            let _ = writeln!(out, "{indent}   consequence of [{}]", c.name());
        }
        if !x.causes.is_empty() {
            let names: Vec<&str> = x.causes.iter().map(|r| r.name()).collect();
            let _ = writeln!(
                out,
                "{indent}   root cause: explains [{}]",
                names.join("], [")
            );
        }
        for e in &x.evidence {
            let _ = writeln!(out, "{indent}   - {e}");
        }
        let _ = writeln!(out, "{indent}   fix: {}", x.fix);
    }
}

/// A step's duration in the steps list: milliseconds under a second, else seconds to a tenth.
fn step_time(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

/// The steps list: each step's mark, name, duration, which end measured it, and its detail.
fn render_steps(steps: &[crate::model::diagnose::Step], out: &mut Page) {
    let _ = writeln!(out, "  Steps");
    for s in steps {
        let mark = match s.status {
            StepStatus::Ran => "✓",
            StepStatus::Skipped => "-",
            StepStatus::CutShort => "…",
            StepStatus::Failed => "✗",
        };
        let end = match s.measured_at {
            Some(crate::model::diagnose::End::Server) => "[server] ",
            Some(crate::model::diagnose::End::Client) => "[client] ",
            None => "",
        };
        let took = s.took_ms.map(step_time).unwrap_or_default();
        let _ = writeln!(
            out,
            "    {mark} {:<22} {took:>6}  {end}{}",
            s.name.label(),
            s.detail
        );
    }
}

impl Human for DiagnoseReport {
    fn render_human(&self, out: &mut Page) {
        let _ = writeln!(
            out,
            "latscope diagnose {} ({})\n",
            self.target,
            self.target_kind.name()
        );
        if self.certificate == Some(CertificateCheck::NotVerified) {
            let _ = writeln!(
                out,
                "  TLS: the server's certificate is not verified (--insecure): its identity is \
                 unchecked\n"
            );
        }
        render_steps(&self.steps, out);
        let b = &self.budget;
        let f = |v: Option<u64>| v.map(|n| format_ns(n as f64)).unwrap_or_else(|| "-".into());
        let _ = writeln!(out, "\n  Latency budget (medians)");
        let mut t = Table::new(&["", "time"]);
        t.row(vec!["network path RTT".into(), f(b.path_rtt_ns)]);
        if let (Some(ser), Some(rate)) = (b.serialisation_ns, b.bottleneck_bps) {
            t.row(vec![
                format!(
                    "serialisation at the bottleneck ({})",
                    crate::units::format_bitrate(rate)
                ),
                f(Some(ser)),
            ]);
        }
        t.row(vec!["hosts: kernel + application".into(), f(b.host_ns)]);
        if let (Some(c), Some(h)) = (b.client_host_ns, b.host_ns) {
            let c = c.min(h);
            t.row(vec![
                "  of which this client's own stack".into(),
                f(Some(c)),
            ]);
            t.row(vec![
                "  of which the server's end (kernel + application)".into(),
                f(Some(h - c)),
            ]);
        }
        t.row(vec!["one request".into(), f(b.single_request_ns)]);
        if b.concurrency > 1 {
            t.row(vec![
                format!("with {} concurrent", b.concurrency),
                f(b.concurrent_request_ns),
            ]);
        }
        if let Some(a) = b.server_app_ns {
            t.row(vec!["  of which server application".into(), f(Some(a))]);
        }
        t.render("    ", out);
        if let Some(ph) = &self.phases {
            let _ = writeln!(
                out,
                "\n  Request phases (medians of {})",
                crate::units::count(ph.requests as u64, "request")
            );
            let mut t = Table::new(&["DNS", "connect", "TLS", "first byte", "transfer", "total"]);
            t.row(vec![
                f(Some(ph.dns_ns)),
                f(Some(ph.connect_ns)),
                f(ph.tls_ns),
                f(Some(ph.ttfb_ns)),
                f(Some(ph.transfer_ns)),
                f(Some(ph.total_ns())),
            ]);
            t.render("    ", out);
        }
        if let Some(n) = &self.names {
            super::names::render_lookup(n, out);
        }
        if let Some(r) = &self.round_trips {
            super::round_trips::render(r, out);
        }
        if let Some(r) = &self.responsiveness {
            let _ = writeln!(
                out,
                "\n  Responsiveness: {:.0} round trips per minute idle, {:.0} under load ({})",
                r.idle_rpm, r.loaded_rpm, r.load
            );
        }
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
        let cut: Vec<&str> = self
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::CutShort)
            .map(|s| s.name.label())
            .collect();
        if !cut.is_empty() && !self.interrupted {
            let _ = writeln!(
                out,
                "\n  Cut short by the {} time budget: {}",
                format_ns(self.max_time_ms as f64 * 1e6),
                cut.join(", ")
            );
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
