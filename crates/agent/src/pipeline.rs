//! The agent's [`Diagnoser`]: the diagnose crate's pipeline run in-process, with the settings an
//! agent must keep to — one second per application step and no latency-under-load step (an
//! agent must not saturate the path it watches) — and, when the target's agent answers
//! evidence requests, its end's evidence merged (`diagnose --server-agent`).

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use latscope_core::model::diagnose::{DiagnoseReport, StepName, StepStatus};
use latscope_diagnose::collect;
use latscope_diagnose::plan::{Plan, Request};

use crate::{Ask, Diagnoser, Diagnosis, Finding, PeerEvidence};

/// Runs `latscope diagnose`'s pipeline in this process.
#[derive(Clone, Copy, Debug, Default)]
pub struct InProcess;

/// The request an SLO breach makes.
fn request(ask: &Ask) -> Request {
    let mut r = Request::new(&ask.target);
    r.duration = Duration::from_secs(1);
    r.no_load = true;
    if let Some(a) = &ask.server_agent {
        r.server_agent = Some(a.address.clone());
        r.auth = Some(a.key.clone());
    }
    r
}

/// What the target's agent gave the run, from its `server agent` step.
fn peer_evidence(ask: &Ask, report: &DiagnoseReport) -> PeerEvidence {
    if ask.server_agent.is_none() {
        return PeerEvidence::NotAsked;
    }
    match report
        .steps
        .iter()
        .find(|s| s.name == StepName::ServerAgent)
    {
        Some(s) if s.status == StepStatus::Ran => PeerEvidence::Used,
        Some(s) => PeerEvidence::Failed(s.detail.clone()),
        None => PeerEvidence::Failed("the run ended before its agent was asked".into()),
    }
}

impl Diagnoser for InProcess {
    fn diagnose(&self, ask: &Ask, stop: &AtomicBool) -> Result<Diagnosis, String> {
        let plan = Plan::new(&request(ask)).map_err(|e| e.to_string())?;
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
                explains_ns: f.explains_ns,
            })
            .collect();
        Ok(Diagnosis {
            findings,
            peer: peer_evidence(ask, &report),
            report: serde_json::to_value(&report).map_err(|e| e.to_string())?,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_diagnoses_briefly_and_never_loads_the_path() {
        let ask = Ask {
            target: "10.0.0.2:7373".into(),
            server_agent: None,
        };
        let r = request(&ask);
        assert_eq!(r.duration, Duration::from_secs(1));
        assert!(r.no_load);
        assert_eq!(r.concurrency, Request::new("x").concurrency);
        assert!(r.server_agent.is_none() && r.auth.is_none());
    }

    #[test]
    fn the_targets_agent_is_asked_with_the_fleets_key() {
        let key = latscope_net::auth::AuthKey::from_bytes(b"k").unwrap();
        let ask = Ask {
            target: "10.0.0.2:80".into(),
            server_agent: Some(crate::ServerAgent {
                address: "10.0.0.2:7374".into(),
                key,
            }),
        };
        let r = request(&ask);
        assert_eq!(r.server_agent.as_deref(), Some("10.0.0.2:7374"));
        assert!(r.auth.is_some());
        // Its plan keeps the port (the CLI's default, 7373, would be serve's).
        let plan = Plan::new(&r).unwrap();
        assert_eq!(plan.server_agent.unwrap().to_string(), "10.0.0.2:7374");
    }
}
