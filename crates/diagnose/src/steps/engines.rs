//! The engine calls the steps share: one request/response measurement for a latscope server
//! (rr) or a URL (the HTTP load engine).

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use latscope_core::Summary;
use latscope_core::hist::LatencyHistogram;
use latscope_core::model::Meta;
use latscope_core::model::hoststack::{HostStackTimes, StageTimes};
use latscope_core::model::rr::{ServerBehaviour, Transport};
use latscope_http::tls::TlsOptions;
use latscope_net::NetError;
use latscope_net::proto::{RefusalCode, Start, TestKind};
use latscope_net::rr::{RrConfig, StopAfter};
use latscope_net::session::open_session;

use crate::evidence::{ClientHost, RequestConnects, Responses, SLICE, SLOW_FLOOR_NS};
use crate::plan::Plan;
use latscope_core::units::unix_ms;

/// Where a URL's requests go: the URL (its `Host` and TLS name), how its certificate is
/// checked, and the address to connect to — the plan's, resolved once at the start, so a
/// measurement of the server neither waits for the resolver again nor reaches another of the
/// name's addresses than every other step measured (a resolver that never answers AAAA made
/// each HTTP run wait its 2 s timeout, and the load step's one-second rungs measured nothing).
/// `None`: the engine resolves the URL's name itself (the steps that time the name's lookup).
#[derive(Clone, Copy, Debug)]
pub struct Reach<'a> {
    pub tls: &'a TlsOptions,
    pub url: &'a str,
    pub addr: Option<std::net::SocketAddr>,
}

impl<'a> Reach<'a> {
    /// The plan's URL at the plan's address (`None` for a latscope target).
    pub fn of(p: &'a Plan) -> Option<Reach<'a>> {
        Some(Reach {
            tls: &p.tls,
            url: p.url.as_deref()?,
            addr: Some(p.addr),
        })
    }

    /// `url` resolved by the engine, as a client that looks its name up would.
    pub fn resolved(tls: &'a TlsOptions, url: &'a str) -> Reach<'a> {
        Reach {
            tls,
            url,
            addr: None,
        }
    }
}

pub fn meta(cmd: &str) -> Meta {
    Meta::new(cmd, env!("CARGO_PKG_VERSION"), unix_ms())
}

fn rr_cfg(p: &Plan, connections: u32, quickack: bool, duration: Duration) -> RrConfig {
    let mut cfg = RrConfig::probe(p.target.clone(), Some(p.addr), Transport::Tcp);
    cfg.sizes = vec![(p.request_bytes, p.response_bytes)];
    cfg.connections = connections;
    cfg.stop_after = StopAfter::Duration(duration);
    cfg.warmup = Duration::from_millis(300);
    cfg.client.quickack = quickack;
    cfg.auth = p.auth.clone();
    cfg
}

/// This host's own stack (kernel timestamps on latscope's own packets: send → qdisc → driver,
/// driver → recv), after the requests were timed and apart from them: a latscope connection of
/// its own for a latscope target, requests as the HTTP engine makes them on a connection of
/// their own for a URL; bounded to about a second ([`latscope_net::hoststack::BUDGET`],
/// [`latscope_http::hoststack::BUDGET`]). `None` when it fails (no timestamps: the rules then
/// fall back on the connects against the SYN ping).
pub fn client_host(p: &Plan) -> Option<ClientHost> {
    let t = match Reach::of(p) {
        Some(r) => {
            let o = http_options(r, 1, false, latscope_http::hoststack::BUDGET);
            latscope_http::hoststack::measure(&o).ok()?
        }
        None => {
            let cfg = rr_cfg(p, 1, false, latscope_net::hoststack::BUDGET);
            latscope_net::hoststack::measure(&cfg)?.ok()?
        }
    };
    client_host_of(&t)
}

/// The medians of a host-stack timing, with the fewest samples any stage stands on (`None`
/// when a stage has none).
fn client_host_of(t: &HostStackTimes) -> Option<ClientHost> {
    let p50 = |s: Option<StageTimes>| s.map(|s| s.p50_ns);
    let send_to_qdisc_ns = p50(t.send_to_sched);
    let send_to_driver_ns = match (send_to_qdisc_ns, p50(t.sched_to_driver)) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    };
    let samples = [t.send_to_sched, t.sched_to_driver, t.driver_to_recv]
        .iter()
        .flatten()
        .map(|s| s.samples)
        .min()
        .unwrap_or(0);
    (samples > 0).then_some(ClientHost {
        send_to_driver_ns,
        send_to_qdisc_ns,
        driver_to_recv_ns: p50(t.driver_to_recv),
        samples,
    })
}

/// Latency of latscope request/responses with `connections` connections for `duration`,
/// cutting the requests into [`SLICE`]s when `slices` is given.
fn rr_run(
    p: &Plan,
    connections: u32,
    quickack: bool,
    duration: Duration,
    stop: &AtomicBool,
    mut slices: Option<&mut Slices>,
) -> Result<Summary, String> {
    let mut cfg = rr_cfg(p, connections, quickack, duration);
    let want = slices.is_some();
    if want {
        cfg.interval = SLICE;
    }
    let mut on_interval = |ev: &latscope_core::model::IntervalEvent, h: &LatencyHistogram| {
        if let Some(s) = slices.as_deref_mut() {
            s.push(ev.start_ns, ev.end_ns, h);
        }
    };
    let r = latscope_net::rr::run(&cfg, meta("rr"), stop, &mut on_interval, want)
        .map_err(|e| e.to_string())?;
    let s = r.results.into_iter().next().ok_or("no result")?;
    if let Some(e) = s.errors.first() {
        return Err(e.clone());
    }
    Ok(s.rtt)
}

/// Latency of GET `url` with `connections` connections for `duration` (HTTP load engine).
pub fn http_latency(
    r: Reach<'_>,
    connections: u32,
    quickack: bool,
    duration: Duration,
    stop: &AtomicBool,
) -> Result<Summary, String> {
    http_run(r, connections, quickack, duration, stop, None).map(|r| r.latency)
}

/// A sized request run: the latency, what each exchange weighed, and (HTTP) the responses by
/// status code.
#[derive(Clone, Debug)]
pub struct SizedRun {
    pub latency: Summary,
    pub sizes: Option<Sizes>,
    pub responses: Option<Responses>,
    /// The connections the requests opened (HTTP).
    pub connects: Option<RequestConnects>,
}

pub use crate::evidence::Sizes;

/// [`http_latency`], with the average sizes of the requests and responses it carried, cutting
/// the requests into [`SLICE`]s when `slices` is given.
fn http_run(
    at: Reach<'_>,
    connections: u32,
    quickack: bool,
    duration: Duration,
    stop: &AtomicBool,
    mut slices: Option<&mut Slices>,
) -> Result<SizedRun, String> {
    let o = http_options(at, connections, quickack, duration);
    let mut cfg = latscope_http::Config::new(&o).map_err(|e| e.to_string())?;
    if slices.is_some() {
        cfg.interval_ns = SLICE.as_nanos() as u64;
    }
    let mut on_interval = |iv: &latscope_http::Interval, h: &LatencyHistogram| {
        if let Some(s) = slices.as_deref_mut() {
            s.push(iv.start_ns, iv.end_ns, h);
        }
    };
    let mut r = latscope_http::run(&cfg, stop, &mut on_interval).map_err(|e| e.to_string())?;
    // Requests slower than the measurement window (a large response through a small window)
    // complete none within it, and none failed: count a few instead of timing a window, within
    // the step's budget (its stop flag).
    if r.stats.requests == 0 && r.stats.errors.total() == 0 && !r.interrupted {
        let mut o = http_options(at, connections, quickack, duration);
        o.duration = None;
        // One a connection, at once: over a long path each can take seconds.
        o.requests = Some(u64::from(connections.max(1)));
        o.warmup = Duration::ZERO;
        if let Ok(cfg) = latscope_http::Config::new(&o)
            && let Ok(again) = latscope_http::run(&cfg, stop, &mut |_, _| {})
            && again.stats.requests > 0
        {
            r = again;
        }
    }
    if r.stats.requests == 0 {
        return Err(r
            .stats
            .error_samples
            .first()
            .cloned()
            .unwrap_or_else(|| "no request succeeded".into()));
    }
    // The byte counts cover the measured requests (not the warm-up's).
    let sizes = Sizes::average(r.stats.bytes_written, r.stats.bytes_read, r.stats.requests);
    let mut responses = Responses::default();
    for (code, &n) in r.stats.status.iter().enumerate() {
        if let Ok(code) = u16::try_from(code) {
            responses.add(code, n);
        }
    }
    Ok(SizedRun {
        latency: r.stats.latency.summary(),
        sizes,
        responses: Some(responses),
        connects: Some(RequestConnects {
            connections: r.stats.connections_opened,
            requests: r.stats.requests,
            connect: r.stats.connect.summary(),
            pending: r.stats.connects_pending,
            pending_ns: r.stats.connect_pending_ns,
        }),
    })
}

/// The HTTP engine's options for GET `url` with `connections` connections, its certificate
/// checked as `tls` says (`--insecure`, `--cacert`).
pub fn http_options(
    at: Reach<'_>,
    connections: u32,
    quickack: bool,
    duration: Duration,
) -> latscope_http::Options {
    let tls = at.tls;
    latscope_http::Options {
        url: at.url.into(),
        method: "GET".into(),
        headers: vec![],
        body: vec![],
        connections,
        threads: connections.clamp(1, 2),
        duration: Some(duration),
        requests: None,
        rate_per_sec: None,
        warmup: Duration::from_millis(300),
        timeout: Duration::from_secs(5),
        insecure: tls.insecure,
        ca_files: tls.ca_files.clone(),
        connect_to: at.addr.map(|a| a.to_string()),
        host: None,
        http2: false,
        streams: 1,
        quickack,
    }
}

/// One request's latency measurement for this target: rr for latscope, HTTP for a URL; with
/// `quickack`, the client re-arms TCP_QUICKACK after every read.
pub fn app_latency(
    p: &Plan,
    connections: u32,
    quickack: bool,
    duration: Duration,
    stop: &AtomicBool,
) -> Result<Summary, String> {
    match Reach::of(p) {
        Some(r) => http_latency(r, connections, quickack, duration, stop),
        None => rr_run(p, connections, quickack, duration, stop, None),
    }
}

/// [`app_latency`] with the connections a URL's requests opened (a latscope server's rr test
/// keeps its connections: `None`).
pub fn app_run(
    p: &Plan,
    connections: u32,
    duration: Duration,
    stop: &AtomicBool,
) -> Result<SizedRun, String> {
    match Reach::of(p) {
        Some(r) => http_run(r, connections, false, duration, stop, None),
        None => rr_run(p, connections, false, duration, stop, None).map(|latency| SizedRun {
            latency,
            sizes: None,
            responses: None,
            connects: None,
        }),
    }
}

/// [`app_latency`] for one connection, with what each exchange weighed (the plan's sizes for a
/// latscope server, the measured average for a URL), its requests cut into `slices`.
pub fn app_latency_sized(
    p: &Plan,
    duration: Duration,
    stop: &AtomicBool,
    slices: &mut Slices,
) -> Result<SizedRun, String> {
    match Reach::of(p) {
        Some(r) => http_run(r, 1, false, duration, stop, Some(slices)),
        None => rr_run(p, 1, false, duration, stop, Some(slices)).map(|latency| SizedRun {
            latency,
            sizes: Some(Sizes {
                request: u64::from(p.request_bytes),
                response: u64::from(p.response_bytes),
            }),
            responses: None,
            connects: None,
        }),
    }
}

/// A request step cut into time slices as the engine reports them, placed on this process's
/// clock: each slice's requests and their slow values.
#[derive(Debug, Default)]
pub struct Slices {
    /// When the engine's timeline starts: the earliest estimate of (report time − slice end),
    /// since an engine reports a slice at its end or a little after.
    epoch: Option<Instant>,
    slices: Vec<EngineSlice>,
}

/// One slice as the engine reports it.
#[derive(Debug)]
struct EngineSlice {
    /// Start and end on the engine's timeline, ns.
    start_ns: u64,
    end_ns: u64,
    requests: u64,
    /// Its requests of at least [`SLOW_FLOOR_NS`]: (value ns, requests).
    slow: Vec<(u64, u64)>,
}

impl Slices {
    /// Record one slice the engine reports now.
    fn push(&mut self, start_ns: u64, end_ns: u64, h: &LatencyHistogram) {
        if let Some(at) = Instant::now().checked_sub(Duration::from_nanos(end_ns)) {
            self.epoch = Some(self.epoch.map_or(at, |e| e.min(at)));
        }
        let slow = h.recorded().filter(|&(v, _)| v >= SLOW_FLOOR_NS).collect();
        self.slices.push(EngineSlice {
            start_ns,
            end_ns,
            requests: h.count(),
            slow,
        });
    }

    /// Each slice with where it lies on this process's clock.
    pub fn placed(&self) -> impl Iterator<Item = (Instant, Instant, u64, &[(u64, u64)])> + '_ {
        self.slices.iter().filter_map(|s| {
            let e = self.epoch?;
            Some((
                e + Duration::from_nanos(s.start_ns),
                e + Duration::from_nanos(s.end_ns),
                s.requests,
                s.slow.as_slice(),
            ))
        })
    }
}

/// Is a latscope server listening there?
pub fn is_latscope(p: &Plan) -> bool {
    let start = Start {
        kind: TestKind::Rr,
        request_bytes: 1,
        response_bytes: 1,
        duration_ms: 1000,
        server: ServerBehaviour::default(),
        stream: None,
        join: None,
    };
    // A latscope server that refuses us for want of the right key is still one: the steps
    // that follow then fail with its "authentication required" message.
    match open_session(
        &p.target,
        Some(p.addr),
        Duration::from_secs(2),
        p.auth.as_ref(),
        &start,
        &[],
    ) {
        Ok(_) => true,
        Err(NetError::ServerRefused { code, .. }) => code == RefusalCode::Auth,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Request;

    /// The steps that measure the server connect to the address the plan resolved once; the
    /// URL (its Host header, its TLS name) is unchanged, and the steps that time the name's
    /// lookup still resolve it.
    #[test]
    fn a_urls_requests_go_to_the_plans_address() {
        let p = Plan::new(&Request::new("http://localhost:8080/x")).expect("a URL");
        let o = http_options(Reach::of(&p).expect("a URL target"), 2, false, SLICE);
        assert_eq!(o.connect_to, Some(p.addr.to_string()));
        assert_eq!(o.url, "http://localhost:8080/x");
        assert_eq!(o.host, None);
        let o = http_options(
            Reach::resolved(&p.tls, "http://localhost:8080/x"),
            1,
            false,
            SLICE,
        );
        assert_eq!(o.connect_to, None);
        let rr = Plan::new(&Request::new("127.0.0.1")).expect("a host");
        assert!(Reach::of(&rr).is_none());
    }
}
