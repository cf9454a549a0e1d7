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
use crate::measure::{Outcome, Runner};
use latscope_probe::spec::parse_query;

/// One-shot probes running at once.
pub const MAX_PROBES: usize = 8;

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
