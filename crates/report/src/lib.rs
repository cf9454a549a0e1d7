#![warn(missing_docs)]
//! latscope's HTML reports: the `--json` output of a command, read back into the result model of
//! `latscope-core`, rendered as **one self-contained page** — inline CSS and inline SVG plots
//! drawn with `plotters`, no script, no font, nothing fetched at view time — so it opens from a
//! mail attachment or a ticket on any device, and prints.
//!
//! Each supported command is one module under `kind/` that turns its report into sections;
//! `plot/` holds the shared chart types (percentile spectrum, histogram, time series, size
//! sweep, bars) and `compare` overlays several results of the same kind.

mod compare;
mod document;
mod error;
mod html;
mod kind;
mod page;
mod plot;

pub use compare::check as check_comparable;
pub use document::{Document, Input, Kind};
pub use error::ReportError;

/// Render one page from one or more inputs, in the order given. Two or more inputs of the same
/// kind that carry a comparable distribution also get a comparison section (overlaid spectra
/// and a ratio table).
pub fn render(inputs: &[Input]) -> Result<String, ReportError> {
    if inputs.is_empty() {
        return Err(ReportError::NoInput);
    }
    let mut sections = Vec::new();
    for group in compare::groups(inputs) {
        if group.len() >= 2
            && let Some(s) = compare::section(&group)?
        {
            sections.push(s);
        }
    }
    for (i, input) in inputs.iter().enumerate() {
        sections.push(kind::section(i, input)?);
    }
    Ok(html::page(inputs, &sections))
}
