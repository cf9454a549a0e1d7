//! `latscope connect`: TCP connection set-up latency against any TCP server (LMbench
//! lat_connect), and `--crr`: connect + request + response + close against latscope serve
//! (netperf TCP_CRR). Refused and timed-out attempts are counted, never fatal.

use std::collections::BTreeSet;
use std::io::{self, Read};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use latscope_core::LatencyHistogram;
use latscope_core::model::Meta;
use latscope_core::model::connect::{ConnectMode, ConnectReport};
use latscope_core::model::rr::ServerBehaviour;

use crate::NetError;
use crate::auth::AuthKey;
use crate::proto::{Start, TestKind};
use crate::rr::StopAfter;
use crate::session::{handshake, open_session};
use crate::sock::{Conn, Target};

/// Distinct error messages kept for the report.
const MAX_ERROR_SAMPLES: usize = 5;

#[derive(Clone, Debug)]
/// Configuration of a connection-time measurement.
pub struct ConnectConfig {
    /// Where to connect.
    pub target: Target,
    /// The resolved address.
    pub addr: SocketAddr,
    /// Plain connects, or connect + request/response + close (TCP_CRR).
    pub mode: ConnectMode,
    /// Stop after a count or a duration.
    pub stop_after: StopAfter,
    /// Connection attempts in flight at once.
    pub parallel: u32,
    /// How long one attempt may take before it counts as timed out.
    pub timeout: Duration,
    /// Pause between attempts of one worker.
    pub interval: Duration,
    /// `--crr` message sizes.
    pub request_bytes: u32,
    /// CRR: response size asked of the server, bytes.
    pub response_bytes: u32,
    /// CRR: behaviour asked of the server.
    pub server: ServerBehaviour,
    /// The key proving this client may use the server (`--auth-file`); None: none sent.
    pub auth: Option<AuthKey>,
}

#[derive(Default)]
struct Tally {
    connect: LatencyHistogram,
    transaction: LatencyHistogram,
    attempts: u64,
    refused: u64,
    timed_out: u64,
    other: u64,
    last_done: Option<Instant>,
}

enum Outcome {
    Ok,
    Refused,
    TimedOut,
    /// Ctrl-C or the caller's budget ended the attempt before it was answered: it counts for
    /// nothing.
    Stopped,
    Other(String),
}

fn classify(e: &io::Error) -> Outcome {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => Outcome::Refused,
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Outcome::TimedOut,
        _ => Outcome::Other(e.to_string()),
    }
}

fn one_attempt(
    cfg: &ConnectConfig,
    start: &Start,
    request: &[u8],
    resp: &mut [u8],
    t: &mut Tally,
    stop: &AtomicBool,
) -> Outcome {
    let t0 = Instant::now();
    // A connect left hanging (a SYN dropped, a full listen queue) would otherwise hold Ctrl-C or
    // diagnose's step budget for the whole timeout.
    let stream = match latscope_sys::happy::connect_until(cfg.addr, cfg.timeout, stop) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::Interrupted => return Outcome::Stopped,
        Err(e) => return classify(&e),
    };
    let t_conn = Instant::now();
    t.connect.record((t_conn - t0).as_nanos() as u64);
    if cfg.mode == ConnectMode::Connect {
        drop(stream);
        return Outcome::Ok;
    }
    let mut session = match handshake(
        Conn::Tcp(stream),
        &cfg.target,
        cfg.auth.as_ref(),
        start,
        request,
    ) {
        Ok(s) => s,
        Err(e) => return Outcome::Other(e.to_string()),
    };
    let _ = session.conn.set_read_timeout(Some(cfg.timeout));
    if let Err(e) = session.conn.read_exact(resp) {
        return match classify(&e) {
            Outcome::TimedOut => Outcome::TimedOut,
            _ => Outcome::Other(format!("reading the response: {e}")),
        };
    }
    drop(session);
    t.transaction.record(t0.elapsed().as_nanos() as u64);
    Outcome::Ok
}

/// One thread's attempts until its quota, the deadline or Ctrl-C.
fn attempts(
    cfg: &ConnectConfig,
    start: &Start,
    request: &[u8],
    samples: &Mutex<BTreeSet<String>>,
    (quota, end): (Option<u64>, Option<Instant>),
    stop: &AtomicBool,
) -> Tally {
    let mut t = Tally::default();
    let mut resp = vec![0u8; cfg.response_bytes as usize];
    loop {
        if stop.load(Ordering::Relaxed)
            || quota.is_some_and(|q| t.attempts >= q)
            || end.is_some_and(|e| Instant::now() >= e)
        {
            break;
        }
        t.attempts += 1;
        match one_attempt(cfg, start, request, &mut resp, &mut t, stop) {
            Outcome::Stopped => {
                t.attempts -= 1;
                break;
            }
            Outcome::Ok => t.last_done = Some(Instant::now()),
            Outcome::Refused => t.refused += 1,
            Outcome::TimedOut => t.timed_out += 1,
            Outcome::Other(msg) => {
                t.other += 1;
                if let Ok(mut s) = samples.lock()
                    && s.len() < MAX_ERROR_SAMPLES
                {
                    s.insert(msg);
                }
            }
        }
        if !cfg.interval.is_zero() {
            thread::sleep(cfg.interval);
        }
    }
    t
}

impl Tally {
    /// Every thread's tally added up.
    fn sum(tallies: &[Tally]) -> Tally {
        let mut total = Tally::default();
        for t in tallies {
            total.connect.merge(&t.connect);
            total.transaction.merge(&t.transaction);
            total.attempts += t.attempts;
            total.refused += t.refused;
            total.timed_out += t.timed_out;
            total.other += t.other;
            total.last_done = total.last_done.max(t.last_done);
        }
        total
    }
}

/// Run the measurement.
pub fn run(cfg: &ConnectConfig, meta: Meta, stop: &AtomicBool) -> Result<ConnectReport, NetError> {
    if cfg.parallel == 0 {
        return Err(NetError::Invalid("--parallel must be at least 1".into()));
    }
    let start = Start {
        kind: TestKind::Crr,
        request_bytes: cfg.request_bytes,
        response_bytes: cfg.response_bytes,
        duration_ms: cfg.timeout.as_millis() as u64 + 1000,
        server: cfg.server.clone(),
        stream: None,
        join: None,
    };
    if cfg.mode == ConnectMode::Crr {
        // Fail early and clearly if the port is not a latscope server (or refuses the test);
        // the check's result also tells us the behaviour the server applies.
        open_session(
            &cfg.target,
            Some(cfg.addr),
            cfg.timeout,
            cfg.auth.as_ref(),
            &start,
            &[],
        )?;
    }
    let samples: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let request = vec![b'q'; cfg.request_bytes as usize];
    let n = cfg.parallel;
    let t_start = Instant::now();
    let end = match cfg.stop_after {
        StopAfter::Duration(d) => Some(t_start + d),
        StopAfter::Count(_) => None,
    };
    let tallies: Vec<Tally> = thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (start, request, samples) = (&start, &request, &samples);
                let quota = match cfg.stop_after {
                    StopAfter::Count(total) => {
                        Some(total / u64::from(n) + u64::from(u64::from(i) < total % u64::from(n)))
                    }
                    StopAfter::Duration(_) => None,
                };
                scope.spawn(move || attempts(cfg, start, request, samples, (quota, end), stop))
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let total = Tally::sum(&tallies);
    let elapsed = match (cfg.stop_after, stop.load(Ordering::Relaxed)) {
        (StopAfter::Duration(d), false) => d,
        _ => total
            .last_done
            .map(|t| t - t_start)
            .unwrap_or_else(|| t_start.elapsed()),
    };
    let succeeded = match cfg.mode {
        ConnectMode::Connect => total.connect.count(),
        ConnectMode::Crr => total.transaction.count(),
    };
    let mut error_samples: Vec<String> = samples
        .into_inner()
        .map(|s| s.into_iter().collect())
        .unwrap_or_default();
    if total.refused > 0 {
        error_samples.insert(
            0,
            format!(
                "{} refused: nothing listens on {}",
                total.refused, cfg.target
            ),
        );
    }
    if total.timed_out > 0 {
        error_samples.insert(
            0,
            format!(
                "{} timed out: SYN or response dropped (filtered port or overloaded server)",
                total.timed_out
            ),
        );
    }
    Ok(ConnectReport {
        meta,
        target: cfg.target.to_string(),
        address_choice: None,
        mode: cfg.mode,
        parallel: n,
        attempts: total.attempts,
        succeeded,
        refused: total.refused,
        timed_out: total.timed_out,
        other_errors: total.other,
        elapsed_ns: elapsed.as_nanos() as u64,
        rate_per_sec: if elapsed.is_zero() {
            0.0
        } else {
            succeeded as f64 / elapsed.as_secs_f64()
        },
        connect: total.connect.summary(),
        transaction: (cfg.mode == ConnectMode::Crr).then(|| total.transaction.summary()),
        connect_bins: Some(total.connect.log_bins()),
        transaction_bins: (cfg.mode == ConnectMode::Crr).then(|| total.transaction.log_bins()),
        error_samples,
        interrupted: stop.load(Ordering::Relaxed),
    })
}
