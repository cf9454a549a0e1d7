//! The pipeline: run each step of [`steps::PIPELINE`] in order, each filling its field of the
//! evidence, then apply the rules.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use latscope_core::Summary;
use latscope_core::model::diagnose::{
    DiagnoseReport, Responsiveness, Step, StepName, StepStatus, TargetKind,
};
use latscope_core::units::format_ns;

use super::evidence::Evidence;
use super::locate::LocalServer;
use super::steps::{self, Entry, Record, Running, Started};

pub use crate::plan::{DEFAULT_MAX_TIME, Plan};

/// What every step may look at: the plan and its stop flag — raised on Ctrl-C, and for a
/// step when its time budget is spent; engines get it as their stop flag.
pub struct Context<'a> {
    pub plan: &'a Plan,
    pub stop: &'a AtomicBool,
    /// The server's namespace when it runs on this host (in any network namespace).
    pub server: Option<LocalServer>,
}

impl Context<'_> {
    /// Whether the step (or the run) was told to stop.
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

fn out_of_time(name: StepName, max: Duration) -> Record {
    Record::plain(
        name,
        StepStatus::CutShort,
        format!(
            "not run: the run's time budget (--max-time {}) was spent",
            format_ns(max.as_nanos() as f64)
        ),
    )
}

/// Run `f` with a stop flag raised when the run is interrupted or when `deadline` passes
/// (checked every 20 ms by a watchdog thread). Returns `f`'s value and whether the deadline
/// cut it short.
pub(crate) fn bounded<T>(
    interrupt: &AtomicBool,
    deadline: Instant,
    f: impl FnOnce(&AtomicBool) -> T,
) -> (T, bool) {
    let flag = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let cut = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                if interrupt.load(Ordering::Relaxed) {
                    flag.store(true, Ordering::Relaxed);
                } else if Instant::now() >= deadline {
                    cut.store(true, Ordering::Relaxed);
                    flag.store(true, Ordering::Relaxed);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let v = f(&flag);
        done.store(true, Ordering::Relaxed);
        (v, cut.load(Ordering::Relaxed))
    })
}

/// Run every step in order, each within its time budget and the run's; observers start before
/// their first step and finish after their last.
fn collect(cx: &Context, progress: &dyn Fn(&str)) -> Collected {
    let mut c = Collected {
        steps: Vec::new(),
        distributions: Vec::new(),
        evidence: Evidence::default(),
    };
    let run_deadline = Instant::now() + cx.plan.max_time;
    let observers: Vec<&Entry> = steps::PIPELINE
        .iter()
        .filter(|e| matches!(e, Entry::Observe { .. }))
        .collect();
    let mut running: Vec<(StepName, Instant, Running)> = Vec::new();
    for entry in steps::PIPELINE {
        let Entry::Measure { name, run, budget } = entry else {
            continue;
        };
        let spent = Instant::now() >= run_deadline;
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
                if spent {
                    c.push(out_of_time(*on, cx.plan.max_time));
                    continue;
                }
                let t0 = Instant::now();
                match start(cx, &c.evidence) {
                    Started::Running(r) => running.push((*until, t0, r)),
                    Started::NotRun(rec) => c.push(rec.took(t0)),
                }
            }
        }
        if cx.stopped() {
            c.push(cut_short(*name));
        } else if spent {
            c.push(out_of_time(*name, cx.plan.max_time));
        } else {
            progress(name.label());
            let started = Instant::now();
            let deadline = (started + budget(cx.plan)).min(run_deadline);
            let (mut rec, cut) = bounded(cx.stop, deadline, |flag| {
                let step_cx = Context {
                    plan: cx.plan,
                    stop: flag,
                    server: cx.server,
                };
                run(&step_cx, &mut c.evidence)
            });
            if cut {
                // A step that measured keeps its partial figures as evidence and is listed as
                // cut short; one that failed stays failed, saying why it ran out of time.
                if rec.step.status == StepStatus::Ran {
                    rec.step.status = StepStatus::CutShort;
                }
                rec.step.detail = format!(
                    "cut short at its {} budget: {}",
                    format_ns(deadline.duration_since(started).as_nanos() as f64),
                    rec.step.detail
                );
            }
            c.push(rec.took(started));
        }
        let (done, rest): (Vec<_>, Vec<_>) = running.into_iter().partition(|(u, ..)| u == name);
        running = rest;
        for (_, t0, finish) in done {
            let rec = finish(cx, &mut c.evidence);
            c.push(rec.took(t0));
        }
    }
    for (_, t0, finish) in running {
        let rec = finish(cx, &mut c.evidence);
        c.push(rec.took(t0));
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
    let mut c = collect(&cx, progress);
    crate::remote::client::merge_steps(&cx, &mut c.steps, &c.evidence);
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
        max_time_ms: p.max_time.as_millis() as u64,
    };
    // No request completed (a server that accepts and never answers): a rule that states a cost
    // per completed request has nothing to stand on; only what explains the failure stays.
    if report.target_kind.speaks_requests() && !report.requests_completed() {
        report
            .findings
            .retain(|f| f.rule.explains_failed_requests());
        report.verdict = super::verdict(&report.findings, &report.budget);
    }
    if let Some(why) = report.unmeasurable() {
        report.verdict = format!("not measured — {why}");
    }
    if let Some(note) = crate::remote::client::verdict_note(p, &report.steps) {
        report.verdict.push_str(&note);
    }
    report
}
