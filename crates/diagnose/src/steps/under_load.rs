//! Latency under load: a small request idle and while the path is loaded — by a bulk transfer
//! to `latscope serve`, or for a URL by the HTTP engine's own concurrent requests (a ramp).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use latscope_core::model::diagnose::Responsiveness;
use latscope_core::model::diagnose::{StepName, TargetKind};
use latscope_core::model::rr::Transport;
use latscope_core::model::stream::{Direction, StreamOptions};
use latscope_core::units::format_ns;
use latscope_net::proto::StreamSpec;
use latscope_net::stream::StreamConfig;

use super::engines::{http_latency, http_options, meta};
use super::{Measure, NotRun, requests_target};
use crate::collect::{Context, Plan};
use crate::evidence::{Bottleneck, Evidence, LinkRate, Load, RateSource, UnderLoad as Loaded};

pub struct UnderLoad;

/// The probe's latency idle and loaded, and the load it competed with.
pub struct Outcome {
    latency: Loaded,
    /// With a bulk transfer: bytes one request of the request steps puts on the wire (the
    /// transfer runs client → server: its rate is that direction's bottleneck, not the
    /// responses').
    request_wire_bytes: Option<u64>,
}

/// Bytes on the wire for `payload` bytes of TCP data: per segment (at most `mss` bytes of data)
/// 32 B of TCP header with timestamps, 20 B of IPv4 and 14 B of Ethernet (preamble and
/// inter-frame gap do not pass through a qdisc's rate and are left out).
fn on_wire(payload: u64, mss: u64) -> u64 {
    let segments = payload.div_ceil(mss).max(1);
    payload + segments * (32 + 20 + 14)
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
            let url = cx.plan.url.as_deref().unwrap_or_default();
            return http_ramp(url, cx.stop).map(|latency| Outcome {
                latency,
                request_wire_bytes: None,
            });
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
                load: Load::Bulk {
                    rate_bps: r.results.first().map(|d| d.rate_bps),
                },
            },
            request_wire_bytes: Some(on_wire(u64::from(cx.plan.request_bytes), 1448)),
        })
    }

    fn detail(_cx: &Context, o: &Outcome) -> String {
        format!(
            "probe p50 {} idle, {} during {} ({:.0} and {:.0} round trips per minute)",
            format_ns(o.latency.idle.p50_ns as f64),
            format_ns(o.latency.loaded.p50_ns as f64),
            o.latency.load.describe(),
            Responsiveness::rpm(o.latency.idle.p50_ns),
            Responsiveness::rpm(o.latency.loaded.p50_ns),
        )
    }

    /// 3 s of bulk transfer (or the HTTP ramp) and set-up.
    fn budget(_plan: &Plan) -> Duration {
        Duration::from_secs(6)
    }

    fn store(ev: &mut Evidence, o: Outcome) {
        // A bulk transfer's throughput is the bottleneck rate of the direction it ran in
        // (client → server: `Direction::Send` above).
        if let (
            Load::Bulk {
                rate_bps: Some(rate_bps),
            },
            Some(wire_bytes),
        ) = (&o.latency.load, o.request_wire_bytes)
            && *rate_bps > 0.0
        {
            ev.bottleneck.get_or_insert_with(Bottleneck::default).up = Some(LinkRate {
                rate_bps: *rate_bps,
                source: RateSource::BulkTransfer,
                wire_bytes,
            });
        }
        ev.under_load = Some(o.latency);
    }
}

/// Each level of the ramp runs this long; the probe measures after the load has settled.
const RAMP_STEP: Duration = Duration::from_millis(700);
const RAMP_SETTLE: Duration = Duration::from_millis(200);
/// Concurrency levels of the ramp, until the load's request rate stops growing.
const RAMP: [u32; 3] = [4, 16, 64];
/// A level adding less than this to the request rate means the server (or the path) is
/// saturated: the working conditions of the responsiveness method.
const SATURATED_GAIN: f64 = 1.1;

/// Latency under load for a URL: the HTTP engine itself is the load, ramping its concurrency
/// until the request rate stops growing (as the IETF responsiveness method ramps its load to
/// "working conditions"), while one probe connection measures a GET meanwhile. Idle is the same
/// probe alone.
fn http_ramp(url: &str, stop: &AtomicBool) -> Result<Loaded, NotRun> {
    let idle = http_latency(url, 1, false, RAMP_STEP, stop).map_err(NotRun::Failed)?;
    let mut top: Option<Loaded> = None;
    let mut last_rate = 0.0;
    for n in RAMP {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let cfg = latscope_http::Config::new(&http_options(url, n, false, RAMP_STEP + RAMP_SETTLE))
            .map_err(|e| NotRun::Failed(e.to_string()))?;
        let load_stop = Arc::new(AtomicBool::new(false));
        let flag = load_stop.clone();
        let load = std::thread::spawn(move || latscope_http::run(&cfg, &flag, &mut |_, _| {}));
        std::thread::sleep(RAMP_SETTLE);
        let probe = http_latency(url, 1, false, RAMP_STEP - RAMP_SETTLE, stop);
        if stop.load(Ordering::Relaxed) {
            load_stop.store(true, Ordering::Relaxed);
        }
        let r = load
            .join()
            .map_err(|_| NotRun::Failed("the load thread panicked".into()))?
            .map_err(|e| NotRun::Failed(e.to_string()))?;
        let probe = probe.map_err(NotRun::Failed)?;
        let secs = (r.elapsed_ns as f64 / 1e9).max(1e-3);
        let rate = r.stats.requests as f64 / secs;
        top = Some(Loaded {
            idle: idle.clone(),
            loaded: probe,
            load: Load::Http {
                connections: n,
                requests_per_sec: rate,
                bytes_per_sec: r.stats.bytes_read as f64 / secs,
            },
        });
        if rate < last_rate * SATURATED_GAIN {
            break;
        }
        last_rate = rate;
    }
    top.ok_or_else(|| NotRun::Failed("interrupted".into()))
}
