//! The agent's [`Diagnoser`]: the diagnose crate's pipeline run in-process, with the settings an
//! agent must keep to — one second per application step and no latency-under-load step (an
//! agent must not saturate the path it watches).

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use latscope_diagnose::collect;
use latscope_diagnose::plan::{Plan, Request};

use crate::{Diagnoser, Diagnosis, Finding};

/// Runs `latscope diagnose`'s pipeline in this process.
#[derive(Clone, Copy, Debug, Default)]
pub struct InProcess;

/// The request an SLO breach on `target` makes.
fn request(target: &str) -> Request {
    let mut r = Request::new(target);
    r.duration = Duration::from_secs(1);
    r.no_load = true;
    r
}

impl Diagnoser for InProcess {
    fn diagnose(&self, target: &str, stop: &AtomicBool) -> Result<Diagnosis, String> {
        let plan = Plan::new(&request(target)).map_err(|e| e.to_string())?;
        let report = collect::run(&plan, stop, &|_| {});
        if let Some(why) = report.unmeasurable() {
            return Err(why);
        }
        let findings = report
            .findings
            .iter()
            .map(|f| Finding {
                rule: f.rule.name().to_string(),
                side: serde_json::to_value(f.side)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_else(|| f.side.name().to_string()),
            })
            .collect();
        Ok(Diagnosis {
            findings,
            report: serde_json::to_value(&report).map_err(|e| e.to_string())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_diagnoses_briefly_and_never_loads_the_path() {
        let r = request("10.0.0.2:7373");
        assert_eq!(r.duration, Duration::from_secs(1));
        assert!(r.no_load);
        assert_eq!(r.concurrency, Request::new("x").concurrency);
    }
}
