use std::fmt::Write;

use super::rr::server_text;
use super::{Human, Table};
use crate::model::demo::DemoReport;
use crate::model::rr::Transport;
use crate::units::{format_ns, format_si};

impl Human for DemoReport {
    fn render_human(&self, out: &mut String) {
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
            "trans/s",
        ]);
        for s in &self.servers {
            t.row(vec![
                s.name.clone(),
                s.address.clone(),
                format_ns(s.path_rtt.p50_ns as f64),
                format_ns(s.request.rtt.p50_ns as f64),
                format_ns(s.request.rtt.p99_ns as f64),
                format_si(s.request.transactions_per_sec),
            ]);
        }
        let q = &self.slow_with_client_quickack;
        t.row(vec![
            "slow, client TCP_QUICKACK".into(),
            String::new(),
            String::new(),
            format_ns(q.rtt.p50_ns as f64),
            format_ns(q.rtt.p99_ns as f64),
            format_si(q.transactions_per_sec),
        ]);
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
        out.push('\n');
        let v = &self.verdict;
        let (Some(h), Some(s)) = (self.servers.first(), self.servers.get(1)) else {
            return;
        };
        if v.same_path {
            let _ = writeln!(
                out,
                "  Path: {} vs {} to set up a connection — the network path is the same and fast.",
                format_ns(h.path_rtt.p50_ns as f64),
                format_ns(s.path_rtt.p50_ns as f64)
            );
        } else {
            let _ = writeln!(
                out,
                "  Path: connect latency differs between the two servers; the comparison below is less clean."
            );
        }
        if !v.stalled {
            let _ = writeln!(
                out,
                "  No stall observed: the slow server answered in {} (p50). This kernel did not delay the ACK.",
                format_ns(s.request.rtt.p50_ns as f64)
            );
            return;
        }
        let _ = writeln!(
            out,
            "  Requests: the slow server takes {} more per request (p50 {} vs {}).",
            format_ns(v.excess_ns as f64),
            format_ns(s.request.rtt.p50_ns as f64),
            format_ns(h.request.rtt.p50_ns as f64)
        );
        let _ = writeln!(out, "  Cause: {}.", v.likely_cause);
        let _ = writeln!(
            out,
            "  How: the server writes the header, then the body. Nagle holds the body back until the header is\n  \
             ACKed; the client has nothing to send, so it delays that ACK (40 ms minimum on Linux)."
        );
        if v.quickack_fixes_it {
            let _ = writeln!(
                out,
                "  Evidence: with TCP_QUICKACK on the client, the same server answers in {} (p50).",
                format_ns(q.rtt.p50_ns as f64)
            );
        }
        let _ = writeln!(
            out,
            "  Fix: on the server, set TCP_NODELAY (nginx: `tcp_nodelay on`) or send header and body in one write;\n  \
             on the client, TCP_QUICKACK helps where the server cannot be changed."
        );
        if self.interrupted {
            let _ = writeln!(
                out,
                "\n  (interrupted: figures cover what was measured before Ctrl-C)"
            );
        }
    }
}
