use std::fmt::Write;

use super::rr::server_text;
use super::{Human, Page, Table};
use crate::model::demo::{DemoReport, DemoVerdict};
use crate::model::diagnose::{DiagnoseReport, StepName};
use crate::model::rr::Transport;
use crate::units::format_ns;

fn dist_p(d: &DiagnoseReport, name: StepName, p99: bool) -> String {
    d.distribution(name)
        .map(|s| format_ns(if p99 { s.p99_ns } else { s.p50_ns } as f64))
        .unwrap_or_else(|| "-".into())
}

impl Human for DemoReport {
    fn render_human(&self, out: &mut Page) {
        let _ = writeln!(
            out,
            "latscope demo — two servers on this machine's loopback: same path, different server behaviour\n"
        );
        let mut t = Table::new(&[
            "server",
            "address",
            "path RTT p50",
            "request p50",
            "request p99",
            "8 at once p50",
        ]);
        // The address is in the diagnose lines below; the figures matter more.
        t.drop_first(&["address"]);
        for s in &self.servers {
            let d = &s.diagnosis;
            t.row(vec![
                s.name.clone(),
                s.address.clone(),
                dist_p(d, StepName::Path, false),
                dist_p(d, StepName::OneRequest, false),
                dist_p(d, StepName::OneRequest, true),
                dist_p(d, StepName::ConcurrentRequests, false),
            ]);
        }
        t.render("  ", out);
        out.push('\n');
        for s in &self.servers {
            let _ = writeln!(
                out,
                "  {}: {}",
                s.name,
                server_text(&s.behaviour, Transport::Tcp)
            );
        }
        if let Some(v) = &self.verdict {
            render_verdict(v, out);
        }
        for s in &self.servers {
            let d = &s.diagnosis;
            let _ = writeln!(
                out,
                "\n  latscope diagnose {} ({} server):",
                s.address, s.name
            );
            if d.findings.is_empty() {
                let _ = writeln!(out, "    {}", d.verdict);
            }
            super::diagnose::render_findings(&d.findings, "    ", out);
        }
        if self.interrupted {
            let _ = writeln!(
                out,
                "\n  (interrupted: figures cover what was measured before Ctrl-C)"
            );
        }
    }
}

/// What the two diagnoses say together: the path, and whether a stall showed.
fn render_verdict(v: &DemoVerdict, out: &mut Page) {
    let _ = writeln!(
        out,
        "\n  Path: {} — {}",
        if v.same_path {
            "the same for both"
        } else {
            "differs between the two"
        },
        if v.same_path {
            "the network is not what makes one server slow."
        } else {
            "the comparison is less clean."
        }
    );
    if !v.stalled {
        let _ = writeln!(
            out,
            "  No stall observed: this kernel did not delay the ACK the slow server waits for."
        );
    }
}
