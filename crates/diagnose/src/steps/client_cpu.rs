//! latscope's own CPU while the requests run. latscope is itself a client: when its own threads
//! cannot run (its cgroup's CPU quota is spent, other work holds the CPUs), the requests it times
//! include its own waiting. Read as for a server on this host (`cpu.stat` of its cgroup and the
//! ancestors', cgroup v1 or v2, through a mount it can reach), and from the scheduler's own
//! per-thread figures (`/proc/self/task/*/schedstat`: time on a CPU, time runnable and waiting
//! for one, times put on one — kernel/sched/stats.c), sampled while the steps run so that the
//! threads the engines start and end meanwhile are counted too.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use latscope_core::model::diagnose::StepName;
use latscope_core::units::{format_ns, of};

use super::cpu::{
    Cgroup, CpuStat, cgroup_stats, cgroups_unreadable, cpus_allowed, throttling_since,
};
use super::step::{NotRun, Observe, requests_target};
use crate::context::Context;
use crate::evidence::{ClientCpu, Evidence, HELD_WAKE_NS};

pub struct ClientCpuStep;

/// How often the threads' scheduler figures are read: an engine thread that ends between two
/// reads loses at most this much of its figures.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// What runs meanwhile: the cgroup counters at the start and the thread sampler.
pub struct Watching {
    before: Vec<(Cgroup, CpuStat)>,
    cgroup_unread: Option<String>,
    cpus: Option<u32>,
    started: Instant,
    done: Arc<AtomicBool>,
    sampler: JoinHandle<Threads>,
}

/// One thread's scheduler figures (`/proc/PID/task/TID/schedstat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct SchedStat {
    run_ns: u64,
    wait_ns: u64,
    slices: u64,
}

impl SchedStat {
    /// "run_ns wait_ns slices" (three numbers on one line); `None` when it is not that.
    fn parse(text: &str) -> Option<SchedStat> {
        let mut f = text.split_whitespace().map(|v| v.parse::<u64>().ok());
        Some(SchedStat {
            run_ns: f.next()??,
            wait_ns: f.next()??,
            slices: f.next()??,
        })
    }

    fn since(self, b: SchedStat) -> SchedStat {
        SchedStat {
            run_ns: self.run_ns.saturating_sub(b.run_ns),
            wait_ns: self.wait_ns.saturating_sub(b.wait_ns),
            slices: self.slices.saturating_sub(b.slices),
        }
    }
}

/// Each thread's figures when first seen and when last seen.
#[derive(Default)]
struct Threads {
    first: HashMap<u32, SchedStat>,
    last: HashMap<u32, SchedStat>,
    /// The sampler's own wake-ups: how many, how many held ([`HELD_WAKE_NS`] late), the latest.
    wakes: u64,
    held_wakes: u64,
    max_late_ns: u64,
}

impl Threads {
    /// Read every thread of this process once. A thread that existed at the first read counts
    /// from there; one that began later counts from its start (its figures start at 0).
    fn sample(&mut self, initial: bool) {
        let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
            return;
        };
        for entry in dir.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            let Some(s) = std::fs::read_to_string(entry.path().join("schedstat"))
                .ok()
                .and_then(|t| SchedStat::parse(&t))
            else {
                continue;
            };
            if initial {
                self.first.insert(tid, s);
            }
            self.last.insert(tid, s);
        }
    }

    /// The threads' figures over the span, summed.
    fn total(&self) -> (SchedStat, u32) {
        let mut sum = SchedStat::default();
        for (tid, last) in &self.last {
            let d = last.since(self.first.get(tid).copied().unwrap_or_default());
            sum.run_ns += d.run_ns;
            sum.wait_ns += d.wait_ns;
            sum.slices += d.slices;
        }
        (sum, self.last.len() as u32)
    }

    /// One wake-up of the sampler, `late` beyond the sleep it asked for.
    fn woke(&mut self, late: Duration) {
        let late = late.as_nanos() as u64;
        self.wakes += 1;
        self.held_wakes += u64::from(late >= HELD_WAKE_NS);
        self.max_late_ns = self.max_late_ns.max(late);
    }
}

fn sample_until(done: &AtomicBool) -> Threads {
    let mut t = Threads::default();
    t.sample(true);
    while !done.load(Ordering::Relaxed) {
        let asleep = Instant::now();
        std::thread::sleep(SAMPLE_EVERY);
        t.woke(asleep.elapsed().saturating_sub(SAMPLE_EVERY));
        t.sample(false);
    }
    t
}

impl Observe for ClientCpuStep {
    const NAME: StepName = StepName::ClientCpu;
    const FROM: StepName = StepName::OneRequest;
    const UNTIL: StepName = StepName::ConcurrentRequests;
    type Running = Watching;
    type Output = ClientCpu;

    fn start(_cx: &Context, ev: &Evidence) -> Result<Watching, NotRun> {
        requests_target(ev)?;
        let own = std::process::id();
        let cgroup_unread = cgroups_unreadable(own);
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let sampler = std::thread::Builder::new()
            .name("client-cpu".into())
            .spawn(move || sample_until(&flag))
            .map_err(|e| NotRun::Failed(format!("cannot start a thread: {e}")))?;
        Ok(Watching {
            before: cgroup_stats(&[own]),
            cgroup_unread,
            cpus: cpus_allowed(&[own]),
            started: Instant::now(),
            done,
            sampler,
        })
    }

    fn finish(_cx: &Context, w: Watching) -> Result<ClientCpu, NotRun> {
        w.done.store(true, Ordering::Relaxed);
        let threads = w
            .sampler
            .join()
            .map_err(|_| NotRun::Failed("the sampling thread panicked".into()))?;
        let (sum, n) = threads.total();
        Ok(ClientCpu {
            throttling: throttling_since(&w.before, w.cpus),
            cgroup_unread: w.cgroup_unread,
            run_ns: sum.run_ns,
            wait_ns: sum.wait_ns,
            slices: sum.slices,
            threads: n,
            span_ns: w.started.elapsed().as_nanos() as u64,
            wakes: threads.wakes,
            held_wakes: threads.held_wakes,
            max_late_ns: threads.max_late_ns,
        })
    }

    fn detail(_cx: &Context, c: &ClientCpu) -> String {
        let threads = format!(
            "latscope's {} threads ran {} and waited {} for a CPU ({} a time put on one, {} times) over {}",
            c.threads,
            format_ns(c.run_ns as f64),
            format_ns(c.wait_ns as f64),
            format_ns(c.wait_per_slice_ns() as f64),
            c.slices,
            format_ns(c.span_ns as f64)
        );
        let cgroup = match (&c.throttling, &c.cgroup_unread) {
            (Some(t), _) => format!(
                "its cgroup {} ({}): throttled in {}, {} held back summed over its CPUs",
                t.cgroup_label(),
                t.limit.as_deref().unwrap_or("no limit"),
                of(t.throttled, t.periods, "period"),
                format_ns(t.throttled_ns as f64)
            ),
            (None, Some(why)) => format!("its cgroup's CPU limit could not be read: {why}"),
            (None, None) => "no CPU limit on its cgroups".into(),
        };
        let wakes = if c.held_wakes > 0 {
            format!(
                "; its sampler woke {} or more late {} (the latest {} late)",
                format_ns(HELD_WAKE_NS as f64),
                of(c.held_wakes, c.wakes, "time"),
                format_ns(c.max_late_ns as f64)
            )
        } else {
            String::new()
        };
        format!("{threads}; {cgroup}{wakes}")
    }

    fn store(ev: &mut Evidence, c: ClientCpu) {
        ev.client_cpu = Some(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_wake_ups_are_counted() {
        let mut t = Threads::default();
        for ms in [0, 1, 25, 3, 90, 19] {
            t.woke(Duration::from_millis(ms));
        }
        assert_eq!((t.wakes, t.held_wakes, t.max_late_ns), (6, 2, 90_000_000));
    }

    #[test]
    fn schedstat_lines() {
        assert_eq!(
            SchedStat::parse("123456 7890 12\n"),
            Some(SchedStat {
                run_ns: 123_456,
                wait_ns: 7_890,
                slices: 12
            })
        );
        assert_eq!(SchedStat::parse("1 2\n"), None);
        assert_eq!(SchedStat::parse("a b c\n"), None);
    }

    /// Threads that began meanwhile count from their start; those seen at the first read from
    /// there; this process's own threads are read for real.
    #[test]
    fn threads_count_from_their_start_or_the_first_read() {
        let mut t = Threads::default();
        let s = |run_ns, wait_ns, slices| SchedStat {
            run_ns,
            wait_ns,
            slices,
        };
        t.first.insert(1, s(1_000, 100, 10));
        t.last.insert(1, s(5_000, 600, 30));
        t.last.insert(2, s(2_000, 2_000, 4));
        assert_eq!(t.total(), (s(6_000, 2_500, 24), 2));
        let mine = || {
            std::fs::read_to_string("/proc/thread-self/schedstat")
                .ok()
                .and_then(|t| SchedStat::parse(&t))
                .unwrap()
        };
        let mut own = Threads::default();
        own.sample(true);
        let before = mine();
        let busy = Instant::now();
        while busy.elapsed() < Duration::from_millis(20) {
            std::hint::black_box(0u64);
        }
        let spent = mine().since(before);
        own.sample(false);
        let (sum, n) = own.total();
        assert!(
            n >= 1 && spent.run_ns > 0 && sum.run_ns >= spent.run_ns,
            "{n} threads, {sum:?}, this one {spent:?}"
        );
    }
}
