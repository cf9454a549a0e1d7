//! Latency under load: a small request idle and while the path is loaded — by a bulk transfer
//! to `latscope serve`, or for a URL by the HTTP engine's own concurrent requests (a ramp).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use latscope_core::model::diagnose::Responsiveness;
use latscope_core::model::diagnose::{StepName, TargetKind};
use latscope_core::model::rr::Transport;
use latscope_core::model::stream::{Direction, DirectionResult, StreamOptions};
use latscope_core::units::format_ns;
use latscope_net::proto::StreamSpec;
use latscope_net::stream::StreamConfig;

use super::engines::{Reach, http_latency, http_options, meta};
use super::step::{Measure, NotRun, requests_target};
use crate::context::Context;
use crate::evidence::{Bottleneck, Evidence, LinkRate, Load, RateSource, UnderLoad as Loaded};
use crate::plan::Plan;

pub struct UnderLoad;

/// The probe's latency idle and loaded, and the load it competed with.
pub struct Outcome {
    latency: Loaded,
    /// With a bulk transfer: each direction's rate, applied to the bytes one exchange of the
    /// request steps sends that way (the request's up, the response's down).
    rates: Option<Bottleneck>,
}

/// Which way a bulk transfer's result went, by the model's two documented names
/// ([`latscope_core::model::stream::DirectionResult::direction`]): `Some(true)` client →
/// server, `Some(false)` server → client.
fn client_sends(d: &DirectionResult) -> Option<bool> {
    match d.direction.as_str() {
        "client→server" => Some(true),
        "server→client" => Some(false),
        _ => None,
    }
}

/// The rate of each direction the transfer measured, with the bytes of one request (up) and
/// one response (down) on the wire.
fn rates(results: &[DirectionResult], request_bytes: u64, response_bytes: u64) -> Bottleneck {
    let mut b = Bottleneck::default();
    for d in results.iter().filter(|d| d.rate_bps > 0.0) {
        let (slot, bytes) = match client_sends(d) {
            Some(true) => (&mut b.up, request_bytes),
            Some(false) => (&mut b.down, response_bytes),
            None => continue,
        };
        *slot = Some(LinkRate {
            rate_bps: d.rate_bps,
            source: RateSource::BulkTransfer,
            wire_bytes: on_wire(bytes, 1448),
        });
    }
    b
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
            let Some(at) = Reach::of(cx.plan) else {
                return Err(NotRun::Failed("no URL to load".into()));
            };
            return http_ramp(at, cx.stop).map(|latency| Outcome {
                latency,
                rates: None,
            });
        }
        let sc = StreamConfig {
            target: cx.plan.target.clone(),
            addr: Some(cx.plan.addr),
            spec: StreamSpec {
                transport: Transport::Tcp,
                // Both ways at once: a rate measured one way says nothing of the other (a
                // token bucket on the uplink only), and the requests' bytes go up while the
                // responses' come down.
                direction: Direction::Both,
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
                    rate_bps: r.results.iter().map(|d| d.rate_bps).reduce(f64::max),
                },
            },
            rates: Some(rates(
                &r.results,
                u64::from(cx.plan.request_bytes),
                u64::from(cx.plan.response_bytes),
            )),
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
        // A bulk transfer's throughput is each direction's bottleneck rate: it replaces what
        // the capture's responses estimated for the same direction.
        if let Some(r) = o.rates {
            let b = ev.bottleneck.get_or_insert_with(Bottleneck::default);
            b.up = r.up.or(b.up);
            b.down = r.down.or(b.down);
        }
        // An HTTP load's responses crossed the same path, many at once: a link carries no
        // more than its rate, so what they carried is the least the bottleneck is.
        if let (
            Load::Http {
                connections,
                bytes_per_sec,
                ..
            },
            Some(b),
        ) = (o.latency.load, ev.bottleneck.as_mut())
        {
            b.carried(connections, bytes_per_sec * 8.0);
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
fn http_ramp(at: Reach<'_>, stop: &AtomicBool) -> Result<Loaded, NotRun> {
    let idle = http_latency(at, 1, false, RAMP_STEP, stop).map_err(NotRun::Failed)?;
    let mut top: Option<Loaded> = None;
    let mut last_rate = 0.0;
    for n in RAMP {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let cfg = latscope_http::Config::new(&http_options(at, n, false, RAMP_STEP + RAMP_SETTLE))
            .map_err(|e| NotRun::Failed(e.to_string()))?;
        let load_stop = Arc::new(AtomicBool::new(false));
        let flag = load_stop.clone();
        let load = std::thread::spawn(move || latscope_http::run(&cfg, &flag, &mut |_, _| {}));
        std::thread::sleep(RAMP_SETTLE);
        let probe = http_latency(at, 1, false, RAMP_STEP - RAMP_SETTLE, stop);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn result(direction: &str, rate_bps: f64) -> DirectionResult {
        DirectionResult {
            direction: direction.into(),
            rate_bps,
            ..DirectionResult::default()
        }
    }

    #[test]
    fn each_direction_serialises_its_own_bytes() {
        // A 50 Mbit/s token bucket on the uplink only, a 10 Gbit/s downlink.
        let b = rates(
            &[result("client→server", 50e6), result("server→client", 10e9)],
            64,
            1024,
        );
        let up = b.up.expect("up");
        let down = b.down.expect("down");
        assert_eq!((up.rate_bps, up.wire_bytes), (50e6, 64 + 66));
        assert_eq!((down.rate_bps, down.wire_bytes), (10e9, 1024 + 66));
        // 130 B at 50 Mbit/s and 1,090 B at 10 Gbit/s: 20.8 µs + 0.87 µs, not the 205 µs of
        // the whole exchange at the uplink's rate.
        assert_eq!(b.serialisation_ns(), 20_800 + 872);
        // One direction measured: the other stays unknown.
        let b = rates(&[result("client→server", 50e6)], 64, 1024);
        assert_eq!(b.down, None);
    }

    fn http_load(bytes_per_sec: f64) -> Outcome {
        Outcome {
            latency: Loaded {
                idle: Default::default(),
                loaded: Default::default(),
                load: Load::Http {
                    connections: 64,
                    requests_per_sec: bytes_per_sec / 1_048_576.0,
                    bytes_per_sec,
                },
            },
            rates: None,
        }
    }

    fn delivered(rate_bps: f64) -> Evidence {
        Evidence {
            bottleneck: Some(Bottleneck {
                up: None,
                down: Some(LinkRate {
                    rate_bps,
                    source: RateSource::Delivery { responses: 1600 },
                    wire_bytes: 1_085_000,
                }),
            }),
            ..Evidence::default()
        }
    }

    #[test]
    fn what_many_requests_carried_at_once_is_the_least_the_bottleneck_is() {
        // The lab's nginx with `sndbuf=4k` on a veth: one 1 MiB page delivered at 6.65 Gbit/s
        // (1.3 ms of "serialisation"), 64 of them at once 2.93 GB/s (23.4 Gbit/s).
        let mut ev = delivered(6.65e9);
        UnderLoad::store(&mut ev, http_load(2.93e9));
        let down = ev.bottleneck.and_then(|b| b.down).expect("down");
        assert_eq!(
            down.source,
            RateSource::Carried {
                connections: 64,
                one_bps: 6_650_000_000
            }
        );
        assert_eq!(down.rate_bps, 2.93e9 * 8.0);
        assert!(down.serialisation_ns() < 400_000, "{down:?}");
        // A 20 Mbit/s link: 64 requests at once carry no more than one did (their bytes
        // without the headers): the measured rate stays.
        let mut ev = delivered(20.5e6);
        UnderLoad::store(&mut ev, http_load(2.4e6));
        assert_eq!(ev.bottleneck, delivered(20.5e6).bottleneck);
        // Within the margin (a shared link where 64 flows take a larger share than one): kept.
        let mut ev = delivered(20.5e6);
        UnderLoad::store(&mut ev, http_load(3.5e6));
        assert_eq!(ev.bottleneck, delivered(20.5e6).bottleneck);
        // A bulk transfer's rate is the path's own.
        let mut b = Bottleneck {
            up: None,
            down: Some(LinkRate {
                rate_bps: 1e9,
                source: RateSource::BulkTransfer,
                wire_bytes: 1_085,
            }),
        };
        let before = b;
        b.carried(64, 5e9);
        assert_eq!(b, before);
        // No rate measured: nothing to raise.
        let mut ev = Evidence::default();
        UnderLoad::store(&mut ev, http_load(2.93e9));
        assert_eq!(ev.bottleneck, None);
    }
}
