//! `cpu_throttling`: the server's cgroup ran out of its CPU quota.

use super::*;

/// CPU throttling: the server's cgroup ran out of its CPU quota (cgroup v1 `cpu.cfs_quota_us`,
/// v2 `cpu.max`) while the requests ran, and its threads were held back until the next period —
/// requests arriving meanwhile wait, which shows in the tail. The kernel's own counters
/// (`cpu.stat` nr_throttled, throttled_time / throttled_usec) are the evidence.
pub fn cpu_throttling(e: &Evidence) -> Option<Diagnosis> {
    let c = e.cpu.as_ref()?;
    let t = c.throttling.as_ref()?;
    if t.throttled == 0 || t.throttled_ns < 1_000_000 {
        return None;
    }
    let (p50, p99) = tail(e)?;
    // Wall clock, not cpu.stat's sum over the CPUs held (see `held_per_period`).
    let held = t.held_per_period()?;
    // Requests must have felt it: a tail of at least a millisecond beyond the median.
    let tail_ns = p99.saturating_sub(p50);
    if tail_ns < 1_000_000 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::CpuThrottling,
        title: "the server's cgroup runs out of CPU quota: its threads are throttled until the next period".into(),
        explains_ns: tail_ns.min(held.held_ns.max(1_000_000)),
        confidence: 0.85,
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
            format!(
                "requests: p50 {}, p99 {} — the tail is requests that arrived while it was throttled",
                format_ns(p50 as f64),
                format_ns(p99 as f64)
            ),
        ],
        fix: "raise the cgroup's CPU limit (`cpu.max` on cgroup v2, `cpu.cfs_quota_us` on v1; Kubernetes: the container's CPU limit), or make the server use less CPU per request; fewer busy threads burn the quota less fast".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
