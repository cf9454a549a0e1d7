//! cwnd-limited sender on a long path: the sender had at least two full segments
//! unacknowledged, stopped, and its next new data left about one path round trip later, only
//! after the peer's ACKs for that window came back (ACK clocking, RFC 5681 §3; Linux stops in
//! `tcp_write_xmit()` when `tcp_cwnd_test()` says the window is full). The same picture at the
//! capture point with the segment seen in the same microsecond as an ACK across a 900 ms path
//! used to be read as Nagle × delayed ACK; the segment had left a round trip earlier, released
//! by an earlier ACK.
//!
//! Not reported: a receive window that was the limit (the peer's window would not take
//! another segment: the receiver's doing), a release by a delayed ACK (that detector's), a new
//! response (the application's pace), a sender on its own clock, and paths shorter than
//! [`LONG_PATH_NS`], where a round trip per window costs little.

use latscope_core::model::analyze::StallKind;

use super::super::detector::{Detector, Sink};
use super::super::evidence::release_by_delayed_ack;
use super::super::flow::Conn;
use super::super::ladder::fmt_ms;
use super::super::segment::Segment;
use super::super::seqnum::gt;

/// Paths with a handshake round trip at least this long.
const LONG_PATH_NS: u64 = 20_000_000;

/// Reports windows that waited a round trip for their ACKs.
pub(in super::super) struct CwndLimited;

impl Detector for CwndLimited {
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
        let Some(d1) = s.held else {
            return;
        };
        let Some(rtt) = c.first_rtt.filter(|&r| r >= LONG_PATH_NS) else {
            return;
        };
        let gap = s.ts.saturating_sub(d1.ts);
        let p = &c.dirs[1 - s.d];
        let smss = c.sender_mss(s.d);
        let window_wait = s.first_response.is_none()
            && c.unbroken_since(d1.ts)
            && !c.dirs[s.d].cadence.app_clock()
            // About one round trip of silence: from half of it — the ACK that releases the
            // next window is the one for the first segment of the last, sent before the
            // window's tail, and the handshake's round trip is not the data's to the
            // millisecond (`cryptowall4_c2.pcapng`: a 372 ms handshake, windows 201–207 ms
            // after the client's ACKs; `ek_to_cryptowall4`: 690 ms, windows 498 ms after
            // them; judged right) — to a quarter more (longer, the application or a timer
            // took the time).
            && (rtt / 2..=rtt.saturating_add(rtt / 4)).contains(&gap)
            // A full window: two segments or more in flight when the sender stopped, and the
            // receiver's window had room for more.
            && u64::from(d1.in_flight) >= 2 * u64::from(smss)
            && u64::from(d1.in_flight) + u64::from(smss) <= u64::from(p.window)
            // The ACKs for it came back (acknowledging new data), with no peer data between.
            && gt(p.lastack, d1.end.wrapping_sub(d1.in_flight))
            && p.last_data_ts <= d1.ts
            && release_by_delayed_ack(s, c, &d1).is_none();
        if !window_wait {
            return;
        }
        out.notes.push(|| {
            format!(
                "<< STALL cwnd-limited: {} in flight at #{}, next window {} later (RTT {})",
                d1.in_flight,
                d1.frame,
                fmt_ms(gap),
                fmt_ms(rtt)
            )
        });
        out.stall(c, StallKind::CwndLimited, s.frame, d1.frame, gap);
    }
}
