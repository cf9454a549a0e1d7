//! `latscope stack`: the log2 histograms per hook side by side (netstacklat's view) and their
//! figures.

use latscope_core::units::{format_ns, format_si};
use latscope_ebpf::report::StackReport;

use super::interrupted;
use crate::error::ReportError;
use crate::html::{facts, figure, para, table};
use crate::plot::hist::{from_log2, histograms};

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
    let panels: Vec<(String, Vec<_>)> = r
        .histograms
        .iter()
        .filter(|h| h.count > 0)
        .map(|h| {
            let group = if h.group == "all" {
                String::new()
            } else {
                format!(" · {}", h.group)
            };
            (format!("{}{group}", h.probe.name()), from_log2(&h.hist))
        })
        .collect();
    if panels.is_empty() {
        out += &para("note", "No packet reached the probes during the run.");
    } else {
        out += &figure(
            "stack-histograms",
            &histograms(&panels)?,
            "Time from the packet's arrival to each hook, one log2 histogram per hook on the same \
             time axis: the stack is healthy when each hook's mass sits just right of the one \
             before; a hump far to the right (socket read) is the application not reading.",
        );
    }
    if panels.is_empty() {
        // Nothing to tabulate either: every figure would be 0 or a mean of nothing.
        return Ok(out);
    }
    let rows: Vec<Vec<String>> = r
        .histograms
        .iter()
        .map(|h| {
            vec![
                h.probe.name().to_string(),
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
