//! One measurement of one target on its own thread: a jittered schedule, one probe per tick,
//! the SLO window when this measurement carries the target's SLO, and diagnose on breach.
//!
//! Schedule: the first probe waits a uniformly random part of the interval, every later wait
//! is `interval × (1 + jitter × (u − ½))` with `u` uniform in [0, 1) — so agents started at the
//! same time (a DaemonSet rollout) never probe in step, and the mean rate stays 1/interval.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::Rng;

use crate::config::{Measure, Slo, Target};
use crate::measure::Runner;
use crate::metrics::{Fam, Metrics, labels};
use crate::{Ask, Diagnosis, PeerEvidence, ServerAgent, Shared, log, stop_requested};

/// A running measurement thread.
pub(crate) struct Worker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    pub fn start(
        target: Target,
        m: Measure,
        jitter: f64,
        shared: Arc<Shared>,
    ) -> std::io::Result<Worker> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("ls-{}", m.kind.name()))
            .stack_size(256 * 1024)
            .spawn(move || run(target, m, jitter, shared, s))?;
        Ok(Worker {
            stop,
            thread: Some(thread),
        })
    }

    /// Ask the thread to stop (it wakes at once).
    pub fn signal_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }

    /// Stop and join (a probe in flight ends within its timeout).
    pub fn stop(mut self) {
        self.signal_stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The next wait: `interval × (1 + jitter × (u − ½))`.
pub(crate) fn jittered(interval: Duration, jitter: f64, u: f64) -> Duration {
    interval.mul_f64((1.0 + jitter * (u - 0.5)).max(0.01))
}

/// The samples of the last `window` and the quantile over them.
pub(crate) struct Window {
    samples: VecDeque<(Instant, u64)>,
    window: Duration,
}

/// At most this many samples are kept (a 1 ms interval over a 1 h window would hold 3.6 M).
const MAX_SAMPLES: usize = 100_000;

impl Window {
    pub fn new(window: Duration) -> Window {
        Window {
            samples: VecDeque::new(),
            window,
        }
    }

    pub fn push(&mut self, now: Instant, ns: u64) {
        while self
            .samples
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > self.window)
        {
            self.samples.pop_front();
        }
        if self.samples.len() >= MAX_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((now, ns));
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// The q-quantile (nearest rank) of the samples in the window.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.samples.is_empty() {
            return None;
        }
        let mut v: Vec<u64> = self.samples.iter().map(|s| s.1).collect();
        v.sort_unstable();
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        Some(v[rank - 1])
    }
}

fn run(target: Target, m: Measure, jitter: f64, shared: Arc<Shared>, stop: Arc<AtomicBool>) {
    let mut rng = rand::rng();
    let mut runner = Runner::default();
    let slo = target.slo.clone().filter(|s| s.kind == m.kind);
    let mut window = slo.as_ref().map(|s| Window::new(s.window));
    let mut last_diagnose: Option<Instant> = None;
    let diagnosing = Arc::new(AtomicBool::new(false));
    let kind = m.kind.name();
    let mut next = Instant::now() + m.interval.mul_f64(rng.random::<f64>());
    loop {
        loop {
            if stop_requested(&stop) {
                return;
            }
            let now = Instant::now();
            if now >= next {
                break;
            }
            std::thread::park_timeout(next - now);
        }
        let o = runner.run(&target.address, &m, &stop);
        if stop_requested(&stop) {
            return;
        }
        shared.metrics.record(&target, kind, &o);
        let now = Instant::now();
        if let (Some(slo), Some(w)) = (&slo, window.as_mut()) {
            // A probe without an answer counts as taking its whole timeout: loss must raise
            // the quantile, not vanish from it.
            let ns = match (o.failure, o.headline_ns()) {
                (None, Some(ns)) => Some(ns),
                (Some(crate::measure::Failure::Timeout), _) => Some(m.timeout.as_nanos() as u64),
                _ => None,
            };
            if let Some(ns) = ns {
                w.push(now, ns);
            }
            check_slo(
                &target,
                &m,
                slo,
                w,
                &shared,
                (&mut last_diagnose, &diagnosing),
                &stop,
            );
        }
        next += jittered(m.interval, jitter, rng.random::<f64>());
        if next < now {
            // Probes took longer than the interval: restart the schedule from now.
            next = now + jittered(m.interval, jitter, rng.random::<f64>());
        }
    }
}

fn check_slo(
    target: &Target,
    m: &Measure,
    slo: &Slo,
    w: &Window,
    shared: &Arc<Shared>,
    (last_diagnose, diagnosing): (&mut Option<Instant>, &Arc<AtomicBool>),
    stop: &Arc<AtomicBool>,
) {
    let l = labels(target, &[("kind", m.kind.name())]);
    shared.metrics.note(&target.name, Fam::Slo, &l);
    let Some(q) = w.quantile(slo.quantile) else {
        return;
    };
    shared
        .metrics
        .slo_quantile
        .get_or_create(&l)
        .set(q as f64 / 1e9);
    let breached = w.len() as u64 >= slo.min_samples && q > slo.threshold.as_nanos() as u64;
    shared
        .metrics
        .slo_breached
        .get_or_create(&l)
        .set(i64::from(breached));
    if !breached
        || diagnosing.load(Ordering::SeqCst)
        || last_diagnose.is_some_and(|t| t.elapsed() < slo.cooldown)
    {
        return;
    }
    *last_diagnose = Some(Instant::now());
    diagnosing.store(true, Ordering::SeqCst);
    let name = target.name.clone();
    let (target, m, slo) = (target.clone(), m.clone(), slo.clone());
    let (shared, busy, stop) = (shared.clone(), diagnosing.clone(), stop.clone());
    let spawned = std::thread::Builder::new()
        .name("ls-diagnose".into())
        .spawn(move || {
            diagnose(&target, &m, &slo, q, &shared, &stop);
            busy.store(false, Ordering::SeqCst);
        });
    if let Err(e) = spawned {
        diagnosing.store(false, Ordering::SeqCst);
        log(&format!("cannot start diagnose for {name}: {e}"));
    }
}

/// The run an SLO breach on `target` asks for: its target string, and its agent with the
/// fleet's key when one is configured; and why the agent is not asked when it is configured
/// but the key cannot be read (the run then goes on client-only, and says so).
fn ask(target: &Target, m: &Measure, shared: &Shared) -> (Ask, Option<String>) {
    let mut ask = Ask {
        target: crate::diagnose_target(target, m),
        server_agent: None,
    };
    let Some(address) = target.server_agent.clone() else {
        return (ask, None);
    };
    let path = shared.ask_key.lock().ok().and_then(|p| p.clone());
    let key = match path {
        Some(p) => latscope_net::auth::AuthKey::from_file(&p).map_err(|e| e.to_string()),
        None => Err("no [diagnose] auth_file".to_string()),
    };
    match key {
        Ok(key) => {
            ask.server_agent = Some(ServerAgent { address, key });
            (ask, None)
        }
        Err(e) => (
            ask,
            Some(format!(
                "the agent at {address} was not asked: the fleet's key: {e}"
            )),
        ),
    }
}

fn diagnose(
    target: &Target,
    m: &Measure,
    slo: &Slo,
    q_ns: u64,
    shared: &Shared,
    stop: &AtomicBool,
) {
    let (ask, key_error) = ask(target, m, shared);
    log(&format!(
        "{}: p{} of {} over the last {} s is {:.3} ms > {:.3} ms: running diagnose {}{}",
        target.name,
        slo.quantile * 100.0,
        m.kind.name(),
        slo.window.as_secs(),
        q_ns as f64 / 1e6,
        slo.threshold.as_secs_f64() * 1e3,
        ask.target,
        ask.server_agent
            .as_ref()
            .map(|a| format!(" with its agent at {}", a.address))
            .unwrap_or_default()
    ));
    let mut result = shared.diagnoser.diagnose(&ask, stop);
    if let (Ok(d), Some(e)) = (result.as_mut(), key_error) {
        d.peer = PeerEvidence::Failed(e);
    }
    let ok = result.is_ok();
    shared
        .metrics
        .diagnose_runs
        .get_or_create(&labels(
            target,
            &[("result", if ok { "ok" } else { "error" })],
        ))
        .inc();
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut line = serde_json::json!({
        "unix_ms": unix_ms, "target": target.name, "kind": m.kind.name(),
        "quantile": slo.quantile, "observed_ns": q_ns,
        "threshold_ns": slo.threshold.as_nanos() as u64,
    });
    match result {
        Ok(d) => {
            export(target, &d, &shared.metrics);
            line["server_agent"] = server_agent_json(&d.peer);
            line["report"] = d.report;
        }
        Err(e) => {
            log(&format!("{}: diagnose failed: {e}", target.name));
            line["error"] = e.into();
        }
    }
    append_findings_log(shared, &line);
}

/// The findings log's account of the target's agent: `{"state": "used"}`, or failed with why.
fn server_agent_json(p: &PeerEvidence) -> serde_json::Value {
    match p {
        PeerEvidence::Failed(why) => serde_json::json!({"state": p.state(), "reason": why}),
        _ => serde_json::json!({"state": p.state()}),
    }
}

/// Export a run's findings (replacing the previous run's) and log them.
fn export(target: &Target, d: &Diagnosis, metrics: &Metrics) {
    metrics.forget_findings(&target.name);
    let ends = d.peer.ends();
    for f in &d.findings {
        let l = labels(
            target,
            &[("rule", &f.rule), ("side", &f.side), ("ends", ends)],
        );
        metrics.note(&target.name, Fam::Finding, &l);
        metrics.finding.get_or_create(&l).set(1);
        metrics
            .finding_explains
            .get_or_create(&l)
            .set(f.explains_ns as f64 / 1e9);
    }
    let l = labels(target, &[("state", d.peer.state())]);
    metrics.note(&target.name, Fam::ServerAgent, &l);
    metrics.diagnose_server_agent.get_or_create(&l).set(1);
    let found = if d.findings.is_empty() {
        "nothing".to_string()
    } else {
        d.findings
            .iter()
            .map(|f| format!("{} ({})", f.rule, f.side))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let agent = match &d.peer {
        PeerEvidence::NotAsked => String::new(),
        PeerEvidence::Used => " with its agent's evidence".to_string(),
        PeerEvidence::Failed(why) => format!(" from the client's end only ({why})"),
    };
    log(&format!("{}: diagnose found {found}{agent}", target.name));
}

fn append_findings_log(shared: &Shared, line: &serde_json::Value) {
    let path = shared.findings_log.lock().ok().and_then(|p| p.clone());
    if let Some(path) = path {
        let _g = shared.log_lock.lock();
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = written {
            log(&format!("cannot append to {}: {e}", path.display()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_spreads_waits_around_the_interval() {
        let i = Duration::from_secs(1);
        assert_eq!(jittered(i, 0.0, 0.9), i);
        assert_eq!(jittered(i, 0.2, 0.0), Duration::from_millis(900));
        assert_eq!(jittered(i, 0.2, 1.0), Duration::from_millis(1100));
        assert_eq!(jittered(i, 0.2, 0.5), i);
    }

    #[test]
    fn window_quantile_and_expiry() {
        let mut w = Window::new(Duration::from_secs(10));
        let t0 = Instant::now();
        for k in 1..=100u64 {
            w.push(t0, k * 1000);
        }
        assert_eq!(w.quantile(0.99), Some(99_000));
        assert_eq!(w.quantile(0.5), Some(50_000));
        // 11 s later, the old samples are gone.
        w.push(t0 + Duration::from_secs(11), 7);
        assert_eq!(w.len(), 1);
        assert_eq!(w.quantile(0.99), Some(7));
    }
}
