//! Resent unseen by the sender's timer: in the middle of a response the sender stopped with
//! everything the capture saw of it acknowledged and the receiver's window open, went silent,
//! and went on only when a timer of its own fired (RTO or tail-loss probe: nothing from the
//! peer came in between that could have released it). Its IPv4 identification skipped numbers
//! just before the segment that ended the silence: it had sent packets the capture never saw —
//! dropped on their way out (a policer or netfilter rule on the sender's host, which TCP sends
//! again only on its next ACK or timer) or lost before the capture point. To the capture the
//! resend is new data in order, no retransmission at all, and the wait looks like the
//! application's; the identification is what tells them apart.
//!
//! Evidence needed: the sender's identification counts its packets on this connection (see
//! `ipid.rs`) and skipped numbers just before the segment; the receiver never echoed a
//! timestamp of those packets (which would show they arrived and only the capture missed
//! them); no segment missing from the capture since; the peer had acknowledged everything the
//! capture saw and sent no data (a new request is the application's pace); no delayed ACK
//! released it (that detector's); the segment that ended it one segment long (a timer sends
//! one); a silence since either side's last packet of at least two round trips (a sender
//! answers an ACK within one: the ACK clock) and [`MIN_WAIT_NS`], and at most [`MAX_WAIT_NS`] (a timer's, not an
//! idle sender's, across which a host-wide counter moves with other connections' packets). A first segment of a
//! response is the think-time detector's, and a sender on its own clock sent when its
//! application did.

use latscope_core::model::analyze::{StallKind, Undecided};

use super::super::detector::{Detector, Sink};
use super::super::evidence::release_by_delayed_ack;
use crate::packet::flags;

use super::super::flow::{Conn, PendingUnseen};
use super::super::ipid::IdEvidence;
use super::super::ladder::fmt_ms;
use super::super::segment::Segment;
use super::super::seqnum::lt;

/// Silences shorter than this are not reported (a LAN round trip; a timer fires later).
const MIN_WAIT_NS: u64 = 1_000_000;

/// The least silence without a handshake's round trip: a tail-loss probe's floor on old
/// kernels (two jiffies), beyond most paths' round trip.
const UNKNOWN_RTT_WAIT_NS: u64 = 10_000_000;

/// The longest silence a retransmission timer makes after one loss: an RTO backed off once
/// from RFC 6298's 1 s (Linux starts at 200 ms). Longer, the sender was idle on its own (a
/// chat message, a peer-to-peer keep-alive) and a host-wide identification counter moved with
/// its other connections' packets meanwhile.
const MAX_WAIT_NS: u64 = 3_000_000_000;

/// Reports silences a sender ended with its own timer after packets the capture never saw.
pub(in super::super) struct UnseenResend;

impl Detector for UnseenResend {
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
        resolve(s, c, out);
        let Some(d1) = s.held else {
            return;
        };
        let IdEvidence::Unseen(unseen) = s.id_evidence else {
            return;
        };
        if s.first_response.is_some() || c.dirs[s.d].cadence.app_clock() {
            return;
        }
        let p = &c.dirs[1 - s.d];
        let smss = c.sender_mss(s.d);
        // Everything the capture saw of the sender was acknowledged, and the receiver's
        // window had room for the segment: neither window held it.
        let all_acked = !lt(p.lastack, d1.end);
        let room = p.win_scale == -1 || p.window >= s.len.min(smss).max(1);
        // The silence since the last packet either side sent before it.
        let since = d1.ts.max(p.last_pkt_ts);
        let wait = s.ts.saturating_sub(since);
        // A timer sends one segment (an RTO restarts from a window of one, a tail-loss probe
        // is one segment) and waits for its ACK; an application that resumes writes what it
        // has. The segment must be one, and the next one wait for the peer (`resolve`).
        let one_segment = s.len <= smss;
        // Longer than the peer's last packet could have released it: a sender answers an ACK
        // within a round trip of the capture point (the ACK clock), a timer fires later.
        let floor = c.first_rtt.map_or(UNKNOWN_RTT_WAIT_NS, |r| {
            r.saturating_mul(2).max(MIN_WAIT_NS)
        });
        let candidate = all_acked
            && room
            && one_segment
            && (floor..=MAX_WAIT_NS).contains(&wait)
            && c.unbroken_since(d1.ts)
            && p.last_data_ts <= d1.ts
            && release_by_delayed_ack(s, c, &d1).is_none();
        if !candidate {
            return;
        }
        let gap = s.ts.saturating_sub(d1.ts);
        // The receiver echoed a timestamp of the sender's the capture never saw: what the
        // capture missed reached it, and the silence may have been the application's.
        if c.dirs[s.d].unseen_pkts_ts.is_some_and(|t| t >= d1.ts) {
            out.undecided(
                c,
                StallKind::UnseenLoss,
                Undecided::CaptureMissedPackets,
                s.frame,
                d1.frame,
                gap,
            );
            return;
        }
        c.dirs[s.d].pending_unseen = Some(PendingUnseen {
            frame: s.frame,
            since_frame: d1.frame,
            lost: gap,
            wait,
            unseen,
            end: s.seq.wrapping_add(s.len),
        });
    }
}

/// A pending lone segment is a timer's resend once the peer acknowledges it with nothing more
/// from its sender before; more data from the sender first (a burst: an application that
/// resumed) or data from the peer (a new request) takes it back.
fn resolve(s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
    let sender = 1 - s.d;
    if let Some(p) = c.dirs[s.d].pending_unseen {
        // The sender itself again: new data before the ACK was a burst.
        if s.len > 0 && s.frame != p.frame {
            c.dirs[s.d].pending_unseen = None;
        }
        return;
    }
    let Some(p) = c.dirs[sender].pending_unseen else {
        return;
    };
    if s.len > 0 {
        c.dirs[sender].pending_unseen = None;
        return;
    }
    if s.flags & flags::ACK != 0 && !lt(s.ack, p.end) {
        c.dirs[sender].pending_unseen = None;
        out.notes.push(|| {
            format!(
                "<< STALL lost before the capture: {} sent unseen after #{}, resent alone by timer at #{} ({} of silence)",
                latscope_core::units::count(u64::from(p.unseen), "packet"),
                p.since_frame,
                p.frame,
                fmt_ms(p.wait)
            )
        });
        out.stall(c, StallKind::UnseenLoss, p.frame, p.since_frame, p.lost);
    }
}
