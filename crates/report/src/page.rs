//! What a result kind's page is: the [`Page`] each kind's model type implements in its file under
//! `kind/`. Below the registry of pages (`document.rs`) and the kinds themselves.

use latscope_core::Summary;

use crate::error::ReportError;

/// A result kind's page: what its section shows, and what stands for it in a comparison.
/// Implemented by the kind's model type in its file under `kind/` and registered in `document.rs`'s
/// `pages!` table.
pub(crate) trait Page {
    /// The section's body.
    fn body(&self) -> Result<String, ReportError>;

    /// The distribution that stands for the whole result when comparing: what its command is
    /// about (none: the result cannot be compared).
    fn headline(&self) -> Option<(&'static str, Summary)> {
        None
    }

    /// Why a result has no headline to compare, for `--compare`'s error.
    fn not_comparable(&self) -> &'static str {
        "no successful operation"
    }
}
