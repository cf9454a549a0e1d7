//! `client_cpu_starved`: latscope itself — the client — could not run when it needed to.

use super::*;

/// The least a wait for a CPU must be, on average each time latscope's threads were put on one,
/// and the median lateness of its sleeping thread's wake-ups, to starve the client: 1 ms, ten
/// times the whole of a request on a local path, and a hundred times an idle host's wake-up.
pub const STARVED_WAIT_NS: u64 = 1_000_000;

/// The share of periods a cgroup must be throttled in to starve latscope: one in ten (and at
/// least two periods, and a millisecond held back).
pub const STARVED_PERIODS: u64 = 10;

/// What starved the client, as far as it was measured.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Starved {
    /// Its cgroup's CPU quota, throttled in a material share of the periods.
    pub throttled: Option<Throttling>,
    /// Its threads' mean wait for a CPU each time they were put on one, when material.
    pub wait_per_slice_ns: Option<u64>,
    /// Its sleeping thread's wake-ups: (median, p99) lateness, when the median is material.
    pub late: Option<(u64, u64)>,
    /// Its sampler held ([`HELD_WAKE_NS`] late or more) in a material share of its wake-ups:
    /// (held, wake-ups, the latest lateness).
    pub held: Option<(u64, u64, u64)>,
}

/// The wake-ups of the sampler that must be held to starve the client: at least 4 and 1 in 25
/// (a 10% quota held it in most of them; a loaded 2-core host, in none of hundreds).
pub const HELD_WAKES: u64 = 4;

impl Starved {
    /// How long a request can be held by it: a throttled period (wall clock), else the
    /// latest of the measured wake-ups (p99), else the mean wait for a CPU.
    fn hold_ns(&self) -> u64 {
        if let Some(h) = self
            .throttled
            .as_ref()
            .and_then(Throttling::held_per_period)
        {
            return h.held_ns;
        }
        match (self.late, self.held, self.wait_per_slice_ns) {
            (Some((_, p99)), ..) => p99,
            (None, Some((.., late)), _) => late,
            (None, None, Some(w)) => w,
            (None, None, None) => 0,
        }
    }
}

/// Whether latscope's own CPU was starved while it measured the requests, and by what.
pub(crate) fn client_starved(e: &Evidence) -> Option<Starved> {
    let c = e.client_cpu.as_ref();
    let throttled = c.and_then(|c| c.throttling.clone()).filter(|t| {
        t.throttled >= 2
            && t.throttled.saturating_mul(STARVED_PERIODS) >= t.periods
            && t.throttled_ns >= 1_000_000
    });
    let wait_per_slice_ns = c
        .filter(|c| c.wait_ns.saturating_mul(10) >= c.span_ns)
        .map(ClientCpu::wait_per_slice_ns)
        .filter(|&w| w >= STARVED_WAIT_NS);
    let late = e
        .host_noise
        .as_ref()
        .filter(|n| n.p50_ns >= STARVED_WAIT_NS)
        .map(|n| (n.p50_ns, n.p99_ns));
    let held = c
        .filter(|c| c.held_wakes >= HELD_WAKES && c.held_wakes.saturating_mul(25) >= c.wakes)
        .map(|c| (c.held_wakes, c.wakes, c.max_late_ns));
    (throttled.is_some() || wait_per_slice_ns.is_some() || late.is_some() || held.is_some())
        .then_some(Starved {
            throttled,
            wait_per_slice_ns,
            late,
            held,
        })
}

/// A caveat for a client whose own cgroup throttled it while it measured, too seldom to starve
/// it ([`client_starved`] says no): a request timed in one of those periods includes up to a
/// throttled period of latscope's own waiting, so the tail is unreliable while the medians stand.
/// None when it was never throttled (at least a millisecond held back), or when it was starved.
pub(crate) fn throttled_caveat(e: &Evidence) -> Option<String> {
    if client_starved(e).is_some() {
        return None;
    }
    let t = e.client_cpu.as_ref()?.throttling.as_ref()?;
    if t.throttled == 0 || t.throttled_ns < 1_000_000 {
        return None;
    }
    Some(format!(
        "latscope's own cgroup {} ({}) throttled it in {} while it measured{}: a request timed then includes its own waiting, so the tail figures are not the server's or the path's",
        t.cgroup_label(),
        t.limit.as_deref().unwrap_or("limit set"),
        of(t.throttled, t.periods, "period"),
        t.held_per_period()
            .map(|h| format!(", up to {} at a time", format_ns(h.held_ns as f64)))
            .unwrap_or_default()
    ))
}

/// The client's own CPU starved: latscope's cgroup ran out of its CPU quota (v1
/// `cpu.cfs_quota_us`, v2 `cpu.max`; `cpu.stat` throttled periods), or its threads waited
/// milliseconds for a CPU each time they were to run (`/proc/self/task/*/schedstat`), or its
/// sleeping thread woke milliseconds late (the single-request step's wake-up lateness), or its
/// sampling thread was held tens of milliseconds in a share of its wake-ups ([`HELD_WAKES`];
/// what a quota shows where its cgroup cannot be read). A
/// request latscope times then includes latscope's own waiting.
///
/// Where the requests show it — a tail of at least a millisecond — that tail, up to what a
/// hold (a throttled period, a late wake-up) lasts, is its cost, and a cause like any other.
/// Where they do not, it is still said: the figures were taken by a client that could not
/// always run, and a run that found nothing else is not "no problem found" (issue 37: latscope
/// in a 10% quota, throttled in 152 of 164 periods, said so).
pub fn client_cpu_starved(e: &Evidence) -> Option<Diagnosis> {
    let s = client_starved(e)?;
    let hold = s.hold_ns();
    let tail_ns = tail(e).map_or(0, |(p50, p99)| p99.saturating_sub(p50));
    let explains_ns = if tail_ns >= 1_000_000 {
        tail_ns.min(hold.max(1_000_000))
    } else {
        0
    };
    let mut evidence = Vec::new();
    let mut what = Vec::new();
    if let Some(t) = &s.throttled {
        what.push(format!(
            "its cgroup was throttled in {}",
            of(t.throttled, t.periods, "period")
        ));
        evidence.push(format!(
            "latscope's cgroup {} ({}): throttled in {} while the requests ran, {} held back summed over its CPUs{}",
            t.cgroup_label(),
            t.limit.as_deref().unwrap_or("limit set"),
            of(t.throttled, t.periods, "period"),
            format_ns(t.throttled_ns as f64),
            t.held_per_period()
                .map(|h| format!(" ({} a throttled period, wall clock)", format_ns(h.held_ns as f64)))
                .unwrap_or_default()
        ));
    }
    if let (Some(w), Some(c)) = (s.wait_per_slice_ns, &e.client_cpu) {
        what.push(format!(
            "its threads waited {} for a CPU each time",
            format_ns(w as f64)
        ));
        evidence.push(format!(
            "latscope's {} threads waited {} for a CPU over {} ({} each of the {} times they were put on one; /proc/self/task/*/schedstat)",
            c.threads,
            format_ns(c.wait_ns as f64),
            format_ns(c.span_ns as f64),
            format_ns(w as f64),
            c.slices
        ));
    }
    if let Some((p50, p99)) = s.late {
        what.push(format!(
            "its timers woke {} late (median)",
            format_ns(p50 as f64)
        ));
        evidence.push(format!(
            "latscope's sleeping thread woke {} late at the median, {} at the p99, while it timed the single requests",
            format_ns(p50 as f64),
            format_ns(p99 as f64)
        ));
    }
    if let Some((held, wakes, latest)) = s.held {
        what.push(format!(
            "it was held off the CPUs {} or more {}",
            format_ns(HELD_WAKE_NS as f64),
            of(held, wakes, "time")
        ));
        evidence.push(format!(
            "latscope's sampling thread, asleep for 50 ms at a time, woke {} or more late {} while the requests ran (the latest {} late): its threads could not run for that long",
            format_ns(HELD_WAKE_NS as f64),
            of(held, wakes, "time"),
            format_ns(latest as f64)
        ));
    }
    if let Some(why) = e.client_cpu.as_ref().and_then(|c| c.cgroup_unread.as_ref()) {
        evidence.push(format!(
            "latscope's own cgroup could not be read ({why}): its CPU quota is unknown"
        ));
    }
    evidence.push(if explains_ns > 0 {
        format!(
            "the requests' tail: {} beyond the median, as long as the client's own holds ({}) — the requests waited for latscope, not for the server or the path",
            format_ns(tail_ns as f64),
            format_ns(hold as f64)
        )
    } else {
        "the requests do not show it as a tail, but every figure was timed by a client that could not always run: the shortest ones and the tails are unreliable".into()
    });
    Some(Diagnosis {
        rule: RuleId::ClientCpuStarved,
        title: format!(
            "latscope (the client) was starved of CPU while it measured — {}: its figures include its own waiting",
            what.join(", ")
        ),
        explains_ns,
        confidence: if s.throttled.is_some() { 0.85 } else { 0.7 },
        side: Side::Client,
        evidence,
        fix: "give the client the CPU it needs before trusting its figures: raise its cgroup's CPU limit (`cpu.max`, `cpu.cfs_quota_us`; a CI runner's or a pod's CPU limit) or run it where it is not limited; move other busy work off its CPUs (`top`, `taskset`); then measure again".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
