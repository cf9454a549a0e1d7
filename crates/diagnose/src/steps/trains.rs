//! The path's bottleneck rate from packet trains (as bprobe/pathrate do): segments the server
//! sends back to back leave the slowest link spaced by their serialisation time there, and keep
//! that spacing to the client. In a capture at the client, the gap between two consecutive
//! full-size segments of one response is that time, and size ÷ gap is the bottleneck's rate.
//! It needs responses of several segments; a target whose responses fit in one segment gives no
//! estimate (nothing is guessed then).

use std::collections::HashMap;

use latscope_wire::packet::{Addr, Decoded, Transport};

/// Bytes of headers per segment on the wire: TCP with timestamps (32), IPv4 (20), Ethernet (14).
pub const HEADERS: u64 = 32 + 20 + 14;
/// Fewest segment pairs for an estimate.
pub const MIN_PAIRS: usize = 20;

/// Per server→client flow: the last data segment.
#[derive(Clone, Copy, Debug)]
struct Last {
    ts_ns: u64,
    next_seq: u32,
    payload: u32,
}

/// Pairs kept at most (a few minutes of a busy capture); past it new pairs are not kept.
const MAX_PAIRS: usize = 200_000;

/// Two consecutive in-order segments of one response: the first's and the second's payload,
/// and the time between their arrivals.
#[derive(Clone, Copy, Debug)]
struct Pair {
    first: u32,
    second: u32,
    gap_ns: u64,
}

/// Collects segment pairs of the responses (the direction whose source port is the server's).
#[derive(Debug, Default)]
pub struct Trains {
    port: u16,
    flows: HashMap<(Addr, u16), Last>,
    /// How many data segments of each payload size arrived: the most common large one is the
    /// path's segment size.
    sizes: HashMap<u32, u64>,
    pairs: Vec<Pair>,
    /// Response-direction bytes on the wire.
    wire_bytes: u64,
}

impl Trains {
    /// Trains of the responses sent from `port`.
    pub fn new(port: u16) -> Trains {
        Trains {
            port,
            ..Trains::default()
        }
    }

    /// One captured frame at `ts_ns`.
    pub fn push(&mut self, ts_ns: u64, d: &Decoded<'_>) {
        let Transport::Tcp { tcp, payload_len } = d.transport else {
            return;
        };
        if tcp.dst_port() == self.port {
            // A request ends the train of the response before it: the next response's first
            // segment waited for it, not for the link.
            if payload_len > 0 {
                self.request((d.src, tcp.src_port()));
            }
            return;
        }
        if tcp.src_port() != self.port {
            return;
        }
        self.wire_bytes += u64::from(payload_len) + HEADERS;
        if payload_len == 0 {
            return;
        }
        self.push_segment((d.dst, tcp.dst_port()), ts_ns, tcp.seq(), payload_len);
    }

    /// The client sent data (a request) on `flow`.
    fn request(&mut self, flow: (Addr, u16)) {
        self.flows.remove(&flow);
    }

    fn push_segment(&mut self, flow: (Addr, u16), ts_ns: u64, seq: u32, payload: u32) {
        *self.sizes.entry(payload).or_default() += 1;
        if let Some(last) = self.flows.get(&flow)
            && last.next_seq == seq
            && ts_ns > last.ts_ns
            && self.pairs.len() < MAX_PAIRS
        {
            self.pairs.push(Pair {
                first: last.payload,
                second: payload,
                gap_ns: ts_ns - last.ts_ns,
            });
        }
        self.flows.insert(
            flow,
            Last {
                ts_ns,
                next_seq: seq.wrapping_add(payload),
                payload,
            },
        );
    }

    /// The path's segment size: the most common payload among the responses' data segments
    /// (the larger of equals). Not the largest: a receiver's GRO (or a virtual link's GSO)
    /// hands the capture segments merged two, three, forty at a time now and then, and one
    /// merged frame as the measure left only segments that large "full" (the lab's 7.8 Mbit/s
    /// link from the client with the server's agent: 0–24 pairs of ~1,500 segments, under the
    /// 20 an estimate needs, in runs where the same link from the client alone gave 29–35).
    fn segment_size(&self) -> Option<u32> {
        self.sizes
            .iter()
            .max_by_key(|&(&size, &n)| (n, size))
            .map(|(&size, _)| size)
            .filter(|&s| s > 0)
    }

    /// The median rate of the pairs of full segments (each at least nine tenths of the path's
    /// segment size, [`segment_size`](Self::segment_size); a merged frame counts with its
    /// bytes, which arrived over the gap before it), and how many there were; `None` below
    /// [`MIN_PAIRS`].
    pub fn rate(&self) -> Option<(f64, u64)> {
        let seg = u64::from(self.segment_size()?);
        let full = |p: u32| u64::from(p) * 10 >= seg * 9;
        let mut r: Vec<f64> = self
            .pairs
            .iter()
            .filter(|p| full(p.first) && full(p.second))
            .map(|p| {
                // A merged frame carries its segments' headers once per segment.
                let segments = u64::from(p.second).div_ceil(seg).max(1);
                let bits = (u64::from(p.second) + HEADERS * segments) as f64 * 8.0;
                bits / (p.gap_ns as f64 / 1e9)
            })
            .collect();
        if r.len() < MIN_PAIRS {
            return None;
        }
        r.sort_by(f64::total_cmp);
        Some((r[r.len() / 2], r.len() as u64))
    }

    /// Response-direction bytes on the wire per transaction.
    pub fn wire_bytes_per(&self, transactions: u64) -> Option<u64> {
        (transactions > 0).then(|| self.wire_bytes / transactions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow() -> (Addr, u16) {
        (Addr::default(), 40000)
    }

    #[test]
    fn spacing_of_full_segments_gives_the_rate() {
        // 4 Mbit/s: a 1448 B segment (1514 B on the wire) every 3.028 ms, 40 responses of
        // 3 segments each (the third short), 50 ms apart.
        let mut t = Trains::new(80);
        let gap = 3_028_000;
        let mut seq = 1u32;
        for r in 0..40u64 {
            let t0 = r * 50_000_000;
            for (i, len) in [1448u32, 1448, 700].into_iter().enumerate() {
                t.push_segment(flow(), t0 + i as u64 * gap, seq, len);
                seq = seq.wrapping_add(len);
            }
        }
        let (rate, pairs) = t.rate().expect("estimate");
        // Only full-size pairs count (the short third segment does not): one per response.
        assert_eq!(pairs, 40);
        assert!((rate - 4e6).abs() < 0.05e6, "{rate}");
    }

    /// A receiver's GRO merges segments now and then: the merged frames neither set the
    /// segment size nor hide the pairs of ordinary segments, and count with the bytes they
    /// carry (8 Mbit/s: a 1514 B segment on the wire every 1.514 ms).
    #[test]
    fn merged_frames_leave_the_pairs_and_the_rate() {
        let mut t = Trains::new(80);
        let ser = 1_514_000;
        let mut seq = 1u32;
        let mut ts = 0;
        for r in 0..4u64 {
            ts = ts.max(r * 100_000_000);
            // 44 segments: ten single, one frame of 3 merged, thirty single, the last short.
            let frames: Vec<u32> = std::iter::repeat_n(1448, 10)
                .chain([3 * 1448])
                .chain(std::iter::repeat_n(1448, 30))
                .chain([600])
                .collect();
            for len in frames {
                let segments = u64::from(len.div_ceil(1448));
                ts += ser * segments;
                t.push_segment(flow(), ts, seq, len);
                seq = seq.wrapping_add(len);
            }
        }
        assert_eq!(t.segment_size(), Some(1448));
        let (rate, pairs) = t.rate().expect("estimate");
        assert_eq!(pairs, 4 * 40, "every pair of full frames, merged ones too");
        assert!((rate - 8e6).abs() < 0.05e6, "{rate}");
    }

    #[test]
    fn single_segment_responses_give_no_estimate() {
        let mut t = Trains::new(80);
        let mut seq = 1u32;
        for r in 0..200u64 {
            t.push_segment(flow(), r * 1_000_000, seq, 612);
            seq = seq.wrapping_add(612);
        }
        // Consecutive responses are "in order" but each is alone in its train: the gap is the
        // request cycle, which a 612 B response would turn into a rate — it must not count
        // against segments of a longer response... here every segment is the largest, so the
        // pairs would count: a full-size-only estimate needs trains within one response.
        assert!(t.rate().is_some_and(|(r, _)| r < 10e6));
    }

    #[test]
    fn out_of_order_and_retransmitted_segments_are_no_pair() {
        let mut t = Trains::new(80);
        t.push_segment(flow(), 0, 1, 1448);
        t.push_segment(flow(), 10, 2897, 1448); // a gap: one was lost
        t.push_segment(flow(), 20, 1449, 1448); // the retransmission
        assert!(t.pairs.is_empty());
    }
}
