//! Evidence several detectors weigh, below them all: the delayed-ACK timer's bounds and
//! whether a delayed ACK released a segment. A detector that needs another's judgement finds
//! it here, never in the other detector.

use latscope_core::timer::TcpTimer;

use super::flow::{Conn, DataSeg};
use super::segment::Segment;
use super::seqnum::lt;

/// Think time below this is not reported as a stall. No TCP timer is involved, so the
/// threshold is not one of `TcpTimer`'s bands.
pub(super) const THINK_MIN_NS: u64 = 10_000_000;

/// The shortest stall attributed to a delayed ACK: the start of the shortest delayed-ACK
/// timer band (a coarse ~20 ms stack), from the one TCP timer vocabulary.
pub(super) fn delayed_ack_floor_ns() -> u64 {
    TcpTimer::ALL
        .into_iter()
        .filter(|t| t.is_delayed_ack())
        .map(|t| *t.band_ns().start())
        .min()
        .unwrap_or(0)
}

/// The longest ACK delay a delayed-ACK timer explains: the end of the longest delayed-ACK band
/// (Linux and Windows delay ≤ 200 ms; RFC 1122 §4.2.3.2 allows at most 500 ms, which no
/// common stack uses). A later ACK is a slow receiver, not its timer.
pub(super) fn delayed_ack_ceiling_ns() -> u64 {
    TcpTimer::ALL
        .into_iter()
        .filter(|t| t.is_delayed_ack())
        .map(|t| *t.band_ns().end())
        .max()
        .unwrap_or(0)
}

/// The delayed ACK that released new data segment `s` after the sender's previous data `d1`:
/// (how late the ACK was, its frame), if one did.
pub(super) fn release_by_delayed_ack(
    s: &Segment<'_>,
    c: &Conn,
    d1: &DataSeg,
) -> Option<(u64, u64)> {
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
        && c.judgeable()
        && c.unbroken_since(d1.ts)
        && p.last_pkt_pure_ack
        // The ACK that first acknowledged D1's end, not a window update or a duplicate
        // repeating an ACK sent at once (`ek_to_cryptowall4.pcapng`: D1 ACKed after 0.9 ms,
        // a window update 25 ms later, the next data 611 ms after that).
        && p.ack_advanced_ts == p.last_pkt_ts
        && p.last_pkt_ts >= d1.ts
        && p.last_data_ts <= d1.ts
        && p.last_pkt_ack == d1.end
        && (min_release..=c.release_latest(s.d)).contains(&s.ts.saturating_sub(p.last_pkt_ts));
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
