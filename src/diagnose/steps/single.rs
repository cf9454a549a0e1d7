//! One request at a time: the latency the application adds on top of the path — and, meanwhile,
//! this host's own scheduling noise (a thread sleeping 1 ms at a time and timing how late it
//! wakes, as cyclictest does): a tail the client's host makes by itself is not the server's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use latscope_core::Summary;
use latscope_core::hist::LatencyHistogram;
use latscope_core::model::diagnose::StepName;
use latscope_core::units::format_ns;

use super::engines::app_latency;
use super::{Measure, NotRun, requests_target};
use crate::diagnose::collect::Context;
use crate::diagnose::evidence::Evidence;

pub struct Single;

/// The requests' latency and the client host's wake-up lateness meanwhile.
pub struct Outcome {
    latency: Summary,
    noise: Option<Summary>,
}

/// The noise thread's period.
const TICK: Duration = Duration::from_millis(1);

/// Sleep [`TICK`] at a time until `done`, recording how late each wake-up is.
fn wakeup_lateness(done: &AtomicBool) -> Option<Summary> {
    let mut h = LatencyHistogram::new();
    while !done.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        std::thread::sleep(TICK);
        let late = t0.elapsed().saturating_sub(TICK);
        h.record(late.as_nanos() as u64);
    }
    let s = h.summary();
    (s.count > 0).then_some(s)
}

impl Measure for Single {
    const NAME: StepName = StepName::OneRequest;
    type Output = Outcome;

    fn run(cx: &Context, ev: &Evidence) -> Result<Outcome, NotRun> {
        requests_target(ev)?;
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let noise = s.spawn(|| wakeup_lateness(&done));
            let latency = app_latency(cx.plan, 1, false, cx.plan.duration, cx.stop);
            done.store(true, Ordering::Relaxed);
            let noise = noise.join().ok().flatten();
            latency
                .map(|latency| Outcome { latency, noise })
                .map_err(NotRun::Failed)
        })
    }

    fn detail(cx: &Context, o: &Outcome) -> String {
        format!(
            "{} B / {} B, p50 {}, p99 {}{}",
            cx.plan.request_bytes,
            cx.plan.response_bytes,
            format_ns(o.latency.p50_ns as f64),
            format_ns(o.latency.p99_ns as f64),
            o.noise
                .as_ref()
                .map(|n| format!(
                    "; this host wakes a sleeping thread up to {} late (p99; p99.9 {})",
                    format_ns(n.p99_ns as f64),
                    format_ns(n.p999_ns as f64)
                ))
                .unwrap_or_default()
        )
    }

    fn distribution(o: &Outcome) -> Option<Summary> {
        Some(o.latency.clone())
    }

    fn store(ev: &mut Evidence, o: Outcome) {
        ev.single = Some(o.latency);
        ev.host_noise = o.noise;
    }
}
