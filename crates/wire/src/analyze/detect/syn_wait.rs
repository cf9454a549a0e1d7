//! Resent SYNs and SYN-ACKs: what a connection's set-up waited. A dropped SYN (a full accept
//! queue, a filter, loss) costs the set-up its first retransmission timeout — 1 s on Linux
//! (`TCP_TIMEOUT_INIT`, RFC 6298 §2.1), doubling each time — before any request can leave.
//!
//! A resend is charged the time since the previous transmission of the same segment (the
//! example names that frame), never a stretch already charged to another resend of the same
//! set-up, and only once the set-up shows it was needed:
//! * a SYN resent sooner than the initial RTO (a scanner's retry: nmap's probes 175 ms apart),
//!   with FIN or URG (a crafted probe), or after the previous one was refused by a RST (a
//!   new attempt: Windows retries a refused connect after ~0.5 s) is no wait;
//! * a SYN-ACK sent after a SYN arrived again answers that SYN (`tcp_check_req()` replies to a
//!   retransmitted SYN at once): a reply, not the server's timer (a 3 s wait charged twice,
//!   `206_example_a.pcap`);
//! * a SYN-ACK resent by the server's timer kept someone waiting only when the client
//!   completes the set-up after it (a client that gave up answers with nothing or a RST:
//!   `gnutella.pcap`'s SYN-ACKs 22 s after the client's last SYN);
//! * with TCP timestamps, the client's ACK completing the set-up names the SYN-ACK it took
//!   (TSecr, RFC 7323 §4.3), and that SYN-ACK names the SYN it answered: a resend older than
//!   the exchange that completed the set-up was not needed (`tls_with_huge_ch.pcapng`: a SYN
//!   resent 2 s after the client had been answered, a SYN-ACK resend the client never took);
//! * a SYN-ACK sent again after the client acknowledged the first (a full accept queue drops
//!   the handshake's last ACK: Linux's `ListenOverflows`) kept the set-up waiting only when the
//!   client had to resend the data it sent on the connection; answered in one round trip
//!   (`wechat.pcap`), nobody waited.

use latscope_core::model::analyze::{HandshakeSegment, StallKind};
use latscope_core::timer::TcpTimer;

use crate::handshake::SAME_PACKET_NS;
use crate::packet::flags;

use super::super::detector::{Detector, Sink};
use super::super::flow::{Conn, HsTx, SetUp, SetUpWait};
use super::super::ladder::fmt_ms;
use super::super::segment::{A_RESENT, Segment};
use super::super::seqnum::lt;

/// Charges the set-up's resent SYNs and SYN-ACKs that kept it waiting.
pub(in super::super) struct SynWait;

/// The shortest wait taken for a stack's SYN timer: the start of the initial-RTO band (1 s on
/// Linux and macOS, RFC 6298 §2.1; 3 s on older stacks).
fn syn_timer_floor_ns() -> u64 {
    *TcpTimer::InitialRto.band_ns().start()
}

impl Detector for SynWait {
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
        let syn = s.flags & (flags::SYN | flags::RST) == flags::SYN;
        if syn && s.flags & (flags::FIN | flags::URG) == 0 {
            if s.flags & flags::ACK == 0 {
                on_syn(s, c, out);
            } else {
                on_syn_ack(s, c, out);
            }
            return;
        }
        let hs = &mut c.setup;
        if s.flags & flags::RST != 0 {
            // A RST answering the SYN refuses it: the next SYN is a new attempt.
            hs.refused |= s.d == 1 && !hs.completed;
            return;
        }
        if s.d == 0 {
            on_client(s, c, out);
        } else if hs.syn_ack.is_some() {
            // The server sent something other than its SYN-ACK: it took the handshake.
            hs.taken = true;
        }
    }

    /// The connection ends: a SYN no one answered kept its client waiting; a SYN-ACK the
    /// client never took kept no one waiting.
    fn close(&self, c: &mut Conn, out: &mut Sink<'_>) {
        let pending = std::mem::take(&mut c.setup.pending);
        for w in pending.into_iter().flatten() {
            if w.segment == HandshakeSegment::Syn {
                charge(c, &w, out);
            }
        }
    }
}

/// A transmission of a handshake segment.
fn tx(s: &Segment<'_>) -> HsTx {
    HsTx {
        ts: s.ts,
        frame: s.frame,
        tsval: s.tsval,
        ip_id: s.ip_id.filter(|&i| i != 0),
    }
}

/// Whether `now` repeats `prev` as a timer would: not the same packet captured twice (the
/// same identification, or within a millisecond), not time going back, and not sooner than
/// the initial RTO.
fn timer_repeat(prev: &HsTx, now: &HsTx) -> Option<u64> {
    if now.ip_id.is_some() && now.ip_id == prev.ip_id {
        return None;
    }
    let waited = now.ts.checked_sub(prev.ts)?;
    (waited >= SAME_PACKET_NS.max(syn_timer_floor_ns())).then_some(waited)
}

fn on_syn(s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
    let now = tx(s);
    let hs = &mut c.setup;
    hs.syn_since_syn_ack = true;
    let Some(prev) = hs.syn.replace(now) else {
        return;
    };
    if std::mem::take(&mut hs.refused) {
        return;
    }
    if let Some(waited) = timer_repeat(&prev, &now) {
        wait(c, HandshakeSegment::Syn, &prev, &now, waited, out);
    }
}

fn on_syn_ack(s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
    let now = tx(s);
    let hs = &mut c.setup;
    if let (Some(val), Some(ecr)) = (s.tsval, s.tsecr) {
        hs.syn_acks.rotate_right(1);
        hs.syn_acks[0] = Some((val, ecr));
    }
    // Sent after a SYN arrived again: the reply to it.
    let reply = std::mem::take(&mut hs.syn_since_syn_ack);
    let Some(prev) = hs.syn_ack.replace(now) else {
        return;
    };
    if reply {
        return;
    }
    let Some(waited) = timer_repeat(&prev, &now) else {
        return;
    };
    if !hs.completed {
        wait(c, HandshakeSegment::SynAck, &prev, &now, waited, out);
        return;
    }
    // After the client's ACK: the server never took it. Someone waited only if the client
    // had to send its data again meanwhile.
    if hs.client_resent && !hs.taken {
        let w = setup_wait(hs, HandshakeSegment::SynAck, &prev, &now, waited);
        if let Some(w) = w {
            charge(c, &w, out);
        }
    }
}

/// A segment of the client after its SYN: the ACK completing the set-up settles the resends
/// that waited for it; a resend of its data shows it is still waiting.
fn on_client(s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
    let hs = &mut c.setup;
    if s.len > 0 && s.analysis & A_RESENT != 0 && hs.completed {
        hs.client_resent = true;
    }
    if hs.completed || hs.syn_ack.is_none() || s.flags & flags::ACK == 0 || s.ack != 1 {
        return;
    }
    hs.completed = true;
    let pending = std::mem::take(&mut hs.pending);
    // The SYN-ACK the client took (its TSecr names it), and the SYN that one answered.
    let took = s.tsecr;
    let answered = took.and_then(|ecr| {
        hs.syn_acks
            .iter()
            .flatten()
            .find(|&&(val, _)| val == ecr)
            .map(|&(_, syn_ecr)| syn_ecr)
    });
    for w in pending.into_iter().flatten() {
        let proof = match w.segment {
            HandshakeSegment::Syn => answered,
            HandshakeSegment::SynAck => took,
        };
        // Not needed: the exchange that completed the set-up began before this resend.
        let needless = matches!((proof, w.tsval), (Some(p), Some(v)) if lt(p, v));
        if needless {
            out.notes.push(|| {
                format!(
                    "the set-up completed without #{} (timestamps): not a wait",
                    w.frame
                )
            });
        } else {
            charge(c, &w, out);
        }
    }
}

/// A timer resend of `segment` (`prev` → `now`): held until the set-up shows it was needed.
fn wait(
    c: &mut Conn,
    segment: HandshakeSegment,
    prev: &HsTx,
    now: &HsTx,
    waited: u64,
    out: &mut Sink<'_>,
) {
    let Some(w) = setup_wait(&mut c.setup, segment, prev, now, waited) else {
        return;
    };
    let full = c.setup.pending.iter().all(Option::is_some);
    if full {
        // A set-up resending more than its list holds: its oldest resend is settled now — a
        // SYN kept its client waiting whatever comes; a SYN-ACK resent this often is one the
        // client gave up on (the exchange of timestamps that could prove otherwise is lost).
        if let Some(old) = c.setup.pending[0].take() {
            if old.segment == HandshakeSegment::Syn {
                charge(c, &old, out);
            }
        }
        c.setup.pending.rotate_left(1);
    }
    if let Some(slot) = c.setup.pending.iter_mut().find(|p| p.is_none()) {
        *slot = Some(w);
    }
}

/// The wait of a resend, from the later of the previous transmission and what the set-up's
/// resends already cover (so the set-up is never charged a stretch twice).
fn setup_wait(
    hs: &mut SetUp,
    segment: HandshakeSegment,
    prev: &HsTx,
    now: &HsTx,
    waited: u64,
) -> Option<SetUpWait> {
    let (from, from_frame) = if hs.charged_until.0 > prev.ts {
        hs.charged_until
    } else {
        (prev.ts, prev.frame)
    };
    hs.charged_until = hs.charged_until.max((now.ts, now.frame));
    let lost = now.ts.saturating_sub(from).min(waited);
    (lost > 0).then_some(SetUpWait {
        segment,
        frame: now.frame,
        since_frame: from_frame,
        lost,
        tsval: now.tsval,
    })
}

fn charge(c: &mut Conn, w: &SetUpWait, out: &mut Sink<'_>) {
    let what = match w.segment {
        HandshakeSegment::Syn => "SYN",
        HandshakeSegment::SynAck => "SYN-ACK",
    };
    out.note_on(w.frame, || {
        format!(
            "<< STALL set-up waited {} for this resent {what}",
            fmt_ms(w.lost)
        )
    });
    out.set_up_wait(w.segment, w.lost);
    out.stall(
        c,
        StallKind::SynRetransmission,
        w.frame,
        w.since_frame,
        w.lost,
    );
}
