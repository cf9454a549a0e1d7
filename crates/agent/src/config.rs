//! The agent's configuration file (TOML, or YAML when it ends in `.yaml`/`.yml`) and the peer
//! list file, parsed and validated into [`Config`]. Both syntaxes fill the same raw structures
//! (YAML through [`crate::yaml`], which carries the same spans), so validation is shared and
//! every error names the file, line and column and says what to write instead.
//!
//! ```toml
//! listen = "127.0.0.1:9573"          # /metrics, /healthz, /probe (loopback unless told)
//! findings_log = "/var/log/latscope/findings.jsonl"  # diagnose reports, one JSON per line
//! jitter = 0.2                       # each wait is interval × (1 ± jitter/2); first one random
//!
//! [[target]]
//! name = "db1"                       # the `target` label (default: the address)
//! address = "10.0.0.2"               # host name or IP literal, resolved at every probe
//! labels = { zone = "eu-1" }         # added to every series of this target
//! measure = [
//!   { kind = "connect", port = 5432, interval = "1s", timeout = "1s" },
//!   { kind = "rr", port = 7373 },    # against `latscope serve`
//!   { kind = "http", url = "http://10.0.0.2/health", interval = "10s" },
//!   { kind = "trace", interval = "1m" },
//! ]
//! slo = { kind = "connect", quantile = 0.99, threshold = "5ms", window = "5m" }
//!
//! [peers]                            # a mesh: same measurements for every peer of a file
//! file = "/etc/latscope/peers"       # ADDRESS [NAME] per line; re-read on change and SIGHUP
//! dns = ["latscope.mon.svc.cluster.local"]  # and/or: every A/AAAA record of these names
//! dns_refresh = "30s"                # re-resolved this often (peers come and go)
//! measure = [{ kind = "rr" }]
//!
//! [[service]]                        # the host's own view: socket findings of a local service
//! name = "nginx"                     # the `service` label
//! port = 80                          # its sockets: local or remote port 80
//! interval = "30s"
//!
//! [stack]                            # the kernel's view: `latscope stack`'s eBPF histograms
//! direction = "both"                 # rx (default), tx or both: every probe of that direction
//! probes = ["tcp-socket-read"]       # or name them: hook points and transmit stages
//! hooks = "auto"                     # auto (fentry, else fallbacks), fentry, fallback
//! group_by = "none"                  # or "interface"
//! sample = 1                         # time one packet in N
//!
//! [evidence]                         # answer the peers' diagnose runs about this host's end
//! auth_file = "/etc/latscope/fleet.key"  # the fleet's shared key (mode 600)
//! ports = [80, 443]                  # the local ports it reports on, or "all"
//! listen = "[::]:7374"               # evidence requests only (default)
//!
//! [diagnose]                         # how SLO breaches are diagnosed
//! server_agent_port = 7374           # ask each target's own agent for its end's evidence
//! auth_file = "/etc/latscope/fleet.key"  # its key (default: [evidence]'s)
//! ```
//!
//! A `[[target]]` may name its agent elsewhere: `server_agent = "HOST[:PORT]"`, or `"none"`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

pub use latscope_probe::spec::{Kind, Measure, SERVE_PORT};

/// The agent's evidence endpoint's default port: not serve's 7373, where the `latscope serve`
/// that the mesh's rr probes measure usually runs on the same host.
pub const EVIDENCE_PORT: u16 = 7374;

/// A configuration error, located in its file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line (0 when the error concerns the whole file).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong and what to write instead.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file.display(),
                self.line,
                self.column,
                self.message
            )
        }
    }
}

impl std::error::Error for ConfigError {}

/// Line and column (1-based) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map_or(before.len(), |i| before.len() - i - 1)
        + 1;
    (line, col)
}

fn at(file: &Path, text: &str, span: Option<Range<usize>>, message: String) -> ConfigError {
    let (line, column) = span.map_or((0, 0), |s| line_col(text, s.start));
    ConfigError {
        file: file.to_path_buf(),
        line,
        column,
        message,
    }
}

/// A duration written as in latscope's flags (`500ms`, `1s`, `5m`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Dur, D::Error> {
        let s = String::deserialize(d)?;
        latscope_core::units::parse_duration(&s)
            .map(Dur)
            .map_err(|e| serde::de::Error::custom(e.to_string()))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMeasure {
    kind: Kind,
    port: Option<u16>,
    interval: Option<Spanned<Dur>>,
    timeout: Option<Spanned<Dur>>,
    url: Option<Spanned<String>>,
    path: Option<String>,
    max_ttl: Option<Spanned<u8>>,
    size: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSlo {
    kind: Option<Spanned<Kind>>,
    quantile: Option<Spanned<f64>>,
    threshold: Dur,
    window: Option<Dur>,
    min_samples: Option<u64>,
    cooldown: Option<Dur>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    name: Option<Spanned<String>>,
    address: Spanned<String>,
    #[serde(default)]
    labels: BTreeMap<Spanned<String>, String>,
    measure: Spanned<Vec<Spanned<RawMeasure>>>,
    slo: Option<Spanned<RawSlo>>,
    server_agent: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPeers {
    file: Option<Spanned<PathBuf>>,
    #[serde(default)]
    dns: Vec<Spanned<String>>,
    dns_refresh: Option<Spanned<Dur>>,
    include_self: Option<bool>,
    #[serde(default)]
    labels: BTreeMap<Spanned<String>, String>,
    measure: Spanned<Vec<Spanned<RawMeasure>>>,
    slo: Option<Spanned<RawSlo>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    name: Spanned<String>,
    port: Spanned<u16>,
    interval: Option<Spanned<Dur>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStack {
    direction: Option<Spanned<String>>,
    #[serde(default)]
    probes: Vec<Spanned<String>>,
    hooks: Option<Spanned<String>>,
    group_by: Option<Spanned<String>>,
    sample: Option<Spanned<u32>>,
}

/// `ports = [80, 443]`, `ports = 80` or `ports = "all"`.
#[derive(Debug)]
enum RawPorts {
    List(Vec<u16>),
    Word(String),
}

impl<'de> Deserialize<'de> for RawPorts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RawPorts, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawPorts;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of ports (e.g. [80, 443]) or \"all\"")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<RawPorts, E> {
                Ok(RawPorts::Word(s.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<RawPorts, E> {
                u16::try_from(n)
                    .map(|p| RawPorts::List(vec![p]))
                    .map_err(|_| E::custom(format!("{n} is not a port (1–65535)")))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<RawPorts, E> {
                u64::try_from(n)
                    .map_err(|_| E::custom(format!("{n} is not a port (1–65535)")))
                    .and_then(|n| self.visit_u64(n))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<RawPorts, A::Error> {
                let mut v = Vec::new();
                while let Some(p) = a.next_element::<u16>()? {
                    v.push(p);
                }
                Ok(RawPorts::List(v))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvidence {
    auth_file: Option<PathBuf>,
    ports: Option<Spanned<RawPorts>>,
    listen: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDiagnose {
    auth_file: Option<PathBuf>,
    server_agent_port: Option<Spanned<u16>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<Spanned<String>>,
    findings_log: Option<PathBuf>,
    jitter: Option<Spanned<f64>>,
    probe_endpoint: Option<bool>,
    #[serde(default)]
    target: Vec<Spanned<RawTarget>>,
    peers: Option<Spanned<RawPeers>>,
    #[serde(default)]
    service: Vec<Spanned<RawService>>,
    stack: Option<Spanned<RawStack>>,
    evidence: Option<Spanned<RawEvidence>>,
    diagnose: Option<Spanned<RawDiagnose>>,
}

/// The `[evidence]` section: this agent answers its peers' evidence requests
/// (`diagnose --server-agent`, and their agents' diagnose runs) about its local ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    /// The key clients must prove they hold (the fleet's shared key; relative to the config).
    pub auth_file: PathBuf,
    /// The local ports it reports on.
    pub ports: latscope_diagnose::remote::server::Ports,
    /// Where it listens ([`EVIDENCE_PORT`] on every address by default): evidence requests
    /// only, every test is refused.
    pub listen: SocketAddr,
}

/// The `[diagnose]` section: how an SLO breach's diagnose run asks the target's own agent for
/// its end's evidence.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagnose {
    /// The key the targets' agents want: `[diagnose] auth_file`, else `[evidence] auth_file`.
    pub auth_file: Option<PathBuf>,
    /// Ask every target's agent at the target's address on this port (unless the target names
    /// its own `server_agent`); None: only targets that name one.
    pub server_agent_port: Option<u16>,
}

/// A target's `server_agent`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerAgent {
    /// `[diagnose] server_agent_port` decides (the target's address on that port, or none).
    Default,
    /// `"none"`: this target's diagnose runs stay client-only.
    Off,
    /// `"HOST[:PORT]"` (port [`EVIDENCE_PORT`] by default).
    At(String),
}

/// The `[stack]` section: `latscope stack`'s kernel histograms (receive path, transmit path) in
/// the agent ([`crate::stack`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// Probes to attach, by name (`tcp-socket-read`, `qdisc`, …); empty = all of `direction`.
    pub probes: Vec<latscope_core::model::stack::Probe>,
    /// `rx` (the default), `tx` or `both`: the probes attached when none are named.
    pub direction: latscope_core::model::stack::Directions,
    /// Which implementations may be used: `auto` (fentry where allowed, else tracepoint /
    /// cgroup_skb fallbacks), `fentry`, `fallback`.
    pub hooks: latscope_ebpf::HookMode,
    /// `none` (one histogram per probe) or `interface` (per receiving interface too).
    pub group_by: latscope_core::model::stack::GroupBy,
    /// Time one packet in N at each probe (1: every packet).
    pub sample: u32,
}

/// A local service whose sockets the agent scans (the host's own view, [`crate::host`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    /// The `service` label.
    pub name: String,
    /// Sockets whose local or remote port is this one (`latscope sockets --port`).
    pub port: u16,
    /// Time between two scans (30 s by default, at least 1 s).
    pub interval: Duration,
}

/// A per-target objective: the quantile of the last `window` above `threshold` is a breach.
#[derive(Clone, Debug, PartialEq)]
pub struct Slo {
    /// Which measurement's samples (the first non-trace one by default).
    pub kind: Kind,
    /// 0 < q < 1 (0.99 by default).
    pub quantile: f64,
    /// The bound.
    pub threshold: Duration,
    /// How far back samples count (5 minutes by default).
    pub window: Duration,
    /// No verdict on fewer samples than this (10 by default).
    pub min_samples: u64,
    /// At most one diagnose run per target in this time (10 minutes by default).
    pub cooldown: Duration,
}

/// A target, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// The `target` label.
    pub name: String,
    /// Host name or address literal.
    pub address: String,
    /// Extra labels (validated names, none reserved).
    pub labels: BTreeMap<String, String>,
    /// Its measurements.
    pub measures: Vec<Measure>,
    /// Its objective.
    pub slo: Option<Slo>,
    /// Where its agent answers evidence requests (`HOST:PORT`), for its diagnose runs:
    /// resolved from its `server_agent` and `[diagnose] server_agent_port`.
    pub server_agent: Option<String>,
}

/// The `[peers]` section: a template applied to every line of the peer file and to every
/// address the `dns` names resolve to.
#[derive(Clone, Debug, PartialEq)]
pub struct Peers {
    /// The peer list (relative paths are relative to the config file), if any.
    pub file: Option<PathBuf>,
    /// Names whose every A/AAAA record is a peer (a Kubernetes headless Service), re-resolved
    /// every `dns_refresh`.
    pub dns: Vec<String>,
    /// Time between two resolutions of `dns` (30 s by default, at least 1 s).
    pub dns_refresh: Duration,
    /// Keep this host's own addresses among the `dns` peers (off by default).
    pub include_self: bool,
    /// Labels of every peer.
    pub labels: BTreeMap<String, String>,
    /// Measurements of every peer.
    pub measures: Vec<Measure>,
    /// Objective of every peer.
    pub slo: Option<Slo>,
}

/// The whole configuration, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Where /metrics is served.
    pub listen: SocketAddr,
    /// Where diagnose reports go, one JSON per line.
    pub findings_log: Option<PathBuf>,
    /// Waits are `interval × (1 ± jitter/2)`, uniformly: 0.2 by default.
    pub jitter: f64,
    /// Whether `/probe` is served (on by default).
    pub probe_endpoint: bool,
    /// Targets of the file itself.
    pub targets: Vec<Target>,
    /// The peer list, if any.
    pub peers: Option<Peers>,
    /// Local services whose sockets are scanned.
    pub services: Vec<Service>,
    /// The kernel stack histograms, if asked for.
    pub stack: Option<Stack>,
    /// This agent's evidence endpoint, if configured.
    pub evidence: Option<Evidence>,
    /// How diagnose runs ask the targets' agents.
    pub diagnose: Diagnose,
}

/// Labels the agent sets itself; a target may not redefine them.
const RESERVED: [&str; 11] = [
    "target", "kind", "layer", "le", "hop", "address", "reason", "rule", "side", "ends", "state",
];

fn valid_label_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
        && !s.starts_with("__")
}

struct Ctx<'a> {
    file: &'a Path,
    text: &'a str,
}

impl Ctx<'_> {
    fn err(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        at(self.file, self.text, Some(span), message.into())
    }

    fn labels(
        &self,
        raw: BTreeMap<Spanned<String>, String>,
    ) -> Result<BTreeMap<String, String>, ConfigError> {
        let mut out = BTreeMap::new();
        for (k, v) in raw {
            let span = k.span();
            let k = k.into_inner();
            if !valid_label_name(&k) {
                return Err(self.err(
                    span,
                    format!("label name '{k}' is not a Prometheus label name (letters, digits and _, not starting with a digit or __)"),
                ));
            }
            if RESERVED.contains(&k.as_str()) {
                return Err(self.err(
                    span,
                    format!("label '{k}' is set by the agent itself; choose another name"),
                ));
            }
            out.insert(k, v);
        }
        Ok(out)
    }

    fn measure(&self, m: Spanned<RawMeasure>) -> Result<Measure, ConfigError> {
        let span = m.span();
        let m = m.into_inner();
        let interval = m
            .interval
            .as_ref()
            .map_or(m.kind.default_interval(), |d| d.get_ref().0);
        if interval < Duration::from_millis(100) {
            let s = m.interval.as_ref().map_or(span.clone(), |d| d.span());
            return Err(self.err(s, "interval must be at least 100ms"));
        }
        let timeout = m
            .timeout
            .as_ref()
            .map_or(interval.min(Duration::from_secs(1)), |d| d.get_ref().0);
        if let Some(t) = &m.timeout
            && (t.get_ref().0.is_zero() || t.get_ref().0 > interval)
        {
            return Err(self.err(
                t.span(),
                format!(
                    "timeout must be above 0 and at most the interval ({} ms)",
                    interval.as_millis()
                ),
            ));
        }
        let port = match (m.kind, m.port) {
            (_, Some(0)) => return Err(self.err(span, "port 0 cannot be probed")),
            (_, Some(p)) => p,
            (Kind::Rr, None) => SERVE_PORT,
            (Kind::Http, None) => 80,
            (Kind::Trace, None) => 33434,
            (Kind::Syn | Kind::Connect, None) => {
                return Err(self.err(
                    span,
                    format!(
                        "a {} measurement needs a port (e.g. port = 22)",
                        m.kind.name()
                    ),
                ));
            }
        };
        if let Some(u) = &m.url {
            if m.kind != Kind::Http {
                return Err(self.err(u.span(), "url applies only to kind = \"http\""));
            }
            if !(u.get_ref().starts_with("http://") || u.get_ref().starts_with("https://")) {
                return Err(self.err(u.span(), "url must start with http:// or https://"));
            }
        }
        let max_ttl = match &m.max_ttl {
            Some(t) if m.kind != Kind::Trace => {
                return Err(self.err(t.span(), "max_ttl applies only to kind = \"trace\""));
            }
            Some(t) if *t.get_ref() == 0 => {
                return Err(self.err(t.span(), "max_ttl must be between 1 and 255"));
            }
            Some(t) => *t.get_ref(),
            None => 30,
        };
        let size = match &m.size {
            Some(s) if m.kind != Kind::Rr => {
                return Err(self.err(s.span(), "size applies only to kind = \"rr\""));
            }
            Some(s) if *s.get_ref() == 0 || *s.get_ref() > 65_536 => {
                return Err(self.err(s.span(), "size must be between 1 and 65536 bytes"));
            }
            Some(s) => *s.get_ref(),
            None => 64,
        };
        Ok(Measure {
            kind: m.kind,
            port,
            interval,
            timeout,
            url: m.url.map(Spanned::into_inner),
            path: m.path.unwrap_or_else(|| "/".into()),
            max_ttl,
            size,
        })
    }

    fn measures(
        &self,
        raw: Spanned<Vec<Spanned<RawMeasure>>>,
    ) -> Result<Vec<Measure>, ConfigError> {
        let span = raw.span();
        let list = raw.into_inner();
        if list.is_empty() {
            return Err(self.err(
                span,
                "measure is empty: give at least one, e.g. measure = [{ kind = \"connect\", port = 22 }]",
            ));
        }
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for m in list {
            let s = m.span();
            let m = self.measure(m)?;
            if !seen.insert((m.kind, m.port, m.url.clone(), m.path.clone())) {
                return Err(self.err(s, "the same measurement is listed twice"));
            }
            out.push(m);
        }
        Ok(out)
    }

    fn services(&self, raw: Vec<Spanned<RawService>>) -> Result<Vec<Service>, ConfigError> {
        let mut out: Vec<Service> = Vec::new();
        for r in raw {
            let r = r.into_inner();
            let name = r.name.get_ref().clone();
            if name.is_empty() || out.iter().any(|s| s.name == name) {
                return Err(self.err(
                    r.name.span(),
                    format!("service name '{name}' is empty or used twice; names label the series"),
                ));
            }
            if *r.port.get_ref() == 0 {
                return Err(self.err(r.port.span(), "port 0 is not a service's port"));
            }
            let interval = r
                .interval
                .as_ref()
                .map_or(Duration::from_secs(30), |d| d.get_ref().0);
            if interval < Duration::from_secs(1) {
                let span = r.interval.as_ref().map_or(r.port.span(), |d| d.span());
                return Err(self.err(span, "a service's interval must be at least 1s (a scan reads every socket of the port)"));
            }
            out.push(Service {
                name,
                port: *r.port.get_ref(),
                interval,
            });
        }
        Ok(out)
    }

    fn peers(&self, raw: Spanned<RawPeers>) -> Result<Peers, ConfigError> {
        let span = raw.span();
        let p = raw.into_inner();
        let measures = self.measures(p.measure)?;
        let slo = self.slo(p.slo, &measures)?;
        let file = p.file.map(|f| self.relative(f.into_inner()));
        let mut dns: Vec<String> = Vec::new();
        for d in &p.dns {
            let name = d.get_ref().trim();
            if name.is_empty() || name.contains(char::is_whitespace) || name.contains('/') {
                return Err(self.err(
                    d.span(),
                    "a dns entry is a host name (e.g. a headless Service's name)",
                ));
            }
            if !dns.iter().any(|n| n == name) {
                dns.push(name.to_string());
            }
        }
        if file.is_none() && dns.is_empty() {
            return Err(self.err(span, "[peers] needs a file, a dns list, or both"));
        }
        let dns_refresh = p
            .dns_refresh
            .as_ref()
            .map_or(Duration::from_secs(30), |d| d.get_ref().0);
        if let Some(d) = &p.dns_refresh
            && dns_refresh < Duration::from_secs(1)
        {
            return Err(self.err(d.span(), "dns_refresh must be at least 1s"));
        }
        Ok(Peers {
            file,
            dns,
            dns_refresh,
            include_self: p.include_self.unwrap_or(false),
            labels: self.labels(p.labels)?,
            measures,
            slo,
        })
    }

    fn stack(&self, raw: Option<Spanned<RawStack>>) -> Result<Option<Stack>, ConfigError> {
        let Some(r) = raw else { return Ok(None) };
        let r = r.into_inner();
        let mut probes = Vec::new();
        for p in &r.probes {
            let probe = p
                .get_ref()
                .parse::<latscope_core::model::stack::Probe>()
                .map_err(|_| {
                    let all: Vec<&str> = latscope_core::model::stack::Probe::ALL
                        .iter()
                        .map(|p| p.name())
                        .collect();
                    self.err(
                        p.span(),
                        format!(
                            "unknown probe '{}'; the probes are {}",
                            p.get_ref(),
                            all.join(", ")
                        ),
                    )
                })?;
            if !probes.contains(&probe) {
                probes.push(probe);
            }
        }
        let direction = match r
            .direction
            .as_ref()
            .map(|d| (d.get_ref().as_str(), d.span()))
        {
            None | Some(("rx", _)) => latscope_core::model::stack::Directions::Rx,
            Some(("tx", _)) => latscope_core::model::stack::Directions::Tx,
            Some(("both", _)) => latscope_core::model::stack::Directions::Both,
            Some((d, span)) => {
                return Err(self.err(span, format!("direction = '{d}': use rx, tx or both")));
            }
        };
        if let (Some(d), false) = (&r.direction, probes.is_empty()) {
            return Err(self.err(
                d.span(),
                "give either direction or probes (direction picks every probe of a direction)",
            ));
        }
        let hooks = match r.hooks.as_ref().map(|h| (h.get_ref().as_str(), h.span())) {
            None | Some(("auto", _)) => latscope_ebpf::HookMode::Auto,
            Some(("fentry", _)) => latscope_ebpf::HookMode::Fentry,
            Some(("fallback", _)) => latscope_ebpf::HookMode::Fallback,
            Some((h, span)) => {
                return Err(self.err(span, format!("hooks = '{h}': use auto, fentry or fallback")));
            }
        };
        let group_by = match r
            .group_by
            .as_ref()
            .map(|g| (g.get_ref().as_str(), g.span()))
        {
            None | Some(("none", _)) => latscope_core::model::stack::GroupBy::None,
            Some(("interface", _)) => latscope_core::model::stack::GroupBy::Interface,
            Some((g, span)) => {
                return Err(self.err(
                    span,
                    format!("group_by = '{g}': use none or interface (per-cgroup series would grow without bound)"),
                ));
            }
        };
        let sample = match &r.sample {
            Some(s) if *s.get_ref() == 0 => {
                return Err(self.err(s.span(), "sample must be at least 1 (one packet in N)"));
            }
            Some(s) => *s.get_ref(),
            None => 1,
        };
        Ok(Some(Stack {
            probes,
            direction,
            hooks,
            group_by,
            sample,
        }))
    }

    /// A `listen` address (the metrics endpoint's, [evidence]'s), `default` when unset.
    fn listen(
        &self,
        raw: Option<&Spanned<String>>,
        default: SocketAddr,
    ) -> Result<SocketAddr, ConfigError> {
        match raw {
            Some(l) => {
                latscope_exporter::parse_listen_addr(l.get_ref()).map_err(|e| self.err(l.span(), e))
            }
            None => Ok(default),
        }
    }

    /// A path relative to the configuration file's directory.
    fn relative(&self, f: PathBuf) -> PathBuf {
        if f.is_relative() {
            self.file.parent().unwrap_or(Path::new(".")).join(f)
        } else {
            f
        }
    }

    fn evidence(&self, raw: Option<Spanned<RawEvidence>>) -> Result<Option<Evidence>, ConfigError> {
        let Some(r) = raw else { return Ok(None) };
        let span = r.span();
        let r = r.into_inner();
        let Some(auth_file) = r.auth_file else {
            return Err(self.err(
                span,
                "[evidence] needs auth_file: evidence is only given to peers holding the fleet's key (e.g. `head -c 32 /dev/urandom | base64 > fleet.key`)",
            ));
        };
        let Some(ports) = r.ports else {
            return Err(self.err(
                span,
                "[evidence] needs ports: the local ports it reports on, e.g. ports = [80, 443], or \"all\"",
            ));
        };
        let ports_span = ports.span();
        let ports = match ports.into_inner() {
            RawPorts::Word(w) if w.trim() == "all" => latscope_diagnose::remote::server::Ports::Any,
            RawPorts::Word(w) => {
                return Err(self.err(
                    ports_span,
                    format!("ports = \"{w}\": give a list of ports (e.g. [80, 443]) or \"all\""),
                ));
            }
            RawPorts::List(l) if l.is_empty() || l.contains(&0) => {
                return Err(self.err(
                    ports_span,
                    "ports lists the local ports (1–65535) it reports on, at least one; or \"all\"",
                ));
            }
            RawPorts::List(l) => latscope_diagnose::remote::server::Ports::Only(l),
        };
        let listen = self.listen(
            r.listen.as_ref(),
            SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, EVIDENCE_PORT)),
        )?;
        Ok(Some(Evidence {
            auth_file: self.relative(auth_file),
            ports,
            listen,
        }))
    }

    fn diagnose(
        &self,
        raw: Option<Spanned<RawDiagnose>>,
        evidence: Option<&Evidence>,
    ) -> Result<Diagnose, ConfigError> {
        let r = raw.map(Spanned::into_inner);
        let port = r.as_ref().and_then(|r| r.server_agent_port.as_ref());
        if let Some(p) = port
            && *p.get_ref() == 0
        {
            return Err(self.err(p.span(), "server_agent_port must be 1–65535"));
        }
        Ok(Diagnose {
            auth_file: r
                .as_ref()
                .and_then(|r| r.auth_file.clone())
                .map(|f| self.relative(f))
                .or_else(|| evidence.map(|e| e.auth_file.clone())),
            server_agent_port: port.map(|p| *p.get_ref()),
        })
    }

    fn server_agent(&self, raw: Option<Spanned<String>>) -> Result<ServerAgent, ConfigError> {
        let Some(r) = raw else {
            return Ok(ServerAgent::Default);
        };
        let v = r.get_ref().trim();
        if v == "none" {
            return Ok(ServerAgent::Off);
        }
        match latscope_net::sock::Target::parse(v, EVIDENCE_PORT) {
            Ok(t @ latscope_net::sock::Target::Inet { .. }) => Ok(ServerAgent::At(t.to_string())),
            _ => Err(self.err(
                r.span(),
                format!("server_agent = \"{v}\": write HOST[:PORT] of the target's agent (port {EVIDENCE_PORT} by default), or \"none\""),
            )),
        }
    }

    fn slo(
        &self,
        raw: Option<Spanned<RawSlo>>,
        measures: &[Measure],
    ) -> Result<Option<Slo>, ConfigError> {
        let Some(raw) = raw else { return Ok(None) };
        let span = raw.span();
        let r = raw.into_inner();
        let kind = match &r.kind {
            Some(k) => {
                if !measures.iter().any(|m| m.kind == *k.get_ref()) {
                    return Err(self.err(
                        k.span(),
                        format!(
                            "slo kind '{}' is not among this target's measurements",
                            k.get_ref().name()
                        ),
                    ));
                }
                *k.get_ref()
            }
            None => measures
                .iter()
                .map(|m| m.kind)
                .find(|k| *k != Kind::Trace)
                .ok_or_else(|| {
                    self.err(span.clone(), "an slo needs a measurement other than trace")
                })?,
        };
        if kind == Kind::Trace {
            return Err(self.err(span, "an slo cannot be on trace (per-hop figures)"));
        }
        let quantile = r.quantile.as_ref().map_or(0.99, |q| *q.get_ref());
        if let Some(q) = &r.quantile
            && !(q.get_ref() > &0.0 && q.get_ref() < &1.0)
        {
            return Err(self.err(
                q.span(),
                "quantile must be strictly between 0 and 1 (e.g. 0.99)",
            ));
        }
        Ok(Some(Slo {
            kind,
            quantile,
            threshold: r.threshold.0,
            window: r.window.map_or(Duration::from_secs(300), |d| d.0),
            min_samples: r.min_samples.unwrap_or(10).max(1),
            cooldown: r.cooldown.map_or(Duration::from_secs(600), |d| d.0),
        }))
    }
}

/// The syntax of a configuration file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// TOML (`.toml`, and any other extension).
    Toml,
    /// YAML (`.yaml` or `.yml`).
    Yaml,
}

impl Format {
    /// The format a file's extension selects: `.yaml`/`.yml` are YAML, anything else TOML.
    pub fn of(file: &Path) -> Format {
        match file.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml") => {
                Format::Yaml
            }
            _ => Format::Toml,
        }
    }
}

fn parse_raw(file: &Path, text: &str, format: Format) -> Result<RawConfig, ConfigError> {
    match format {
        Format::Toml => toml::from_str(text).map_err(|e| {
            // toml's message repeats the line with a caret; keep its first line, and say where.
            let msg = e.message().to_string();
            at(file, text, e.span(), msg)
        }),
        Format::Yaml => crate::yaml::from_str(text)
            .map_err(|e| at(file, text, e.offset.map(|o| o..o), e.message)),
    }
}

/// Parse and validate a configuration file's text, in the format its extension selects
/// ([`Format::of`]).
pub fn parse(file: &Path, text: &str) -> Result<Config, ConfigError> {
    parse_as(file, text, Format::of(file))
}

/// Parse and validate a configuration's text in `format`; errors name `file`, line and column.
pub fn parse_as(file: &Path, text: &str, format: Format) -> Result<Config, ConfigError> {
    let raw = parse_raw(file, text, format)?;
    let c = Ctx { file, text };
    let listen = c.listen(
        raw.listen.as_ref(),
        SocketAddr::from(([127, 0, 0, 1], latscope_exporter::DEFAULT_PORT)),
    )?;
    let jitter = raw.jitter.as_ref().map_or(0.2, |j| *j.get_ref());
    if let Some(j) = &raw.jitter
        && !(0.0..=1.0).contains(j.get_ref())
    {
        return Err(c.err(
            j.span(),
            "jitter must be between 0 and 1 (a fraction of the interval)",
        ));
    }
    let evidence = c.evidence(raw.evidence)?;
    let diagnose = c.diagnose(raw.diagnose, evidence.as_ref())?;
    let mut names = BTreeSet::new();
    let mut targets = Vec::new();
    for t in raw.target {
        let span = t.span();
        let t = t.into_inner();
        let address = t.address.get_ref().trim().to_string();
        if address.is_empty() || address.contains(char::is_whitespace) {
            return Err(c.err(
                t.address.span(),
                "address must be a host name or an IP address",
            ));
        }
        let name = t
            .name
            .as_ref()
            .map_or(address.clone(), |n| n.get_ref().clone());
        if !names.insert(name.clone()) {
            let s = t.name.as_ref().map_or(span, |n| n.span());
            return Err(c.err(
                s,
                format!(
                    "two targets are named '{name}'; names label the series and must be unique"
                ),
            ));
        }
        let measures = c.measures(t.measure)?;
        let slo = c.slo(t.slo, &measures)?;
        let agent_span = t.server_agent.as_ref().map(Spanned::span);
        let server_agent = diagnose.server_agent_of(&address, &c.server_agent(t.server_agent)?);
        if let (Some(s), Some(_), None) = (agent_span, &server_agent, &diagnose.auth_file) {
            return Err(c.err(s, NO_ASK_KEY));
        }
        targets.push(Target {
            name,
            address,
            labels: c.labels(t.labels)?,
            measures,
            slo,
            server_agent,
        });
    }
    if diagnose.server_agent_port.is_some() && diagnose.auth_file.is_none() {
        return Err(at(file, text, None, NO_ASK_KEY.into()));
    }
    let peers = match raw.peers {
        None => None,
        Some(p) => Some(c.peers(p)?),
    };
    let services = c.services(raw.service)?;
    let stack = c.stack(raw.stack)?;
    if targets.is_empty()
        && peers.is_none()
        && services.is_empty()
        && stack.is_none()
        && evidence.is_none()
    {
        return Err(at(
            file,
            text,
            None,
            "nothing to measure: add a [[target]], a [peers], a [[service]], a [stack] or an [evidence] section"
                .into(),
        ));
    }
    Ok(Config {
        listen,
        findings_log: raw.findings_log,
        jitter,
        probe_endpoint: raw.probe_endpoint.unwrap_or(true),
        targets,
        peers,
        services,
        stack,
        evidence,
        diagnose,
    })
}

/// A target asks its agent for evidence, and no key says how to prove it belongs to the fleet.
const NO_ASK_KEY: &str = "asking a target's agent for evidence needs the fleet's key: set [diagnose] auth_file (or [evidence] auth_file)";

impl Diagnose {
    /// Where a target at `address` has its agent: its own `server_agent`, else the target's
    /// address on `server_agent_port`, else none.
    pub fn server_agent_of(&self, address: &str, own: &ServerAgent) -> Option<String> {
        match own {
            ServerAgent::Off => None,
            ServerAgent::At(a) => Some(a.clone()),
            ServerAgent::Default => self.server_agent_port.map(|port| {
                latscope_net::sock::Target::Inet {
                    host: address.trim_matches(['[', ']']).to_string(),
                    port,
                }
                .to_string()
            }),
        }
    }
}

/// Read and validate a configuration file.
pub fn load(file: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(file).map_err(|e| ConfigError {
        file: file.to_path_buf(),
        line: 0,
        column: 0,
        message: format!("cannot read it: {e}"),
    })?;
    parse(file, &text)
}

/// One peer of a peer list: `ADDRESS [NAME] [key=value ...]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Host name or address.
    pub address: String,
    /// The `target` label (default: the address).
    pub name: String,
    /// Labels of this line.
    pub labels: BTreeMap<String, String>,
}

/// Parse a peer list: one peer per line, `#` comments, blank lines ignored. A duplicate name or
/// a bad label is an error naming its line (the caller keeps the previous list).
pub fn parse_peers(file: &Path, text: &str) -> Result<Vec<Peer>, ConfigError> {
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let content = line.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let e = |column: usize, message: String| ConfigError {
            file: file.to_path_buf(),
            line: i + 1,
            column,
            message,
        };
        let mut words = content.split_whitespace();
        let address = words.next().unwrap_or_default().to_string();
        if let Some(port) = names_a_port(&address) {
            return Err(e(
                line.find(&address).map_or(1, |c| c + 1),
                format!(
                    "'{address}' names port {port}: a peer line gives the address alone (each measure of [peers] has its own port = …)"
                ),
            ));
        }
        let mut name = None;
        let mut labels = BTreeMap::new();
        for w in words {
            let col = line.find(w).map_or(1, |c| c + 1);
            match w.split_once('=') {
                Some((k, v)) => {
                    if !valid_label_name(k) || RESERVED.contains(&k) {
                        return Err(e(
                            col,
                            format!(
                                "'{k}' cannot be a label name here (reserved or not a Prometheus label name)"
                            ),
                        ));
                    }
                    labels.insert(k.to_string(), v.to_string());
                }
                None if name.is_none() => name = Some(w.to_string()),
                None => {
                    return Err(e(
                        col,
                        format!("unexpected '{w}': a line is ADDRESS [NAME] [label=value ...]"),
                    ));
                }
            }
        }
        let name = name.unwrap_or_else(|| address.clone());
        if !names.insert(name.clone()) {
            return Err(e(1, format!("peer '{name}' is listed twice")));
        }
        out.push(Peer {
            address,
            name,
            labels,
        });
    }
    Ok(out)
}

/// The port of a `HOST:PORT` or `[V6]:PORT` word, which would otherwise be looked up as a host
/// name and fail as DNS; a bare IPv6 address (`fe80::1`) names none.
fn names_a_port(address: &str) -> Option<u16> {
    if let Ok(sa) = address.parse::<std::net::SocketAddr>() {
        return Some(sa.port());
    }
    let (host, port) = address.rsplit_once(':')?;
    (!host.contains(':') && !host.is_empty())
        .then(|| port.parse::<u16>().ok())
        .flatten()
}

impl Config {
    /// Read the key files the configuration names, as the agent will (`file`: the
    /// configuration, for the message): a missing, empty or world-readable key is an error of
    /// `--check`, not of the first diagnose run.
    pub fn check_keys(&self, file: &Path) -> Result<(), ConfigError> {
        let keys = [
            (
                "[evidence] auth_file",
                self.evidence.as_ref().map(|e| &e.auth_file),
            ),
            ("[diagnose] auth_file", self.diagnose.auth_file.as_ref()),
        ];
        for (what, path) in keys {
            if let Some(p) = path {
                latscope_net::auth::AuthKey::from_file(p).map_err(|e| ConfigError {
                    file: file.to_path_buf(),
                    line: 0,
                    column: 0,
                    message: format!("{what}: {e}"),
                })?;
            }
        }
        Ok(())
    }

    /// The targets of the file plus one per peer (a peer named like a file target is skipped:
    /// the file's own definition wins).
    pub fn all_targets(&self, peers: &[Peer]) -> Vec<Target> {
        let mut out = self.targets.clone();
        if let Some(p) = &self.peers {
            for peer in peers {
                if out.iter().any(|t| t.name == peer.name) {
                    continue;
                }
                let mut labels = p.labels.clone();
                labels.extend(peer.labels.clone());
                out.push(Target {
                    name: peer.name.clone(),
                    address: peer.address.clone(),
                    labels,
                    measures: p.measures.clone(),
                    slo: p.slo.clone(),
                    server_agent: self
                        .diagnose
                        .server_agent_of(&peer.address, &ServerAgent::Default),
                });
            }
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn err(text: &str) -> ConfigError {
        parse(Path::new("agent.toml"), text).unwrap_err()
    }

    /// The same configuration in TOML and in YAML, read alike (paths relative to /etc/latscope).
    fn in_both(toml: &str, yaml: &str) -> Config {
        let dir = Path::new("/etc/latscope");
        let t = parse(&dir.join("agent.toml"), toml).unwrap();
        assert_eq!(parse(&dir.join("agent.yaml"), yaml).unwrap(), t);
        t
    }

    #[test]
    fn a_full_config_parses_with_defaults() {
        let c = in_both(TOML_FULL, YAML_FULL);
        assert_eq!(c.listen, "0.0.0.0:9573".parse().unwrap());
        let t = &c.targets[0];
        assert_eq!(t.name, "10.0.0.2");
        assert_eq!(t.measures[0].interval, Duration::from_secs(2));
        assert_eq!(t.measures[0].timeout, Duration::from_millis(500));
        assert_eq!(t.measures[1].port, SERVE_PORT);
        assert_eq!(t.measures[2].interval, Duration::from_secs(60));
        let slo = t.slo.as_ref().unwrap();
        assert_eq!((slo.kind, slo.quantile), (Kind::Connect, 0.99));
        assert_eq!(slo.window, Duration::from_secs(300));
        let p = c.peers.as_ref().unwrap();
        assert_eq!(p.file, Some(PathBuf::from("/etc/latscope/peers.txt")));
        assert!(p.dns.is_empty());
        let peers = parse_peers(Path::new("p"), "10.0.0.3 b zone=x\n# c\n\n10.0.0.4\n").unwrap();
        // A port on a peer line is refused by name, not looked up as a host "10.0.0.5:7373".
        for (line, port) in [
            ("10.0.0.5:7373", 7373),
            ("db1:5432 db", 5432),
            ("[::1]:80", 80),
        ] {
            let err = parse_peers(Path::new("p"), line).unwrap_err().to_string();
            assert!(err.contains(&format!("names port {port}")), "{line}: {err}");
        }
        assert!(parse_peers(Path::new("p"), "fe80::1 v6\n::1\n").is_ok());
        let all = c.all_targets(&peers);
        assert_eq!(all.len(), 3);
        assert_eq!(all[1].name, "b");
        assert_eq!(all[1].labels["zone"], "x");
        assert_eq!(all[2].name, "10.0.0.4");
        assert_eq!(all[2].measures[0].port, 7000);
    }

    #[test]
    fn errors_name_the_line_and_the_remedy() {
        let e = err("[[target]]\naddress = \"a\"\nmeasure = [{ kind = \"ping\" }]\n");
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("unknown variant `ping`"), "{e}");
        assert!(e.message.contains("connect"), "{e}");

        let e = err("[[target]]\naddress = \"a\"\n\nmeasure = [{ kind = \"connect\" }]\n");
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("needs a port"), "{e}");

        let e = err(
            "[[target]]\naddress = \"a\"\nmeasure = [\n  { kind = \"rr\", interval = \"1s\", timeout = \"2s\" },\n]\n",
        );
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("at most the interval"), "{e}");

        let e = err(
            "[[target]]\naddress = \"a\"\nmeasure = [{ kind = \"rr\", interval = \"fast\" }]\n",
        );
        assert_eq!(e.line, 3, "{e}");
        assert!(e.to_string().starts_with("agent.toml:3:"), "{e}");

        let e = err("[[target]]\naddress = \"a\"\nmeasure = [{ kind = \"rr\" }]\ncolour = 1\n");
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("unknown field `colour`"), "{e}");

        let e = err(
            "[[target]]\naddress = \"a\"\nlabels = { kind = \"x\" }\nmeasure = [{ kind = \"rr\" }]\n",
        );
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("set by the agent"), "{e}");

        let e = err(
            "[[target]]\naddress = \"a\"\nmeasure = [{ kind = \"rr\" }]\n[[target]]\naddress = \"a\"\nmeasure = [{ kind = \"rr\" }]\n",
        );
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("two targets are named 'a'"), "{e}");

        let e = err(
            "[[target]]\naddress = \"a\"\nmeasure = [{ kind = \"rr\" }]\nslo = { kind = \"http\", threshold = \"1ms\" }\n",
        );
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("not among"), "{e}");

        let e = err(
            "[[target]]\naddress = \"a\"\nmeasure = [{ kind = \"rr\" }]\nslo = { quantile = 99, threshold = \"1ms\" }\n",
        );
        assert_eq!(e.line, 4, "{e}");

        let e = err("listen = \"nowhere:x\"\n[[target]]\naddress = \"a\"\nmeasure = []\n");
        assert_eq!(e.line, 1, "{e}");

        let e = err("[[target]]\naddress = \"a\"\nmeasure = []\n");
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("at least one"), "{e}");

        let e = err("jitter = 0.5\n");
        assert_eq!(e.line, 0, "{e}");
        assert!(e.message.contains("nothing to measure"), "{e}");
    }

    const TOML_FULL: &str = r#"
listen = "0.0.0.0:9573"
jitter = 0.1
[[target]]
address = "10.0.0.2"
labels = { zone = "a" }
measure = [
  { kind = "connect", port = 22, interval = "2s", timeout = "500ms" },
  { kind = "rr" },
  { kind = "trace" },
]
slo = { threshold = "5ms" }
[peers]
file = "peers.txt"
measure = [{ kind = "rr", port = 7000 }]
"#;

    const YAML_FULL: &str = "
listen: 0.0.0.0:9573
jitter: 0.1
target:
  - address: 10.0.0.2
    labels: { zone: a }
    measure:
      - { kind: connect, port: 22, interval: 2s, timeout: 500ms }
      - kind: rr
      - kind: trace
    slo: { threshold: 5ms }
peers:
  file: peers.txt
  measure: [{ kind: rr, port: 7000 }]
";

    #[test]
    fn yaml_is_the_same_configuration() {
        let dir = Path::new("/etc/latscope");
        assert_eq!(Format::of(Path::new("a.YML")), Format::Yaml);
        assert_eq!(Format::of(Path::new("a.conf")), Format::Toml);
        // The same YAML read as TOML fails: the extension decides.
        assert!(parse(&dir.join("agent.toml"), YAML_FULL).is_err());
    }

    fn yaml_err(text: &str) -> ConfigError {
        parse(Path::new("agent.yaml"), text).unwrap_err()
    }

    #[test]
    fn yaml_errors_name_the_line_and_column() {
        let e = yaml_err("target:\n  - address: a\n    measure: [{ kind: ping }]\n");
        assert_eq!((e.line, e.column), (3, 23), "{e}");
        assert!(e.message.contains("unknown variant `ping`"), "{e}");
        assert!(e.to_string().starts_with("agent.yaml:3:23: "), "{e}");

        let e = yaml_err("target:\n  - address: a\n\n    measure:\n      - kind: connect\n");
        assert_eq!((e.line, e.column), (5, 9), "{e}");
        assert!(e.message.contains("needs a port"), "{e}");

        let e = yaml_err("target:\n  - address: a\n    measure: [{ kind: rr }]\n    colour: 1\n");
        assert_eq!((e.line, e.column), (4, 5), "{e}");
        assert!(e.message.contains("unknown field `colour`"), "{e}");

        let e = yaml_err(
            "target:\n  - address: a\n    measure:\n      - kind: rr\n        interval: fast\n",
        );
        assert_eq!((e.line, e.column), (5, 19), "{e}");

        let e = yaml_err(
            "target:\n  - address: a\n    labels: { kind: x }\n    measure: [{ kind: rr }]\n",
        );
        assert_eq!((e.line, e.column), (3, 15), "{e}");
        assert!(e.message.contains("set by the agent"), "{e}");

        let e = yaml_err("target:\n  - address: a\n    measure: [{ kind: rr }\n");
        assert!(e.line >= 3, "{e}");
        assert!(e.message.contains("YAML syntax"), "{e}");

        let e = yaml_err("target:\n  - address: a\n    measure: [{ kind: rr, size: -1 }]\n");
        assert_eq!(e.line, 3, "{e}");

        let e = yaml_err("jitter: 0.5\n");
        assert_eq!(e.line, 0, "{e}");
        assert!(e.message.contains("nothing to measure"), "{e}");

        let e = yaml_err("");
        assert!(e.message.contains("nothing to measure"), "{e}");
    }

    #[test]
    fn services_are_validated() {
        let c = parse(
            Path::new("a.toml"),
            "[[service]]\nname = \"nginx\"\nport = 80\n[[service]]\nname = \"db\"\nport = 5432\ninterval = \"5s\"\n",
        )
        .unwrap();
        assert_eq!(c.services.len(), 2);
        assert_eq!(c.services[0].interval, Duration::from_secs(30));
        assert_eq!(c.services[1].interval, Duration::from_secs(5));
        let e = err("[[service]]\nname = \"a\"\nport = 80\n[[service]]\nname = \"a\"\nport = 81\n");
        assert_eq!(e.line, 5, "{e}");
        let e = err("[[service]]\nname = \"a\"\nport = 80\ninterval = \"100ms\"\n");
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("at least 1s"), "{e}");
        let y = parse(
            Path::new("a.yaml"),
            "service:\n  - { name: nginx, port: 80 }\n",
        )
        .unwrap();
        assert_eq!(y.services, c.services[..1]);
    }

    #[test]
    fn peers_from_dns_are_validated() {
        let measure = "measure = [{ kind = \"connect\", port = 7373 }]\n";
        let c = parse(
            Path::new("a.toml"),
            &format!("[peers]\ndns = [\"svc.ns.svc.cluster.local\", \"svc.ns.svc.cluster.local\"]\n{measure}"),
        )
        .unwrap();
        let p = c.peers.unwrap();
        assert_eq!((p.file, p.dns.len()), (None, 1));
        assert_eq!(p.dns_refresh, Duration::from_secs(30));
        assert!(!p.include_self);
        let e = err(&format!("[peers]\n{measure}"));
        assert!(
            e.message.contains("needs a file, a dns list, or both"),
            "{e}"
        );
        let e = err(&format!("[peers]\ndns = [\"a b\"]\n{measure}"));
        assert_eq!(e.line, 2, "{e}");
        let e = err(&format!(
            "[peers]\ndns = [\"a\"]\ndns_refresh = \"10ms\"\n{measure}"
        ));
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("at least 1s"), "{e}");
    }

    #[test]
    fn stack_section_is_validated() {
        let c = parse(
            Path::new("a.toml"),
            "[stack]\nprobes = [\"tcp-socket-read\", \"ip-start\", \"tcp-socket-read\"]\nhooks = \"fallback\"\ngroup_by = \"interface\"\nsample = 4\n",
        )
        .unwrap();
        let s = c.stack.unwrap();
        assert_eq!(
            s.probes,
            [
                latscope_core::model::stack::Probe::TcpSocketRead,
                latscope_core::model::stack::Probe::IpStart
            ]
        );
        assert_eq!(s.hooks, latscope_ebpf::HookMode::Fallback);
        assert_eq!(s.group_by, latscope_core::model::stack::GroupBy::Interface);
        assert_eq!(s.sample, 4);
        // An empty section: every probe, auto hooks, one histogram per probe, every packet.
        let d = parse(Path::new("a.toml"), "[stack]\n")
            .unwrap()
            .stack
            .unwrap();
        assert!(d.probes.is_empty());
        assert_eq!(d.direction, latscope_core::model::stack::Directions::Rx);
        assert_eq!(d.hooks, latscope_ebpf::HookMode::Auto);
        let both = parse(Path::new("a.toml"), "[stack]\ndirection = \"both\"\n")
            .unwrap()
            .stack
            .unwrap();
        assert_eq!(
            both.direction,
            latscope_core::model::stack::Directions::Both
        );
        let e = err("[stack]\ndirection = \"out\"\n");
        assert!(e.message.contains("rx, tx or both"), "{e}");
        let e = err("[stack]\ndirection = \"tx\"\nprobes = [\"qdisc\"]\n");
        assert!(e.message.contains("either direction or probes"), "{e}");
        assert_eq!(
            (d.group_by, d.sample),
            (latscope_core::model::stack::GroupBy::None, 1)
        );
        let e = err("[stack]\nprobes = [\"tcp-read\"]\n");
        assert_eq!((e.line, e.column), (2, 11), "{e}");
        assert!(e.message.contains("tcp-socket-read"), "{e}");
        let e = err("[stack]\nhooks = \"kprobe\"\n");
        assert_eq!(e.line, 2, "{e}");
        assert!(e.message.contains("auto, fentry or fallback"), "{e}");
        let e = err("[stack]\ngroup_by = \"cgroup\"\n");
        assert!(e.message.contains("none or interface"), "{e}");
        let e = err("[stack]\nsample = 0\n");
        assert_eq!(e.line, 2, "{e}");
        let e = err("[stack]\nprobe = [\"ip-start\"]\n");
        assert!(e.message.contains("unknown field"), "{e}");
        let y = parse(
            Path::new("a.yaml"),
            "stack:\n  probes: [ip-start]\n  hooks: auto\n",
        )
        .unwrap();
        assert_eq!(
            y.stack.unwrap().probes,
            [latscope_core::model::stack::Probe::IpStart]
        );
    }

    #[test]
    fn evidence_and_diagnose_sections_are_validated() {
        use latscope_diagnose::remote::server::Ports;
        let c = parse(
            Path::new("/etc/latscope/agent.toml"),
            "[evidence]\nauth_file = \"fleet.key\"\nports = [80, 443]\n\
             [diagnose]\nserver_agent_port = 7400\n\
             [[target]]\naddress = \"10.0.0.2\"\nmeasure = [{ kind = \"rr\" }]\n\
             [[target]]\naddress = \"fe80::1\"\nmeasure = [{ kind = \"rr\" }]\n\
             [[target]]\naddress = \"db\"\nmeasure = [{ kind = \"rr\" }]\nserver_agent = \"db-host\"\n\
             [[target]]\naddress = \"lb\"\nmeasure = [{ kind = \"rr\" }]\nserver_agent = \"none\"\n",
        )
        .unwrap();
        let e = c.evidence.as_ref().unwrap();
        assert_eq!(e.auth_file, PathBuf::from("/etc/latscope/fleet.key"));
        assert_eq!(e.ports, Ports::Only(vec![80, 443]));
        assert_eq!(e.listen, "[::]:7374".parse().unwrap());
        // The asking key defaults to the endpoint's: one shared key for the fleet.
        assert_eq!(c.diagnose.auth_file, Some(e.auth_file.clone()));
        let agents: Vec<Option<&str>> = c
            .targets
            .iter()
            .map(|t| t.server_agent.as_deref())
            .collect();
        assert_eq!(
            agents,
            [
                Some("10.0.0.2:7400"),
                Some("[fe80::1]:7400"),
                Some("db-host:7374"),
                None
            ]
        );
        // Peers get the fleet-wide default.
        let peers = [Peer {
            address: "10.0.0.3".into(),
            name: "c".into(),
            labels: BTreeMap::new(),
        }];
        let c2 = parse(
            Path::new("a.toml"),
            "[diagnose]\nauth_file = \"k\"\nserver_agent_port = 7374\n[peers]\nfile = \"p\"\nmeasure = [{ kind = \"rr\" }]\n",
        )
        .unwrap();
        assert_eq!(
            c2.all_targets(&peers)[0].server_agent.as_deref(),
            Some("10.0.0.3:7374")
        );
        // The same in YAML, "all" ports, and an [evidence] alone is something to do.
        let both = in_both(
            "[evidence]\nauth_file = \"k\"\nports = \"all\"\nlisten = \"0.0.0.0:7380\"\n\
             [diagnose]\nserver_agent_port = 7400\n",
            "evidence:\n  auth_file: k\n  ports: all\n  listen: 0.0.0.0:7380\n\
             diagnose:\n  server_agent_port: 7400\n",
        );
        let e = both.evidence.unwrap();
        assert_eq!((e.ports, e.listen.port()), (Ports::Any, 7380));
        assert_eq!(e.auth_file, PathBuf::from("/etc/latscope/k"));
        assert_eq!(both.diagnose.server_agent_port, Some(7400));

        let e = err("[evidence]\nports = [80]\n");
        assert!(e.message.contains("needs auth_file"), "{e}");
        let e = err("[evidence]\nauth_file = \"k\"\n");
        assert!(e.message.contains("needs ports"), "{e}");
        let e = err("[evidence]\nauth_file = \"k\"\nports = \"some\"\n");
        assert_eq!(e.line, 3, "{e}");
        let e = err("[evidence]\nauth_file = \"k\"\nports = [0]\n");
        assert_eq!(e.line, 3, "{e}");
        let e = err("[evidence]\nauth_file = \"k\"\nports = [70000]\n");
        assert_eq!(e.line, 3, "{e}");
        let e = err("[evidence]\nauth_file = \"k\"\nports = []\n");
        assert!(e.message.contains("at least one"), "{e}");
        let e = err("[evidence]\nauth_file = \"k\"\nports = [80]\nkey = 1\n");
        assert!(e.message.contains("unknown field"), "{e}");
        let e = err(
            "[diagnose]\nserver_agent_port = 7374\n[[target]]\naddress = \"a\"\nmeasure = [{ kind = \"rr\" }]\n",
        );
        assert!(e.message.contains("needs the fleet's key"), "{e}");
        let e = err(
            "[[target]]\naddress = \"a\"\nmeasure = [{ kind = \"rr\" }]\nserver_agent = \"a:7374\"\n",
        );
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("needs the fleet's key"), "{e}");
        let e = err(
            "[diagnose]\nauth_file = \"k\"\n[[target]]\naddress = \"a\"\nmeasure = [{ kind = \"rr\" }]\nserver_agent = \"a:x\"\n",
        );
        assert_eq!(e.line, 6, "{e}");
        assert!(e.message.contains("HOST[:PORT]"), "{e}");
        for reserved in ["side", "ends", "state"] {
            let e = err(&format!(
                "[[target]]\naddress = \"a\"\nlabels = {{ {reserved} = \"x\" }}\nmeasure = [{{ kind = \"rr\" }}]\n"
            ));
            assert!(e.message.contains("set by the agent"), "{reserved}: {e}");
        }
    }

    #[test]
    fn peer_list_errors_name_the_line() {
        let e = parse_peers(Path::new("peers"), "a\nb\na\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("listed twice"));
        let e = parse_peers(Path::new("peers"), "a name other\n").unwrap_err();
        assert_eq!((e.line, e.column), (1, 8), "{e}");
        let e = parse_peers(Path::new("peers"), "a kind=x\n").unwrap_err();
        assert!(e.message.contains("'kind'"), "{e}");
    }
}
