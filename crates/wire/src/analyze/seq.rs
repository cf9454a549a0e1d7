//! Sequence analysis: Wireshark's `tcp_analyze_sequence_number()` (epan/dissectors/
//! packet-tcp.c): zero window, lost segment, keep-alive, window update/full, duplicate ACK,
//! ACKed-unseen, then for segments that do not advance the sequence: spurious → fast
//! retransmission → out-of-order → retransmission. Counts match `tshark`'s `tcp.analysis.*`.

use latscope_core::model::analyze::TcpCounts;

use crate::packet::flags;

use super::flow::{Conn, Dir, Unacked};
use super::ladder::Notes;
use super::limits::{COALESCE_NS, EXACT_UNACKED, MAX_UNACKED};
use super::segment::{
    A_ACK_LOST, A_DUP_ACK, A_FAST, A_KA_ACK, A_KEEP_ALIVE, A_LOST, A_OOO, A_RESENT, A_RETRANS,
    A_SPURIOUS, A_WIN_FULL, A_WIN_UPDATE, A_ZERO_WIN, A_ZWP, A_ZWP_ACK, Segment,
};
use super::seqnum::{gt, le, lt};

/// Fast retransmission: within this long of the duplicate ACK that asked for it.
const FAST_RETRANS_NS: u64 = 20_000_000;
/// Out-of-order threshold when the handshake RTT is unknown.
const OOO_DEFAULT_NS: u64 = 3_000_000;

/// What the sequence analysis says about one segment.
pub(super) struct SeqOutcome {
    /// Wireshark's analysis flags (`A_*`).
    pub flags: u32,
    /// For a timer retransmission: (time, frame) of the original transmission.
    pub rto_since: Option<(u64, u64)>,
}

/// Analyse segment `s` of connection `c`, update the connection's sequence state and counts.
pub(super) fn analyze(c: &mut Conn, s: &Segment<'_>, notes: &mut Notes) -> SeqOutcome {
    let mut a = forward_checks(c, s, notes);
    if s.ack != c.dirs[s.d].lastack {
        c.dirs[s.d].dupacknum = 0;
    }
    a |= acked_unseen(c, s);
    let mut rto_since = None;
    if (s.len > 0 || s.syn_or_fin()) && a & A_KEEP_ALIVE == 0 {
        let (k, since) = classify_resend(c, s);
        a |= k;
        rto_since = since;
    }
    update_state(c, s, a);
    if a & A_RESENT != 0 {
        let f = &mut c.dirs[s.d];
        f.last_rexmit_ts = Some(s.ts);
        if s.len > 0 {
            f.resent.rotate_right(1);
            f.resent[0] = Some((s.seq, s.seq.wrapping_add(s.len)));
        }
    }
    count(&mut c.counts, a);
    notes.extend(|| {
        [
            (A_RETRANS, "retransmission"),
            (A_FAST, "fast retransmission"),
            (A_SPURIOUS, "spurious retransmission"),
            (A_OOO, "out-of-order"),
            (A_ZERO_WIN, "zero window"),
            (A_WIN_FULL, "window full"),
            (A_LOST, "previous segment not captured"),
            (A_KEEP_ALIVE, "keep-alive"),
            (A_WIN_UPDATE, "window update"),
            (A_ZWP, "zero-window probe"),
        ]
        .into_iter()
        .filter(|(bit, _)| a & bit != 0)
        .map(|(_, n)| n.to_string())
        .collect()
    });
    SeqOutcome {
        flags: a,
        rto_since,
    }
}

/// The checks on the forward direction's state (zero-window probe, zero window, lost segment,
/// keep-alive, window update/full, keep-alive ACK, zero-window-probe ACK, duplicate ACK).
fn forward_checks(c: &mut Conn, s: &Segment<'_>, notes: &mut Notes) -> u32 {
    let (d, r) = (s.d, 1 - s.d);
    let (seq, ack, seglen, window) = (s.seq, s.ack, s.len, s.window);
    let sfr = s.flags & (flags::SYN | flags::FIN | flags::RST);
    let mut a = 0u32;
    let (f, rv) = (&c.dirs[d], &c.dirs[r]);
    if seglen == 1 && seq == f.nextseq && rv.window == 0 {
        return A_ZWP;
    }
    if window == 0 && sfr == 0 {
        a |= A_ZERO_WIN;
    }
    if f.nextseq != 0 && gt(seq, f.nextseq) && s.flags & flags::RST == 0 {
        a |= A_LOST;
    }
    if seglen <= 1 && seq == f.nextseq.wrapping_sub(1) && sfr == 0 {
        a |= A_KEEP_ALIVE;
    }
    // A pure ACK repeating this side's last sequence and acknowledgement.
    let same = seglen == 0 && seq == f.nextseq && ack == f.lastack && sfr == 0;
    if same && window != 0 && window != f.window {
        a |= A_WIN_UPDATE;
    }
    if seglen > 0
        && rv.win_scale != -1
        && seq.wrapping_add(seglen) == rv.lastack.wrapping_add(rv.window)
        && sfr == 0
    {
        a |= A_WIN_FULL;
    }
    if same && window != 0 && window == f.window && rv.lastsegmentflags & A_KEEP_ALIVE != 0 {
        return a | A_KA_ACK;
    }
    if same && window == 0 && window == f.window && rv.lastsegmentflags & A_ZWP != 0 {
        return a | A_ZWP_ACK;
    }
    if same && window != 0 && window == f.window {
        let f = &mut c.dirs[d];
        f.dupacknum = if f.dupacknum == -1 {
            1
        } else {
            f.dupacknum + 1
        };
        a |= A_DUP_ACK;
        let n = f.dupacknum;
        notes.push(|| format!("dup ACK #{n}"));
    }
    a
}

/// An ACK for data the capture never saw ("ACKed unseen segment").
fn acked_unseen(c: &mut Conn, s: &Segment<'_>) -> u32 {
    let rv = &mut c.dirs[1 - s.d];
    if rv.maxseqtobeacked == 0 || !gt(s.ack, rv.maxseqtobeacked) || s.flags & flags::ACK == 0 {
        return 0;
    }
    if lt(rv.maxseqtobeacked, rv.nextseq) {
        rv.maxseqtobeacked = rv.nextseq;
        return A_ACK_LOST;
    }
    let a = if rv.dupacknum == 0 { A_ACK_LOST } else { 0 };
    rv.dupacknum = -1;
    a
}

/// Spurious / fast retransmission / out-of-order / retransmission, for a segment carrying
/// data, SYN or FIN. A timer retransmission also returns (time, frame) of the original.
fn classify_resend(c: &Conn, s: &Segment<'_>) -> (u32, Option<(u64, u64)>) {
    let (f, rv) = (&c.dirs[s.d], &c.dirs[1 - s.d]);
    let (seq, seglen, ts) = (s.seq, s.len, s.ts);
    let mut not_advanced = f.nextseq != 0 && lt(seq, f.nextseq);
    if seglen > 1 && f.nextseq.wrapping_sub(1) == seq {
        not_advanced = false;
    }
    if seglen > 0 && rv.lastack != 0 && le(seq.wrapping_add(seglen), rv.lastack) {
        return (A_SPURIOUS, None);
    }
    let t = ts.wrapping_sub(rv.lastack_ts);
    if not_advanced && rv.dupacknum >= 2 && rv.lastack == seq && t < FAST_RETRANS_NS {
        return (A_FAST, None);
    }
    let t = ts.wrapping_sub(f.nextseq_ts);
    let ooo_thres = c.first_rtt.filter(|&v| v > 0).unwrap_or(OOO_DEFAULT_NS);
    if not_advanced && t < ooo_thres {
        let end = seq
            .wrapping_add(seglen)
            .wrapping_add(u32::from(s.syn_or_fin()));
        // A repeated SYN or FIN has the same length as the original, so it falls to the
        // retransmission test below like repeated data (its sequence byte counts in `end`).
        // A segment ending exactly at the next expected byte is a retransmission, also when
        // a pure ACK moved that byte (tshark 4.0: `ultrasurf.pcap` #139, after a pure ACK
        // beyond a gap).
        if f.nextseq != end {
            return (A_OOO, None);
        }
    }
    if !not_advanced {
        return (0, None);
    }
    let since = f
        .unacked
        .iter()
        // The original: the oldest entry from this sequence number on, or holding it (a
        // merged run of segments, or a resent range cut differently).
        .find(|u| !lt(u.seq, seq) || gt(u.nextseq, seq))
        .map_or((f.nextseq_ts, f.nextseq_frame), |u| (u.ts, u.frame));
    (A_RETRANS, Some(since))
}

/// List segment `s` (ending at `nextseq`) as unacknowledged. Kept sorted by arrival;
/// Wireshark pushes at the head and scans all, we push at the back and scan from the oldest.
/// Bounded (see [`MAX_UNACKED`]): a long list merges contiguous segments sent close together
/// and drops its oldest entry when full.
fn record_unacked(f: &mut Dir, s: &Segment<'_>, nextseq: u32) {
    if f.unacked.len() >= EXACT_UNACKED {
        if let Some(b) = f.unacked.back_mut() {
            if b.nextseq == s.seq && s.ts.saturating_sub(b.ts) <= COALESCE_NS {
                b.nextseq = nextseq;
                return;
            }
        }
    }
    if f.unacked.len() >= MAX_UNACKED {
        f.unacked.pop_front();
    }
    f.unacked.push_back(Unacked {
        frame: s.frame,
        seq: s.seq,
        nextseq,
        ts: s.ts,
    });
}

/// Update the forward state after classification (as Wireshark does), and drop what this ACK
/// covers from the reverse direction's unacknowledged list.
fn update_state(c: &mut Conn, s: &Segment<'_>, a: u32) {
    let synfin = s.syn_or_fin();
    let mut nextseq = s.seq.wrapping_add(s.len);
    let f = &mut c.dirs[s.d];
    if s.len > 0 || synfin {
        if synfin {
            nextseq = nextseq.wrapping_add(1);
        }
        record_unacked(f, s, nextseq);
    }
    if (gt(nextseq, f.nextseq) || f.nextseq == 0) && a & A_ZWP == 0 {
        f.nextseq = nextseq;
        f.nextseq_ts = s.ts;
        f.nextseq_frame = s.frame;
    }
    if (s.seq == f.maxseqtobeacked || f.maxseqtobeacked == 0) && a & A_ZWP == 0 {
        f.maxseqtobeacked = f.nextseq;
    }
    f.window = s.window;
    if s.flags & flags::ACK != 0 && (gt(s.ack, f.lastack) || f.ack_advanced_ts == 0) {
        f.ack_advanced_ts = s.ts;
    }
    f.lastack = s.ack;
    f.lastack_ts = s.ts;
    f.lastsegmentflags = a;
    if s.flags & flags::ACK != 0 {
        let ack = s.ack;
        let rv = &mut c.dirs[1 - s.d];
        // Entries are single segments until the list is long (then contiguous ones merge):
        // only then is an entry's length a segment's.
        let single = rv.unacked.len() < EXACT_UNACKED;
        let mut largest = rv.largest_acked;
        let mut rtt = rv.min_ack_rtt;
        let resent_since = rv.last_rexmit_ts;
        let resent = rv.resent;
        rv.unacked.retain_mut(|u| {
            if gt(ack, u.seq) && lt(ack, u.nextseq) {
                u.seq = ack;
                true
            } else if gt(u.nextseq, ack) {
                true
            } else {
                // A segment that got through on its first transmission (none of the ranges
                // resent lately overlaps it).
                let once = !resent
                    .iter()
                    .flatten()
                    .any(|&(a, b)| lt(a, u.nextseq) && gt(b, u.seq));
                if single && once {
                    largest = largest.max(u.nextseq.wrapping_sub(u.seq));
                }
                // A round-trip sample: the segment this ACK ends at, never resent since (Karn).
                if u.nextseq == ack && resent_since.is_none_or(|r| r < u.ts) {
                    let sample = s.ts.saturating_sub(u.ts);
                    rtt = Some(rtt.map_or(sample, |r: u64| r.min(sample)));
                }
                false
            }
        });
        rv.largest_acked = largest;
        rv.min_ack_rtt = rtt;
    }
}

fn count(k: &mut TcpCounts, a: u32) {
    for (bit, n) in [
        (A_RETRANS, &mut k.retransmission),
        (A_FAST, &mut k.fast_retransmission),
        (A_SPURIOUS, &mut k.spurious_retransmission),
        (A_OOO, &mut k.out_of_order),
        (A_DUP_ACK, &mut k.duplicate_ack),
        (A_ZERO_WIN, &mut k.zero_window),
        (A_WIN_FULL, &mut k.window_full),
        (A_LOST, &mut k.lost_segment),
        (A_KEEP_ALIVE, &mut k.keep_alive),
    ] {
        if a & bit != 0 {
            *n += 1;
        }
    }
}
