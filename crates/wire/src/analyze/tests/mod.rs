//! The analyzer on hand-built segment sequences.

mod proof;

use latscope_core::model::analyze::StallKind;

use super::*;
use crate::packet::tests::eth_ipv4_tcp;
use crate::packet::{LinkType, decode};

struct Sim {
    a: Analyzer,
    frame: u64,
    cseq: u32,
    sseq: u32,
    /// IPv4 identification of the next packet of the client and of the server, when the
    /// test wants each side to count its packets (otherwise 0, as for DF packets of stacks
    /// that leave it so).
    ids: Option<[u16; 2]>,
}
const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [10, 0, 0, 2];

impl Sim {
    fn new() -> Self {
        Sim {
            a: Analyzer::new(AnalyzeOptions {
                trace_conn: Some(0),
                top: 10,
            }),
            frame: 0,
            cseq: 1000,
            sseq: 5000,
            ids: None,
        }
    }
    fn pkt(&mut self, ms: f64, from_client: bool, fl: u8, payload: &[u8], opts: &[u8]) {
        self.frame += 1;
        let (src, dst, sp, dp, seq, ack) = if from_client {
            (C, S, 40000, 80, self.cseq, self.sseq)
        } else {
            (S, C, 80, 40000, self.sseq, self.cseq)
        };
        let mut f = eth_ipv4_tcp(src, dst, sp, dp, seq, ack, fl, 1000, opts, payload);
        if let Some(ids) = &mut self.ids {
            let id = &mut ids[usize::from(!from_client)];
            f[18..20].copy_from_slice(&id.to_be_bytes());
            // A frame of several segments (TSO/GRO) used one number per segment.
            let segs = payload.len().div_ceil(1460).max(1);
            *id = id.wrapping_add(u16::try_from(segs).unwrap_or(1));
        }
        let adv = payload.len() as u32 + u32::from(fl & (flags::SYN | flags::FIN) != 0);
        if from_client {
            self.cseq += adv;
        } else {
            self.sseq += adv;
        }
        let ts = (ms * 1e6) as u64;
        self.a.push(self.frame, ts, decode(LinkType::Ethernet, &f));
    }
    /// Each side's IPv4 identification counts its packets from here on.
    fn count_ids(&mut self) {
        self.ids = Some([0x100, 0x9000]);
    }
    /// A packet of one side that used its next identification but was never captured.
    fn sent_unseen(&mut self, from_client: bool) {
        if let Some(ids) = &mut self.ids {
            let id = &mut ids[usize::from(!from_client)];
            *id = id.wrapping_add(1);
        }
    }
    fn handshake(&mut self) {
        let mss = [2, 4, 0x05, 0xb4];
        self.pkt(0.0, true, flags::SYN, b"", &mss);
        self.pkt(0.1, false, flags::SYN | flags::ACK, b"", &mss);
        self.pkt(0.2, true, flags::ACK, b"", &[]);
    }
}

#[test]
fn nagle_delayed_ack_is_flagged_and_first_is_not() {
    let mut s = Sim::new();
    s.handshake();
    let a = flags::ACK | flags::PSH;
    // Transaction 1: quick ACK → body follows at once.
    s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
    s.pkt(1.1, false, a, b"HTTP/1.1 200 OK\r\n", &[]);
    s.pkt(1.2, true, flags::ACK, b"", &[]);
    s.pkt(1.3, false, a, b"body", &[]);
    // Transaction 2: ACK delayed 40 ms → body released right after it.
    s.pkt(10.0, true, a, b"GET /2 HTTP/1.1\r\n\r\n", &[]);
    s.pkt(10.1, false, a, b"HTTP/1.1 200 OK\r\n", &[]);
    s.pkt(50.1, true, flags::ACK, b"", &[]);
    s.pkt(50.2, false, a, b"body", &[]);
    s.pkt(60.0, true, flags::ACK, b"", &[]);
    let r = s.a.finish();
    assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
    let f = &r.findings[0];
    assert_eq!(f.kind, StallKind::NagleDelayedAck);
    assert_eq!(f.count, 1);
    assert_eq!(f.examples[0].frame, 11);
    assert_eq!(f.examples[0].since_frame, 9);
    let conn = &r.top_connections[0];
    assert_eq!(conn.transactions.len(), 2);
    assert_eq!(conn.transactions[0].stall, None);
    assert_eq!(conn.transactions[1].stall, Some(StallKind::NagleDelayedAck));
    assert_eq!(conn.transactions[1].http_request, "GET /2 HTTP/1.1");
    assert_eq!(conn.transactions[1].http_status, Some(200));
    let ladder = r.ladder.unwrap();
    assert!(
        ladder
            .rows
            .iter()
            .any(|r| r.frame == 11 && r.notes.iter().any(|n| n.contains("STALL")))
    );
}

/// The same split response seen from either end of a 20 ms path: the rule uses the
/// handshake to place the capture point, so both are flagged, and the time lost is the
/// delayed-ACK wait as seen there.
#[test]
fn nagle_seen_from_client_side_and_server_side() {
    let mss = [2, 4, 0x05, 0xb4];
    let a = flags::ACK | flags::PSH;
    // (SYN-ACK time, ACK time, header, delayed ACK, body, the request before the header,
    // the first exchange's answer after its question) as seen at the capture point: near the
    // client, each answer of the server shows a round trip after the question.
    for (name, t) in [
        ("client side", [20.0, 20.01, 50.0, 90.0, 110.0, 25.0, 21.0]),
        ("server side", [0.01, 20.01, 30.01, 90.0, 90.02, 5.0, 1.0]),
    ] {
        let mut s = Sim::new();
        s.pkt(0.0, true, flags::SYN, b"", &mss);
        s.pkt(t[0], false, flags::SYN | flags::ACK, b"", &mss);
        s.pkt(t[1], true, flags::ACK, b"", &[]);
        // First exchange, quick ACK.
        s.pkt(t[1] + 1.0, true, a, b"GET /0 HTTP/1.1\r\n\r\n", &[]);
        s.pkt(t[1] + 1.0 + t[6], false, a, b"HTTP/1.1 200 OK\r\n", &[]);
        s.pkt(t[1] + 2.0 + t[6], true, flags::ACK, b"", &[]);
        s.pkt(t[1] + 2.1 + t[6], false, a, b"body", &[]);
        // Second exchange, delayed ACK.
        s.pkt(
            t[2] - t[5] + 100.0,
            true,
            a,
            b"GET /1 HTTP/1.1\r\n\r\n",
            &[],
        );
        s.pkt(t[2] + 100.0, false, a, b"HTTP/1.1 200 OK\r\n", &[]);
        s.pkt(t[3] + 100.0, true, flags::ACK, b"", &[]);
        s.pkt(t[4] + 100.0, false, a, b"body", &[]);
        let r = s.a.finish();
        let f: Vec<_> = r.findings.iter().map(|f| (f.kind, f.count)).collect();
        assert_eq!(f, vec![(StallKind::NagleDelayedAck, 1)], "{name}");
        let lost = r.findings[0].lost_ns as f64 / 1e6;
        assert!(
            (lost - (t[4] - t[2])).abs() < 0.01,
            "{name}: lost {lost} ms"
        );
        let cp = &r.top_connections[0].capture_point;
        assert_eq!(
            cp,
            if name == "client side" {
                "client"
            } else {
                "server"
            }
        );
    }
}

#[test]
fn delayed_ack_without_nagle_when_segments_are_full() {
    let mut s = Sim::new();
    s.handshake();
    let a = flags::ACK;
    s.pkt(1.0, true, a | flags::PSH, b"GET /big HTTP/1.1\r\n\r\n", &[]);
    // Full-sized segment (MSS 1460): Nagle never holds it; the sender was window-limited.
    s.pkt(1.1, false, a, &[0u8; 1460], &[]);
    s.pkt(41.1, true, a, b"", &[]);
    s.pkt(41.2, false, a, &[0u8; 1460], &[]);
    let r = s.a.finish();
    assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
    assert_eq!(r.findings[0].kind, StallKind::DelayedAck);
}

#[test]
fn cork_timer_flush() {
    let mut s = Sim::new();
    // A Linux SYN (MSS, SACK permitted, window scale, in tcp_options_write()'s order): the
    // 200 ms cork timer is Linux's. A lone MSS would fit every stack's order.
    let linux = [2, 4, 0x05, 0xb4, 1, 1, 4, 2, 1, 3, 3, 7];
    s.pkt(0.0, true, flags::SYN, b"", &linux);
    s.pkt(0.1, false, flags::SYN | flags::ACK, b"", &linux);
    s.pkt(0.2, true, flags::ACK, b"", &[]);
    let a = flags::ACK | flags::PSH;
    s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
    s.pkt(1.1, false, a, &[1u8; 1460], &[]);
    s.pkt(1.2, true, flags::ACK, b"", &[]);
    // The corked tail leaves 200 ms later, with nothing from the client in between.
    s.pkt(201.1, false, a, &[1u8; 100], &[]);
    let r = s.a.finish();
    assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
    assert_eq!(r.findings[0].kind, StallKind::Cork);
    assert_eq!(r.findings[0].lost_ns, 200_000_000);
}

#[test]
fn latscopes_own_greeting_is_not_a_transaction() {
    let mut s = Sim::new();
    s.handshake();
    let a = flags::ACK | flags::PSH;
    // Greeting, test request and first message in one write; the server's set-up takes 30 ms.
    s.pkt(
        1.0,
        true,
        a,
        b"LATSCOPE\x00\x01{\"hello\":1}{\"start\":1}ping",
        &[],
    );
    s.pkt(
        31.0,
        false,
        a,
        b"LATSCOPE\x00\x01{\"hello\":1}{\"accepted\":1}pong",
        &[],
    );
    // Two data exchanges of the test itself.
    s.pkt(32.0, true, a, b"ping", &[]);
    s.pkt(32.1, false, a, b"pong", &[]);
    s.pkt(33.0, true, a, b"ping", &[]);
    s.pkt(33.1, false, a, b"pong", &[]);
    s.pkt(34.0, true, flags::ACK | flags::FIN, b"", &[]);
    let r = s.a.finish();
    assert_eq!(r.transactions, 2, "{:?}", r.top_connections);
    assert!(
        r.findings.iter().all(|f| f.kind != StallKind::ThinkTime),
        "{:?}",
        r.findings
    );
}

#[test]
fn think_time_is_not_nagle() {
    let mut s = Sim::new();
    s.handshake();
    let a = flags::ACK | flags::PSH;
    s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
    s.pkt(41.0, true, flags::ACK, b"", &[]);
    s.pkt(101.0, false, a, b"HTTP/1.1 200 OK\r\n\r\nbody", &[]);
    s.pkt(141.0, true, flags::ACK, b"", &[]);
    let r = s.a.finish();
    assert_eq!(r.findings.len(), 1);
    assert_eq!(r.findings[0].kind, StallKind::ThinkTime);
    assert!(r.findings[0].lost_ns > 99_000_000);
}

#[test]
fn retransmission_classes() {
    let mut s = Sim::new();
    s.handshake();
    let a = flags::ACK | flags::PSH;
    s.pkt(1.0, false, a, &[1; 100], &[]);
    // Timer retransmission of the same bytes 300 ms later.
    s.sseq -= 100;
    s.pkt(301.0, false, a, &[1; 100], &[]);
    s.pkt(301.1, true, flags::ACK, b"", &[]);
    // Spurious: the same bytes again after they were ACKed.
    s.sseq -= 100;
    s.pkt(600.0, false, a, &[1; 100], &[]);
    let r = s.a.finish();
    assert_eq!(r.counts.retransmission, 1);
    assert_eq!(r.counts.spurious_retransmission, 1);
    assert_eq!(r.counts.tshark_retransmission(), 2);
    assert!(
        r.findings
            .iter()
            .any(|f| f.kind == StallKind::RtoRetransmission && f.lost_ns == 300_000_000)
    );
}

#[test]
fn fast_retransmission_after_dup_acks() {
    let mut s = Sim::new();
    s.handshake();
    let a = flags::ACK;
    let base = s.sseq;
    s.pkt(1.0, false, a, &[1; 100], &[]); // lost in the network, but captured here
    s.pkt(1.01, false, a, &[1; 100], &[]);
    s.pkt(1.02, false, a, &[1; 100], &[]);
    s.pkt(1.03, false, a, &[1; 100], &[]);
    let end = s.sseq;
    // The receiver repeats its ACK of `base` three times (all duplicates of the handshake ACK).
    s.sseq = base;
    s.pkt(1.5, true, flags::ACK, b"", &[]);
    s.pkt(1.6, true, flags::ACK, b"", &[]);
    s.pkt(1.7, true, flags::ACK, b"", &[]);
    s.pkt(1.8, false, a, &[1; 100], &[]);
    s.sseq = end;
    let r = s.a.finish();
    assert_eq!(r.counts.duplicate_ack, 3);
    assert_eq!(r.counts.fast_retransmission, 1);
    assert_eq!(r.counts.retransmission, 0);
}

#[test]
fn zero_window_stall() {
    let mut s = Sim::new();
    s.handshake();
    s.pkt(1.0, false, flags::ACK, &[1; 100], &[]);
    s.frame += 1;
    let f = eth_ipv4_tcp(C, S, 40000, 80, s.cseq, s.sseq, flags::ACK, 0, &[], b"");
    s.a.push(s.frame, 2_000_000, decode(LinkType::Ethernet, &f));
    s.pkt(502.0, true, flags::ACK, b"", &[]);
    let r = s.a.finish();
    assert_eq!(r.counts.zero_window, 1);
    let z = r
        .findings
        .iter()
        .find(|f| f.kind == StallKind::ZeroWindow)
        .unwrap();
    assert_eq!(z.lost_ns, 500_000_000);
}

#[test]
fn closed_connections_are_dropped() {
    let mut a = Analyzer::default();
    let mut frame = 0;
    for i in 0..200u16 {
        let sp = 10000 + i;
        let t0 = u64::from(i) * 3_000_000_000;
        for (k, (src, dst, s, d, seq, ack, fl)) in [
            (C, S, sp, 80, 100, 0, flags::SYN),
            (S, C, 80, sp, 500, 101, flags::SYN | flags::ACK),
            (C, S, sp, 80, 101, 501, flags::ACK | flags::FIN),
            (S, C, 80, sp, 501, 102, flags::ACK | flags::FIN),
            (C, S, sp, 80, 102, 502, flags::ACK),
        ]
        .into_iter()
        .enumerate()
        {
            frame += 1;
            let f = eth_ipv4_tcp(src, dst, s, d, seq, ack, fl, 100, &[], b"");
            a.push(frame, t0 + k as u64, decode(LinkType::Ethernet, &f));
        }
    }
    assert!(a.open_connections() <= 2, "{}", a.open_connections());
    let r = a.finish();
    assert_eq!(r.connections, 200);
}

/// tshark class 2, at a long pause: a connection whose last FIN was never acknowledged stays
/// while its FIN is retransmitted with backoff (here 10 s and 60 s later): the retransmissions
/// are counted in it, not as new connections.
#[test]
fn unacknowledged_fin_lingers_for_its_retransmissions() {
    let mut s = Sim::new();
    s.handshake();
    s.pkt(1.0, false, flags::ACK | flags::FIN, b"", &[]);
    s.pkt(1.1, true, flags::ACK, b"", &[]);
    s.pkt(70_000.0, true, flags::ACK | flags::FIN, b"", &[]);
    for t in [80_000.0, 130_000.0] {
        s.cseq -= 1;
        s.pkt(t, true, flags::ACK | flags::FIN, b"", &[]);
    }
    let r = s.a.finish();
    assert_eq!(r.connections, 1);
    assert_eq!(r.counts.retransmission, 2, "{:?}", r.counts);
}

/// tshark class 1: a repeated SYN or FIN a few ms after the first is a retransmission (the
/// SYN/FIN sequence byte counts), not out-of-order.
#[test]
fn repeated_syn_and_fin_are_retransmissions() {
    let mut s = Sim::new();
    let mss = [2, 4, 0x05, 0xb4];
    s.pkt(0.0, true, flags::SYN, b"", &mss);
    s.cseq -= 1;
    s.pkt(0.5, true, flags::SYN, b"", &mss);
    s.pkt(0.6, false, flags::SYN | flags::ACK, b"", &mss);
    s.pkt(0.7, true, flags::ACK, b"", &[]);
    s.pkt(10.0, false, flags::FIN | flags::ACK, b"", &[]);
    s.sseq -= 1;
    s.pkt(12.0, false, flags::FIN | flags::ACK, b"", &[]);
    let r = s.a.finish();
    assert_eq!(r.counts.out_of_order, 0, "{:?}", r.counts);
    assert_eq!(r.counts.tshark_retransmission(), 2, "{:?}", r.counts);
    assert_eq!(r.connections, 1);
}

/// tshark class 2: a SYN with the same ISN after a RST (an OS retrying a refused connect) stays
/// in its connection as a retransmission, and SYN → RST is no handshake RTT.
#[test]
fn same_isn_syn_after_rst_is_the_same_connection() {
    let mut s = Sim::new();
    let mss = [2, 4, 0x05, 0xb4];
    s.pkt(0.0, true, flags::SYN, b"", &mss);
    s.pkt(0.1, false, flags::RST | flags::ACK, b"", &[]);
    s.cseq -= 1;
    s.pkt(500.0, true, flags::SYN, b"", &mss);
    s.pkt(500.1, false, flags::RST | flags::ACK, b"", &[]);
    let r = s.a.finish();
    assert_eq!(r.connections, 1);
    assert_eq!(r.counts.tshark_retransmission(), 1, "{:?}", r.counts);
    assert!(r.handshake_rtt.is_none(), "{:?}", r.handshake_rtt);
    assert_eq!(r.top_connections[0].handshake_rtt_ns, None);
    // A new ISN is a new connection (port reuse).
    let mut s = Sim::new();
    s.pkt(0.0, true, flags::SYN, b"", &mss);
    s.pkt(0.1, false, flags::RST | flags::ACK, b"", &[]);
    s.cseq += 1000;
    s.pkt(500.0, true, flags::SYN, b"", &mss);
    assert_eq!(s.a.finish().connections, 2);
}

/// tshark class 5: the original of a partial retransmission is a real frame, never 0.
#[test]
fn partial_retransmission_names_its_original() {
    let mut s = Sim::new();
    s.handshake();
    s.pkt(1.0, false, flags::ACK, &[1; 100], &[]);
    s.sseq -= 50;
    s.pkt(301.0, false, flags::ACK, &[1; 50], &[]);
    let r = s.a.finish();
    let f = r
        .findings
        .iter()
        .find(|f| f.kind == StallKind::RtoRetransmission)
        .unwrap();
    assert_eq!(f.examples[0].since_frame, 4);
    assert_eq!(f.lost_ns, 300_000_000);
}

/// Repeated timer retransmissions of the same bytes count each stretch of waiting once.
#[test]
fn rto_time_lost_counted_once() {
    let mut s = Sim::new();
    s.handshake();
    s.pkt(1.0, false, flags::ACK, &[1; 100], &[]);
    for t in [301.0, 901.0, 2101.0] {
        s.sseq -= 100;
        s.pkt(t, false, flags::ACK, &[1; 100], &[]);
    }
    let r = s.a.finish();
    let f = r
        .findings
        .iter()
        .find(|f| f.kind == StallKind::RtoRetransmission)
        .unwrap();
    assert_eq!(f.count, 3);
    assert_eq!(f.lost_ns, 2_100_000_000);
    assert!(f.lost_ns <= r.top_connections[0].duration_ns);
}

/// Without a handshake, full-size segments (1448 bytes: MSS 1460 with timestamps) are never
/// "small": a delayed-ACK release of them is not Nagle (issue 15 item 2).
#[test]
fn no_handshake_full_segments_are_not_nagle() {
    let mut s = Sim::new();
    let a = flags::ACK;
    s.pkt(1.0, true, a | flags::PSH, b"GET /big HTTP/1.1\r\n\r\n", &[]);
    s.pkt(1.1, false, a, &[0u8; 1448], &[]);
    s.pkt(41.1, true, a, b"", &[]);
    s.pkt(41.2, false, a, &[0u8; 1448], &[]);
    let r = s.a.finish();
    let kinds: Vec<_> = r.findings.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, vec![StallKind::DelayedAck], "{:?}", r.findings);
}

/// Captured at the client of a 900 ms path, a server segment seen in the same microsecond as
/// the client's late ACK cannot have been released by it.
#[test]
fn no_release_faster_than_the_path() {
    let mss = [2, 4, 0x05, 0xb4];
    let a = flags::ACK | flags::PSH;
    let mut s = Sim::new();
    s.pkt(0.0, true, flags::SYN, b"", &mss);
    s.pkt(900.0, false, flags::SYN | flags::ACK, b"", &mss);
    s.pkt(900.01, true, flags::ACK, b"", &[]);
    s.pkt(1000.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
    s.pkt(1900.0, false, a, b"HTTP/1.1 200 OK\r\n", &[]);
    s.pkt(1950.0, true, flags::ACK, b"", &[]);
    s.pkt(1950.0, false, a, b"body", &[]);
    let r = s.a.finish();
    assert!(
        r.findings
            .iter()
            .all(|f| !matches!(f.kind, StallKind::NagleDelayedAck | StallKind::DelayedAck)),
        "{:?}",
        r.findings
    );
}

/// After "previous segment not captured" the transaction in progress is not timed: no think
/// time across the gap.
#[test]
fn no_think_time_across_a_capture_gap() {
    let mut s = Sim::new();
    s.handshake();
    let a = flags::ACK | flags::PSH;
    s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
    s.pkt(1.1, false, a, b"HTTP/1.1 200 OK\r\n\r\n", &[]);
    s.pkt(2.0, true, a, b"GET /2 HTTP/1.1\r\n\r\n", &[]);
    // The server's answer and the next requests were not captured.
    s.sseq += 5000;
    s.cseq += 3000;
    s.pkt(900_000.0, true, a, b"GET /9 HTTP/1.1\r\n\r\n", &[]);
    s.pkt(900_000.2, false, a, b"HTTP/1.1 200 OK\r\n\r\n", &[]);
    let r = s.a.finish();
    assert!(
        r.findings.iter().all(|f| f.kind != StallKind::ThinkTime),
        "{:?}",
        r.findings
    );
}

/// The same frame captured twice (same IPv4 identification) counts as tshark counts it, but is
/// no RTO stall; a resend with a new identification is one.
#[test]
fn duplicate_frames_are_not_rto_stalls() {
    for (id2, stalls) in [(7u16, 0u64), (8, 1)] {
        let mut s = Sim::new();
        s.handshake();
        for (t, id) in [(1.0, 7u16), (2.0, id2)] {
            s.frame += 1;
            let mut f = eth_ipv4_tcp(
                S,
                C,
                80,
                40000,
                s.sseq,
                s.cseq,
                flags::ACK,
                1000,
                &[],
                &[1; 100],
            );
            f[18..20].copy_from_slice(&id.to_be_bytes());
            s.a.push(s.frame, (t * 1e6) as u64, decode(LinkType::Ethernet, &f));
        }
        let r = s.a.finish();
        let rto = r
            .findings
            .iter()
            .find(|f| f.kind == StallKind::RtoRetransmission)
            .map_or(0, |f| f.count);
        assert_eq!(rto, stalls, "id {id2}");
    }
}

/// Handshake with MSS 1460 and window scale 7 on both sides (windows of 1000 << 7 bytes), the
/// SYN-ACK `srv_ms` after the SYN and the ACK at `ack_ms`.
fn scaled_handshake(s: &mut Sim, srv_ms: f64, ack_ms: f64) {
    let opts = [2, 4, 0x05, 0xb4, 1, 3, 3, 7];
    s.pkt(0.0, true, flags::SYN, b"", &opts);
    s.pkt(srv_ms, false, flags::SYN | flags::ACK, b"", &opts);
    s.pkt(ack_ms, true, flags::ACK, b"", &[]);
}

/// A server on a 200 ms path sending windows of four full segments, each next window right as
/// the ACKs of the previous one arrive (captured near the server): one cwnd-limited stall per
/// window after the first; the same pattern on a 1 ms path is not worth reporting.
#[test]
fn cwnd_limited_sender_waits_one_rtt_per_window() {
    for (rtt_ms, expected) in [(200.0, 2), (1.0, 0)] {
        let mut s = Sim::new();
        scaled_handshake(&mut s, 0.05, rtt_ms);
        let t0 = rtt_ms + 1.0;
        s.pkt(
            t0,
            true,
            flags::ACK | flags::PSH,
            b"GET /big HTTP/1.1\r\n\r\n",
            &[],
        );
        let seg = [0u8; 1460];
        for w in 0..3 {
            let tw = t0 + 0.1 + w as f64 * rtt_ms;
            for k in 0..4 {
                s.pkt(tw + k as f64 * 0.01, false, flags::ACK, &seg, &[]);
            }
            // The ACKs come back one round trip later; the next window leaves at once.
            s.pkt(tw + rtt_ms - 0.02, true, flags::ACK, b"", &[]);
        }
        let r = s.a.finish();
        let found = r
            .findings
            .iter()
            .find(|f| f.kind == StallKind::CwndLimited)
            .map_or(0, |f| f.count);
        assert_eq!(found, expected, "RTT {rtt_ms} ms: {:?}", r.findings);
        assert!(
            r.findings.iter().all(|f| f.kind == StallKind::CwndLimited),
            "{:?}",
            r.findings
        );
    }
}

/// A device pushing a small record every 50 ms on its own clock: some pushes happen to leave
/// right after a late ACK, others long after one. Strict periodicity independent of the ACKs
/// is the application's clock: once it is established, no Nagle stall. With the same ACKs and
/// jittered pushes the releases are reported.
#[test]
fn periodic_pushes_are_the_applications_clock() {
    let nagle = |periodic: bool| {
        let mut s = Sim::new();
        s.handshake();
        let a = flags::ACK | flags::PSH;
        for k in 0..20u32 {
            let jitter = if periodic { 0.0 } else { f64::from(k * 7 % 13) };
            let t = 100.0 + f64::from(k) * 50.0 + jitter;
            s.pkt(t, false, a, &[1u8; 54], &[]);
            // Late ACKs: every other one just before the next push (which looks released by
            // it), the others 10 ms before it.
            let before_next = if k % 2 == 0 { 0.5 } else { 10.0 };
            let next = 100.0
                + f64::from(k + 1) * 50.0
                + if periodic {
                    0.0
                } else {
                    f64::from((k + 1) * 7 % 13)
                };
            s.pkt(next - before_next, true, flags::ACK, b"", &[]);
        }
        let r = s.a.finish();
        r.findings
            .iter()
            .filter(|f| matches!(f.kind, StallKind::NagleDelayedAck | StallKind::DelayedAck))
            .map(|f| f.count)
            .sum::<u64>()
    };
    // Before three equal intervals establish the period (the first four pushes), the two
    // releases among them are still reported.
    assert_eq!(nagle(true), 2);
    assert!(nagle(false) >= 5, "{}", nagle(false));
}

/// A PLC pushing its state every second whatever the client does; the client's polls come at
/// varying points of the cycle. The push after a poll is no response: no think time once the
/// cycle is known (the first pushes, before it is, still count).
#[test]
fn periodic_server_push_is_not_think_time() {
    let think = |periodic: bool| {
        let mut s = Sim::new();
        s.handshake();
        let a = flags::ACK | flags::PSH;
        for k in 1..=10u32 {
            let t = f64::from(k) * 1000.0
                + if periodic {
                    0.0
                } else {
                    f64::from(k * k * 53 % 400)
                };
            s.pkt(t, false, a, &[2u8; 40], &[]);
            s.pkt(t + 0.2, true, flags::ACK, b"", &[]);
            s.pkt(t + 100.0 + f64::from(k * 37 % 300), true, a, b"poll", &[]);
        }
        let r = s.a.finish();
        r.findings
            .iter()
            .find(|f| f.kind == StallKind::ThinkTime)
            .map_or(0, |f| f.count)
    };
    assert!(think(true) <= 3, "{}", think(true));
    assert!(think(false) >= 8, "{}", think(false));
}

/// A server that thinks ~60 ms before each answer, to a client that asks again as soon as it
/// has one: the answers land on a 60 ms grid, and the think times (the time from each request)
/// vary by under 2 ms, as a sleeping server's do on a busy machine. That variation comes with
/// the grid's own tolerance (each interval within 1 ms of the period), so it does not make the
/// grid the server's clock: every answer is think time.
#[test]
fn ping_pong_with_jittery_think_time_is_not_a_server_clock() {
    let mut s = Sim::new();
    s.handshake();
    let a = flags::ACK | flags::PSH;
    let mut t = 10.0;
    for k in 0..10u32 {
        s.pkt(t, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
        s.pkt(t + 40.0, false, flags::ACK, b"", &[]);
        // The second answer sets the grid's period (60.1 ms); then 59.2 and 60.8 ms in turn:
        // every interval within 0.8 ms of the period, the think times 1.6 ms apart.
        let think = match k {
            0 => 60.5,
            1 => 60.0,
            k if k % 2 == 0 => 59.2,
            _ => 60.8,
        };
        t += think;
        s.pkt(t, false, a, &[7u8; 300], &[]);
        t += 0.1;
    }
    let r = s.a.finish();
    let think = finding(&r, StallKind::ThinkTime).map_or(0, |f| f.count);
    assert_eq!(think, 10, "{:?}", r.findings);
}

/// tshark class 3: a zero-length segment (pure ACK, window update) with an old sequence
/// number is no retransmission: tshark only tests segments with data, SYN or FIN ("Note that a
/// simple KeepAlive is not a retransmission"), and a segment one byte behind is a keep-alive.
#[test]
fn zero_length_old_sequence_is_not_a_retransmission() {
    let mut s = Sim::new();
    s.handshake();
    let a = flags::ACK | flags::PSH;
    s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
    s.pkt(2.0, false, a, &[3u8; 500], &[]);
    s.pkt(3.0, true, flags::ACK, b"", &[]);
    // The server's pure ACK and the client's from 100 and 18 bytes back, 300 ms later.
    s.sseq -= 100;
    s.pkt(300.0, false, flags::ACK, b"", &[]);
    s.sseq += 100;
    s.cseq -= 18;
    s.pkt(301.0, true, flags::ACK, b"", &[]);
    s.cseq += 18;
    let r = s.a.finish();
    assert_eq!(r.counts.tshark_retransmission(), 0, "{:?}", r.counts);
    assert_eq!(r.counts.keep_alive, 0, "{:?}", r.counts);
    assert!(
        !r.findings
            .iter()
            .any(|f| f.kind == StallKind::RtoRetransmission),
        "{:?}",
        r.findings
    );
}

fn finding(r: &Analysis, k: StallKind) -> Option<&latscope_core::model::analyze::StallFinding> {
    r.findings.iter().find(|f| f.kind == k)
}

/// A resent SYN is the set-up's wait (its own finding, with the handshake totals), not an RTO
/// stall of the connection's data; a bare FIN resent on close holds up nothing.
#[test]
fn resent_syn_is_setup_time_and_resent_fin_is_no_stall() {
    let mut s = Sim::new();
    let mss = [2, 4, 0x05, 0xb4];
    s.pkt(0.0, true, flags::SYN, b"", &mss);
    s.cseq -= 1;
    s.pkt(1000.0, true, flags::SYN, b"", &mss);
    s.pkt(1000.1, false, flags::SYN | flags::ACK, b"", &mss);
    s.pkt(1000.2, true, flags::ACK, b"", &[]);
    s.pkt(1010.0, false, flags::FIN | flags::ACK, b"", &[]);
    s.sseq -= 1;
    s.pkt(1210.0, false, flags::FIN | flags::ACK, b"", &[]);
    let r = s.a.finish();
    let syn = finding(&r, StallKind::SynRetransmission).expect("resent SYN");
    assert_eq!((syn.count, syn.lost_ns), (1, 1_000_000_000));
    assert_eq!(r.handshake_resends.syn.count, 1);
    assert_eq!(r.handshake_resends.syn.waited_ns, 1_000_000_000);
    assert!(
        finding(&r, StallKind::RtoRetransmission).is_none(),
        "{:?}",
        r.findings
    );
    assert_eq!(r.counts.tshark_retransmission(), 2, "tshark counts both");
}

/// A tail-loss probe the receiver reports with a D-SACK (it had the data: its ACK was late)
/// was not needed and costs nothing; without the D-SACK it is charged.
#[test]
fn resend_proven_spurious_by_dsack_is_no_stall() {
    for (dsack, stalls) in [(true, 0u64), (false, 1)] {
        let mut s = Sim::new();
        s.handshake();
        s.pkt(
            1.0,
            true,
            flags::ACK | flags::PSH,
            b"GET / HTTP/1.1\r\n\r\n",
            &[],
        );
        s.pkt(2.0, false, flags::ACK, &[1; 100], &[]);
        s.sseq -= 100;
        s.pkt(30.0, false, flags::ACK, &[1; 100], &[]);
        // The client's ACK of the probe: D-SACK block [seq, seq + 100) below the ACK.
        let (l, r) = (s.sseq - 100, s.sseq);
        let mut opt = vec![1, 1, 5, 10];
        opt.extend_from_slice(&l.to_be_bytes());
        opt.extend_from_slice(&r.to_be_bytes());
        s.pkt(31.0, true, flags::ACK, b"", if dsack { &opt } else { &[] });
        let r = s.a.finish();
        let n = finding(&r, StallKind::RtoRetransmission).map_or(0, |f| f.count);
        assert_eq!(n, stalls, "D-SACK {dsack}: {:?}", r.findings);
    }
}

/// A segment whose timestamp echo predates the delayed ACK left before that ACK reached its
/// sender: the ACK released nothing.
#[test]
fn release_echoing_an_older_timestamp_is_not_credited_to_the_ack() {
    let ts = |val: u32, ecr: u32| {
        let mut o = vec![1, 1, 8, 10];
        o.extend_from_slice(&val.to_be_bytes());
        o.extend_from_slice(&ecr.to_be_bytes());
        o
    };
    for (ecr, nagle) in [(150u32, 1u64), (100, 0)] {
        let mut s = Sim::new();
        s.handshake();
        let a = flags::ACK | flags::PSH;
        s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &ts(100, 10));
        s.pkt(1.1, false, a, b"HTTP/1.1 200 OK\r\n", &ts(10, 100));
        s.pkt(1.2, true, flags::ACK, b"", &ts(101, 10));
        s.pkt(1.3, false, a, b"body", &ts(11, 101));
        s.pkt(10.0, true, a, b"GET /2 HTTP/1.1\r\n\r\n", &ts(110, 11));
        s.pkt(10.1, false, a, b"HTTP/1.1 200 OK\r\n", &ts(20, 110));
        s.pkt(50.1, true, flags::ACK, b"", &ts(150, 20));
        s.pkt(50.2, false, a, b"body", &ts(60, ecr));
        let r = s.a.finish();
        let n = finding(&r, StallKind::NagleDelayedAck).map_or(0, |f| f.count);
        assert_eq!(n, nagle, "echo {ecr}: {:?}", r.findings);
    }
}

/// Evidence the detectors need: without the handshake no think time (the round trip is
/// unknown); with one direction captured no cork; on a human-paced protocol no think time.
#[test]
fn detectors_refuse_without_their_evidence() {
    let a = flags::ACK | flags::PSH;
    // No handshake: a 50 ms gap could be the path.
    let mut s = Sim::new();
    s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
    s.pkt(51.0, false, a, b"HTTP/1.1 200 OK\r\n", &[]);
    s.pkt(52.0, true, flags::ACK, b"", &[]);
    let r = s.a.finish();
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert!(r.think_time.is_none());
    assert_eq!(r.capture_quality.connections_without_handshake, 1);
    // One direction only: a segment 200 ms after the previous is no cork.
    let mut s = Sim::new();
    s.pkt(1.0, false, a, &[1u8; 1460], &[]);
    s.pkt(201.0, false, a, &[1u8; 100], &[]);
    let r = s.a.finish();
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert_eq!(r.capture_quality.one_way_connections, 1);
    // A cork-like flush from a sender whose SYN is not Linux's (window scale before SACK).
    let mut s = Sim::new();
    let win = [2, 4, 0x05, 0xb4, 1, 3, 3, 8, 1, 1, 4, 2];
    s.pkt(0.0, true, flags::SYN, b"", &win);
    s.pkt(0.1, false, flags::SYN | flags::ACK, b"", &win);
    s.pkt(0.2, true, flags::ACK, b"", &[]);
    s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
    s.pkt(1.1, false, a, &[1u8; 1460], &[]);
    s.pkt(1.2, true, flags::ACK, b"", &[]);
    s.pkt(201.1, false, a, &[1u8; 100], &[]);
    let r = s.a.finish();
    assert!(finding(&r, StallKind::Cork).is_none(), "{:?}", r.findings);
}

/// Telnet: the server's output 2 s after a keystroke is no think time.
#[test]
fn keystrokes_are_not_requests() {
    let mut s = Sim::new();
    let a = flags::ACK | flags::PSH;
    let mss = [2, 4, 0x05, 0xb4];
    // Port 80 in the helper; rebuild the frames on port 23.
    for (ms, from_client, fl, p, o) in [
        (0.0, true, flags::SYN, &b""[..], &mss[..]),
        (0.1, false, flags::SYN | flags::ACK, b"", &mss),
        (0.2, true, flags::ACK, b"", &[]),
        (10.0, true, a, b"l", &[]),
        (2010.0, false, a, b"total 0\r\n$ ", &[]),
    ] {
        s.frame += 1;
        let (src, dst, sp, dp, seq, ack) = if from_client {
            (C, S, 40000, 23, s.cseq, s.sseq)
        } else {
            (S, C, 23, 40000, s.sseq, s.cseq)
        };
        let f = eth_ipv4_tcp(src, dst, sp, dp, seq, ack, fl, 1000, o, p);
        let adv = p.len() as u32 + u32::from(fl & flags::SYN != 0);
        if from_client {
            s.cseq += adv;
        } else {
            s.sseq += adv;
        }
        s.a.push(s.frame, (ms * 1e6) as u64, decode(LinkType::Ethernet, &f));
    }
    let r = s.a.finish();
    assert!(r.findings.is_empty(), "{:?}", r.findings);
}

/// The receiver's window fills (Wireshark: window full) and the sender waits for it to open.
#[test]
fn window_full_wait_is_a_finding() {
    let mut s = Sim::new();
    s.handshake();
    s.pkt(
        1.0,
        true,
        flags::ACK | flags::PSH,
        b"GET / HTTP/1.1\r\n\r\n",
        &[],
    );
    // The client's window is 1000 bytes: one segment fills it.
    s.pkt(2.0, false, flags::ACK, &[1; 1000], &[]);
    s.pkt(12.0, true, flags::ACK, b"", &[]);
    s.pkt(12.1, false, flags::ACK, &[1; 1000], &[]);
    let r = s.a.finish();
    assert!(r.counts.window_full >= 1, "{:?}", r.counts);
    let f = finding(&r, StallKind::ReceiveWindowFull).expect("window full");
    assert_eq!(f.lost_ns, 10_100_000);
}

/// A path MTU black hole: the server's small header segment is ACKed, its full-size segment is
/// resent by timer and never ACKed while the client keeps ACKing the header.
#[test]
fn pmtu_black_hole_pattern() {
    let mut s = Sim::new();
    s.handshake();
    let a = flags::ACK | flags::PSH;
    s.pkt(1.0, true, a, b"GET /big HTTP/1.1\r\n\r\n", &[]);
    s.pkt(2.0, false, a, &[1; 200], &[]);
    s.pkt(3.0, true, flags::ACK, b"", &[]);
    s.pkt(3.1, false, flags::ACK, &[1; 1460], &[]);
    for t in [300.0, 900.0, 2100.0] {
        s.sseq -= 1460;
        s.pkt(t, false, flags::ACK, &[1; 1460], &[]);
    }
    let r = s.a.finish();
    let f = finding(&r, StallKind::PmtuBlackHole).expect("black hole");
    assert_eq!(f.count, 1);
    let ev = r.pmtu_black_hole.expect("figures");
    assert_eq!(ev.lost_segment_bytes, 1460);
    assert_eq!(ev.largest_acked_bytes, 200);
    assert_eq!(ev.header_bytes, 40);
    assert_eq!(ev.advertised_mss, Some(1460));
    // The same resends of a small segment are plain RTO stalls.
    let mut s = Sim::new();
    s.handshake();
    s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
    s.pkt(2.0, false, a, &[1; 200], &[]);
    s.pkt(3.0, true, flags::ACK, b"", &[]);
    s.pkt(3.1, false, flags::ACK, &[1; 300], &[]);
    for t in [300.0, 900.0, 2100.0] {
        s.sseq -= 300;
        s.pkt(t, false, flags::ACK, &[1; 300], &[]);
    }
    let r = s.a.finish();
    assert!(
        finding(&r, StallKind::PmtuBlackHole).is_none(),
        "{:?}",
        r.findings
    );
}

/// IPv6 has no identification: a copy with the same TCP timestamp within 1 ms is a copy.
#[test]
fn timestamps_tell_copies_without_ip_identification() {
    let mut s = Sim::new();
    s.handshake();
    let o = [1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 1];
    for t in [1.0, 1.05] {
        s.frame += 1;
        let mut f = eth_ipv4_tcp(
            S,
            C,
            80,
            40000,
            s.sseq,
            s.cseq,
            flags::ACK,
            1000,
            &o,
            &[1; 100],
        );
        f[18..20].copy_from_slice(&0u16.to_be_bytes());
        s.a.push(s.frame, (t * 1e6) as u64, decode(LinkType::Ethernet, &f));
    }
    let r = s.a.finish();
    assert_eq!(r.capture_quality.duplicate_frames, 1);
    assert!(r.findings.is_empty(), "{:?}", r.findings);
}

/// A keep-alive server answering each request with a header segment and four full body
/// segments, ACKed at once; then one answer whose body leaves only on the client's delayed
/// ACK of the header, 40 ms later. The server had already had five segments in flight at once
/// and the client's window had room: neither window held it back — the body's first send
/// never reached the capture (a drop in the server's own output path, retried on the ACK).
/// A server that never had more than one segment in flight (a congestion window locked at
/// one) shows the same release as a delayed ACK, not as loss. The server's IPv4
/// identification counts its packets: the lost send used a number the capture never saw.
#[test]
fn release_with_the_window_open_is_unseen_loss() {
    let run = |locked: bool| {
        let mut s = Sim::new();
        s.count_ids();
        scaled_handshake(&mut s, 0.05, 0.1);
        let a = flags::ACK;
        let full = [0u8; 1460];
        let mut t = 1.0;
        for _ in 0..4 {
            s.pkt(t, true, a | flags::PSH, b"GET / HTTP/1.1\r\n\r\n", &[]);
            if locked {
                // One segment at a time, each after the client's delayed ACK of the last.
                s.pkt(t + 0.1, false, a, &full, &[]);
                s.pkt(t + 40.1, true, a, b"", &[]);
                s.pkt(t + 40.2, false, a | flags::PSH, &full, &[]);
                s.pkt(t + 41.0, true, a, b"", &[]);
            } else {
                s.pkt(t + 0.1, false, a | flags::PSH, &[b'h'; 240], &[]);
                for k in 0..4 {
                    s.pkt(t + 0.11 + 0.01 * f64::from(k), false, a, &full, &[]);
                }
                s.pkt(t + 0.2, true, a, b"", &[]);
            }
            t += 50.0;
        }
        s.pkt(t, true, a | flags::PSH, b"GET / HTTP/1.1\r\n\r\n", &[]);
        s.pkt(t + 0.1, false, a | flags::PSH, &[b'h'; 240], &[]);
        // The body's first send never reached the capture; the client's delayed ACK of the
        // header releases it.
        s.sent_unseen(false);
        s.pkt(t + 40.1, true, a, b"", &[]);
        s.pkt(t + 40.2, false, a, &full, &[]);
        s.pkt(t + 40.3, false, a | flags::PSH, &full, &[]);
        s.pkt(t + 40.4, true, a, b"", &[]);
        s.a.finish()
    };
    let r = run(false);
    let unseen = finding(&r, StallKind::UnseenLoss).expect("unseen loss");
    assert_eq!(unseen.count, 1, "{:?}", r.findings);
    assert!(
        (39_000_000..=41_000_000).contains(&unseen.lost_ns),
        "{unseen:?}"
    );
    assert!(
        finding(&r, StallKind::DelayedAck).is_none(),
        "{:?}",
        r.findings
    );
    let r = run(true);
    assert!(
        finding(&r, StallKind::UnseenLoss).is_none(),
        "{:?}",
        r.findings
    );
    assert!(
        finding(&r, StallKind::DelayedAck).is_some(),
        "{:?}",
        r.findings
    );
}

/// The same release in a capture that missed the handshake, taken at the client where GRO
/// merged the body into 8 KB frames: the 1,448-byte segments are the path's full segments
/// (not "small" next to the merged frames), so the release is loss, not Nagle's.
#[test]
fn merged_frames_do_not_set_the_segment_size_without_a_handshake() {
    let mut s = Sim::new();
    s.count_ids();
    let a = flags::ACK;
    let mut t = 1.0;
    for _ in 0..4 {
        s.pkt(t, true, a | flags::PSH, b"GET / HTTP/1.1\r\n\r\n", &[]);
        s.pkt(t + 0.1, false, a | flags::PSH, &[b'h'; 240], &[]);
        s.pkt(t + 0.11, false, a, &[0u8; 1448], &[]);
        s.pkt(t + 0.12, false, a | flags::PSH, &[0u8; 8000], &[]);
        s.pkt(t + 0.2, true, a, b"", &[]);
        t += 50.0;
    }
    s.pkt(t, true, a | flags::PSH, b"GET / HTTP/1.1\r\n\r\n", &[]);
    s.pkt(t + 0.1, false, a | flags::PSH, &[b'h'; 240], &[]);
    s.sent_unseen(false);
    s.pkt(t + 40.1, true, a, b"", &[]);
    s.pkt(t + 40.2, false, a, &[0u8; 1448], &[]);
    s.pkt(t + 40.3, true, a, b"", &[]);
    let r = s.a.finish();
    assert_eq!(
        finding(&r, StallKind::UnseenLoss).map(|f| f.count),
        Some(1),
        "{:?}",
        r.findings
    );
    assert!(
        finding(&r, StallKind::NagleDelayedAck).is_none(),
        "{:?}",
        r.findings
    );
}

/// A policer on the server's way out (nginx, 64 KiB pages, `limit rate over 2 mbytes/second
/// drop` in its OUTPUT chain; captured at the client): in the middle of a response the server
/// sent a window the capture never saw, the client had acknowledged everything it got, and
/// 206 ms later the server's retransmission timer sent one segment of the lost bytes again —
/// to the client new data in order, no retransmission. Its IPv4 identification skipped the
/// numbers of what was dropped: loss before the capture, the timer's wait. Without the
/// skipped numbers the same silence proves nothing (a server that paused mid-response); nor
/// does a burst after it (an application resuming, not a timer's one segment), nor a silence
/// of seconds (an idle sender, across which a host-wide counter moves with other traffic), nor
/// a segment that answered the receiver's packet just before it (the ACK clock).
#[test]
fn a_silence_ended_by_the_senders_timer_after_unseen_sends_is_loss() {
    let run = |dropped: bool, silence_ms: f64, burst: bool, clocked: bool| {
        let mut s = Sim::new();
        s.count_ids();
        // A path of 1.5 ms when the segment may have answered the window update.
        scaled_handshake(&mut s, 0.05, if clocked { 1.5 } else { 0.1 });
        let a = flags::ACK;
        let full = [0u8; 1460];
        let mut t = 1.0;
        for _ in 0..5 {
            s.pkt(t, true, a | flags::PSH, b"GET / HTTP/1.1\r\n\r\n", &[]);
            s.pkt(t + 0.1, false, a | flags::PSH, &[b'h'; 240], &[]);
            for k in 0..4 {
                s.pkt(t + 0.11 + 0.01 * f64::from(k), false, a, &full, &[]);
            }
            s.pkt(t + 0.2, true, a, b"", &[]);
            t += 50.0;
        }
        s.pkt(t, true, a | flags::PSH, b"GET / HTTP/1.1\r\n\r\n", &[]);
        s.pkt(t + 0.1, false, a | flags::PSH, &[b'h'; 240], &[]);
        s.pkt(t + 0.11, false, a, &full, &[]);
        s.pkt(t + 0.12, false, a, &full, &[]);
        s.pkt(t + 0.2, true, a, b"", &[]);
        if dropped {
            for _ in 0..3 {
                s.sent_unseen(false);
            }
        }
        let t = t + silence_ms;
        if clocked {
            // The receiver's window update 1.2 ms before, under a round trip of 1.5 ms: the
            // segment may have answered it.
            s.pkt(t - 1.2, true, a, b"", &[]);
        }
        if burst {
            // Two segments half a millisecond apart (each one segment long), before any ACK.
            s.pkt(t, false, a, &full, &[]);
            s.pkt(t + 0.5, false, a, &full, &[]);
            s.pkt(t + 40.0, true, a, b"", &[]);
        } else {
            s.pkt(t, false, a, &full, &[]);
            s.pkt(t + 40.0, true, a, b"", &[]);
        }
        s.pkt(t + 40.1, false, a | flags::PSH, &full, &[]);
        s.pkt(t + 40.2, true, a, b"", &[]);
        s.a.finish()
    };
    let r = run(true, 206.0, false, false);
    let unseen = finding(&r, StallKind::UnseenLoss).expect("loss before the capture");
    assert_eq!(unseen.count, 1, "{:?}", r.findings);
    assert!(
        (205_000_000..=207_000_000).contains(&unseen.lost_ns),
        "{unseen:?}"
    );
    for (dropped, silence_ms, burst, clocked) in [
        (false, 206.0, false, false),
        (true, 206.0, true, false),
        (true, 10_000.0, false, false),
        (true, 206.0, false, true),
    ] {
        let r = run(dropped, silence_ms, burst, clocked);
        assert!(
            finding(&r, StallKind::UnseenLoss).is_none(),
            "{dropped} {silence_ms} {burst} {clocked}: {:?}",
            r.findings
        );
    }
}
