//! Release by a delayed ACK: a data segment D1, then a *pure* ACK from the peer acknowledging
//! exactly up to D1's end, late by at least the shortest delayed-ACK timer beyond the round
//! trip, then the sender's next segment D2 within one capture-point→sender round trip of that
//! ACK (the ACK released it), with no peer data in between.
//!
//! * Both D1 and D2 smaller than the sender's MSS: **Nagle × delayed ACK** (RFC 896; Linux's
//!   Minshall variant in `tcp_nagle_check()` holds a sub-MSS segment while an earlier sub-MSS
//!   segment is unacknowledged; the receiver delays its ACK, RFC 1122 §4.2.3.2).
//! * Otherwise **delayed ACK without Nagle**: Nagle does not hold full segments, so the sender
//!   was limited by its congestion or receive window and an odd segment count left the
//!   receiver waiting for a second one.
//!
//! * A full segment held although the sender had already had more in flight at once on this
//!   connection and the receiver's window had room: **loss the capture did not see** — the
//!   sender's own stack failed to send it (a netfilter or policer drop on its way out, which
//!   TCP retries on the next ACK) or it was lost before the capture point.
//!
//! Evidence needed: both directions captured and no segment missing since D1; the release no
//! sooner than three quarters of a round trip to the sender after the ACK (when the handshake gave it), and
//! D2's TCP timestamp echo (when present) not older than the ACK's TSval — else D2 left before
//! the ACK reached its sender and the ACK released nothing.

use crate::report::StallKind;

use super::super::flow::{Conn, DataSeg};
use super::super::ladder::fmt_ms;
use super::super::seq::lt;
use super::{Detector, Segment, Sink, delayed_ack_ceiling_ns, delayed_ack_floor_ns};

/// Reports segments released by a delayed ACK (Nagle × delayed ACK, or delayed ACK alone).
pub(in super::super) struct DelayedAckRelease;

/// The delayed ACK that released new data segment `s` after the sender's previous data `d1`:
/// (how late the ACK was, its frame), if one did.
pub(super) fn release(s: &Segment<'_>, c: &Conn, d1: &DataSeg) -> Option<(u64, u64)> {
    let p = &c.dirs[1 - s.d];
    // The ACK must reach the sender and D2 come back: at the capture point that takes a
    // round trip to the sender (a quarter of it is allowed for jitter: msnms.pcap's 48
    // bytes 68 ms after an ACK across a 99 ms round trip had left before it). A segment seen at once
    // after the ACK across a long path left before the ACK arrived (a window-limited
    // sender), it was not released by it.
    let min_release = c.quickest_rtt_to_sender(s.d).map_or(0, |r| r - r / 4);
    // D2's timestamp echo names the newest peer segment its sender had seen: one older than
    // the ACK's own TSval means D2 left before that ACK arrived (RFC 7323 §4.3).
    let echo_predates =
        matches!((s.tsecr, p.last_pkt_tsval), (Some(ecr), Some(val)) if lt(ecr, val));
    let released = !echo_predates
        && c.both_directions()
        && c.unbroken_since(d1.ts)
        && p.last_pkt_pure_ack
        // The ACK that first acknowledged D1's end, not a window update or a duplicate
        // repeating an ACK sent at once (`ek_to_cryptowall4.pcapng`: D1 ACKed after 0.9 ms,
        // a window update 25 ms later, the next data 611 ms after that).
        && p.ack_advanced_ts == p.last_pkt_ts
        && p.last_pkt_ts >= d1.ts
        && p.last_data_ts <= d1.ts
        && p.last_pkt_ack == d1.end
        && (min_release..=c.release_window(s.d)).contains(&s.ts.saturating_sub(p.last_pkt_ts));
    if !released {
        return None;
    }
    let ack_delay = p
        .last_pkt_ts
        .saturating_sub(d1.ts)
        .saturating_sub(c.rtt_to_receiver(s.d).unwrap_or(0));
    // A receiver ACKs at least every second full segment (RFC 5681 §4.2): with two or more
    // unacknowledged when D1 left, its silence is not the delayed-ACK timer (a printer that
    // ACKs four segments 28–70 ms late in a public capture was slow, not delaying).
    let timer = (delayed_ack_floor_ns()..=delayed_ack_ceiling_ns()).contains(&ack_delay)
        && d1.in_flight < 2 * c.sender_mss(s.d);
    timer.then_some((ack_delay, p.last_pkt_frame))
}

/// Whether the sender of `s`, released by a delayed ACK after `d1`, was held back by neither
/// window: it had already had at least two more full segments in flight at once on this
/// connection than when it stopped (its congestion window allowed them — after an idle spell
/// Linux restarts from the initial window, never below it, `tcp_cwnd_restart()`), and the
/// receiver's window had room for what followed. Nagle holds no full segment and an
/// application writes on its own clock, not on the ACK's: what it was waiting for was a send
/// that failed or a segment lost before the capture point. A sender never seen with more in
/// flight (a congestion window locked low, a first response) tells nothing.
fn window_was_open(s: &Segment<'_>, c: &Conn, d1: &DataSeg) -> bool {
    let smss = c.sender_mss(s.d);
    let had = d1.max_in_flight_before.max(d1.in_flight);
    // Without the handshake the window's scale is unknown and its field a fraction of it: the
    // receiver having taken `had` at once before stands for its room.
    let peer = &c.dirs[1 - s.d];
    let room = if peer.win_scale == -1 {
        u64::MAX
    } else {
        u64::from(peer.window)
    };
    u64::from(had) >= u64::from(d1.in_flight) + 2 * u64::from(smss)
        && room >= u64::from(d1.in_flight) + u64::from(s.len.min(smss))
}

impl Detector for DelayedAckRelease {
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
        let Some(d1) = s.held else {
            return;
        };
        // A sender on its own clock sent when its application did, not when an ACK came.
        if c.dirs[s.d].cadence.app_clock() {
            return;
        }
        let Some((ack_delay, ack_frame)) = release(s, c, &d1) else {
            return;
        };
        let smss = c.sender_mss(s.d);
        // Linux's Nagle (Minshall's variant) holds a small segment only while an earlier
        // small one is unacknowledged; the classic rule (RFC 896, Windows and the BSDs) holds
        // it while any data is, so a response's short tail after full segments waits for the
        // ACK too (`evilprogram.pcap`'s 869-byte tail from a server whose SYN-ACK carried a
        // lone MSS). Only a SYN laid out as Linux's shows the Minshall variant.
        let classic = c.dirs[s.d].linux_syn != Some(true);
        let kind = if s.len < smss && (d1.len < smss || classic) {
            StallKind::NagleDelayedAck
        } else if window_was_open(s, c, &d1) {
            StallKind::UnseenLoss
        } else {
            StallKind::DelayedAck
        };
        let gap = s.ts.saturating_sub(d1.ts);
        out.notes.push(|| {
            format!(
                "<< STALL {}: held since #{} ({}), released by delayed ACK #{} ({} late)",
                kind.label(),
                d1.frame,
                fmt_ms(gap),
                ack_frame,
                fmt_ms(ack_delay)
            )
        });
        out.note_on(ack_frame, || {
            format!("delayed ACK ({} after #{})", fmt_ms(ack_delay), d1.frame)
        });
        out.stall(c, kind, s.frame, d1.frame, gap);
    }
}
