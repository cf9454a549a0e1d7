use std::fmt::Write;

use super::{Human, Page, Table};
use crate::model::connect::{ConnectMode, ConnectReport};
use crate::summary::Summary;
use crate::units::format_si;

impl Human for ConnectReport {
    fn render_human(&self, out: &mut Page) {
        let what = match self.mode {
            ConnectMode::Connect => "TCP connect (SYN → established)",
            ConnectMode::Crr => "connect + request + response + close (TCP_CRR)",
        };
        let _ = writeln!(
            out,
            "latscope connect {} — {}, {} in parallel",
            self.target, what, self.parallel
        );
        super::address_line(self.address_choice.as_ref(), out);
        let _ = writeln!(
            out,
            "  {} attempts: {} ok, {} refused, {} timed out, {} other errors; {}/s\n",
            self.attempts,
            self.succeeded,
            self.refused,
            self.timed_out,
            self.other_errors,
            format_si(self.rate_per_sec)
        );
        let mut headers: Vec<&str> = vec!["latency"];
        headers.extend(Summary::HEADERS);
        let mut t = Table::new(&headers);
        let mut row = vec!["connect".to_string()];
        row.extend(self.connect.cells());
        t.row(row);
        if let Some(tr) = &self.transaction {
            let mut row = vec!["transaction".to_string()];
            row.extend(tr.cells());
            t.row(row);
        }
        t.render("  ", out);
        for e in &self.error_samples {
            let _ = writeln!(out, "  error: {e}");
        }
        if self.interrupted {
            let _ = writeln!(
                out,
                "\n  (interrupted: figures cover what was measured before Ctrl-C)"
            );
        }
    }
}
