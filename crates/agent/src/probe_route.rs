//! The agent's HTTP routes: `/metrics` (the registry), and `/probe?target=HOST[:PORT]&kind=K`
//! — one measurement now, answered as its own small metrics page, as blackbox_exporter does
//! (`latscope_probe_success`, `latscope_probe_duration_seconds{layer}`), so Prometheus can
//! drive probes through `relabel_configs` too. At most [`MAX_PROBES`] run at once (503 beyond).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use latscope_exporter::{Reply, ReplyFuture, Routes};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;
use tokio::sync::Semaphore;

use crate::Shared;
use crate::config::{Kind, Measure, SERVE_PORT};
use crate::measure::{Outcome, Runner};

/// One-shot probes running at once.
pub const MAX_PROBES: usize = 8;
/// The longest timeout a /probe may ask for.
const MAX_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) struct AgentRoutes {
    registry: Registry,
    probe_enabled: bool,
    probes: Arc<Semaphore>,
    _shared: Arc<Shared>,
}

impl AgentRoutes {
    pub fn new(registry: Registry, probe_enabled: bool, shared: Arc<Shared>) -> AgentRoutes {
        AgentRoutes {
            registry,
            probe_enabled,
            probes: Arc::new(Semaphore::new(MAX_PROBES)),
            _shared: shared,
        }
    }
}

/// Percent-decoding of a query value (`+` is a space).
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The measurement a /probe query asks for: (address, measure), or what is wrong with it.
pub(crate) fn parse_query(query: &str) -> Result<(String, Measure), String> {
    let mut target = None;
    let mut kind = None;
    let mut port = None;
    let mut timeout = Duration::from_secs(2);
    for kv in query.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let v = decode(v);
        match k {
            "target" => target = Some(v),
            "kind" | "module" => {
                kind = Some(Kind::parse(&v).ok_or_else(|| {
                    format!(
                        "unknown kind '{v}'; one of: {}",
                        Kind::ALL.map(Kind::name).join(", ")
                    )
                })?)
            }
            "port" => port = Some(v.parse::<u16>().map_err(|_| format!("bad port '{v}'"))?),
            "timeout" => {
                timeout = latscope_core::units::parse_duration(&v)
                    .map_err(|e| e.to_string())?
                    .clamp(Duration::from_millis(10), MAX_TIMEOUT)
            }
            _ => {
                return Err(format!(
                    "unknown parameter '{k}' (target, kind, port, timeout)"
                ));
            }
        }
    }
    let target = target.ok_or("missing target=HOST[:PORT]")?;
    let kind = kind.ok_or("missing kind=syn|connect|rr|http|trace")?;
    let mut url = None;
    let (host, embedded_port) = if kind == Kind::Http && target.starts_with("http") {
        url = Some(target.clone());
        (target.clone(), None)
    } else if let Some(rest) = target.strip_prefix('[') {
        let (h, p) = rest.split_once(']').ok_or("bad [IPv6] target")?;
        (
            h.to_string(),
            p.strip_prefix(':').and_then(|p| p.parse().ok()),
        )
    } else {
        match target.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (
                h.to_string(),
                Some(
                    p.parse::<u16>()
                        .map_err(|_| format!("bad port in '{target}'"))?,
                ),
            ),
            _ => (target.clone(), None),
        }
    };
    let port = port.or(embedded_port).unwrap_or(match kind {
        Kind::Rr => SERVE_PORT,
        Kind::Http => 80,
        Kind::Trace => 33434,
        Kind::Syn | Kind::Connect => 0,
    });
    if port == 0 {
        return Err(format!(
            "kind={} needs a port: target=HOST:PORT",
            kind.name()
        ));
    }
    Ok((
        host,
        Measure {
            kind,
            port,
            interval: timeout,
            timeout,
            url,
            path: "/".into(),
            max_ttl: 30,
            size: 64,
        },
    ))
}

/// The page of one probe.
pub(crate) fn probe_page(o: &Outcome, elapsed: Duration) -> String {
    let mut r = Registry::default();
    r.register(
        "latscope_probe_success",
        "1 if the probe got its answer",
        ConstGauge::new(i64::from(o.failure.is_none())),
    );
    r.register(
        "latscope_probe_elapsed_seconds",
        "Time the probe took, timeouts included",
        ConstGauge::new(elapsed.as_secs_f64()),
    );
    let d: Family<Vec<(String, String)>, Gauge<f64, std::sync::atomic::AtomicU64>> =
        Family::default();
    for (layer, ns) in &o.layers {
        d.get_or_create(&vec![("layer".into(), (*layer).to_string())])
            .set(*ns as f64 / 1e9);
    }
    r.register(
        "latscope_probe_duration_seconds",
        "Latency of the probe by layer",
        d,
    );
    let f: Family<Vec<(String, String)>, Gauge> = Family::default();
    if let Some(fail) = o.failure {
        f.get_or_create(&vec![("reason".into(), fail.name().to_string())])
            .set(1);
    }
    r.register(
        "latscope_probe_failure",
        "1 with the reason when the probe failed",
        f,
    );
    latscope_exporter::encode(&r)
}

impl Routes for AgentRoutes {
    fn metrics(&self) -> String {
        latscope_exporter::encode(&self.registry)
    }

    fn index(&self) -> String {
        "latscope agent: /metrics, /healthz, /probe?target=HOST[:PORT]&kind=syn|connect|rr|http|trace\n".into()
    }

    fn route(&self, path: &str, query: &str) -> Option<ReplyFuture> {
        if path != "/probe" {
            return None;
        }
        if !self.probe_enabled {
            return Some(Box::pin(async {
                Reply::text(404, "/probe is off (probe_endpoint = false)\n")
            }));
        }
        let parsed = parse_query(query);
        let sem = self.probes.clone();
        Some(Box::pin(async move {
            let (address, m) = match parsed {
                Ok(p) => p,
                Err(e) => return Reply::text(400, format!("{e}\n")),
            };
            let Ok(_permit) = sem.try_acquire_owned() else {
                return Reply::text(503, format!("{MAX_PROBES} probes already running; retry\n"));
            };
            let res = tokio::task::spawn_blocking(move || {
                let stop = AtomicBool::new(false);
                let t0 = std::time::Instant::now();
                let o = Runner::default().run(&address, &m, &stop);
                (o, t0.elapsed())
            })
            .await;
            match res {
                Ok((o, elapsed)) => Reply::metrics(probe_page(&o, elapsed)),
                Err(e) => Reply::text(500, format!("probe failed: {e}\n")),
            }
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn probe_queries() {
        let (a, m) = parse_query("target=10.0.0.1:22&kind=connect").unwrap();
        assert_eq!(
            (a.as_str(), m.kind, m.port),
            ("10.0.0.1", Kind::Connect, 22)
        );
        let (a, m) = parse_query("target=%5B%3A%3A1%5D%3A7000&kind=rr").unwrap();
        assert_eq!((a.as_str(), m.port), ("::1", 7000));
        let (a, m) = parse_query("target=h&kind=rr&timeout=1m").unwrap();
        assert_eq!(
            (a.as_str(), m.port, m.timeout),
            ("h", SERVE_PORT, MAX_TIMEOUT)
        );
        let (_, m) = parse_query("target=http%3A%2F%2Fx%2Fy&kind=http").unwrap();
        assert_eq!(m.url.as_deref(), Some("http://x/y"));
        assert!(
            parse_query("target=h&kind=connect")
                .unwrap_err()
                .contains("needs a port")
        );
        assert!(
            parse_query("target=h&kind=icmp")
                .unwrap_err()
                .contains("unknown kind")
        );
        assert!(
            parse_query("kind=rr")
                .unwrap_err()
                .contains("missing target")
        );
        assert!(
            parse_query("target=h&kind=rr&x=1")
                .unwrap_err()
                .contains("unknown parameter")
        );
        assert_eq!(decode("a%2"), "a%2");
        assert_eq!(decode("%zzé%41"), "%zzéA");
    }
}
