//! `latscope agent`: continuous mesh measurements exported to Prometheus.
//!
//! A TOML configuration ([`config`]) lists targets (and optionally a peer list file re-read on
//! change or SIGHUP), each with measurements ([`measure`]: SYN/connect ping, `rr` against
//! `latscope serve`, HTTP GET, trace) at a jittered interval. Each measurement runs on its own
//! thread, calling latscope's engines for one probe at a time, and records every probe in
//! Prometheus histograms and counters ([`metrics`]) served by latscope-exporter at `/metrics`,
//! with `/healthz` and a blackbox-style `/probe?target=…&kind=…`. A per-target SLO on a
//! windowed quantile triggers `diagnose` (through the [`Diagnoser`] the binary provides),
//! rate-limited; its findings are exported as `latscope_finding{target,rule,side}` and its
//! report appended to a JSON-lines log.

#![warn(missing_docs)]

pub mod config;
pub mod measure;
pub mod metrics;
mod probe_route;
mod worker;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use prometheus_client::registry::Registry;

use crate::config::{Config, ConfigError, Peer, Target};
use crate::metrics::Metrics;
use crate::worker::Worker;

/// One finding of a diagnose run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The rule's stable id (e.g. `nagle_delayed_ack`).
    pub rule: String,
    /// client, server or network.
    pub side: String,
}

/// What a diagnose run found.
#[derive(Clone, Debug)]
pub struct Diagnosis {
    /// Its findings.
    pub findings: Vec<Finding>,
    /// The whole report (the JSON of `latscope diagnose --json`).
    pub report: serde_json::Value,
}

/// Runs `latscope diagnose` against a target (the binary owns the diagnose pipeline).
pub trait Diagnoser: Send + Sync + 'static {
    /// Diagnose `target` (`HOST:PORT` or a URL); `stop` is set when the agent stops.
    fn diagnose(&self, target: &str, stop: &AtomicBool) -> Result<Diagnosis, String>;
}

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The configuration is invalid (file, line and reason).
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The metrics address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A system resource (runtime, threads, signals) could not be set up.
    #[error("{what}: {source}")]
    System {
        /// What was being set up.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
}

/// How to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The configuration file.
    pub config: PathBuf,
    /// Overrides the file's `listen`.
    pub listen: Option<SocketAddr>,
}

/// State shared by the workers, the server and the supervisor.
pub(crate) struct Shared {
    pub metrics: Metrics,
    pub diagnoser: Arc<dyn Diagnoser>,
    pub findings_log: Mutex<Option<PathBuf>>,
    /// Serialises appends to the findings log.
    pub log_lock: Mutex<()>,
}

/// Log one line on stderr (the agent's log; systemd and Kubernetes collect it).
pub(crate) fn log(msg: &str) {
    eprintln!("latscope agent: {msg}");
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn read_peers(cfg: &Config) -> Result<Vec<Peer>, ConfigError> {
    let Some(p) = &cfg.peers else {
        return Ok(vec![]);
    };
    let text = std::fs::read_to_string(&p.file).map_err(|e| ConfigError {
        file: p.file.clone(),
        line: 0,
        column: 0,
        message: format!("cannot read the peer list: {e}"),
    })?;
    config::parse_peers(&p.file, &text)
}

/// The running measurements, by (target, measurement): replaced as the target list changes.
struct Fleet {
    workers: BTreeMap<(String, usize), Worker>,
    targets: Vec<Target>,
}

impl Fleet {
    /// Start what is new, stop what is gone, restart what changed.
    fn reconcile(&mut self, cfg: &Config, targets: Vec<Target>, shared: &Arc<Shared>) {
        let old: BTreeMap<String, Target> = self
            .targets
            .iter()
            .map(|t| (t.name.clone(), t.clone()))
            .collect();
        let new: BTreeMap<String, Target> = targets
            .iter()
            .map(|t| (t.name.clone(), t.clone()))
            .collect();
        for (name, t) in &old {
            if new.get(name) != Some(t) {
                let keys: Vec<_> = self
                    .workers
                    .keys()
                    .filter(|(n, _)| n == name)
                    .cloned()
                    .collect();
                for k in keys {
                    if let Some(w) = self.workers.remove(&k) {
                        w.stop();
                    }
                }
                if !new.contains_key(name) {
                    shared.metrics.forget(name);
                }
            }
        }
        for (name, t) in &new {
            if old.get(name) == Some(t) {
                continue;
            }
            for (i, m) in t.measures.iter().enumerate() {
                match Worker::start(t.clone(), m.clone(), cfg.jitter, shared.clone()) {
                    Ok(w) => {
                        self.workers.insert((name.clone(), i), w);
                    }
                    Err(e) => log(&format!("cannot start a thread for {name}: {e}")),
                }
            }
        }
        shared.metrics.targets.set(new.len() as i64);
        self.targets = targets;
    }

    fn stop_all(&mut self) {
        let workers = std::mem::take(&mut self.workers);
        for w in workers.values() {
            w.signal_stop();
        }
        for (_, w) in workers {
            w.stop();
        }
    }
}

/// Run until SIGTERM or SIGINT. Returns once every measurement thread has stopped and the
/// server is closed.
pub fn run(opts: &Options, diagnoser: Arc<dyn Diagnoser>) -> Result<(), AgentError> {
    let mut cfg = config::load(&opts.config)?;
    let listen = opts.listen.unwrap_or(cfg.listen);
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let shared = Arc::new(Shared {
        metrics: metrics.clone(),
        diagnoser,
        findings_log: Mutex::new(cfg.findings_log.clone()),
        log_lock: Mutex::new(()),
    });
    let peers = match read_peers(&cfg) {
        Ok(p) => p,
        Err(e) => {
            log(&format!("{e}; starting without peers until it is fixed"));
            metrics
                .reloads
                .get_or_create(&vec![("result".into(), "error".into())])
                .inc();
            vec![]
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(16)
        .thread_name("latscope-agent-rt")
        .enable_all()
        .build()
        .map_err(|source| AgentError::System {
            what: "starting the runtime",
            source,
        })?;
    let std_listener =
        std::net::TcpListener::bind(listen).map_err(|source| AgentError::Listen {
            addr: listen,
            source,
        })?;
    let bound = std_listener.local_addr().unwrap_or(listen);
    let routes = Arc::new(probe_route::AgentRoutes::new(
        registry,
        cfg.probe_endpoint,
        shared.clone(),
    ));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = {
        let _g = rt.enter();
        std_listener
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpListener::from_std(std_listener))
            .map_err(|source| AgentError::Listen {
                addr: listen,
                source,
            })?
    };
    let server_task = rt.spawn(latscope_exporter::serve(
        server,
        routes,
        latscope_exporter::Limits::default(),
        async {
            let _ = stop_rx.await;
        },
    ));

    let mut fleet = Fleet {
        workers: BTreeMap::new(),
        targets: vec![],
    };
    fleet.reconcile(&cfg, cfg.all_targets(&peers), &shared);
    log(&format!(
        "{} target(s), {} measurement(s); metrics at http://{bound}/metrics{}",
        fleet.targets.len(),
        fleet.workers.len(),
        if latscope_exporter::is_exposed(&bound) {
            " (reachable from other hosts)"
        } else {
            " (loopback only)"
        }
    ));

    let mut peers_mtime = cfg.peers.as_ref().and_then(|p| mtime(&p.file));
    let signals = rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        Ok::<_, std::io::Error>((
            signal(SignalKind::hangup())?,
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
        ))
    });
    let (mut hup, mut term, mut int) = signals.map_err(|source| AgentError::System {
        what: "installing signal handlers",
        source,
    })?;
    loop {
        enum Ev {
            Hup,
            Stop(&'static str),
            Tick,
        }
        let ev = rt.block_on(async {
            tokio::select! {
                _ = hup.recv() => Ev::Hup,
                _ = term.recv() => Ev::Stop("SIGTERM"),
                _ = int.recv() => Ev::Stop("SIGINT"),
                () = tokio::time::sleep(Duration::from_secs(2)) => Ev::Tick,
            }
        });
        let reload_ok = |m: &Metrics, ok: bool| {
            m.reloads
                .get_or_create(&vec![(
                    "result".into(),
                    if ok { "ok" } else { "error" }.into(),
                )])
                .inc();
        };
        match ev {
            Ev::Stop(sig) => {
                log(&format!("{sig}: stopping"));
                break;
            }
            Ev::Hup => {
                match config::load(&opts.config).and_then(|c| read_peers(&c).map(|p| (c, p))) {
                    Ok((new_cfg, peers)) => {
                        if new_cfg.listen != cfg.listen && opts.listen.is_none() {
                            log(
                                "SIGHUP: a new listen address takes a restart; keeping the current one",
                            );
                        }
                        if let Ok(mut l) = shared.findings_log.lock() {
                            l.clone_from(&new_cfg.findings_log);
                        }
                        cfg = new_cfg;
                        peers_mtime = cfg.peers.as_ref().and_then(|p| mtime(&p.file));
                        // Settings that apply to every worker (jitter) restart them all.
                        fleet.stop_all();
                        fleet.targets.clear();
                        fleet.reconcile(&cfg, cfg.all_targets(&peers), &shared);
                        reload_ok(&metrics, true);
                        log(&format!(
                            "SIGHUP: reloaded, {} target(s)",
                            fleet.targets.len()
                        ));
                    }
                    Err(e) => {
                        reload_ok(&metrics, false);
                        log(&format!("SIGHUP: {e}; keeping the previous configuration"));
                    }
                }
            }
            Ev::Tick => {
                let Some(p) = &cfg.peers else { continue };
                let now = mtime(&p.file);
                if now == peers_mtime {
                    continue;
                }
                peers_mtime = now;
                match read_peers(&cfg) {
                    Ok(peers) => {
                        fleet.reconcile(&cfg, cfg.all_targets(&peers), &shared);
                        reload_ok(&metrics, true);
                        log(&format!(
                            "peer list changed: {} target(s)",
                            fleet.targets.len()
                        ));
                    }
                    Err(e) => {
                        reload_ok(&metrics, false);
                        log(&format!("{e}; keeping the previous peer list"));
                    }
                }
            }
        }
    }
    fleet.stop_all();
    let _ = stop_tx.send(());
    let _ = rt.block_on(server_task);
    rt.shutdown_timeout(Duration::from_secs(2));
    Ok(())
}

/// The target string diagnose gets for a measurement: the URL, or `HOST:PORT`.
pub(crate) fn diagnose_target(t: &Target, m: &config::Measure) -> String {
    match m.kind {
        config::Kind::Http => measure::http_url(&t.address, m),
        _ if t.address.contains(':') && !t.address.starts_with('[') => {
            format!("[{}]:{}", t.address, m.port)
        }
        _ => format!("{}:{}", t.address, m.port),
    }
}

pub(crate) fn stop_requested(flag: &AtomicBool) -> bool {
    flag.load(Ordering::Relaxed)
}
