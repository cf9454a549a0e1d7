//! The `--conn N` ladder: one row per frame of the traced connection, with the analysis and
//! stall notes the other parts attach while the segment is processed.

use latscope_core::model::analyze::LadderRow;

use crate::packet::flags;

/// Notes about the segment being processed; built only when its connection is traced, so the
/// untraced per-packet path formats nothing.
#[derive(Default)]
pub(super) struct Notes {
    /// The current segment belongs to the traced connection.
    pub on: bool,
    pub v: Vec<String>,
}

impl Notes {
    /// Add a note (formatted only when tracing).
    #[inline]
    pub(super) fn push(&mut self, f: impl FnOnce() -> String) {
        if self.on {
            self.v.push(f());
        }
    }

    /// Add several notes (built only when tracing).
    #[inline]
    pub(super) fn extend(&mut self, f: impl FnOnce() -> Vec<String>) {
        if self.on {
            self.v.extend(f());
        }
    }
}

/// The traced connection's rows.
#[derive(Default)]
pub(super) struct Trace {
    pub rows: Vec<LadderRow>,
    /// The traced connection's first frame time.
    pub base_ts: u64,
}

impl Trace {
    /// Attach a note to an earlier row (e.g. mark the delayed ACK that released a segment).
    pub(super) fn note_on(&mut self, frame: u64, note: String) {
        if let Some(row) = self.rows.iter_mut().rev().find(|r| r.frame == frame) {
            row.notes.push(note);
        }
    }
}

/// "SYN,ACK"-style flag list.
pub(super) fn flag_string(f: u8) -> String {
    let mut v = Vec::new();
    for (bit, name) in [
        (flags::SYN, "SYN"),
        (flags::FIN, "FIN"),
        (flags::RST, "RST"),
        (flags::PSH, "PSH"),
        (flags::ACK, "ACK"),
        (flags::URG, "URG"),
    ] {
        if f & bit != 0 {
            v.push(name);
        }
    }
    v.join(",")
}

/// Milliseconds with one decimal, for notes.
pub(super) fn fmt_ms(ns: u64) -> String {
    format!("{:.1}ms", ns as f64 / 1e6)
}
