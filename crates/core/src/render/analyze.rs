//! Human rendering of [`AnalyzeReport`]: the ranked findings, the counts, the worst
//! connections, and the `--conn N` ladder (client left, server right, like Wireshark's flow
//! graph).

use std::fmt::Write;

use crate::render::page::wrap_line;
use crate::render::{Human, Page, Table};
use crate::summary::Summary;
use crate::units::{count, format_ns};

use crate::model::analyze::{AnalyzeReport, Ladder};

fn ns(v: u64) -> String {
    format_ns(v as f64)
}

fn frames_list(ex: &[crate::model::analyze::StallExample]) -> String {
    ex.iter()
        .map(|e| format!("#{} (conn {})", e.frame, e.conn))
        .collect::<Vec<_>>()
        .join(", ")
}

fn summary_table(out: &mut Page, rows: &[(&str, &Option<Summary>)]) {
    let mut headers = vec!["", "count"];
    headers.extend(Summary::HEADERS);
    let mut t = Table::new(&headers);
    let mut any = false;
    for (name, s) in rows {
        if let Some(s) = s {
            let mut cells = vec![name.to_string(), s.count.to_string()];
            cells.extend(s.cells());
            t.row(cells);
            any = true;
        }
    }
    if any {
        t.render("  ", out);
    }
}

impl Human for AnalyzeReport {
    fn render_human(&self, out: &mut Page) {
        let a = &self.analysis;
        let _ = writeln!(
            out,
            "{} ({}): {} over {}, {}, {}",
            self.source,
            self.format,
            count(a.frames, "frame"),
            ns(a.capture_span_ns),
            count(a.connections, "TCP connection"),
            count(a.transactions, "transaction")
        );
        for w in &self.warnings {
            let _ = writeln!(out, "  warning: {w}");
        }
        out.push('\n');
        if a.nothing_readable() {
            let k = &a.skipped;
            let _ = writeln!(
                out,
                "No frames could be read: {} ({} unknown link type, {} not IP, {} encrypted, {} truncated, {} malformed); nothing was analysed.",
                if a.frames == 1 {
                    "the one frame was skipped".to_string()
                } else {
                    format!("all {} frames were skipped", a.frames)
                },
                k.unknown_link_type,
                k.not_ip,
                k.encrypted,
                k.truncated,
                k.malformed
            );
        } else {
            self.stalls(out);
        }
        handshake_lines(a, out);
        undecided_lines(a, out);
        out.push('\n');
        summary_table(
            out,
            &[
                ("transaction", &a.transaction_time),
                ("server think", &a.think_time),
                ("handshake RTT", &a.handshake_rtt),
            ],
        );
        let c = &a.counts;
        let _ = writeln!(
            out,
            "\nTCP analysis: {} retransmissions ({} fast, {} spurious), {} out-of-order, {} duplicate ACKs, {} zero window, {} window full, {} keep-alive, {} previous segment not captured",
            c.tshark_retransmission(),
            c.fast_retransmission,
            c.spurious_retransmission,
            c.out_of_order,
            c.duplicate_ack,
            c.zero_window,
            c.window_full,
            c.keep_alive,
            c.lost_segment
        );
        quality_line(&a.capture_quality, out);
        worst_connections(a, out);
        if let Some(l) = &a.ladder {
            out.push('\n');
            render_ladder(l, out);
        }
    }
}

impl AnalyzeReport {
    /// The stalls table by time lost, with the top cause, its examples and how to see it.
    fn stalls(&self, out: &mut Page) {
        let a = &self.analysis;
        if a.findings.is_empty() {
            out.push_str("No stalls found.\n");
            return;
        }
        out.push_str("Stalls, by time lost:\n");
        let mut t = Table::new(&["", "cause", "count", "time lost", "largest at frame"]);
        for (i, f) in a.findings.iter().enumerate() {
            t.row(vec![
                format!("{}.", i + 1),
                f.title.clone(),
                f.count.to_string(),
                ns(f.lost_ns),
                f.examples
                    .first()
                    .map(|e| format!("#{}", e.frame))
                    .unwrap_or_default(),
            ]);
        }
        t.render("  ", out);
        if let Some(f) = a.findings.first() {
            let _ = writeln!(out, "\n  Top cause: {}. {}", f.title, f.explanation);
            let _ = writeln!(out, "  Examples: {}", frames_list(&f.examples));
            if let Some(e) = f.examples.first() {
                // A live run has no file to open again: the ladder needs the packets saved.
                let see = if self.format == "live" {
                    format!(
                        "latscope analyze FILE --conn {} (FILE: this run's packets, kept with --live -w FILE)",
                        e.conn
                    )
                } else {
                    format!("latscope analyze {} --conn {}", self.source, e.conn)
                };
                let _ = writeln!(out, "  See it: {see}");
            }
        }
    }
}

/// The connections that lost the most time to stalls (at most ten).
fn worst_connections(a: &crate::model::analyze::Analysis, out: &mut Page) {
    let worst: Vec<_> = a
        .top_connections
        .iter()
        .filter(|c| c.stall_lost_ns > 0)
        .take(10)
        .collect();
    if !worst.is_empty() {
        out.push_str("\nConnections that lost the most time:\n");
        let mut t = Table::new(&[
            "conn",
            "client",
            "server",
            "frames",
            "transactions",
            "time lost",
            "retrans",
        ]);
        for c in worst {
            t.row(vec![
                c.id.to_string(),
                c.client.clone(),
                c.server.clone(),
                c.frames.to_string(),
                c.transaction_count.to_string(),
                ns(c.stall_lost_ns),
                c.counts.tshark_retransmission().to_string(),
            ]);
        }
        t.render("  ", out);
    }
}

/// The start of a ladder note's own line: blank frame and time columns, then the client's lane.
const LANE: &str = "                    |  ";

/// Draw one connection as a ladder: client on the left, server on the right.
pub fn render_ladder(l: &Ladder, out: &mut Page) {
    let Some(c) = &l.conn else {
        out.push_str("That connection does not exist in this capture (connections are numbered from 0 in order of appearance).\n");
        return;
    };
    let _ = writeln!(
        out,
        "Connection {}: {} (client) <-> {} (server), handshake RTT {}, captured near the {}",
        c.id,
        c.client,
        c.server,
        c.handshake_rtt_ns
            .map(ns)
            .unwrap_or_else(|| "unknown".into()),
        c.capture_point
    );
    // The arrows take what the page leaves after the frame, time and both sides' columns.
    let arrow_w = out.width().saturating_sub(38).clamp(30, 44);
    let _ = writeln!(
        out,
        "{:>7} {:>10}  {:<9}{:^arrow_w$}{:>9}",
        "frame", "time", "client", "", "server"
    );
    // The diagram is preformatted: a row is never broken. A note that does not fit beside its
    // row goes on lines of its own under it, in the client's lane, wrapped there.
    let mut rows = String::new();
    for r in &l.rows {
        let label = format!("{} seq={} ack={} len={}", r.flags, r.seq, r.ack, r.len);
        let shaft = arrow_w - 2;
        let arrow = if r.from_client {
            format!("{label:-<shaft$}>")
        } else {
            format!("<{label:->shaft$}")
        };
        let row = format!(
            "{:>7} {:>10}  {:<9}{:^arrow_w$}{:>9}",
            r.frame,
            format!("{:.3}ms", r.t_ns as f64 / 1e6),
            "|",
            arrow,
            "|"
        );
        let notes = r.notes.join("; ");
        rows.push_str(&row);
        if notes.is_empty() {
            // nothing to say about this frame
        } else if row.len() + 2 + notes.len() <= out.width() {
            let _ = write!(rows, "  {notes}");
        } else {
            for note in &r.notes {
                for piece in wrap_line(note, out.width().saturating_sub(LANE.len()).max(20)) {
                    let _ = write!(rows, "\n{LANE}{}", piece.trim_start());
                }
            }
        }
        rows.push('\n');
    }
    out.preformatted(&rows);
    if !c.transactions.is_empty() {
        out.push_str("\nTransactions:\n");
        let mut t = Table::new(&["request", "frames", "duration", "think", "stall", "lost"]);
        for x in &c.transactions {
            t.row(vec![
                if x.http_request.is_empty() {
                    "(data)".into()
                } else {
                    x.http_request.clone()
                },
                format!("#{}-#{}", x.request_frame, x.last_response_frame),
                ns(x.duration_ns),
                ns(x.think_ns),
                x.stall
                    .map(|k| k.label().to_string())
                    .unwrap_or_else(|| "-".into()),
                if x.stall_lost_ns > 0 {
                    ns(x.stall_lost_ns)
                } else {
                    "-".into()
                },
            ]);
        }
        t.render("  ", out);
    }
}

/// The handshakes' resends and a path MTU black hole's figures, under the findings.
fn handshake_lines(a: &crate::model::analyze::Analysis, out: &mut Page) {
    for (what, t) in [
        ("SYN", &a.handshake_resends.syn),
        ("SYN-ACK", &a.handshake_resends.syn_ack),
    ] {
        if t.count > 0 {
            let _ = writeln!(
                out,
                "  Connection set-up waited {} for {} (longest wait {}).",
                ns(t.waited_ns),
                count(t.count, &format!("resent {what}")),
                ns(t.longest_ns)
            );
        }
    }
    if let Some(p) = &a.pmtu_black_hole {
        let packet = p.lost_segment_bytes + p.header_bytes;
        let _ = writeln!(
            out,
            "  Path MTU: {}'s {}-byte segments (IP packets {packet} bytes long) were resent {} and never acknowledged, \
while segments of up to {} bytes (packets of {}) passed{}: the path's MTU lies between; clamp the MSS to at most {} or let \
ICMP \"fragmentation needed\" through (conn {}, first sent in frame #{}).",
            p.sender,
            p.lost_segment_bytes,
            count(u64::from(p.resends), "time"),
            p.largest_acked_bytes,
            p.largest_acked_bytes + p.header_bytes,
            p.advertised_mss.map_or(String::new(), |m| format!(
                ", the receiver advertised MSS {m}"
            )),
            p.largest_acked_bytes,
            p.conn,
            p.first_frame
        );
    }
}

/// What a detector saw the shape of but the capture could not decide: neither a finding nor
/// ruled out, with the reason.
fn undecided_lines(a: &crate::model::analyze::Analysis, out: &mut Page) {
    for u in &a.undecided {
        let _ = writeln!(
            out,
            "  Undecided: {} that may be {} (up to {}; {}), e.g. frame #{} — not counted above.",
            count(u.count, "stall"),
            u.kind.label(),
            ns(u.lost_ns),
            u.reason.label(),
            u.examples.first().map_or(0, |e| e.frame)
        );
    }
}

/// What the capture got wrong, when it got anything wrong.
fn quality_line(q: &crate::model::analyze::CaptureQuality, out: &mut Page) {
    let parts: Vec<String> = [
        (
            q.duplicate_frames,
            "frame captured twice",
            "frames captured twice",
        ),
        (
            q.time_backwards,
            "timestamp going back",
            "timestamps going back",
        ),
        (
            q.one_way_connections,
            "connection seen one way only",
            "connections seen one way only",
        ),
        (
            q.connections_with_gaps,
            "connection with frames missing",
            "connections with frames missing",
        ),
        (
            q.connections_without_handshake,
            "connection without its handshake",
            "connections without their handshake",
        ),
    ]
    .into_iter()
    .filter(|(n, _, _)| *n > 0)
    .map(|(n, one, many)| format!("{n} {}", crate::units::verb(n, one, many)))
    .collect();
    if !parts.is_empty() {
        let _ = writeln!(
            out,
            "Capture: {} (the detectors that need what these lack stayed silent there)",
            parts.join(", ")
        );
    }
}
