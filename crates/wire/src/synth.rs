//! A synthetic traffic generator for the `analyze` benchmark and scale tests: many concurrent
//! HTTP/1.1 keep-alive connections (handshake, requests, multi-segment responses, ACKs every
//! second segment, FIN), with planted Nagle × delayed ACK stalls, timer retransmissions and slow
//! servers, whose counts are returned so the analyzer can be checked against ground truth.
//! Frames are cut at 96 bytes like `tcpdump -s 96` (the IP length still says how long they
//! were), which keeps multi-million-packet files small.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Write};

use crate::{LinkType, PcapWriter};

const SNAP: usize = 96;
const MSS: u32 = 1448;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy)]
struct Pkt {
    from_client: bool,
    flags: u8,
    len: u32,
    /// Sequence offset override (for retransmissions): bytes to step back.
    rewind: u32,
    gap_ns: u64,
    http: u8,
    /// Planted pattern this packet completes: 1 Nagle release, 2 timer retransmission,
    /// 3 first response after a slow (≥ 30 ms) server.
    tag: u8,
}

struct Conn {
    client: [u8; 4],
    cport: u16,
    server: [u8; 4],
    cseq: u32,
    sseq: u32,
    rtt: u64,
    script: Vec<Pkt>,
    pos: usize,
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH: u8 = 0x08;
const FIN: u8 = 0x01;

fn pkt(from_client: bool, flags: u8, len: u32, gap_ns: u64) -> Pkt {
    Pkt {
        from_client,
        flags,
        len,
        rewind: 0,
        gap_ns,
        http: 0,
        tag: 0,
    }
}

/// A connection's whole life: handshake, 1–8 requests, FIN close.
fn script(rng: &mut Rng, rtt: u64) -> Vec<Pkt> {
    let mut s = vec![
        pkt(true, SYN, 0, 0),
        pkt(false, SYN | ACK, 0, rtt / 2),
        pkt(true, ACK, 0, rtt / 2),
    ];
    let reqs = 1 + rng.below(8);
    requests(rng, rtt, reqs, true, &mut s);
    s.push(pkt(true, FIN | ACK, 0, 5_000_000));
    s.push(pkt(false, FIN | ACK, 0, rtt / 2));
    s.push(pkt(true, ACK, 0, rtt / 2));
    s
}

/// `reqs` keep-alive request/response exchanges (`first`: the first follows the handshake).
fn requests(rng: &mut Rng, rtt: u64, reqs: u64, first: bool, s: &mut Vec<Pkt>) {
    let p = pkt;
    for r in 0..reqs {
        let first = first && r == 0;
        let mut q = p(
            true,
            ACK | PSH,
            200 + rng.below(300) as u32,
            // Keep-alive clients pause between requests (the first follows the handshake):
            // ~100 k packets/s for 2000 connections, a realistic rate for the linger window.
            if first {
                1_000_000 + rng.below(20_000_000)
            } else {
                50_000_000 + rng.below(450_000_000)
            },
        );
        q.http = 1;
        s.push(q);
        let think = if rng.below(50) == 0 {
            30_000_000 + rng.below(100_000_000)
        } else {
            50_000 + rng.below(2_000_000)
        };
        let nagle = !first && rng.below(40) == 0;
        if nagle {
            // Header, delayed ACK 40 ms later, then the held body.
            let mut h = p(false, ACK | PSH, 180, think);
            h.http = 2;
            if think >= 30_000_000 {
                h.tag = 3;
            }
            s.push(h);
            s.push(p(true, ACK, 0, 40_000_000 + rng.below(2_000_000)));
            // The ACK reaches the server and the body comes back: one capture-point→server
            // round trip (SYN→SYN-ACK, rtt / 2 here) after the ACK, plus the server's 30 µs.
            let mut body = p(false, ACK | PSH, 900, rtt / 2 + 30_000);
            body.tag = 1;
            s.push(body);
            s.push(p(true, ACK, 0, rtt));
            continue;
        }
        response(rng, rtt, think, s);
    }
}

/// A response of 1–24 segments after `think`, ACKed every second segment, with the odd timer
/// retransmission.
fn response(rng: &mut Rng, rtt: u64, think: u64, s: &mut Vec<Pkt>) {
    let segs = 1 + rng.below(24) as u32;
    for i in 0..segs {
        let len = if i + 1 == segs {
            1 + rng.below(u64::from(MSS)) as u32
        } else {
            MSS
        };
        let mut d = pkt(
            false,
            ACK | if i + 1 == segs { PSH } else { 0 },
            len,
            if i == 0 { think } else { 12_000 },
        );
        if i == 0 {
            d.http = 2;
            if think >= 30_000_000 {
                d.tag = 3;
            }
        }
        s.push(d);
        if rng.below(300) == 0 {
            // Timer retransmission of the segment just sent.
            let mut rt = d;
            rt.rewind = len;
            rt.gap_ns = 200_000_000 + rng.below(100_000_000);
            rt.http = 0;
            rt.tag = 2;
            s.push(rt);
        }
        if i % 2 == 1 || i + 1 == segs {
            s.push(pkt(true, ACK, 0, rtt / 2));
        }
    }
}

/// Append an IPv4 header for a TCP packet of `total` bytes from `src` to `dst`: no options,
/// don't fragment, TTL 64, checksum left 0 (captures of offloaded sends carry none either).
pub(crate) fn ipv4_tcp_header(buf: &mut Vec<u8>, total: usize, src: [u8; 4], dst: [u8; 4]) {
    buf.extend_from_slice(&[0x45, 0]);
    buf.extend_from_slice(&(total as u16).to_be_bytes());
    buf.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
    buf.extend_from_slice(&src);
    buf.extend_from_slice(&dst);
}

fn frame(c: &Conn, k: &Pkt, buf: &mut Vec<u8>) -> u32 {
    buf.clear();
    buf.extend_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00]);
    let total = 40 + k.len;
    let (src, dst, sp, dp) = if k.from_client {
        (c.client, c.server, c.cport, 80u16)
    } else {
        (c.server, c.client, 80u16, c.cport)
    };
    ipv4_tcp_header(buf, total as usize, src, dst);
    let (seq, ack) = if k.from_client {
        (c.cseq, c.sseq)
    } else {
        (c.sseq, c.cseq)
    };
    let seq = seq.wrapping_sub(k.rewind);
    buf.extend_from_slice(&sp.to_be_bytes());
    buf.extend_from_slice(&dp.to_be_bytes());
    buf.extend_from_slice(&seq.to_be_bytes());
    buf.extend_from_slice(&(if k.flags & ACK != 0 { ack } else { 0 }).to_be_bytes());
    buf.extend_from_slice(&[0x50, k.flags, 0xff, 0xff, 0, 0, 0, 0]);
    match k.http {
        1 => buf.extend_from_slice(b"GET /item HTTP/1.1\r\nHost: bench\r\n\r\n"),
        2 => buf.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"),
        _ => {}
    }
    buf.resize((14 + total as usize).min(SNAP), 0);
    14 + total
}

/// What [`generate`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Planted {
    /// Packets written.
    pub packets: u64,
    /// Connections started.
    pub connections: u64,
    /// Nagle × delayed ACK stalls completed in the file.
    pub nagle_delayed_ack: u64,
    /// Timer retransmissions.
    pub rto_retransmission: u64,
    /// Responses after a ≥ 30 ms server think time.
    pub think_time: u64,
}

/// The shape of the traffic [`generate_shape`] writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    /// Connections never close: after the handshake they make requests for as long as the
    /// capture lasts (a connection pool), so every connection is open over the whole span.
    pub persistent: bool,
    /// Only the server → client direction is captured (asymmetric routing): no ACK of the
    /// server's data is ever seen, so nothing it sends leaves the unacknowledged lists.
    pub one_way: bool,
}

/// Write `packets` packets of `concurrent` simultaneous connections as pcap into `out`.
pub fn generate<W: Write>(
    out: W,
    packets: u64,
    concurrent: usize,
    seed: u64,
) -> io::Result<Planted> {
    generate_shape(out, packets, concurrent, seed, Shape::default())
}

/// [`generate`], for traffic of the given [`Shape`]. With [`Shape::one_way`] only the
/// server's packets are written (and counted in [`Planted::packets`]); the planted stalls
/// are counted as sent.
pub fn generate_shape<W: Write>(
    out: W,
    packets: u64,
    concurrent: usize,
    seed: u64,
    shape: Shape,
) -> io::Result<Planted> {
    let target = packets;
    let concurrent = concurrent.max(1);
    let mut rng = Rng(seed | 1);
    let mut w = PcapWriter::new(out, LinkType::Ethernet, SNAP as u32)?;
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut conns: Vec<Conn> = Vec::with_capacity(concurrent);
    let mut n_conns: u64 = 0;
    let t0: u64 = 1_700_000_000_000_000_000;
    let new_conn = |rng: &mut Rng, n: u64| {
        let (cseq, sseq) = (rng.next() as u32, rng.next() as u32);
        let rtt = 200_000 + rng.below(800_000);
        let mut script = script(rng, rtt);
        if shape.persistent {
            // Up to the close, which never comes: more requests are appended as it runs.
            script.truncate(script.len() - 3);
        }
        Conn {
            client: [10, (n >> 16) as u8, (n >> 8) as u8, n as u8],
            cport: 1024 + (n % 60000) as u16,
            server: [192, 168, 0, 1 + (n % 8) as u8],
            cseq,
            sseq,
            rtt,
            script,
            pos: 0,
        }
    };
    for i in 0..concurrent {
        conns.push(new_conn(&mut rng, n_conns));
        n_conns += 1;
        heap.push(Reverse((t0 + rng.below(10_000_000), i)));
    }
    let mut written = 0u64;
    let mut planted = [0u64; 4];
    let mut started = 0u64;
    let mut buf = Vec::with_capacity(SNAP);
    while written < target {
        let Some(Reverse((ts, i))) = heap.pop() else {
            break;
        };
        let c = &mut conns[i];
        let k = c.script[c.pos];
        let orig = frame(c, &k, &mut buf);
        if !(shape.one_way && k.from_client) {
            w.write_frame(ts, orig, &buf)?;
            written += 1;
        }
        planted[usize::from(k.tag)] += 1;
        if k.flags == SYN {
            started += 1;
        }
        let adv = k.len + u32::from(k.flags & (SYN | FIN) != 0);
        if k.rewind == 0 {
            if k.from_client {
                c.cseq = c.cseq.wrapping_add(adv);
            } else {
                c.sseq = c.sseq.wrapping_add(adv);
            }
        }
        c.pos += 1;
        if c.pos == c.script.len() && shape.persistent {
            c.script.clear();
            c.pos = 0;
            requests(&mut rng, c.rtt, 8, false, &mut c.script);
        }
        if c.pos == c.script.len() {
            *c = new_conn(&mut rng, n_conns);
            n_conns += 1;
            heap.push(Reverse((ts + 1_000 + rng.below(1_000_000), i)));
        } else {
            let gap = c.script[c.pos].gap_ns.max(1);
            heap.push(Reverse((ts + gap, i)));
        }
    }
    w.flush()?;
    Ok(Planted {
        packets: written,
        connections: started,
        nagle_delayed_ack: planted[1],
        rto_retransmission: planted[2],
        think_time: planted[3],
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::{AnalyzeOptions, Analyzer, CaptureReader, analyze_capture};
    use std::sync::atomic::AtomicBool;

    /// The analyzer finds exactly what was planted, and keeps only the open connections.
    #[test]
    fn analyzer_finds_planted_stalls() {
        let mut buf = Vec::new();
        let p = generate(&mut buf, 800_000, 300, 42).unwrap();
        assert_eq!(p.packets, 800_000);
        assert!(
            p.nagle_delayed_ack > 10 && p.rto_retransmission > 10 && p.think_time > 10,
            "{p:?}"
        );
        let mut a = Analyzer::new(AnalyzeOptions::default());
        analyze_capture(
            CaptureReader::new(&buf[..]).unwrap(),
            &mut a,
            &AtomicBool::new(false),
            |_| {},
        )
        .unwrap();
        let r = a.finish();
        assert_eq!(r.frames, p.packets);
        assert_eq!(r.connections, p.connections);
        // Memory follows the open connections plus those closed within the linger window
        // (2 s of capture time), not the file: here ~1000 tracked at most of ~8700.
        assert!(
            r.peak_open_connections * 6 < r.connections,
            "peak {} ({} s captured), 300 concurrent",
            latscope_core::units::of(r.peak_open_connections, r.connections, "connection"),
            r.capture_span_ns / 1_000_000_000
        );
        let count = |k| {
            r.findings
                .iter()
                .find(|f| f.kind == k)
                .map_or(0, |f| f.count)
        };
        use latscope_core::model::analyze::StallKind::*;
        assert_eq!(count(NagleDelayedAck), p.nagle_delayed_ack);
        assert_eq!(count(RtoRetransmission), p.rto_retransmission);
        assert_eq!(r.counts.retransmission, p.rto_retransmission);
        assert_eq!(count(DelayedAck), 0);
        assert_eq!(count(Cork), 0);
        // Every slow server is found; a few fast ones may cross 10 ms only if planted ≥ 30 ms.
        assert_eq!(count(ThinkTime), p.think_time);
    }
}
