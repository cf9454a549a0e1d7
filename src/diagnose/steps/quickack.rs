//! The quick-ack experiment: if the hosts add milliseconds, does an immediate ACK from the
//! client change it? The same requests again — rr for a latscope server, the HTTP engine's
//! `quickack` option for a URL — with TCP_QUICKACK re-armed after every read. A stall that vanishes is the client's delayed ACK releasing data the
//! server held back.

use std::time::Duration;

use latscope_core::Summary;
use latscope_core::model::diagnose::StepName;
use latscope_core::units::format_ns;

use super::engines::app_latency;
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
        requests_target(ev)?;
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
        app_latency(cx.plan, 1, true, d, cx.stop).map_err(NotRun::Failed)
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
