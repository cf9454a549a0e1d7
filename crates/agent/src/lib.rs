//! `latscope agent`: continuous mesh measurements exported to Prometheus.
//!
//! A TOML or YAML configuration ([`config`]) lists targets (and optionally a peer list file re-read on
//! change or SIGHUP), each with measurements ([`measure`]: SYN/connect ping, `rr` against
//! `latscope serve`, HTTP GET, trace) at a jittered interval. Each measurement runs on its own
//! thread, calling latscope's engines for one probe at a time, and records every probe in
//! Prometheus histograms and counters ([`metrics`]) served by latscope-exporter at `/metrics`,
//! with `/healthz` and a blackbox-style `/probe?target=…&kind=…`. A per-target SLO on a
//! windowed quantile triggers `diagnose` (through a [`Diagnoser`]: [`pipeline::InProcess`] runs the
//! diagnose crate's pipeline; tests pass a mock),
//! rate-limited, asking the target's own agent for its end's evidence when one is configured;
//! its findings are exported as `latscope_finding{target,rule,side,ends}` and its report
//! appended to a JSON-lines log. Optionally the host's own view: socket findings of chosen
//! local services ([`host`]), and an endpoint answering the peers' evidence requests about this
//! host's end ([`evidence`]).

#![warn(missing_docs)]

pub mod config;
pub mod dns;
pub mod evidence;
pub mod host;
pub mod measure;
pub mod metrics;
pub mod pipeline;
mod probe_route;
pub mod stack;
mod worker;
pub mod yaml;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use latscope_core::units::count;
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
    /// The latency per request it explains, ns.
    pub explains_ns: u64,
}

/// What the target's agent contributed to a diagnose run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerEvidence {
    /// No agent is configured for the target: the run is client-only by design.
    NotAsked,
    /// The target's agent observed its end; its evidence was merged.
    Used,
    /// An agent was asked for and could not be reached, refused, or its key could not be read:
    /// the run went on client-only. Why.
    Failed(String),
}

impl PeerEvidence {
    /// The `state` label of `latscope_diagnose_server_agent`.
    pub fn state(&self) -> &'static str {
        match self {
            PeerEvidence::NotAsked => "not_configured",
            PeerEvidence::Used => "used",
            PeerEvidence::Failed(_) => "failed",
        }
    }

    /// The `ends` label of the findings: whose evidence the rules read.
    pub fn ends(&self) -> &'static str {
        match self {
            PeerEvidence::Used => "client_and_server",
            _ => "client",
        }
    }
}

/// What a diagnose run found.
#[derive(Clone, Debug)]
pub struct Diagnosis {
    /// Its findings.
    pub findings: Vec<Finding>,
    /// Whether the target's agent's evidence was merged.
    pub peer: PeerEvidence,
    /// The whole report (the JSON of `latscope diagnose --json`).
    pub report: serde_json::Value,
}

/// The target's agent a diagnose run asks for its end's evidence.
#[derive(Clone, Debug)]
pub struct ServerAgent {
    /// `HOST:PORT` of its evidence endpoint.
    pub address: String,
    /// The fleet's key, which the endpoint asks the run to prove it holds.
    pub key: latscope_net::auth::AuthKey,
}

/// A diagnose run an SLO breach asks for.
#[derive(Clone, Debug)]
pub struct Ask {
    /// `HOST:PORT` or a URL.
    pub target: String,
    /// The target's agent, when one answers evidence requests.
    pub server_agent: Option<ServerAgent>,
}

/// Runs `latscope diagnose` against a target ([`pipeline::InProcess`], or a test's mock).
pub trait Diagnoser: Send + Sync + 'static {
    /// Run the diagnosis `ask` names; `stop` is set when the agent stops.
    fn diagnose(&self, ask: &Ask, stop: &AtomicBool) -> Result<Diagnosis, String>;
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
    /// The `[evidence]` endpoint cannot start (its key, or its address).
    #[error("{0}")]
    Evidence(#[from] evidence::EndpointError),
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
    /// The key diagnose runs prove to the targets' agents (`[diagnose]`, re-read per run).
    pub ask_key: Mutex<Option<PathBuf>>,
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

/// The peer file's lines (none without a `[peers]` file).
fn read_peers(cfg: &Config) -> Result<Vec<Peer>, ConfigError> {
    let Some(file) = peer_file(cfg) else {
        return Ok(vec![]);
    };
    let text = std::fs::read_to_string(file).map_err(|e| ConfigError {
        file: file.to_path_buf(),
        line: 0,
        column: 0,
        message: format!("cannot read the peer list: {e}"),
    })?;
    config::parse_peers(file, &text)
}

fn peer_file(cfg: &Config) -> Option<&Path> {
    cfg.peers.as_ref().and_then(|p| p.file.as_deref())
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

/// The metrics server running on its own runtime.
struct Server {
    rt: tokio::runtime::Runtime,
    bound: SocketAddr,
    stop_tx: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Bind `listen` and serve `/metrics`, `/healthz` and (if enabled) `/probe`.
    fn start(
        listen: SocketAddr,
        registry: Registry,
        probe_endpoint: bool,
        shared: &Arc<Shared>,
    ) -> Result<Server, AgentError> {
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
        let listen_err = |source| AgentError::Listen {
            addr: listen,
            source,
        };
        let std_listener = std::net::TcpListener::bind(listen).map_err(listen_err)?;
        let bound = std_listener.local_addr().unwrap_or(listen);
        let routes = Arc::new(probe_route::AgentRoutes::new(
            registry,
            probe_endpoint,
            shared.clone(),
        ));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let listener = {
            let _g = rt.enter();
            std_listener
                .set_nonblocking(true)
                .and_then(|()| tokio::net::TcpListener::from_std(std_listener))
                .map_err(listen_err)?
        };
        let task = rt.spawn(latscope_exporter::serve(
            listener,
            routes,
            latscope_exporter::Limits::default(),
            async {
                let _ = stop_rx.await;
            },
        ));
        Ok(Server {
            rt,
            bound,
            stop_tx,
            task,
        })
    }

    /// Close the listener, finish the answers in flight, stop the runtime.
    fn shutdown(self) {
        let _ = self.stop_tx.send(());
        let _ = self.rt.block_on(self.task);
        self.rt.shutdown_timeout(Duration::from_secs(2));
    }
}

/// What wakes the supervisor.
enum Event {
    Hup,
    Stop(&'static str),
    Tick,
}

/// The signals the agent handles.
struct Signals {
    hup: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install(rt: &tokio::runtime::Runtime) -> Result<Signals, AgentError> {
        use tokio::signal::unix::{SignalKind, signal};
        let _g = rt.enter();
        let install = || {
            Ok::<_, std::io::Error>(Signals {
                hup: signal(SignalKind::hangup())?,
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        };
        install().map_err(|source| AgentError::System {
            what: "installing signal handlers",
            source,
        })
    }

    /// The next signal, or a tick after `tick` (the peer list's change check).
    fn next(&mut self, rt: &tokio::runtime::Runtime, tick: Duration) -> Event {
        rt.block_on(async {
            tokio::select! {
                _ = self.hup.recv() => Event::Hup,
                _ = self.term.recv() => Event::Stop("SIGTERM"),
                _ = self.int.recv() => Event::Stop("SIGINT"),
                () = tokio::time::sleep(tick) => Event::Tick,
            }
        })
    }
}

/// The configuration in force and the running fleet: reacts to SIGHUP and peer list changes.
struct Supervisor<'a> {
    opts: &'a Options,
    cfg: Config,
    peers_mtime: Option<SystemTime>,
    fleet: Fleet,
    /// One socket-scanning thread per `[[service]]`.
    host: Vec<host::HostWorker>,
    /// The `[stack]` probes' thread.
    stack: Option<stack::StackWorker>,
    /// The `[evidence]` endpoint.
    evidence: Option<evidence::Endpoint>,
    /// The peer file's peers.
    file_peers: Vec<Peer>,
    /// The peers the `[peers]` `dns` names resolved to, last round.
    dns_peers: Vec<Peer>,
    /// The thread re-resolving them.
    dns: Option<dns::DnsWatcher>,
    /// The failures of the last DNS round (logged when they change).
    dns_errors: Vec<String>,
    resolver: Arc<dns::Resolver>,
    shared: Arc<Shared>,
}

impl Supervisor<'_> {
    /// (Re)start the service scans of the configuration in force.
    fn restart_host(&mut self) {
        for w in self.host.drain(..) {
            w.stop();
        }
        for s in &self.cfg.services {
            match host::HostWorker::start(s.clone(), self.shared.clone()) {
                Ok(w) => self.host.push(w),
                Err(e) => log(&format!(
                    "cannot start a thread for service {}: {e}",
                    s.name
                )),
            }
        }
    }

    /// (Re)start the `[stack]` probes if the section changed (or stop them if it went).
    fn restart_stack(&mut self) {
        if self.stack.as_ref().map(|w| &w.cfg) == self.cfg.stack.as_ref() {
            return;
        }
        if let Some(w) = self.stack.take() {
            w.stop();
        }
        self.shared.metrics.stack_unavailable.clear();
        self.shared.metrics.stack_probes.clear();
        if let Some(s) = &self.cfg.stack {
            match stack::StackWorker::start(s.clone(), self.shared.clone()) {
                Ok(w) => self.stack = Some(w),
                Err(e) => log(&format!("cannot start the [stack] thread: {e}")),
            }
        }
    }

    /// (Re)start the `[evidence]` endpoint (a reload restarts it: its key file may have been
    /// replaced), or stop it if the section went. A failure is logged; the rest carries on.
    fn restart_evidence(&mut self) {
        if let Some(e) = self.evidence.take() {
            e.stop();
        }
        if let Ok(mut k) = self.shared.ask_key.lock() {
            k.clone_from(&self.cfg.diagnose.auth_file);
        }
        if let Err(e) = self.start_evidence() {
            log(&format!("{e}; not answering evidence requests"));
        }
    }

    /// Start the `[evidence]` endpoint if the configuration has one.
    fn start_evidence(&mut self) -> Result<(), evidence::EndpointError> {
        let Some(cfg) = &self.cfg.evidence else {
            return Ok(());
        };
        let e = evidence::Endpoint::start(cfg, &self.shared.metrics)?;
        log(&format!(
            "answering evidence requests about {} on {}{} (evidence only, with the key of {})",
            cfg.ports.describe(),
            e.bound,
            if latscope_exporter::is_exposed(&e.bound) {
                ", reachable from other hosts"
            } else {
                ", loopback only"
            },
            cfg.auth_file.display()
        ));
        self.evidence = Some(e);
        Ok(())
    }

    /// The peer file's peers, then the DNS ones (a name the file already has is skipped).
    fn peers(&self) -> Vec<Peer> {
        let mut out = self.file_peers.clone();
        for p in &self.dns_peers {
            if !out.iter().any(|f| f.name == p.name) {
                out.push(p.clone());
            }
        }
        out
    }

    fn reconcile_peers(&mut self) {
        let all = self.cfg.all_targets(&self.peers());
        self.fleet.reconcile(&self.cfg, all, &self.shared);
    }

    /// (Re)start resolving the `dns` names if they (or the refresh) changed.
    fn restart_dns(&mut self) {
        let want = self
            .cfg
            .peers
            .as_ref()
            .filter(|p| !p.dns.is_empty())
            .map(|p| (p.dns.clone(), p.dns_refresh));
        if self.dns.as_ref().map(|w| &w.key) == want.as_ref() {
            return;
        }
        self.dns = None;
        if want.is_none() {
            self.dns_peers.clear();
        }
        if let Some(p) = self.cfg.peers.as_ref().filter(|p| !p.dns.is_empty()) {
            match dns::DnsWatcher::start(p, self.resolver.clone()) {
                Ok(w) => self.dns = Some(w),
                Err(e) => log(&format!("cannot start the DNS thread: {e}")),
            }
        }
    }

    /// Tick: take the newest DNS round; reconcile when the addresses changed.
    fn check_dns(&mut self) {
        let Some(round) = self.dns.as_ref().and_then(|w| w.latest()) else {
            return;
        };
        let include_self = self.cfg.peers.as_ref().is_some_and(|p| p.include_self);
        if !round.errors.is_empty() {
            self.count_reload(false);
            if round.errors != self.dns_errors {
                log(&format!(
                    "[peers] dns: {}; keeping those names' previous addresses",
                    round.errors.join("; ")
                ));
            }
        }
        self.dns_errors = round.errors.clone();
        let peers = dns::peers_of(&round, include_self, &dns::is_local);
        if peers == self.dns_peers {
            return;
        }
        self.dns_peers = peers;
        self.reconcile_peers();
        self.count_reload(true);
        log(&format!(
            "[peers] dns: {} resolved, {}",
            count(self.dns_peers.len() as u64, "address"),
            count(self.fleet.targets.len() as u64, "target")
        ));
    }

    fn count_reload(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.shared
            .metrics
            .reloads
            .get_or_create(&vec![("result".into(), result.into())])
            .inc();
    }

    /// SIGHUP: re-read the configuration and the peer list; a broken one keeps the current.
    fn reload(&mut self) {
        let loaded = config::load(&self.opts.config).and_then(|c| read_peers(&c).map(|p| (c, p)));
        let (new_cfg, peers) = match loaded {
            Ok(v) => v,
            Err(e) => {
                self.count_reload(false);
                log(&format!("SIGHUP: {e}; keeping the previous configuration"));
                return;
            }
        };
        if new_cfg.listen != self.cfg.listen && self.opts.listen.is_none() {
            log("SIGHUP: a new listen address takes a restart; keeping the current one");
        }
        if let Ok(mut l) = self.shared.findings_log.lock() {
            l.clone_from(&new_cfg.findings_log);
        }
        self.cfg = new_cfg;
        self.peers_mtime = peer_file(&self.cfg).and_then(mtime);
        self.file_peers = peers;
        self.restart_dns();
        // Settings that apply to every worker (jitter) restart them all.
        self.fleet.stop_all();
        self.fleet.targets.clear();
        self.reconcile_peers();
        self.restart_host();
        self.restart_stack();
        self.restart_evidence();
        self.count_reload(true);
        log(&format!(
            "SIGHUP: reloaded, {}",
            count(self.fleet.targets.len() as u64, "target")
        ));
    }

    /// Tick: re-read the peer list if its file changed.
    fn check_peers(&mut self) {
        let Some(file) = peer_file(&self.cfg) else {
            return;
        };
        let now = mtime(file);
        if now == self.peers_mtime {
            return;
        }
        self.peers_mtime = now;
        match read_peers(&self.cfg) {
            Ok(peers) => {
                self.file_peers = peers;
                self.reconcile_peers();
                self.count_reload(true);
                log(&format!(
                    "peer list changed: {}",
                    count(self.fleet.targets.len() as u64, "target")
                ));
            }
            Err(e) => {
                self.count_reload(false);
                log(&format!("{e}; keeping the previous peer list"));
            }
        }
    }
}

/// Run until SIGTERM or SIGINT. Returns once every measurement thread has stopped and the
/// server is closed.
pub fn run(opts: &Options, diagnoser: Arc<dyn Diagnoser>) -> Result<(), AgentError> {
    run_with(opts, diagnoser, Arc::new(dns::system_resolve))
}

/// [`run`] with another resolver for the `[peers]` `dns` names (tests).
pub fn run_with(
    opts: &Options,
    diagnoser: Arc<dyn Diagnoser>,
    resolver: Arc<dns::Resolver>,
) -> Result<(), AgentError> {
    let cfg = config::load(&opts.config)?;
    let listen = opts.listen.unwrap_or(cfg.listen);
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let shared = Arc::new(Shared {
        metrics,
        diagnoser,
        findings_log: Mutex::new(cfg.findings_log.clone()),
        ask_key: Mutex::new(cfg.diagnose.auth_file.clone()),
        log_lock: Mutex::new(()),
    });
    let server = Server::start(listen, registry, cfg.probe_endpoint, &shared)?;
    let mut signals = Signals::install(&server.rt)?;
    let mut sup = Supervisor {
        opts,
        peers_mtime: peer_file(&cfg).and_then(mtime),
        fleet: Fleet {
            workers: BTreeMap::new(),
            targets: vec![],
        },
        host: vec![],
        stack: None,
        evidence: None,
        file_peers: vec![],
        dns_peers: vec![],
        dns: None,
        dns_errors: vec![],
        resolver,
        shared,
        cfg,
    };
    sup.file_peers = read_peers(&sup.cfg).unwrap_or_else(|e| {
        log(&format!("{e}; starting without peers until it is fixed"));
        sup.count_reload(false);
        vec![]
    });
    sup.reconcile_peers();
    sup.restart_dns();
    sup.restart_host();
    sup.restart_stack();
    // At start-up a broken [evidence] is an error (exit 2 for its key, 5 for its address), not
    // a log line: the operator asked for it.
    sup.start_evidence()?;
    let reach = if latscope_exporter::is_exposed(&server.bound) {
        " (reachable from other hosts)"
    } else {
        " (loopback only)"
    };
    log(&format!(
        "{}, {}, {}; metrics at http://{}/metrics{reach}",
        count(sup.fleet.targets.len() as u64, "target"),
        count(sup.fleet.workers.len() as u64, "measurement"),
        count(sup.host.len() as u64, "service"),
        server.bound,
    ));
    loop {
        match signals.next(&server.rt, Duration::from_secs(2)) {
            Event::Stop(sig) => {
                log(&format!("{sig}: stopping"));
                break;
            }
            Event::Hup => sup.reload(),
            Event::Tick => {
                sup.check_peers();
                sup.check_dns();
            }
        }
    }
    sup.fleet.stop_all();
    for w in sup.host.drain(..) {
        w.stop();
    }
    if let Some(w) = sup.stack.take() {
        w.stop();
    }
    if let Some(e) = sup.evidence.take() {
        e.stop();
    }
    server.shutdown();
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
