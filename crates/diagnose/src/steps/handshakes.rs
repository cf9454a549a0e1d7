//! Plain connects: handshake failures and their time as the client sees it, then what speaks on
//! the port (a URL's HTTP server, a latscope server, or any TCP service).

use std::time::{Duration, Instant};

use latscope_core::Summary;
use latscope_core::model::connect::ConnectMode;
use latscope_core::model::diagnose::{StepName, TargetKind};
use latscope_core::model::rr::ServerBehaviour;
use latscope_core::units::format_ns;
use latscope_net::connect::ConnectConfig;
use latscope_net::rr::StopAfter;

use super::engines::{is_latscope, meta};
use super::step::{Measure, NotRun};
use crate::context::Context;
use crate::evidence::{ConnectBurst, ConnectFailures, Evidence};
use crate::plan::Plan;

pub struct Handshakes;

/// The connects' figures and what answered.
pub struct Connects {
    connect: Summary,
    failures: ConnectFailures,
    /// `None` when no connect succeeded.
    target: Option<TargetKind>,
    /// The same connects several at once, when the sequential ones reached the target.
    burst: Option<ConnectBurst>,
}

/// The most of the step's budget the one-at-a-time connects take.
const SEQUENTIAL_MAX: Duration = Duration::from_secs(2);

/// Connects in a burst: each of this many threads connects [`BURST_EACH`] times.
const BURST_EACH: u64 = 4;

impl Measure for Handshakes {
    const NAME: StepName = StepName::Handshakes;
    type Output = Connects;

    fn run(cx: &Context, _ev: &Evidence) -> Result<Connects, NotRun> {
        let p = cx.plan;
        let cc = ConnectConfig {
            target: p.target.clone(),
            addr: p.addr,
            mode: ConnectMode::Connect,
            stop_after: StopAfter::Count(100),
            parallel: 1,
            timeout: Duration::from_secs(3),
            interval: Duration::from_millis(2),
            request_bytes: 1,
            response_bytes: 1,
            server: ServerBehaviour::default(),
            auth: p.auth.clone(),
        };
        // One at a time within part of the step's budget, so that the burst below is always
        // measured (its first round of connects at least): only it shows a listen queue that
        // overflows, and a burst cut by the budget read as a queue that never did.
        let (r, _) = crate::context::bounded(cx.stop, Instant::now() + SEQUENTIAL_MAX, |stop| {
            latscope_net::connect::run(&cc, meta("connect"), stop)
        });
        let mut r = r.map_err(|e| NotRun::Failed(e.to_string()))?;
        // A path that drops SYNs can hold the first connect past that bound (two SYNs lost: the
        // third leaves 3 s after the first), and a step that stopped there read a reachable host
        // as unreachable ("0 connects, none completed": the attempt it cut is not counted) — the
        // agent fleet's lossy edge, 40% of SYNs dropped, in 2 of 3 local runs. With nothing
        // completed nor refused, one more connect waits out SYN retransmissions within what is
        // left of the step's budget.
        if r.succeeded == 0 && r.refused == 0 && !cx.stopped() {
            let one = ConnectConfig {
                stop_after: StopAfter::Count(1),
                timeout: Duration::from_secs(8),
                ..cc.clone()
            };
            if let Ok(o) = latscope_net::connect::run(&one, meta("connect"), cx.stop) {
                r.attempts += o.attempts;
                r.succeeded += o.succeeded;
                r.refused += o.refused;
                r.timed_out += o.timed_out;
                if o.succeeded > 0 {
                    r.connect = o.connect;
                }
            }
        }
        // The same connects N at once: a listen queue too short for the server's accept loop
        // overflows only when SYNs arrive together, and each connect it drops waits ~1 s
        // (TCP_TIMEOUT_INIT) for its resent SYN — invisible one at a time on an idle server.
        let burst = (r.succeeded > 0 && p.concurrency >= 2)
            .then(|| {
                let bc = ConnectConfig {
                    stop_after: StopAfter::Count(BURST_EACH * u64::from(p.concurrency)),
                    parallel: p.concurrency,
                    interval: Duration::ZERO,
                    ..cc.clone()
                };
                latscope_net::connect::run(&bc, meta("connect"), cx.stop).ok()
            })
            .flatten()
            .filter(|b| b.attempts > 0)
            .map(|b| ConnectBurst {
                connections: p.concurrency,
                connect: b.connect,
                failures: ConnectFailures {
                    attempts: b.attempts,
                    refused: b.refused,
                    timed_out: b.timed_out,
                },
            });
        let target = (r.succeeded > 0).then(|| {
            if p.url.is_some() {
                TargetKind::Http
            } else if is_latscope(p) {
                TargetKind::Latscope
            } else {
                TargetKind::Tcp
            }
        });
        Ok(Connects {
            connect: r.connect,
            failures: ConnectFailures {
                attempts: r.attempts,
                refused: r.refused,
                timed_out: r.timed_out,
            },
            target,
            burst,
        })
    }

    fn detail(_cx: &Context, o: &Connects) -> String {
        let f = &o.failures;
        // Percentiles of connects that completed; with none there is no time to give.
        let times = if o.connect.count > 0 {
            format!(
                ": p50 {}, p99 {}",
                format_ns(o.connect.p50_ns as f64),
                format_ns(o.connect.p99_ns as f64)
            )
        } else {
            ", none completed".to_string()
        };
        let burst = o
            .burst
            .as_ref()
            .map(|b| {
                format!(
                    "; {} at once: p50 {}, p99 {}, {} timed out",
                    b.connections,
                    format_ns(b.connect.p50_ns as f64),
                    format_ns(b.connect.p99_ns as f64),
                    b.failures.timed_out
                )
            })
            .unwrap_or_default();
        format!(
            "{} connects{times}, {} refused, {} timed out{burst}",
            f.attempts, f.refused, f.timed_out
        )
    }

    fn failed(o: &Connects) -> bool {
        o.target.is_none()
    }

    fn distribution(o: &Connects) -> Option<Summary> {
        Some(o.connect.clone())
    }

    /// 100 connects; a dropped SYN costs a 1 s retransmission each, so a lossy listener is cut here rather than taking minutes.
    fn budget(_plan: &Plan) -> Duration {
        Duration::from_secs(4)
    }

    fn store(ev: &mut Evidence, o: Connects) {
        ev.handshake = Some(o.connect);
        ev.connect_failures = o.failures;
        ev.target = o.target;
        ev.connect_burst = o.burst;
    }
}
