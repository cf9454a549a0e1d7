//! The agent's metric families and the bucket ladder.
//!
//! Bucket ladder ([`BUCKETS`]): powers of two from 2 µs to 2^26 µs (67 s), 26 buckets. A µs-scale
//! loopback RTT and a second-scale WAN or timeout-bound figure both land in a bucket at most 2×
//! wide, so `histogram_quantile` is within a factor 2 everywhere (usually far better: it
//! interpolates inside the bucket), at 29 series per histogram.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::config::Target;
use crate::measure::Outcome;

/// Upper bounds of the latency buckets, seconds: 2 µs × 2^k, k = 0…25 (2 µs … 67.1 s).
pub const BUCKETS: [f64; 26] = {
    let mut b = [0.0; 26];
    let mut k = 0;
    while k < 26 {
        b[k] = 2e-6 * (1u64 << k) as f64;
        k += 1;
    }
    b
};

/// The series created for each target (family, labels).
type SeriesByTarget = HashMap<String, HashSet<(Fam, Labels)>>;

/// A series' labels: `target`, then kind/layer/…, then the target's own labels.
pub type Labels = Vec<(String, String)>;

fn new_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

type Hist = Family<Labels, Histogram, fn() -> Histogram>;

/// Every family the agent exports.
#[derive(Clone)]
pub struct Metrics {
    /// `latscope_latency_seconds{target,kind,layer}`.
    pub latency: Hist,
    /// `latscope_probes_total{target,kind}`.
    pub probes: Family<Labels, Counter>,
    /// `latscope_probe_failures_total{target,kind,reason}`.
    pub failures: Family<Labels, Counter>,
    /// `latscope_hop_latency_seconds{target,hop,address}`.
    pub hop_latency: Hist,
    /// `latscope_hop_lost_total{target,hop}`.
    pub hop_lost: Family<Labels, Counter>,
    /// `latscope_slo_breached{target,kind}`: 1 while the windowed quantile is above the bound.
    pub slo_breached: Family<Labels, Gauge>,
    /// `latscope_slo_quantile_seconds{target,kind}`: the windowed quantile last computed.
    pub slo_quantile: Family<Labels, Gauge<f64, AtomicU64>>,
    /// `latscope_finding{target,rule,side,ends}`: 1 for each finding of the last diagnose run.
    pub finding: Family<Labels, Gauge>,
    /// `latscope_finding_explains_seconds{target,rule,side,ends}`: the latency per request each
    /// finding of the last run explains.
    pub finding_explains: Family<Labels, Gauge<f64, AtomicU64>>,
    /// `latscope_diagnose_server_agent{target,state}`: 1 for what the target's agent gave the
    /// last run (`used`, `failed`, `not_configured`).
    pub diagnose_server_agent: Family<Labels, Gauge>,
    /// `latscope_evidence_requests_total{result}`: the `[evidence]` endpoint's requests,
    /// `answered` or `refused`.
    pub evidence_requests: Family<Labels, Counter>,
    /// `latscope_diagnose_runs_total{target,result}`.
    pub diagnose_runs: Family<Labels, Counter>,
    /// `latscope_agent_config_reloads_total{result}`.
    pub reloads: Family<Labels, Counter>,
    /// `latscope_agent_targets`.
    pub targets: Gauge,
    /// `latscope_socket_finding{service,rule,severity}`: sockets with the finding, last scan.
    pub socket_finding: Family<Labels, Gauge>,
    /// `latscope_service_sockets{service,state}`: the service's sockets, last scan.
    pub service_sockets: Family<Labels, Gauge>,
    /// `latscope_socket_scans_total{service,result}`.
    pub socket_scans: Family<Labels, Counter>,
    /// The kernel stack histograms (`latscope_stack_<probe>_seconds{hook,interface}`), fed by
    /// [`crate::stack`]; empty without `[stack]`.
    pub stack: Arc<latscope_ebpf::prometheus::StackCollector>,
    /// `latscope_stack_probes{state}`: probes attached / unavailable.
    pub stack_probes: Family<Labels, Gauge>,
    /// `latscope_stack_unavailable{reason,missing}`: 1 when eBPF could not start at all.
    pub stack_unavailable: Family<Labels, Gauge>,
    /// Series created per target, for [`Metrics::forget`].
    seen: Arc<Mutex<SeriesByTarget>>,
    /// Per target, the trace rounds since each `latscope_hop_latency_seconds` series was last
    /// fed (see [`HOP_EXPIRY_ROUNDS`]).
    hop_age: Arc<Mutex<HashMap<String, HashMap<Labels, u32>>>>,
}

/// A `(hop, address)` series that no trace round of its target fed for this many rounds is
/// removed: a path that changes (ECMP, a reroute, a renumbered router) would otherwise leave one
/// histogram per address it ever used, growing for as long as the agent runs. At the default
/// 1-minute trace cadence that is 30 minutes.
pub const HOP_EXPIRY_ROUNDS: u32 = 30;

/// The agent's own cost, read at each scrape: CPU time (user + system, getrusage) and RSS.
#[derive(Debug)]
struct SelfCost;

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct we pass; RUSAGE_SELF needs no privilege.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: see above; a valid pointer to a rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Resident set size in bytes (/proc/self/statm, second field, in pages).
pub fn rss_bytes() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |p| p * page)
}

fn threads() -> i64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

impl Collector for SelfCost {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let c = ConstCounter::new(cpu_seconds());
        c.encode(encoder.encode_descriptor(
            "latscope_agent_cpu_seconds",
            "CPU time the agent used (user + system)",
            None,
            MetricType::Counter,
        )?)?;
        let g = ConstGauge::new(rss_bytes() as i64);
        g.encode(encoder.encode_descriptor(
            "latscope_agent_resident_memory_bytes",
            "The agent's resident set size",
            None,
            MetricType::Gauge,
        )?)?;
        let g = ConstGauge::new(threads());
        g.encode(encoder.encode_descriptor(
            "latscope_agent_threads",
            "The agent's threads (one per measurement, plus the server's)",
            None,
            MetricType::Gauge,
        )?)?;
        Ok(())
    }
}

impl Metrics {
    /// The families, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            latency: Family::new_with_constructor(new_histogram as fn() -> Histogram),
            probes: Family::default(),
            failures: Family::default(),
            hop_latency: Family::new_with_constructor(new_histogram as fn() -> Histogram),
            hop_lost: Family::default(),
            slo_breached: Family::default(),
            slo_quantile: Family::default(),
            finding: Family::default(),
            finding_explains: Family::default(),
            diagnose_server_agent: Family::default(),
            evidence_requests: Family::default(),
            diagnose_runs: Family::default(),
            reloads: Family::default(),
            targets: Gauge::default(),
            socket_finding: Family::default(),
            service_sockets: Family::default(),
            socket_scans: Family::default(),
            stack: Arc::default(),
            stack_probes: Family::default(),
            stack_unavailable: Family::default(),
            seen: Arc::default(),
            hop_age: Arc::default(),
        };
        registry.register(
            "latscope_latency_seconds",
            "Latency of each probe, by target, kind (syn, connect, rr, http, trace) and layer (tcp_handshake, application, dns, tls_handshake, ttfb, transfer, total, path)",
            m.latency.clone(),
        );
        registry.register(
            "latscope_probes",
            "Probes sent, by target and kind",
            m.probes.clone(),
        );
        registry.register(
            "latscope_probe_failures",
            "Probes without a sample, by reason: timeout (lost), refused, unreachable, dns, error",
            m.failures.clone(),
        );
        registry.register(
            "latscope_hop_latency_seconds",
            "Trace: RTT to each hop (TTL) and the address that answered",
            m.hop_latency.clone(),
        );
        registry.register(
            "latscope_hop_lost",
            "Trace: probes to a hop that got no answer",
            m.hop_lost.clone(),
        );
        registry.register(
            "latscope_slo_breached",
            "1 while the target's windowed quantile is above its SLO threshold",
            m.slo_breached.clone(),
        );
        registry.register(
            "latscope_slo_quantile_seconds",
            "The target's windowed quantile (the SLO's) last computed",
            m.slo_quantile.clone(),
        );
        registry.register(
            "latscope_finding",
            "Findings of the last diagnose run on a target (1 each), by rule, side and the ends whose evidence the rules read (client, client_and_server)",
            m.finding.clone(),
        );
        registry.register(
            "latscope_finding_explains_seconds",
            "Latency per request each finding of the last diagnose run on a target explains",
            m.finding_explains.clone(),
        );
        registry.register(
            "latscope_diagnose_server_agent",
            "The target's agent in the last diagnose run (1): used (its evidence merged), failed (unreachable, refused: the run was client-only), not_configured",
            m.diagnose_server_agent.clone(),
        );
        registry.register(
            "latscope_evidence_requests",
            "[evidence]: evidence requests from peers, answered or refused (no key, wrong key, rate limit, port not listed)",
            m.evidence_requests.clone(),
        );
        registry.register(
            "latscope_diagnose_runs",
            "diagnose runs started by SLO breaches, by target and result",
            m.diagnose_runs.clone(),
        );
        registry.register(
            "latscope_agent_config_reloads",
            "Peer list and configuration reloads, by result (ok, error)",
            m.reloads.clone(),
        );
        registry.register(
            "latscope_agent_targets",
            "Targets being measured",
            m.targets.clone(),
        );
        m.register_host(registry);
        registry.register_collector(Box::new(SelfCost));
        m
    }

    /// The host's own view: socket scans of local services and the kernel stack histograms.
    fn register_host(&self, registry: &mut Registry) {
        let m = self;
        registry.register(
            "latscope_socket_finding",
            "Sockets of a local service with a finding in the last scan (latscope sockets' rules: nagle-on-rr, peer-delayed-ack, ...)",
            m.socket_finding.clone(),
        );
        registry.register(
            "latscope_service_sockets",
            "Sockets of a local service in the last scan, by state",
            m.service_sockets.clone(),
        );
        registry.register(
            "latscope_socket_scans",
            "Socket scans of a local service, by result (ok, error)",
            m.socket_scans.clone(),
        );
        registry.register(
            "latscope_stack_probes",
            "[stack]: kernel stack probes by state (attached, unavailable)",
            m.stack_probes.clone(),
        );
        registry.register(
            "latscope_stack_unavailable",
            "[stack]: 1 when eBPF could not start, by reason (privilege, no_btf, ...) and the capabilities missing",
            m.stack_unavailable.clone(),
        );
        registry.register_collector(Box::new(m.stack.clone()));
    }

    /// Record one probe's outcome.
    pub fn record(&self, target: &Target, kind: &str, o: &Outcome) {
        let t = target.name.as_str();
        let base = labels(target, &[("kind", kind)]);
        self.note(t, Fam::Probes, &base);
        self.probes.get_or_create(&base).inc();
        if let Some(f) = o.failure {
            let l = labels(target, &[("kind", kind), ("reason", f.name())]);
            self.note(t, Fam::Failures, &l);
            self.failures.get_or_create(&l).inc();
        }
        for (layer, ns) in &o.layers {
            let l = labels(target, &[("kind", kind), ("layer", layer)]);
            self.note(t, Fam::Latency, &l);
            self.latency.get_or_create(&l).observe(*ns as f64 / 1e9);
        }
        let mut fed = Vec::new();
        for h in &o.hops {
            let hop = h.ttl.to_string();
            match (&h.from, h.rtt_ns) {
                (Some(from), Some(ns)) => {
                    let l = labels(target, &[("hop", &hop), ("address", from)]);
                    self.note(t, Fam::HopLatency, &l);
                    self.hop_latency.get_or_create(&l).observe(ns as f64 / 1e9);
                    fed.push(l);
                }
                _ => {
                    let l = labels(target, &[("hop", &hop)]);
                    self.note(t, Fam::HopLost, &l);
                    self.hop_lost.get_or_create(&l).inc();
                }
            }
        }
        if !o.hops.is_empty() {
            self.age_hops(t, fed);
        }
    }

    /// One trace round of `target` fed the `fed` hop series: age the others, remove those
    /// unfed for more than [`HOP_EXPIRY_ROUNDS`].
    fn age_hops(&self, target: &str, fed: Vec<Labels>) {
        let expired: Vec<Labels> = {
            let Ok(mut ages) = self.hop_age.lock() else {
                return;
            };
            let mine = ages.entry(target.to_string()).or_default();
            for a in mine.values_mut() {
                *a += 1;
            }
            for l in fed {
                mine.insert(l, 0);
            }
            let old: Vec<Labels> = mine
                .iter()
                .filter(|(_, a)| **a > HOP_EXPIRY_ROUNDS)
                .map(|(l, _)| l.clone())
                .collect();
            for l in &old {
                mine.remove(l);
            }
            old
        };
        if expired.is_empty() {
            return;
        }
        for l in &expired {
            self.hop_latency.remove(l);
        }
        if let Ok(mut s) = self.seen.lock()
            && let Some(set) = s.get_mut(target)
        {
            for l in expired {
                set.remove(&(Fam::HopLatency, l));
            }
        }
    }

    /// Forget every series of a target that is no longer measured (a peer left the list).
    pub fn forget(&self, target: &str) {
        if let Ok(mut a) = self.hop_age.lock() {
            a.remove(target);
        }
        let Some(keys) = self.seen.lock().ok().and_then(|mut s| s.remove(target)) else {
            return;
        };
        for (fam, l) in keys {
            match fam {
                Fam::Latency => {
                    self.latency.remove(&l);
                }
                Fam::Probes => {
                    self.probes.remove(&l);
                }
                Fam::Failures => {
                    self.failures.remove(&l);
                }
                Fam::HopLatency => {
                    self.hop_latency.remove(&l);
                }
                Fam::HopLost => {
                    self.hop_lost.remove(&l);
                }
                Fam::Slo => {
                    self.slo_breached.remove(&l);
                    self.slo_quantile.remove(&l);
                }
                Fam::Finding => {
                    self.finding.remove(&l);
                    self.finding_explains.remove(&l);
                }
                Fam::ServerAgent => {
                    self.diagnose_server_agent.remove(&l);
                }
            }
        }
    }

    /// Remove the findings of `target` and its agent's state (before a new diagnose run's are
    /// set).
    pub fn forget_findings(&self, target: &str) {
        let Ok(mut s) = self.seen.lock() else { return };
        let Some(set) = s.get_mut(target) else { return };
        set.retain(|(fam, l)| match fam {
            Fam::Finding => {
                self.finding.remove(l);
                self.finding_explains.remove(l);
                false
            }
            Fam::ServerAgent => {
                self.diagnose_server_agent.remove(l);
                false
            }
            _ => true,
        });
    }

    /// Note a series of `target` (once), so that [`Metrics::forget`] can remove it.
    pub fn note(&self, target: &str, fam: Fam, l: &Labels) {
        if let Ok(mut s) = self.seen.lock() {
            let set = s.entry(target.to_string()).or_default();
            if !set.contains(&(fam, l.clone())) {
                set.insert((fam, l.clone()));
            }
        }
    }
}

/// Which family a noted series belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fam {
    /// latscope_latency_seconds
    Latency,
    /// latscope_probes_total
    Probes,
    /// latscope_probe_failures_total
    Failures,
    /// latscope_hop_latency_seconds
    HopLatency,
    /// latscope_hop_lost_total
    HopLost,
    /// latscope_slo_breached and latscope_slo_quantile_seconds
    Slo,
    /// latscope_finding and latscope_finding_explains_seconds
    Finding,
    /// latscope_diagnose_server_agent
    ServerAgent,
}

/// `target=NAME`, then `extra`, then the target's labels.
pub fn labels(target: &Target, extra: &[(&str, &str)]) -> Labels {
    let mut l = Vec::with_capacity(1 + extra.len() + target.labels.len());
    l.push(("target".to_string(), target.name.clone()));
    for (k, v) in extra {
        l.push(((*k).to_string(), (*v).to_string()));
    }
    for (k, v) in &target.labels {
        l.push((k.clone(), v.clone()));
    }
    l
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::measure::Hop;

    fn target() -> Target {
        Target {
            name: "t".into(),
            address: "192.0.2.1".into(),
            labels: Default::default(),
            measures: vec![],
            slo: None,
            server_agent: None,
        }
    }

    fn round(hop2: &str) -> Outcome {
        let hop = |ttl: u8, from: &str| Hop {
            ttl,
            from: Some(from.into()),
            rtt_ns: Some(1_000_000),
        };
        Outcome {
            hops: vec![hop(1, "10.0.0.1"), hop(2, hop2)],
            ..Outcome::default()
        }
    }

    fn hop_series(r: &Registry) -> Vec<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, r).unwrap();
        let mut v: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with("latscope_hop_latency_seconds_count{"))
            .map(|l| {
                l.split("address=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn hop_series_of_an_address_no_longer_on_the_path_expire() {
        let mut r = Registry::default();
        let m = Metrics::register(&mut r);
        let t = target();
        m.record(&t, "trace", &round("10.0.1.1"));
        // The path moves to another second hop for good: the old one stays for
        // HOP_EXPIRY_ROUNDS rounds, then goes; the live ones never do.
        for _ in 0..HOP_EXPIRY_ROUNDS {
            m.record(&t, "trace", &round("10.0.2.2"));
        }
        assert_eq!(hop_series(&r), ["10.0.0.1", "10.0.1.1", "10.0.2.2"]);
        m.record(&t, "trace", &round("10.0.2.2"));
        assert_eq!(hop_series(&r), ["10.0.0.1", "10.0.2.2"]);
        // A path flapping between many addresses stays bounded by the expiry window.
        for i in 0..500 {
            m.record(
                &t,
                "trace",
                &round(&format!("10.9.{}.{}", i / 250, i % 250)),
            );
        }
        assert_eq!(hop_series(&r).len(), 2 + HOP_EXPIRY_ROUNDS as usize);
        // A round that failed outright (no hops) ages nothing.
        m.record(&t, "trace", &Outcome::default());
        assert_eq!(hop_series(&r).len(), 2 + HOP_EXPIRY_ROUNDS as usize);
        m.forget("t");
        assert!(hop_series(&r).is_empty());
        assert!(m.hop_age.lock().unwrap().is_empty());
    }
}
