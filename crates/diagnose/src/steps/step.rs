//! What a step is: a [`Measure`] or an [`Observe`], the [`Record`] it leaves in the report, why
//! it may not run ([`NotRun`]), and the pipeline [`Entry`] that runs either kind. Below every
//! step (each imports this, never the list of steps in `mod.rs`) and above the run context.

use std::time::Duration;

use latscope_core::Summary;
use latscope_core::model::diagnose::{Step, StepName, StepStatus, TargetKind};

use crate::context::Context;
use crate::evidence::Evidence;
use crate::plan::Plan;

/// Why a step did not produce an outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotRun {
    /// It does not apply to this target or host.
    Skipped(String),
    /// It tried and failed.
    Failed(String),
}

impl NotRun {
    fn record(self, name: StepName) -> Record {
        let (status, detail) = match self {
            NotRun::Skipped(d) => (StepStatus::Skipped, d),
            NotRun::Failed(d) => (StepStatus::Failed, d),
        };
        Record::plain(name, status, detail)
    }
}

/// A measuring step.
pub trait Measure {
    /// The step's name in the report.
    const NAME: StepName;
    /// What it measured.
    type Output;
    /// Run it, or say why not; reads what earlier steps found.
    fn run(cx: &Context, ev: &Evidence) -> Result<Self::Output, NotRun>;
    /// One line for the report.
    fn detail(cx: &Context, out: &Self::Output) -> String;
    /// Whether the outcome, although measured, means the step failed (e.g. no connect succeeded).
    fn failed(_out: &Self::Output) -> bool {
        false
    }
    /// The distribution to list under the step's name.
    fn distribution(_out: &Self::Output) -> Option<Summary> {
        None
    }
    /// Put the outcome in its field of the evidence.
    fn store(ev: &mut Evidence, out: Self::Output);
    /// The longest the step may take: past it, its stop flag is raised and it keeps what it
    /// measured so far (every engine checks the flag). By default the plan's measurement time
    /// and two seconds to set up and wind down.
    fn budget(plan: &Plan) -> Duration {
        plan.duration + Duration::from_secs(2)
    }
}

/// A step that watches other steps run: started just before `FROM` runs, finished right after
/// `UNTIL` ran.
pub trait Observe {
    const NAME: StepName;
    const FROM: StepName;
    const UNTIL: StepName;
    /// What runs in the background meanwhile.
    type Running: 'static;
    type Output;
    fn start(cx: &Context, ev: &Evidence) -> Result<Self::Running, NotRun>;
    /// About how much CPU time [`start`](Observe::start) takes (loading and verifying eBPF
    /// programs costs most of a second): the run skips the observer when latscope's own CPU
    /// limit would stretch that beyond what is left of its time budget.
    fn start_cpu(_cx: &Context) -> Duration {
        Duration::ZERO
    }
    fn finish(cx: &Context, running: Self::Running) -> Result<Self::Output, NotRun>;
    fn detail(cx: &Context, out: &Self::Output) -> String;
    fn store(ev: &mut Evidence, out: Self::Output);
}

/// One step's line in the report and the distribution it measured.
pub struct Record {
    pub step: Step,
    pub distribution: Option<Summary>,
}

impl Record {
    /// The record with the time since `started` as the step's duration.
    pub fn took(mut self, started: std::time::Instant) -> Record {
        self.step.took_ms = Some(started.elapsed().as_millis() as u64);
        self
    }

    pub fn plain(name: StepName, status: StepStatus, detail: impl Into<String>) -> Record {
        Record {
            step: Step {
                name,
                status,
                detail: detail.into(),
                measured_at: None,
                took_ms: None,
            },
            distribution: None,
        }
    }
}

/// An observer running in the background; finishing it stores its outcome.
pub type Running = Box<dyn FnOnce(&Context, &mut Evidence) -> Record>;

/// What starting an observer gives: it runs, or its record says why not.
pub enum Started {
    Running(Running),
    NotRun(Record),
}

/// One entry of the pipeline.
pub enum Entry {
    Measure {
        name: StepName,
        run: fn(&Context, &mut Evidence) -> Record,
        budget: fn(&Plan) -> Duration,
    },
    Observe {
        name: StepName,
        from: StepName,
        until: StepName,
        start: fn(&Context, &Evidence) -> Started,
        start_cpu: fn(&Context) -> Duration,
    },
}

impl Entry {
    /// The entry of measuring step `S`.
    pub const fn measure<S: Measure>() -> Entry {
        Entry::Measure {
            name: S::NAME,
            run: run_measure::<S>,
            budget: S::budget,
        }
    }

    /// The entry of observing step `S`.
    pub const fn observe<S: Observe>() -> Entry {
        Entry::Observe {
            name: S::NAME,
            from: S::FROM,
            until: S::UNTIL,
            start: start_observe::<S>,
            start_cpu: S::start_cpu,
        }
    }
}

fn ran(name: StepName, status: StepStatus, detail: String, dist: Option<Summary>) -> Record {
    let mut r = Record::plain(name, status, detail);
    r.distribution = dist;
    r
}

fn run_measure<S: Measure>(cx: &Context, ev: &mut Evidence) -> Record {
    match S::run(cx, ev) {
        Ok(out) => {
            let status = if S::failed(&out) {
                StepStatus::Failed
            } else {
                StepStatus::Ran
            };
            let r = ran(S::NAME, status, S::detail(cx, &out), S::distribution(&out));
            S::store(ev, out);
            r
        }
        Err(n) => n.record(S::NAME),
    }
}

fn start_observe<S: Observe>(cx: &Context, ev: &Evidence) -> Started {
    let running = match S::start(cx, ev) {
        Ok(r) => r,
        Err(n) => return Started::NotRun(n.record(S::NAME)),
    };
    Started::Running(Box::new(
        move |cx: &Context, ev: &mut Evidence| match S::finish(cx, running) {
            Ok(out) => {
                let r = ran(S::NAME, StepStatus::Ran, S::detail(cx, &out), None);
                S::store(ev, out);
                r
            }
            Err(n) => n.record(S::NAME),
        },
    ))
}

/// The kind of target request steps need, or why they are skipped.
pub fn requests_target(ev: &Evidence) -> Result<TargetKind, NotRun> {
    match ev.target {
        None => Err(NotRun::Skipped(
            "no connection to the target succeeded".into(),
        )),
        Some(k) if k.speaks_requests() => Ok(k),
        Some(_) => Err(NotRun::Skipped(
            "the port does not speak the latscope protocol: request steps need `latscope serve` there (or an http:// URL)".into(),
        )),
    }
}
