//! The trace engine: probes with increasing TTL from one constant flow (Paris traceroute),
//! one line per hop as it completes, or `rounds` of probes to every hop with per-hop loss and
//! RTT statistics (mtr's report). The engine never prints.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use latscope_core::LatencyHistogram;
use latscope_core::model::ping::{HopProbe, HopStats, ReplyKind, TraceHop, TraceUnreachable};

use crate::error::ProbeError;
use crate::ping::rtt_of;
use crate::prober::{Prober, Response};

/// [`TraceOptions::unreachable_wait`]'s default: Linux's ARP and neighbour discovery give up
/// after 3 solicitations 1 s apart (`mcast_solicit` 3, `retrans_time_ms` 1000); traceroute
/// waits up to 5 s for a probe.
pub const UNREACHABLE_WAIT: Duration = Duration::from_secs(4);

/// How to trace.
#[derive(Clone, Debug)]
pub struct TraceOptions {
    /// First TTL to probe.
    pub first_ttl: u8,
    /// Largest TTL to probe.
    pub max_ttl: u8,
    /// Probes per hop.
    pub queries: u32,
    /// How long to wait for the answers of a hop after its last probe.
    pub wait: Duration,
    /// How long the first silent hop after an answering router is listened to, from its first
    /// probe: a router that has a route to the destination but finds no host there answers
    /// host unreachable only when its ARP / neighbour discovery gives up (3 s on Linux: 3
    /// solicitations 1 s apart), long after `wait`. No longer than `wait` turns it off.
    pub unreachable_wait: Duration,
    /// The next probe leaves when every earlier one is answered, or after this long.
    pub spacing: Duration,
    /// `--report`: this many rounds (one probe per hop each), and the time between rounds.
    pub rounds: Option<u64>,
    /// Time between `--report` rounds.
    pub round_interval: Duration,
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            first_ttl: 1,
            max_ttl: 30,
            queries: 3,
            wait: Duration::from_secs(1),
            unreachable_wait: UNREACHABLE_WAIT,
            spacing: Duration::from_millis(50),
            rounds: None,
            round_interval: Duration::from_secs(1),
        }
    }
}

/// What a trace found (the report is assembled by the caller).
#[derive(Clone, Debug, Default)]
pub struct TraceOutcome {
    /// The hops, one per TTL (plain trace).
    pub hops: Vec<TraceHop>,
    /// Whether the destination answered.
    pub reached: bool,
    /// How the destination answered first.
    pub destination_reply: Option<ReplyKind>,
    /// Where a router answered that the destination cannot be reached (the trace stopped).
    pub unreachable: Option<TraceUnreachable>,
    /// Per-hop statistics (`--report`).
    pub report: Option<Vec<HopStats>>,
    /// Rounds completed (`--report`).
    pub rounds_done: u64,
    /// RTTs timed by the kernel at both ends.
    pub kernel_rtts: u64,
    /// RTTs measured.
    pub rtts: u64,
    /// Stopped by Ctrl-C.
    pub interrupted: bool,
}

/// The fate of one probe of a batch.
#[derive(Clone, Debug)]
enum Fate {
    /// Not sent: beyond the TTL where the destination already answered.
    Skipped,
    Lost,
    Answered(Response, u64, bool),
}

/// The probe ids of a trace: sequential, unique within 65536 probes.
struct Ids(u16);

impl Ids {
    fn next(&mut self) -> u16 {
        let id = self.0;
        self.0 = self.0.wrapping_add(1);
        id
    }
}

/// Send `probes` (id, ttl) in order, each when the earlier ones are answered or `spacing`
/// passed; then wait up to `wait` for the rest — when `patient` and nothing but a router's
/// unreachable answered, until `unreachable_wait` after the first probe (a router releases
/// the probes it queued for a missing neighbour one by one). Probes beyond the TTL at which
/// `dst` answered are skipped.
fn batch(
    prober: &mut dyn Prober,
    dst: IpAddr,
    probes: &[(u16, u8)],
    opts: &TraceOptions,
    patient: bool,
    stop: &AtomicBool,
) -> Result<Vec<Fate>, ProbeError> {
    let mut fates = vec![Fate::Lost; probes.len()];
    let index: HashMap<u16, usize> = probes.iter().enumerate().map(|(i, p)| (p.0, i)).collect();
    let mut dest_ttl: Option<u8> = None;
    let (mut next, mut sent, mut answered) = (0usize, 0usize, 0usize);
    // Answers that are a router's unreachable (late by nature).
    let mut refused = 0usize;
    let first_send = Instant::now();
    let mut last_send = first_send;
    let mut responses = Vec::new();
    let listen_until = |last_send: Instant, answered: usize, refused: usize| {
        let normal = last_send + opts.wait;
        if patient && answered == refused {
            normal.max(first_send + opts.unreachable_wait)
        } else {
            normal
        }
    };
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let now = Instant::now();
        if next < probes.len() {
            if sent == 0 || answered == sent || now >= last_send + opts.spacing {
                let (id, ttl) = probes[next];
                if dest_ttl.is_some_and(|d| ttl > d) {
                    fates[next] = Fate::Skipped;
                } else {
                    prober.send(id, Some(ttl))?;
                    sent += 1;
                    last_send = Instant::now();
                }
                next += 1;
                continue;
            }
        } else if answered == sent || now >= listen_until(last_send, answered, refused) {
            break;
        }
        let deadline = if next < probes.len() {
            last_send + opts.spacing
        } else {
            listen_until(last_send, answered, refused)
        };
        let wait = deadline
            .saturating_duration_since(now)
            .min(Duration::from_millis(100));
        responses.clear();
        prober.recv(wait, &mut responses)?;
        for r in responses.drain(..) {
            let Some(&k) = index.get(&r.id) else { continue };
            if !matches!(fates[k], Fate::Lost) || k >= next {
                continue;
            }
            let Some((rtt, kernel)) = rtt_of(prober, &r) else {
                continue;
            };
            if r.from == dst {
                let ttl = probes[k].1;
                dest_ttl = Some(dest_ttl.map_or(ttl, |d| d.min(ttl)));
            }
            prober.forget(r.id);
            refused += usize::from(r.kind.is_unreachable() && r.from != dst);
            fates[k] = Fate::Answered(r, rtt, kernel);
            answered += 1;
        }
    }
    for (i, (id, _)) in probes.iter().enumerate() {
        if matches!(fates[i], Fate::Lost) {
            prober.forget(*id);
            if i >= next {
                fates[i] = Fate::Skipped;
            }
        }
    }
    Ok(fates)
}

/// Trace the path to `dst`. `on_hop` sees each hop as it completes (plain trace);
/// `on_round(done, total)` each finished round (`--report`).
pub fn trace(
    prober: &mut dyn Prober,
    dst: IpAddr,
    opts: &TraceOptions,
    stop: &AtomicBool,
    on_hop: &mut dyn FnMut(&TraceHop),
    on_round: &mut dyn FnMut(u64, u64),
) -> Result<TraceOutcome, ProbeError> {
    if opts.first_ttl == 0 || opts.first_ttl > opts.max_ttl {
        return Err(ProbeError::Invalid(format!(
            "first TTL {} must be between 1 and the max TTL {}",
            opts.first_ttl, opts.max_ttl
        )));
    }
    let mut ids = Ids((crate::prober::random_u32() & 0xffff) as u16);
    let mut out = TraceOutcome::default();
    match opts.rounds {
        None => plain(prober, dst, opts, stop, on_hop, &mut ids, &mut out)?,
        Some(_) => report(prober, dst, opts, stop, &mut ids, &mut out, on_round)?,
    }
    out.interrupted = stop.load(Ordering::Relaxed);
    Ok(out)
}

fn plain(
    prober: &mut dyn Prober,
    dst: IpAddr,
    opts: &TraceOptions,
    stop: &AtomicBool,
    on_hop: &mut dyn FnMut(&TraceHop),
    ids: &mut Ids,
    out: &mut TraceOutcome,
) -> Result<(), ProbeError> {
    // The previous hop was a router that answered: a silence now may be the next router trying
    // to reach a host that is not there, so the hop is listened to for `unreachable_wait`.
    let mut after_router = false;
    for ttl in opts.first_ttl..=opts.max_ttl {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let probes: Vec<(u16, u8)> = (0..opts.queries.max(1))
            .map(|_| (ids.next(), ttl))
            .collect();
        let fates = batch(prober, dst, &probes, opts, after_router, stop)?;
        let mut hop = TraceHop {
            ttl,
            probes: Vec::new(),
            destination: false,
        };
        for f in fates {
            match f {
                Fate::Answered(r, rtt, kernel) => {
                    out.rtts += 1;
                    out.kernel_rtts += u64::from(kernel);
                    if r.from == dst {
                        hop.destination = true;
                        out.destination_reply.get_or_insert(r.kind);
                    }
                    // A router's unreachable comes when it gave up on the address: its delay
                    // is no round trip.
                    let gave_up = r.kind.is_unreachable() && r.from != dst;
                    hop.probes.push(HopProbe {
                        from: Some(r.from.to_string()),
                        kind: Some(r.kind),
                        rtt_ns: (!gave_up).then_some(rtt),
                        after_ns: gave_up.then_some(rtt),
                    });
                }
                Fate::Lost => hop.probes.push(HopProbe {
                    from: None,
                    kind: None,
                    rtt_ns: None,
                    after_ns: None,
                }),
                Fate::Skipped => {}
            }
        }
        if stop.load(Ordering::Relaxed) && hop.probes.iter().all(|p| p.from.is_none()) {
            return Ok(());
        }
        on_hop(&hop);
        let done = hop.destination;
        after_router = hop
            .probes
            .iter()
            .any(|p| p.kind == Some(ReplyKind::TimeExceeded));
        out.unreachable = (!done).then(|| unreachable_at(&hop)).flatten();
        out.hops.push(hop);
        if done {
            out.reached = true;
            return Ok(());
        }
        if out.unreachable.is_some() {
            return Ok(());
        }
    }
    Ok(())
}

/// The unreachable that ends a trace at `hop`: a router's unreachable, and no probe of the hop
/// passed (no time exceeded, no destination answer). With load-balanced paths some probes
/// may take another way; traceroute likewise gives up when (almost) all probes were refused.
fn unreachable_at(hop: &TraceHop) -> Option<TraceUnreachable> {
    if hop.probes.iter().any(|p| p.rtt_ns.is_some()) {
        return None;
    }
    hop.probes.iter().find_map(|p| {
        Some(TraceUnreachable {
            ttl: hop.ttl,
            from: p.from.clone()?,
            kind: p.kind?,
            after_ns: p.after_ns?,
        })
    })
}

#[derive(Default)]
struct HopAcc {
    sent: u64,
    received: u64,
    last_ns: Option<u64>,
    hist: LatencyHistogram,
    addrs: HashMap<IpAddr, u64>,
    destination: bool,
}

fn report(
    prober: &mut dyn Prober,
    dst: IpAddr,
    opts: &TraceOptions,
    stop: &AtomicBool,
    ids: &mut Ids,
    out: &mut TraceOutcome,
    on_round: &mut dyn FnMut(u64, u64),
) -> Result<(), ProbeError> {
    let rounds = opts.rounds.unwrap_or(1);
    let mut limit = opts.max_ttl;
    let mut acc: Vec<HopAcc> = Vec::new();
    acc.resize_with(
        usize::from(opts.max_ttl - opts.first_ttl) + 1,
        HopAcc::default,
    );
    let mut dest_ttl: Option<u8> = None;
    for round in 0..rounds {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let round_start = Instant::now();
        let probes: Vec<(u16, u8)> = (opts.first_ttl..=limit).map(|t| (ids.next(), t)).collect();
        let fates = batch(prober, dst, &probes, opts, false, stop)?;
        if stop.load(Ordering::Relaxed) {
            break;
        }
        for ((_, ttl), f) in probes.iter().zip(fates) {
            let a = &mut acc[usize::from(ttl - opts.first_ttl)];
            match f {
                Fate::Skipped => {}
                Fate::Lost => a.sent += 1,
                Fate::Answered(r, _, _) if r.kind.is_unreachable() && r.from != dst => {
                    // A router's unreachable: answered, but its delay is no round trip.
                    a.sent += 1;
                    a.received += 1;
                    *a.addrs.entry(r.from).or_default() += 1;
                }
                Fate::Answered(r, rtt, kernel) => {
                    a.sent += 1;
                    a.received += 1;
                    a.last_ns = Some(rtt);
                    a.hist.record(rtt.max(1));
                    *a.addrs.entry(r.from).or_default() += 1;
                    out.rtts += 1;
                    out.kernel_rtts += u64::from(kernel);
                    if r.from == dst {
                        a.destination = true;
                        out.destination_reply.get_or_insert(r.kind);
                        dest_ttl = Some(dest_ttl.map_or(*ttl, |d| d.min(*ttl)));
                    }
                }
            }
        }
        if let Some(d) = dest_ttl {
            limit = d;
        }
        out.rounds_done = round + 1;
        on_round(round + 1, rounds);
        if round + 1 < rounds {
            let until = round_start + opts.round_interval;
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(
                    until
                        .saturating_duration_since(Instant::now())
                        .min(Duration::from_millis(50)),
                );
            }
        }
    }
    out.reached = dest_ttl.is_some();
    let stats = acc
        .into_iter()
        .enumerate()
        .map(|(i, a)| (opts.first_ttl + i as u8, a))
        .filter(|(ttl, a)| *ttl <= limit && a.sent > 0)
        .map(|(ttl, a)| {
            let mut addrs: Vec<(IpAddr, u64)> = a.addrs.into_iter().collect();
            addrs.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
            HopStats {
                ttl,
                addresses: addrs.into_iter().map(|(ip, _)| ip.to_string()).collect(),
                sent: a.sent,
                received: a.received,
                loss_percent: (a.sent - a.received) as f64 * 100.0 / a.sent as f64,
                last_ns: a.last_ns,
                rtt: a.hist.summary(),
                destination: a.destination && Some(ttl) == dest_ttl,
            }
        })
        .collect();
    out.report = Some(stats);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::TsSource;
    use latscope_core::model::ping::ProbeMode;
    use std::collections::BTreeMap;

    /// A simulated path: routers at TTL 1..=n-1, the destination at n; TTL `silent` never
    /// answers. With `unreachable = (ttl, after)`, probes from that TTL on reach the router
    /// before it, which answers host unreachable `after` (real time) past the probe.
    struct Path {
        routers: Vec<IpAddr>,
        dst: IpAddr,
        silent: u8,
        unreachable: Option<(u8, Duration)>,
        sent: BTreeMap<u16, (u64, u8, Instant)>,
        clock: u64,
    }

    impl Prober for Path {
        fn send(&mut self, id: u16, ttl: Option<u8>) -> Result<(), ProbeError> {
            self.clock += 1_000;
            self.sent
                .insert(id, (self.clock, ttl.unwrap_or(64), Instant::now()));
            Ok(())
        }
        fn recv(&mut self, t: Duration, out: &mut Vec<Response>) -> Result<(), ProbeError> {
            std::thread::sleep(t.min(Duration::from_millis(5)));
            for (&id, &(t, ttl, at)) in &self.sent {
                if ttl == self.silent {
                    continue;
                }
                let (from, kind) = match (self.unreachable, self.routers.get(usize::from(ttl) - 1))
                {
                    (Some((u, after)), _) if ttl >= u => {
                        if at.elapsed() < after {
                            continue;
                        }
                        (self.routers[usize::from(u) - 2], ReplyKind::HostUnreachable)
                    }
                    (_, Some(r)) => (*r, ReplyKind::TimeExceeded),
                    (_, None) => (self.dst, ReplyKind::SynAck),
                };
                out.push(Response {
                    id,
                    from,
                    kind,
                    tcp_flags: None,
                    ttl: None,
                    size: 0,
                    rx_ns: t + u64::from(ttl) * 100_000,
                    rx_kernel: true,
                });
            }
            Ok(())
        }
        fn tx_time(&mut self, id: u16) -> Option<(u64, bool)> {
            self.sent.get(&id).map(|x| (x.0, true))
        }
        fn forget(&mut self, id: u16) {
            self.sent.remove(&id);
        }
        fn ts_source(&self) -> TsSource {
            TsSource::Kernel
        }
        fn mode(&self) -> ProbeMode {
            ProbeMode::Syn
        }
    }

    fn path(silent: u8) -> Path {
        Path {
            routers: vec![
                "10.0.1.2".parse().expect("ip"),
                "10.0.2.2".parse().expect("ip"),
                "10.0.3.2".parse().expect("ip"),
            ],
            dst: "10.0.4.2".parse().expect("ip"),
            silent,
            unreachable: None,
            sent: BTreeMap::new(),
            clock: 0,
        }
    }

    #[test]
    fn plain_trace_finds_routers_then_destination() {
        let mut p = path(2);
        let dst = p.dst;
        let opts = TraceOptions {
            wait: Duration::from_millis(30),
            spacing: Duration::from_millis(5),
            ..Default::default()
        };
        let mut seen = Vec::new();
        let stop = AtomicBool::new(false);
        let o = trace(
            &mut p,
            dst,
            &opts,
            &stop,
            &mut |h| seen.push(h.ttl),
            &mut |_, _| {},
        )
        .expect("trace");
        assert_eq!(seen, vec![1, 2, 3, 4]);
        assert!(o.reached);
        assert_eq!(o.destination_reply, Some(ReplyKind::SynAck));
        assert!(
            o.hops[1].probes.iter().all(|p| p.from.is_none()),
            "silent hop shows as *"
        );
        assert_eq!(o.hops[2].probes[0].from.as_deref(), Some("10.0.3.2"));
        assert_eq!(o.hops[3].probes.len(), 3);
        assert!(o.hops[3].destination);
    }

    #[test]
    fn report_rounds_count_loss_per_hop() {
        let mut p = path(2);
        let dst = p.dst;
        let opts = TraceOptions {
            wait: Duration::from_millis(30),
            spacing: Duration::from_millis(5),
            rounds: Some(3),
            round_interval: Duration::ZERO,
            max_ttl: 8,
            ..Default::default()
        };
        let stop = AtomicBool::new(false);
        let mut rounds = Vec::new();
        let o = trace(&mut p, dst, &opts, &stop, &mut |_| {}, &mut |d, t| {
            rounds.push((d, t))
        })
        .expect("trace");
        assert_eq!(rounds, vec![(1, 3), (2, 3), (3, 3)]);
        let r = o.report.expect("report");
        assert_eq!(r.len(), 4, "hops beyond the destination are dropped: {r:?}");
        assert_eq!((r[0].sent, r[0].received), (3, 3));
        assert_eq!((r[1].sent, r[1].received, r[1].loss_percent), (3, 0, 100.0));
        assert!(r[3].destination);
        assert_eq!(r[3].rtt.p50_ns / 1000, 400);
    }

    /// Hop 3's router has no host at the address: it answers host unreachable 150 ms after
    /// each probe, long after the 30 ms wait. The trace listens that long at the first silent
    /// hop after a router, stops there, and shows no round trip for it.
    #[test]
    fn a_late_host_unreachable_ends_the_trace() {
        let stop = AtomicBool::new(false);
        let opts = TraceOptions {
            wait: Duration::from_millis(30),
            unreachable_wait: Duration::from_millis(400),
            spacing: Duration::from_millis(5),
            ..Default::default()
        };
        let mut p = path(0);
        p.unreachable = Some((3, Duration::from_millis(150)));
        let dst = p.dst;
        let o = trace(&mut p, dst, &opts, &stop, &mut |_| {}, &mut |_, _| {}).expect("trace");
        assert_eq!(o.hops.len(), 3, "{:?}", o.hops);
        assert!(!o.reached);
        let u = o.unreachable.expect("an unreachable");
        assert_eq!((u.ttl, u.from.as_str()), (3, "10.0.2.2"));
        assert_eq!(u.kind, ReplyKind::HostUnreachable);
        for probe in &o.hops[2].probes {
            assert_eq!(probe.rtt_ns, None, "no round trip: {probe:?}");
            assert!(probe.after_ns.is_some(), "{probe:?}");
        }

        // Without the longer wait the answer comes too late: every hop is silent up to -m.
        let opts = TraceOptions {
            unreachable_wait: Duration::ZERO,
            max_ttl: 5,
            ..opts
        };
        let mut p = path(0);
        p.unreachable = Some((3, Duration::from_millis(150)));
        let o = trace(&mut p, dst, &opts, &stop, &mut |_| {}, &mut |_, _| {}).expect("trace");
        assert!(o.unreachable.is_none());
        assert_eq!(o.hops.len(), 5);
        assert!(o.hops[2].probes.iter().all(|p| p.from.is_none()));
    }
}
