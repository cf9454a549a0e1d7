//! What several rules read: the hosts' excess over the path, loss counted on the wire and by the
//! kernel's counters, the waits for the client's ACK, and whether a TCP timer explains the excess.

use super::*;
use latscope_core::Summary;

/// Excess of the single-request median over the path median and the exchange's serialisation
/// at the bottleneck, as far as the measurement bears it out (time spent in the hosts).
pub(crate) fn host_excess(e: &Evidence) -> Option<(u64, u64, u64)> {
    let single = e.single.as_ref()?.p50_ns;
    let path = e.path.as_ref().map(|p| p.p50_ns).unwrap_or(0);
    let wire = e.serialisation_share_ns().unwrap_or(0);
    Some((
        single,
        path,
        single.saturating_sub(path).saturating_sub(wire),
    ))
}

/// Whether the hosts' `excess` over the path is the server's own time and not the path's
/// noise: at least 1 ms, and either 5× the path's round trip (near) or, on a path so long that
/// 5× would hide whole round trips of waiting, a quarter of the request and either 10× the
/// path's own spread (its p90 beyond its median) or every request clear of that spread
/// ([`clear_of_the_path`]), so that a path's jitter is never read as thinking. A
/// 30 ms wait before the first byte on a 40 ms path is the server's; 0.4 ms on it is the path's.
///
/// The path's spread is the least that its two measurements show, the SYN ping and the connects
/// ([`path_spread`]): a path's own jitter is in both, a moment of this host's noise in one.
pub(crate) fn beyond_the_path(e: &Evidence, excess: u64) -> bool {
    if excess < 1_000_000 {
        return false;
    }
    let Some(path) = e.path.as_ref() else {
        return true;
    };
    if excess >= path.p50_ns.saturating_mul(5) {
        return true;
    }
    let single = e.single.as_ref().map_or(0, |s| s.p50_ns);
    let spread = path_spread(e).unwrap_or(0);
    excess.saturating_mul(4) >= single
        && (excess >= spread.saturating_mul(10) || clear_of_the_path(e, path, excess))
}

/// Whether even the fastest single request stood clear of the path's jitter: slower than nine
/// SYN pings in ten, and at least half of `excess` beyond their median. A path's jitter moves
/// the requests as it moves the pings (some requests meet its quiet moments); a wait every
/// request pays does not. Think-time 20 ms away, this host's delay line swinging by 2–7 ms
/// (p90 beyond p50 of the pings and connects; ×10 is more than the whole request): in four of
/// six runs "no latency problem found", its own verdict saying 15.4 ms of each request was the
/// server's before its first byte — the fastest of 26 requests 35.5 ms, nine pings in ten under
/// 25.5 ms, their median 21 ms. A healthy server's fastest request is never above the pings'
/// p90 (the lab's 20 ms round, 54 runs: at most 0.16 ms, on 0.3 ms of excess).
fn clear_of_the_path(e: &Evidence, path: &Summary, excess: u64) -> bool {
    e.single.as_ref().is_some_and(|s| {
        s.count > 0
            && path.count > 0
            && s.min_ns > path.p90_ns
            && s.min_ns.saturating_sub(path.p50_ns).saturating_mul(2) >= excess
    })
}

/// How much the path's round trip swings: its p90 beyond its median, the least of the SYN
/// ping's and the connects' (each a round trip of the same path, measured seconds apart).
/// Jitter on the path shows in both; this host's noise of one moment, in one: think-time 20 ms
/// away read clean in the lab's first run from two seats, its 50 SYN pings spread by 1.9 ms
/// (p90 22.8 against p50 20.9 ms) while its 87 connects spread by 1.2 ms and its 27 requests
/// by 0.1 ms, and 15 ms before each first byte fell under 10× the pings' spread. A summary
/// without a p90 (below its median) says nothing of the spread.
pub(crate) fn path_spread(e: &Evidence) -> Option<u64> {
    [e.path.as_ref(), e.handshake.as_ref()]
        .into_iter()
        .flatten()
        .filter(|s| s.count > 0 && s.p90_ns >= s.p50_ns)
        .map(|s| s.p90_ns - s.p50_ns)
        .min()
}

/// The capture's retransmissions less those the receivers reported as duplicates (D-SACKs in
/// the kernel's counters): a retransmission whose original had arrived (a timer or a tail-loss
/// probe that fired because the ACK was late, on a busy server) lost nothing. Plus the sends
/// the capture never saw twice: a sender that stopped with both windows open and went on only
/// on the peer's next segment had lost what it sent before it reached the capture point.
///
/// The D-SACKs are counted over the whole run and both hosts' namespaces, the capture's
/// retransmissions on its connections only: where the run resent more than the capture saw (a
/// load's bulk transfer, its concurrent connections), the duplicates can be those others', and
/// only what they cannot hold — the D-SACKs beyond the run's other retransmissions — cancels
/// the capture's (at 40 ms, a load's duplicates had cancelled every one of a lossy path's
/// retransmissions). Where the run resent what the capture saw, every D-SACK is theirs.
pub(crate) fn lost_on_wire(e: &Evidence, c: &CaptureEvidence) -> u64 {
    let spurious = e.counters.map_or(0, |k| {
        let elsewhere = k.retransmitted().saturating_sub(c.retransmissions);
        k.spurious().saturating_sub(elsewhere)
    });
    c.retransmissions.saturating_sub(spurious) + c.unseen_loss.map_or(0, |u| u.count)
}

/// A loss rate that matters: at least one lost segment per 1000 frames.
pub(crate) fn loss_rate_material(e: &Evidence, c: &CaptureEvidence) -> bool {
    let lost = lost_on_wire(e, c);
    lost > 0 && lost * 1000 >= c.frames.max(1)
}

/// At least 5 segments and 0.5% of `of`: a kernel counter's share that is loss, not noise.
pub(crate) fn counter_material(n: u64, of: u64) -> bool {
    n >= 5 && n * 200 >= of.max(1)
}

/// Loss the kernel's TCP counters show across the handshakes and single requests, as evidence
/// lines (empty: none material): data segments retransmitted by either side, or segments that
/// arrived out of order (the one before the gap was lost on the way to that side). SYN
/// retransmissions are left out — they are the handshakes' own finding.
pub(crate) fn counter_loss(e: &Evidence) -> Vec<String> {
    let Some(c) = &e.counters else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut side = |who: &str, n: &NsCounters| {
        if counter_material(n.lost_retrans(), n.out_segs) {
            out.push(format!(
                "kernel counters: {who} retransmitted {} data segments of {} sent ({:.1}%; RetransSegs − TCPSynRetrans{})",
                n.lost_retrans(),
                n.out_segs,
                100.0 * n.lost_retrans() as f64 / n.out_segs.max(1) as f64,
                if n.dsack_recv > 0 {
                    format!(
                        ", less the {} the receiver reported it already had (D-SACK)",
                        n.dsack_recv
                    )
                } else {
                    String::new()
                }
            ));
        }
        if counter_material(n.local_out_drops(), n.ip_out_requests) {
            out.push(format!(
                "kernel counters: {who} dropped {} of its {} outgoing IP packets before they left (IpOutRequests − IpOutTransmits: netfilter output rules or routing); TCP sends them again after a timer, as after a loss",
                n.local_out_drops(),
                n.ip_out_requests
            ));
        }
        if counter_material(n.ofo_queued, n.in_segs) {
            out.push(format!(
                "kernel counters: {} of the {} segments {who} received arrived out of order (TCPOFOQueue): the one before each gap was lost on its way there",
                n.ofo_queued, n.in_segs
            ));
        }
    };
    match (&c.server, c.shared) {
        (Some(s), true) => side("client and server (one namespace)", s),
        (server, _) => {
            side("the client", &c.client);
            if let Some(s) = server {
                side("the server", s);
            }
        }
    }
    out
}

/// Loss on data segments at a material rate, seen by the capture or the kernel's counters.
pub(crate) fn data_loss_material(e: &Evidence) -> bool {
    e.capture.as_ref().is_some_and(|c| loss_rate_material(e, c)) || !counter_loss(e).is_empty()
}

/// Segments lost over the measured span, by the best count there is: retransmissions on the
/// wire, or the kernel's counters (data retransmitted, packets dropped on the way out, and
/// segments that arrived after a gap) of both namespaces.
pub(crate) fn lost_segments(e: &Evidence) -> u64 {
    let wire = e.capture.as_ref().map_or(0, |c| lost_on_wire(e, c));
    let side = |n: &NsCounters| (n.lost_retrans() + n.local_out_drops()).max(n.ofo_queued);
    let counted = e.counters.map_or(0, |c| match (c.server, c.shared) {
        (Some(s), true) => side(&s),
        (s, _) => side(&c.client) + s.map_or(0, |s| side(&s)),
    });
    wire.max(counted)
}

/// Transactions the wire shows waiting for the client's ACK (delayed-ACK releases, Nagle-shaped
/// or not) and the time they lost.
pub(crate) fn ack_stalls(c: &CaptureEvidence) -> Option<StallTotal> {
    let parts = [c.delayed_ack, c.nagle.map(|n| n.total)];
    parts.iter().flatten().copied().reduce(|a, b| StallTotal {
        count: a.count + b.count,
        lost_ns: a.lost_ns + b.lost_ns,
    })
}

/// Loss explains the waits for the client's ACK: data was lost at a material rate in the same
/// span, the lost segments are at least half as many as the waits (each loss shrinks the
/// sender's window, and the rest of a response then waits for an ACK the client delays), and the
/// server's sockets do not show Nagle on (Nagle's held segments wait for every delayed ACK,
/// loss or not). The waits are counted on the wire, or, without a capture, every request the
/// quick-ack experiment sped up (at least half of them: it moved the median).
pub(crate) fn loss_explains_ack_stalls(e: &Evidence) -> bool {
    if !data_loss_material(e) || e.server_sockets.as_ref().is_some_and(|s| s.nagle_on > 0) {
        return false;
    }
    let waits = match e.capture.as_ref().and_then(ack_stalls) {
        Some(s) => s.count,
        None if quickack_helped(e) => e.single.as_ref().map_or(0, |s| s.count / 2),
        None => return false,
    };
    waits > 0 && lost_segments(e).saturating_mul(2) >= waits
}

/// What the waits for the client's ACK that loss caused cost a request on average (0 when loss
/// does not explain them): their time on the wire per transaction, or what TCP_QUICKACK removed
/// from the median.
pub(crate) fn loss_ack_stall_cost(e: &Evidence) -> u64 {
    if !loss_explains_ack_stalls(e) {
        return 0;
    }
    if let Some(c) = &e.capture
        && let Some(s) = ack_stalls(c)
    {
        return s.lost_ns.checked_div(c.transactions).unwrap_or(s.lost_ns);
    }
    match (&e.single, &e.quickack) {
        (Some(s), Some(q)) => s.p50_ns.saturating_sub(q.p50_ns),
        _ => 0,
    }
}

/// The server's listen queue dropped SYNs or handshakes (its namespace's counters).
pub(crate) fn listen_overflowed(e: &Evidence) -> bool {
    e.counters
        .and_then(|c| c.server)
        .is_some_and(|s| s.listen_overflowed())
}

/// The HTTP load of the latency-under-load step moved at least half the bottleneck's rate: the
/// probe queued behind its bytes on the link.
pub(crate) fn load_fills_bottleneck(e: &Evidence) -> bool {
    match (e.bottleneck, e.under_load.as_ref().map(|u| u.load)) {
        // The load's responses cross the server → client direction.
        (Some(Bottleneck { down: Some(d), .. }), Some(Load::Http { bytes_per_sec, .. })) => {
            bytes_per_sec * 8.0 * 2.0 >= d.rate_bps
        }
        _ => false,
    }
}

/// The capture shows Nagle-held segments released by delayed ACKs in most transactions.
pub(crate) fn wire_nagle(e: &Evidence) -> Option<(&CaptureEvidence, NagleStalls)> {
    let c = e.capture.as_ref()?;
    let n = c.nagle?;
    (c.transactions > 0 && n.total.count * 2 >= c.transactions).then_some((c, n))
}

/// The capture shows segments released by delayed ACKs (classified "without Nagle") in most
/// transactions, while the server's own sockets have TCP_NODELAY off: Nagle is on at the
/// sender, so the held segments are Nagle's whatever their size looked like on the wire.
pub(crate) fn wire_delayed_ack_with_server_nagle(
    e: &Evidence,
) -> Option<(&CaptureEvidence, StallTotal)> {
    let c = e.capture.as_ref()?;
    let d = c.delayed_ack?;
    let nagle_on = e.server_sockets.as_ref().is_some_and(|s| s.nagle_on > 0);
    (nagle_on && c.transactions > 0 && d.count * 2 >= c.transactions).then_some((c, d))
}

/// TCP_QUICKACK on the client made requests at least 20% faster: a delayed ACK was in the way.
pub(crate) fn quickack_helped(e: &Evidence) -> bool {
    match (&e.quickack, &e.single) {
        (Some(q), Some(s)) => (q.p50_ns as f64) < 0.8 * s.p50_ns as f64,
        _ => false,
    }
}

/// A TCP timer, with evidence, explains the hosts' excess: the quick-ack experiment removed
/// it, or the wire shows delayed-ACK releases in most transactions.
pub(crate) fn timer_explains(e: &Evidence) -> bool {
    quickack_helped(e)
        || wire_nagle(e).is_some()
        || e.capture.as_ref().is_some_and(|c| {
            c.delayed_ack
                .is_some_and(|d| c.transactions > 0 && d.count * 2 >= c.transactions)
        })
}

/// A phase dominates when it is at least this share of the whole request…
pub(crate) const PHASE_SHARE: f64 = 1.0 / 3.0;
/// …and at least this long.
pub(crate) const PHASE_FLOOR_NS: u64 = 1_000_000;

/// The worst tail latency the request steps measured: (p50, p99) of the step with the larger p99.
pub(crate) fn tail(e: &Evidence) -> Option<(u64, u64)> {
    [e.single.as_ref(), e.concurrent.as_ref().map(|c| &c.latency)]
        .into_iter()
        .flatten()
        .map(|s| (s.p50_ns, s.p99_ns))
        // The widest tail, not the highest p99: concurrent requests that all wait a throttled
        // period have a p99 of 199 ms and no tail at all (their p50 is 199 ms too).
        .max_by_key(|&(p50, p99)| p99.saturating_sub(p50))
}

/// `connect()` beyond the path's RTT (medians): what this host's own stack adds to a SYN and its
/// SYN-ACK (netfilter OUTPUT/POSTROUTING and PREROUTING/INPUT, the qdisc, the wake-up). Only
/// when the path was measured by a SYN ping with kernel timestamps, which are taken after the
/// way out's hooks and before the way in's, and when the connects did not wait for a resent SYN
/// (a loss or backlog figure, not a host one).
///
/// A per-packet cost of this host is paid by every connect, so the burst's connects (several at
/// once, back to back) pay it too, and their wait for each other besides: the one-at-a-time
/// connects' excess counts only as far as the burst's shows it. Connects cheaper at once than
/// one at a time (130 µs one at a time, 28 µs eight at once, on loopback) spent the difference
/// in their pauses — an idle host's cold start between connects 2 ms apart — not on the
/// packets' way through this host.
pub(crate) fn connect_excess(e: &Evidence) -> Option<u64> {
    if !e.path_by_syn {
        return None;
    }
    let connect = e.handshake.as_ref()?.p50_ns;
    if connect >= *TcpTimer::InitialRto.band_ns().start() {
        return None;
    }
    let path = e.path.as_ref()?.p50_ns;
    let serial = connect.saturating_sub(path);
    let at_once = e
        .connect_burst
        .as_ref()
        .filter(|b| b.connect.count > 0)
        .map(|b| b.connect.p50_ns.saturating_sub(path));
    Some(at_once.map_or(serial, |b| serial.min(b)))
}

/// What this host's own stack costs one exchange, by the best instrument there is: kernel
/// timestamps on latscope's own packets (send → driver, driver → recv), else the connects'
/// excess over the SYN ping — when the requests agree with it. A per-packet cost on this host
/// shows in every exchange, so an open connection's request then takes about the path plus that
/// cost (between half and four times it): a request as fast as the path says the connects paid
/// for something else (a new connection's own cost at either end: conntrack, SYN handling), and
/// a request far slower says more than this host is at work. Either way the connects alone
/// cannot place the time: `None`. A small excess rules this host out whatever the requests do.
pub(crate) fn client_stack_ns(e: &Evidence) -> Option<u64> {
    // The timestamps are taken on a connection of their own, after the requests: an exchange
    // there that took longer than a whole request's median timed another moment than the
    // requests (an idle host's slow wake-ups: 415 µs driver → recv() beside requests of 79 µs,
    // healthy nginx on loopback), not what they paid. Then the connects speak for this host.
    if let Some(c) = e.client_host.and_then(|c| c.per_exchange_ns())
        && e.single.as_ref().is_none_or(|s| c <= s.p50_ns)
    {
        return Some(c);
    }
    let x = connect_excess(e)?;
    if x < client_stack_floor(e) {
        return Some(x);
    }
    match host_excess(e) {
        None => Some(x),
        Some((_, _, host)) => {
            (host.saturating_mul(2) >= x && host <= x.saturating_mul(4)).then_some(x)
        }
    }
}

/// The least client-stack time that is a finding: twice the path's RTT (a connect that takes
/// three SYN pings), twice this host's own wake-up lateness (a busy host's scheduling is not a
/// per-packet cost), and 100 µs (a `connect()` and its wake-up cost tens of microseconds on an
/// idle host).
pub(crate) fn client_stack_floor(e: &Evidence) -> u64 {
    let path = e.path.as_ref().map_or(0, |p| p.p50_ns);
    let noise = e.host_noise.as_ref().map_or(0, |n| n.p50_ns);
    (2 * path).max(2 * noise).max(100_000)
}

/// The least time on this host's way out that is a finding when the kernel timed it (`send()`
/// → the driver, [`ClientHost::send_to_driver_ns`]): the path's RTT (this host's egress alone
/// takes as long as the whole round trip on the network) and 20 µs (a healthy stack hands a
/// packet to the driver in a few: 2.8–3.1 µs on the lab's veths at a load average of 3, against
/// 56–62 µs behind 4,000 tc filters). No wake-up lies on the way out — the sending thread runs
/// it to the driver — so this host's scheduling noise is no part of it, unlike a connect's or a
/// receive's time.
pub(crate) fn client_egress_floor(e: &Evidence) -> u64 {
    e.path.as_ref().map_or(0, |p| p.p50_ns).max(20_000)
}

/// Whether this host's own stack holds its packets long enough to be a finding: what an
/// exchange costs it ([`client_stack_ns`]) reaches [`client_stack_floor`], or its kernel
/// timestamps show the way out alone reaching [`client_egress_floor`].
pub(crate) fn client_stack_high(e: &Evidence) -> bool {
    let Some(cost) = client_stack_ns(e) else {
        return false;
    };
    cost >= client_stack_floor(e)
        || e.client_host
            .and_then(|c| c.send_to_driver_ns)
            .is_some_and(|tx| tx >= client_egress_floor(e))
}

/// Whether this host's own stack was measured and is not where a request's time goes.
pub(crate) fn client_host_ruled_out(e: &Evidence) -> bool {
    client_stack_ns(e).is_some() && !client_stack_high(e)
}

/// Whether anything was observed at the server's end: its sockets, kernel stack, run queue,
/// cgroup or TCP counters (the server runs on this host, or its agent answered).
pub(crate) fn server_observed(e: &Evidence) -> bool {
    e.server_sockets.is_some()
        || e.stack.is_some()
        || e.cpu.is_some()
        || e.counters.is_some_and(|c| c.server.is_some())
}

/// Whether the time beyond the path sits at the server's end: observed there, or this host's
/// own stack was measured and ruled out (what is left beyond the path's RTT is the far end's).
pub(crate) fn server_end_located(e: &Evidence) -> bool {
    server_observed(e) || client_host_ruled_out(e)
}

/// The round-trip step's requests and the path's RTT they are counted in, when both were
/// measured.
pub(crate) fn browser(e: &Evidence) -> Option<(&crate::rounds::probe::RoundTripProbe, u64)> {
    Some((e.browser.as_ref()?, e.path.as_ref()?.p50_ns))
}
