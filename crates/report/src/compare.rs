//! Several results of one kind side by side: their spectra overlaid and a ratio table in
//! hyperfine's style (each figure divided by the best input's).

use latscope_core::Summary;
use latscope_core::units::format_ns;

use crate::document::{Input, Kind};
use crate::error::ReportError;
use crate::html::{Section, figure, para, table};
use crate::plot::spectrum::{Curve, spectrum};

/// Inputs grouped by kind, in order of first appearance.
pub(crate) fn groups(inputs: &[Input]) -> Vec<Vec<&Input>> {
    let mut out: Vec<(Kind, Vec<&Input>)> = Vec::new();
    for i in inputs {
        match out.iter_mut().find(|(k, _)| *k == i.doc.kind()) {
            Some((_, g)) => g.push(i),
            None => out.push((i.doc.kind(), vec![i])),
        }
    }
    out.into_iter().map(|(_, g)| g).collect()
}

/// `--compare`: the inputs must be two or more results of one command, each with the
/// distribution a comparison overlays.
pub fn check(inputs: &[Input]) -> Result<(), ReportError> {
    let Some(first) = inputs.first() else {
        return Err(ReportError::NoInput);
    };
    if let Some(other) = inputs.iter().find(|i| i.doc.kind() != first.doc.kind()) {
        return Err(ReportError::MixedKinds {
            first: first.name.clone(),
            first_kind: first.doc.kind().command(),
            other: other.name.clone(),
            other_kind: other.doc.kind().command(),
        });
    }
    if inputs.len() < 2 {
        return Err(ReportError::NotComparable(
            "--compare needs two or more results".into(),
        ));
    }
    for i in inputs {
        if i.doc.page().headline().is_none_or(|(_, s)| s.count == 0) {
            return Err(ReportError::NotComparable(format!(
                "'{}' has no single latency distribution to overlay ({})",
                i.name,
                i.doc.page().not_comparable()
            )));
        }
    }
    Ok(())
}

/// Reads one figure from a summary.
type Figure = fn(&Summary) -> f64;

/// Figures compared, and how to read each from a summary.
const COLUMNS: [(&str, Figure); 5] = [
    ("p50", |s| s.p50_ns as f64),
    ("p90", |s| s.p90_ns as f64),
    ("p99", |s| s.p99_ns as f64),
    ("p99.9", |s| s.p999_ns as f64),
    ("max", |s| s.max_ns as f64),
];

/// The comparison section of one group (two or more inputs of one kind); None when fewer than
/// two of them carry the distribution a comparison overlays (a stream without its latency
/// probe, a size sweep): a box saying there is nothing to compare would open the page empty
/// (issue 41: "Comparison of 2 stream results" above a stream and a UDP stream).
pub(crate) fn section(group: &[&Input]) -> Result<Option<Section>, ReportError> {
    let kind = group.first().map_or("?", |i| i.doc.kind().command());
    let found: Vec<(&Input, &'static str, Summary)> = group
        .iter()
        .filter_map(|i| i.doc.page().headline().map(|(what, s)| (*i, what, s)))
        .filter(|(_, _, s)| s.count > 0)
        .collect();
    if found.len() < 2 {
        return Ok(None);
    }
    let curves: Vec<Curve<'_>> = found
        .iter()
        .map(|(i, _, s)| Curve {
            label: i.name.clone(),
            summary: s,
        })
        .collect();
    let what = found[0].1;
    let mut body = figure(
        "compare-spectrum",
        &spectrum(&curves)?,
        &format!(
            "{what}, one curve per result: where the curves part tells whether a change moved the typical request (left) or only the tail (right)."
        ),
    );
    body += &ratio_table(&found);
    Ok(Some(Section {
        id: format!("compare-{kind}"),
        title: format!("Comparison of {} {kind} results", found.len()),
        body,
    }))
}

/// hyperfine's "relative" view: each figure and its ratio to the input with the lowest p50.
fn ratio_table(found: &[(&Input, &'static str, Summary)]) -> String {
    let best = found
        .iter()
        .min_by(|a, b| a.2.p50_ns.cmp(&b.2.p50_ns))
        .map(|f| &f.2)
        .unwrap_or(&found[0].2);
    let mut head = vec!["result"];
    head.extend(COLUMNS.iter().map(|c| c.0));
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|(i, _, s)| {
            let mut row = vec![i.name.clone()];
            for (_, get) in COLUMNS {
                let base = get(best).max(1.0);
                row.push(format!("{} ({:.2}×)", format_ns(get(s)), get(s) / base));
            }
            row
        })
        .collect();
    let mut out = table("ratios", &head, &rows);
    out += &para(
        "note",
        "Each figure with its ratio to the result with the lowest p50 (1.00× = as fast as the best).",
    );
    out
}
