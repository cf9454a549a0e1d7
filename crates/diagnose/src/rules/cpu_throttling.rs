//! `cpu_throttling`: the server's cgroup ran out of its CPU quota.

use super::tail::{MIN_STALLS, STALL_SHARE_PERMILLE, Tail, stalls_counted};
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
    //
    // A request at a time rarely meets a hold when a co-tenant spends most of the quota: the
    // holds then show as rare stalls of a hold's length, below any quantile the client reads
    // (the fleet test's edge: 10 of 1,131 requests stalled 98 ms, held 97 ms in 54 of 54
    // periods). Those stalls are the tail; their cost is what they make the average request
    // wait (they are waited out by whoever arrives during one).
    //
    // A group held in most periods whose run met only a few of the holds (two to four stalls
    // of a hold's length, too few and too short a share of the time for a tail of its own):
    // the counters say the holds happened, the stalls that the requests met them — last, when
    // the requests neither show a tail nor bear out the predicted wait.
    let stalls_of = |min_stalls, share| {
        (tail_ns < 1_000_000)
            .then(|| stalls_of_holds(e, t, held.held_ns, min_stalls, share))
            .flatten()
    };
    let expected = expected_wait_ns(t, held.held_ns);
    let measured = beyond_path_ns(e);
    let (explains_ns, seen, stalls) = if tail_ns >= 1_000_000 {
        (tail_ns.min(held.held_ns.max(1_000_000)), true, None)
    } else if let Some(st) = stalls_of(MIN_STALLS, STALL_SHARE_PERMILLE) {
        (stalls_cost(&st, held.held_ns), true, Some(st))
    } else if expected > 0 && measured.saturating_mul(2) >= expected {
        (expected.min(measured), false, None)
    } else if throttled_mostly(t)
        && let Some(st) = stalls_of(FEW_STALLS, 0)
    {
        (stalls_cost(&st, held.held_ns), true, Some(st))
    } else {
        return None;
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
            if let Some(st) = &stalls {
                format!(
                    "requests: p50 {}, and {} of {} stalled {} (their median), a hold's length: they arrived while it was throttled",
                    format_ns(p50 as f64),
                    st.in_tail,
                    st.samples,
                    format_ns(st.tail_ns as f64)
                )
            } else if seen {
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

/// The single requests' rare long stalls ([`stalls_counted`]) when they last no longer than a hold
/// and a half — or, for a group held in most periods, three periods: a request that misses the
/// quota again (a co-tenant spends it first) waits out the next hold too (the fleet test's edge:
/// stalls of 189 ms, two holds of 97 ms) — what throttled periods make a request wait.
fn stalls_of_holds(
    e: &Evidence,
    t: &Throttling,
    held_ns: u64,
    min_stalls: u64,
    share_permille: u64,
) -> Option<Tail> {
    let period_ns = t.period_us.unwrap_or(100_000).saturating_mul(1_000);
    let most = if throttled_mostly(t) {
        (held_ns.saturating_mul(3) / 2).max(period_ns.saturating_mul(3))
    } else {
        held_ns.saturating_mul(3) / 2
    };
    stalls_counted(e, 1_000_000, min_stalls, share_permille).filter(|s| s.extra_ns() <= most)
}

/// Fewest stalls of a hold's length that show a group held in most periods was met by the
/// requests (two: one could be anything on a busy host).
const FEW_STALLS: u64 = 2;

/// What stalls of a hold's length make the average request wait (they are waited out by
/// whoever arrives during one), at least the material floor: the counters say the holds are
/// real.
fn stalls_cost(st: &Tail, held_ns: u64) -> u64 {
    st.per_request_ns(st.extra_ns().min(held_ns))
        .max(MATERIAL_FLOOR_NS)
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
