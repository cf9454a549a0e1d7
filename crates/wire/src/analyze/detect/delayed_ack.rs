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
//!   TCP retries on the next ACK) or it was lost before the capture point. That is claimed
//!   only when the sender's IPv4 identification counts its packets on this connection and
//!   skipped numbers just before D2 (it sent packets the capture never saw), and the receiver
//!   never echoed a timestamp of them (which would show they arrived and only the capture
//!   missed them). Consecutive numbers refute it (nothing was sent unseen: a tunnel endpoint
//!   sending one chunk per ACK, `tunnelbear.pcap`): a window-limited sender and a delayed
//!   ACK. A sender whose identification counts nothing (zero, random, IPv6) leaves it
//!   undecided.
//!
//! Evidence needed: both directions captured and no segment missing since D1; the release no
//! sooner than three quarters of a round trip to the sender after the ACK (when the handshake gave it), and
//! D2's TCP timestamp echo (when present) not older than the ACK's TSval — else D2 left before
//! the ACK reached its sender and the ACK released nothing.

use latscope_core::model::analyze::{StallKind, Undecided};

use super::super::detector::{Detector, Sink};
use super::super::evidence::release_by_delayed_ack;
use super::super::flow::{Conn, DataSeg};
use super::super::ipid::IdEvidence;
use super::super::ladder::fmt_ms;
use super::super::segment::Segment;

/// Reports segments released by a delayed ACK (Nagle × delayed ACK, or delayed ACK alone).
pub(in super::super) struct DelayedAckRelease;

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

/// Whether the sender of `s`, held since `d1` with its windows open, sent packets the
/// capture never saw just before `s` (its IPv4 identification skipped numbers), which the
/// receiver did not show it received. `Err`: the capture cannot tell.
fn unseen_sends(s: &Segment<'_>, c: &Conn, d1: &DataSeg) -> Result<bool, Undecided> {
    match s.id_evidence {
        IdEvidence::Continuous => Ok(false),
        IdEvidence::Uncounted => Err(Undecided::SenderUncounted),
        // The receiver echoed a timestamp of the sender's the capture never saw: what the
        // capture missed reached it.
        IdEvidence::Unseen(_) if c.dirs[s.d].unseen_pkts_ts.is_some_and(|t| t >= d1.ts) => {
            Err(Undecided::CaptureMissedPackets)
        }
        IdEvidence::Unseen(_) => Ok(true),
    }
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
        let Some((ack_delay, ack_frame)) = release_by_delayed_ack(s, c, &d1) else {
            return;
        };
        let smss = c.sender_mss(s.d);
        // Linux's Nagle (Minshall's variant) holds a small segment only while an earlier
        // small one is unacknowledged; the classic rule (RFC 896, Windows and the BSDs) holds
        // it while any data is, so a response's short tail after full segments waits for the
        // ACK too (`evilprogram.pcap`'s 869-byte tail from a server whose SYN-ACK carried a
        // lone MSS). Only a SYN laid out as Linux's shows the Minshall variant.
        let classic = c.dirs[s.d].linux_syn != Some(true);
        let gap = s.ts.saturating_sub(d1.ts);
        let kind = if s.len < smss && (d1.len < smss || classic) {
            StallKind::NagleDelayedAck
        } else if window_was_open(s, c, &d1) {
            match unseen_sends(s, c, &d1) {
                Ok(true) => StallKind::UnseenLoss,
                Ok(false) => StallKind::DelayedAck,
                Err(reason) => {
                    out.undecided(c, StallKind::UnseenLoss, reason, s.frame, d1.frame, gap);
                    return;
                }
            }
        } else {
            StallKind::DelayedAck
        };
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
