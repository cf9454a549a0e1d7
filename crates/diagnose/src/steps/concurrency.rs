//! Several connections at once: does each request take longer when others are in flight?

use latscope_core::Summary;
use latscope_core::model::diagnose::StepName;
use latscope_core::units::format_ns;

use super::engines::app_latency;
use super::{Measure, NotRun, requests_target};
use crate::collect::Context;
use crate::evidence::{Concurrent, Evidence};

pub struct Concurrency;

impl Measure for Concurrency {
    const NAME: StepName = StepName::ConcurrentRequests;
    type Output = Concurrent;

    fn run(cx: &Context, ev: &Evidence) -> Result<Concurrent, NotRun> {
        requests_target(ev)?;
        let n = cx.plan.concurrency;
        if n < 2 {
            return Err(NotRun::Skipped("--connections 1".into()));
        }
        let latency =
            app_latency(cx.plan, n, false, cx.plan.duration, cx.stop).map_err(NotRun::Failed)?;
        Ok(Concurrent {
            connections: n,
            latency,
        })
    }

    fn detail(_cx: &Context, c: &Concurrent) -> String {
        format!(
            "{} connections: p50 {}, p99 {}",
            c.connections,
            format_ns(c.latency.p50_ns as f64),
            format_ns(c.latency.p99_ns as f64)
        )
    }

    fn distribution(c: &Concurrent) -> Option<Summary> {
        Some(c.latency.clone())
    }

    fn store(ev: &mut Evidence, c: Concurrent) {
        ev.concurrent = Some(c);
    }
}
