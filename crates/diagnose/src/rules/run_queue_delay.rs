//! `run_queue_delay`: run-queue delay.

use super::*;

/// Run-queue delay: the server's threads, once woken to handle a request, wait for a CPU
/// (other busy threads or processes on the same CPUs). Measured as bcc's runqlat does, from the
/// scheduler's wakeup and switch tracepoints, for the server's threads only.
pub fn run_queue_delay(e: &Evidence) -> Option<Diagnosis> {
    run_queue_median(e).or_else(|| run_queue_tail(e))
}

/// Run-queue delay in the typical request: the median wake-up waits.
pub(crate) fn run_queue_median(e: &Evidence) -> Option<Diagnosis> {
    let c = e.cpu.as_ref()?;
    let rq = c.run_queue.as_ref()?;
    let single = e.single.as_ref()?;
    let requests = single.count + e.concurrent.as_ref().map_or(0, |c| c.latency.count);
    if requests == 0 {
        return None;
    }
    // A throttled cgroup's threads also wait "in the run queue" until the next period: that
    // time is the throttling's (its own rule), not contention for CPUs.
    let throttled_ns = c.throttling.as_ref().map_or(0, |t| t.throttled_ns);
    if throttled_ns.saturating_mul(2) >= rq.total_ns {
        return None;
    }
    // The typical wake-up must wait: a median wait of at least 100 µs and a quarter of a
    // request (a busy load generator on the same CPUs makes a long tail of short waits).
    let per_request = rq.total_ns / requests;
    if rq.p50_ns < 100_000.0 || rq.p50_ns < 0.25 * single.p50_ns as f64 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::RunQueueDelay,
        title: "the server's threads wait for a CPU before they can answer (run-queue delay)".into(),
        explains_ns: (rq.p50_ns as u64).min(single.p50_ns),
        confidence: 0.8,
        side: Side::Server,
        evidence: vec![
            format!(
                "scheduler tracepoints (eBPF), {}: {} waits for a CPU, p50 {}, p99 {}, {} in all",
                c.process,
                rq.waits,
                format_ns(rq.p50_ns),
                format_ns(rq.p99_ns),
                format_ns(rq.total_ns as f64)
            ),
            format!(
                "{} of waiting per request against a request median of {}",
                format_ns(per_request as f64),
                format_ns(single.p50_ns as f64)
            ),
        ],
        fix: "find what else runs on the server's CPUs (`top`, `perf sched`, `runqlat`); give the server dedicated CPUs (cpusets, taskset) or more of them, lower the priority of batch work (`nice`, cgroup cpu.weight), or run fewer busy threads than CPUs".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
