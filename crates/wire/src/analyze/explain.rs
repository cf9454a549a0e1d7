//! The plain-language reasoning behind each stall kind, shown with its finding. The text is the
//! stall kind's own, in the result model's registry
//! (`latscope_core::model::analyze::StallKind::explanation`).

use latscope_core::model::analyze::StallKind;

/// The plain-language reasoning behind each detector.
pub fn explain(k: StallKind) -> String {
    k.explanation().into()
}
