//! latscope's HTTP load engine (`latscope http`).
//!
//! One thread per core, each running an edge-triggered epoll loop over its share of the
//! connections ([`worker`]); requests are serialised once ([`request`]), responses parsed in
//! place without allocation ([`parse`]); HTTPS through rustls with the `ring` provider
//! ([`tls`]). Closed loop by default; open loop at a fixed rate with coordinated-omission
//! correction. Each thread keeps HDR histograms and counters only ([`stats`]), so memory does
//! not grow with the number of requests; the threads' results are merged by addition.
//!
//! The engine never prints: [`run`] returns a [`RunResult`] and streams one [`Interval`] per
//! second to a callback (the live view and `--json-lines` are made from those).

#![warn(missing_docs)]

mod cert;
pub mod error;
pub mod fuzzing;
pub mod handshake;
pub mod head;
pub mod hoststack;
pub mod http2;
pub mod not_http;
pub mod parse;
pub mod phases;
pub mod request;
pub mod reuse;
pub mod stats;
mod sys;
pub mod tls;
mod worker;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::Duration;

use latscope_core::model::address::AddressChoice;
use latscope_core::{LatencyHistogram, Summary};
use latscope_sys::happy::{self, RaceConfig};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;

pub use error::{HttpError, Phase};
pub use phases::{Phases, request_phases};
pub use request::{Scheme, Url};
pub use stats::{ErrorKind, Stats};

/// What the user asked for, before anything is resolved or serialised.
#[derive(Debug, Clone)]
pub struct Options {
    /// The target, `http[s]://host[:port]/path`.
    pub url: String,
    /// HTTP method (upper-case token).
    pub method: String,
    /// `Name: value` lines.
    pub headers: Vec<String>,
    /// Request body (sent with its `Content-Length`).
    pub body: Vec<u8>,
    /// Concurrent connections.
    pub connections: u32,
    /// Worker threads (never more than connections).
    pub threads: u32,
    /// Measured duration (after the warm-up); `None` with `requests` set = until done.
    pub duration: Option<Duration>,
    /// Exact number of measured requests.
    pub requests: Option<u64>,
    /// Open loop at this total rate (requests per second).
    pub rate_per_sec: Option<f64>,
    /// Run this long before measuring; excluded from every figure.
    pub warmup: Duration,
    /// Give up on a request or connection attempt after this long.
    pub timeout: Duration,
    /// HTTPS: do not verify the server's certificate.
    pub insecure: bool,
    /// HTTPS: also trust the CA certificates in these PEM files.
    pub ca_files: Vec<PathBuf>,
    /// Connect here (`HOST:PORT`) instead of the URL's host and port.
    pub connect_to: Option<String>,
    /// `Host` header (and TLS server name) instead of the URL's host.
    pub host: Option<String>,
    /// HTTP/2: h2 over TLS (ALPN), h2c with prior knowledge over plain TCP.
    pub http2: bool,
    /// HTTP/2: concurrent streams per connection.
    pub streams: u32,
    /// Re-arm TCP_QUICKACK after every read, so the client never delays an ACK (HTTP/1.1 only).
    /// diagnose's quick-ack A/B step: a server whose Nagle algorithm holds the rest of a
    /// response until the client's delayed ACK (~40 ms) answers at once with this on.
    pub quickack: bool,
}

impl Options {
    /// `GET url` with the command line's defaults: 50 connections, one thread per core, 10 s,
    /// closed loop, no warm-up, 2 s timeout, certificates verified, HTTP/1.1.
    pub fn new(url: impl Into<String>) -> Options {
        Options {
            url: url.into(),
            method: "GET".into(),
            headers: vec![],
            body: vec![],
            connections: 50,
            threads: default_threads(),
            duration: None,
            requests: None,
            rate_per_sec: None,
            warmup: Duration::ZERO,
            timeout: Duration::from_secs(2),
            insecure: false,
            ca_files: vec![],
            connect_to: None,
            host: None,
            http2: false,
            streams: 1,
            quickack: false,
        }
    }
}

/// A run ready to start: target resolved, request serialised, TLS configured.
pub struct Config {
    /// The URL as the user gave it.
    pub url_text: String,
    /// The parsed URL.
    pub url: Url,
    /// HTTP method.
    pub method: String,
    /// The first resolved address of the target.
    pub addr: SocketAddr,
    /// The host connected to (the URL's, or --connect-to's), as given.
    pub host: String,
    /// Every resolved address in RFC 8305 order (families interleaved, IPv6 first); connections
    /// race them as Happy Eyeballs v2 does.
    pub addrs: Vec<SocketAddr>,
    /// How long resolving the host took (`getaddrinfo`), ns.
    pub resolve_ns: u64,
    /// The serialised HTTP/1.1 request, sent as is on every request.
    pub request: Arc<[u8]>,
    /// The method is HEAD (responses have no body).
    pub head_request: bool,
    /// Concurrent connections.
    pub connections: u32,
    /// Worker threads (at most `connections`).
    pub threads: u32,
    /// Measured duration, ns; `None` = until `requests` are done.
    pub duration_ns: Option<u64>,
    /// Exact number of measured requests (`-n`).
    pub requests: Option<u64>,
    /// Open loop at this total rate; `None` = closed loop.
    pub rate_per_sec: Option<f64>,
    /// Warm-up before measuring, ns.
    pub warmup_ns: u64,
    /// Per-request and per-connect timeout, ns.
    pub timeout_ns: u64,
    /// Length of one timeline interval, ns (one second).
    pub interval_ns: u64,
    /// HTTPS: the client configuration and the server name to verify; `None` for `http://`.
    pub tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    /// HTTPS: the server's certificate is not verified (`--insecure`).
    pub insecure: bool,
    /// HTTP/2 request parts (`--http2`); `None` for HTTP/1.1.
    pub h2: Option<http2::H2Parts>,
    /// HTTP/2: concurrent streams per connection.
    pub h2_streams: u32,
    /// Re-arm TCP_QUICKACK after every read ([`Options::quickack`]).
    pub quickack: bool,
}

impl Config {
    /// Check and prepare `o`: parse the URL and headers, resolve the target, build the request
    /// bytes and the TLS configuration.
    pub fn new(o: &Options) -> Result<Config, HttpError> {
        let url = Url::parse(&o.url)?;
        request::check_method(&o.method)?;
        let headers = o
            .headers
            .iter()
            .map(|h| request::parse_header(h))
            .collect::<Result<Vec<_>, _>>()?;
        check_limits(o)?;
        let (host, port) = target_host_port(o, &url)?;
        let (addrs, resolve_ns) = resolve(&host, port)?;
        let addr = addrs[0];
        let request = request::build_request(&o.method, &url, o.host.as_deref(), &headers, &o.body);
        let tls = tls_for(o, &url)?;
        let h2 = if o.http2 {
            Some(http2::H2Parts::new(
                &o.method,
                &url,
                o.host.as_deref(),
                &headers,
                &o.body,
            )?)
        } else {
            None
        };
        let duration = match (o.duration, o.requests) {
            (None, None) => Some(Duration::from_secs(10)),
            (d, _) => d,
        };
        Ok(Config {
            url_text: o.url.clone(),
            method: o.method.clone(),
            addr,
            host,
            addrs,
            resolve_ns,
            request: request.into(),
            head_request: o.method == "HEAD",
            connections: o.connections,
            threads: o.threads.min(o.connections),
            duration_ns: duration.map(|d| d.as_nanos() as u64),
            requests: o.requests,
            rate_per_sec: o.rate_per_sec,
            warmup_ns: o.warmup.as_nanos() as u64,
            timeout_ns: o.timeout.as_nanos() as u64,
            interval_ns: 1_000_000_000,
            tls,
            insecure: o.insecure,
            h2,
            h2_streams: o.streams,
            quickack: o.quickack,
            url,
        })
    }
}

impl Config {
    /// The protocol offered in ALPN: `h2` with `--http2`, else `http/1.1`.
    pub fn alpn(&self) -> &'static str {
        if self.h2.is_some() { "h2" } else { "http/1.1" }
    }
}

/// The figures in `o` that must be positive.
fn check_limits(o: &Options) -> Result<(), HttpError> {
    if o.connections == 0 {
        return Err(HttpError::Config("--connections must be at least 1".into()));
    }
    if o.threads == 0 {
        return Err(HttpError::Config("--threads must be at least 1".into()));
    }
    if o.requests == Some(0) {
        return Err(HttpError::Config("-n must be at least 1".into()));
    }
    if o.duration.is_some_and(|d| d.is_zero()) {
        return Err(HttpError::Config("--duration must be longer than 0".into()));
    }
    if o.timeout.is_zero() {
        return Err(HttpError::Config("--timeout must be longer than 0".into()));
    }
    if let Some(r) = o.rate_per_sec
        && !(r.is_finite() && r > 0.0)
    {
        return Err(HttpError::Config(format!(
            "--rate {r}: must be a positive number of requests per second"
        )));
    }
    if o.http2 && o.streams == 0 {
        return Err(HttpError::Config("--streams must be at least 1".into()));
    }
    if o.http2 && o.quickack {
        return Err(HttpError::Config(
            "--quickack works with HTTP/1.1 only, not with --http2".into(),
        ));
    }
    Ok(())
}

/// Where to connect: `--connect-to HOST:PORT`, else the URL's host and port.
fn target_host_port(o: &Options, url: &Url) -> Result<(String, u16), HttpError> {
    Ok(match &o.connect_to {
        Some(ct) => {
            let (h, p) = ct
                .rsplit_once(':')
                .and_then(|(h, p)| {
                    Some((
                        h.trim_start_matches('[').trim_end_matches(']'),
                        p.parse::<u16>().ok()?,
                    ))
                })
                .ok_or_else(|| {
                    HttpError::Config(format!("--connect-to '{ct}': expected HOST:PORT"))
                })?;
            (h.to_string(), p)
        }
        None => (url.host.clone(), url.port),
    })
}

/// Every address of `host:port` (at least one) in RFC 8305 order, and how long resolving took,
/// ns.
fn resolve(host: &str, port: u16) -> Result<(Vec<SocketAddr>, u64), HttpError> {
    latscope_sys::happy::resolve(host, port, latscope_sys::Family::Any).map_err(|source| {
        HttpError::Resolve {
            host: host.to_string(),
            source,
        }
    })
}

/// The TLS client configuration and server name for an https URL.
fn tls_for(
    o: &Options,
    url: &Url,
) -> Result<Option<(Arc<ClientConfig>, ServerName<'static>)>, HttpError> {
    if url.scheme != Scheme::Https {
        return Ok(None);
    }
    let name_host = o
        .host
        .as_deref()
        .map(|h| h.split(':').next().unwrap_or(h))
        .unwrap_or(&url.host);
    let alpn: &[u8] = if o.http2 { b"h2" } else { b"http/1.1" };
    Ok(Some((
        tls::client_config(o.insecure, &o.ca_files, alpn)?,
        tls::server_name(name_host)?,
    )))
}

/// One second (the last one may be shorter) of the measured run, all threads merged.
#[derive(Debug, Clone)]
pub struct Interval {
    /// Position in the timeline, from 0.
    pub index: u64,
    /// Since the end of the warm-up, ns.
    pub start_ns: u64,
    /// End, since the end of the warm-up, ns.
    pub end_ns: u64,
    /// Responses completed in the interval.
    pub requests: u64,
    /// Failed requests and connection attempts in the interval.
    pub errors: u64,
    /// Bytes read in the interval.
    pub bytes: u64,
    /// Latency of the responses completed in the interval (from the intended send time in
    /// open loop).
    pub latency: Summary,
    /// Open loop only: the same responses' latency from their actual send time.
    pub raw_latency: Option<Summary>,
}

/// A worker's interval report.
pub(crate) struct IntervalMsg {
    pub thread: usize,
    pub index: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub requests: u64,
    pub errors: u64,
    pub bytes: u64,
    pub hist: LatencyHistogram,
    pub raw_hist: Option<LatencyHistogram>,
    pub last: bool,
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The address the connections went to.
    pub addr: SocketAddr,
    /// How that address was chosen among the name's (RFC 8305 race).
    pub address_choice: AddressChoice,
    /// Every thread's figures, merged.
    pub stats: Stats,
    /// Measured time: end of warm-up → end of the run (or the last response with `-n`).
    pub elapsed_ns: u64,
    /// The per-second timeline.
    pub intervals: Vec<Interval>,
    /// Stopped early by the stop flag.
    pub interrupted: bool,
}

/// Merges the workers' per-second reports and hands each second, complete, to the callback.
struct IntervalMerger {
    pending: BTreeMap<u64, (IntervalMsg, usize)>,
    next_expected: Vec<u64>,
    finished: Vec<bool>,
    out: Vec<Interval>,
}

impl IntervalMerger {
    fn new(threads: usize) -> Self {
        IntervalMerger {
            pending: BTreeMap::new(),
            next_expected: vec![0; threads],
            finished: vec![false; threads],
            out: vec![],
        }
    }

    fn add(&mut self, m: IntervalMsg) {
        let t = m.thread;
        self.next_expected[t] = m.index + 1;
        if m.last {
            self.finished[t] = true;
        }
        match self.pending.get_mut(&m.index) {
            Some((agg, n)) => {
                agg.start_ns = agg.start_ns.min(m.start_ns);
                agg.end_ns = agg.end_ns.max(m.end_ns);
                agg.requests += m.requests;
                agg.errors += m.errors;
                agg.bytes += m.bytes;
                agg.hist.merge(&m.hist);
                if let (Some(a), Some(b)) = (agg.raw_hist.as_mut(), m.raw_hist.as_ref()) {
                    a.merge(b);
                }
                *n += 1;
            }
            None => {
                self.pending.insert(m.index, (m, 1));
            }
        }
    }

    /// Emit every interval that no thread can add to any more (all of them with `all`).
    fn emit(&mut self, all: bool, on_interval: &mut dyn FnMut(&Interval, &LatencyHistogram)) {
        while let Some((&k, _)) = self.pending.first_key_value() {
            let ready = all
                || self
                    .next_expected
                    .iter()
                    .zip(&self.finished)
                    .all(|(&n, &f)| n > k || f);
            if !ready {
                break;
            }
            let Some((_, (m, _))) = self.pending.pop_first() else {
                break;
            };
            if m.end_ns <= m.start_ns && m.requests == 0 && m.errors == 0 {
                continue; // an empty sliver at the very end
            }
            let iv = Interval {
                index: k,
                start_ns: m.start_ns,
                end_ns: m.end_ns,
                requests: m.requests,
                errors: m.errors,
                bytes: m.bytes,
                latency: m.hist.summary(),
                raw_latency: m.raw_hist.as_ref().map(LatencyHistogram::summary),
            };
            on_interval(&iv, &m.hist);
            self.out.push(iv);
        }
    }
}

/// Choose the address the run's connections go to: the addresses raced as RFC 8305 does
/// (`localhost` may resolve to ::1 first while the server listens on 127.0.0.1 only; a dead
/// AAAA costs 250 ms, not a timeout); a one-line error beats a report full of connect errors.
fn probe(cfg: &Config, timeout: Duration) -> Result<AddressChoice, HttpError> {
    let race = happy::race_choice(
        &cfg.host,
        &cfg.addrs,
        cfg.resolve_ns,
        RaceConfig::with_timeout(timeout.min(Duration::from_secs(5))),
    );
    if race.stream.is_some() {
        return Ok(race.choice);
    }
    let first = race.choice.attempts.first();
    Err(HttpError::Connect {
        addr: first.map_or_else(|| "(no address)".into(), |a| a.addr.to_string()),
        source: first.map_or_else(|| std::io::ErrorKind::NotFound.into(), happy::attempt_error),
    })
}

/// Run the load. `stop` ends it early (partial results, `interrupted`); `on_interval` gets each
/// second of the measured run as soon as every thread has reported it, with that second's merged
/// latency histogram (a live view accumulates them; nothing on the request path changes).
pub fn run(
    cfg: &Config,
    stop: &AtomicBool,
    on_interval: &mut dyn FnMut(&Interval, &LatencyHistogram),
) -> Result<RunResult, HttpError> {
    let address_choice = probe(cfg, Duration::from_nanos(cfg.timeout_ns))?;
    let addr = SocketAddr::new(address_choice.chosen, cfg.addr.port());
    let threads = cfg.threads.max(1) as usize;
    let mut ids: Vec<Vec<u32>> = vec![Vec::new(); threads];
    for g in 0..cfg.connections {
        ids[g as usize % threads].push(g);
    }
    // -n: split the exact count over the threads in proportion to their connections.
    let quotas: Vec<Option<u64>> = ids
        .iter()
        .map(|c| {
            cfg.requests
                .map(|n| n * c.len() as u64 / u64::from(cfg.connections))
        })
        .collect();
    let mut quotas = quotas;
    if let Some(n) = cfg.requests {
        let given: u64 = quotas.iter().flatten().sum();
        if let Some(Some(q)) = quotas.first_mut() {
            *q += n - given;
        }
    }
    let (tx, rx) = mpsc::channel::<IntervalMsg>();
    let run_start_ns = sys::monotonic_ns();
    let measure_start_ns = run_start_ns + cfg.warmup_ns;
    let mut merger = IntervalMerger::new(threads);
    let results = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(threads);
        for (t, conn_ids) in ids.iter().enumerate() {
            let tx = tx.clone();
            let quota = quotas[t];
            handles.push(
                std::thread::Builder::new()
                    .name(format!("latscope-http-{t}"))
                    .spawn_scoped(
                        s,
                        move || -> Result<worker::WorkerResult, std::io::Error> {
                            let share = worker::Share {
                                thread: t,
                                ids: conn_ids,
                                quota,
                            };
                            if cfg.h2.is_some() {
                                return http2::run_thread(cfg, addr, stop, tx, share, run_start_ns);
                            }
                            Ok(
                                worker::Worker::new(cfg, addr, stop, tx, share, run_start_ns)?
                                    .run(),
                            )
                        },
                    ),
            );
        }
        drop(tx);
        // The channel closes when every worker has finished.
        for m in rx.iter() {
            merger.add(m);
            merger.emit(false, on_interval);
        }
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("worker thread panicked"))),
                Err(e) => Err(e),
            })
            .collect::<Vec<_>>()
    });
    merger.emit(true, on_interval);
    let mut stats = Stats::default();
    let mut finished_ns = measure_start_ns;
    let mut not_http = None;
    let mut handshake = None;
    for r in results {
        let r = r.map_err(|source| HttpError::System {
            what: "worker thread",
            source,
        })?;
        stats.merge(&r.stats);
        finished_ns = finished_ns.max(r.finished_ns);
        not_http = not_http.or(r.not_http);
        handshake = handshake.or(r.handshake);
    }
    // A thread gives up only before any response; one that got answers on another thread
    // makes the run an HTTP server's, with its errors counted.
    if let Some(what) = not_http
        && stats.requests + stats.warmup_requests == 0
    {
        return Err(HttpError::NotHttp {
            addr: addr.to_string(),
            what,
        });
    }
    // The same for TLS: a thread gives up only before any handshake completed.
    if let Some(failure) = handshake
        && stats.tls_handshake.count() == 0
    {
        return Err(HttpError::Handshake {
            addr: addr.to_string(),
            failure,
        });
    }
    let interrupted = stop.load(std::sync::atomic::Ordering::Relaxed);
    Ok(RunResult {
        addr,
        address_choice,
        stats,
        elapsed_ns: finished_ns.saturating_sub(measure_start_ns),
        intervals: merger.out,
        interrupted,
    })
}

/// How many worker threads by default: one per core.
pub fn default_threads() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(url: &str) -> Options {
        Options {
            connections: 4,
            threads: 8,
            ..Options::new(url)
        }
    }

    /// A listener whose accept queue is full (backlog 0 holds one connection, never accepted):
    /// the run's connects wait for a resent SYN past its end, and are counted as waiting — the
    /// connect histogram, which holds completed connects only, never sees them.
    #[test]
    fn connects_still_waiting_at_the_end_are_counted() {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        sock.bind(&any.into()).expect("bind");
        sock.listen(0).expect("listen");
        let addr = sock.local_addr().unwrap().as_socket().unwrap();
        // The address probe's connect takes the queue's one place.
        let o = Options {
            connections: 2,
            threads: 1,
            duration: Some(Duration::from_millis(400)),
            timeout: Duration::from_secs(5),
            ..Options::new(format!("http://{addr}/"))
        };
        let cfg = Config::new(&o).unwrap();
        let stop = AtomicBool::new(false);
        let r = run(&cfg, &stop, &mut |_, _| {}).expect("runs");
        assert_eq!(r.stats.requests, 0);
        assert_eq!(r.stats.connections_opened, 0, "{:?}", r.stats.errors);
        assert_eq!(r.stats.connects_pending, 2);
        let each = r.stats.connect_pending_ns / 2;
        assert!(
            (300_000_000..=1_000_000_000).contains(&each),
            "each waited the run's 400 ms: {each} ns"
        );
    }

    #[test]
    fn config_checks_input() {
        let c = Config::new(&opts("http://127.0.0.1:1/x")).unwrap();
        assert_eq!(c.threads, 4, "never more threads than connections");
        assert_eq!(c.duration_ns, Some(10_000_000_000), "10 s by default");
        let mut o = opts("http://127.0.0.1:1/");
        o.connect_to = Some("127.0.0.2:99".into());
        assert_eq!(
            Config::new(&o).unwrap().addr,
            "127.0.0.2:99".parse().unwrap()
        );
        for bad in [
            Options {
                connections: 0,
                ..opts("http://127.0.0.1/")
            },
            Options {
                rate_per_sec: Some(0.0),
                ..opts("http://127.0.0.1/")
            },
            Options {
                method: "get".into(),
                ..opts("http://127.0.0.1/")
            },
            Options {
                headers: vec!["x".into()],
                ..opts("http://127.0.0.1/")
            },
            Options {
                connect_to: Some("nope".into()),
                ..opts("http://127.0.0.1/")
            },
            opts("gopher://127.0.0.1/"),
        ] {
            assert!(
                Config::new(&bad).is_err_and(|e| e.is_usage()),
                "{}",
                bad.url
            );
        }
    }

    #[test]
    fn merger_waits_for_every_thread() {
        let msg = |thread, index, requests, last| IntervalMsg {
            thread,
            index,
            start_ns: index * 1000,
            end_ns: index * 1000 + 1000,
            requests,
            errors: 0,
            bytes: 0,
            hist: LatencyHistogram::new(),
            raw_hist: Some({
                let mut h = LatencyHistogram::new();
                h.record(1000 * (thread as u64 + 1));
                h
            }),
            last,
        };
        let mut m = IntervalMerger::new(2);
        let mut seen = vec![];
        m.add(msg(0, 0, 5, false));
        m.emit(false, &mut |i, _| seen.push((i.index, i.requests)));
        assert!(seen.is_empty());
        m.add(msg(1, 0, 7, false));
        m.add(msg(1, 1, 1, true));
        let mut raw = None;
        m.emit(false, &mut |i, _| {
            seen.push((i.index, i.requests));
            raw = i.raw_latency.clone();
        });
        assert_eq!(seen, vec![(0, 12)]);
        // Open loop's raw latency is merged across threads like the corrected one.
        let raw = raw.unwrap();
        assert_eq!((raw.count, raw.min_ns, raw.max_ns), (2, 1000, 2000));
        m.add(msg(0, 1, 2, false));
        m.add(msg(0, 2, 3, true));
        m.emit(false, &mut |i, _| seen.push((i.index, i.requests)));
        assert_eq!(seen, vec![(0, 12), (1, 3), (2, 3)]);
    }
}
