//! Several connections at once: does each request take longer when others are in flight? And
//! what did their connections' handshakes cost them (a server that closes its connections makes
//! the client open one per request)?

use latscope_core::Summary;
use latscope_core::model::diagnose::StepName;
use latscope_core::units::format_ns;

use super::engines::app_run;
use super::step::{Measure, NotRun, requests_target};
use crate::context::Context;
use crate::evidence::{Concurrent, Evidence, RequestConnects};

pub struct Concurrency;

/// The requests' latency and the connections they opened.
pub struct Outcome {
    concurrent: Concurrent,
    connects: Option<RequestConnects>,
}

impl Measure for Concurrency {
    const NAME: StepName = StepName::ConcurrentRequests;
    type Output = Outcome;

    fn run(cx: &Context, ev: &Evidence) -> Result<Outcome, NotRun> {
        requests_target(ev)?;
        let n = cx.plan.concurrency;
        if n < 2 {
            return Err(NotRun::Skipped("--connections 1".into()));
        }
        let r = app_run(cx.plan, n, cx.plan.duration, cx.stop).map_err(NotRun::Failed)?;
        Ok(Outcome {
            concurrent: Concurrent {
                connections: n,
                latency: r.latency,
            },
            connects: r.connects,
        })
    }

    fn detail(_cx: &Context, o: &Outcome) -> String {
        let c = &o.concurrent;
        format!(
            "{} connections: p50 {}, p99 {}{}",
            c.connections,
            format_ns(c.latency.p50_ns as f64),
            format_ns(c.latency.p99_ns as f64),
            o.connects
                .as_ref()
                .filter(|k| k.connections > u64::from(c.connections))
                .map(|k| format!(
                    "; {} connections opened for {} requests (connect p50 {}, p99 {})",
                    k.connections,
                    k.requests,
                    format_ns(k.connect.p50_ns as f64),
                    format_ns(k.connect.p99_ns as f64)
                ))
                .unwrap_or_default()
        )
    }

    fn distribution(o: &Outcome) -> Option<Summary> {
        Some(o.concurrent.latency.clone())
    }

    fn store(ev: &mut Evidence, o: Outcome) {
        ev.concurrent = Some(o.concurrent);
        ev.request_connects = o.connects;
    }
}
