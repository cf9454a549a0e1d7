//! The pipeline: run each step of [`steps::PIPELINE`] in order, each filling its field of the
//! evidence, then apply the rules.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use latscope_core::Summary;
use latscope_core::model::diagnose::{
    DiagnoseReport, Responsiveness, Step, StepName, StepStatus, TargetKind,
};
use latscope_net::sock::Target;

use super::evidence::Evidence;
use super::locate::LocalServer;
use super::steps::{self, Entry, Record, Running, Started};

/// What to run.
#[derive(Clone, Debug)]
pub struct Plan {
    pub target: Target,
    pub addr: SocketAddr,
    /// Time per application measurement.
    pub duration: Duration,
    pub concurrency: u32,
    /// Request and response size for latscope targets.
    pub request_bytes: u32,
    pub response_bytes: u32,
    /// Skip the latency-under-load step (it saturates the path for a few seconds).
    pub no_load: bool,
    /// An http:// or https:// URL: the application steps use the HTTP load engine.
    pub url: Option<String>,
    /// The key for an authenticating latscope server (`--auth-file`).
    pub auth: Option<latscope_net::auth::AuthKey>,
}

/// What every step may look at: the plan, the run's stop flag, and where the server runs.
pub struct Context<'a> {
    pub plan: &'a Plan,
    pub stop: &'a AtomicBool,
    /// The server's namespace when it runs on this host (in any network namespace).
    pub server: Option<LocalServer>,
}

impl Context<'_> {
    /// Whether the run was interrupted.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// The steps' records and the evidence they filled.
struct Collected {
    steps: Vec<Step>,
    distributions: Vec<(StepName, Summary)>,
    evidence: Evidence,
}

impl Collected {
    fn push(&mut self, r: Record) {
        if let Some(d) = r.distribution {
            self.distributions.push((r.step.name, d));
        }
        self.steps.push(r.step);
    }
}

fn cut_short(name: StepName) -> Record {
    Record::plain(name, StepStatus::CutShort, "interrupted before it ran")
}

/// Run every step in order; observers start before their first step and finish after their
/// last.
fn collect(cx: &Context, progress: &dyn Fn(&str)) -> Collected {
    let mut c = Collected {
        steps: Vec::new(),
        distributions: Vec::new(),
        evidence: Evidence::default(),
    };
    let observers: Vec<&Entry> = steps::PIPELINE
        .iter()
        .filter(|e| matches!(e, Entry::Observe { .. }))
        .collect();
    let mut running: Vec<(StepName, Running)> = Vec::new();
    for entry in steps::PIPELINE {
        let Entry::Measure { name, run } = entry else {
            continue;
        };
        for o in &observers {
            if let Entry::Observe {
                name: on,
                from,
                until,
                start,
            } = o
                && from == name
            {
                if cx.stopped() {
                    c.push(cut_short(*on));
                    continue;
                }
                match start(cx, &c.evidence) {
                    Started::Running(r) => running.push((*until, r)),
                    Started::NotRun(rec) => c.push(rec),
                }
            }
        }
        if cx.stopped() {
            c.push(cut_short(*name));
        } else {
            progress(name.label());
            let rec = run(cx, &mut c.evidence);
            c.push(rec);
        }
        let (done, rest): (Vec<_>, Vec<_>) = running.into_iter().partition(|(u, _)| u == name);
        running = rest;
        for (_, finish) in done {
            let rec = finish(cx, &mut c.evidence);
            c.push(rec);
        }
    }
    for (_, finish) in running {
        let rec = finish(cx, &mut c.evidence);
        c.push(rec);
    }
    c
}

/// Run the investigation.
pub fn run(p: &Plan, stop: &AtomicBool, progress: &dyn Fn(&str)) -> DiagnoseReport {
    let cx = Context {
        plan: p,
        stop,
        server: super::locate::locate(p.addr),
    };
    let c = collect(&cx, progress);
    let findings = super::rules::apply(&c.evidence);
    let budget = super::budget(&c.evidence);
    let verdict = super::verdict(&findings, &budget);
    let mut report = DiagnoseReport {
        meta: steps::meta("diagnose"),
        target: p.target.to_string(),
        target_kind: c.evidence.target.unwrap_or(if p.url.is_some() {
            TargetKind::Http
        } else {
            TargetKind::Tcp
        }),
        steps: c.steps,
        budget,
        distributions: c.distributions,
        findings,
        verdict,
        interrupted: cx.stopped(),
        phases: c.evidence.phases,
        responsiveness: c.evidence.under_load.as_ref().map(|u| Responsiveness {
            idle_rpm: Responsiveness::rpm(u.idle.p50_ns),
            loaded_rpm: Responsiveness::rpm(u.loaded.p50_ns),
            load: u.load.describe(),
        }),
        max_time_ms: 0,
    };
    if let Some(why) = report.unmeasurable() {
        report.verdict = format!("not measured — {why}");
    }
    report
}
