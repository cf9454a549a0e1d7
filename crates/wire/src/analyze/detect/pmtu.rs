//! Path MTU black hole: a full-size segment resent by timer again and again and never
//! acknowledged, while smaller segments of the same sender were acknowledged and the peer is
//! still there. A link with a smaller MTU drops the large packets, and the ICMP
//! "fragmentation needed" / "packet too big" that would tell the sender (RFC 1191, RFC 8201)
//! does not reach it. Linux's `tcp_mtu_probing` eventually resends smaller: the capture then
//! shows the same bytes get through in smaller segments.
//!
//! Evidence needed: both directions; the resent segment is full-size (the sender's MSS, or
//! at least [`FULL_SEGMENT_MIN`] and its largest); [`MIN_RESENDS`] timer resends of the same
//! sequence with no ACK covering it; a smaller data segment of the same sender acknowledged
//! (so the path delivers small packets both ways).

use crate::report::{PmtuEvidence, StallKind};

use super::super::flow::{Conn, FULL_SEGMENT_MIN, Stuck};
use super::super::ladder::fmt_ms;
use super::super::seq::gt;
use super::{Detector, Segment, Sink};

/// Timer resends of the same full-size segment before it is called a black hole (one lost
/// segment and a lost resend happen on a lossy path; a third loss of exactly the large
/// segment while small ones pass does not).
const MIN_RESENDS: u32 = 2;

/// Recognises the black hole pattern.
pub(in super::super) struct PmtuBlackHole;

impl Detector for PmtuBlackHole {
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
        // An ACK covering the stuck segment: it got through after all.
        if let Some(k) = c.dirs[1 - s.d].stuck {
            if gt(s.ack, k.seq) {
                c.dirs[1 - s.d].stuck = None;
            }
        }
        let Some((t0, f0)) = s.rto_since else {
            return;
        };
        let smss = c.sender_mss(s.d);
        let dir = &c.dirs[s.d];
        let full = s.len >= smss || (s.len >= FULL_SEGMENT_MIN && s.len >= dir.max_seg);
        if s.len == 0 || !full {
            return;
        }
        let k = match dir.stuck {
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
                reported: false,
            },
        };
        let confirmed = !k.reported
            && k.resends >= MIN_RESENDS
            && c.both_directions()
            && (1..k.len).contains(&dir.largest_acked);
        c.dirs[s.d].stuck = Some(Stuck {
            reported: k.reported || confirmed,
            ..k
        });
        if !confirmed {
            return;
        }
        let lost = s.ts.saturating_sub(k.first_ts);
        let ev = PmtuEvidence {
            conn: c.id,
            sender: super::super::endpoint(if s.d == 0 { c.client } else { c.server }),
            lost_segment_bytes: k.len,
            header_bytes: header_bytes(c, s.d),
            resends: k.resends,
            largest_acked_bytes: c.dirs[s.d].largest_acked,
            advertised_mss: c.dirs[1 - s.d].mss_opt,
            first_frame: k.first_frame,
        };
        out.notes.push(|| {
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
        out.stall(c, StallKind::PmtuBlackHole, s.frame, k.first_frame, lost);
    }
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
