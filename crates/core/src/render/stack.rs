//! The human rendering of `latscope stack`'s result, netstacklat's layout: one log2 histogram
//! per probe (and group), then notes on sampling, missing probes and timestamps.

use crate::log2::{bucket_label, format_estimate_ns};
use crate::model::stack::{
    Direction, Prerequisite, Probe, ProbeHistogram, ProbeStamps, ProbeStatus, StackReport,
    tx_stage_shares,
};
use crate::render::{Human, Page};
use crate::units::format_ns;

/// The longest bar; narrower pages get shorter bars.
const BAR_WIDTH: usize = 48;

/// Columns of a histogram row besides its bar: `{label:<20} {count:>10} |` and the closing `|`.
const ROW_FRAME: usize = 34;

/// netstacklat's layout for one histogram: `(lo, hi]  count |@@@@   |` rows from the first to the
/// last non-empty bucket, then count, average and the p50/p99 estimates.
pub fn render_histogram(h: &ProbeHistogram, out: &mut Page) {
    use std::fmt::Write;
    let group = if h.group == "all" {
        String::new()
    } else {
        format!(" {}", h.group)
    };
    let _ = writeln!(out, "{}{} [{}]:", h.probe, group, h.hook);
    let Some((first, last)) = h.hist.occupied_range() else {
        let _ = writeln!(out, "count: 0");
        return;
    };
    let max = h.hist.buckets[first..=last]
        .iter()
        .copied()
        .max()
        .unwrap_or(1)
        .max(1);
    let bar_w = out.width().saturating_sub(ROW_FRAME).clamp(8, BAR_WIDTH);
    for k in first..=last {
        let c = h.hist.buckets[k];
        let n = ((c as u128 * bar_w as u128).div_ceil(max as u128)) as usize;
        let label = if k + 1 >= crate::log2::BUCKETS {
            format!("({}, inf]", format_ns(crate::log2::bucket_lower(k) as f64))
        } else {
            bucket_label(k)
        };
        let _ = writeln!(
            out,
            "{label:<20} {c:>10} |{:<w$}|",
            "@".repeat(n.min(bar_w)),
            w = bar_w
        );
    }
    let _ = writeln!(
        out,
        "count: {}, average: {}, p50: {}, p99: {}",
        h.count,
        format_estimate_ns(h.mean_ns),
        format_estimate_ns(h.p50_ns),
        format_estimate_ns(h.p99_ns)
    );
    if h.hist.all_in_first_bucket() {
        let _ = writeln!(
            out,
            "every packet read ≤ 1ns here: this hook runs where the packets' receive timestamp is taken, so it adds no time of its own"
        );
    }
}

/// A block of histograms under a UTC time heading, as printed every `-r` seconds: the receive
/// path's, then the transmit path's with where a packet's time goes.
pub fn render_snapshot(unix_ms: u64, hists: &[ProbeHistogram], out: &mut Page) {
    out.push_str(&crate::units::utc_time(unix_ms));
    out.push('\n');
    if hists.is_empty() {
        out.push_str("(no packets recorded yet)\n");
    }
    let (rx, tx): (Vec<&ProbeHistogram>, Vec<&ProbeHistogram>) = hists
        .iter()
        .partition(|h| h.probe.direction() == Direction::Rx);
    let both = !rx.is_empty() && !tx.is_empty();
    if both {
        out.push_str("receive path: time since each packet arrived\n");
    }
    for h in rx {
        render_histogram(h, out);
    }
    if both {
        out.push_str("transmit path: time in each stage\n");
    }
    for h in &tx {
        render_histogram(h, out);
    }
    render_tx_shares(hists, out);
}

/// `where the time goes on the way out (mean per packet): qdisc 12ms (98%), …`: the transmit
/// stages' means, which add up to a packet's time from the write to its completion.
fn render_tx_shares(hists: &[ProbeHistogram], out: &mut Page) {
    use std::fmt::Write;
    let shares = tx_stage_shares(hists);
    if shares.len() < 2 {
        return;
    }
    let total: f64 = shares.iter().map(|s| s.mean_ns).sum();
    let parts: Vec<String> = shares
        .iter()
        .map(|s| {
            format!(
                "{} {} ({:.0}%)",
                s.probe,
                format_estimate_ns(s.mean_ns),
                s.share * 100.0
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "on the way out, mean per packet: {} = {}",
        parts.join(" + "),
        format_estimate_ns(total)
    );
}

/// Why an unattached probe is missing: the system's doing (with the fix) or the kernel's.
pub fn unavailable_note(st: &ProbeStatus) -> String {
    match st.missing() {
        Some(Prerequisite::Cgroup2Mount) => format!(
            "{} unavailable: no cgroup v2 hierarchy is mounted (ip netns exec remounts /sys) — mount it \
             (`mount -t cgroup2 none /sys/fs/cgroup`) or run outside the netns (`--netns NAME` keeps to its packets)",
            st.probe
        ),
        None => format!(
            "{} unavailable on this kernel (see --list-probes)",
            st.probe
        ),
    }
}

/// The `--list-probes` table.
pub fn render_probe_list(status: &[ProbeStatus], stamp_hook: Option<&str>, out: &mut Page) {
    let receive = status.iter().any(|s| s.probe.direction() == Direction::Rx);
    use std::fmt::Write;
    for st in status {
        match &st.hook {
            Some(hook) => {
                let _ = writeln!(out, "{:<20} available   {hook}", st.probe.name());
                let _ = writeln!(out, "{:<20}   {}", "", st.probe.description());
                if let Some(sem) = &st.semantics {
                    let _ = writeln!(out, "{:<20}   measured at: {sem}", "");
                }
            }
            None => {
                let _ = writeln!(out, "{:<20} UNAVAILABLE", st.probe.name());
                let _ = writeln!(out, "{:<20}   {}", "", st.probe.description());
                if st.missing().is_some() {
                    let _ = writeln!(out, "{:<20}   {}", "", unavailable_note(st));
                }
            }
        }
        for h in &st.also_available {
            let _ = writeln!(out, "{:<20}   also possible: {h}", "");
        }
        for r in &st.refused {
            let _ = writeln!(out, "{:<20}   not {}: {}", "", r.hook, r.error);
        }
    }
    match stamp_hook {
        _ if !receive => {}
        Some(h) => {
            let _ = writeln!(
                out,
                "packets without skb->tstamp are stamped at {h} (first hook latscope sees)"
            );
        }
        None => {
            out.push_str("packets without skb->tstamp cannot be stamped here and are not counted\n")
        }
    }
}

impl Human for StackReport {
    fn render_human(&self, out: &mut Page) {
        use std::fmt::Write;
        let end_ms = self.meta.started_unix_ms + self.duration_ns / 1_000_000;
        let _ = writeln!(
            out,
            "latscope stack: {} over {}{}",
            if self.interrupted {
                "interrupted"
            } else {
                "done"
            },
            format_ns(self.duration_ns as f64),
            if self.interrupted { " (partial)" } else { "" }
        );
        render_snapshot(end_ms, &self.histograms, out);
        if self.sample_every > 1 {
            let _ = writeln!(
                out,
                "note: sampled: one packet in {} timed at each probe (counts are ~1/{} of the packets)",
                self.sample_every, self.sample_every
            );
        }
        for st in &self.probes {
            if st.hook.is_none() {
                let _ = writeln!(out, "note: {}", unavailable_note(st));
            }
        }
        for s in &self.stamps {
            if s.probe.direction() == Direction::Tx {
                render_tx_notes(s, out);
                continue;
            }
            if s.stats.fallback_stamped > 0 {
                let _ = writeln!(
                    out,
                    "note: {}: {} packets had no skb->tstamp and were timed from latscope's first hook",
                    s.probe, s.stats.fallback_stamped
                );
            }
            if s.stats.no_stamp + s.stats.bad_stamp > 0 {
                let _ = writeln!(
                    out,
                    "note: {}: {} packets not counted (no usable receive timestamp)",
                    s.probe,
                    s.stats.no_stamp + s.stats.bad_stamp
                );
            }
        }
    }
}

/// What a transmit stage could not time, and why.
fn render_tx_notes(s: &ProbeStamps, out: &mut Page) {
    use std::fmt::Write;
    if s.stats.no_stamp > 0 {
        let why = if s.probe == Probe::TcpSendQueue {
            "their data was written before latscope attached, or more writes were queued than it follows"
        } else {
            "latscope did not see them start it (another namespace's netfilter, forwarded, or sent before it attached)"
        };
        let _ = writeln!(
            out,
            "note: {}: {} packets not timed: {why}",
            s.probe, s.stats.no_stamp
        );
    }
    if s.stats.handed_on > 0 {
        let _ = writeln!(
            out,
            "note: {}: {} packets were handed on by a virtual device (loopback, veth, bridge, VLAN, tunnel), which completes no transmission: nothing to time",
            s.probe, s.stats.handed_on
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Log2Histogram;
    use crate::model::stack::Probe;

    #[test]
    fn histogram_rows_span_occupied_buckets_with_bars() {
        let mut hist = Log2Histogram::new();
        for _ in 0..100 {
            hist.record(40_000); // (32.8us, 65.5us]
        }
        for _ in 0..25 {
            hist.record(100_000); // (65.5us, 131us]
        }
        let h = ProbeHistogram::new(Probe::TcpStart, "cgroup_skb/ingress", "all".into(), hist);
        let mut page = Page::new(100);
        render_histogram(&h, &mut page);
        let s = page.finish();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "tcp-start [cgroup_skb/ingress]:");
        assert!(lines[1].starts_with("(32.8us, 65.5us]"), "{}", lines[1]);
        assert!(
            lines[1].contains(&format!("|{}|", "@".repeat(48))),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].contains(&format!("|{}{}|", "@".repeat(12), " ".repeat(36))),
            "{}",
            lines[2]
        );
        assert!(
            lines[3].starts_with("count: 125, average: 52"),
            "{}",
            lines[3]
        );
        assert_eq!(lines.len(), 4);
    }

    #[test]
    fn a_histogram_at_the_timestamp_reads_at_most_1ns_not_half_a_ns() {
        let mut hist = Log2Histogram::new();
        for _ in 0..50 {
            hist.record(0);
        }
        let h = ProbeHistogram::new(
            Probe::IpStart,
            "tp_btf/netif_receive_skb",
            "all".into(),
            hist,
        );
        let mut page = Page::new(400);
        render_histogram(&h, &mut page);
        let s = page.finish();
        assert!(!s.contains("0.5"), "{s}");
        assert!(
            s.contains("count: 50, average: ≤ 1ns, p50: ≤ 1ns, p99: ≤ 1ns"),
            "{s}"
        );
        assert!(
            s.contains("where the packets' receive timestamp is taken"),
            "{s}"
        );
    }

    fn status(refused: Vec<crate::model::stack::HookAttempt>) -> ProbeStatus {
        ProbeStatus {
            probe: Probe::TcpStart,
            hook: None,
            hook_kind: None,
            semantics: None,
            refused,
            also_available: Vec::new(),
        }
    }

    #[test]
    fn a_probe_missing_cgroup2_says_so_and_how_to_fix_it() {
        use crate::model::stack::HookAttempt;
        let st = status(vec![
            HookAttempt {
                hook: "fentry/tcp_v4_rcv".into(),
                error: "fentry refused".into(),
                missing: None,
            },
            HookAttempt {
                hook: "cgroup_skb/ingress".into(),
                error: "no cgroup v2 hierarchy is mounted".into(),
                missing: Some(Prerequisite::Cgroup2Mount),
            },
        ]);
        let note = unavailable_note(&st);
        assert!(!note.contains("on this kernel"), "{note}");
        assert!(
            note.contains("no cgroup v2 hierarchy is mounted (ip netns exec remounts /sys)"),
            "{note}"
        );
        assert!(note.contains("run outside the netns"), "{note}");
        // Refused by the kernel only: the kernel's doing.
        let st = status(vec![HookAttempt {
            hook: "fentry/tcp_v4_rcv".into(),
            error: "fentry refused".into(),
            missing: None,
        }]);
        assert!(unavailable_note(&st).contains("unavailable on this kernel"));
    }
}
