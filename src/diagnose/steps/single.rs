//! One request at a time: the latency the application adds on top of the path.

use latscope_core::Summary;
use latscope_core::model::diagnose::StepName;
use latscope_core::units::format_ns;

use super::engines::app_latency;
use super::{Measure, NotRun, requests_target};
use crate::diagnose::collect::Context;
use crate::diagnose::evidence::Evidence;

pub struct Single;

impl Measure for Single {
    const NAME: StepName = StepName::OneRequest;
    type Output = Summary;

    fn run(cx: &Context, ev: &Evidence) -> Result<Summary, NotRun> {
        requests_target(ev)?;
        app_latency(cx.plan, 1, false, cx.plan.duration, cx.stop).map_err(NotRun::Failed)
    }

    fn detail(cx: &Context, s: &Summary) -> String {
        format!(
            "{} B / {} B, p50 {}, p99 {}",
            cx.plan.request_bytes,
            cx.plan.response_bytes,
            format_ns(s.p50_ns as f64),
            format_ns(s.p99_ns as f64)
        )
    }

    fn distribution(s: &Summary) -> Option<Summary> {
        Some(s.clone())
    }

    fn store(ev: &mut Evidence, s: Summary) {
        ev.single = Some(s);
    }
}
