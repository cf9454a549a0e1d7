//! `latscope stack`: the log2 histograms per hook side by side (netstacklat's view), one figure
//! per direction, where a packet's way out spends its time, and their figures.

use latscope_core::model::stack::{Direction, ProbeHistogram, StackReport, tx_stage_shares};
use latscope_core::units::{format_ns, format_si};

use super::interrupted;
use crate::error::ReportError;
use crate::html::{facts, figure, para, table};
use crate::plot::bars::{Bar, stacked};
use crate::plot::hist::{from_log2, histograms};

/// What each direction's figure shows, and how to read it.
fn caption(d: Direction) -> &'static str {
    match d {
        Direction::Rx => {
            "Receive: time from the packet's arrival to each hook, one log2 histogram per hook on \
             the same time axis. The stack is healthy when each hook's mass sits just right of \
             the one before; a hump far to the right (socket read) is the application not reading."
        }
        Direction::Tx => {
            "Transmit: time a packet spends in each stage of its way out, one log2 histogram per \
             stage on the same time axis. The stages of one packet add up from the write to the \
             completion; a stage far to the right is where the host holds its packets."
        }
    }
}

/// One direction's histograms with packets, as panels.
fn panels(r: &StackReport, d: Direction) -> Vec<(String, Vec<crate::plot::hist::Bin>)> {
    r.histograms
        .iter()
        .filter(|h| h.count > 0 && h.probe.direction() == d)
        .map(|h| {
            let group = if h.group == "all" {
                String::new()
            } else {
                format!(" · {}", h.group)
            };
            (format!("{}{group}", h.probe.name()), from_log2(&h.hist))
        })
        .collect()
}

/// The transmit stages' means as one bar, when more than one stage had packets.
fn way_out(hists: &[ProbeHistogram]) -> Result<Option<String>, ReportError> {
    let shares = tx_stage_shares(hists);
    if shares.len() < 2 {
        return Ok(None);
    }
    let bar = Bar {
        label: "a packet's way out (mean per stage)".into(),
        parts: shares
            .iter()
            .map(|s| (s.probe.name().to_string(), s.mean_ns))
            .collect(),
    };
    let svg = stacked(&[bar], "mean time per packet (time)")?;
    let parts: Vec<String> = shares
        .iter()
        .map(|s| format!("{} {:.0}%", s.probe.name(), s.share * 100.0))
        .collect();
    Ok(Some(figure(
        "stack-way-out",
        &svg,
        &format!(
            "Where a packet's way out goes: each stage's mean, end to end ({}).",
            parts.join(", ")
        ),
    )))
}

pub(crate) fn body(r: &StackReport) -> Result<String, ReportError> {
    let attached = r.probes.iter().filter(|p| p.hook.is_some()).count();
    let mut out = interrupted(r.interrupted);
    out += &facts(&[
        (
            "probes attached",
            format!("{attached} of {}", r.probes.len()),
        ),
        ("grouped by", format!("{:?}", r.group_by).to_lowercase()),
        ("duration", format_ns(r.duration_ns as f64)),
        ("sampling", format!("1 packet in {}", r.sample_every.max(1))),
    ]);
    let mut drawn = false;
    for (d, id) in [
        (Direction::Rx, "stack-histograms"),
        (Direction::Tx, "stack-tx-histograms"),
    ] {
        let p = panels(r, d);
        if !p.is_empty() {
            out += &figure(id, &histograms(&p)?, caption(d));
            drawn = true;
        }
    }
    if !drawn {
        // Nothing to tabulate either: every figure would be 0 or a mean of nothing.
        out += &para("note", "No packet reached the probes during the run.");
        return Ok(out);
    }
    if let Some(f) = way_out(&r.histograms)? {
        out += &f;
    }
    let rows: Vec<Vec<String>> = r
        .histograms
        .iter()
        .map(|h| {
            vec![
                h.probe.name().to_string(),
                h.probe.direction().name().to_string(),
                h.hook.clone(),
                h.group.clone(),
                format_si(h.count as f64),
                format_ns(h.mean_ns),
                format_ns(h.p50_ns),
                format_ns(h.p99_ns),
            ]
        })
        .collect();
    out += &table(
        "hooks",
        &[
            "probe",
            "direction",
            "hook",
            "group",
            "count",
            "mean",
            "p50 (est.)",
            "p99 (est.)",
        ],
        &rows,
    );
    Ok(out)
}

impl crate::page::Page for StackReport {
    fn body(&self) -> Result<String, ReportError> {
        body(self)
    }

    fn not_comparable(&self) -> &'static str {
        "stack results are per-hook histograms"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use latscope_core::Log2Histogram;
    use latscope_core::model::stack::Probe;

    /// The committed receive-only example, with transmit stages added: `ns` per packet each.
    fn both(stages: &[(Probe, u64)]) -> StackReport {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/data/report/stack.json"
        );
        let mut r: StackReport =
            serde_json::from_str(&std::fs::read_to_string(path).expect("example")).expect("parse");
        for &(probe, ns) in stages {
            let mut h = Log2Histogram::new();
            for k in 0..100 {
                h.record(ns + k);
            }
            r.histograms.push(ProbeHistogram::new(
                probe,
                "tp_btf/net_dev_queue",
                "all".into(),
                h,
            ));
        }
        r
    }

    #[test]
    fn each_direction_has_its_figure_and_the_way_out_its_bar() {
        let r = both(&[
            (Probe::LocalOut, 139_000),
            (Probe::PostRouting, 1_000),
            (Probe::Qdisc, 500),
        ]);
        let html = body(&r).expect("renders");
        for id in ["stack-histograms", "stack-tx-histograms", "stack-way-out"] {
            assert!(html.contains(id), "no {id}");
        }
        // local-out holds nearly all of the way out: its share is named.
        assert!(html.contains("local-out 99%"), "{html}");
        assert!(html.contains("Transmit: time a packet spends"));
    }

    #[test]
    fn receive_only_has_no_transmit_figure_and_one_stage_no_bar() {
        let html = body(&both(&[])).expect("renders");
        assert!(html.contains("stack-histograms") && !html.contains("stack-tx-histograms"));
        let html = body(&both(&[(Probe::Qdisc, 500)])).expect("renders");
        assert!(html.contains("stack-tx-histograms") && !html.contains("stack-way-out"));
    }
}
