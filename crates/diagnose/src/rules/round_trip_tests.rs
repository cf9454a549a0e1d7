//! The round-trip rules and the accounts on evidence built in code: far and near paths, a browser's
//! requests as the round-trip step measures them.

use latscope_core::Summary;
use latscope_core::model::diagnose::RuleId;
use latscope_core::model::round_trips::{
    RequestKind, RoundTripKind, TlsHandshake, TlsKind, TlsVersion,
};

use super::*;
use crate::accounts::round_trips;
use crate::rounds::flights;
use crate::rounds::probe::*;
use latscope_core::model::diagnose::RequestRounds;

const MS: u64 = 1_000_000;

fn s(p50_ns: u64) -> Summary {
    Summary {
        count: 100,
        p50_ns,
        p99_ns: p50_ns + p50_ns / 10,
        max_ns: p50_ns + p50_ns / 5,
        ..Summary::default()
    }
}

fn tls(version: TlsVersion, kind: TlsKind, rtt: u64) -> TlsHandshake {
    let mut t = TlsHandshake {
        handshake_ns: 0,
        version,
        kind,
    };
    // Its round trips and a millisecond of the server's CPU.
    t.handshake_ns = u64::from(t.round_trips()) * rtt + MS;
    t
}

/// A small response in one flight, a round trip and 0.3 ms after the request.
fn small(rtt: u64) -> Exchanged {
    Exchanged {
        ttfb_ns: rtt + 300_000,
        transfer_ns: 0,
        status: 200,
        body_bytes: 612,
        wire_bytes: 850,
        flights: if rtt >= flights::MIN_RTT_NS {
            vec![850]
        } else {
            vec![]
        },
        rounds: 0,
        mss: Some(1448),
        rto_us: Some(200_000 + (rtt / 1000) as u32),
        window: Some(64_000),
        head: HeadSaid::default(),
    }
}

/// A response that arrives in `flights` one round trip apart (200 kB in half a round trip
/// where none were told apart).
fn large(rtt: u64, flights: &[u64]) -> Exchanged {
    let wire: u64 = flights.iter().sum::<u64>().max(200_000);
    Exchanged {
        transfer_ns: match flights.len() as u64 {
            0 => rtt / 2,
            n => (n - 1) * rtt,
        },
        body_bytes: wire - 300,
        wire_bytes: wire,
        flights: flights.to_vec(),
        rounds: flights::transfer_rounds(
            flights,
            match flights.len() as u64 {
                0 => rtt / 2,
                n => (n - 1) * rtt,
            },
            rtt,
        ),
        ..small(rtt)
    }
}

/// A far (or near) healthy server: keep-alive, TLS 1.3 resumed, a path of `rtt`, the hosts'
/// 0.3 ms on top.
fn far(rtt: u64, https: bool) -> Evidence {
    let t = |kind| https.then(|| tls(TlsVersion::Tls13, kind, rtt));
    let opened = |kind| Opened {
        connect_ns: rtt + 50_000,
        tls: t(kind),
    };
    let x = small(rtt);
    Evidence {
        path: Some(s(rtt)),
        path_by_syn: true,
        handshake: Some(s(rtt + 50_000)),
        single: Some(s(rtt + 300_000)),
        browser: Some(RoundTripProbe {
            first: opened(TlsKind::Full),
            first_exchange: x.clone(),
            reuse: Reuse::Kept,
            next: Some(x.clone()),
            idle: Some(IdlePause {
                pause_ns: 400 * MS,
                rto_us: x.rto_us,
                outcome: AfterPause::Open(x.clone()),
            }),
            returning: https.then(|| Visit {
                opened: opened(TlsKind::Resumed),
                exchange: Some(x.clone()),
            }),
            redirects: vec![],
            page: None,
        }),
        ..Evidence::default()
    }
}

fn probe(e: &mut Evidence) -> &mut RoundTripProbe {
    e.browser.as_mut().expect("a probe")
}

fn rules(e: &Evidence) -> Vec<RuleId> {
    apply(e).iter().map(|f| f.rule).collect()
}

fn account(e: &Evidence, kind: RequestKind) -> RequestRounds {
    let f = apply(e);
    round_trips(e, &f)
        .expect("accounts")
        .requests
        .into_iter()
        .find(|a| a.request == kind)
        .expect("the account")
}

fn verdict(e: &Evidence) -> String {
    let f = apply(e);
    crate::verdict(&f, &crate::budget(e), round_trips(e, &f).as_ref())
}

/// A healthy server 40 ms away: nothing is found, every request is at its floor, and the
/// verdict says the path is the floor.
#[test]
fn a_healthy_far_server_is_at_the_floor() {
    let e = far(40 * MS, true);
    assert_eq!(rules(&e), vec![]);
    let first = account(&e, RequestKind::First);
    assert_eq!(
        (first.round_trips(), first.needed()),
        (3, 3),
        "TCP, TLS 1.3, request"
    );
    assert_eq!(account(&e, RequestKind::Next).round_trips(), 1);
    assert_eq!(account(&e, RequestKind::Returning).round_trips(), 3);
    let v = verdict(&e);
    assert!(
        v.starts_with(
            "the path is the floor: nothing to save — the next request takes 1 round trip"
        ),
        "{v}"
    );
    // Over a LAN the path is no floor worth naming.
    let near = far(60_000, true);
    assert_eq!(rules(&near), vec![]);
    assert!(
        verdict(&near).starts_with("no latency problem found"),
        "{}",
        verdict(&near)
    );
}

/// A server that closes every connection: the next request pays TCP and TLS again, one round
/// trip each — named, and counted as avoidable; over a LAN it costs microseconds and is not.
#[test]
fn a_server_that_closes_every_connection() {
    let rtt = 40 * MS;
    let mut e = far(rtt, true);
    let p = probe(&mut e);
    p.reuse = Reuse::SaidClose;
    p.first_exchange.head.close = true;
    p.next = None;
    p.idle = None;
    let found = apply(&e);
    assert_eq!(found[0].rule, RuleId::ConnectionNotReused, "{found:#?}");
    let setup = e.browser.as_ref().unwrap().new_connection();
    assert_eq!(
        found[0].explains_ns,
        2 * rtt + 50_000,
        "the connects' median (the round trip and the hosts' 50 µs) and TLS's round trip"
    );
    assert!(
        found[0].explains_ns <= setup.total_ns(),
        "never more than measured"
    );
    assert_eq!(found[0].side, Side::Server);
    let next = account(&e, RequestKind::Next);
    assert_eq!((next.round_trips(), next.needed()), (3, 1));
    assert!(
        next.avoidable()
            .all(|p| p.rule == Some(RuleId::ConnectionNotReused))
    );
    let v = verdict(&e);
    assert!(
        v.contains("the next request: 3 round trips where 1 would do"),
        "{v}"
    );
    // HTTP/1.0 is said so.
    probe(&mut e).first_exchange.head.http10 = true;
    let f = connection_not_reused(&e).unwrap();
    assert!(f.evidence[0].contains("HTTP/1.0"), "{:?}", f.evidence);
    // 60 µs away every request still pays its connect: the round trip and the hosts' work,
    // 110 µs as the connects measured it.
    let mut near = far(60_000, false);
    probe(&mut near).reuse = Reuse::SaidClose;
    let found = apply(&near);
    assert_eq!(found[0].rule, RuleId::ConnectionNotReused, "{found:#?}");
    assert_eq!(found[0].explains_ns, 110_000);
    assert!(
        found[0]
            .evidence
            .iter()
            .any(|l| l.contains("connects took 110us at the median")),
        "{:?}",
        found[0].evidence
    );
    // Never more than this connection's own connect, never less than the round trip.
    near.handshake = Some(s(400_000));
    assert_eq!(connection_not_reused(&near).unwrap().explains_ns, 110_000);
    near.handshake = Some(s(20_000));
    assert_eq!(connection_not_reused(&near).unwrap().explains_ns, 60_000);
    // A TLS 1.2 server without resumption 60 µs away: a round trip of 60 µs on new connections
    // only is no finding.
    let mut near = far(60_000, true);
    let p = probe(&mut near);
    p.first.tls = Some(tls(TlsVersion::Tls12, TlsKind::Full, 60_000));
    p.returning.as_mut().unwrap().opened.tls = Some(tls(TlsVersion::Tls12, TlsKind::Full, 60_000));
    assert_eq!(rules(&near), vec![]);
}

/// A keep-alive timeout shorter than a client's pause: the idle connection was closed.
#[test]
fn a_short_keep_alive_timeout() {
    let mut e = far(30 * MS, false);
    let p = probe(&mut e);
    p.idle.as_mut().unwrap().outcome = AfterPause::Closed { after_ns: 250 * MS };
    p.first_exchange.head.keep_alive_timeout_s = Some(0);
    let f = connection_not_reused(&e).expect("fires");
    assert!(
        f.title.contains("closes idle connections after 250"),
        "{}",
        f.title
    );
    assert!(f.evidence.iter().any(|l| l.contains("timeout=0")));
    let idle = account(&e, RequestKind::AfterIdle);
    assert_eq!((idle.round_trips(), idle.needed()), (2, 1));
    // Kept over the pause: no finding.
    let e = far(30 * MS, false);
    assert_eq!(connection_not_reused(&e), None);
}

/// TLS 1.2 without resumption: both the version and the missing resumption cost a round trip
/// of a returning client's connection; resumption is said first, always (equal costs rank in
/// the rules' order, never by noise).
#[test]
fn tls_12_without_resumption() {
    let rtt = 25 * MS;
    let mut e = far(rtt, true);
    let p = probe(&mut e);
    p.first.tls = Some(tls(TlsVersion::Tls12, TlsKind::Full, rtt));
    p.returning.as_mut().unwrap().opened.tls = Some(tls(TlsVersion::Tls12, TlsKind::Full, rtt));
    let found = apply(&e);
    let names: Vec<RuleId> = found.iter().map(|f| f.rule).collect();
    assert_eq!(names, vec![RuleId::TlsNotResumed, RuleId::OldTlsVersion]);
    assert_eq!(found[0].explains_ns, rtt);
    assert_eq!(found[1].explains_ns, rtt);
    let back = account(&e, RequestKind::Returning);
    assert_eq!((back.round_trips(), back.needed()), (4, 3));
    let first = account(&e, RequestKind::First);
    assert_eq!((first.round_trips(), first.needed()), (4, 3));
    // The two handshakes measured apart, the returning one a millisecond quicker than two of
    // the path's round trips (host noise on the pings): the round trip both findings save is
    // priced the same, and the order stays.
    let p = probe(&mut e);
    p.first.tls.as_mut().unwrap().handshake_ns = 2 * rtt + MS;
    p.returning
        .as_mut()
        .unwrap()
        .opened
        .tls
        .as_mut()
        .unwrap()
        .handshake_ns = 2 * rtt - MS;
    let found = apply(&e);
    let names: Vec<RuleId> = found.iter().map(|f| f.rule).collect();
    assert_eq!(names, vec![RuleId::TlsNotResumed, RuleId::OldTlsVersion]);
    assert_eq!(found[0].explains_ns, rtt - MS / 2);
    assert_eq!(found[1].explains_ns, rtt - MS / 2);
    // Resumed: only the version is left, on first connections.
    probe(&mut e).returning.as_mut().unwrap().opened.tls =
        Some(tls(TlsVersion::Tls12, TlsKind::Resumed, rtt));
    assert_eq!(rules(&e), vec![RuleId::OldTlsVersion]);
    // TLS 1.3 without resumption: a full handshake is one round trip too — no finding.
    let mut e = far(rtt, true);
    probe(&mut e).returning.as_mut().unwrap().opened.tls =
        Some(tls(TlsVersion::Tls13, TlsKind::Full, rtt));
    assert_eq!(rules(&e), vec![]);
}

/// A connection idle longer than its RTO starts the same response from an initial window
/// again; back to back it went in one flight.
#[test]
fn slow_start_restarts_after_an_idle_pause() {
    let rtt = 40 * MS;
    let mut e = far(rtt, false);
    let p = probe(&mut e);
    p.next = Some(large(rtt, &[200_000]));
    p.idle.as_mut().unwrap().outcome =
        AfterPause::Open(large(rtt, &[14_480, 28_960, 57_920, 98_640]));
    let found = apply(&e);
    assert_eq!(found[0].rule, RuleId::SlowStartAfterIdle, "{found:#?}");
    assert_eq!(found[0].explains_ns, 3 * rtt);
    let idle = account(&e, RequestKind::AfterIdle);
    assert_eq!((idle.round_trips(), idle.needed()), (4, 1));
    // The same flights after the pause as before: nothing restarted.
    let p = probe(&mut e);
    p.next = Some(large(rtt, &[14_480, 28_960, 57_920, 98_640]));
    assert_eq!(slow_start_after_idle(&e), None);
    // Over a LAN no flights are told apart, and nothing is claimed.
    let mut near = far(100_000, false);
    let p = probe(&mut near);
    p.next = Some(large(100_000, &[]));
    p.idle.as_mut().unwrap().outcome = AfterPause::Open(large(100_000, &[]));
    assert_eq!(slow_start_after_idle(&near), None);
}

/// A first flight of four segments that then doubles: a small initial window, one round trip
/// more than ten segments need for 256 KiB.
#[test]
fn a_small_initial_window() {
    let rtt = 30 * MS;
    let mut e = far(rtt, false);
    let iw4: Vec<u64> = [4u64, 8, 16, 32, 64]
        .iter()
        .map(|n| n * 1448)
        .chain([82_592 + 300])
        .collect();
    probe(&mut e).first_exchange = large(rtt, &iw4);
    let found = apply(&e);
    assert_eq!(found[0].rule, RuleId::SmallInitialWindow, "{found:#?}");
    assert_eq!(found[0].explains_ns, rtt);
    // Ten segments to start with: the floor.
    let iw10: Vec<u64> = [10u64, 20, 40, 80]
        .iter()
        .map(|n| n * 1448)
        .chain([44_944])
        .collect();
    probe(&mut e).first_exchange = large(rtt, &iw10);
    assert_eq!(small_initial_window(&e), None);
    // A small first flight that does not grow is the application's pace, not a window.
    probe(&mut e).first_exchange = large(rtt, &[5_000, 5_000, 5_000, 5_000, 5_000, 5_000]);
    assert_eq!(small_initial_window(&e), None);
    // The client's own window under ten segments (7.9 KiB) bounds the flights: a head alone in
    // the first one, then what that window lets through, is no initial window of the server's.
    let mut head_first = large(rtt, &[243, 5_800, 7_300, 8_064, 5_200, 8_064, 8_064]);
    head_first.window = Some(8_064);
    probe(&mut e).first_exchange = head_first;
    assert_eq!(small_initial_window(&e), None);
    probe(&mut e).first_exchange.window = Some(262_144);
    assert!(
        small_initial_window(&e).is_some(),
        "the same flights under a wide window"
    );
}

/// A redirect is said whatever it costs (every other step measured it, not the page), with
/// its round trips.
#[test]
fn a_redirect_is_named() {
    for rtt in [40 * MS, 60_000] {
        let mut e = far(rtt, false);
        let x = small(rtt);
        probe(&mut e).redirects = vec![Hop {
            from: "http://10.8.0.2/sub".into(),
            status: 301,
            to: "http://10.8.0.2/sub/".into(),
            same_origin: true,
            cost_ns: x.total_ns(),
            round_trips: 1,
        }];
        let p = probe(&mut e);
        p.page = Some(Visit {
            opened: p.first,
            exchange: Some(x.clone()),
        });
        let f = redirects(&e).expect("fires");
        assert_eq!(f.explains_ns, x.total_ns());
        assert!(f.fix.contains("http://10.8.0.2/sub/"));
        let first = account(&e, RequestKind::First);
        assert!(first.parts.iter().any(|p| p.kind == RoundTripKind::Redirect
            && p.avoidable == 1
            && p.rule == Some(RuleId::Redirects)));
        // TCP, the redirect, the page: the redirect is the one a fix saves.
        assert_eq!((first.round_trips(), first.needed()), (3, 2), "{first:#?}");
    }
}

/// A latscope server far away: its requests go on one connection, and the path is the floor.
#[test]
fn a_far_latscope_server_is_counted_from_its_handshakes() {
    let rtt = 25 * MS;
    let mut e = far(rtt, false);
    e.browser = None;
    let f = apply(&e);
    let r = round_trips(&e, &f).expect("accounts");
    let kinds: Vec<RequestKind> = r.requests.iter().map(|a| a.request).collect();
    assert_eq!(kinds, vec![RequestKind::First, RequestKind::Next]);
    assert_eq!(r.requests[0].round_trips(), 2);
    assert!(
        verdict(&e).starts_with("the path is the floor"),
        "{}",
        verdict(&e)
    );
}

/// A handshake is slow by what it spends beyond its own round trips: a millisecond of the
/// server's signature 40 ms away is not; a TLS 1.3 handshake that takes two round trips'
/// time spends one of them at the server.
#[test]
fn slow_tls_counts_the_handshakes_own_round_trips() {
    let rtt = 40 * MS;
    let mut e = far(rtt, true);
    probe(&mut e).first.tls = Some(tls(TlsVersion::Tls12, TlsKind::Full, rtt));
    e.phases = Some(latscope_core::model::diagnose::RequestPhases {
        requests: 5,
        dns_ns: 0,
        connect_ns: rtt,
        tls_ns: Some(2 * rtt + MS),
        tls_client_cpu_ns: None,
        ttfb_ns: rtt,
        transfer_ns: 0,
    });
    assert_eq!(slow_tls(&e), None);
    probe(&mut e).first.tls = Some(TlsHandshake {
        handshake_ns: 2 * rtt + MS,
        version: TlsVersion::Tls13,
        kind: TlsKind::Full,
    });
    let f = slow_tls(&e).expect("fires");
    assert_eq!(f.explains_ns, rtt + MS);
    assert!(
        f.evidence[0].contains("beyond its 1 round trip"),
        "{:?}",
        f.evidence
    );
}

/// From the client alone, a send buffer shows as flights of one size well under the window the
/// client advertised; flights as large as the window are the window's, and growing ones a
/// congestion window's.
#[test]
fn a_send_buffer_seen_from_the_client() {
    let rtt = 40 * MS;
    let buffered = [
        13_000, 16_000, 16_400, 16_100, 16_300, 16_200, 16_000, 16_300, 5_000,
    ];
    let mut e = far(rtt, false);
    let x = large(rtt, &buffered);
    assert_eq!(x.further_rounds(), 8);
    probe(&mut e).first_exchange = Exchanged {
        window: Some(400_000),
        ..x.clone()
    };
    let f = send_buffer_limited(&e).expect("fires");
    assert_eq!(f.side, Side::Server);
    assert!(
        f.confidence < 0.7,
        "one seat cannot tell a buffer from the writes"
    );
    // 127 kB from ten segments doubling need 3 round trips: 5 lost.
    assert_eq!(x.floor_rounds(), 3);
    assert_eq!(f.explains_ns, 5 * rtt);
    let first = account(&e, RequestKind::First);
    assert!(
        first
            .parts
            .iter()
            .any(|p| p.kind == RoundTripKind::WindowLimited
                && p.avoidable == 5
                && p.rule == Some(RuleId::SendBufferLimited))
    );
    // The client's own window was about that size: not the server's buffer.
    probe(&mut e).first_exchange.window = Some(24_000);
    assert_eq!(send_buffer_limited(&e), None);
    // Growing flights: a congestion window.
    probe(&mut e).first_exchange = Exchanged {
        window: Some(400_000),
        ..large(
            rtt,
            &[
                14_480, 28_960, 57_920, 60_000, 61_448, 62_896, 64_344, 3_000,
            ],
        )
    };
    assert_eq!(send_buffer_limited(&e), None);
    // Slow start's growth hid the buffer in the first response; the next response on the
    // kept connection shows the plateau, and says which response it read.
    probe(&mut e).next = Some(Exchanged {
        window: Some(400_000),
        ..x.clone()
    });
    let f = send_buffer_limited(&e).expect("the next response's flights");
    assert!(
        f.evidence[0].starts_with("the next response on the same connection"),
        "{:?}",
        f.evidence
    );
    // Neither end's own instrument may contradict it (the lab's receive-window @ 20 ms from the
    // server's host read send_buffer_limited first, 3 of 3 runs): a client whose buffer is at
    // tcp_rmem's ceiling may be the limit itself…
    let limits = |rcvbuf| latscope_core::model::transfer::TransferLimits {
        rcv_wnd: Some(8_064),
        rcv_wscale: Some(7),
        rcvbuf_bytes: Some(rcvbuf),
        ..Default::default()
    };
    let dl = |rcvbuf| crate::evidence::Download {
        body_bytes: 262_144,
        transfer_ns: 17 * rtt,
        client: Some(limits(rcvbuf)),
        rmem_max: Some(16_384),
    };
    e.download = Some(dl(16_384));
    assert_eq!(send_buffer_limited(&e), None);
    e.download = Some(dl(8_192));
    assert!(send_buffer_limited(&e).is_some());
    // …and a server whose socket was read and says its buffer did not hold it back is not.
    e.server_sockets = Some(crate::evidence::ServerSockets {
        process: "nginx[9]".into(),
        connections: 1,
        nagle_on: 0,
        corked: 0,
        snd_mss: Some(1_448),
        limits: Some(latscope_core::model::transfer::TransferLimits {
            busy_us: 1_720_000,
            rwnd_limited_us: 976_000,
            sndbuf_limited_us: 0,
            sndbuf_bytes: Some(103_680),
            ..Default::default()
        }),
        cwnd_bytes: Some(14_480),
    });
    assert_eq!(send_buffer_limited(&e), None);
}

/// A shaped link seen from the client alone: the reader's wake-ups cut an even stream into
/// "flights" of one size, but the capture rated the responses' delivery — paced by a link, not
/// clocked by the round trip — and at that rate the response takes its whole transfer. The
/// link is the limit, not a send buffer (the lab's held-back 20 Mbit/s tbf 10 ms away: 21
/// flights of 11.3 KiB, a 512 KiB page delivered at 20.5 Mbit/s in 206 ms of 218 ms).
#[test]
fn a_shaped_links_even_stream_is_no_send_buffer() {
    let rtt = 10 * MS;
    let mut flights = vec![14_480, 11_500];
    flights.extend([11_570; 19]);
    flights.push(250_000);
    let mut e = far(rtt, false);
    e.single = Some(s(218 * MS));
    let x = Exchanged {
        window: Some(410_000),
        transfer_ns: 206 * MS,
        wire_bytes: 527_000,
        body_bytes: 524_288,
        ..large(rtt, &flights)
    };
    probe(&mut e).first_exchange = x.clone();
    probe(&mut e).next = Some(x.clone());
    // Without a rate for the way down, the flights read as a buffer.
    assert_eq!(
        send_buffer_limited(&e).map(|f| f.rule),
        Some(RuleId::SendBufferLimited)
    );
    let down = |rate_bps, source| crate::evidence::Bottleneck {
        up: None,
        down: Some(crate::evidence::LinkRate {
            rate_bps,
            source,
            wire_bytes: 545_000,
        }),
    };
    e.bottleneck = Some(down(20.5e6, RateSource::Delivery { responses: 11 }));
    assert_eq!(send_buffer_limited(&e), None);
    assert_eq!(
        rules(&e).first(),
        Some(&RuleId::BottleneckBandwidth),
        "{:?}",
        rules(&e)
    );
    // A link that would carry the response in a fraction of its transfer leaves the buffer…
    e.bottleneck = Some(down(200e6, RateSource::Delivery { responses: 11 }));
    assert!(send_buffer_limited(&e).is_some());
    // …and so does a capacity measured from packet trains: it says what the link could carry,
    // not that the responses were paced by it.
    e.bottleneck = Some(down(20.5e6, RateSource::PacketTrains { pairs: 40 }));
    assert!(send_buffer_limited(&e).is_some());
}

/// Counters that name no limit contradict nothing where the server's buffer is smaller than
/// its congestion window: the flights decide ([`a_send_buffer_seen_from_the_client`]'s plateau).
#[test]
fn silent_server_counters_let_the_flights_decide() {
    let rtt = 40 * MS;
    let buffered = [
        13_000, 16_000, 16_400, 16_100, 16_300, 16_200, 16_000, 16_300, 5_000,
    ];
    let mut e = far(rtt, false);
    probe(&mut e).first_exchange = Exchanged {
        window: Some(400_000),
        ..large(rtt, &buffered)
    };
    // The lab's send-buffer 20 ms away, the server's host, one run of three: 0% of 300 ms busy,
    // an 8 KiB buffer under 154 KiB, "no latency problem found". The evidence says what the
    // socket showed.
    let quiet = |sndbuf_bytes, cwnd| crate::evidence::ServerSockets {
        process: "nginx[9]".into(),
        connections: 2,
        nagle_on: 2,
        corked: 0,
        snd_mss: Some(1_448),
        limits: Some(latscope_core::model::transfer::TransferLimits {
            busy_us: 300_000,
            sndbuf_bytes: Some(sndbuf_bytes),
            ..Default::default()
        }),
        cwnd_bytes: Some(cwnd),
    };
    e.server_sockets = Some(quiet(8_192, 157_696));
    let f = send_buffer_limited(&e).expect("a buffer under the window, counters silent");
    assert!(
        f.evidence
            .iter()
            .any(|l| l.contains("counters named no limit")),
        "{:?}",
        f.evidence
    );
    assert_eq!(f.side, Side::Server);
    // A buffer that holds the congestion window is not the limit, whatever the flights.
    e.server_sockets = Some(quiet(262_144, 157_696));
    assert_eq!(send_buffer_limited(&e), None);
}
