use std::fmt::Write;

use super::{Human, Page, Table};
use crate::model::ping::{
    HopStats, PingReply, PingReport, RateLimitedHop, ReplyKind, TraceHop, TraceReport,
    TraceUnreachable,
};
use crate::summary::Summary;
use crate::units::{format_ns, format_si};

/// One hping3-style line for an answered probe: `len=44 ip=10.0.0.2 ttl=64 flags=SA seq=0 rtt=1.23ms`.
pub fn reply_line(r: &PingReply) -> String {
    let mut s = format!("len={} ip={}", r.size, r.from);
    if let Some(t) = r.ttl {
        let _ = write!(s, " ttl={t}");
    }
    match &r.flags {
        Some(f) => {
            let _ = write!(s, " flags={f}");
        }
        None => {
            let _ = write!(s, " {}", r.kind.label());
        }
    }
    let _ = write!(s, " seq={} rtt={}", r.seq, format_ns(r.rtt_ns as f64));
    s
}

/// "  address: …" under a ping or trace header when a name had several addresses to choose from.
pub fn choice_line(c: &crate::model::address::AddressChoice) -> Option<String> {
    (c.method != crate::model::address::ChoiceMethod::Literal)
        .then(|| super::page::fit(&format!("  address: {}", c.describe())))
}

/// The header line printed before the first reply.
pub fn ping_header(
    target: &str,
    address: &str,
    port: Option<u16>,
    mode: &str,
    why: &str,
) -> String {
    let port = port.map(|p| format!(" port {p}")).unwrap_or_default();
    super::page::fit(&format!("PING {target} ({address}){port}: {mode} ({why})"))
}

impl Human for PingReport {
    fn render_human(&self, out: &mut Page) {
        let _ = writeln!(
            out,
            "\n--- {} ({}) {} ping statistics ---",
            self.target,
            self.address,
            self.mode.name()
        );
        let _ = writeln!(
            out,
            "{} probes sent, {} answered, {} lost ({:.1}% loss), {} probes/s over {}",
            self.sent,
            self.received,
            self.lost,
            self.loss_percent,
            format_si(self.rate_per_sec),
            format_ns(self.elapsed_ns as f64)
        );
        if !self.replies_by_kind.is_empty() {
            let kinds: Vec<String> = self
                .replies_by_kind
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect();
            let _ = writeln!(out, "answers: {}", kinds.join(", "));
        }
        if let Some(p) = self.port_state {
            let _ = writeln!(out, "port {}: {}", self.port.unwrap_or(0), p.name());
        }
        if self.rtt.count > 0 {
            let _ = writeln!(
                out,
                "rtt min/avg/max/stddev = {}/{}/{}/{}",
                format_ns(self.rtt.min_ns as f64),
                format_ns(self.rtt.mean_ns),
                format_ns(self.rtt.max_ns as f64),
                format_ns(self.rtt.stddev_ns)
            );
            let mut headers: Vec<&str> = vec!["rtt"];
            headers.extend(Summary::HEADERS);
            let mut t = Table::new(&headers);
            let mut row = vec![format!("{} probes", self.rtt.count)];
            row.extend(self.rtt.cells());
            t.row(row);
            t.render("", out);
        }
        let _ = writeln!(out, "timestamps: {}", self.timestamps);
        if self.interrupted {
            let _ = writeln!(
                out,
                "(interrupted: figures cover what was measured before Ctrl-C)"
            );
        }
    }
}

/// "hop 3: 35% unanswered, yet hop 5 beyond it answers all: …".
fn rate_limit_line(h: &RateLimitedHop) -> String {
    let later = if h.later_loss_percent == 0.0 {
        format!("hop {} beyond it answers every probe", h.later_ttl)
    } else {
        format!(
            "hop {} beyond it leaves only {:.0}% unanswered",
            h.later_ttl, h.later_loss_percent
        )
    };
    format!(
        "hop {}: {:.0}% unanswered, yet {later}: the probes pass through it, so this is the router rate-limiting the ICMP replies it sends, not packet loss",
        h.ttl, h.loss_percent
    )
}

/// One traceroute-style line for a hop: ` 2  10.0.2.2  0.151ms  0.120ms  *`; a router's
/// unreachable shows traceroute's mark (`!H`) in place of a time, which would be how long the
/// router tried, not a round trip.
pub fn hop_line(h: &TraceHop) -> String {
    let mut s = format!("{:>2} ", h.ttl);
    let mut last_from: Option<&str> = None;
    for p in &h.probes {
        let Some(from) = &p.from else {
            s.push_str("  *");
            continue;
        };
        if last_from != Some(from.as_str()) {
            let _ = write!(s, " {from}");
            last_from = Some(from.as_str());
        }
        match (p.rtt_ns, p.kind.and_then(ReplyKind::trace_mark)) {
            (Some(rtt), _) => {
                let _ = write!(s, "  {}", format_ns(rtt as f64));
            }
            (None, Some(mark)) => {
                let _ = write!(s, "  {mark}");
            }
            (None, None) => s.push_str("  ?"),
        }
    }
    if h.destination {
        if let Some(k) = h
            .probes
            .iter()
            .find_map(|p| p.kind.filter(|k| k.from_destination()))
        {
            let _ = write!(s, "  [destination: {}]", k.label());
        }
    }
    super::page::fit(&s)
}

/// Why a trace stopped short: `destination 10.9.2.99 unreachable: hop 2 (10.9.1.2) answered
/// host unreachable (!H) 3.01s after the probe; …`.
fn unreachable_line(address: &str, u: &TraceUnreachable) -> String {
    let why = match u.kind {
        ReplyKind::HostUnreachable => {
            "it has a route to the address, but no host answered there (ARP / neighbour discovery failed) or its route is of type unreachable"
        }
        ReplyKind::NetUnreachable => "it has no route to the address",
        ReplyKind::ProtocolUnreachable => "the host does not handle the probes' protocol",
        ReplyKind::Prohibited => "a firewall or a prohibit route rejects the probes",
        _ => "it cannot deliver the probes",
    };
    format!(
        "destination {address} unreachable: hop {} ({}) answered {} ({}) {} after the probe: {why}",
        u.ttl,
        u.from,
        u.kind.label(),
        u.kind.trace_mark().unwrap_or("!"),
        format_ns(u.after_ns as f64),
    )
}

/// The header line of a trace.
pub fn trace_header(r: &TraceReport) -> String {
    let port = r.port.map(|p| format!(" port {p}")).unwrap_or_default();
    super::page::fit(&format!(
        "trace to {} ({}){}, {} probes, ttl {}..{}, {} per hop; {} ({})",
        r.target,
        r.address,
        port,
        r.mode.name(),
        r.first_ttl,
        r.max_ttl,
        r.queries,
        r.flow,
        r.mode_reason
    ))
}

fn stats_row(h: &HopStats) -> Vec<String> {
    let host = if h.addresses.is_empty() {
        "???".to_string()
    } else {
        h.addresses.join(" ")
    };
    // Counted answers without a round trip (a router's unreachable) have no RTT to show.
    let timed = h.rtt.count > 0;
    let ns = |v: u64| {
        if !timed {
            "-".to_string()
        } else {
            format_ns(v as f64)
        }
    };
    vec![
        format!("{:>2}.", h.ttl),
        host,
        format!("{:.1}%", h.loss_percent),
        h.sent.to_string(),
        h.last_ns
            .map(|v| format_ns(v as f64))
            .unwrap_or_else(|| "-".into()),
        ns(h.rtt.min_ns),
        if !timed {
            "-".into()
        } else {
            format_ns(h.rtt.mean_ns)
        },
        ns(h.rtt.max_ns),
        if !timed {
            "-".into()
        } else {
            format_ns(h.rtt.stddev_ns)
        },
        ns(h.rtt.p50_ns),
        ns(h.rtt.p90_ns),
    ]
}

impl Human for TraceReport {
    fn render_human(&self, out: &mut Page) {
        if let Some(rep) = &self.report {
            let _ = writeln!(out, "{}", trace_header(self));
            let _ = writeln!(out, "report over {} rounds:", self.rounds.unwrap_or(0));
            let mut t = Table::new(&[
                "hop", "host", "loss", "sent", "last", "min", "avg", "max", "stddev", "p50", "p90",
            ]);
            for h in rep {
                t.row(stats_row(h));
            }
            t.render("  ", out);
        }
        match (self.reached, self.destination_reply) {
            (true, Some(k)) => {
                let ttl = self
                    .hops
                    .iter()
                    .chain(std::iter::empty())
                    .find(|h| h.destination)
                    .map(|h| h.ttl);
                let ttl = ttl.or_else(|| {
                    self.report
                        .as_ref()
                        .and_then(|r| r.iter().find(|h| h.destination).map(|h| h.ttl))
                });
                let _ = writeln!(
                    out,
                    "destination {} reached at hop {}: {}",
                    self.address,
                    ttl.map(|t| t.to_string()).unwrap_or_else(|| "?".into()),
                    k.label()
                );
            }
            _ => match &self.unreachable {
                Some(u) => {
                    let _ = writeln!(out, "{}", unreachable_line(&self.address, u));
                }
                None => {
                    let _ = writeln!(
                        out,
                        "destination {} not reached within {} hops",
                        self.address, self.max_ttl
                    );
                }
            },
        }
        for h in self.rate_limited_hops() {
            let _ = writeln!(out, "{}", rate_limit_line(&h));
        }
        let _ = writeln!(out, "timestamps: {}", self.timestamps);
        if self.interrupted {
            let _ = writeln!(
                out,
                "(interrupted: figures cover what was measured before Ctrl-C)"
            );
        }
    }
}
