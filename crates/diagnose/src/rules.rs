//! The catalogue of findings. Each rule is a pure function of the evidence, so each is tested
//! on its own with synthetic figures; the collection of evidence lives in `steps/`.

use latscope_core::model::diagnose::{Diagnosis, RuleId, Side};
use latscope_core::timer::{TcpTimer, describe_stall};
use latscope_core::units::{count, format_ns, of};

pub use super::evidence::*;

/// A rule: the evidence in, a finding out when it fires.
pub type Rule = fn(&Evidence) -> Option<Diagnosis>;

/// Rules in the order they are tried; the report ranks what fires by [`rank`].
pub const RULES: &[Rule] = &[
    nagle_delayed_ack,
    think_time,
    socket_queueing,
    slow_handshake,
    retransmissions,
    delayed_ack,
    pre_tcp_kernel,
    bufferbloat,
    path_dominates,
    slow_dns,
    slow_tls,
    cpu_throttling,
    run_queue_delay,
    bottleneck_bandwidth,
    super::tail::server_tail_latency,
];

/// Apply every rule, then rank: root causes first (most latency explained first), each
/// consequence linked to its cause (see [`CHAINS`]).
pub fn apply(e: &Evidence) -> Vec<Diagnosis> {
    rank(e, RULES.iter().filter_map(|r| r(e)).collect())
}

/// One finding explaining another: `cause` makes `effect` happen, when `holds` says the
/// figures fit (the cause is large enough to account for the effect).
pub struct Link {
    pub cause: RuleId,
    pub effect: RuleId,
    pub holds: fn(&Evidence, &Diagnosis, &Diagnosis) -> bool,
}

/// The causal links between findings. A kernel that makes every packet wait makes requests
/// queue behind each other and shows up as host time; Nagle's held segments are what the
/// delayed ACKs release, unless loss made the sender wait for the ACKs (see
/// [`loss_explains_ack_stalls`]); loss on the path drops SYNs and SYN-ACKs too (a SYN retransmitted
/// because of loss is loss, not a backlog: only the listen queue's overflow counters blame the
/// backlog), while SYN drops alone are the retransmissions a capture sees; a load whose bytes
/// fill the bottleneck makes the probe wait behind them.
pub const CHAINS: &[Link] = &[
    Link {
        cause: RuleId::PreTcpKernel,
        effect: RuleId::SocketQueueing,
        // Each request is at least two packets through the slow path, and the concurrent
        // requests wait for each other's: the kernel accounts for the queueing when that
        // covers half of it.
        holds: |e, c, q| {
            let n = e
                .concurrent
                .as_ref()
                .map_or(1, |c| u64::from(c.connections));
            c.explains_ns.saturating_mul(2 * n) * 2 >= q.explains_ns
        },
    },
    Link {
        // A cgroup that runs out of CPU quota in most periods cannot serve faster than its
        // quota: concurrent requests queue behind the throttled periods, whatever its workers.
        cause: RuleId::CpuThrottling,
        effect: RuleId::SocketQueueing,
        holds: |e, _, _| {
            e.cpu
                .as_ref()
                .and_then(|c| c.throttling.as_ref())
                .is_some_and(|t| t.throttled.saturating_mul(2) >= t.periods.max(1))
        },
    },
    Link {
        // A server that spends milliseconds of CPU on every handshake works through them one
        // at a time per worker: new connections' requests wait in the socket behind them. It
        // accounts for the queueing when N concurrent handshakes cover half of it.
        cause: RuleId::SlowTls,
        effect: RuleId::SocketQueueing,
        holds: |e, c, q| {
            let n = e
                .concurrent
                .as_ref()
                .map_or(1, |c| u64::from(c.connections));
            c.explains_ns.saturating_mul(n) * 2 >= q.explains_ns
        },
    },
    Link {
        cause: RuleId::PreTcpKernel,
        effect: RuleId::ThinkTime,
        holds: |_, c, t| c.explains_ns.saturating_mul(2) * 2 >= t.explains_ns,
    },
    // Loss before Nagle: a delayed ACK that loss made necessary is the loss's, and listed
    // first so that it is not read as Nagle's.
    Link {
        cause: RuleId::Retransmissions,
        effect: RuleId::DelayedAck,
        holds: |e, _, _| loss_explains_ack_stalls(e),
    },
    Link {
        cause: RuleId::Retransmissions,
        effect: RuleId::NagleDelayedAck,
        holds: |e, _, _| loss_explains_ack_stalls(e),
    },
    Link {
        cause: RuleId::NagleDelayedAck,
        effect: RuleId::DelayedAck,
        holds: |_, _, _| true,
    },
    Link {
        cause: RuleId::Retransmissions,
        effect: RuleId::SlowHandshake,
        holds: |e, _, _| data_loss_material(e) && !listen_overflowed(e),
    },
    Link {
        cause: RuleId::SlowHandshake,
        effect: RuleId::Retransmissions,
        holds: |e, _, _| listen_overflowed(e) || !data_loss_material(e),
    },
    Link {
        cause: RuleId::BottleneckBandwidth,
        effect: RuleId::Bufferbloat,
        holds: |e, _, _| load_fills_bottleneck(e),
    },
    Link {
        // A server that serves one request at a time makes a probe wait behind the requests of a
        // load sent to that same server (an HTTP ramp: the finding blames both sides). A bulk
        // transfer that fills the path (blamed on the network) is a cause of its own.
        cause: RuleId::SocketQueueing,
        effect: RuleId::Bufferbloat,
        holds: |_, _, b| b.side == Side::Both,
    },
];

/// What a finding costs the average request, to rank findings by: its `explains_ns`, except
/// for a tail finding, whose `explains_ns` only the requests of the tail lose (one in a hundred
/// at a p99, one in a thousand at a p99.9). A 6 ms tail at the p99 costs a request 64 µs on
/// average: less than a 98 µs wait every request has.
pub fn cost_per_request(e: &Evidence, f: &Diagnosis) -> u64 {
    let single = e.single.as_ref();
    if !super::tail::is_tail(f, single.map(|s| s.p50_ns)) {
        return f.explains_ns;
    }
    let share = match single.and_then(super::tail::heavy_tail) {
        Some(t) if t.quantile == "p99.9" => 1_000,
        _ => 100,
    };
    f.explains_ns / share
}

/// Order findings so that the root cause comes first: findings another finding explains are
/// marked `caused_by` it and ranked after every root cause; within each group, most latency
/// per request first ([`cost_per_request`]).
pub fn rank(e: &Evidence, mut found: Vec<Diagnosis>) -> Vec<Diagnosis> {
    found.sort_by_key(|f| std::cmp::Reverse(cost_per_request(e, f)));
    for link in CHAINS {
        let (Some(ci), Some(ei)) = (
            found.iter().position(|f| f.rule == link.cause),
            found.iter().position(|f| f.rule == link.effect),
        ) else {
            continue;
        };
        // One cause per effect, and no cycles: an effect already explained, or a cause that is
        // itself this effect's consequence, is left alone.
        if found[ei].caused_by.is_some() || found[ci].caused_by == Some(link.effect) {
            continue;
        }
        if !(link.holds)(e, &found[ci], &found[ei]) {
            continue;
        }
        let cause_title = found[ci].title.clone();
        found[ei].caused_by = Some(link.cause);
        found[ei].evidence.push(format!(
            "explained by another finding: {cause_title} [{}]",
            link.cause.name()
        ));
        found[ci].causes.push(link.effect);
    }
    // Stable: within roots and within consequences the order by latency stays.
    found.sort_by_key(|f| f.caused_by.is_some());
    found
}

/// Excess of the single-request median over the path median and the exchange's serialisation
/// at the bottleneck (time spent in the hosts).
fn host_excess(e: &Evidence) -> Option<(u64, u64, u64)> {
    let single = e.single.as_ref()?.p50_ns;
    let path = e.path.as_ref().map(|p| p.p50_ns).unwrap_or(0);
    let wire = e.bottleneck.map_or(0, |b| b.serialisation_ns());
    Some((
        single,
        path,
        single.saturating_sub(path).saturating_sub(wire),
    ))
}

/// The capture's retransmissions less those the receivers reported as duplicates (D-SACKs in
/// the kernel's counters): a retransmission whose original had arrived (a timer or a tail-loss
/// probe that fired because the ACK was late, on a busy server) lost nothing.
fn lost_on_wire(e: &Evidence, c: &CaptureEvidence) -> u64 {
    c.retransmissions
        .saturating_sub(e.counters.map_or(0, |k| k.spurious()))
}

/// A loss rate that matters: at least one lost segment per 1000 frames.
fn loss_rate_material(e: &Evidence, c: &CaptureEvidence) -> bool {
    let lost = lost_on_wire(e, c);
    lost > 0 && lost * 1000 >= c.frames.max(1)
}

/// At least 5 segments and 0.5% of `of`: a kernel counter's share that is loss, not noise.
fn counter_material(n: u64, of: u64) -> bool {
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
fn lost_segments(e: &Evidence) -> u64 {
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
fn ack_stalls(c: &CaptureEvidence) -> Option<StallTotal> {
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
fn loss_ack_stall_cost(e: &Evidence) -> u64 {
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
fn listen_overflowed(e: &Evidence) -> bool {
    e.counters
        .and_then(|c| c.server)
        .is_some_and(|s| s.listen_overflowed())
}

/// The HTTP load of the latency-under-load step moved at least half the bottleneck's rate: the
/// probe queued behind its bytes on the link.
fn load_fills_bottleneck(e: &Evidence) -> bool {
    match (e.bottleneck, e.under_load.as_ref().map(|u| u.load)) {
        (Some(b), Some(Load::Http { bytes_per_sec, .. })) => {
            bytes_per_sec * 8.0 * 2.0 >= b.rate_bps
        }
        _ => false,
    }
}

/// The capture shows Nagle-held segments released by delayed ACKs in most transactions.
fn wire_nagle(e: &Evidence) -> Option<(&CaptureEvidence, NagleStalls)> {
    let c = e.capture.as_ref()?;
    let n = c.nagle?;
    (c.transactions > 0 && n.total.count * 2 >= c.transactions).then_some((c, n))
}

/// The capture shows segments released by delayed ACKs (classified "without Nagle") in most
/// transactions, while the server's own sockets have TCP_NODELAY off: Nagle is on at the
/// sender, so the held segments are Nagle's whatever their size looked like on the wire.
fn wire_delayed_ack_with_server_nagle(e: &Evidence) -> Option<(&CaptureEvidence, StallTotal)> {
    let c = e.capture.as_ref()?;
    let d = c.delayed_ack?;
    let nagle_on = e.server_sockets.as_ref().is_some_and(|s| s.nagle_on > 0);
    (nagle_on && c.transactions > 0 && d.count * 2 >= c.transactions).then_some((c, d))
}

/// TCP_QUICKACK on the client made requests at least 20% faster: a delayed ACK was in the way.
fn quickack_helped(e: &Evidence) -> bool {
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

/// Nagle × delayed ACK: requests take ~40 ms more than the path, and the stall disappears when
/// the client ACKs at once (TCP_QUICKACK), or the wire shows it. The server's Nagle algorithm
/// held the rest of a response until the client ACKed the first part; the client, with nothing
/// to send, delayed that ACK (TCP_ATO_MIN = 40 ms on Linux). The server is the side to fix.
/// The server's own sockets settle whose held data it is: with TCP_NODELAY on and no cork on
/// every connection Nagle holds nothing, and what an immediate ACK removed is another wait for
/// the client's ACK (a congestion window after loss, a policer): `delayed_ack` and the loss
/// rules name that, not Nagle.
fn server_never_holds(e: &Evidence) -> bool {
    e.server_sockets
        .as_ref()
        .is_some_and(|s| s.connections > 0 && s.nagle_on == 0 && s.corked == 0)
}

pub fn nagle_delayed_ack(e: &Evidence) -> Option<Diagnosis> {
    let (single, path, excess) = host_excess(e)?;
    // The stall is the excess, or what TCP_QUICKACK removed from it (when the server also
    // thinks, the excess is the timer plus that).
    let removed = e
        .quickack
        .as_ref()
        .filter(|_| quickack_helped(e))
        .map(|q| single.saturating_sub(q.p50_ns));
    let timer_shaped = |ns: u64| TcpTimer::classify(ns).is_some_and(TcpTimer::is_delayed_ack);
    if !timer_shaped(excess) && !removed.is_some_and(timer_shaped) {
        return None;
    }
    // Decisive evidence, any of: an immediate ACK from the client removes the stall; the
    // capture shows Nagle-held segments released by delayed ACKs in most transactions; or it
    // shows delayed-ACK releases and the server's sockets have Nagle on.
    let quick = e
        .quickack
        .as_ref()
        .map(|q| q.p50_ns)
        .filter(|q| q.saturating_mul(10) <= single);
    let delack_nagle = wire_delayed_ack_with_server_nagle(e);
    if quick.is_none() && wire_nagle(e).is_none() && delack_nagle.is_none() {
        return None;
    }
    if server_never_holds(e) && wire_nagle(e).is_none() {
        return None;
    }
    let mut evidence = vec![
        format!(
            "one request: p50 {} against a path RTT of {}",
            format_ns(single as f64),
            format_ns(path as f64)
        ),
        format!(
            "the extra {} matches a TCP timer: {}",
            format_ns(excess as f64),
            describe_stall(excess)
        ),
    ];
    if let Some(q) = quick {
        evidence.push(format!(
            "with TCP_QUICKACK on the client the same requests take {} (p50): the stall is the client's delayed ACK releasing data the server held back",
            format_ns(q as f64)
        ));
    }
    let mut confidence = 0.9;
    if let Some(c) = &e.capture
        && let Some(n) = c.nagle
    {
        evidence.push(format!(
            "on the wire: {} stalled by Nagle × delayed ACK, {} lost in all (e.g. connection {}, frames {} → {})",
            of(n.total.count, c.transactions, "transaction"),
            format_ns(n.total.lost_ns as f64),
            n.example.conn,
            n.example.since_frame,
            n.example.frame
        ));
        confidence = 0.95;
    }
    if let Some((c, d)) = delack_nagle {
        evidence.push(format!(
            "on the wire: {} waited for a delayed ACK ({} in all); with Nagle on at the server, those held segments are Nagle's{}",
            of(d.count, c.transactions, "transaction"),
            format_ns(d.lost_ns as f64),
            e.server_sockets
                .as_ref()
                .and_then(|s| s.snd_mss)
                .map(|m| format!(" (the connection's MSS is {m} B: a response smaller than that is one \"small\" segment)"))
                .unwrap_or_default()
        ));
    }
    if let Some(ss) = &e.server_sockets
        && ss.connections > 0
    {
        evidence.push(format!(
            "the server's sockets ({}): TCP_NODELAY off on {}{}",
            ss.process,
            of(ss.nagle_on as u64, ss.connections as u64, "connection"),
            if ss.corked > 0 {
                format!(", TCP_CORK on {}", ss.corked)
            } else {
                String::new()
            }
        ));
        confidence = if ss.nagle_on > 0 {
            f64::max(confidence, 0.97)
        } else {
            0.75
        };
    }
    Some(Diagnosis {
        rule: RuleId::NagleDelayedAck,
        title: "Nagle × delayed ACK: the server holds part of each response until the client's delayed ACK".into(),
        // With TCP_QUICKACK the stall goes and what is left is someone else's (e.g. think
        // time); without the experiment, the hosts' whole excess.
        explains_ns: single.saturating_sub(
            e.quickack
                .as_ref()
                .filter(|_| quickack_helped(e))
                .map_or(path, |q| q.p50_ns),
        ),
        confidence,
        side: Side::Server,
        evidence,
        fix: "server: set TCP_NODELAY (nginx: `tcp_nodelay on`) or write each response in one call; client: re-arm TCP_QUICKACK after every read where the server cannot be changed".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// Application think time: the time before the first response byte that no TCP timer on the
/// wire explains is the server's own (its application). It fires whenever the hosts add
/// ≥ 1 ms and ≥ 5× the path and no timer is shown to be the cause (the quick-ack experiment
/// changed nothing, the capture shows no delayed-ACK releases). An excess of a timer's length
/// without that evidence is still reported — with a lower confidence and a line saying which
/// experiment would tell — rather than "no problem" while the hosts add 1,000× the path.
pub fn think_time(e: &Evidence) -> Option<Diagnosis> {
    let (single, path, host) = host_excess(e)?;
    // What a delayed ACK explains is not the application's: when one is shown, what is left is
    // the time with TCP_QUICKACK on (a server can have both Nagle and think time).
    let excess = if timer_explains(e) {
        match &e.quickack {
            Some(q) if quickack_helped(e) => q.p50_ns.saturating_sub(path),
            _ => return None,
        }
    } else {
        host
    };
    if excess < 1_000_000 || excess < 5 * path {
        return None;
    }
    let timer = TcpTimer::classify(excess).filter(|t| t.is_delayed_ack());
    let mut evidence = vec![
        format!(
            "one request: p50 {} against a path RTT of {}",
            format_ns(single as f64),
            format_ns(path as f64)
        ),
        match timer {
            None => format!(
                "the hosts add {}, and no TCP timer has that length",
                format_ns(excess as f64)
            ),
            Some(_) => format!(
                "the hosts add {} ({}), yet no delayed ACK is shown to cause it",
                format_ns(excess as f64),
                describe_stall(excess)
            ),
        },
        match &e.quickack {
            Some(q) if excess < host => format!(
                "with TCP_QUICKACK on the client requests still take {} (p50): beyond the delayed ACK, {} is the server's",
                format_ns(q.p50_ns as f64),
                format_ns(excess as f64)
            ),
            Some(q) => format!(
                "TCP_QUICKACK on the client leaves it unchanged (p50 {}): not a delayed ACK",
                format_ns(q.p50_ns as f64)
            ),
            None => "the quick-ack experiment did not run".into(),
        },
    ];
    if let Some(c) = &e.capture {
        evidence.push(format!(
            "on the wire: {} transactions{}",
            c.transactions,
            c.think
                .map(|t| format!(
                    "; {} waited for the server's first response byte ({} in all)",
                    t.count,
                    format_ns(t.lost_ns as f64)
                ))
                .unwrap_or_default()
        ));
    }
    if let Some(ph) = &e.phases {
        evidence.push(format!(
            "request phases: time to first byte {} of which {} beyond the path's round trip",
            format_ns(ph.ttfb_ns as f64),
            format_ns(ph.ttfb_ns.saturating_sub(path) as f64)
        ));
    }
    let ruled_out = e.quickack.is_some() || e.capture.is_some();
    let confidence = match (ruled_out, timer) {
        (true, _) => 0.8,
        (false, None) => 0.65,
        (false, Some(_)) => 0.5,
    };
    Some(Diagnosis {
        rule: RuleId::ThinkTime,
        title: "server application time: the server takes milliseconds before its first response byte".into(),
        explains_ns: excess,
        confidence,
        side: Side::Server,
        evidence,
        fix: "profile the server's request handling (the time is spent before the first response byte); look for slow back-ends, locks or synchronous I/O".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// Socket queueing: requests wait in the server's socket before it reads them. Two instruments
/// see it, and either is enough (one cause, one fix — two findings would only split it):
/// - from the client, with N concurrent connections each request takes about N times as long as
///   alone: the server handles one request at a time and the rest wait ([`concurrency_scaling`]);
/// - from the server's kernel, data queued on the socket long before the application reads it
///   (netstacklat's tcp-socket-enqueued → tcp-socket-read, [`read_wait`]): too few workers, or
///   busy ones.
pub fn socket_queueing(e: &Evidence) -> Option<Diagnosis> {
    let scaling = concurrency_scaling(e);
    let read = read_wait(e);
    if scaling.is_none() && read.is_none() {
        return None;
    }
    let mut evidence = Vec::new();
    let (title, explains_ns, mut confidence) = match scaling {
        Some((n, single, conc, ratio)) => {
            evidence.push(format!(
                "one request at a time: p50 {}",
                format_ns(single as f64)
            ));
            evidence.push(format!(
                "{n} at once: p50 {} — {ratio:.1}× longer, close to {n}× (serialised)",
                format_ns(conc as f64)
            ));
            (
                "requests wait in the server's socket queue: it serves one at a time",
                conc.saturating_sub(single),
                if ratio >= 0.8 * f64::from(n) {
                    0.85
                } else {
                    0.65
                },
            )
        }
        None => (
            "requests wait in the socket before the server reads them",
            read.as_ref().map_or(0, |r| r.0),
            0.85,
        ),
    };
    if let Some((_, line)) = read {
        evidence.push(line);
        if scaling.is_some() {
            confidence = 0.9;
        }
    }
    Some(Diagnosis {
        rule: RuleId::SocketQueueing,
        title: title.into(),
        explains_ns,
        confidence,
        side: Side::Server,
        evidence,
        fix: "add workers (nginx `worker_processes`, more threads or processes) or make request handling concurrent; if the workers are idle, find what keeps them from reading (blocking calls, a global lock, CPU starvation)".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// N concurrent requests take about N times as long as one alone (at least 0.6 N): the
/// connections, the single and the concurrent medians, and their ratio. Not when the single
/// request is too fast for the ratio to mean anything, nor when serialisation at the bottleneck
/// explains it (the requests queue on the link, not in the server).
fn concurrency_scaling(e: &Evidence) -> Option<(u32, u64, u64, f64)> {
    let c = e.concurrent.as_ref()?;
    let (n, conc) = (c.connections, c.latency.p50_ns);
    let single = e.single.as_ref()?.p50_ns;
    if n < 2 || single < 200_000 || bandwidth_explains_concurrency(e) {
        return None;
    }
    let ratio = conc as f64 / single as f64;
    (ratio >= 0.6 * f64::from(n)).then_some((n, single, conc, ratio))
}

/// The server's kernel had requests queued on the socket for a millisecond or more (median) and
/// ten times as long as they took to get there: the wait, and its evidence line.
fn read_wait(e: &Evidence) -> Option<(u64, String)> {
    let st = e.stack.as_ref()?;
    let (enq, read) = (st.enqueued_ns?, st.read_ns?);
    if read < 1_000_000.0 || read < 10.0 * enq.max(1.0) {
        return None;
    }
    Some((
        (read - enq) as u64,
        format!(
            "kernel stack (eBPF), server side: queued on the socket after {} but read by the application after {} (median{})",
            format_ns(enq),
            format_ns(read),
            st.read_bucket
                .as_ref()
                .map(|b| format!(", bucket {b}"))
                .unwrap_or_default()
        ),
    ))
}

/// Slow handshakes: connects take a second or more, or time out — SYNs (or SYN-ACKs) dropped
/// and retransmitted after TCP_TIMEOUT_INIT (1 s). Who dropped them is told by the server's
/// listen-queue counters where they can be read: overflows blame its backlog; none, with the
/// SYNs retransmitted all the same, means they were lost on the way.
pub fn slow_handshake(e: &Evidence) -> Option<Diagnosis> {
    let p = e.handshake.as_ref()?;
    let (attempts, timed_out) = (e.connect_failures.attempts, e.connect_failures.timed_out);
    let slow = p.p99_ns >= 900_000_000;
    if !slow && timed_out == 0 {
        return None;
    }
    let mut evidence = vec![
        format!(
            "connect p50 {}, p99 {}",
            format_ns(p.p50_ns as f64),
            format_ns(p.p99_ns as f64)
        ),
        format!("{} timed out", of(timed_out, attempts, "attempt")),
        "a ~1 s step is the initial retransmission timeout of a dropped SYN".into(),
    ];
    let server = e.counters.and_then(|c| c.server);
    let (title, side, confidence, fix) = match server {
        Some(s) if s.listen_overflowed() => {
            evidence.push(format!(
                "the server's listen queue overflowed: ListenOverflows +{}, ListenDrops +{}",
                s.listen_overflows, s.listen_drops
            ));
            (
                "slow or failing handshakes: the server's listen queue overflows and drops SYNs",
                Side::Server,
                0.85,
                "raise the listen backlog (the listen() backlog, net.core.somaxconn, net.ipv4.tcp_max_syn_backlog) and accept connections faster (more acceptor threads)",
            )
        }
        Some(s) => {
            evidence.push(format!(
                "the server's listen queue did not overflow (ListenOverflows and ListenDrops unchanged) while {} SYN/SYN-ACKs were retransmitted: they were lost on the way, not refused by a full backlog",
                s.syn_retrans + e.counters.map_or(0, |c| if c.shared { 0 } else { c.client.syn_retrans })
            ));
            (
                "slow or failing handshakes: SYNs or SYN-ACKs are lost and retransmitted",
                Side::Network,
                0.75,
                "find where handshake packets are dropped: firewall rules and SYN rate limits on the path and hosts (`nft list ruleset`, `iptables -L -v`), interface and queue drops (`ip -s link`, `tc -s qdisc`)",
            )
        }
        None => (
            "slow or failing handshakes: SYNs are dropped and retransmitted",
            Side::Server,
            0.7,
            "check the listen backlog (`ss -ltn` Recv-Q vs Send-Q, net.core.somaxconn, the listen() backlog) and `nstat` ListenOverflows/ListenDrops; if they do not grow, look for SYN drops on the path (firewall rules, rate limits)",
        ),
    };
    Some(Diagnosis {
        rule: RuleId::SlowHandshake,
        title: title.into(),
        explains_ns: if slow {
            p.p99_ns.saturating_sub(p.p50_ns)
        } else {
            1_000_000_000
        },
        confidence,
        side,
        evidence,
        fix: fix.into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// Whether the capture shows material loss: a loss rate of at least 1 in 1000 frames, or
/// retransmission timeouts that cost at least a tenth of a request's median (and 100 µs) per
/// request. A handful of retransmissions among a hundred thousand frames explains nothing.
/// Returns the time the timeouts cost per request and the evidence line.
fn capture_loss(e: &Evidence) -> Option<(u64, String)> {
    let c = e.capture.as_ref()?;
    let rto = c.rto_stalls.unwrap_or_default();
    let (rto_n, rto_lost) = (rto.count, rto.lost_ns);
    let per_request = rto_lost.checked_div(c.transactions).unwrap_or(rto_lost);
    let median = e.single.as_ref().map(|s| s.p50_ns).unwrap_or(0);
    let time_material = per_request >= 100_000 && per_request * 10 >= median;
    let lost = lost_on_wire(e, c);
    if lost == 0 || !(loss_rate_material(e, c) || time_material) {
        return None;
    }
    let spurious = c.retransmissions - lost;
    Some((
        per_request,
        format!(
            "on the wire: {} retransmissions in {} frames{}; {rto_n} waited for the retransmission timer ({} lost)",
            c.retransmissions,
            c.frames,
            if spurious > 0 {
                format!(", {spurious} of them reported duplicate by the receiver (D-SACK)")
            } else {
                String::new()
            },
            format_ns(rto_lost as f64)
        ),
    ))
}

/// Retransmissions: segments were lost (or their ACKs were) and sent again; a timer-driven
/// retransmission costs at least TCP_RTO_MIN (200 ms). The capture at the client sees the
/// client's retransmissions and those of the server that reach it; the kernel's counters see
/// both sides' (the server's when it runs on this host) and the gaps loss leaves at the
/// receiver — loss on the server's way out shows there even when the capture misses it.
pub fn retransmissions(e: &Evidence) -> Option<Diagnosis> {
    let wire = capture_loss(e);
    let counters = counter_loss(e);
    if wire.is_none() && counters.is_empty() {
        return None;
    }
    // What a request loses to it on average: the timeouts seen on the wire and the waits for
    // the client's ACK the loss caused, or else the mean's excess over the median (the slow
    // requests are the ones that waited for a retransmission).
    let rto_ns = wire.as_ref().map_or(0, |(per_request, _)| *per_request);
    let ack_ns = loss_ack_stall_cost(e);
    let explains_ns = match rto_ns + ack_ns {
        0 => e
            .single
            .as_ref()
            .map_or(0, |s| (s.mean_ns - s.p50_ns as f64).max(0.0) as u64),
        cost => cost,
    };
    let mut evidence: Vec<String> = wire.map(|(_, l)| l).into_iter().collect();
    evidence.extend(counters);
    if ack_ns > 0 {
        evidence.push(loss_ack_line(e, ack_ns));
    }
    Some(Diagnosis {
        rule: RuleId::Retransmissions,
        title: "packet loss: segments retransmitted".into(),
        explains_ns,
        confidence: if evidence.len() > 1 { 0.9 } else { 0.8 },
        side: Side::Network,
        evidence,
        fix: "find where packets are dropped: `nstat`/`ip -s link` on both hosts, interface errors, queue drops (`tc -s qdisc`), firewall rules; losses on a path you don't own need its operator".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// The evidence line for the waits for the client's ACK that loss caused.
fn loss_ack_line(e: &Evidence, per_request: u64) -> String {
    let waits = match e
        .capture
        .as_ref()
        .and_then(|c| ack_stalls(c).map(|s| (c, s)))
    {
        Some((c, s)) => format!(
            "{} waited for the client's delayed ACK on the wire",
            of(s.count, c.transactions, "transaction")
        ),
        None => "TCP_QUICKACK on the client removed the wait from the median".into(),
    };
    format!(
        "the loss explains the waits for the client's ACK: {waits}, with {} lost meanwhile — after each loss the sender's window shrinks and the rest of a response waits for an ACK the client delays ({} per request)",
        count(lost_segments(e), "segment"),
        format_ns(per_request as f64)
    )
}

/// Delayed ACK alone: the capture shows segments waiting for a delayed ACK without Nagle being
/// the reason (e.g. a sender whose window or TCP_CORK needs the ACK), in a material share of
/// transactions.
pub fn delayed_ack(e: &Evidence) -> Option<Diagnosis> {
    let c = e.capture.as_ref()?;
    let StallTotal {
        count: n,
        lost_ns: lost,
    } = c.delayed_ack?;
    let per_request = lost.checked_div(c.transactions).unwrap_or(lost);
    if n * 10 < c.transactions.max(1) || per_request < 1_000_000 {
        return None;
    }
    // With Nagle on at the server, the held data is Nagle's: `nagle_delayed_ack` names it
    // and sends the user to the server, not the client.
    if e.server_sockets.as_ref().is_some_and(|s| s.nagle_on > 0) {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::DelayedAck,
        title: "delayed ACKs hold data back (without Nagle)".into(),
        explains_ns: per_request,
        confidence: 0.8,
        side: Side::Client,
        evidence: vec![format!(
            "on the wire: {} waited for a delayed ACK, {} in all",
            of(n, c.transactions, "transaction"),
            format_ns(lost as f64)
        )],
        fix: "the receiver (client) should ACK at once: re-arm TCP_QUICKACK after reads, or per route `ip route change … quickack 1`; the sender can avoid waiting on ACKs by writing each message in one call".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// Pre-TCP kernel latency: packets wait between the IP layer and TCP (netfilter rules,
/// routing) — netstacklat's ip-start → tcp-start gap.
pub fn pre_tcp_kernel(e: &Evidence) -> Option<Diagnosis> {
    let st = e.stack.as_ref()?;
    let ip = st.ip_start_ns?;
    // Without a tcp-start probe (no fentry and no tracepoint there), the socket enqueue bounds
    // it from above: TCP's own processing of a segment is a few microseconds.
    let (tcp, at) = match (st.tcp_start_ns, st.enqueued_ns) {
        (Some(t), _) => (t, "TCP"),
        (None, Some(q)) => (q, "the socket"),
        (None, None) => return None,
    };
    let gap = tcp - ip;
    if gap < 20_000.0 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::PreTcpKernel,
        title: "packets wait inside the kernel before TCP (netfilter rules or routing)".into(),
        explains_ns: gap as u64,
        confidence: if at == "TCP" { 0.75 } else { 0.65 },
        side: Side::Kernel,
        evidence: vec![format!(
            "kernel stack (eBPF), server side: packets reach the IP layer after {} and {at} after {} (median): {} between them",
            format_ns(ip),
            format_ns(tcp),
            format_ns(gap)
        )],
        fix: "count and trim the netfilter rules on the input path (`nft list ruleset | wc -l`, `iptables-save | wc -l`); remove redundant ones, use sets instead of long rule chains".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// Latency under load counts when the loaded median is at least this many times the idle one
/// (responsiveness in round trips per minute falls to a fifth)…
const LOAD_RATIO: f64 = 5.0;
/// …and the load adds at least this much: below it, a busy host's scheduling noise.
const LOAD_FLOOR_NS: u64 = 2_000_000;
/// A loaded round trip this much longer counts whatever the ratio (on a long path, 100 ms →
/// 300 ms is 3× but 200 ms that anyone notices), provided it at least adds half the idle figure.
const LOAD_ABSOLUTE_NS: u64 = 50_000_000;

/// Whether a probe going from `idle_ns` to `loaded_ns` under load is a finding: both relative
/// and absolute thresholds (compare the IETF responsiveness method and flent's RRUL, which
/// judge the loaded round trip against the idle one): 24 µs → 4 ms (167×, +4 ms) counts;
/// 30 µs → 300 µs (10×, +0.27 ms) does not; 100 ms → 300 ms does.
pub fn inflated(idle_ns: u64, loaded_ns: u64) -> bool {
    let added = loaded_ns.saturating_sub(idle_ns);
    let ratio = loaded_ns as f64 / idle_ns.max(1) as f64;
    (added >= LOAD_FLOOR_NS && ratio >= LOAD_RATIO) || (added >= LOAD_ABSOLUTE_NS && ratio >= 1.5)
}

/// How many times its fair share of a closed-loop load's queue a probe may wait before that
/// wait is a finding.
const FAIR_SHARE_SLACK: u64 = 2;

/// Latency under load: the load on the same path multiplies a small request's latency — it
/// waits behind the load's data in a queue. Under a bulk transfer that queue is the path's
/// (bufferbloat); under the HTTP engine's concurrent requests, it is the one the probe shares
/// with them, which for a URL target may be the server's.
pub fn bufferbloat(e: &Evidence) -> Option<Diagnosis> {
    let UnderLoad { idle, loaded, load } = e.under_load.as_ref()?;
    if !inflated(idle.p50_ns, loaded.p50_ns) {
        return None;
    }
    // Under our own closed-loop HTTP load the probe is one more client: by Little's law each of
    // the load's requests takes connections ÷ throughput, and a probe served in turn waits about
    // as long. That wait is the load diagnose applied to a server at its capacity, not a queue
    // that should not be there; only a wait well beyond its fair share is.
    let fair_share_ns = load.fair_share_ns();
    if let Some(fair) = fair_share_ns
        && loaded.p50_ns
            <= idle
                .p50_ns
                .saturating_add(fair.saturating_mul(FAIR_SHARE_SLACK))
    {
        return None;
    }
    let added = loaded.p50_ns.saturating_sub(idle.p50_ns);
    let rpm = latscope_core::model::diagnose::Responsiveness::rpm;
    let (title, side, fix) = match load {
        Load::Bulk { .. } => (
            "latency under load: bulk traffic makes small requests wait in a queue (bufferbloat)",
            Side::Network,
            "use an AQM on the bottleneck (`tc qdisc replace dev IFACE root fq_codel` or cake), shrink oversized queues (tbf/htb limit, BQL); separate bulk and interactive traffic",
        ),
        Load::Http { .. } => (
            "latency under load: a request waits behind the others while the server is loaded",
            Side::Both,
            "if the load's bytes fill the path, use an AQM on the bottleneck (fq_codel, cake); otherwise the server queues requests: more workers, admission control, or shorter per-request work",
        ),
    };
    Some(Diagnosis {
        rule: RuleId::Bufferbloat,
        title: title.into(),
        explains_ns: added,
        confidence: 0.8,
        side,
        evidence: vec![
            format!(
                "a small request: p50 {} idle, {} while {} runs ({:.0}×)",
                format_ns(idle.p50_ns as f64),
                format_ns(loaded.p50_ns as f64),
                load.describe(),
                loaded.p50_ns as f64 / idle.p50_ns.max(1) as f64
            ),
            format!(
                "responsiveness: {:.0} round trips per minute idle, {:.0} under load",
                rpm(idle.p50_ns),
                rpm(loaded.p50_ns)
            ),
        ]
        .into_iter()
        .chain(fair_share_ns.map(|fair| {
            format!(
                "a request served in turn would wait about {} (connections ÷ throughput): this one waited {:.0}× that",
                format_ns(fair as f64),
                added as f64 / fair.max(1) as f64
            )
        }))
        .collect(),
        fix: fix.into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// The network path dominates: most of a request's time is the round trip itself.
pub fn path_dominates(e: &Evidence) -> Option<Diagnosis> {
    let (single, path, _) = host_excess(e)?;
    if path < 1_000_000 || (path as f64) < 0.6 * single as f64 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::PathDominates,
        title: "the network path dominates: the round trip is most of each request".into(),
        explains_ns: path,
        confidence: 0.9,
        side: Side::Network,
        evidence: vec![format!(
            "path RTT {} of a {} request ({:.0}%)",
            format_ns(path as f64),
            format_ns(single as f64),
            100.0 * path as f64 / single.max(1) as f64
        )],
        fix: "shorten the path (closer server, fewer hops, a CDN) or make fewer round trips per request (keep-alive, pipelining, batching)".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// A phase dominates when it is at least this share of the whole request…
const PHASE_SHARE: f64 = 1.0 / 3.0;
/// …and at least this long.
const PHASE_FLOOR_NS: u64 = 1_000_000;

/// Slow name resolution: the DNS lookup is a large share of a URL request (paid on every new
/// connection whose name is not cached).
pub fn slow_dns(e: &Evidence) -> Option<Diagnosis> {
    let ph = e.phases.as_ref()?;
    let total = ph.total_ns();
    if ph.dns_ns < PHASE_FLOOR_NS || (ph.dns_ns as f64) < PHASE_SHARE * total as f64 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::SlowDns,
        title: "slow name resolution: the DNS lookup dominates a new connection's request".into(),
        explains_ns: ph.dns_ns,
        confidence: 0.85,
        side: Side::Client,
        evidence: vec![format!(
            "request phases (median of {}): DNS {} of a {} request ({:.0}%)",
            ph.requests,
            format_ns(ph.dns_ns as f64),
            format_ns(total as f64),
            100.0 * ph.dns_ns as f64 / total.max(1) as f64
        )],
        fix: "check the resolver (`resolvectl status`, /etc/resolv.conf: the first nameserver answers slowly or times out); use a local caching resolver, or keep connections alive so the lookup is rare".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// A slow TLS handshake: beyond its two round trips at most (TLS 1.2; 1.3 needs one), the
/// handshake spends milliseconds — the server's key exchange and signature, a long
/// certificate chain, or OCSP fetched inline.
pub fn slow_tls(e: &Evidence) -> Option<Diagnosis> {
    let ph = e.phases.as_ref()?;
    let tls = ph.tls_ns?;
    let path = e.path.as_ref().map_or(ph.connect_ns, |p| p.p50_ns);
    let beyond = tls.saturating_sub(2 * path);
    let total = ph.total_ns();
    if beyond < PHASE_FLOOR_NS || (tls as f64) < PHASE_SHARE * total as f64 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::SlowTls,
        title: "slow TLS handshake: the server spends milliseconds setting up each connection".into(),
        explains_ns: beyond,
        confidence: 0.8,
        side: Side::Server,
        evidence: vec![format!(
            "request phases (median of {}): TLS handshake {} of a {} request ({:.0}%), {} beyond two round trips of the path ({} each)",
            ph.requests,
            format_ns(tls as f64),
            format_ns(total as f64),
            100.0 * tls as f64 / total.max(1) as f64,
            format_ns(beyond as f64),
            format_ns(path as f64)
        )],
        fix: "on the server: an ECDSA certificate instead of a large RSA key, a short chain, OCSP stapling, TLS 1.3 and session resumption; on the client, reuse connections".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// The worst tail latency the request steps measured: (p50, p99) of the step with the larger p99.
fn tail(e: &Evidence) -> Option<(u64, u64)> {
    [e.single.as_ref(), e.concurrent.as_ref().map(|c| &c.latency)]
        .into_iter()
        .flatten()
        .map(|s| (s.p50_ns, s.p99_ns))
        // The widest tail, not the highest p99: concurrent requests that all wait a throttled
        // period have a p99 of 199 ms and no tail at all (their p50 is 199 ms too).
        .max_by_key(|&(p50, p99)| p99.saturating_sub(p50))
}

/// CPU throttling: the server's cgroup ran out of its CPU quota (cgroup v1 `cpu.cfs_quota_us`,
/// v2 `cpu.max`) while the requests ran, and its threads were held back until the next period —
/// requests arriving meanwhile wait, which shows in the tail. The kernel's own counters
/// (`cpu.stat` nr_throttled, throttled_time / throttled_usec) are the evidence.
pub fn cpu_throttling(e: &Evidence) -> Option<Diagnosis> {
    let c = e.cpu.as_ref()?;
    let t = c.throttling.as_ref()?;
    if t.throttled == 0 || t.throttled_ns < 1_000_000 {
        return None;
    }
    let (p50, p99) = tail(e)?;
    let held_per_period = t.throttled_ns / t.throttled;
    // Requests must have felt it: a tail of at least a millisecond beyond the median.
    let tail_ns = p99.saturating_sub(p50);
    if tail_ns < 1_000_000 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::CpuThrottling,
        title: "the server's cgroup runs out of CPU quota: its threads are throttled until the next period".into(),
        explains_ns: tail_ns.min(held_per_period.max(1_000_000)),
        confidence: 0.85,
        side: Side::Server,
        evidence: vec![
            format!(
                "cgroup {} of {} ({}): throttled in {} while the requests ran, {} held back ({} per throttled period)",
                t.cgroup,
                c.process,
                t.limit.as_deref().unwrap_or("limit set"),
                of(t.throttled, t.periods, "period"),
                format_ns(t.throttled_ns as f64),
                format_ns(held_per_period as f64)
            ),
            format!(
                "requests: p50 {}, p99 {} — the tail is requests that arrived while it was throttled",
                format_ns(p50 as f64),
                format_ns(p99 as f64)
            ),
        ],
        fix: "raise the cgroup's CPU limit (`cpu.max` on cgroup v2, `cpu.cfs_quota_us` on v1; Kubernetes: the container's CPU limit), or make the server use less CPU per request; fewer busy threads burn the quota less fast".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// Run-queue delay: the server's threads, once woken to handle a request, wait for a CPU
/// (other busy threads or processes on the same CPUs). Measured as bcc's runqlat does, from the
/// scheduler's wakeup and switch tracepoints, for the server's threads only.
pub fn run_queue_delay(e: &Evidence) -> Option<Diagnosis> {
    run_queue_median(e).or_else(|| super::tail::run_queue_tail(e))
}

/// Run-queue delay in the typical request: the median wake-up waits.
fn run_queue_median(e: &Evidence) -> Option<Diagnosis> {
    let c = e.cpu.as_ref()?;
    let rq = c.run_queue.as_ref()?;
    let single = e.single.as_ref()?;
    let requests = single.count + e.concurrent.as_ref().map_or(0, |c| c.latency.count);
    if requests == 0 {
        return None;
    }
    // A throttled cgroup's threads also wait "in the run queue" until the next period: that
    // time is the throttling's (its own rule), not contention for CPUs.
    let throttled_ns = c.throttling.as_ref().map_or(0, |t| t.throttled_ns);
    if throttled_ns.saturating_mul(2) >= rq.total_ns {
        return None;
    }
    // The typical wake-up must wait: a median wait of at least 100 µs and a quarter of a
    // request (a busy load generator on the same CPUs makes a long tail of short waits).
    let per_request = rq.total_ns / requests;
    if rq.p50_ns < 100_000.0 || rq.p50_ns < 0.25 * single.p50_ns as f64 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::RunQueueDelay,
        title: "the server's threads wait for a CPU before they can answer (run-queue delay)".into(),
        explains_ns: (rq.p50_ns as u64).min(single.p50_ns),
        confidence: 0.8,
        side: Side::Server,
        evidence: vec![
            format!(
                "scheduler tracepoints (eBPF), {}: {} waits for a CPU, p50 {}, p99 {}, {} in all",
                c.process,
                rq.waits,
                format_ns(rq.p50_ns),
                format_ns(rq.p99_ns),
                format_ns(rq.total_ns as f64)
            ),
            format!(
                "{} of waiting per request against a request median of {}",
                format_ns(per_request as f64),
                format_ns(single.p50_ns as f64)
            ),
        ],
        fix: "find what else runs on the server's CPUs (`top`, `perf sched`, `runqlat`); give the server dedicated CPUs (cpusets, taskset) or more of them, lower the priority of batch work (`nice`, cgroup cpu.weight), or run fewer busy threads than CPUs".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// Whether N exchanges serialised one after another at the bottleneck account for at least half
/// of the concurrent latency: then requests queue on the link, not in the server.
fn bandwidth_explains_concurrency(e: &Evidence) -> bool {
    let (Some(b), Some(c)) = (e.bottleneck, e.concurrent.as_ref()) else {
        return false;
    };
    let queued = b.serialisation_ns() * u64::from(c.connections);
    queued.saturating_mul(2) >= c.latency.p50_ns
}

/// The bottleneck's rate: a request and its response take a material time just to be
/// serialised onto the slowest link, and N of them at once queue for it N deep. That is the
/// network's share of the budget (the hosts are not slow; the link is), and adding server
/// workers would not help.
pub fn bottleneck_bandwidth(e: &Evidence) -> Option<Diagnosis> {
    let b = e.bottleneck?;
    let single = e.single.as_ref()?.p50_ns;
    let ser = b.serialisation_ns();
    if ser < 100_000 || (ser as f64) < 0.3 * single as f64 {
        return None;
    }
    let rate = latscope_core::units::format_bitrate(b.rate_bps);
    let mut evidence = vec![
        match b.source {
            RateSource::BulkTransfer => {
                format!("a bulk transfer on the path reaches {rate}: the bottleneck rate")
            }
            RateSource::PacketTrains { pairs } => format!(
                "packet trains of the responses: back-to-back segments arrive spaced as at {rate} (median of {pairs} segment pairs): the bottleneck rate"
            ),
        },
        format!(
            "one request and its response ({} B on the wire) take {} to serialise at that rate, of a {} request",
            b.wire_bytes,
            format_ns(ser as f64),
            format_ns(single as f64)
        ),
    ];
    let mut explains = ser;
    if let Some(c) = &e.concurrent
        && bandwidth_explains_concurrency(e)
    {
        evidence.push(format!(
            "{} at once: p50 {} — they queue for the link ({} × {} = {})",
            c.connections,
            format_ns(c.latency.p50_ns as f64),
            c.connections,
            format_ns(ser as f64),
            format_ns((ser * u64::from(c.connections)) as f64)
        ));
        explains = explains.max(c.latency.p50_ns.saturating_sub(single) + ser);
    }
    Some(Diagnosis {
        rule: RuleId::BottleneckBandwidth,
        title: "the path's bandwidth: each response takes material time to serialise at the bottleneck".into(),
        explains_ns: explains,
        confidence: 0.8,
        side: Side::Network,
        evidence,
        fix: "a faster link at the bottleneck, or fewer bytes per request (compression, smaller responses, fewer round trips carrying data); more server workers would not help".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use latscope_core::Summary;

    fn nagle(count: u64, lost_ns: u64, example: (u64, u64, u64)) -> Option<NagleStalls> {
        Some(NagleStalls {
            total: StallTotal { count, lost_ns },
            example: StallExample {
                conn: example.0,
                since_frame: example.1,
                frame: example.2,
            },
        })
    }

    fn stalls(count: u64, lost_ns: u64) -> Option<StallTotal> {
        Some(StallTotal { count, lost_ns })
    }

    fn s(p50_us: u64) -> Summary {
        Summary {
            count: 100,
            p50_ns: p50_us * 1000,
            p99_ns: p50_us * 1100,
            max_ns: p50_us * 1200,
            ..Summary::default()
        }
    }

    fn base(path_us: u64, single_us: u64) -> Evidence {
        Evidence {
            path: Some(s(path_us)),
            single: Some(s(single_us)),
            ..Evidence::default()
        }
    }

    #[test]
    fn nagle_needs_the_quickack_evidence() {
        let mut e = base(40, 44_000);
        assert_eq!(
            nagle_delayed_ack(&e),
            None,
            "a 40 ms excess alone is not enough"
        );
        e.quickack = Some(s(60));
        let f = nagle_delayed_ack(&e).expect("fires");
        assert_eq!(f.side, Side::Server);
        assert!(f.explains_ns > 43_000_000);
        assert_eq!(think_time(&e), None, "not think time");
        e.quickack = Some(s(43_000));
        assert_eq!(
            nagle_delayed_ack(&e),
            None,
            "quick-ack did not help: not a delayed ACK"
        );
        // Without the experiment (HTTP targets), the wire is enough.
        e.quickack = None;
        e.capture = Some(CaptureEvidence {
            frames: 90,
            transactions: 20,
            nagle: nagle(19, 800_000_000, (0, 5, 6)),
            ..CaptureEvidence::default()
        });
        assert!(nagle_delayed_ack(&e).is_some());
        assert_eq!(think_time(&e), None);
    }

    #[test]
    fn think_time_is_not_nagle() {
        let mut e = base(40, 20_040);
        e.quickack = Some(s(20_030));
        let f = think_time(&e).expect("fires");
        assert_eq!(f.rule, RuleId::ThinkTime);
        assert_eq!(nagle_delayed_ack(&e), None);
        // A healthy server: nothing.
        let e = base(40, 60);
        assert_eq!(think_time(&e), None);
        assert!(apply(&e).is_empty());
    }

    #[test]
    fn queueing_scales_with_concurrency() {
        let mut e = base(40, 10_000);
        e.concurrent = Some(Concurrent {
            connections: 8,
            latency: s(78_000),
        });
        let f = socket_queueing(&e).expect("fires");
        assert!(f.explains_ns >= 67_000_000);
        e.concurrent = Some(Concurrent {
            connections: 8,
            latency: s(12_000),
        });
        assert_eq!(socket_queueing(&e), None, "a concurrent server");
    }

    #[test]
    fn capture_evidence_strengthens_and_adds() {
        let mut e = base(40, 44_000);
        e.quickack = Some(s(60));
        e.capture = Some(CaptureEvidence {
            frames: 500,
            transactions: 40,
            nagle: nagle(38, 1_600_000_000, (1, 17, 18)),
            retransmissions: 3,
            rto_stalls: stalls(1, 210_000_000),
            ..CaptureEvidence::default()
        });
        let f = nagle_delayed_ack(&e).expect("fires");
        assert!(f.confidence >= 0.95);
        assert!(f.evidence.iter().any(|l| l.contains("frames 17 → 18")));
        let r = retransmissions(&e).expect("fires");
        assert_eq!(r.explains_ns, 210_000_000 / 40);
        // 8 retransmissions in 130k frames, 1.2 µs per request: noise, not a finding.
        e.capture = Some(CaptureEvidence {
            frames: 130_256,
            transactions: 32_560,
            retransmissions: 8,
            rto_stalls: stalls(8, 39_700_000),
            ..CaptureEvidence::default()
        });
        assert_eq!(retransmissions(&e), None);
    }

    #[test]
    fn kernel_stack_rules() {
        let mut e = base(40, 60_000);
        e.stack = Some(StackEvidence {
            packets: 400,
            ip_start_ns: Some(2_000.0),
            tcp_start_ns: Some(90_000.0),
            enqueued_ns: Some(95_000.0),
            read_ns: Some(60_000_000.0),
            read_bucket: Some("(33.6ms, 67.1ms]".into()),
        });
        let f = pre_tcp_kernel(&e).expect("fires");
        assert_eq!(f.side, Side::Kernel);
        assert_eq!(f.explains_ns, 88_000);
        let f = socket_queueing(&e).expect("fires");
        assert!(f.evidence[0].contains("(33.6ms, 67.1ms]"));
        assert_eq!(
            f.title,
            "requests wait in the socket before the server reads them"
        );
        // A healthy stack: neither fires.
        e.stack = Some(StackEvidence {
            packets: 400,
            ip_start_ns: Some(2_000.0),
            tcp_start_ns: Some(4_000.0),
            enqueued_ns: Some(6_000.0),
            read_ns: Some(9_000.0),
            read_bucket: None,
        });
        assert_eq!(pre_tcp_kernel(&e), None);
        assert_eq!(socket_queueing(&e), None);
        // No tcp-start probe: the socket enqueue bounds the pre-TCP time.
        e.stack = Some(StackEvidence {
            packets: 400,
            ip_start_ns: Some(500.0),
            tcp_start_ns: None,
            enqueued_ns: Some(99_000.0),
            read_ns: Some(111_000.0),
            read_bucket: None,
        });
        let f = pre_tcp_kernel(&e).expect("fires");
        assert_eq!(f.explains_ns, 98_500);
        assert!(
            f.evidence[0].contains("the socket after"),
            "{:?}",
            f.evidence
        );
    }

    #[test]
    fn delayed_ack_alone() {
        let mut e = base(40, 41_000);
        e.capture = Some(CaptureEvidence {
            frames: 200,
            transactions: 40,
            delayed_ack: stalls(38, 1_520_000_000),
            ..CaptureEvidence::default()
        });
        let f = delayed_ack(&e).expect("fires");
        assert_eq!(f.explains_ns, 38_000_000);
        e.capture = Some(CaptureEvidence {
            frames: 200,
            transactions: 40,
            delayed_ack: stalls(1, 40_000_000),
            ..CaptureEvidence::default()
        });
        assert_eq!(delayed_ack(&e), None, "one in forty is not a pattern");
    }

    #[test]
    fn cpu_rules_need_the_kernel_counters_and_a_tail() {
        let mut e = base(20, 60);
        e.single = Some(Summary {
            count: 1000,
            p50_ns: 60_000,
            p99_ns: 45_000_000,
            ..Summary::default()
        });
        e.cpu = Some(CpuEvidence {
            process: "python3[7]".into(),
            throttling: Some(Throttling {
                cgroup: "/web".into(),
                limit: Some("10ms of CPU per 100ms".into()),
                periods: 30,
                throttled: 12,
                throttled_ns: 960_000_000,
            }),
            run_queue: None,
            client_run_queue: None,
        });
        let f = cpu_throttling(&e).expect("fires");
        assert_eq!(f.rule, RuleId::CpuThrottling);
        assert_eq!(
            f.explains_ns, 44_940_000,
            "the tail, within the time held back"
        );
        // Throttled, but no request waited: not a latency finding.
        e.single = Some(s(60));
        assert_eq!(cpu_throttling(&e), None);
        // Run-queue waits: material per request, against the request's own median.
        e.cpu = Some(CpuEvidence {
            process: "latscope[9]".into(),
            throttling: None,
            run_queue: Some(RunQueueWaits {
                waits: 200,
                total_ns: 300_000_000,
                p50_ns: 1_000_000.0,
                p99_ns: 4_000_000.0,
            }),
            client_run_queue: None,
        });
        e.single = Some(Summary {
            count: 100,
            p50_ns: 2_000_000,
            p99_ns: 5_000_000,
            ..Summary::default()
        });
        let f = run_queue_delay(&e).expect("fires");
        assert_eq!(f.explains_ns, 1_000_000, "the median wait");
        e.cpu.as_mut().unwrap().run_queue.as_mut().unwrap().p50_ns = 30_000.0;
        assert_eq!(run_queue_delay(&e), None, "30 µs typical waits: noise");
        // Waits that are the cgroup's throttling belong to that rule.
        let c = e.cpu.as_mut().unwrap();
        c.run_queue.as_mut().unwrap().p50_ns = 1_000_000.0;
        c.throttling = Some(Throttling {
            cgroup: "/web".into(),
            limit: None,
            periods: 30,
            throttled: 20,
            throttled_ns: 200_000_000,
        });
        assert_eq!(run_queue_delay(&e), None);
    }

    /// A web server in a cgroup with 5 ms of CPU per 100 ms: one request at a time is fast
    /// with a throttled tail (p50 850 µs, p99 96.6 ms), eight at once all wait a period (p50 and
    /// p99 199 ms). The throttling is the cause, the queueing its effect: the server cannot
    /// serve faster than its quota, whatever its workers.
    #[test]
    fn a_throttled_server_is_why_requests_queue() {
        let mut e = base(12, 850);
        e.single.as_mut().unwrap().p99_ns = 96_600_000;
        e.concurrent = Some(Concurrent {
            connections: 8,
            latency: Summary {
                p50_ns: 199_000_000,
                p99_ns: 199_000_000,
                ..s(199_000)
            },
        });
        let throttled = |throttled| Throttling {
            cgroup: "/web".into(),
            limit: Some("5ms of CPU per 100ms".into()),
            periods: 28,
            throttled,
            throttled_ns: 2_480_000_000,
        };
        e.cpu = Some(CpuEvidence {
            process: "nginx[2]".into(),
            throttling: Some(throttled(28)),
            ..CpuEvidence::default()
        });
        let f = cpu_throttling(&e).expect("the single requests' tail felt it");
        assert_eq!(f.explains_ns, 2_480_000_000 / 28);
        let all = apply(&e);
        let rules: Vec<RuleId> = all.iter().map(|f| f.rule).collect();
        assert_eq!(rules, vec![RuleId::CpuThrottling, RuleId::SocketQueueing]);
        assert_eq!(all[1].caused_by, Some(RuleId::CpuThrottling));
        // Throttled now and then (3 periods in 28): the queueing is the server's own.
        e.cpu.as_mut().unwrap().throttling = Some(throttled(3));
        let all = apply(&e);
        assert_eq!(all[0].rule, RuleId::SocketQueueing);
        assert!(all.iter().all(|f| f.caused_by.is_none()));
    }

    #[test]
    fn a_slow_link_is_the_network_not_the_server() {
        // 4 Mbit/s: 1.2 KB on the wire per exchange is 2.4 ms; 8 at once queue 8 deep.
        let mut e = base(60, 2_600);
        e.concurrent = Some(Concurrent {
            connections: 8,
            latency: s(19_500),
        });
        e.bottleneck = Some(Bottleneck {
            rate_bps: 4e6,
            source: RateSource::BulkTransfer,
            wire_bytes: 1_220,
        });
        let f = bottleneck_bandwidth(&e).expect("fires");
        assert_eq!(f.side, Side::Network);
        assert_eq!(
            socket_queueing(&e),
            None,
            "the link queues them, not the server"
        );
        assert_eq!(apply(&e)[0].rule, RuleId::BottleneckBandwidth);
        assert!(crate::budget(&e).serialisation_ns.unwrap() > 2_000_000);
        // A fast path: serialisation is nothing, and a one-at-a-time server is still named.
        e.bottleneck = Some(Bottleneck {
            rate_bps: 10e9,
            source: RateSource::BulkTransfer,
            wire_bytes: 1_220,
        });
        assert_eq!(bottleneck_bandwidth(&e), None);
        assert!(socket_queueing(&e).is_some());
    }

    #[test]
    fn handshakes_bloat_and_path() {
        let mut e = base(1_000, 1_200);
        e.handshake = Some(Summary {
            p50_ns: 1_000_000,
            p99_ns: 1_003_000_000,
            count: 10,
            ..Summary::default()
        });
        e.connect_failures = ConnectFailures {
            attempts: 10,
            ..ConnectFailures::default()
        };
        assert!(slow_handshake(&e).is_some());
        let mut e = base(20_000, 21_000);
        assert!(path_dominates(&e).is_some());
        e.under_load = Some(UnderLoad {
            idle: s(20_000),
            loaded: s(180_000),
            load: Load::Bulk { rate_bps: None },
        });
        let f = bufferbloat(&e).expect("fires");
        assert_eq!(f.side, Side::Network);
        let ranked = apply(&e);
        assert_eq!(
            ranked[0].rule,
            RuleId::Bufferbloat,
            "ranked by latency explained"
        );
    }

    fn slow_connects() -> Evidence {
        let mut e = base(30, 400);
        e.handshake = Some(Summary {
            p50_ns: 40_000,
            p99_ns: 1_010_000_000,
            count: 100,
            ..Summary::default()
        });
        e.connect_failures = ConnectFailures {
            attempts: 100,
            ..ConnectFailures::default()
        };
        e
    }

    fn counters(server: NsCounters) -> Option<TcpCounters> {
        Some(TcpCounters {
            client: NsCounters {
                out_segs: 4_000,
                in_segs: 6_000,
                ..NsCounters::default()
            },
            server: Some(server),
            shared: false,
        })
    }

    /// A busy TLS server answers late, and the client's tail-loss probes resend 4 segments the
    /// server already had: it says so with D-SACKs, and nothing was lost (the lab's slow-tls on
    /// a loaded host once listed "retransmissions" from exactly this). Without the D-SACKs the
    /// same capture is loss.
    #[test]
    fn retransmissions_the_receiver_already_had_are_not_loss() {
        let mut e = base(25, 156);
        e.capture = Some(CaptureEvidence {
            frames: 2_306,
            transactions: 395,
            retransmissions: 4,
            rto_stalls: Some(StallTotal {
                count: 4,
                lost_ns: 19_200_000,
            }),
            ..CaptureEvidence::default()
        });
        let client = NsCounters {
            out_segs: 1_686,
            in_segs: 1_221,
            retrans_segs: 4,
            dsack_recv: 4,
            ..NsCounters::default()
        };
        e.counters = Some(TcpCounters {
            client,
            server: Some(NsCounters {
                out_segs: 1_353,
                in_segs: 1_690,
                ..NsCounters::default()
            }),
            shared: false,
        });
        assert_eq!(retransmissions(&e), None);
        assert!(!data_loss_material(&e));
        e.counters.as_mut().unwrap().client.dsack_recv = 0;
        let f = retransmissions(&e).expect("loss");
        assert!(
            f.evidence[0].starts_with("on the wire: 4 retransmissions"),
            "{:?}",
            f.evidence
        );
        // Some duplicates, some lost: the lost ones count, and the line says how many were not.
        e.counters.as_mut().unwrap().client.dsack_recv = 1;
        let f = retransmissions(&e).expect("3 lost");
        assert!(
            f.evidence[0].contains("1 of them reported duplicate by the receiver (D-SACK)"),
            "{:?}",
            f.evidence
        );
    }

    /// nginx signing RSA-4096 handshakes on one worker: each new connection's request waits in
    /// the socket while the worker signs the others' (4.6 ms read wait, 4.5 ms handshakes). The
    /// slow handshake is the cause, the queueing its effect, however close the two figures
    /// (the lab's slow-tls once ranked the queueing first by 75 µs).
    #[test]
    fn slow_handshakes_are_why_requests_queue_behind_them() {
        let mut e = base(10, 101);
        e.phases = Some(latscope_core::model::diagnose::RequestPhases {
            requests: 5,
            dns_ns: 600,
            connect_ns: 35_000,
            tls_ns: Some(4_540_000),
            ttfb_ns: 62_000,
            transfer_ns: 0,
        });
        e.concurrent = Some(Concurrent {
            connections: 8,
            latency: s(8_550),
        });
        e.stack = Some(StackEvidence {
            packets: 6_000,
            ip_start_ns: Some(1.0),
            enqueued_ns: Some(1_830.0),
            read_ns: Some(4_600_000.0),
            ..StackEvidence::default()
        });
        let all = apply(&e);
        let rules: Vec<RuleId> = all.iter().map(|f| f.rule).collect();
        assert_eq!(
            rules,
            vec![RuleId::SlowTls, RuleId::SocketQueueing],
            "{all:#?}"
        );
        assert_eq!(all[1].caused_by, Some(RuleId::SlowTls));
        // Handshakes far too short to account for the wait explain nothing.
        e.phases.as_mut().unwrap().tls_ns = Some(300_000);
        e.stack.as_mut().unwrap().read_ns = Some(40_000_000.0);
        let all = apply(&e);
        assert!(all.iter().all(|f| f.caused_by.is_none()), "{all:#?}");
    }

    /// Half of the SYNs dropped, and the requests never get through: the capture holds little
    /// but resent SYNs. Those are the handshakes' finding, not packet loss on open connections
    /// (the lab's syn-drops once ranked "retransmissions: 2.04 s of each request" first from
    /// 2 resent SYNs in 3 frames).
    #[test]
    fn resent_syns_in_the_capture_are_the_handshakes() {
        let mut e = slow_connects();
        e.connect_failures.timed_out = 1;
        e.capture = Some(CaptureEvidence {
            frames: 3,
            syn_resends: Some(StallTotal {
                count: 2,
                lost_ns: 2_042_000_000,
            }),
            ..CaptureEvidence::default()
        });
        e.counters = counters(NsCounters {
            out_segs: 9,
            in_segs: 15,
            ..NsCounters::default()
        });
        e.counters.as_mut().unwrap().client.syn_retrans = 5;
        e.counters.as_mut().unwrap().client.retrans_segs = 5;
        let ranked = apply(&e);
        let rules: Vec<RuleId> = ranked.iter().map(|f| f.rule).collect();
        assert_eq!(rules, vec![RuleId::SlowHandshake], "{ranked:#?}");
    }

    /// Loss on the server's way out drops SYN-ACKs and data alike: the kernel's counters show
    /// the server retransmitting data and no listen-queue overflow, so loss is the cause and the
    /// slow handshakes its effect — even when the capture at the client saw little of it.
    #[test]
    fn loss_on_the_way_back_outranks_the_handshakes_it_slows() {
        let mut e = slow_connects();
        e.capture = Some(CaptureEvidence {
            frames: 20_000,
            transactions: 3_000,
            ..CaptureEvidence::default()
        });
        e.counters = counters(NsCounters {
            out_segs: 9_000,
            in_segs: 5_000,
            retrans_segs: 290,
            syn_retrans: 6,
            ..NsCounters::default()
        });
        let ranked = apply(&e);
        assert_eq!(ranked[0].rule, RuleId::Retransmissions, "{ranked:#?}");
        assert_eq!(ranked[1].rule, RuleId::SlowHandshake);
        assert_eq!(ranked[1].caused_by, Some(RuleId::Retransmissions));
        assert_eq!(ranked[1].side, Side::Network, "lost, not refused");
        // The same loss made by the server's own output path (a netfilter output rule): TCP
        // does not count a retransmission, IP counts packets that never left.
        e.counters = counters(NsCounters {
            out_segs: 2_900,
            in_segs: 1_500,
            syn_retrans: 7,
            retrans_segs: 7,
            ip_out_requests: 1_333,
            ip_out_transmits: Some(1_302),
            ..NsCounters::default()
        });
        let ranked = apply(&e);
        assert_eq!(ranked[0].rule, RuleId::Retransmissions, "{ranked:#?}");
        assert!(
            ranked[0]
                .evidence
                .iter()
                .any(|l| l.contains("before they left"))
        );
        // The same SYN retransmissions with the listen queue overflowing: the backlog.
        e.counters = counters(NsCounters {
            out_segs: 9_000,
            in_segs: 5_000,
            syn_retrans: 6,
            listen_overflows: 40,
            listen_drops: 40,
            ..NsCounters::default()
        });
        let ranked = apply(&e);
        assert_eq!(ranked[0].rule, RuleId::SlowHandshake);
        assert_eq!(ranked[0].side, Side::Server);
        assert!(ranked[0].title.contains("listen queue"));
        // SYNs dropped on the way and no data loss: the handshakes alone.
        e.counters = counters(NsCounters {
            out_segs: 9_000,
            in_segs: 5_000,
            syn_retrans: 0,
            ..NsCounters::default()
        });
        let ranked = apply(&e);
        assert_eq!(ranked.len(), 1);
        assert_eq!(ranked[0].rule, RuleId::SlowHandshake);
    }

    #[test]
    fn out_of_order_arrivals_at_the_client_are_loss() {
        let mut e = base(30, 400);
        e.counters = Some(TcpCounters {
            client: NsCounters {
                out_segs: 4_000,
                in_segs: 6_000,
                ofo_queued: 120,
                ..NsCounters::default()
            },
            server: None,
            shared: false,
        });
        let f = retransmissions(&e).expect("fires");
        assert!(f.evidence[0].contains("out of order"), "{:?}", f.evidence);
        // A handful in a busy namespace is noise.
        e.counters.as_mut().unwrap().client.ofo_queued = 4;
        assert_eq!(retransmissions(&e), None);
    }

    /// Issue 15 item 3: 15 ms before the first byte on a 12 µs path is the server's time, even
    /// without the quick-ack experiment or a capture (15 ms is also the edge of the coarse
    /// delayed-ACK band), and never "no problem".
    #[test]
    fn server_time_is_named_without_timer_evidence() {
        let mut e = base(12, 15_012);
        let f = think_time(&e).expect("fires");
        assert_eq!(f.side, Side::Server);
        assert_eq!(f.explains_ns, 15_000_000);
        assert_eq!(apply(&e)[0].rule, RuleId::ThinkTime);
        // A capture without delayed-ACK releases strengthens it.
        e.capture = Some(CaptureEvidence {
            frames: 400,
            transactions: 100,
            think: stalls(100, 1_500_000_000),
            ..CaptureEvidence::default()
        });
        assert!(think_time(&e).expect("fires").confidence >= 0.8);
        // A timer shown on the wire takes it away.
        e.capture = Some(CaptureEvidence {
            frames: 400,
            transactions: 100,
            delayed_ack: stalls(90, 1_500_000_000),
            ..CaptureEvidence::default()
        });
        assert_eq!(think_time(&e), None);
        // So does a quick-ack experiment that removed it.
        let mut e = base(12, 40_012);
        e.quickack = Some(s(30));
        assert_eq!(think_time(&e), None);
        // Phases give the budget its application share.
        let mut e = base(12, 15_012);
        e.phases = Some(latscope_core::model::diagnose::RequestPhases {
            requests: 5,
            dns_ns: 3_000,
            connect_ns: 20_000,
            tls_ns: None,
            ttfb_ns: 15_010_000,
            transfer_ns: 1_000,
        });
        let b = crate::budget(&e);
        assert_eq!(b.server_app_ns, Some(14_998_000));
        let v = crate::verdict(&apply(&e), &b);
        assert!(v.starts_with("server application time"), "{v}");
        assert!(v.contains("(100% of its 15ms)"), "{v}");
        // A healthy server whose first byte on a new connection (the phases) takes longer than
        // the median keep-alive request's whole host share: the part is capped at its whole.
        let mut e = base(10, 44);
        e.phases = Some(latscope_core::model::diagnose::RequestPhases {
            requests: 5,
            dns_ns: 1_000,
            connect_ns: 60_000,
            tls_ns: None,
            ttfb_ns: 58_000,
            transfer_ns: 1_000,
        });
        let b = crate::budget(&e);
        assert_eq!(b.host_ns, Some(34_000));
        assert_eq!(
            b.server_app_ns,
            Some(34_000),
            "never more than the hosts' share"
        );
    }

    /// Issue 15 item 2: delayed-ACK releases on the wire while the server's sockets have
    /// TCP_NODELAY off are Nagle × delayed ACK, fixed on the server, not "delayed ACK alone".
    #[test]
    fn delayed_acks_with_server_nagle_on_are_nagle() {
        let mut e = base(20, 40_100);
        e.capture = Some(CaptureEvidence {
            frames: 400,
            transactions: 50,
            delayed_ack: stalls(48, 1_920_000_000),
            ..CaptureEvidence::default()
        });
        // Without the server's sockets: delayed ACK alone, on the client.
        assert_eq!(apply(&e)[0].rule, RuleId::DelayedAck);
        assert_eq!(nagle_delayed_ack(&e), None);
        e.server_sockets = Some(ServerSockets {
            process: "python3[77]".into(),
            connections: 1,
            nagle_on: 1,
            corked: 0,
            snd_mss: Some(65_483),
        });
        let all = apply(&e);
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(all[0].rule, RuleId::NagleDelayedAck);
        assert_eq!(all[0].side, Side::Server);
        assert!(all[0].evidence.iter().any(|l| l.contains("65483 B")));
        // Nagle off at the server: back to the client's delayed ACK.
        e.server_sockets.as_mut().unwrap().nagle_on = 0;
        assert_eq!(apply(&e)[0].rule, RuleId::DelayedAck);
    }

    /// A policed server (drops above a rate on its way out, TCP_NODELAY on): each drop shrinks
    /// its window and the rest of a response waits for the client's delayed ACK. The loss is the
    /// cause and is credited with the waits' time; the delayed ACKs are its consequence, and
    /// Nagle is not named when the server's sockets cannot hold data.
    fn policed() -> Evidence {
        let mut e = base(50, 43_800);
        e.quickack = Some(s(103));
        e.capture = Some(CaptureEvidence {
            frames: 900,
            transactions: 73,
            delayed_ack: stalls(27, 27 * 40_000_000),
            ..CaptureEvidence::default()
        });
        e.counters = counters(NsCounters {
            out_segs: 3_000,
            in_segs: 900,
            ip_out_requests: 488,
            ip_out_transmits: Some(428),
            ..NsCounters::default()
        });
        e.server_sockets = Some(ServerSockets {
            process: "nginx[42]".into(),
            connections: 1,
            nagle_on: 0,
            corked: 0,
            snd_mss: Some(1_448),
        });
        e
    }

    #[test]
    fn loss_is_the_cause_of_the_delayed_acks_it_makes_necessary() {
        let e = policed();
        assert_eq!(
            nagle_delayed_ack(&e),
            None,
            "every server socket has NODELAY"
        );
        let all = apply(&e);
        let rules: Vec<RuleId> = all.iter().map(|f| f.rule).collect();
        assert_eq!(
            rules,
            vec![RuleId::Retransmissions, RuleId::DelayedAck],
            "{all:#?}"
        );
        assert_eq!(all[0].explains_ns, 27 * 40_000_000 / 73, "the waits' time");
        assert!(
            all[0]
                .evidence
                .iter()
                .any(|l| l.contains("27 of 73 transactions")),
            "{:?}",
            all[0].evidence
        );
        assert_eq!(all[1].caused_by, Some(RuleId::Retransmissions));
        let v = crate::verdict(&all, &crate::budget(&e));
        assert!(v.starts_with("packet loss"), "{v}");
        // Without a capture: the quick-ack experiment's gain is the loss's cost.
        let mut e = policed();
        e.capture = None;
        let r = retransmissions(&e).expect("fires");
        assert_eq!(r.explains_ns, 43_800_000 - 103_000);
        // Held segments the wire calls Nagle's, sockets unread: still the loss's.
        let mut e = policed();
        e.server_sockets = None;
        e.capture.as_mut().unwrap().delayed_ack = None;
        e.capture.as_mut().unwrap().nagle = nagle(40, 40 * 40_000_000, (0, 9, 10));
        let all = apply(&e);
        assert_eq!(all[0].rule, RuleId::Retransmissions, "{all:#?}");
        assert_eq!(all[1].rule, RuleId::NagleDelayedAck);
        assert_eq!(all[1].caused_by, Some(RuleId::Retransmissions));
        // Nagle on at the server: its held segments wait for every delayed ACK, loss or not.
        e.server_sockets = Some(ServerSockets {
            process: "python3[7]".into(),
            connections: 1,
            nagle_on: 1,
            corked: 0,
            snd_mss: None,
        });
        let all = apply(&e);
        assert_eq!(all[0].rule, RuleId::NagleDelayedAck, "{all:#?}");
        assert!(all.iter().all(|f| f.caused_by.is_none()));
        // Six lost segments cannot account for 27 waits: the delayed ACKs are their own.
        let mut e = policed();
        e.counters
            .as_mut()
            .unwrap()
            .server
            .as_mut()
            .unwrap()
            .ip_out_transmits = Some(482);
        let all = apply(&e);
        assert_eq!(all[0].rule, RuleId::DelayedAck, "{all:#?}");
        assert!(all.iter().all(|f| f.caused_by.is_none()));
    }

    /// The server's sockets settle whose held data it is: TCP_NODELAY on and no cork on every
    /// connection, and no Nagle-shaped stall on the wire, is not Nagle whatever TCP_QUICKACK
    /// removed.
    #[test]
    fn nagle_needs_a_server_that_can_hold_data() {
        let mut e = base(40, 44_000);
        e.quickack = Some(s(60));
        e.server_sockets = Some(ServerSockets {
            process: "nginx[42]".into(),
            connections: 2,
            nagle_on: 0,
            corked: 0,
            snd_mss: None,
        });
        assert_eq!(nagle_delayed_ack(&e), None);
        e.server_sockets.as_mut().unwrap().corked = 1;
        assert!(
            nagle_delayed_ack(&e).is_some(),
            "a corked socket holds data"
        );
    }

    /// Issue 15 item 5: relative inflation counts, with a floor.
    #[test]
    fn latency_under_load_thresholds() {
        assert!(inflated(24_000, 4_000_000), "167×, +4 ms");
        assert!(
            !inflated(30_000, 300_000),
            "10× but +0.27 ms: scheduling noise"
        );
        assert!(!inflated(1_000_000, 2_900_000), "+1.9 ms, 2.9×");
        assert!(inflated(100_000_000, 300_000_000), "3×, +200 ms");
        assert!(!inflated(100_000_000, 130_000_000), "+30 ms on 100 ms");
        let mut e = base(24, 60);
        e.under_load = Some(UnderLoad {
            idle: s(24),
            loaded: s(4_000),
            load: Load::Bulk {
                rate_bps: Some(1e9),
            },
        });
        let f = bufferbloat(&e).expect("fires");
        assert!(
            f.evidence[1].contains("2500000 round trips per minute idle, 15000 under load"),
            "{:?}",
            f.evidence
        );
    }

    /// A probe that waits its turn among diagnose's own closed-loop HTTP load (Little's law:
    /// connections ÷ throughput) is the applied load, not a finding: a healthy nginx on a busy
    /// two-core machine went from 46 µs to 4.55 ms under 64 connections at 13,470 req/s (fair
    /// share 4.75 ms). A probe waiting far beyond its share still is one.
    #[test]
    fn a_probe_waiting_its_turn_under_our_own_http_load_is_no_finding() {
        let mut e = base(46, 60);
        let load = Load::Http {
            connections: 64,
            requests_per_sec: 13_470.0,
            bytes_per_sec: 15e6,
        };
        assert_eq!(load.fair_share_ns(), Some(4_751_299));
        e.under_load = Some(UnderLoad {
            idle: s(46),
            loaded: s(4_550),
            load,
        });
        assert_eq!(bufferbloat(&e), None, "waited its fair share");
        e.under_load = Some(UnderLoad {
            idle: s(46),
            loaded: s(40_000),
            load,
        });
        let f = bufferbloat(&e).expect("8× its fair share");
        assert!(f.evidence[2].contains("4.75ms"), "{:?}", f.evidence);
        assert_eq!(
            Load::Bulk {
                rate_bps: Some(1e9)
            }
            .fair_share_ns(),
            None,
            "a bulk transfer's queue is the path's"
        );
    }

    /// Issue 15 item 10: the kernel's per-packet delay is the root cause of the queueing it
    /// produces, even when the queueing explains more latency per request.
    #[test]
    fn the_root_cause_ranks_first() {
        let mut e = base(30, 500);
        e.concurrent = Some(Concurrent {
            connections: 8,
            latency: s(3_800),
        });
        e.stack = Some(StackEvidence {
            packets: 400,
            ip_start_ns: Some(2_000.0),
            tcp_start_ns: Some(202_000.0),
            ..StackEvidence::default()
        });
        let all = apply(&e);
        let rules: Vec<RuleId> = all.iter().map(|f| f.rule).collect();
        assert_eq!(rules, vec![RuleId::PreTcpKernel, RuleId::SocketQueueing]);
        assert_eq!(all[1].caused_by, Some(RuleId::PreTcpKernel));
        assert_eq!(all[0].causes, vec![RuleId::SocketQueueing]);
        let v = crate::verdict(&all, &crate::budget(&e));
        assert!(v.contains("this explains: requests wait"), "{v}");
        // A kernel delay far too small to account for the queueing explains nothing.
        e.stack.as_mut().unwrap().tcp_start_ns = Some(27_000.0);
        let all = apply(&e);
        assert_eq!(all[0].rule, RuleId::SocketQueueing);
        assert!(all.iter().all(|f| f.caused_by.is_none()));
    }

    /// One cause seen by two instruments is one finding: the client's view (latency scaling with
    /// concurrency) and the kernel's (data waiting in the socket) make a single socket_queueing
    /// with both lines; either alone still names it.
    #[test]
    fn queueing_seen_from_both_sides_is_one_finding() {
        let mut e = base(20, 400);
        e.concurrent = Some(Concurrent {
            connections: 8,
            latency: s(4_300),
        });
        e.stack = Some(StackEvidence {
            packets: 18_000,
            ip_start_ns: Some(1.0),
            enqueued_ns: Some(2_000.0),
            read_ns: Some(1_330_000.0),
            ..StackEvidence::default()
        });
        let all = apply(&e);
        assert_eq!(all.len(), 1, "{all:?}");
        let f = &all[0];
        assert_eq!(f.rule, RuleId::SocketQueueing);
        assert_eq!(f.explains_ns, 3_900_000, "what a concurrent request loses");
        assert_eq!(f.evidence.len(), 3, "{:?}", f.evidence);
        assert!(
            f.evidence[2].starts_with("kernel stack"),
            "{:?}",
            f.evidence
        );
        assert!(f.confidence > 0.85);
        // The kernel's view alone (the concurrency step scaled only 2×, under load).
        e.concurrent.as_mut().unwrap().latency = s(800);
        let f = socket_queueing(&e).expect("the kernel's view is enough");
        assert_eq!(f.explains_ns, 1_328_000);
        // The client's view alone.
        e.concurrent.as_mut().unwrap().latency = s(4_300);
        e.stack.as_mut().unwrap().read_ns = Some(9_000.0);
        let f = socket_queueing(&e).expect("the client's view is enough");
        assert_eq!(f.evidence.len(), 2);
        // Neither.
        e.concurrent.as_mut().unwrap().latency = s(800);
        assert_eq!(socket_queueing(&e), None);
    }

    /// A one-at-a-time server under an HTTP ramp: the probe's wait behind the load is the
    /// queueing's consequence, however much larger it is; a bulk transfer filling the path
    /// (blamed on the network) stays a root cause.
    #[test]
    fn queueing_explains_inflation_under_a_request_load() {
        let d = |rule, explains_ns, side| Diagnosis {
            rule,
            title: rule.name().into(),
            explains_ns,
            confidence: 0.8,
            side,
            evidence: vec![],
            fix: String::new(),
            caused_by: None,
            causes: vec![],
        };
        let e = base(10, 3_000);
        let found = vec![
            d(RuleId::Bufferbloat, 96_000_000, Side::Both),
            d(RuleId::SocketQueueing, 18_000_000, Side::Server),
        ];
        let all = rank(&e, found);
        assert_eq!(all[0].rule, RuleId::SocketQueueing);
        assert_eq!(all[1].caused_by, Some(RuleId::SocketQueueing));
        let found = vec![
            d(RuleId::Bufferbloat, 96_000_000, Side::Network),
            d(RuleId::SocketQueueing, 18_000_000, Side::Server),
        ];
        let all = rank(&e, found);
        assert_eq!(all[0].rule, RuleId::Bufferbloat);
        assert!(all.iter().all(|f| f.caused_by.is_none()));
    }

    #[test]
    fn dns_and_tls_when_they_dominate() {
        let ph = |dns_ms: u64, tls_ms: Option<u64>| latscope_core::model::diagnose::RequestPhases {
            requests: 5,
            dns_ns: dns_ms * 1_000_000,
            connect_ns: 100_000,
            tls_ns: tls_ms.map(|t| t * 1_000_000),
            ttfb_ns: 300_000,
            transfer_ns: 10_000,
        };
        let mut e = base(50, 300);
        e.phases = Some(ph(200, None));
        assert_eq!(slow_dns(&e).expect("fires").side, Side::Client);
        e.phases = Some(ph(0, Some(30)));
        let f = slow_tls(&e).expect("fires");
        assert_eq!(f.explains_ns, 30_000_000 - 100_000);
        // A fast handshake on a slow path is the path's.
        e.path = Some(s(20_000));
        e.phases = Some(ph(0, Some(40)));
        assert_eq!(slow_tls(&e), None);
        e.phases = Some(ph(0, Some(1)));
        assert_eq!(slow_dns(&e), None);
    }

    /// A server with Nagle on that also thinks 15 ms: the delayed ACK and the think time are
    /// both named, each with its own share (the Python http.server case: head and body in two
    /// writes, 15 ms of work).
    #[test]
    fn nagle_and_think_time_split_the_budget() {
        let mut e = base(18, 56_000);
        e.quickack = Some(s(15_500));
        e.capture = Some(CaptureEvidence {
            frames: 119,
            transactions: 23,
            nagle: nagle(22, 906_000_000, (0, 71, 73)),
            ..CaptureEvidence::default()
        });
        let all = apply(&e);
        let rules: Vec<RuleId> = all.iter().map(|f| f.rule).collect();
        assert_eq!(rules, vec![RuleId::NagleDelayedAck, RuleId::ThinkTime]);
        assert_eq!(all[0].explains_ns, 40_500_000);
        assert_eq!(all[1].explains_ns, 15_500_000 - 18_000);
        // Without the wire, the experiment alone: removing a 40 ms timer's worth is enough.
        e.capture = None;
        assert_eq!(
            nagle_delayed_ack(&e),
            None,
            "15.5 ms left is not a tenth: not decisive alone"
        );
    }
}
