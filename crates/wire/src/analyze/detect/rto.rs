//! RTO retransmission: Wireshark's plain "retransmission" (not fast, not spurious) means a
//! timer fired (RTO or tail-loss probe). Time lost is the gap since the previous transmission
//! of the same bytes (the original, or the previous resend), and the example names that frame.
//!
//! Evidence needed, and what is not a stall:
//! * both directions captured, the capture's time going forward, and packets a TCP stack
//!   sent (not a fuzzed or crafted exchange);
//! * data: a SYN's resend is the handshake's ([`crate::handshake`]), a bare FIN resent on
//!   close (FIN backoff on an idle connection, an orphan's retries) holds up no byte of any
//!   request;
//! * a resend that follows a peer's ACK within a round trip is loss recovery that ACK
//!   triggered (partial ACKs, SACK), not a timer; so is a resend below the sender's highest
//!   byte sooner than the minimum RTO after the original or the last ACK of new data;
//! * a RST is never resent by a timer;
//! * the resend was needed. It is charged only once the peer's ACK of it shows so: an ACK
//!   that echoes (TSecr) a TSval older than the resend's was sent for an earlier transmission
//!   that arrived, so the resend was spurious and the wait was a late ACK (the Eifel
//!   detection of RFC 3522 §2, on RFC 7323 timestamps); a D-SACK for the resent bytes says
//!   the receiver got them twice (RFC 2883) — also when it comes later than the ACK, for a
//!   range sent only twice, the charge is taken back;
//! * the capture holds the peer's packets: when the peer's echoes show packets the capture
//!   missed, the ACK whose absence made the resend a loss may have come unseen, and the
//!   resend is counted as undecided, not as a stall.

use latscope_core::model::analyze::{StallKind, Undecided};
use latscope_core::timer::TcpTimer;

use crate::packet::flags;

use super::super::detector::{Detector, Sink};
use super::super::flow::{Conn, PendingRto};
use super::super::ladder::fmt_ms;
use super::super::segment::Segment;
use super::super::seqnum::{gt, lt};

/// How soon after a peer's ACK a resend is taken as triggered by it when the round trip is
/// unknown (no handshake).
const ACK_CLOCK_UNKNOWN_NS: u64 = 2_000_000;

/// Reports every timer retransmission the sequence analysis found.
pub(in super::super) struct Rto;

impl Detector for Rto {
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
        if s.flags & flags::ACK != 0 {
            resolve(s, c, out);
            late_dsack(s, c, out);
        }
        if s.echoes_unseen {
            late_unseen(s, c, out);
        }
        let Some((t0, f0)) = s.rto_since else {
            return;
        };
        if !timer_resend(s, c, t0) {
            return;
        }
        // Each stretch of waiting is counted once: a second retransmission of the same bytes
        // adds only the time since the first one (and names it), so the sum never exceeds
        // the connection's duration.
        let dir = &mut c.dirs[s.d];
        let (from, from_frame) = if dir.rto_charged_until.0 > t0 {
            dir.rto_charged_until
        } else {
            (t0, f0)
        };
        if s.ts > dir.rto_charged_until.0 {
            dir.rto_charged_until = (s.ts, s.frame);
        }
        let lost = s.ts.saturating_sub(from);
        // Nothing waited (the wait was already charged, or time went back); or it left in the
        // same burst as the previous resend, sooner than a timer can fire again (the second
        // piece of a resend cut smaller, the next segment of the recovery).
        if lost == 0 || (from > t0 && lost < rto_floor_ns()) {
            return;
        }
        out.notes.push(|| {
            let timer =
                TcpTimer::classify(lost).map_or(String::new(), |t| format!(", {}", t.label()));
            format!(
                "<< STALL RTO: resent by timer {} after #{from_frame}{timer}",
                fmt_ms(lost)
            )
        });
        let end = s.seq.wrapping_add(s.len);
        let earlier = dir.pending_rto.or(dir.charged_rto);
        let resends = earlier
            .filter(|p| p.seq == s.seq && p.end == end)
            .map_or(1, |p| p.resends + 1);
        let p = PendingRto {
            frame: s.frame,
            since_frame: from_frame,
            since_ts: from,
            lost,
            seq: s.seq,
            end,
            tsval: s.tsval,
            resends,
            peer_before: c.dirs[1 - s.d].max_tsval,
            peer_ack: None,
        };
        if let Some(old) = c.dirs[s.d].pending_rto.replace(p) {
            charge(c, s.d, &old, out);
        }
    }

    /// The connection ends: a retransmission no ACK answered was needed, unless the capture
    /// misses the peer's packets.
    fn close(&self, c: &mut Conn, out: &mut Sink<'_>) {
        for d in 0..2 {
            if let Some(p) = c.dirs[d].pending_rto.take() {
                charge(c, d, &p, out);
            }
        }
    }
}

/// Whether resend `s` (of a transmission at `t0`) is a timer's: data, on a connection the
/// detectors judge, not answering a peer's ACK, and not sooner than the minimum RTO unless it
/// is a tail-loss probe.
fn timer_resend(s: &Segment<'_>, c: &Conn, t0: u64) -> bool {
    // A RST is never resent by a timer: one that repeats its data answers another segment of
    // the peer (`gnutella.pcap`: a RST carrying 11 bytes for each resent SYN).
    if s.len == 0 || s.flags & (flags::SYN | flags::RST) != 0 || !c.judgeable() {
        return false;
    }
    // Sent right after an ACK from the peer (within the time that ACK takes to reach the
    // sender and the resend to come back, plus half of it for jitter): the ACK triggered it —
    // loss recovery on partial ACKs (RFC 6582) or SACK (RFC 6675) — not a timer, which fires
    // after a silence of at least the RTO (≥ 200 ms on Linux).
    let peer_ts = c.dirs[1 - s.d].last_pkt_ts;
    let ack_clock = c.rtt_to_sender(s.d).map_or(ACK_CLOCK_UNKNOWN_NS, |r| {
        r.saturating_add(r / 2).saturating_add(1_000_000)
    });
    if peer_ts > t0 && s.ts.saturating_sub(peer_ts) <= ack_clock {
        return false;
    }
    // RFC 6298 §5.3: the timer restarts on every ACK of new data, and no common stack fires it
    // sooner than its minimum (Linux's TCP_RTO_MIN, 200 ms; Windows' 300 ms). A resend below
    // the sender's highest byte sooner than that after the original, or after the peer's last
    // ACK of new data, was sent by the recovery those ACKs drove (`email-troubles.pcap`: a
    // resend 27 ms after a 13th duplicate ACK, others 10–80 ms after partial ACKs); a
    // tail-loss probe (RFC 8985) resends the highest one sooner.
    let armed = t0.max(c.dirs[1 - s.d].ack_advanced_ts);
    let tail = s.seq.wrapping_add(s.len) == c.dirs[s.d].nextseq;
    tail || s.ts.saturating_sub(armed) >= rto_floor_ns()
}

/// The shortest retransmission timeout: the start of the minimum-RTO band of the one TCP
/// timer vocabulary.
fn rto_floor_ns() -> u64 {
    *TcpTimer::DelayedAckMaxOrRtoMin.band_ns().start()
}

/// A D-SACK block of `s` covering `[seq, end)`.
fn dsack_covers(s: &Segment<'_>, seq: u32, end: u32) -> bool {
    s.dsack
        .is_some_and(|(left, right)| !gt(left, seq) && !lt(right, end))
}

/// The peer's segment `s` settles the pending retransmission of the other side: a D-SACK
/// for its bytes, or an ACK of them echoing an earlier transmission, says it was not needed;
/// an ACK of them that echoes the resend (or no timestamps) charges it; an ACK short of them
/// leaves it pending.
fn resolve(s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
    let d = 1 - s.d;
    let Some(p) = c.dirs[d].pending_rto else {
        return;
    };
    if dsack_covers(s, p.seq, p.end) {
        c.dirs[d].pending_rto = None;
        out.notes
            .push(|| format!("D-SACK: #{} was not needed", p.frame));
        return;
    }
    if lt(s.ack, p.end) {
        return;
    }
    c.dirs[d].pending_rto = None;
    // RFC 3522 §2: the first ACK of the resent bytes echoes the TSval of the transmission
    // that reached the receiver first; older than the resend's, the original got there.
    if let (Some(ecr), Some(val)) = (s.tsecr, p.tsval) {
        if lt(ecr, val) {
            out.notes.push(|| {
                format!(
                    "ACK echoes a transmission before #{}: the resend was spurious",
                    p.frame
                )
            });
            return;
        }
    }
    charge(
        c,
        d,
        &PendingRto {
            peer_ack: s.tsval,
            ..p
        },
        out,
    );
}

/// The sender of `s` echoes a packet of the peer's the capture missed: if the peer sent it
/// during the wait of the sender's last charged resend (its TSval between the peer's newest
/// before the resend and that of the ACK that charged it), the ACK whose absence made the
/// resend a loss may be that packet (`bitcoin.pcap`: a 101 ms tail probe whose ACK only the
/// next echo shows). The stall is taken back and counted undecided.
fn late_unseen(s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
    let (Some(p), Some(ecr)) = (c.dirs[s.d].charged_rto, s.tsecr) else {
        return;
    };
    let (Some(before), Some(ack)) = (p.peer_before, p.peer_ack) else {
        return;
    };
    if gt(ecr, before) && lt(ecr, ack) {
        c.dirs[s.d].charged_rto = None;
        out.retract(c, StallKind::RtoRetransmission, p.frame, p.lost);
        missed_packets(c, &p, out);
    }
}

/// A D-SACK arriving after the ACK that charged a retransmission: when the bytes were sent
/// only twice, both copies arrived and the resend was not needed (RFC 2883 §4.2).
fn late_dsack(s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
    let d = 1 - s.d;
    let Some(p) = c.dirs[d].charged_rto else {
        return;
    };
    if p.resends == 1 && dsack_covers(s, p.seq, p.end) {
        c.dirs[d].charged_rto = None;
        out.notes
            .push(|| format!("D-SACK: #{} was not needed after all", p.frame));
        out.note_on(p.frame, || "resend taken back: a later D-SACK".to_string());
        out.retract(c, StallKind::RtoRetransmission, p.frame, p.lost);
    }
}

/// Count resend `p`'s wait undecided: the capture missed packets of the peer around it, which
/// may have been the ACK whose absence made the resend look like a loss.
fn missed_packets(c: &Conn, p: &PendingRto, out: &mut Sink<'_>) {
    out.undecided(
        c,
        StallKind::RtoRetransmission,
        Undecided::CaptureMissedPackets,
        p.frame,
        p.since_frame,
        p.lost,
    );
}

/// How long before a resend's wait began a sign of the peer's packets missing from the capture
/// still counts: a capture that drops packets drops them in spells of load, not one at a time.
const UNSEEN_HORIZON_NS: u64 = 1_000_000_000;

/// Charge resend `p` of direction `d` — or count it undecided when the capture missed packets
/// of the peer during its wait (or shortly before it began).
fn charge(c: &mut Conn, d: usize, p: &PendingRto, out: &mut Sink<'_>) {
    let horizon = p.since_ts.saturating_sub(UNSEEN_HORIZON_NS);
    if c.dirs[1 - d].unseen_pkts_ts.is_some_and(|t| t >= horizon) {
        missed_packets(c, p, out);
        return;
    }
    c.dirs[d].charged_rto = Some(*p);
    // A resend of a segment the path MTU detector watches: if it turns out a black hole, that
    // finding carries this wait.
    if let Some(k) = &mut c.dirs[d].stuck {
        if k.seq == p.seq {
            if let Some(slot) = k.rto_charges.iter_mut().find(|x| x.is_none()) {
                *slot = Some((p.frame, p.lost));
            }
        }
    }
    out.stall(
        c,
        StallKind::RtoRetransmission,
        p.frame,
        p.since_frame,
        p.lost,
    );
}
