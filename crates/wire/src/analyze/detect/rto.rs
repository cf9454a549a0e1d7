//! RTO retransmission: Wireshark's plain "retransmission" (not fast, not spurious) means a
//! timer fired (RTO or tail-loss probe). Time lost is the gap since the original transmission
//! (or since the previous retransmission, when that came later).
//!
//! Evidence needed, and what is not a stall:
//! * both directions captured (with one, a resend cannot be told from a fast retransmission
//!   or a copy), and the capture's time going forward;
//! * data: a SYN's resend is the handshake's ([`super::super::super::handshake`]), a bare FIN
//!   resent on close (FIN backoff on an idle connection, an orphan's retries) holds up no
//!   byte of any request;
//! * a resend that follows a peer's ACK within a round trip is loss recovery that ACK
//!   triggered (partial ACKs, SACK), not a timer; so is a resend below the sender's highest
//!   byte sooner than the minimum RTO after the original or the last ACK of new data;
//! * a RST is never resent by a timer;
//! * a resend the peer's next ACK reports as received twice (a D-SACK, RFC 2883) was
//!   spurious — typically a tail-loss probe sent because the peer's ACK was late — so it is
//!   charged only after that ACK says otherwise.

use latscope_core::timer::TcpTimer;

use crate::packet::flags;
use crate::report::StallKind;

use super::super::flow::{Conn, PendingRto};
use super::super::ladder::fmt_ms;
use super::super::seq::{gt, lt};
use super::{Detector, Segment, Sink};

/// How soon after a peer's ACK a resend is taken as triggered by it when the round trip is
/// unknown (no handshake).
const ACK_CLOCK_UNKNOWN_NS: u64 = 2_000_000;

/// Reports every timer retransmission the sequence analysis found.
pub(in super::super) struct Rto;

impl Detector for Rto {
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
        if s.flags & flags::ACK != 0 {
            resolve(s, c, out);
        }
        let Some((t0, f0)) = s.rto_since else {
            return;
        };
        // A RST is never resent by a timer: one that repeats its data answers another
        // segment of the peer (`gnutella.pcap`: a RST carrying 11 bytes for each resent SYN).
        if s.len == 0 || s.flags & (flags::SYN | flags::RST) != 0 || !c.both_directions() {
            return;
        }
        // A full-size segment already known to fall into a path MTU black hole: that
        // finding carries its waits.
        if c.dirs[s.d]
            .stuck
            .is_some_and(|k| k.reported && k.seq == s.seq)
        {
            return;
        }
        // Sent right after an ACK from the peer (within the time that ACK takes to reach the
        // sender and the resend to come back, plus half of it for jitter): the ACK triggered
        // it — loss recovery on partial ACKs (RFC 6582) or SACK (RFC 6675) — not a timer,
        // which fires after a silence of at least the RTO (≥ 200 ms on Linux).
        let peer_ts = c.dirs[1 - s.d].last_pkt_ts;
        let ack_clock = c.rtt_to_sender(s.d).map_or(ACK_CLOCK_UNKNOWN_NS, |r| {
            r.saturating_add(r / 2).saturating_add(1_000_000)
        });
        if peer_ts > t0 && s.ts.saturating_sub(peer_ts) <= ack_clock {
            return;
        }
        // RFC 6298 §5.3: the timer restarts on every ACK of new data, and no common stack
        // fires it sooner than its minimum (Linux's TCP_RTO_MIN, 200 ms; Windows' 300 ms). A
        // resend below the sender's highest byte sooner than that after the original, or
        // after the peer's last ACK of new data, was sent by the recovery those ACKs drove
        // (`email-troubles.pcap`: a resend 27 ms after a 13th duplicate ACK, others 10–80 ms
        // after partial ACKs); a tail-loss probe (RFC 8985) resends the highest one sooner.
        let armed = t0.max(c.dirs[1 - s.d].ack_advanced_ts);
        let tail = s.seq.wrapping_add(s.len) == c.dirs[s.d].nextseq;
        if !tail && s.ts.saturating_sub(armed) < rto_floor_ns() {
            return;
        }
        // Each stretch of waiting is counted once: a second retransmission of the same bytes
        // adds only the time since the first one, so the sum never exceeds the connection's
        // duration.
        let dir = &mut c.dirs[s.d];
        let from = t0.max(dir.rto_charged_until);
        dir.rto_charged_until = dir.rto_charged_until.max(s.ts);
        let lost = s.ts.saturating_sub(from);
        // Nothing waited (the wait was already charged, or time went back).
        if lost == 0 {
            return;
        }
        out.notes.push(|| {
            let timer =
                TcpTimer::classify(lost).map_or(String::new(), |t| format!(", {}", t.label()));
            format!(
                "retransmission (timer, {} after #{f0}{timer})",
                fmt_ms(lost)
            )
        });
        let p = PendingRto {
            frame: s.frame,
            since_frame: f0,
            lost,
            seq: s.seq,
            end: s.seq.wrapping_add(s.len),
        };
        if let Some(old) = c.dirs[s.d].pending_rto.replace(p) {
            charge(c, &old, out);
        }
    }
}

/// The shortest retransmission timeout: the start of the minimum-RTO band of the one TCP
/// timer vocabulary.
fn rto_floor_ns() -> u64 {
    *TcpTimer::DelayedAckMaxOrRtoMin.band_ns().start()
}

/// The peer's ACK `s` settles the pending retransmission of the other side: a D-SACK for its
/// bytes says it was not needed; anything else charges it.
fn resolve(s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
    let Some(p) = c.dirs[1 - s.d].pending_rto.take() else {
        return;
    };
    if let Some((left, right)) = s.dsack {
        if !gt(left, p.seq) && !lt(right, p.end) {
            out.notes
                .push(|| format!("D-SACK: #{} was not needed", p.frame));
            return;
        }
    }
    charge(c, &p, out);
}

fn charge(c: &mut Conn, p: &PendingRto, out: &mut Sink<'_>) {
    out.stall(
        c,
        StallKind::RtoRetransmission,
        p.frame,
        p.since_frame,
        p.lost,
    );
}

/// The connection ends: retransmissions no ACK answered were needed.
pub(in super::super) fn flush(c: &mut Conn, out: &mut Sink<'_>) {
    for d in 0..2 {
        if let Some(p) = c.dirs[d].pending_rto.take() {
            charge(c, &p, out);
        }
    }
}
