//! Each detector proves its claim and checks what would refute it: TCP timestamps, D-SACK,
//! IPv4 identification, ACKs of unseen data, the capture point and each end's round trip.

use super::*;

/// The TCP timestamps option (NOP, NOP, kind 8): TSval and TSecr.
fn ts(val: u32, ecr: u32) -> Vec<u8> {
    let mut o = vec![1, 1, 8, 10];
    o.extend_from_slice(&val.to_be_bytes());
    o.extend_from_slice(&ecr.to_be_bytes());
    o
}

/// A handshake where both sides negotiate timestamps (client TSval 100, server 10).
fn ts_handshake(s: &mut Sim) {
    let mut syn = vec![2, 4, 0x05, 0xb4];
    syn.extend(ts(100, 0));
    s.pkt(0.0, true, flags::SYN, b"", &syn);
    let mut sa = vec![2, 4, 0x05, 0xb4];
    sa.extend(ts(10, 100));
    s.pkt(0.1, false, flags::SYN | flags::ACK, b"", &sa);
    s.pkt(0.2, true, flags::ACK, b"", &ts(101, 10));
}

/// The server's answer (TSval 20) is resent by timer 300 ms later (TSval 320), and the
/// client's ACK of the bytes echoes `echo`.
fn resend_then_ack(echo: u32) -> Analysis {
    let mut s = Sim::new();
    ts_handshake(&mut s);
    let a = flags::ACK | flags::PSH;
    s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &ts(110, 10));
    s.pkt(2.0, false, a, &[1; 100], &ts(20, 110));
    s.sseq -= 100;
    s.pkt(302.0, false, a, &[1; 100], &ts(320, 110));
    s.pkt(303.0, true, flags::ACK, b"", &ts(400, echo));
    s.a.finish()
}

/// RFC 3522 §2: the ACK of resent bytes echoes the TSval of the transmission that reached the
/// receiver first. Echoing the original's, the original arrived and the ACK was only late
/// (`wow.pcap`, `roblox.pcapng`, `pptp.pcap`): no RTO stall. Echoing the resend's, the
/// original was lost: a stall of 300 ms timed from the original.
#[test]
fn an_ack_echoing_the_original_makes_the_resend_spurious() {
    let r = resend_then_ack(20);
    assert!(
        finding(&r, StallKind::RtoRetransmission).is_none(),
        "{:?}",
        r.findings
    );
    assert_eq!(
        r.counts.retransmission, 1,
        "still a retransmission for tshark"
    );
    let r = resend_then_ack(320);
    let f = finding(&r, StallKind::RtoRetransmission).expect("the original was lost");
    assert_eq!((f.count, f.lost_ns), (1, 300_000_000));
    assert_eq!((f.examples[0].since_frame, f.examples[0].frame), (5, 6));
}

/// A D-SACK for the resent bytes arriving after the ACK that covered them (`rdp-x509.pcap`:
/// 3 s later, from a receiver holding packets) still shows both copies arrived: the stall
/// charged at the ACK is taken back.
#[test]
fn a_late_dsack_takes_the_stall_back() {
    let mut s = Sim::new();
    s.handshake();
    let a = flags::ACK | flags::PSH;
    s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
    s.pkt(2.0, false, a, &[1; 19], &[]);
    s.sseq -= 19;
    s.pkt(2902.0, false, a, &[1; 19], &[]);
    s.pkt(3000.0, true, flags::ACK, b"", &[]);
    let r = s.a.finish();
    assert!(finding(&r, StallKind::RtoRetransmission).is_some());
    let mut s = Sim::new();
    s.handshake();
    s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
    s.pkt(2.0, false, a, &[1; 19], &[]);
    s.sseq -= 19;
    s.pkt(2902.0, false, a, &[1; 19], &[]);
    s.pkt(3000.0, true, flags::ACK, b"", &[]);
    let (l, r) = (s.sseq - 19, s.sseq);
    let mut dsack = vec![1, 1, 5, 10];
    dsack.extend_from_slice(&l.to_be_bytes());
    dsack.extend_from_slice(&r.to_be_bytes());
    s.pkt(6000.0, true, flags::ACK, b"", &dsack);
    let r = s.a.finish();
    assert!(
        finding(&r, StallKind::RtoRetransmission).is_none(),
        "{:?}",
        r.findings
    );
    assert_eq!(r.top_connections[0].stall_lost_ns, 0);
}

/// The client's ACKs are missing from the capture while the server's timestamp echo keeps
/// advancing (`bitcoin.pcap`): the server resent after 200 ms, but whether the client's
/// (delayed) ACK had come cannot be shown. Undecided, not a stall.
#[test]
fn a_resend_while_the_peers_packets_are_missing_is_undecided() {
    let mut s = Sim::new();
    ts_handshake(&mut s);
    let a = flags::ACK | flags::PSH;
    s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &ts(110, 10));
    s.pkt(2.0, false, a, &[1; 100], &ts(20, 110));
    // The client's ACK (TSval 130) is not captured; the server's next data echoes it.
    s.pkt(600.0, false, a, &[2; 100], &ts(600, 130));
    s.sseq -= 100;
    s.pkt(802.0, false, a, &[2; 100], &ts(800, 130));
    let r = s.a.finish();
    assert!(
        finding(&r, StallKind::RtoRetransmission).is_none(),
        "{:?}",
        r.findings
    );
    let u = &r.undecided[0];
    assert_eq!(
        (u.kind, u.reason, u.count),
        (
            StallKind::RtoRetransmission,
            latscope_core::model::analyze::Undecided::CaptureMissedPackets,
            1
        )
    );
    assert_eq!(u.lost_ns, 202_000_000);
}

/// A second timer resend of the same bytes is timed from the first resend, and names it.
#[test]
fn a_second_resend_is_timed_from_the_first_and_names_it() {
    let mut s = Sim::new();
    s.handshake();
    s.pkt(1.0, false, flags::ACK, &[1; 100], &[]);
    s.sseq -= 100;
    s.pkt(301.0, false, flags::ACK, &[1; 100], &[]);
    s.sseq -= 100;
    s.pkt(901.0, false, flags::ACK, &[1; 100], &[]);
    s.pkt(950.0, true, flags::ACK, b"", &[]);
    let r = s.a.finish();
    let f = finding(&r, StallKind::RtoRetransmission).expect("two resends");
    let mut ex: Vec<(u64, u64, u64)> = f
        .examples
        .iter()
        .map(|e| (e.since_frame, e.frame, e.lost_ns))
        .collect();
    ex.sort();
    assert_eq!(ex, [(4, 5, 300_000_000), (5, 6, 600_000_000)]);
}

/// A segment no TCP stack sends (SYN with FIN: a scanner's or fuzzer's, as `fuzz-72.pcap`'s
/// first frame) marks the connection as crafted: its numbers prove nothing.
#[test]
fn a_crafted_connection_is_not_judged() {
    let mut s = Sim::new();
    s.pkt(
        0.0,
        false,
        flags::SYN | flags::FIN | flags::PSH,
        &[1; 6],
        &[],
    );
    s.pkt(1.0, true, flags::ACK | flags::PSH, &[2; 12], &[]);
    s.pkt(2.0, false, flags::ACK | flags::PSH, &[1; 9], &[]);
    s.sseq -= 9;
    s.pkt(3000.0, false, flags::ACK | flags::PSH, &[1; 9], &[]);
    s.pkt(3001.0, true, flags::ACK, b"", &[]);
    let r = s.a.finish();
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert_eq!(r.counts.retransmission, 1, "tshark counts it all the same");
}

/// Linux's 200 ms cork ceiling runs only with nothing in flight: a small tail 200 ms after a
/// full segment still unacknowledged was timed by the ACKs, Nagle or a loss probe, not the
/// cork.
#[test]
fn no_cork_with_data_in_flight() {
    for (acked, corks) in [(true, 1u64), (false, 0)] {
        let mut s = Sim::new();
        let linux = [2, 4, 0x05, 0xb4, 1, 1, 4, 2, 1, 3, 3, 7];
        s.pkt(0.0, true, flags::SYN, b"", &linux);
        s.pkt(0.1, false, flags::SYN | flags::ACK, b"", &linux);
        s.pkt(0.2, true, flags::ACK, b"", &[]);
        let a = flags::ACK | flags::PSH;
        s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
        s.pkt(1.1, false, a, &[1u8; 1460], &[]);
        if acked {
            s.pkt(1.2, true, flags::ACK, b"", &[]);
        }
        s.pkt(201.1, false, a, &[1u8; 100], &[]);
        let r = s.a.finish();
        let n = finding(&r, StallKind::Cork).map_or(0, |f| f.count);
        assert_eq!(n, corks, "acked {acked}: {:?}", r.findings);
    }
}

/// A segment that reaches the capture point much later than one round trip to its sender
/// after the peer's ACK left on the sender's own time (`iphone.pcap`: 58.9 ms after the ACK
/// across a 31.6 ms path — 27 ms after the ACK reached the server), not on the ACK's.
#[test]
fn a_release_long_after_the_ack_reached_the_sender_is_not_the_acks() {
    for (release_ms, nagle) in [(32.0, 1u64), (59.0, 0)] {
        let mut s = Sim::new();
        // Captured at the client, the server 31.6 ms away.
        let mss = [2, 4, 0x05, 0xb4];
        s.pkt(0.0, true, flags::SYN, b"", &mss);
        s.pkt(31.6, false, flags::SYN | flags::ACK, b"", &mss);
        s.pkt(31.7, true, flags::ACK, b"", &[]);
        let a = flags::ACK | flags::PSH;
        s.pkt(100.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
        s.pkt(131.7, false, a, &[1u8; 300], &[]);
        s.pkt(131.8, true, flags::ACK, b"", &[]);
        s.pkt(131.9, false, a, &[1u8; 300], &[]);
        s.pkt(200.0, true, a, b"GET /2 HTTP/1.1\r\n\r\n", &[]);
        s.pkt(231.7, false, a, &[1u8; 300], &[]);
        // The client's delayed ACK, 40 ms late; the next piece `release_ms` after it.
        s.pkt(271.8, true, flags::ACK, b"", &[]);
        s.pkt(271.8 + release_ms, false, a, &[1u8; 300], &[]);
        let r = s.a.finish();
        let n = finding(&r, StallKind::NagleDelayedAck).map_or(0, |f| f.count);
        assert_eq!(n, nagle, "release {release_ms} ms: {:?}", r.findings);
    }
}

/// The set-up's waits, one per resend that kept it waiting, each from the transmission before
/// it.
fn set_up_waits(r: &Analysis) -> Vec<(u64, u64, u64)> {
    let mut v: Vec<(u64, u64, u64)> = finding(r, StallKind::SynRetransmission)
        .map(|f| {
            f.examples
                .iter()
                .map(|e| (e.since_frame, e.frame, e.lost_ns / 1_000_000))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Captured at the server: its SYN-ACK (#2) never reached the client, whose SYN resent 3 s
/// later (#3) got a SYN-ACK at once (#4). The SYN waited 3 s; the SYN-ACK answering it is a
/// reply, not the server's timer (`206_example_a.pcap` counted the 3 s twice).
#[test]
fn a_syn_ack_answering_a_resent_syn_is_a_reply() {
    let mut s = Sim::new();
    let mss = [2, 4, 0x05, 0xb4];
    s.pkt(0.0, true, flags::SYN, b"", &mss);
    s.pkt(0.4, false, flags::SYN | flags::ACK, b"", &mss);
    s.cseq -= 1;
    s.sseq -= 1;
    s.pkt(3000.0, true, flags::SYN, b"", &mss);
    s.pkt(3000.5, false, flags::SYN | flags::ACK, b"", &mss);
    s.pkt(3370.0, true, flags::ACK, b"", &[]);
    let r = s.a.finish();
    assert_eq!(set_up_waits(&r), [(1, 3, 3000)]);
    assert_eq!(r.handshake_resends.syn_ack.count, 0);
}

/// SYN-ACKs resent to a client that never completes the set-up (it gave up, or a scanner's
/// half-open SYN): nobody waited for them; the client's own resent SYNs did wait.
#[test]
fn syn_acks_the_client_never_took_kept_nobody_waiting() {
    let mut s = Sim::new();
    let mss = [2, 4, 0x05, 0xb4];
    s.pkt(0.0, true, flags::SYN, b"", &mss);
    for t in [3000.0, 9000.0] {
        s.cseq -= 1;
        s.pkt(t, true, flags::SYN, b"", &mss);
    }
    for t in [31_700.0, 38_000.0, 51_000.0, 66_000.0, 81_000.0, 96_000.0] {
        s.pkt(t, false, flags::SYN | flags::ACK, b"", &mss);
        s.sseq -= 1;
    }
    s.pkt(100_000.0, false, flags::RST | flags::ACK, b"", &[]);
    let r = s.a.finish();
    assert_eq!(set_up_waits(&r), [(1, 2, 3000), (2, 3, 6000)]);
    assert_eq!(r.handshake_resends.syn_ack.count, 0);
}

/// With timestamps, the ACK completing the set-up names the SYN-ACK the client took, and that
/// SYN-ACK the SYN it answered (`tls_with_huge_ch.pcapng`): the first SYN was lost (its
/// resend, answered, waited 1 s); the SYN-ACK resend and the second SYN resend came after the
/// client had its answer and kept no one waiting.
#[test]
fn timestamps_show_which_resends_the_set_up_needed() {
    let mut s = Sim::new();
    let syn = |val: u32| {
        let mut o = vec![2, 4, 0x05, 0xb4];
        o.extend(ts(val, 0));
        o
    };
    let syn_ack = |val: u32, ecr: u32| {
        let mut o = vec![2, 4, 0x05, 0xb4];
        o.extend(ts(val, ecr));
        o
    };
    s.pkt(0.0, true, flags::SYN, b"", &syn(100));
    s.cseq -= 1;
    s.pkt(1000.0, true, flags::SYN, b"", &syn(1100));
    s.pkt(
        1141.0,
        false,
        flags::SYN | flags::ACK,
        b"",
        &syn_ack(50, 1100),
    );
    s.sseq -= 1;
    s.pkt(
        2155.0,
        false,
        flags::SYN | flags::ACK,
        b"",
        &syn_ack(1065, 1100),
    );
    s.cseq -= 1;
    s.pkt(3012.0, true, flags::SYN, b"", &syn(3112));
    // The client completes with the first SYN-ACK's TSval.
    s.pkt(3014.0, true, flags::ACK, b"", &ts(3114, 50));
    let r = s.a.finish();
    assert_eq!(set_up_waits(&r), [(1, 2, 1000)]);
}

/// The server resent its SYN-ACK because the handshake's last ACK was lost, but the client's
/// request (which acknowledges the SYN-ACK too) got its answer in one round trip
/// (`wechat.pcap`): nobody waited. Had the client been made to resend its request (a full
/// accept queue dropping it), the set-up waited.
#[test]
fn a_syn_ack_after_the_clients_ack_is_a_wait_only_if_the_client_resent() {
    for (resent, waits) in [(false, 0usize), (true, 1)] {
        let mut s = Sim::new();
        let mss = [2, 4, 0x05, 0xb4];
        s.pkt(0.0, true, flags::SYN, b"", &mss);
        s.pkt(347.0, false, flags::SYN | flags::ACK, b"", &mss);
        s.pkt(347.1, true, flags::ACK, b"", &[]);
        let a = flags::ACK | flags::PSH;
        s.pkt(1600.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
        if resent {
            s.cseq -= 18;
            s.pkt(1650.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
        }
        s.sseq -= 1;
        s.pkt(1717.0, false, flags::SYN | flags::ACK, b"", &mss);
        s.pkt(2000.0, false, a, b"HTTP/1.1 200 OK\r\n\r\n", &[]);
        let r = s.a.finish();
        assert_eq!(set_up_waits(&r).len(), waits, "resent {resent}");
    }
}

/// The request, then the server's pure ACK of it `ack_ms` later and its answer `answer_ms`
/// later, on a 100 ms path (captured at the client).
fn answer_after(ack_ms: Option<f64>, answer_ms: f64) -> Analysis {
    let mut s = Sim::new();
    let mss = [2, 4, 0x05, 0xb4];
    s.pkt(0.0, true, flags::SYN, b"", &mss);
    s.pkt(100.0, false, flags::SYN | flags::ACK, b"", &mss);
    s.pkt(100.1, true, flags::ACK, b"", &[]);
    let a = flags::ACK | flags::PSH;
    s.pkt(200.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
    if let Some(ack) = ack_ms {
        s.pkt(200.0 + ack, false, flags::ACK, b"", &[]);
    }
    s.pkt(200.0 + answer_ms, false, a, b"HTTP/1.1 200 OK\r\n\r\n", &[]);
    s.pkt(200.1 + answer_ms, true, flags::ACK, b"", &[]);
    s.a.finish()
}

/// The server acknowledged the request one round trip after it (at once) and answered 50 ms
/// later: 50 ms of think time. Its acknowledgement and answer arriving together 108 ms late
/// (`telesec.pcap`, `ultrasurf.pcap`, `ipv6.pcap`) leave open whether the request or the
/// answer was held on the way or the server was busy: undecided, not a think time.
#[test]
fn an_acknowledgement_arriving_late_with_the_answer_leaves_think_time_undecided() {
    let r = answer_after(Some(100.0), 150.0);
    let f = finding(&r, StallKind::ThinkTime).expect("a prompt ACK, then 50 ms");
    assert_eq!(f.lost_ns, 50_000_000);
    let r = answer_after(Some(208.0), 208.1);
    assert!(
        finding(&r, StallKind::ThinkTime).is_none(),
        "{:?}",
        r.findings
    );
    let u = &r.undecided[0];
    assert_eq!(
        (u.kind, u.reason),
        (
            StallKind::ThinkTime,
            latscope_core::model::analyze::Undecided::AckAndAnswerLate
        )
    );
    // An acknowledgement 300 ms late — beyond any delayed-ACK timer — and the answer 40 ms
    // after it: only those 40 ms are proven the server's.
    let r = answer_after(Some(400.0), 440.0);
    let f = finding(&r, StallKind::ThinkTime).expect("40 ms after the ACK");
    assert_eq!(f.lost_ns, 40_000_000);
    // No acknowledgement before the answer: nothing to tell the path's share from the
    // server's, and the whole is reported as before.
    let r = answer_after(None, 150.0);
    assert_eq!(
        finding(&r, StallKind::ThinkTime).map(|f| f.lost_ns),
        Some(50_000_000)
    );
}

/// A server acknowledging on its delayed-ACK timer (200 ms) every time because its answer is
/// not ready (`aurora.pcapng`): once a transaction showed the timer (the answer well after
/// it), a later answer right behind the same 200 ms acknowledgement is the server's time too.
#[test]
fn the_servers_own_delayed_ack_timer_proves_the_whole_think_time() {
    let mut s = Sim::new();
    s.handshake();
    let a = flags::ACK | flags::PSH;
    let mut t = 1.0;
    for answer in [478.0, 201.2] {
        s.pkt(t, true, a, b"GET / HTTP/1.1\r\n\r\n", &[]);
        s.pkt(t + 200.0, false, flags::ACK, b"", &[]);
        s.pkt(t + answer, false, a, b"HTTP/1.1 200 OK\r\n\r\n", &[]);
        s.pkt(t + answer + 0.1, true, flags::ACK, b"", &[]);
        t += 1000.0;
    }
    let r = s.a.finish();
    let f = finding(&r, StallKind::ThinkTime).expect("both answers");
    assert_eq!(f.count, 2, "{:?}", r);
}

/// A request whose first transmission was lost: the server could answer only the resend, and
/// the think time runs from it — unless the answer echoes the original's TSval (it arrived:
/// the resend was spurious) and runs from the original.
#[test]
fn think_time_runs_from_the_transmission_the_server_answered() {
    for (echo, think_ms) in [(100u32, 250u64), (400, 50)] {
        let mut s = Sim::new();
        ts_handshake(&mut s);
        let a = flags::ACK | flags::PSH;
        s.pkt(1.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &ts(100, 10));
        s.cseq -= 18;
        s.pkt(201.0, true, a, b"GET / HTTP/1.1\r\n\r\n", &ts(400, 10));
        s.pkt(251.1, false, a, b"HTTP/1.1 200 OK\r\n\r\n", &ts(300, echo));
        s.pkt(251.2, true, flags::ACK, b"", &ts(401, 300));
        let r = s.a.finish();
        let f = finding(&r, StallKind::ThinkTime).expect("an answer");
        assert_eq!(f.lost_ns / 1_000_000, think_ms, "echo {echo}");
    }
}

/// A peer that sends on its own (`gnutella.pcap`: pings and query hits unprompted): its data
/// after the client's message is not shown to answer it. Two bursts of its own take back the
/// think times charged on the connection.
#[test]
fn a_server_that_sends_on_its_own_has_no_think_time() {
    let mut s = Sim::new();
    s.handshake();
    let a = flags::ACK | flags::PSH;
    s.pkt(1.0, true, a, &[1; 75], &[]);
    s.pkt(13_800.0, false, a, &[2; 71], &[]);
    s.pkt(13_800.1, true, flags::ACK, b"", &[]);
    let r = finding(&s.a.finish(), StallKind::ThinkTime).map(|f| f.count);
    assert_eq!(r, Some(1), "alone, it looks like an answer");
    let mut s = Sim::new();
    s.handshake();
    s.pkt(1.0, true, a, &[1; 75], &[]);
    s.pkt(13_800.0, false, a, &[2; 71], &[]);
    s.pkt(13_800.1, true, flags::ACK, b"", &[]);
    for t in [33_000.0, 60_000.0] {
        s.pkt(t, false, a, &[3; 143], &[]);
        s.pkt(t + 0.1, true, flags::ACK, b"", &[]);
    }
    let r = s.a.finish();
    assert!(
        finding(&r, StallKind::ThinkTime).is_none(),
        "{:?}",
        r.findings
    );
    assert_eq!(r.top_connections[0].stall_lost_ns, 0);
}

/// A full-size segment resent by timer three times while 200-byte segments pass: a path MTU
/// black hole when it finally gets through as two smaller pieces (the RTO stalls of its
/// resends are the black hole's); loss on a lossy path when it gets through at full size
/// (`alexa-app.pcapng`) or another full-size segment of the sender passed on its first
/// transmission (`heuristic_tcp_ack_payload.pcap`).
#[test]
fn a_black_hole_is_refuted_by_full_size_segments_that_pass() {
    #[derive(Clone, Copy)]
    enum End {
        Smaller,
        FullSize,
        OtherFullPassed,
    }
    let run = |end: End| {
        let mut s = Sim::new();
        s.handshake();
        let a = flags::ACK | flags::PSH;
        s.pkt(1.0, true, a, b"GET /big HTTP/1.1\r\n\r\n", &[]);
        s.pkt(2.0, false, a, &[1; 200], &[]);
        if let End::OtherFullPassed = end {
            s.pkt(2.1, false, flags::ACK, &[1; 1460], &[]);
        }
        s.pkt(3.0, true, flags::ACK, b"", &[]);
        s.pkt(3.1, false, flags::ACK, &[1; 1460], &[]);
        for t in [300.0, 900.0, 2100.0] {
            s.sseq -= 1460;
            s.pkt(t, false, flags::ACK, &[1; 1460], &[]);
        }
        if let End::Smaller = end {
            s.sseq -= 1460;
            s.pkt(4500.0, false, flags::ACK, &[1; 730], &[]);
            s.pkt(4500.1, false, flags::ACK, &[1; 730], &[]);
        }
        s.pkt(4600.0, true, flags::ACK, b"", &[]);
        s.a.finish()
    };
    let r = run(End::Smaller);
    let f = finding(&r, StallKind::PmtuBlackHole).expect("black hole");
    assert_eq!(f.count, 1);
    assert!(
        finding(&r, StallKind::RtoRetransmission).is_none(),
        "{:?}",
        r.findings
    );
    for end in [End::FullSize, End::OtherFullPassed] {
        let r = run(end);
        assert!(
            finding(&r, StallKind::PmtuBlackHole).is_none(),
            "{:?}",
            r.findings
        );
        assert!(finding(&r, StallKind::RtoRetransmission).is_some());
    }
}

/// A sender that filled the receiver's window and then resent (path MTU discovery, loss) spent
/// the wait recovering, not waiting for the window (`smtp.pcap`).
#[test]
fn a_window_full_wait_spent_resending_is_not_the_window() {
    for (resend, stalls) in [(false, 1u64), (true, 0)] {
        let mut s = Sim::new();
        // Receiver window 2920 bytes, no scaling.
        let mss = [2, 4, 0x05, 0xb4];
        s.pkt(0.0, true, flags::SYN, b"", &mss);
        s.pkt(0.1, false, flags::SYN | flags::ACK, b"", &mss);
        s.pkt(0.2, true, flags::ACK, b"", &[]);
        s.pkt(
            1.0,
            true,
            flags::ACK | flags::PSH,
            b"GET / HTTP/1.1\r\n\r\n",
            &[],
        );
        // The server's window field is 1000 in these frames: fill it exactly.
        s.pkt(2.0, false, flags::ACK, &[1; 1000], &[]);
        if resend {
            s.sseq -= 1000;
            s.pkt(300.0, false, flags::ACK, &[1; 1000], &[]);
        }
        s.pkt(400.0, true, flags::ACK, b"", &[]);
        s.pkt(400.1, false, flags::ACK, &[1; 500], &[]);
        let r = s.a.finish();
        let n = finding(&r, StallKind::ReceiveWindowFull).map_or(0, |f| f.count);
        assert_eq!(n, stalls, "resend {resend}: {:?}", r.findings);
    }
}

/// A tail probe 101 ms after the original, charged when the client's next data acknowledged
/// it — until the server's following echo names a TSval of the client's that falls in that
/// wait and no captured packet carried (`bitcoin.pcap`): the client did send something then,
/// the capture missed it, and it may have been the ACK. Taken back, undecided.
#[test]
fn an_echo_of_a_missed_packet_during_the_wait_takes_the_stall_back() {
    let mut s = Sim::new();
    ts_handshake(&mut s);
    let a = flags::ACK | flags::PSH;
    // Enough of the client's packets captured to know its TSvals.
    for k in 0..8u32 {
        let t = 10.0 + f64::from(k) * 100.0;
        s.pkt(t, true, a, &[1; 61], &ts(200 + k, 10));
        s.pkt(t + 50.0, false, a, &[2; 61], &ts(20 + k, 200 + k));
    }
    s.pkt(1000.0, false, a, &[3; 61], &ts(100, 207));
    s.sseq -= 61;
    s.pkt(1101.0, false, a, &[3; 61], &ts(105, 207));
    // The client's data 10 s later acknowledges it; the server's answer echoes TSval 300,
    // which no captured packet of the client carried.
    s.pkt(11_000.0, true, a, &[4; 61], &ts(400, 105));
    let r = s.a.finish();
    assert!(finding(&r, StallKind::RtoRetransmission).is_some());
    let mut s2 = Sim::new();
    ts_handshake(&mut s2);
    for k in 0..8u32 {
        let t = 10.0 + f64::from(k) * 100.0;
        s2.pkt(t, true, a, &[1; 61], &ts(200 + k, 10));
        s2.pkt(t + 50.0, false, a, &[2; 61], &ts(20 + k, 200 + k));
    }
    s2.pkt(1000.0, false, a, &[3; 61], &ts(100, 207));
    s2.sseq -= 61;
    s2.pkt(1101.0, false, a, &[3; 61], &ts(105, 207));
    s2.pkt(11_000.0, true, a, &[4; 61], &ts(400, 105));
    s2.pkt(11_100.0, false, a, &[5; 61], &ts(200, 300));
    let r = s2.a.finish();
    assert!(
        finding(&r, StallKind::RtoRetransmission).is_none(),
        "{:?}",
        r.findings
    );
    assert_eq!(r.undecided.len(), 1, "{:?}", r.undecided);
}

/// What is no set-up wait: a scanner's SYNs 175 ms apart (sooner than any initial RTO), a SYN
/// after the server refused the previous one with a RST (Windows retries a refused connect:
/// a new attempt), a SYN-ACK 31 s after the client completed the set-up and sent nothing (a
/// server with TCP_DEFER_ACCEPT); a SYN resent after a second is.
#[test]
fn what_is_no_set_up_wait() {
    let mss = [2, 4, 0x05, 0xb4];
    // A scanner's retry.
    let mut s = Sim::new();
    s.pkt(0.0, true, flags::SYN, b"", &mss);
    s.cseq -= 1;
    s.pkt(175.0, true, flags::SYN, b"", &mss);
    assert!(set_up_waits(&s.a.finish()).is_empty());
    // Refused, then tried again.
    let mut s = Sim::new();
    s.pkt(0.0, true, flags::SYN, b"", &mss);
    s.pkt(0.3, false, flags::RST | flags::ACK, b"", &[]);
    s.cseq -= 1;
    s.pkt(500.0, true, flags::SYN, b"", &mss);
    s.pkt(500.3, false, flags::RST | flags::ACK, b"", &[]);
    s.cseq -= 1;
    s.pkt(1000.0, true, flags::SYN, b"", &mss);
    assert!(set_up_waits(&s.a.finish()).is_empty());
    // A deferred accept's late SYN-ACK.
    let mut s = Sim::new();
    s.pkt(0.0, true, flags::SYN, b"", &mss);
    s.pkt(0.3, false, flags::SYN | flags::ACK, b"", &mss);
    s.pkt(0.6, true, flags::ACK, b"", &[]);
    s.sseq -= 1;
    s.pkt(31_000.0, false, flags::SYN | flags::ACK, b"", &mss);
    assert!(set_up_waits(&s.a.finish()).is_empty());
    // A SYN lost once.
    let mut s = Sim::new();
    s.pkt(0.0, true, flags::SYN, b"", &mss);
    s.cseq -= 1;
    s.pkt(1000.0, true, flags::SYN, b"", &mss);
    s.pkt(1000.3, false, flags::SYN | flags::ACK, b"", &mss);
    s.pkt(1000.6, true, flags::ACK, b"", &[]);
    let r = s.a.finish();
    assert_eq!(set_up_waits(&r), [(1, 2, 1000)]);
    assert_eq!(r.handshake_resends.syn.count, 1);
}

/// Without the handshake an HTTP request's answer is still the server's for the time after its
/// acknowledgement of the request (`test_loopback.pcap`); without that acknowledgement, or for
/// a protocol that does not say who asks, nothing is claimed.
#[test]
fn an_http_answer_after_the_servers_ack_needs_no_handshake() {
    for (http, ack, think) in [
        (true, true, Some(186)),
        (true, false, None),
        (false, true, None),
    ] {
        let mut s = Sim::new();
        let a = flags::ACK | flags::PSH;
        let req: &[u8] = if http {
            b"GET / HTTP/1.1\r\n\r\n"
        } else {
            &[7; 18]
        };
        s.pkt(1.0, true, a, req, &[]);
        if ack {
            s.pkt(1.057, false, flags::ACK, b"", &[]);
        }
        s.pkt(187.7, false, a, b"HTTP/1.1 200 OK\r\n\r\n", &[]);
        s.pkt(187.8, true, flags::ACK, b"", &[]);
        let r = s.a.finish();
        let got = finding(&r, StallKind::ThinkTime).map(|f| f.lost_ns / 1_000_000);
        assert_eq!(got, think, "http {http} ack {ack}");
    }
}

/// SSH is paced by a person, but its key exchange, sent in clear, is a machine's request:
/// the server's key-exchange computation is think time (`ssh.pcap`: 89 ms).
#[test]
fn an_ssh_key_exchange_is_a_request() {
    let mut s = Sim::new();
    let mss = [2, 4, 0x05, 0xb4];
    // Port 22: swap the server port in by building frames by hand.
    let frame = |s: &mut Sim, ms: f64, from_client: bool, fl: u8, payload: &[u8], opts: &[u8]| {
        s.frame += 1;
        let (src, dst, sp, dp, seq, ack) = if from_client {
            (C, S, 40000, 22, s.cseq, s.sseq)
        } else {
            (S, C, 22, 40000, s.sseq, s.cseq)
        };
        let f = eth_ipv4_tcp(src, dst, sp, dp, seq, ack, fl, 1000, opts, payload);
        let adv = payload.len() as u32 + u32::from(fl & (flags::SYN | flags::FIN) != 0);
        if from_client {
            s.cseq += adv;
        } else {
            s.sseq += adv;
        }
        s.a.push(s.frame, (ms * 1e6) as u64, decode(LinkType::Ethernet, &f));
    };
    frame(&mut s, 0.0, true, flags::SYN, b"", &mss);
    frame(&mut s, 25.7, false, flags::SYN | flags::ACK, b"", &mss);
    frame(&mut s, 25.8, true, flags::ACK, b"", &[]);
    let a = flags::ACK | flags::PSH;
    // KEX_ECDH_INIT: length 44, padding 6, code 30.
    let mut kex = vec![0, 0, 0, 44, 6, 30];
    kex.resize(48, 0);
    frame(&mut s, 100.0, true, a, &kex, &[]);
    frame(&mut s, 189.0, false, flags::ACK, b"", &[]);
    frame(&mut s, 214.7, false, a, &[9; 764], &[]);
    // A typed line later: not a request.
    frame(&mut s, 5000.0, true, a, &[3; 36], &[]);
    frame(&mut s, 5600.0, false, a, &[4; 36], &[]);
    let r = s.a.finish();
    let f = finding(&r, StallKind::ThinkTime).expect("the key exchange");
    assert_eq!((f.count, f.lost_ns / 1_000_000), (1, 89));
}
