use std::fmt::Write;

use super::{Human, Page, Table};
use crate::model::rr::{LoadMode, RrReport, ServerBehaviour, SockOpts, Transport, WriteMode};
use crate::summary::Summary;
use crate::units::{count, format_ns, format_si};

fn onoff(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

pub(crate) fn sockopts_text(o: &SockOpts, transport: Transport) -> String {
    if transport != Transport::Tcp {
        return String::new();
    }
    let mut s = format!("TCP_NODELAY {}", onoff(o.nodelay));
    if o.quickack {
        s.push_str(", TCP_QUICKACK");
    }
    if o.cork {
        s.push_str(", TCP_CORK");
    }
    if let Some(b) = o.sndbuf {
        let _ = write!(s, ", SO_SNDBUF {b}");
    }
    if let Some(b) = o.rcvbuf {
        let _ = write!(s, ", SO_RCVBUF {b}");
    }
    s
}

pub(crate) fn server_text(b: &ServerBehaviour, transport: Transport) -> String {
    let mut parts = Vec::new();
    if transport != Transport::Udp {
        parts.push(match b.write_mode {
            WriteMode::Single => "responds in one write".to_string(),
            WriteMode::Split => format!("responds in two writes ({} B, then the rest)", b.split_at),
        });
    }
    if b.think_ns > 0 {
        parts.push(format!(
            "thinks {} before replying",
            format_ns(b.think_ns as f64)
        ));
    }
    let so = sockopts_text(&b.sockopts, transport);
    if !so.is_empty() {
        parts.push(so);
    }
    if b.drop_every > 0 {
        parts.push(format!("drops every {}th request", b.drop_every));
    }
    if parts.is_empty() {
        parts.push("echoes each request".into());
    }
    parts.join(", ")
}

impl Human for RrReport {
    fn render_human(&self, out: &mut Page) {
        self.header(out);
        out.push('\n');
        self.results_table(out);
        out.push('\n');
        self.footnotes(out);
    }
}

/// The load of an `rr` or `http` run, as the headers name it.
pub(super) fn load_text(load: &LoadMode) -> String {
    match load {
        LoadMode::Closed => "closed loop".to_string(),
        LoadMode::Open { rate_per_sec } => {
            format!("open loop at {}/s", format_si(*rate_per_sec))
        }
    }
}

/// "send→qdisc 3.1us (p99 9us), qdisc→driver …, driver→recv …".
fn host_stack_text(h: &crate::model::hoststack::HostStackTimes) -> String {
    let stage = |name: &str, s: Option<crate::model::hoststack::StageTimes>| {
        s.map(|s| {
            format!(
                "{name} {} (p99 {})",
                crate::units::format_ns(s.p50_ns as f64),
                crate::units::format_ns(s.p99_ns as f64)
            )
        })
    };
    let parts: Vec<String> = [
        stage("send→qdisc", h.send_to_sched),
        stage("qdisc→driver", h.sched_to_driver),
        stage("driver→recv", h.driver_to_recv),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        "no kernel timestamps".into()
    } else {
        parts.join(", ")
    }
}

impl RrReport {
    /// Target, transport, load and both sides' socket options.
    fn header(&self, out: &mut Page) {
        let _ = writeln!(
            out,
            "latscope rr {} — {}, {}, {}",
            self.target,
            self.transport.name(),
            count(u64::from(self.connections), "connection"),
            load_text(&self.load)
        );
        super::address_line(self.address_choice.as_ref(), out);
        if let Some(h) = &self.client_stack {
            let _ = writeln!(out, "  client host stack: {}", host_stack_text(h));
        }
        let client = sockopts_text(&self.client, self.transport);
        if !client.is_empty() {
            let _ = writeln!(out, "  client: {client}");
        }
        if self.peer == "latscope" {
            let _ = writeln!(
                out,
                "  server: {}",
                server_text(&self.server, self.transport)
            );
        } else {
            let _ = writeln!(
                out,
                "  server: a {} server (its socket options are its own)",
                self.peer
            );
        }
    }

    /// One row per size (and its from-intended-send row in open loop).
    fn results_table(&self, out: &mut Page) {
        let open = matches!(self.load, LoadMode::Open { .. });
        let mut headers: Vec<&str> = vec!["request/response", "trans/s"];
        headers.extend(Summary::HEADERS);
        headers.push("one-way p50");
        if self.transport == Transport::Udp {
            headers.push("lost");
        }
        if open {
            headers.push("late sends");
        }
        let mut t = Table::new(&headers);
        let flagged = |size: u32| {
            self.size_jump
                .as_ref()
                .is_some_and(|j| j.sizes.contains(&u64::from(size)))
        };
        for r in &self.results {
            let mark = if flagged(r.response_bytes.max(r.request_bytes)) {
                " !"
            } else {
                ""
            };
            let mut cells = vec![
                format!("{} B / {} B{}", r.request_bytes, r.response_bytes, mark),
                format_si(r.transactions_per_sec),
            ];
            cells.extend(r.rtt.cells());
            // Half an RTT that is a TCP timer's stall (a delayed ACK, an RTO) is no one-way
            // latency: the stall is on one side, not split across the path.
            cells.push(
                if r.rtt.count > 0 && crate::timer::TcpTimer::classify(r.rtt.p50_ns).is_none() {
                    format_ns(r.one_way_p50_ns as f64)
                } else {
                    "-".into()
                },
            );
            if self.transport == Transport::Udp {
                cells.push(r.lost.to_string());
            }
            if open {
                cells.push(r.late_sends.to_string());
            }
            t.row(cells);
            if let Some(ci) = &r.rtt_from_intended {
                let mut cells = vec!["  from intended send".to_string(), String::new()];
                cells.extend(ci.cells());
                t.row(cells);
            }
        }
        t.render("  ", out);
    }

    /// What the figures mean, per-size problems and the size-jump verdict.
    fn footnotes(&self, out: &mut Page) {
        let open = matches!(self.load, LoadMode::Open { .. });
        let _ = writeln!(
            out,
            "  RTT: request write → last response byte read. One-way = RTT/2, an estimate that assumes a symmetric path (\"-\" when the median is a TCP timer's stall)."
        );
        if open {
            let _ = writeln!(
                out,
                "  Open loop: 'from intended send' counts from when each request was due, so stalls are not hidden (coordinated omission)."
            );
        }
        for r in &self.results {
            let lost = [
                (r.timeouts, "request", "timed out"),
                (r.late_responses, "late response", "ignored"),
            ];
            for (n, what, fate) in lost.into_iter().filter(|l| l.0 > 0) {
                let _ = writeln!(out, "  {} B: {} {fate}", r.request_bytes, count(n, what));
            }
            for e in &r.errors {
                let _ = writeln!(out, "  error: {e}");
            }
        }
        if let Some(j) = &self.size_jump {
            let _ = writeln!(
                out,
                "\n  ! latency jumps at {} ({}): p50 {} against {} elsewhere (+{}).\n    Likely cause: {}",
                count(j.sizes.len() as u64, "size"),
                size_ranges(&j.sizes),
                format_ns(j.jumped_p50_ns as f64),
                format_ns(j.baseline_p50_ns as f64),
                format_ns(j.excess_ns as f64),
                j.likely_cause
            );
        }
        if self.interrupted {
            let _ = writeln!(
                out,
                "\n  (interrupted: figures cover what was measured before Ctrl-C)"
            );
        }
    }
}

/// "64–1024 B" style description of a sorted size list (at most a few ranges).
fn size_ranges(sizes: &[u64]) -> String {
    match (sizes.first(), sizes.last()) {
        (Some(a), Some(b)) if a == b => format!("{a} B"),
        (Some(a), Some(b)) => format!("{a}–{b} B"),
        _ => String::new(),
    }
}
