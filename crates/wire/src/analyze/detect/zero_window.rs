//! Zero-window stall: from a side's first zero-window advertisement to its next non-zero
//! window; the receiving application did not read fast enough.

use latscope_core::model::analyze::StallKind;

use crate::packet::flags;

use super::super::detector::{Detector, Sink};
use super::super::flow::Conn;
use super::super::segment::Segment;

/// Times each zero-window episode.
pub(in super::super) struct ZeroWindow;

impl Detector for ZeroWindow {
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
        if s.flags & (flags::SYN | flags::FIN | flags::RST) != 0 {
            return;
        }
        let dir = &mut c.dirs[s.d];
        if s.raw_win == 0 {
            dir.zero_since.get_or_insert((s.ts, s.frame));
        } else if let Some((t0, f0)) = dir.zero_since.take() {
            let lost = s.ts.saturating_sub(t0);
            out.stall(c, StallKind::ZeroWindow, s.frame, f0, lost);
        }
    }
}
