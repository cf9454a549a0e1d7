//! A URL request broken into phases, as `curl -w` / httpstat show it: DNS, connect, TLS, time to
//! first byte, transfer. Each request is a new connection (the phases of a first request), and
//! the medians of a few go into the evidence.

use std::time::{Duration, Instant};

use latscope_core::model::diagnose::{RequestPhases, StepName, TargetKind};
use latscope_core::units::format_ns;

use super::engines::http_options;
use super::{Measure, NotRun, requests_target};
use crate::collect::{Context, Plan};
use crate::evidence::Evidence;

pub struct Phases;

/// Requests measured (each a new connection), at most.
const REQUESTS: usize = 5;
/// Time allowed for all of them.
const TIME: Duration = Duration::from_millis(2500);

impl Measure for Phases {
    const NAME: StepName = StepName::RequestPhases;
    type Output = RequestPhases;

    fn run(cx: &Context, ev: &Evidence) -> Result<RequestPhases, NotRun> {
        if requests_target(ev)? != TargetKind::Http {
            return Err(NotRun::Skipped("URL targets only".into()));
        }
        let Some(url) = &cx.plan.url else {
            return Err(NotRun::Skipped("URL targets only".into()));
        };
        let until = Instant::now() + TIME;
        let mut got = Vec::with_capacity(REQUESTS);
        let mut last_err = None;
        while got.len() < REQUESTS && Instant::now() < until && !cx.stopped() {
            let left = until.saturating_duration_since(Instant::now());
            let mut o = http_options(url, 1, false, Duration::from_secs(1));
            o.timeout = left.max(Duration::from_millis(100));
            match latscope_http::request_phases(&o) {
                Ok(p) => got.push(p),
                Err(e) => {
                    last_err = Some(e.to_string());
                    break;
                }
            }
        }
        if got.is_empty() {
            return Err(NotRun::Failed(
                last_err.unwrap_or_else(|| "no request completed in time".into()),
            ));
        }
        Ok(medians(&got))
    }

    fn detail(_cx: &Context, p: &RequestPhases) -> String {
        let f = |v: u64| format_ns(v as f64);
        format!(
            "median of {}: DNS {}, connect {}, TLS {}, first byte {}, transfer {}",
            p.requests,
            f(p.dns_ns),
            f(p.connect_ns),
            p.tls_ns.map(f).unwrap_or_else(|| "-".into()),
            f(p.ttfb_ns),
            f(p.transfer_ns)
        )
    }

    /// Its requests share TIME.
    fn budget(_plan: &Plan) -> Duration {
        TIME + Duration::from_millis(500)
    }

    fn store(ev: &mut Evidence, p: RequestPhases) {
        ev.phases = Some(p);
    }
}

/// Each phase's median (the upper median of an even count) over the requests.
fn medians(all: &[latscope_http::Phases]) -> RequestPhases {
    let med = |f: &dyn Fn(&latscope_http::Phases) -> u64| {
        let mut v: Vec<u64> = all.iter().map(f).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    RequestPhases {
        requests: all.len() as u32,
        dns_ns: med(&|p| p.dns_ns),
        connect_ns: med(&|p| p.connect_ns),
        tls_ns: all
            .iter()
            .all(|p| p.tls_ns.is_some())
            .then(|| med(&|p| p.tls_ns.unwrap_or(0))),
        ttfb_ns: med(&|p| p.ttfb_ns),
        transfer_ns: med(&|p| p.transfer_ns),
    }
}
