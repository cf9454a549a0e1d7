//! Latency under load: a 64 B request/response idle and while a bulk transfer saturates the
//! same path (needs `latscope serve` at the target).

use std::time::Duration;

use latscope_core::model::diagnose::{StepName, TargetKind};
use latscope_core::model::rr::Transport;
use latscope_core::model::stream::{Direction, StreamOptions};
use latscope_core::units::{format_bitrate, format_ns};
use latscope_net::proto::StreamSpec;
use latscope_net::stream::StreamConfig;

use super::engines::meta;
use super::{Measure, NotRun, requests_target};
use crate::diagnose::collect::Context;
use crate::diagnose::evidence::{Evidence, UnderLoad as Loaded};

pub struct UnderLoad;

/// The probe's latency idle and loaded, and the bulk rate it competed with.
pub struct Outcome {
    latency: Loaded,
    bulk_rate_bps: Option<f64>,
}

impl Measure for UnderLoad {
    const NAME: StepName = StepName::LatencyUnderLoad;
    type Output = Outcome;

    fn run(cx: &Context, ev: &Evidence) -> Result<Outcome, NotRun> {
        let kind = requests_target(ev)?;
        if cx.plan.no_load {
            return Err(NotRun::Skipped("--no-load".into()));
        }
        if kind == TargetKind::Http {
            return Err(NotRun::Skipped(
                "a bulk transfer needs `latscope serve` at the target".into(),
            ));
        }
        let sc = StreamConfig {
            target: cx.plan.target.clone(),
            addr: Some(cx.plan.addr),
            spec: StreamSpec {
                transport: Transport::Tcp,
                direction: Direction::Send,
                streams: 1,
                duration_ms: 3000,
                bytes_per_stream: None,
                buffer_bytes: 128 * 1024,
                udp_rate_bps: None,
                options: StreamOptions::default(),
                interval_ms: 1000,
            },
            connect_timeout: Duration::from_secs(3),
            affinity: vec![],
            latency_probe: true,
            auth: cx.plan.auth.clone(),
        };
        let r = latscope_net::stream::run(&sc, meta("stream"), cx.stop, &mut |_| {})
            .map_err(|e| NotRun::Failed(e.to_string()))?;
        let lp = r.latency_probe.ok_or_else(|| {
            NotRun::Failed(r.error.clone().unwrap_or_else(|| "no probe result".into()))
        })?;
        Ok(Outcome {
            latency: Loaded {
                idle: lp.idle,
                loaded: lp.loaded,
            },
            bulk_rate_bps: r.results.first().map(|d| d.rate_bps),
        })
    }

    fn detail(_cx: &Context, o: &Outcome) -> String {
        format!(
            "64 B probe p50 {} idle, {} during a {} bulk transfer",
            format_ns(o.latency.idle.p50_ns as f64),
            format_ns(o.latency.loaded.p50_ns as f64),
            o.bulk_rate_bps.map(format_bitrate).unwrap_or_default()
        )
    }

    fn store(ev: &mut Evidence, o: Outcome) {
        ev.under_load = Some(o.latency);
    }
}
