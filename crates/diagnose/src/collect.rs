//! The pipeline: run each step of [`steps::PIPELINE`] in order, each filling its field of the
//! evidence, then apply the rules.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use latscope_core::Summary;
use latscope_core::model::diagnose::{
    DiagnoseReport, Responsiveness, Step, StepName, StepStatus, TargetKind,
};
use latscope_core::model::http::CertificateCheck;
use latscope_core::units::format_ns;

use crate::context::Context;
use crate::evidence::Evidence;
use crate::plan::Plan;
use crate::steps;
use crate::steps::server_agent;
use crate::steps::step::{Entry, Record, Running, Started};

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

/// Label a step whose budget ran out while it ran. One that measured keeps its partial figures
/// as evidence and is listed as cut short; one that failed stays failed, saying why it ran out
/// of time. One that skipped was never cut short: it did not apply (a zero budget, "an address,
/// not a name"), and the watchdog's deadline passing meanwhile changes nothing of that (issue 41:
/// "cut short at its 0ns budget: an address, not a name").
fn cut_at_budget(rec: &mut Record, budget: Duration) {
    match rec.step.status {
        StepStatus::Skipped => return,
        StepStatus::Ran => rec.step.status = StepStatus::CutShort,
        StepStatus::Failed | StepStatus::CutShort => {}
    }
    rec.step.detail = format!(
        "cut short at its {} budget: {}",
        format_ns(budget.as_nanos() as f64),
        rec.step.detail
    );
}

/// Why an observer whose start costs about `cpu` of CPU time is not started with `left` of the
/// run, when latscope's own cgroup allows it `limit` (quota, period, µs): at that rate the start
/// alone would take more than half of what is left, and the measurements after it would be cut
/// or the run overrun its --max-time. (At 10 ms per 100 ms, the kernel-stack probes' second of
/// CPU waits ~10 s: they still run; at 1 ms per 100 ms, ~100 s: they do not.)
fn too_starved_to_start(
    cpu: Duration,
    limit: Option<(u64, u64)>,
    left: Duration,
) -> Option<String> {
    let (quota, period) = limit?;
    if cpu.is_zero() || quota == 0 || period == 0 {
        return None;
    }
    let share = (quota as f64 / period as f64).min(1.0);
    let wait = cpu.as_secs_f64() / share;
    (wait > left.as_secs_f64() / 2.0).then(|| {
        format!(
            "not run: latscope's own cgroup allows it {} of CPU per {}, and starting this step \
             (loading its eBPF programs, about {} of CPU) would take about {} of the {} left of \
             the run; raise latscope's CPU limit to observe it",
            format_ns(quota as f64 * 1e3),
            format_ns(period as f64 * 1e3),
            format_ns(cpu.as_nanos() as f64),
            format_ns(wait * 1e9),
            format_ns(left.as_nanos() as f64),
        )
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
    // latscope's own CPU limit, read once: under a quota of a few ms per period, an observer
    // that loads eBPF programs would wait minutes for its start alone (issue 37).
    let own_limit = std::cell::LazyCell::new(steps::cpu::own_cpu_limit);
    let observers: Vec<&Entry> = steps::PIPELINE
        .iter()
        .filter(|e| matches!(e, Entry::Observe { .. }))
        .collect();
    let mut running: Vec<(StepName, Instant, Running)> = Vec::new();
    // The time the steps so far left of their budgets: a later step may use it, as long as the
    // steps after it keep their own budgets within the run's. A target 120 ms away whose page
    // takes seconds through a small window needs more than one step's budget for its first
    // request, and its quick first steps left that time unused.
    let mut saved = Duration::ZERO;
    let after = |name: &StepName| -> Duration {
        steps::PIPELINE
            .iter()
            .skip_while(|e| !matches!(e, Entry::Measure { name: n, .. } if n == name))
            .skip(1)
            .filter_map(|e| match e {
                Entry::Measure { budget, .. } => Some(budget(cx.plan)),
                Entry::Observe { .. } => None,
            })
            .sum()
    };
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
                start_cpu,
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
                let left = run_deadline.saturating_duration_since(Instant::now());
                if let Some(why) = too_starved_to_start(start_cpu(cx), *own_limit, left) {
                    c.push(Record::plain(*on, StepStatus::Skipped, why));
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
            let deadline = (started + budget(cx.plan) + saved)
                .min(run_deadline.checked_sub(after(name)).unwrap_or(started))
                .max(started + budget(cx.plan))
                .min(run_deadline);
            let (mut rec, cut) = crate::context::bounded(cx.stop, deadline, |flag| {
                let step_cx = Context {
                    plan: cx.plan,
                    stop: flag,
                    server: cx.server,
                };
                run(&step_cx, &mut c.evidence)
            });
            if cut {
                cut_at_budget(&mut rec, deadline.duration_since(started));
            }
            saved = (saved + budget(cx.plan)).saturating_sub(started.elapsed());
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
    server_agent::merge_steps(&cx, &mut c.steps, &c.evidence);
    let findings = super::rules::apply(&c.evidence);
    let budget = super::budget(&c.evidence);
    let round_trips = super::accounts::round_trips(&c.evidence, &findings);
    let verdict = super::verdict(&findings, &budget, round_trips.as_ref());
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
        names: c.evidence.names.clone(),
        responsiveness: c.evidence.under_load.as_ref().map(|u| Responsiveness {
            idle_rpm: Responsiveness::rpm(u.idle.p50_ns),
            loaded_rpm: Responsiveness::rpm(u.loaded.p50_ns),
            load: u.load.describe(),
        }),
        max_time_ms: p.max_time.as_millis() as u64,
        round_trips,
        certificate: p.target_is_https().then_some(if p.tls.insecure {
            CertificateCheck::NotVerified
        } else {
            CertificateCheck::Verified
        }),
    };
    // No request completed (a server that accepts and never answers): a rule that states a cost
    // per completed request has nothing to stand on; only what explains the failure stays.
    if report.target_kind.speaks_requests() && !report.requests_completed() {
        report
            .findings
            .retain(|f| f.rule.explains_failed_requests());
        report.round_trips = super::accounts::round_trips(&c.evidence, &report.findings);
        report.verdict = super::verdict(
            &report.findings,
            &report.budget,
            report.round_trips.as_ref(),
        );
    }
    if let Some(why) = report.unmeasurable() {
        report.verdict = format!("not measured — {why}");
    }
    // A client throttled now and then by its own CPU limit is said to be so, whatever the
    // verdict: never a clean "nothing to save" over figures its waiting may be in (issue 37).
    if let Some(caveat) = super::rules::throttled_caveat(&c.evidence) {
        report.verdict.push_str(&format!(" (caveat: {caveat})"));
    }
    if let Some(note) = server_agent::verdict_note(p, &report.steps) {
        report.verdict.push_str(&note);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 37: latscope under 1 ms of CPU per 100 ms loaded its kernel-stack probes for two
    /// minutes and ran 147 s against its --max-time of 30 s; under 10 ms per 100 ms they still
    /// start, and without a limit (or with a start that costs nothing) nothing is skipped.
    #[test]
    fn an_observer_too_slow_to_start_under_latscopes_own_limit_is_skipped() {
        let second = Duration::from_secs(1);
        let left = Duration::from_secs(26);
        let why = too_starved_to_start(second, Some((1_000, 100_000)), left).unwrap();
        assert!(why.contains("1ms of CPU per 100ms"), "{why}");
        assert!(why.contains("about 100s"), "{why}");
        assert!(too_starved_to_start(second, Some((10_000, 100_000)), left).is_none());
        assert!(too_starved_to_start(second, None, left).is_none());
        assert!(too_starved_to_start(Duration::ZERO, Some((1_000, 100_000)), left).is_none());
        // A quota above one CPU does not make the start faster than one CPU runs it.
        assert!(
            too_starved_to_start(second, Some((400_000, 100_000)), Duration::from_secs(1))
                .is_some()
        );
    }

    /// Issue 41: a step that did not apply (a zero budget, an address where a name would be
    /// looked up) read "cut short at its 0ns budget: an address, not a name".
    #[test]
    fn a_skipped_step_is_never_relabelled_as_cut_short() {
        let mut rec = Record::plain(
            StepName::NameQueries,
            StepStatus::Skipped,
            "an address, not a name",
        );
        cut_at_budget(&mut rec, Duration::ZERO);
        assert_eq!(rec.step.status, StepStatus::Skipped);
        assert_eq!(rec.step.detail, "an address, not a name");
        // A step the budget stopped while it measured says so, and keeps what it measured.
        let mut rec = Record::plain(StepName::OneRequest, StepStatus::Ran, "120 requests");
        cut_at_budget(&mut rec, Duration::from_secs(2));
        assert_eq!(rec.step.status, StepStatus::CutShort);
        assert_eq!(rec.step.detail, "cut short at its 2s budget: 120 requests");
        // One that failed stays failed, saying why.
        let mut rec = Record::plain(StepName::OneRequest, StepStatus::Failed, "no answer");
        cut_at_budget(&mut rec, Duration::from_secs(2));
        assert_eq!(rec.step.status, StepStatus::Failed);
        assert!(rec.step.detail.starts_with("cut short at its 2s budget"));
    }
}
