//! RTO retransmission: Wireshark's plain "retransmission" (not fast, not spurious) means a
//! timer fired (RTO or tail-loss probe). Time lost is the gap since the original transmission
//! (or since the previous retransmission, when that came later).

use latscope_core::timer::TcpTimer;

use crate::report::StallKind;

use super::super::flow::Conn;
use super::super::ladder::fmt_ms;
use super::{Detector, Segment, Sink};

/// Reports every timer retransmission the sequence analysis found.
pub(in super::super) struct Rto;

impl Detector for Rto {
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
        let Some((t0, f0)) = s.rto_since else {
            return;
        };
        // A frame captured twice was sent once: no timer fired.
        if s.duplicate {
            return;
        }
        // Each stretch of waiting is counted once: a second retransmission of the same bytes
        // adds only the time since the first one, so the sum never exceeds the connection's
        // duration.
        let dir = &mut c.dirs[s.d];
        let from = t0.max(dir.rto_charged_until);
        dir.rto_charged_until = dir.rto_charged_until.max(s.ts);
        let lost = s.ts.saturating_sub(from);
        out.notes.push(|| {
            let timer =
                TcpTimer::classify(lost).map_or(String::new(), |t| format!(", {}", t.label()));
            format!(
                "retransmission (timer, {} after #{f0}{timer})",
                fmt_ms(lost)
            )
        });
        out.stall(c, StallKind::RtoRetransmission, s.frame, f0, lost);
    }
}
