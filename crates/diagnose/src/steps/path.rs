//! The network path without the application: a SYN ping with kernel timestamps where
//! CAP_NET_RAW allows, else the kernel's own handshake RTT of full connects.

use std::time::Duration;

use latscope_core::Summary;
use latscope_core::model::diagnose::StepName;
use latscope_core::units::format_ns;

use super::engines::meta;
use super::step::{Measure, NotRun};
use crate::context::Context;
use crate::evidence::Evidence;
use crate::plan::Plan;

pub struct Path;

/// The ping's figures.
pub struct PathRtt {
    /// How it was measured, e.g. "syn ping (kernel timestamps)".
    how: String,
    rtt: Summary,
    received: u64,
    sent: u64,
    /// A SYN ping with kernel timestamps (not the connect() fallback).
    by_syn: bool,
}

impl Measure for Path {
    const NAME: StepName = StepName::Path;
    type Output = PathRtt;

    fn run(cx: &Context, _ev: &Evidence) -> Result<PathRtt, NotRun> {
        let p = cx.plan;
        let req = latscope_probe::ProbeRequest {
            mode: None,
            port: p.addr.port(),
            payload: 0,
            trace: false,
            kernel_timestamps: true,
        };
        let fail = |e: String| NotRun::Failed(e);
        let (mut prober, why) =
            latscope_probe::open(p.addr.ip(), req).map_err(|e| fail(e.to_string()))?;
        let ctx = latscope_probe::ping::PingContext {
            meta: meta("ping"),
            target: p.target.to_string(),
            address: p.addr.ip(),
            port: Some(p.addr.port()),
            mode_reason: why,
            payload_bytes: 0,
        };
        let opts = latscope_probe::ping::PingOptions {
            count: Some(50),
            interval: Duration::from_millis(5),
            timeout: Duration::from_secs(1),
            ..Default::default()
        };
        let r = latscope_probe::ping::ping(prober.as_mut(), ctx, &opts, cx.stop, &mut |_| {})
            .map_err(|e| fail(e.to_string()))?;
        if r.received == 0 {
            return Err(fail(format!(
                "{} ping: no answer to {} probes",
                r.mode.name(),
                r.sent
            )));
        }
        Ok(PathRtt {
            by_syn: r.mode == latscope_core::model::ping::ProbeMode::Syn
                && prober.ts_source() == latscope_probe::sys::TsSource::Kernel,
            how: format!("{} ping ({})", r.mode.name(), r.timestamps),
            rtt: r.rtt,
            received: r.received,
            sent: r.sent,
        })
    }

    fn detail(_cx: &Context, o: &PathRtt) -> String {
        format!(
            "{}: p50 {}, {} of {} answered",
            o.how,
            format_ns(o.rtt.p50_ns as f64),
            o.received,
            o.sent
        )
    }

    fn distribution(o: &PathRtt) -> Option<Summary> {
        Some(o.rtt.clone())
    }

    /// 50 probes 5 ms apart and the last one's 1 s timeout.
    fn budget(_plan: &Plan) -> Duration {
        Duration::from_millis(2500)
    }

    fn store(ev: &mut Evidence, o: PathRtt) {
        ev.path = Some(o.rtt);
        ev.path_by_syn = o.by_syn;
    }
}
