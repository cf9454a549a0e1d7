//! What happens to one TCP segment, in order: handshake bookkeeping, relative sequence
//! numbers, the sequence analysis, the transaction tracker, every stall detector, then the
//! per-direction state the detectors look back at, and the ladder row.

use latscope_core::LatencyHistogram;
use latscope_core::model::analyze::LadderRow;

use crate::packet::{Addr, TcpView, flags};

use super::detect::DETECTORS;
use super::detector::{Sink, Stalls};
use super::flow::{Conn, DataSeg, RECENT_TSVALS};
use super::ipid::IdEvidence;
use super::ladder::{Notes, Trace, flag_string};
use super::limits::MAX_LADDER_ROWS;
use super::segment::{A_ACK_LOST, A_FAST, A_LOST, A_RESENT, A_RETRANS, Segment};
use super::seq;
use super::seqnum;
use super::transaction::TxStats;
use crate::handshake::SAME_PACKET_NS;

/// What the per-packet code accumulates across connections. Kept apart from the connection
/// table so a connection can be borrowed in place while this is updated (moving a connection
/// out of the table and back cost a quarter of the run time in memcpy).
#[derive(Default)]
pub(super) struct Acc {
    pub stalls: Stalls,
    pub tx: TxStats,
    pub hs_hist: Option<LatencyHistogram>,
    pub trace: Trace,
    /// Frames captured twice, so far.
    pub duplicate_frames: u64,
    /// Notes on the segment being processed, for the ladder.
    notes: Notes,
}

/// One TCP segment as decoded, before the analysis.
pub(super) struct RawSegment<'a, 'p> {
    pub frame: u64,
    pub ts: u64,
    pub src: (Addr, u16),
    pub tcp: &'a TcpView<'p>,
    pub len: u32,
    /// IPv4 identification (None for IPv6).
    pub ip_id: Option<u16>,
}

impl Acc {
    /// Run segment `raw` through the analysis of connection `c`; `tracing` records its ladder
    /// row.
    pub(super) fn process(&mut self, c: &mut Conn, raw: &RawSegment<'_, '_>, tracing: bool) {
        let d = usize::from(raw.src != c.client);
        c.frames += 1;
        // Time going backwards within a connection (merged or reordered captures): the
        // segment is analysed for the counts, but no detector times a gap across it.
        let backwards = raw.ts < c.last_ts;
        c.last_ts = c.last_ts.max(raw.ts);
        self.notes.on = tracing;
        self.notes.v.clear();
        if let Some(rtt) = handshake(c, d, raw) {
            self.hs_hist
                .get_or_insert_with(LatencyHistogram::new)
                .record(rtt.max(1));
        }
        let mut s = relative(c, d, raw);
        s.echoes_unseen = timestamp_evidence(c, &s);
        // RFC 9293 §3.10.7: no stack sends a SYN with FIN or RST.
        if s.flags & flags::SYN != 0 && s.flags & (flags::FIN | flags::RST) != 0 {
            c.crafted = true;
        }
        let advances = s.len > 0 && (c.dirs[d].nextseq == 0 || s.seq == c.dirs[d].nextseq);
        s.duplicate = is_duplicate(c, raw, &s);
        if !s.duplicate {
            s.id_evidence = id_evidence(c, &s);
        }
        if s.duplicate {
            self.duplicate_frames += 1;
            self.notes.push(|| "captured twice".to_string());
        }
        let o = seq::analyze(c, &s, &mut self.notes);
        s.analysis = o.flags;
        s.rto_since = o.rto_since;
        if o.flags & (A_LOST | A_ACK_LOST) != 0 {
            // Segments were not captured: the transaction in progress cannot be timed, and no
            // release is credited across the gap.
            c.gap_ts = Some(s.ts);
            self.tx.abandon(c);
        }
        if !s.duplicate && !backwards {
            s.new_data = s.len > 0 && o.flags & A_RESENT == 0 && advances;
            if s.new_data {
                let (idle, lag) = (
                    s.ts.saturating_sub(c.dirs[d].last_data_ts),
                    s.ts.saturating_sub(c.dirs[1 - d].last_pkt_ts),
                );
                c.dirs[d].cadence.on_data(s.ts, idle, lag);
                c.on_line(d, super::flow::text_line(s.payload));
                s.held = held_segment(c, &s);
                s.first_response = self.tx.on_data(c, d, s.frame, s.ts, s.payload, s.tsecr);
            } else if d == 0 && s.len > 0 && s.analysis & (A_RETRANS | A_FAST) != 0 {
                self.tx.on_request_resent(c, s.ts, s.tsval);
            }
            if d == 1 && s.len == 0 && s.flags & flags::ACK != 0 && s.ack == c.dirs[0].nextseq {
                self.tx.on_server_ack(c, s.ts);
            }
            let mut sink = Sink {
                stalls: &mut self.stalls,
                notes: &mut self.notes,
                trace: &mut self.trace,
            };
            for det in DETECTORS {
                det.inspect(&s, c, &mut sink);
            }
        }
        // The connection's state (its end included) follows every frame, as Wireshark's does.
        after_segment(c, &s);
        if tracing && self.trace.rows.len() < MAX_LADDER_ROWS {
            self.trace.rows.push(LadderRow {
                frame: s.frame,
                t_ns: s.ts.saturating_sub(self.trace.base_ts),
                from_client: d == 0,
                flags: flag_string(s.flags),
                seq: s.seq,
                ack: s.ack,
                len: s.len,
                win: s.window,
                notes: std::mem::take(&mut self.notes.v),
            });
        }
    }
}

impl Acc {
    /// Connection `c` ends: settle what the detectors held back.
    pub(super) fn close(&mut self, c: &mut Conn) {
        let mut sink = Sink {
            stalls: &mut self.stalls,
            notes: &mut self.notes,
            trace: &mut self.trace,
        };
        for det in DETECTORS {
            det.close(c, &mut sink);
        }
    }
}

/// Handshake timing and options; returns the handshake RTT (SYN → ACK of the SYN-ACK) when
/// this segment completes it.
fn handshake(c: &mut Conn, d: usize, raw: &RawSegment<'_, '_>) -> Option<u64> {
    let (r, ts, fl) = (1 - d, raw.ts, raw.tcp.flags());
    let ackf = fl & flags::ACK != 0;
    if fl & flags::SYN != 0 {
        let o = raw.tcp.options();
        let fwd = &mut c.dirs[d];
        // A lone MSS fits every stack's order: the layout tells only with more options.
        let telling = o.sack_permitted || o.timestamps.is_some() || o.wscale.is_some();
        fwd.linux_syn = Some(telling && raw.tcp.syn_options_in_linux_order());
        fwd.mss_opt = o.mss;
        fwd.timestamps = o.timestamps.is_some();
        fwd.win_scale = o.wscale.map_or(-1, |w| w as i8);
        // Wireshark's verify_tcp_window_scaling().
        if fwd.win_scale == -1 {
            c.dirs[d].win_scale = -2;
            c.dirs[r].win_scale = -2;
        } else if ackf && c.dirs[r].win_scale == -2 {
            c.dirs[d].win_scale = -2;
        }
        if ackf {
            if let Some(s) = c.syn_ts {
                c.synack_ts = Some(ts);
                c.rtt_to_server.get_or_insert(ts.saturating_sub(s));
            }
        } else {
            c.syn_ts = Some(ts);
            c.client_isn = Some(raw.tcp.seq());
            // The same SYN again after a RST (a retried refused connect): the connection
            // goes on.
            if c.rst {
                c.rst = false;
                c.closed_at = None;
            }
        }
        return None;
    }
    // The handshake completes with the client's ACK; a RST answering the SYN (a refused
    // connect) completes nothing.
    if !ackf || fl & flags::RST != 0 || c.first_rtt.is_some() {
        return None;
    }
    let s = c.syn_ts?;
    let rtt = ts.saturating_sub(s);
    c.first_rtt = Some(rtt);
    if let Some(sa) = c.synack_ts {
        c.rtt_to_client = Some(ts.saturating_sub(sa));
    }
    Some(rtt)
}

/// The segment with relative sequence numbers and the scaled window, as Wireshark shows them.
fn relative<'p>(c: &mut Conn, d: usize, raw: &RawSegment<'_, 'p>) -> Segment<'p> {
    let r = 1 - d;
    let (tcp, fl) = (raw.tcp, raw.tcp.flags());
    let (syn, ackf) = (fl & flags::SYN != 0, fl & flags::ACK != 0);
    let (raw_seq, raw_ack) = (tcp.seq(), tcp.ack());
    if !c.dirs[d].base_set {
        c.dirs[d].base = if syn {
            raw_seq
        } else {
            raw_seq.wrapping_sub(1)
        };
        c.dirs[d].base_set = true;
    }
    if ackf && !c.dirs[r].base_set {
        c.dirs[r].base = raw_ack.wrapping_sub(1);
        c.dirs[r].base_set = true;
    }
    let raw_win = u32::from(tcp.window());
    let o = tcp.options();
    // A D-SACK (RFC 2883): the first SACK block lies below the cumulative ACK (or inside the
    // second block), reporting data the receiver got twice.
    let peer_base = c.dirs[r].base;
    let dsack = o
        .first_sack
        .filter(|&(left, _)| ackf && seqnum::lt(left, raw_ack))
        .map(|(left, right)| (left.wrapping_sub(peer_base), right.wrapping_sub(peer_base)));
    Segment {
        frame: raw.frame,
        ts: raw.ts,
        d,
        seq: raw_seq.wrapping_sub(c.dirs[d].base),
        ack: if ackf {
            raw_ack.wrapping_sub(c.dirs[r].base)
        } else {
            0
        },
        len: raw.len,
        flags: fl,
        raw_win,
        window: if syn || c.dirs[d].win_scale < 0 {
            raw_win
        } else {
            raw_win << c.dirs[d].win_scale
        },
        payload: tcp.payload(),
        analysis: 0,
        rto_since: None,
        new_data: false,
        held: None,
        first_response: None,
        duplicate: false,
        ip_id: raw.ip_id,
        id_evidence: IdEvidence::Uncounted,
        echoes_unseen: false,
        tsval: o.timestamps.map(|t| t.0),
        tsecr: o.timestamps.map(|t| t.1),
        dsack,
    }
}

/// What the TCP timestamps (RFC 7323) show of the capture itself: a TSecr newer than every
/// TSval of the peer captured so far, or one within the peer's latest captured TSvals but
/// none of them, echoes a packet of the peer's the capture missed (a capture that drops
/// packets, or one side's packets on another path). Returns whether `s` shows one.
fn timestamp_evidence(c: &mut Conn, s: &Segment<'_>) -> bool {
    let mut unseen = false;
    if let (Some(ecr), true) = (s.tsecr, s.flags & flags::ACK != 0) {
        let peer = &mut c.dirs[1 - s.d];
        let recent = &peer.recent_tsvals[..usize::from(peer.recent_len)];
        let newer = peer.max_tsval.is_some_and(|m| seqnum::gt(ecr, m));
        let between = recent.len() == RECENT_TSVALS
            && recent.iter().any(|&v| seqnum::lt(v, ecr))
            && !recent.contains(&ecr);
        if newer || between {
            peer.unseen_pkts_ts = Some(s.ts);
            unseen = true;
        }
    }
    if let Some(v) = s.tsval {
        let own = &mut c.dirs[s.d];
        if own.max_tsval.is_none_or(|m| seqnum::gt(v, m)) {
            own.max_tsval = Some(v);
        }
        let n = usize::from(own.recent_len);
        if n > 0 && own.recent_tsvals[n - 1] == v {
            return unseen;
        }
        if n < RECENT_TSVALS {
            own.recent_tsvals[n] = v;
            own.recent_len += 1;
        } else {
            own.recent_tsvals.rotate_left(1);
            own.recent_tsvals[RECENT_TSVALS - 1] = v;
        }
    }
    unseen
}

/// What segment `s`'s IPv4 identification says about its sender's packets since the previous
/// one captured (a frame of several segments merged by TSO/GRO steps the counter by each).
fn id_evidence(c: &mut Conn, s: &Segment<'_>) -> IdEvidence {
    let smss = c.sender_mss(s.d).max(1);
    let prev = c.dirs[s.d].last_pkt_len;
    let segs = u16::try_from(prev.div_ceil(smss)).unwrap_or(u16::MAX);
    c.dirs[s.d].ip_ids.on_packet(s.ip_id, segs)
}

/// The same frame captured twice (on two interfaces or VLANs, or before and after a router
/// that lowered the TTL by one): the same IPv4 identification, sequence and acknowledgement
/// numbers, length, flags and window as this side's previous segment. A real retransmission
/// carries a new identification. IPv6 has none (nor does IPv4 with identification 0): there
/// the TCP timestamp must match too, and the copy follow within [`SAME_PACKET_NS`] — a
/// duplicate ACK without timestamps cannot be told from a copy and is taken as sent.
fn is_duplicate(c: &mut Conn, raw: &RawSegment<'_, '_>, s: &Segment<'_>) -> bool {
    let id = raw.ip_id.unwrap_or(0);
    let key = (id, s.seq, s.ack, s.len, s.flags, s.raw_win, s.tsval, raw.ts);
    let dir = &mut c.dirs[s.d];
    let prev = dir.last_seg_key.replace(key);
    prev.is_some_and(|p| {
        let same = (p.0, p.1, p.2, p.3, p.4, p.5, p.6)
            == (key.0, key.1, key.2, key.3, key.4, key.5, key.6);
        same && (id != 0 || (s.tsval.is_some() && raw.ts.abs_diff(p.7) < SAME_PACKET_NS))
    })
}

/// Remember new data segment `s` as the sender's latest; return the one before it, unless the
/// sender retransmitted since.
fn held_segment(c: &mut Conn, s: &Segment<'_>) -> Option<DataSeg> {
    let acked = c.dirs[1 - s.d].lastack;
    let dir = &mut c.dirs[s.d];
    let in_flight = dir.nextseq.wrapping_sub(acked);
    let prev = dir.last_data.replace(DataSeg {
        ts: s.ts,
        frame: s.frame,
        len: s.len,
        end: dir.nextseq,
        in_flight,
        max_in_flight_before: dir.max_in_flight,
    });
    dir.max_in_flight = dir.max_in_flight.max(in_flight);
    let prev = prev?;
    if dir.last_rexmit_ts.is_some_and(|t| t >= prev.ts) {
        return None;
    }
    Some(prev)
}

/// The per-direction state the detectors look back at, and the connection's end.
fn after_segment(c: &mut Conn, s: &Segment<'_>) {
    let sfr = s.flags & (flags::SYN | flags::FIN | flags::RST);
    let fwd = &mut c.dirs[s.d];
    fwd.seen = true;
    fwd.last_pkt_tsval = s.tsval;
    fwd.last_pkt_ts = s.ts;
    fwd.last_pkt_frame = s.frame;
    fwd.last_pkt_len = s.len;
    fwd.last_pkt_ack = s.ack;
    fwd.last_pkt_pure_ack = s.len == 0 && sfr == 0 && s.flags & flags::ACK != 0;
    if s.len > 0 {
        fwd.bytes += u64::from(s.len);
        fwd.max_seg = fwd.max_seg.max(s.len);
        if s.len <= super::flow::ETHERNET_MSS {
            fwd.max_eth_seg = fwd.max_eth_seg.max(s.len);
        }
        fwd.last_data_ts = s.ts;
    }
    if s.flags & flags::FIN != 0 {
        fwd.fin = true;
    }
    let rev = &mut c.dirs[1 - s.d];
    if s.flags & flags::ACK != 0 && rev.fin && s.ack == rev.nextseq {
        rev.fin_acked = true;
    }
    if s.flags & flags::RST != 0 {
        c.rst = true;
        c.closed_at.get_or_insert(s.ts);
    }
    if c.dirs[0].fin && c.dirs[1].fin && c.closed_at.is_none() {
        c.closed_at = Some(s.ts);
    }
}
