//! Path MTU black hole: a full-size segment resent by timer again and again and never
//! acknowledged at that size, while smaller segments of the same sender were acknowledged and
//! the peer is still there. A link with a smaller MTU drops the large packets, and the ICMP
//! "fragmentation needed" / "packet too big" that would tell the sender (RFC 1191, RFC 8201)
//! does not reach it. Linux's `tcp_mtu_probing` eventually resends smaller: the capture then
//! shows the same bytes get through in smaller segments.
//!
//! Evidence needed: both directions; the resent segment is full-size (the sender's MSS, or
//! at least [`FULL_SEGMENT_MIN`] and its largest); [`MIN_RESENDS`] timer resends of the same
//! sequence with no ACK covering it; a smaller data segment of the same sender acknowledged
//! after its first transmission (so the path delivers small packets both ways).
//!
//! What refutes it, so it is decided only when the stuck bytes are finally acknowledged after
//! a smaller resend, or the connection ends: the stuck segment acknowledged after a
//! full-size transmission (`alexa-app.pcapng`: after its second resend), or any segment of
//! the same sender at least as large acknowledged after its first transmission
//! (`heuristic_tcp_ack_payload.pcap`: a 1,460-byte segment beside the stuck one passed) —
//! full-size packets do get through, and the resends were loss on a lossy path, the RTO
//! stalls they are; so does an ICMP "fragmentation needed" quoting the sender's segment in
//! the capture (the message the black hole lacks got through). Once decided, the waits of its
//! resends are the black hole's, not RTO stalls.

use latscope_core::model::analyze::{PmtuEvidence, StallKind};

use super::super::detector::{Detector, Sink};
use super::super::flow::{Conn, FULL_SEGMENT_MIN, STUCK_CHARGES, Stuck, endpoint};
use super::super::ladder::fmt_ms;
use super::super::segment::{A_RESENT, Segment};
use super::super::seqnum::gt;

/// Timer resends of the same full-size segment before it is called a black hole (one lost
/// segment and a lost resend happen on a lossy path; a third loss of exactly the large
/// segment while small ones pass does not).
const MIN_RESENDS: u32 = 2;

/// Recognises the black hole pattern.
pub(in super::super) struct PmtuBlackHole;

impl Detector for PmtuBlackHole {
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
        // An ACK covering the stuck segment: at full size it got through (no black hole); after
        // a smaller resend, the black hole is shown.
        if let Some(k) = c.dirs[1 - s.d].stuck {
            if gt(s.ack, k.seq) {
                c.dirs[1 - s.d].stuck = None;
                if k.candidate && k.last.2 < k.len {
                    report(c, 1 - s.d, &k, s.ts, out);
                }
            }
        }
        if s.len == 0 || !c.judgeable() {
            return;
        }
        // Another transmission of the stuck bytes: remember its size.
        if let Some(k) = &mut c.dirs[s.d].stuck {
            if s.seq == k.seq && s.analysis & A_RESENT != 0 {
                k.last = (s.frame, s.ts, s.len);
            }
        }
        let Some((t0, f0)) = s.rto_since else {
            return;
        };
        let smss = c.sender_mss(s.d);
        let dir = &c.dirs[s.d];
        let full = s.len >= smss || (s.len >= FULL_SEGMENT_MIN && s.len >= dir.max_seg);
        if !full {
            return;
        }
        let mut k = match dir.stuck {
            Some(k) if k.seq == s.seq => Stuck {
                resends: k.resends + 1,
                ..k
            },
            _ => Stuck {
                seq: s.seq,
                len: s.len,
                first_ts: t0,
                first_frame: f0,
                resends: 1,
                last: (s.frame, s.ts, s.len),
                candidate: false,
                rto_charges: [None; STUCK_CHARGES],
            },
        };
        k.candidate |= k.resends >= MIN_RESENDS && (1..k.len).contains(&dir.largest_acked);
        c.dirs[s.d].stuck = Some(k);
    }

    /// The connection ends with the stuck segment never acknowledged: a black hole, unless
    /// full-size segments of the sender were shown to pass.
    fn close(&self, c: &mut Conn, out: &mut Sink<'_>) {
        for d in 0..2 {
            if let Some(k) = c.dirs[d].stuck.take() {
                if k.candidate {
                    report(c, d, &k, k.last.1, out);
                }
            }
        }
    }
}

/// Black hole `k` of direction `d`, settled at `end`: reported unless a segment of the sender
/// as large as the stuck one got through on its first transmission; the RTO stalls of its
/// resends are taken back.
fn report(c: &mut Conn, d: usize, k: &Stuck, end: u64, out: &mut Sink<'_>) {
    // A "fragmentation needed" for this sender reached the capture: path MTU discovery works;
    // the resends were its recovery, not a black hole's.
    if c.dirs[d].icmp_mtu.is_some() {
        return;
    }
    if c.dirs[d].largest_acked >= k.len {
        out.notes.push(|| {
            format!(
                "{}-byte segments got through: #{}'s resends were loss, not a black hole",
                c.dirs[d].largest_acked, k.first_frame
            )
        });
        return;
    }
    for (frame, lost) in k.rto_charges.iter().flatten() {
        out.retract(c, StallKind::RtoRetransmission, *frame, *lost);
    }
    let lost = end.saturating_sub(k.first_ts);
    let ev = PmtuEvidence {
        conn: c.id,
        sender: endpoint(if d == 0 { c.client } else { c.server }),
        lost_segment_bytes: k.len,
        header_bytes: header_bytes(c, d),
        resends: k.resends,
        largest_acked_bytes: c.dirs[d].largest_acked,
        advertised_mss: c.dirs[1 - d].mss_opt,
        first_frame: k.first_frame,
    };
    out.note_on(k.last.0, || {
        format!(
            "<< STALL path MTU black hole: {} bytes resent {} times since #{}, {} lost; {} bytes passed",
            ev.lost_segment_bytes,
            ev.resends,
            ev.first_frame,
            fmt_ms(lost),
            ev.largest_acked_bytes
        )
    });
    out.pmtu(ev);
    out.stall(c, StallKind::PmtuBlackHole, k.last.0, k.first_frame, lost);
}

/// IP and TCP header bytes of direction `d`'s segments: IPv4 20 / IPv6 40, TCP 20 plus the
/// timestamp option's 12 when negotiated.
fn header_bytes(c: &Conn, d: usize) -> u32 {
    let ip = match c.client.0.ip() {
        std::net::IpAddr::V4(_) => 20,
        std::net::IpAddr::V6(_) => 40,
    };
    let ts = if c.dirs[d].timestamps && c.dirs[1 - d].timestamps {
        12
    } else {
        0
    };
    ip + 20 + ts
}
