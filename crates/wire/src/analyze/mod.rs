//! TCP flow tracking, Wireshark-compatible segment analysis and the stall detectors.
//!
//! Memory is proportional to the connections open at once: each connection keeps a bounded
//! amount of state however long it lives (at most [`MAX_UNACKED`] entries of unacknowledged
//! data per direction, [`MAX_TX_WORST`] transactions — [`MAX_TX_KEPT`] for the connection
//! drawn with `--conn` — with exact counters for the rest); when it closes it is summarised
//! into a few counters (and, if it is among the `top` worst, a [`ConnSummary`]) and its state
//! is dropped. `crates/wire/tests/memory.rs` measures the bytes per open connection.
//!
//! ## Segment analysis
//! The classification follows Wireshark's `tcp_analyze_sequence_number()` (epan/dissectors/
//! packet-tcp.c, documented in the Wireshark User's Guide §7.5 "TCP Analysis"): relative
//! sequence numbers, "next expected sequence" per direction, the zero-window, lost-segment,
//! keep-alive, window-update, window-full, duplicate-ACK checks, then for segments that do not
//! advance the sequence: spurious (already ACKed) → fast retransmission (≥ 2 duplicate ACKs for
//! this sequence within 20 ms) → out-of-order (within the first RTT, 3 ms if unknown, of the
//! highest segment) → retransmission. Counts therefore match `tshark`'s `tcp.analysis.*`.
//!
//! ## Stall detectors (the rules, from the Linux TCP stack's behaviour)
//! * **Nagle × delayed ACK.** Nagle (RFC 896; Linux implements Minshall's variant in
//!   `tcp_nagle_check()`/`tcp_minshall_check()`) holds a sub-MSS segment while an earlier
//!   *sub-MSS* segment is unacknowledged. The receiver delays its ACK (RFC 1122 §4.2.3.2; Linux
//!   `TCP_DELACK_MIN` = 40 ms, up to 200 ms) unless it is in quick-ack mode, which it is at the
//!   start of a connection (`tcp_incr_quickack()`: up to 16 segments) and leaves once the
//!   exchange becomes interactive ("pingpong"). Evidence in a capture: a small segment D1, then
//!   a *pure* ACK from the peer that acknowledges exactly up to D1's end after ≥ 15 ms beyond the
//!   round trip, then the sender's next small segment D2 within one capture-point→sender round
//!   trip of that ACK (the ACK released it), with no peer data in between. That is why the first
//!   response of a keep-alive connection is fast and the following ones stall.
//! * **Delayed ACK without Nagle.** The same release by a delayed ACK, but D1 or D2 is
//!   full-sized: Nagle does not hold full segments, so the sender was limited by its congestion
//!   or receive window and an odd segment count left the receiver waiting for a second one.
//! * **TCP_CORK.** A small segment sent 180–260 ms after the sender's previous data with no
//!   packet from the peer in the preceding round trip: the kernel's 200 ms cork timer
//!   (`TCP_CORK` in tcp(7)) released it, not an ACK.
//! * **RTO retransmission.** Wireshark's plain "retransmission" (not fast, not spurious): a timer
//!   fired. Time lost is the gap since the original transmission.
//! * **Zero-window stall.** From the first zero-window advertisement to the next non-zero window
//!   from the same side.
//! * **Application think time.** Last request byte to first response byte, minus the round trip
//!   between the capture point and the server (from the handshake), when ≥ 10 ms.
//!
//! Where the capture was taken matters: near the server the ACK→release gap is microseconds,
//! near the client it is a full round trip. The handshake tells us: SYN→SYN-ACK is the round
//! trip to the server, SYN-ACK→ACK the round trip to the client.

mod detect;
mod detector;
mod evidence;
mod explain;
mod flow;
mod ipid;
mod ladder;
mod limits;
mod pipeline;
mod segment;
mod seq;
mod seqnum;
#[cfg(test)]
mod tests;
mod transaction;

use latscope_core::LatencyHistogram;
use latscope_core::model::analyze::{
    Analysis, CaptureQuality, ConnSummary, Ladder, SkipReason, Skipped, TcpCounts,
};
use latscope_core::summary::Summary;

use crate::packet::{Addr, Decoded, QuotedTcp, TcpView, Transport, flags};

pub use crate::fxhash::FxHasher;
pub use explain::explain;
pub use limits::{
    COALESCE_NS, DEFAULT_EXAMPLES, EXACT_UNACKED, MAX_LADDER_ROWS, MAX_TX_KEPT, MAX_TX_WORST,
    MAX_UNACKED,
};

use flow::{Conn, FlowKey, FlowTable, endpoint};
use pipeline::{Acc, RawSegment};

/// Options of one analysis run.
#[derive(Debug, Clone)]
pub struct AnalyzeOptions {
    /// Record the ladder of this connection index.
    pub trace_conn: Option<u64>,
    /// Keep full summaries of this many worst connections.
    pub top: usize,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            trace_conn: None,
            top: 20,
        }
    }
}

/// The streaming analyzer: feed frames with [`Analyzer::push`], then [`Analyzer::finish`].
pub struct Analyzer {
    opts: AnalyzeOptions,
    flows: FlowTable,
    frames: u64,
    tcp_frames: u64,
    udp_frames: u64,
    skipped: Skipped,
    first_ts: Option<u64>,
    last_ts: u64,
    counts: TcpCounts,
    acc: Acc,
    top: Vec<ConnSummary>,
    ladder_conn: Option<ConnSummary>,
    quality: CaptureQuality,
    /// The previous frame's timestamp (time going backwards is counted).
    prev_ts: Option<u64>,
}

impl Default for Analyzer {
    fn default() -> Self {
        Self::new(AnalyzeOptions::default())
    }
}

impl Analyzer {
    /// A fresh analyzer.
    pub fn new(opts: AnalyzeOptions) -> Self {
        Analyzer {
            opts,
            flows: FlowTable::default(),
            frames: 0,
            tcp_frames: 0,
            udp_frames: 0,
            skipped: Skipped::default(),
            first_ts: None,
            last_ts: 0,
            counts: TcpCounts::default(),
            acc: Acc::default(),
            top: Vec::new(),
            ladder_conn: None,
            quality: CaptureQuality::default(),
            prev_ts: None,
        }
    }

    /// Keep up to `n` examples per finding, the largest (default [`DEFAULT_EXAMPLES`]); the
    /// counts and times lost cover every stall whatever `n` is.
    pub fn keep_examples(&mut self, n: usize) {
        self.acc.stalls.examples_cap = n;
    }

    /// Connections tracked right now.
    pub fn open_connections(&self) -> u64 {
        self.flows.open
    }

    /// Feed one decoded (or undecodable) frame.
    #[inline]
    pub fn push(&mut self, frame: u64, ts_ns: u64, decoded: Result<Decoded<'_>, SkipReason>) {
        self.push_packets(frame, ts_ns, std::iter::once(decoded));
    }

    /// Feed one frame given as the packets it carries (one, or one per subframe of an 802.11
    /// A-MSDU: [`crate::packet::decode_packets`]). The frame counts once, as a TCP frame when
    /// any of its packets is TCP (as tshark counts it), else as UDP, else as skipped for the
    /// first packet's reason; every TCP segment is analysed.
    #[inline]
    pub fn push_packets<'a>(
        &mut self,
        frame: u64,
        ts_ns: u64,
        packets: impl IntoIterator<Item = Result<Decoded<'a>, SkipReason>>,
    ) {
        self.frames += 1;
        if self.first_ts.is_none() {
            self.first_ts = Some(ts_ns);
        }
        if ts_ns > self.last_ts {
            self.last_ts = ts_ns;
        }
        if self.prev_ts.is_some_and(|p| ts_ns < p) {
            self.quality.time_backwards += 1;
        }
        self.prev_ts = Some(ts_ns);
        let (mut tcp_seen, mut udp_seen, mut skip) = (false, false, None);
        for decoded in packets {
            match decoded {
                Ok(d) => match d.transport {
                    Transport::Tcp { tcp, payload_len } => {
                        if !tcp_seen {
                            self.tcp_frames += 1;
                            tcp_seen = true;
                        }
                        self.on_tcp(frame, ts_ns, &d, &tcp, payload_len);
                    }
                    Transport::Udp(_) => udp_seen = true,
                    Transport::IcmpTcp(q) => {
                        if !tcp_seen {
                            self.tcp_frames += 1;
                            tcp_seen = true;
                        }
                        self.on_icmp(frame, ts_ns, &d, &q);
                    }
                },
                Err(r) => {
                    skip.get_or_insert(r);
                }
            }
        }
        if !tcp_seen {
            if udp_seen {
                self.udp_frames += 1;
            } else {
                // A frame with no packet at all (an empty A-MSDU) carries no IP.
                self.skipped.add(skip.unwrap_or(SkipReason::NotIp));
            }
        }
        while let Some(c) = self.flows.expire_one(ts_ns) {
            self.finalize(c);
        }
    }

    /// The slot of the connection this segment belongs to, creating it if needed.
    fn conn_slot(
        &mut self,
        frame: u64,
        ts: u64,
        src: (Addr, u16),
        dst: (Addr, u16),
        tcp: &TcpView<'_>,
    ) -> Option<usize> {
        let fl = tcp.flags();
        let key = FlowKey::new(src.0, src.1, dst.0, dst.1);
        if let Some(i) = self.flows.slot(&key) {
            // A SYN with a new ISN starts a new connection (port reuse), as in Wireshark; one
            // with the connection's own ISN is a retransmission (an OS retrying a refused
            // connect after a RST) and stays in it. Without a captured SYN, a SYN after the
            // connection ended is a new one.
            let reuse = fl & (flags::SYN | flags::ACK) == flags::SYN
                && self.flows.get(i).is_some_and(|c| match c.client_isn {
                    Some(isn) => isn != tcp.seq(),
                    None => c.closed_at.is_some() || c.rst,
                });
            if !reuse {
                return Some(i);
            }
            if let Some(c) = self.flows.remove(&key) {
                self.finalize(c);
            }
        } else if fl & flags::SYN == 0 && self.flows.straggler(&key, ts) {
            // A straggler of a connection already expired (a FIN resent long after the close):
            // a TCP frame of that connection for tshark, no new one. Of its analysis only what
            // needs no state is counted: a zero window.
            if tcp.window() == 0 && fl & (flags::FIN | flags::RST) == 0 {
                self.counts.zero_window += 1;
            }
            return None;
        }
        let id = self.flows.next_id;
        if self.opts.trace_conn == Some(id) {
            self.acc.trace.base_ts = ts;
        }
        let mut c = Conn::new(id, frame, ts, src, dst, fl);
        if self.opts.trace_conn == Some(id) {
            c.tx_keep = MAX_TX_KEPT;
        }
        Some(self.flows.insert(key, c))
    }

    /// An ICMP error quoting a segment of a connection: counted with it (as tshark does, a new
    /// connection if none is known), and a "fragmentation needed" remembered for its sender —
    /// the ICMP a path MTU black hole lacks reached the capture.
    fn on_icmp(&mut self, frame: u64, ts: u64, d: &Decoded<'_>, q: &QuotedTcp) {
        let (src, dst) = ((d.src, q.src_port), (d.dst, q.dst_port));
        let key = FlowKey::new(src.0, src.1, dst.0, dst.1);
        let slot = match self.flows.slot(&key) {
            Some(i) => i,
            None => {
                let id = self.flows.next_id;
                self.flows
                    .insert(key, Conn::new(id, frame, ts, src, dst, flags::ACK))
            }
        };
        let Some(c) = self.flows.get_mut(slot) else {
            return;
        };
        c.frames += 1;
        c.last_ts = c.last_ts.max(ts);
        if q.mtu.is_some() {
            let d = usize::from(src != c.client);
            c.dirs[d].icmp_mtu = q.mtu;
        }
    }

    fn on_tcp(&mut self, frame: u64, ts: u64, d: &Decoded<'_>, tcp: &TcpView<'_>, seglen: u32) {
        let src = (d.src, tcp.src_port());
        let Some(slot) = self.conn_slot(frame, ts, src, (d.dst, tcp.dst_port()), tcp) else {
            return;
        };
        let Some(c) = self.flows.get_mut(slot) else {
            return;
        };
        let tracing = self.opts.trace_conn == Some(c.id);
        let raw = RawSegment {
            frame,
            ts,
            src,
            tcp,
            len: seglen,
            ip_id: d.ip_id,
        };
        self.acc.process(c, &raw, tracing);
        self.flows.note_closed(slot);
    }

    fn summarise(&self, c: &Conn) -> ConnSummary {
        let capture_point = match (c.rtt_to_server, c.rtt_to_client) {
            (Some(s), Some(cl)) if s.saturating_mul(4) < cl => "server",
            (Some(s), Some(cl)) if cl.saturating_mul(4) < s => "client",
            (Some(_), Some(_)) => "middle",
            _ => "unknown",
        };
        ConnSummary {
            id: c.id,
            client: endpoint(c.client),
            server: endpoint(c.server),
            first_frame: c.first_frame,
            duration_ns: c.last_ts.saturating_sub(c.first_ts),
            frames: c.frames,
            bytes_to_server: c.dirs[0].bytes,
            bytes_to_client: c.dirs[1].bytes,
            handshake_rtt_ns: c.first_rtt,
            capture_point: capture_point.into(),
            counts: c.counts.clone(),
            transactions: c.txs.clone(),
            transaction_count: c.tx_count,
            stall_lost_ns: c.stall_lost,
            end: if c.rst {
                "rst".into()
            } else if c.dirs[0].fin && c.dirs[1].fin {
                "fin".into()
            } else {
                "open".into()
            },
        }
    }

    /// A connection is done: fold it into the totals and keep it if it is among the worst.
    fn finalize(&mut self, mut c: Conn) {
        self.acc.close(&mut c);
        self.acc.tx.close(&mut c);
        let q = &mut self.quality;
        q.one_way_connections += u64::from(!c.both_directions());
        q.connections_with_gaps += u64::from(c.gap_ts.is_some());
        q.connections_without_handshake += u64::from(c.syn_ts.is_none() && c.synack_ts.is_none());
        self.counts.add(&c.counts);
        if self.opts.trace_conn == Some(c.id) {
            self.ladder_conn = Some(self.summarise(&c));
        }
        if self.opts.top == 0 {
            return;
        }
        if self.top.len() < self.opts.top {
            let s = self.summarise(&c);
            self.top.push(s);
        } else if let Some((mi, min)) = self
            .top
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| (s.stall_lost_ns, std::cmp::Reverse(s.id)))
        {
            if min.stall_lost_ns < c.stall_lost {
                let s = self.summarise(&c);
                self.top[mi] = s;
            }
        }
    }

    /// Close every open connection and build the result.
    pub fn finish(mut self) -> Analysis {
        // Finalize in connection order so the kept summaries are deterministic.
        for c in self.flows.drain() {
            self.finalize(c);
        }
        let mut top = std::mem::take(&mut self.top);
        top.sort_by(|a, b| b.stall_lost_ns.cmp(&a.stall_lost_ns).then(a.id.cmp(&b.id)));
        let ladder = self.opts.trace_conn.map(|_| Ladder {
            conn: self.ladder_conn.take(),
            rows: std::mem::take(&mut self.acc.trace.rows),
        });
        Analysis {
            frames: self.frames,
            tcp_frames: self.tcp_frames,
            udp_frames: self.udp_frames,
            skipped: self.skipped,
            capture_span_ns: self
                .last_ts
                .saturating_sub(self.first_ts.unwrap_or(self.last_ts)),
            connections: self.flows.next_id,
            peak_open_connections: self.flows.peak_open,
            counts: self.counts,
            transactions: self.acc.tx.total,
            transaction_time: summary(self.acc.tx.tx_hist.as_ref()),
            think_time: summary(self.acc.tx.think_hist.as_ref()),
            handshake_rtt: summary(self.acc.hs_hist.as_ref()),
            findings: self.acc.stalls.findings(),
            undecided: self.acc.stalls.undecided(),
            handshake_resends: self.acc.stalls.handshake,
            capture_quality: CaptureQuality {
                duplicate_frames: self.acc.duplicate_frames,
                ..self.quality
            },
            pmtu_black_hole: self.acc.stalls.pmtu.take(),
            top_connections: top,
            ladder,
        }
    }
}

fn summary(h: Option<&LatencyHistogram>) -> Option<Summary> {
    h.filter(|h| !h.is_empty()).map(LatencyHistogram::summary)
}
