//! The server → client delivery rate of large responses, from the client's capture alone (a
//! receiver-side estimate, as a throughput test's receiver measures it): the bytes of a
//! response over the time between its data segments, once the transfer has settled. Packet
//! trains ([`super::trains`]) measure the link's capacity from back-to-back pairs; this is the
//! rate the responses actually got, which is what a token bucket or a shaped link leaves them
//! and what a client that cannot see the server can still measure.
//!
//! A response counts when, after [`SETTLE_RTTS`] round trips from its first segment (slow start
//! is over by then on a link slow enough to matter), it still carries at least [`MIN_BYTES`]
//! over at least [`MIN_RTTS`] round trips, and its arrivals are not clocked by the round trip:
//! a link drains its queue at its rate, while a sender held back by a window sends bursts and
//! waits a round trip — that rate is the window's, not the link's, and counts as none. The
//! round trip is the capture's own: SYN out, SYN-ACK back; when the capture began after the
//! connection's handshake (the request step connects as the capture starts, and a keep-alive
//! connection never shakes hands again), the path's round trip measured before it.

use std::collections::HashMap;

use latscope_wire::packet::{Addr, Decoded, Transport, flags};

use super::trains::HEADERS;

/// Round trips skipped at the start of a response (slow start, the ACK clock settling).
pub const SETTLE_RTTS: u64 = 2;
/// Round trips the settled part must last.
pub const MIN_RTTS: u64 = 4;
/// Bytes the settled part must carry.
pub const MIN_BYTES: u64 = 64 * 1024;
/// Segments kept per response (a 1 MB response is ~700); past it the response is cut there.
const MAX_POINTS: usize = 8_192;
/// Flows tracked at once; past it the table starts afresh (bounds a hostile capture).
const MAX_FLOWS: usize = 4_096;

/// One response in progress: when each of its data segments arrived and the bytes so far.
#[derive(Debug, Default)]
struct Response {
    /// (arrival ns, payload bytes) per data segment, in order of arrival.
    points: Vec<(u64, u64)>,
}

/// Collects the responses sent from the server's port and rates the large ones.
#[derive(Debug, Default)]
pub struct Delivery {
    port: u16,
    responses: HashMap<(Addr, u16), Response>,
    /// When each connection's SYN left (by client address and port).
    syn_sent: HashMap<(Addr, u16), u64>,
    /// The smallest handshake round trip seen, ns.
    rtt_ns: Option<u64>,
    /// The path's round trip measured before the capture, for a capture without a handshake.
    path_rtt_ns: Option<u64>,
    /// bit/s of each response rated.
    rates: Vec<f64>,
}

impl Delivery {
    /// Responses sent from `port`; `path_rtt_ns` stands for the round trip when the capture
    /// holds no handshake.
    pub fn new(port: u16, path_rtt_ns: Option<u64>) -> Delivery {
        Delivery {
            port,
            path_rtt_ns,
            ..Delivery::default()
        }
    }

    /// One captured frame at `ts_ns`.
    pub fn push(&mut self, ts_ns: u64, d: &Decoded<'_>) {
        let Transport::Tcp { tcp, payload_len } = d.transport else {
            return;
        };
        let syn = tcp.flags() & flags::SYN != 0;
        if tcp.dst_port() == self.port {
            let client = (d.src, tcp.src_port());
            if syn {
                if self.syn_sent.len() >= MAX_FLOWS {
                    self.syn_sent.clear();
                }
                self.syn_sent.insert(client, ts_ns);
            } else if payload_len > 0 {
                // A request ends the response before it.
                self.end(client);
            }
            return;
        }
        if tcp.src_port() != self.port {
            return;
        }
        let client = (d.dst, tcp.dst_port());
        if syn {
            if let Some(sent) = self.syn_sent.remove(&client) {
                let rtt = ts_ns.saturating_sub(sent);
                self.rtt_ns = Some(self.rtt_ns.map_or(rtt, |r| r.min(rtt)));
            }
            return;
        }
        if payload_len > 0 {
            self.segment(client, ts_ns, u64::from(payload_len));
        }
        if tcp.flags() & flags::FIN != 0 {
            self.end(client);
        }
    }

    fn segment(&mut self, client: (Addr, u16), ts_ns: u64, bytes: u64) {
        if self.responses.len() >= MAX_FLOWS && !self.responses.contains_key(&client) {
            self.responses.clear();
        }
        let r = self.responses.entry(client).or_default();
        if r.points.len() < MAX_POINTS {
            r.points.push((ts_ns, bytes));
        }
    }

    fn end(&mut self, client: (Addr, u16)) {
        if let (Some(r), Some(rtt)) = (
            self.responses.remove(&client),
            self.rtt_ns.or(self.path_rtt_ns),
        ) && let Some(rate) = settled_rate(&r.points, rtt)
        {
            self.rates.push(rate);
        }
    }

    /// The median delivery rate of the large responses (bit/s) and how many there were;
    /// `None` when no response qualified. Responses still open are rated too.
    pub fn rate(mut self) -> Option<(f64, u64)> {
        let open: Vec<(Addr, u16)> = self.responses.keys().copied().collect();
        for c in open {
            self.end(c);
        }
        if self.rates.is_empty() {
            return None;
        }
        let mut r = self.rates;
        r.sort_by(f64::total_cmp);
        Some((r[r.len() / 2], r.len() as u64))
    }
}

/// The rate of one response's settled part, bit/s on the wire (each segment's headers
/// counted, as where the rate is applied), or `None` when it is too short, too small or not
/// evenly paced.
fn settled_rate(points: &[(u64, u64)], rtt_ns: u64) -> Option<f64> {
    let rtt = rtt_ns.max(1);
    let first = points.first()?.0;
    let settled: Vec<(u64, u64)> = points
        .iter()
        .copied()
        .filter(|&(t, _)| t >= first + SETTLE_RTTS * rtt)
        .collect();
    let (&(t0, _), &(t1, _)) = (settled.first()?, settled.last()?);
    let span = t1.checked_sub(t0).filter(|&s| s >= MIN_RTTS * rtt)?;
    // Bytes that arrived after the first settled segment, over the time they took.
    let payload: u64 = settled[1..].iter().map(|&(_, b)| b).sum();
    if payload < MIN_BYTES {
        return None;
    }
    let bytes = payload + (settled.len() as u64 - 1) * HEADERS;
    let mut gaps: Vec<u64> = settled.windows(2).map(|w| w[1].0 - w[0].0).collect();
    gaps.sort_unstable();
    let median = gaps[gaps.len() / 2];
    // A sender held back by a window sends a burst and waits a round trip for the ACKs: most
    // of the span is then gaps of about the base round trip, between bursts whose own gaps
    // are far shorter. A link (or a shaper, even one whose timer fires late and releases
    // several packets at once) spaces them by its own clock instead.
    let round_trip_gaps: u64 = gaps.iter().filter(|&&g| g >= rtt / 2 && g <= 2 * rtt).sum();
    let window_clocked = round_trip_gaps * 2 >= span && median * 8 < rtt;
    (!window_clocked).then(|| bytes as f64 * 8.0 / (span as f64 / 1e9))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Segments of `mss` bytes for `bytes`, paced at `rate_bps` from `t0`, after an initial
    /// window of 10 segments at once.
    fn response(t0: u64, bytes: u64, mss: u64, rate_bps: f64) -> Vec<(u64, u64)> {
        let per = ((mss + HEADERS) as f64 * 8.0 / rate_bps * 1e9) as u64;
        (0..bytes.div_ceil(mss))
            .map(|i| (t0 + i.saturating_sub(10) * per, mss))
            .collect()
    }

    #[test]
    fn a_paced_response_gives_its_rate() {
        // 10 Mbit/s, 1 ms round trip, 300 KB: 240 ms of transfer.
        let p = response(0, 300_000, 1448, 10e6);
        let r = settled_rate(&p, 1_000_000).expect("rated");
        assert!((r - 10e6).abs() < 0.2e6, "{r}");
    }

    #[test]
    fn small_short_or_window_limited_responses_give_none() {
        // 30 KB: under the minimum.
        assert_eq!(
            settled_rate(&response(0, 30_000, 1448, 10e6), 1_000_000),
            None
        );
        // 300 KB in 2.4 ms at 1 Gbit/s with a 1 ms round trip: not enough round trips.
        assert_eq!(
            settled_rate(&response(0, 300_000, 1448, 1e9), 1_000_000),
            None
        );
        // A 64 KB window per 20 ms round trip, each window at line rate: bursts and waits.
        let mut p = Vec::new();
        for w in 0..10u64 {
            for i in 0..45u64 {
                p.push((w * 20_000_000 + i * 12_000, 1448));
            }
        }
        assert_eq!(settled_rate(&p, 20_000_000), None);
    }

    #[test]
    fn a_shaper_whose_timer_fires_late_still_gives_its_rate() {
        // 10 Mbit/s through a token bucket on a busy host: its timer fires every 12.1 ms and
        // releases the 10 segments the tokens allow at once; the round trip is 20 µs.
        let mut p = Vec::new();
        for b in 0..20u64 {
            for i in 0..10u64 {
                p.push((b * 12_112_000 + i * 2_000, 1448));
            }
        }
        let r = settled_rate(&p, 20_000).expect("rated");
        assert!((r - 10e6).abs() < 0.5e6, "{r}");
    }

    /// An Ethernet + IPv4 + TCP frame from `src:sport` to `dst:dport` with `payload` bytes.
    fn frame(src: u8, sport: u16, dst: u8, dport: u16, fl: u8, payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20 + payload];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((40 + payload) as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[10, 0, 0, src]);
        ip[16..20].copy_from_slice(&[10, 0, 0, dst]);
        let tcp = &mut f[34..54];
        tcp[0..2].copy_from_slice(&sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&dport.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = fl;
        f
    }

    #[test]
    fn the_capture_of_a_slow_download_gives_the_rate() {
        let mut d = Delivery::new(80, None);
        let mut push = |ts: u64, f: Vec<u8>| {
            let dec = latscope_wire::decode(latscope_wire::packet::LinkType::Ethernet, &f).unwrap();
            d.push(ts, &dec);
        };
        // Handshake: 2 ms round trip.
        push(0, frame(1, 40000, 2, 80, flags::SYN, 0));
        push(
            2_000_000,
            frame(2, 80, 1, 40000, flags::SYN | flags::ACK, 0),
        );
        // Three requests, each answered by 200 KB at 8 Mbit/s on the wire (1,514 B a segment:
        // 1.514 ms).
        let mut t = 3_000_000;
        for _ in 0..3 {
            push(t, frame(1, 40000, 2, 80, flags::ACK | flags::PSH, 100));
            t += 2_000_000;
            for _ in 0..139 {
                push(t, frame(2, 80, 1, 40000, flags::ACK, 1448));
                t += 1_514_000;
            }
        }
        let (rate, n) = d.rate().expect("three responses");
        assert_eq!(n, 3);
        assert!((rate - 8e6).abs() < 0.1e6, "{rate}");
    }

    #[test]
    fn without_a_handshake_in_the_capture_the_paths_round_trip_stands_in() {
        // A keep-alive connection set up before the capture began: no SYN to time.
        let run = |path_rtt| {
            let mut d = Delivery::new(80, path_rtt);
            let mut push = |ts: u64, f: Vec<u8>| {
                let dec =
                    latscope_wire::decode(latscope_wire::packet::LinkType::Ethernet, &f).unwrap();
                d.push(ts, &dec);
            };
            let mut t = 0;
            for _ in 0..2 {
                push(t, frame(1, 40000, 2, 80, flags::ACK | flags::PSH, 100));
                t += 2_000_000;
                for _ in 0..139 {
                    push(t, frame(2, 80, 1, 40000, flags::ACK, 1448));
                    t += 1_514_000;
                }
            }
            d.rate()
        };
        assert_eq!(run(None), None, "no round trip: nothing to settle by");
        let (rate, n) = run(Some(2_000_000)).expect("two responses");
        assert_eq!(n, 2);
        assert!((rate - 8e6).abs() < 0.1e6, "{rate}");
    }
}
