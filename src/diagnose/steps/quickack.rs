//! The quick-ack experiment: if the hosts add milliseconds, does an immediate ACK from the
//! client change it? A stall that vanishes is the client's delayed ACK releasing data the
//! server held back.

use std::time::Duration;

use latscope_core::Summary;
use latscope_core::model::diagnose::{StepName, TargetKind};
use latscope_core::units::format_ns;

use super::engines::rr_latency;
use super::{Measure, NotRun, requests_target};
use crate::diagnose::collect::Context;
use crate::diagnose::evidence::Evidence;

pub struct QuickAck;

/// Below this much host time there is no stall to explain.
const MIN_HOST_NS: u64 = 1_000_000;

impl Measure for QuickAck {
    const NAME: StepName = StepName::QuickAckExperiment;
    type Output = Summary;

    fn run(cx: &Context, ev: &Evidence) -> Result<Summary, NotRun> {
        if requests_target(ev)? == TargetKind::Http {
            return Err(NotRun::Skipped("the HTTP engine does not re-arm TCP_QUICKACK; the packet capture is the evidence instead".into()));
        }
        let host_ns = match (&ev.single, &ev.path) {
            (Some(s), Some(p)) => s.p50_ns.saturating_sub(p.p50_ns),
            _ => 0,
        };
        if host_ns < MIN_HOST_NS {
            return Err(NotRun::Skipped(
                "the hosts add under 1 ms: no stall to explain".into(),
            ));
        }
        let d = cx.plan.duration.min(Duration::from_secs(2));
        rr_latency(cx.plan, 1, true, d, cx.stop).map_err(NotRun::Failed)
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

    fn store(ev: &mut Evidence, s: Summary) {
        ev.quickack = Some(s);
    }
}
