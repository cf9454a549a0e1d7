//! One module per command: its report turned into the body of a page section. The helpers here
//! are what several kinds share (the header line, a latency block, a summary table).

mod analyze;
mod connect;
mod diagnose;
mod http;
mod ping;
mod round_trips;
mod rr;
mod stack;
mod stream;
mod trace;

use latscope_core::model::Meta;
use latscope_core::units::format_si;
use latscope_core::{LogBins, Summary};

use crate::document::Input;
use crate::error::ReportError;
use crate::html::{Section, figure, para, table};
use crate::plot::hist::{Bin, from_bins, histograms};
use crate::plot::spectrum::{Curve, spectrum};

/// The section of input `i`.
pub(crate) fn section(i: usize, input: &Input) -> Result<Section, ReportError> {
    let body = input.doc.page().body()?;
    Ok(Section {
        id: format!("result-{}", i + 1),
        title: format!("{} — {}", input.doc.kind().command(), input.name),
        body: format!("{}{body}", header(input.doc.meta())),
    })
}

/// Who made the result and when; a warning when the run was cut short.
fn header(meta: &Meta) -> String {
    para(
        "meta",
        &format!(
            "latscope {} · {} · started {} · schema version {}",
            meta.version,
            meta.command,
            latscope_core::units::utc_time(meta.started_unix_ms),
            meta.schema_version
        ),
    )
}

/// A warning line for results cut short by Ctrl-C.
fn interrupted(yes: bool) -> String {
    if yes {
        para(
            "warn",
            "Interrupted (Ctrl-C): the figures cover only what was measured.",
        )
    } else {
        String::new()
    }
}

/// Rows of labelled summaries as a percentile table.
pub(crate) fn summary_table(rows: &[(String, &Summary)]) -> String {
    let mut head = vec!["", "count"];
    head.extend(Summary::HEADERS);
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|(label, s)| {
            let mut r = vec![label.clone(), format_si(s.count as f64)];
            r.extend(s.cells());
            r
        })
        .collect();
    table("percentiles", &head, &rows)
}

/// What to look at in a percentile spectrum.
pub(crate) const SPECTRUM_CAPTION: &str = "Latency by percentile, the tail stretched to the right: a flat line is \
steady latency; a step shows a second population (a timer, a retransmission, a queue) and the \
x axis tells what share of requests it hits. Points stop where the sample has no more data.";

/// The spectrum and table of one or more distributions (empty ones left out).
pub(crate) fn latency_block(rows: &[(String, &Summary)]) -> Result<String, ReportError> {
    let rows: Vec<(String, &Summary)> = rows
        .iter()
        .filter(|(_, s)| s.count > 0)
        .map(|(l, s)| (l.clone(), *s))
        .collect();
    if rows.is_empty() {
        return Ok(para(
            "note",
            "No latency was measured (no successful operation).",
        ));
    }
    let curves: Vec<Curve<'_>> = rows
        .iter()
        .map(|(l, s)| Curve {
            label: l.clone(),
            summary: s,
        })
        .collect();
    Ok(format!(
        "{}{}",
        figure("spectrum", &spectrum(&curves)?, SPECTRUM_CAPTION),
        summary_table(&rows)
    ))
}

/// What to look at in a latency histogram.
pub(crate) const HISTOGRAM_CAPTION: &str = "How many operations took how long (10 log bins per \
decade, one panel per distribution on a shared time axis): one narrow peak is a quiet path; a \
second peak is a second population (a timer, a retransmission, a queue) and its distance from \
the first is what it costs.";

/// The histograms of one or more distributions side by side (empty ones left out; nothing when
/// the result carries no bins, as results of older versions do not).
pub(crate) fn histogram_block(rows: &[(String, Option<&LogBins>)]) -> Result<String, ReportError> {
    let panels: Vec<(String, Vec<Bin>)> = rows
        .iter()
        .filter_map(|(l, b)| {
            b.filter(|b| b.total() > 0)
                .map(|b| (l.clone(), from_bins(b)))
        })
        .collect();
    if panels.is_empty() {
        return Ok(String::new());
    }
    Ok(figure(
        "histogram",
        &histograms(&panels)?,
        HISTOGRAM_CAPTION,
    ))
}

/// Error messages as a list, when there are any.
pub(crate) fn error_list(title: &str, errors: &[String]) -> String {
    if errors.is_empty() {
        return String::new();
    }
    let mut out = format!("<h3>{}</h3><ul class=\"errors\">", crate::html::esc(title));
    for e in errors {
        out.push_str(&format!("<li><code>{}</code></li>", crate::html::esc(e)));
    }
    out.push_str("</ul>\n");
    out
}
