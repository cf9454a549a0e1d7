use std::fmt::Write;

use super::{Human, Page, Table};
use crate::model::stream::{
    Cost, Direction, DirectionResult, LatencyProbe, StreamInterval, StreamReport, UdpFigures,
};
use crate::model::transfer::{TransferLimit, TransferLimits};
use crate::units::{count, format_bitrate, format_bytes, format_ns};

/// One live line per interval event (the human view prints these as they come).
pub fn interval_line(ev: &StreamInterval) -> String {
    let mut s = format!(
        "  {:<14} {:<14} {:<16} {:>14}",
        format!(
            "{:.2}-{:.2}s",
            ev.start_ns as f64 / 1e9,
            ev.end_ns as f64 / 1e9
        ),
        ev.direction,
        format!("{} {}", ev.side, ev.role),
        format_bitrate(ev.rate_bps)
    );
    if ev.stream_bytes.len() > 1 {
        let secs = (ev.end_ns.saturating_sub(ev.start_ns)) as f64 / 1e9;
        let per: Vec<String> = ev
            .stream_bytes
            .iter()
            .map(|b| {
                format_bitrate(if secs > 0.0 {
                    *b as f64 * 8.0 / secs
                } else {
                    0.0
                })
            })
            .collect();
        let _ = write!(s, "  [{}]", per.join(", "));
    }
    if let Some(t) = &ev.tcp {
        let _ = write!(
            s,
            "  retr {} cwnd {} seg rtt {}",
            t.retransmits,
            t.cwnd,
            format_ns(f64::from(t.rtt_us) * 1e3)
        );
    }
    if let Some(l) = ev.udp_lost {
        let _ = write!(s, "  lost so far {}", count(l, "datagram"));
    }
    super::page::fit(&s)
}

fn cost_cells(c: &Cost) -> Vec<String> {
    let cpu = |v: f64| {
        if c.cpu_measured {
            format!("{v:.1}%")
        } else {
            "n/a".into()
        }
    };
    vec![
        cpu(c.cpu_user_pct),
        cpu(c.cpu_sys_pct),
        c.io_calls.to_string(),
        format_bytes(c.bytes_per_call),
        // Time in the call is not measured for datagrams the server's shared UDP thread reads.
        if c.us_per_call == 0.0 && c.io_calls > 0 {
            "n/a".into()
        } else {
            format_ns(c.us_per_call * 1e3)
        },
        if c.cpu_measured {
            c.context_switches.to_string()
        } else {
            "n/a".into()
        },
    ]
}

impl Human for StreamReport {
    fn render_human(&self, out: &mut Page) {
        self.header(out);
        for r in &self.results {
            direction_result(r, out);
        }
        if let Some(p) = &self.latency_probe {
            probe_section(p, out);
        }
        if let Some(e) = &self.error {
            let _ = writeln!(
                out,
                "\n  error: {e} (figures above cover what was measured)"
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

impl StreamReport {
    /// Target, transport, streams, direction and amount.
    fn header(&self, out: &mut Page) {
        let dir = match self.direction {
            Direction::Send => "client → server",
            Direction::Receive => "server → client",
            Direction::Both => "both directions",
        };
        let amount = match (self.duration_ns, self.bytes) {
            (Some(d), _) => format_ns(d as f64),
            (None, Some(b)) => format_bytes(b as f64),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "\nlatscope stream {} — {}, {}, {}, {}, {} writes{}",
            self.target,
            self.transport.name(),
            count(u64::from(self.streams), "stream"),
            dir,
            amount,
            format_bytes(f64::from(self.buffer_bytes)),
            self.udp_rate_bps
                .map(|r| format!(", target {}", format_bitrate(r)))
                .unwrap_or_default()
        );
        super::address_line(self.address_choice.as_ref(), out);
    }
}

/// "limited by the receive window 82% of 1.2 s busy (sndbuf 3%, network 15%); peer window …".
fn sender_limits(l: &TransferLimits, out: &mut Page) {
    let Some(by) = l.limited_by else {
        return;
    };
    let pct = |us| l.share(us) * 100.0;
    let _ = writeln!(
        out,
        "    limited by: {} — of {} busy sending: receive window {:.0}%, send buffer {:.0}%, network {:.0}%",
        match by {
            TransferLimit::ReceiveWindow => "the receiver's window",
            TransferLimit::SendBuffer => "the sender's send buffer",
            TransferLimit::Network => "the network (congestion window)",
        },
        format_ns(l.busy_us as f64 * 1e3),
        pct(l.rwnd_limited_us),
        pct(l.sndbuf_limited_us),
        pct(l.network_us())
    );
    let _ = writeln!(out, "    sender: {}", windows_text(l));
}

/// Windows, scales and buffers of one side.
fn windows_text(l: &TransferLimits) -> String {
    let bytes = |v: Option<u32>| v.map_or("?".into(), |b| format_bytes(f64::from(b)));
    let scale = |v: Option<u8>| v.map_or("off".into(), |s| s.to_string());
    format!(
        "peer's window {}, own advertised {}, wscale own {} / peer {}, rcvbuf {}, sndbuf {}",
        bytes(l.snd_wnd),
        bytes(l.rcv_wnd),
        scale(l.rcv_wscale),
        scale(l.snd_wscale),
        bytes(l.rcvbuf_bytes),
        bytes(l.sndbuf_bytes)
    )
}

/// One direction's figures: both sides' view, intervals, TCP/UDP detail and per-stream rows.
fn direction_result(r: &DirectionResult, out: &mut Page) {
    let _ = writeln!(
        out,
        "\n  {}: {} delivered at {} (the receiver's count)",
        r.direction,
        format_bytes(r.bytes_delivered as f64),
        format_bitrate(r.rate_bps)
    );
    let mut t = Table::new(&[
        "side",
        "role",
        "bytes",
        "time",
        "rate",
        "CPU usr",
        "CPU sys",
        "I/O calls",
        "B/call",
        "time/call",
        "ctx sw",
    ]);
    for v in [&r.sender, &r.receiver] {
        let mut row = vec![
            v.side.clone(),
            v.role.clone(),
            format_bytes(v.bytes as f64),
            format_ns(v.elapsed_ns as f64),
            format_bitrate(v.rate_bps),
        ];
        row.extend(cost_cells(&v.cost));
        t.row(row);
    }
    t.render("    ", out);
    if let Some(iv) = &r.intervals {
        let _ = writeln!(
            out,
            "    per interval (receiver): avg {}  min {}  max {}",
            format_bitrate(iv.avg_bps),
            format_bitrate(iv.min_bps),
            format_bitrate(iv.max_bps)
        );
    }
    if let Some(tcp) = &r.tcp {
        let _ = writeln!(
            out,
            "    TCP (sender): {}, cwnd {}, RTT {} ± {}",
            count(tcp.retransmits, "retransmit"),
            count(u64::from(tcp.cwnd), "segment"),
            format_ns(f64::from(tcp.rtt_us) * 1e3),
            format_ns(f64::from(tcp.rtt_var_us) * 1e3)
        );
        if let Some(l) = &tcp.limits {
            sender_limits(l, out);
        }
    }
    if let Some(l) = &r.receiver_limits {
        let _ = writeln!(out, "    receiver (client): {}", windows_text(l));
    }
    if let Some(u) = &r.udp {
        let _ = writeln!(
            out,
            "    UDP datagrams: {} sent, {} received, {} lost ({:.3}%), {} out of order, {} duplicated, jitter {}",
            u.sent,
            u.received,
            u.lost,
            u.loss_pct,
            u.out_of_order,
            u.duplicates,
            format_ns(u.jitter_ns)
        );
        if let Some(line) = where_lost(u) {
            let _ = writeln!(out, "    {line}");
        }
    }
    if r.streams.len() > 1 {
        let mut t = Table::new(&["stream", "sent", "received", "rate"]);
        for s in &r.streams {
            t.row(vec![
                s.index.to_string(),
                format_bytes(s.bytes_sent as f64),
                format_bytes(s.bytes_received as f64),
                format_bitrate(s.rate_bps),
            ]);
        }
        t.render("    ", out);
    }
}

/// Where the lost datagrams went, when the receiver's counters say.
fn where_lost(u: &UdpFigures) -> Option<String> {
    let n = u.lost_in_rcvbuf.filter(|_| u.lost > 0)?;
    if n == 0 {
        return Some(format!(
            "none of the {} lost in the receiver's socket buffer (Udp RcvbufErrors did not grow): lost before reaching it",
            u.lost
        ));
    }
    let rest = u.lost.saturating_sub(n);
    Some(format!(
        "{n} of the {} lost in the receiver's socket buffer (Udp RcvbufErrors +{n}): the receiver read too slowly for the rate — raise SO_RCVBUF (net.core.rmem_max) or send slower{}",
        u.lost,
        if rest > 0 {
            format!("; {rest} lost elsewhere")
        } else {
            String::new()
        }
    ))
}

/// The small request's latency idle and under the transfer.
fn probe_section(p: &LatencyProbe, out: &mut Page) {
    let _ = writeln!(
        out,
        "\n  latency probe (64 B request/response on its own connection):"
    );
    let mut t = Table::new(&["", "p50", "p90", "p99", "max", "count"]);
    for (name, s) in [("idle", &p.idle), ("under load", &p.loaded)] {
        t.row(vec![
            name.into(),
            format_ns(s.p50_ns as f64),
            format_ns(s.p90_ns as f64),
            format_ns(s.p99_ns as f64),
            format_ns(s.max_ns as f64),
            s.count.to_string(),
        ]);
    }
    t.render("    ", out);
    if p.idle.p50_ns > 0 {
        let ratio = p.loaded.p50_ns as f64 / p.idle.p50_ns as f64;
        let effect = if ratio >= 1.05 {
            format!("raises a small request's median latency {ratio:.1}×")
        } else if ratio <= 0.95 {
            format!(
                "lowers a small request's median latency to {:.0}% of idle (busy CPUs wake faster than idle ones)",
                ratio * 100.0
            )
        } else {
            "leaves a small request's median latency unchanged".to_string()
        };
        let jump = if p.jumped() {
            " (a latency jump: 2× and 1 ms above idle, exit code 1)"
        } else {
            ""
        };
        let _ = writeln!(out, "    the transfer {effect}{jump}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Summary;

    fn probe(idle_ns: u64, loaded_ns: u64) -> String {
        let s = |p50_ns| Summary {
            count: 100,
            p50_ns,
            ..Summary::default()
        };
        // Wide enough that no sentence is wrapped.
        let mut out = Page::new(400);
        probe_section(
            &LatencyProbe {
                idle: s(idle_ns),
                loaded: s(loaded_ns),
            },
            &mut out,
        );
        out.finish()
    }

    #[test]
    fn the_probe_says_lowers_when_load_made_latency_lower() {
        let out = probe(50_000, 30_000);
        assert!(
            out.contains("the transfer lowers a small request's median latency to 60% of idle"),
            "{out}"
        );
        assert!(!out.contains("0.6×") && !out.contains("multipl"), "{out}");
        assert!(probe(50_000, 150_000).contains("raises a small request's median latency 3.0×"));
        assert!(
            probe(50_000, 51_000).contains("leaves a small request's median latency unchanged")
        );
    }

    #[test]
    fn intervals_that_were_not_measured_are_not_shown_as_zero() {
        let render = |intervals| {
            let mut out = Page::new(400);
            direction_result(
                &DirectionResult {
                    direction: "client→server".into(),
                    bytes_delivered: 1400,
                    rate_bps: 11_200.0,
                    intervals,
                    ..DirectionResult::default()
                },
                &mut out,
            );
            out.finish()
        };
        let none = render(None);
        assert!(!none.contains("per interval"), "{none}");
        assert!(!none.contains("min 0 bit/s"), "{none}");
        let some = render(Some(crate::model::stream::IntervalStats {
            avg_bps: 2e6,
            min_bps: 1e6,
            max_bps: 3e6,
        }));
        assert!(
            some.contains("per interval (receiver): avg 2 Mbit/s  min 1 Mbit/s  max 3 Mbit/s"),
            "{some}"
        );
    }

    #[test]
    fn udp_loss_says_where_it_was_lost_when_the_receiver_counted_it() {
        let mut u = UdpFigures {
            sent: 1000,
            received: 700,
            lost: 300,
            ..UdpFigures::default()
        };
        assert_eq!(where_lost(&u), None);
        u.lost_in_rcvbuf = Some(300);
        let line = where_lost(&u).unwrap();
        assert!(
            line.starts_with(
                "300 of the 300 lost in the receiver's socket buffer (Udp RcvbufErrors +300)"
            ),
            "{line}"
        );
        assert!(!line.contains("elsewhere"), "{line}");
        u.lost_in_rcvbuf = Some(100);
        assert!(where_lost(&u).unwrap().ends_with("; 200 lost elsewhere"));
        u.lost_in_rcvbuf = Some(0);
        assert!(
            where_lost(&u)
                .unwrap()
                .starts_with("none of the 300 lost in the receiver's socket buffer")
        );
    }
}
