//! `cpu_throttling`: the server's cgroup ran out of its CPU quota.

use super::*;

/// CPU throttling: the server's cgroup ran out of its CPU quota (cgroup v1 `cpu.cfs_quota_us`,
/// v2 `cpu.max`) while the requests ran, and its threads were held back until the next period —
/// requests arriving meanwhile wait, which shows in the tail. The kernel's own counters
/// (`cpu.stat` nr_throttled, throttled_time / throttled_usec) are the evidence.
pub fn cpu_throttling(e: &Evidence) -> Option<Diagnosis> {
    let c = e.cpu.as_ref()?;
    let t = c.throttling.as_ref()?;
    if !throttled_materially(t) {
        return None;
    }
    let (p50, p99) = tail(e)?;
    // Wall clock, not cpu.stat's sum over the CPUs held (see `held_per_period`).
    let held = t.held_per_period()?;
    let tail_ns = p99.saturating_sub(p50);
    // Where the requests show the holds as a tail (a millisecond or more), that tail up to a
    // hold is the cost. Where they do not (every request waited alike, so the median carries
    // it; or few met a hold in this run), what the throttled periods make a request arriving at
    // any moment wait — the mechanism's own figure, the same in every run — when the requests
    // bear it out: never more than one request's mean beyond the path, and nothing when that
    // is less than half the prediction (requests that waited for nothing contradict it).
    let (explains_ns, seen) = if tail_ns >= 1_000_000 {
        (tail_ns.min(held.held_ns.max(1_000_000)), true)
    } else {
        let expected = expected_wait_ns(t, held.held_ns);
        let measured = beyond_path_ns(e);
        if expected == 0 || measured.saturating_mul(2) < expected {
            return None;
        }
        (expected.min(measured), false)
    };
    Some(Diagnosis {
        rule: RuleId::CpuThrottling,
        title: "the server's cgroup runs out of CPU quota: its threads are throttled until the next period".into(),
        explains_ns,
        confidence: if seen { 0.85 } else { 0.75 },
        side: Side::Server,
        evidence: vec![
            format!(
                "cgroup {} of {} ({}): throttled in {} while the requests ran, {} held back summed over its CPUs ({} a throttled period, wall clock, {:.1} CPUs held at once)",
                t.cgroup,
                c.process,
                t.limit.as_deref().unwrap_or("limit set"),
                of(t.throttled, t.periods, "period"),
                format_ns(t.throttled_ns as f64),
                format_ns(held.held_ns as f64),
                held.cpus_held
            ),
            if seen {
                format!(
                    "requests: p50 {}, p99 {} — the tail is requests that arrived while it was throttled",
                    format_ns(p50 as f64),
                    format_ns(p99 as f64)
                )
            } else {
                format!(
                    "requests: p50 {}, p99 {} — no tail of a millisecond in this run; one arriving at any moment waits {} on average for the periods held back, as the requests bear out",
                    format_ns(p50 as f64),
                    format_ns(p99 as f64),
                    format_ns(explains_ns as f64)
                )
            },
        ],
        fix: "raise the cgroup's CPU limit (`cpu.max` on cgroup v2, `cpu.cfs_quota_us` on v1; Kubernetes: the container's CPU limit), or make the server use less CPU per request; fewer busy threads burn the quota less fast".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// Throttled in a material share of the periods the requests ran in: at least one in ten (and
/// two), and a millisecond held back. The kernel's counters, not the requests, say so: the
/// same in every run of the same set-up, whichever requests met a throttled period.
pub(crate) fn throttled_materially(t: &Throttling) -> bool {
    t.throttled >= 2 && t.throttled.saturating_mul(10) >= t.periods && t.throttled_ns >= 1_000_000
}

/// Throttled in most periods (at least half): the group cannot serve faster than its quota,
/// and whatever its requests wait beyond a hold's length is theirs to explain.
pub(crate) fn throttled_mostly(t: &Throttling) -> bool {
    throttled_materially(t) && t.throttled.saturating_mul(2) >= t.periods
}

/// What a request arriving at a random moment waits for the throttled periods on average: the
/// chance it arrives while the group is held (the held share of wall time, `held` in each of
/// `throttled` of `periods` periods) times half a hold (it waits out the rest of it).
pub(crate) fn expected_wait_ns(t: &Throttling, held_ns: u64) -> u64 {
    let period_ns = t.period_us.unwrap_or(100_000).max(1) as f64 * 1e3;
    let share = t.throttled as f64 / t.periods.max(1) as f64;
    let held = held_ns as f64;
    (share * (held / period_ns).min(1.0) * held / 2.0) as u64
}

/// One request's mean beyond the path's round trip (the single requests), ns: what the
/// requests measured a wait can be part of.
fn beyond_path_ns(e: &Evidence) -> u64 {
    let path = e.path.as_ref().map_or(0.0, |p| p.p50_ns as f64);
    e.single
        .as_ref()
        .map_or(0, |s| (s.mean_ns - path).max(0.0) as u64)
}
