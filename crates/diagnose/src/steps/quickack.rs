//! The quick-ack experiment: if the hosts add milliseconds, does an immediate ACK from the
//! client change it? The same requests again — rr for a latscope server, the HTTP engine's
//! `quickack` option for a URL — with TCP_QUICKACK re-armed after every read. A stall that vanishes is the client's delayed ACK releasing data the
//! server held back.

use std::time::Duration;

use latscope_core::Summary;
use latscope_core::model::diagnose::StepName;
use latscope_core::units::format_ns;

use super::engines::app_latency;
use super::step::{Measure, NotRun, requests_target};
use crate::context::Context;
use crate::evidence::Evidence;
use crate::plan::Plan;

pub struct QuickAck;

/// Below this much host time there is no stall to explain.
const MIN_HOST_NS: u64 = 1_000_000;

impl Measure for QuickAck {
    const NAME: StepName = StepName::QuickAckExperiment;
    type Output = Summary;

    fn run(cx: &Context, ev: &Evidence) -> Result<Summary, NotRun> {
        requests_target(ev)?;
        let Some(single) = &ev.single else {
            return Err(NotRun::Skipped(
                "the one-request step measured nothing to compare with".into(),
            ));
        };
        let host_ns = single
            .p50_ns
            .saturating_sub(ev.path.as_ref().map_or(0, |p| p.p50_ns));
        if host_ns < MIN_HOST_NS {
            return Err(NotRun::Skipped(
                "the hosts add under 1 ms: no stall to explain".into(),
            ));
        }
        app_latency(cx.plan, 1, true, measured(cx.plan), cx.stop).map_err(NotRun::Failed)
    }

    fn detail(_cx: &Context, s: &Summary) -> String {
        format!(
            "client TCP_QUICKACK after every read: p50 {}",
            format_ns(s.p50_ns as f64)
        )
    }

    fn distribution(s: &Summary) -> Option<Summary> {
        Some(s.clone())
    }

    /// Its ≤ 2 s measurement, the engine's 0.3 s warm-up and the connection.
    fn budget(plan: &Plan) -> Duration {
        measured(plan) + Duration::from_millis(1500)
    }

    fn store(ev: &mut Evidence, s: Summary) {
        ev.quickack = Some(s);
    }
}

/// The experiment's measurement time: the plan's, at most 2 s.
fn measured(plan: &Plan) -> Duration {
    plan.duration.min(Duration::from_secs(2))
}
