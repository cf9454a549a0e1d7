//! `bufferbloat`: latency under load.

use super::*;

/// Latency under load counts when the loaded median is at least this many times the idle one
/// (responsiveness in round trips per minute falls to a fifth)…
pub(crate) const LOAD_RATIO: f64 = 5.0;
/// …and the load adds at least this much: below it, a busy host's scheduling noise.
pub(crate) const LOAD_FLOOR_NS: u64 = 2_000_000;
/// A loaded round trip this much longer counts whatever the ratio (on a long path, 100 ms →
/// 300 ms is 3× but 200 ms that anyone notices), provided it at least adds half the idle figure.
pub(crate) const LOAD_ABSOLUTE_NS: u64 = 50_000_000;

/// Whether a probe going from `idle_ns` to `loaded_ns` under load is a finding: both relative
/// and absolute thresholds (compare the IETF responsiveness method and flent's RRUL, which
/// judge the loaded round trip against the idle one): 24 µs → 4 ms (167×, +4 ms) counts;
/// 30 µs → 300 µs (10×, +0.27 ms) does not; 100 ms → 300 ms does.
pub fn inflated(idle_ns: u64, loaded_ns: u64) -> bool {
    let added = loaded_ns.saturating_sub(idle_ns);
    let ratio = loaded_ns as f64 / idle_ns.max(1) as f64;
    (added >= LOAD_FLOOR_NS && ratio >= LOAD_RATIO) || (added >= LOAD_ABSOLUTE_NS && ratio >= 1.5)
}

/// How many times its fair share of a closed-loop load's queue a probe may wait before that
/// wait is a finding.
pub(crate) const FAIR_SHARE_SLACK: u64 = 2;

/// Latency under load: the load on the same path multiplies a small request's latency — it
/// waits behind the load's data in a queue. Under a bulk transfer that queue is the path's
/// (bufferbloat); under the HTTP engine's concurrent requests, it is the one the probe shares
/// with them, which for a URL target may be the server's.
pub fn bufferbloat(e: &Evidence) -> Option<Diagnosis> {
    let UnderLoad { idle, loaded, load } = e.under_load.as_ref()?;
    if !inflated(idle.p50_ns, loaded.p50_ns) {
        return None;
    }
    // The load and its probe are latscope's own: a client starved of CPU (its quota spent,
    // its threads waiting for a CPU) makes its probe wait behind its own load generator, not
    // behind a queue on the path or at the server. The lab's latscope under 3 ms of CPU per
    // 100 ms at ~0: a probe 200 ms under load against 18 µs idle, its cgroup throttled in 39 of
    // 45 periods, read as bufferbloat in 1 run of 3.
    if client_starved(e).is_some() {
        return None;
    }
    // Under our own closed-loop HTTP load the probe is one more client: by Little's law each of
    // the load's requests takes connections ÷ throughput, and a probe served in turn waits about
    // as long. That wait is the load diagnose applied to a server at its capacity, not a queue
    // that should not be there; only a wait well beyond its fair share is.
    let fair_share_ns = load.fair_share_ns();
    if let Some(fair) = fair_share_ns
        && loaded.p50_ns
            <= idle
                .p50_ns
                .saturating_add(fair.saturating_mul(FAIR_SHARE_SLACK))
    {
        return None;
    }
    let added = loaded.p50_ns.saturating_sub(idle.p50_ns);
    let rpm = latscope_core::model::diagnose::Responsiveness::rpm;
    let (title, side, fix) = match load {
        Load::Bulk { .. } => (
            "latency under load: bulk traffic makes small requests wait in a queue (bufferbloat)",
            Side::Network,
            "use an AQM on the bottleneck (`tc qdisc replace dev IFACE root fq_codel` or cake), shrink oversized queues (tbf/htb limit, BQL); separate bulk and interactive traffic",
        ),
        Load::Http { .. } => (
            "latency under load: a request waits behind the others while the server is loaded",
            Side::Both,
            "if the load's bytes fill the path, use an AQM on the bottleneck (fq_codel, cake); otherwise the server queues requests: more workers, admission control, or shorter per-request work",
        ),
    };
    Some(Diagnosis {
        rule: RuleId::Bufferbloat,
        title: title.into(),
        explains_ns: added,
        confidence: 0.8,
        side,
        evidence: vec![
            format!(
                "a small request: p50 {} idle, {} while {} runs ({:.0}×)",
                format_ns(idle.p50_ns as f64),
                format_ns(loaded.p50_ns as f64),
                load.describe(),
                loaded.p50_ns as f64 / idle.p50_ns.max(1) as f64
            ),
            format!(
                "responsiveness: {:.0} round trips per minute idle, {:.0} under load",
                rpm(idle.p50_ns),
                rpm(loaded.p50_ns)
            ),
        ]
        .into_iter()
        .chain(fair_share_ns.map(|fair| {
            format!(
                "a request served in turn would wait about {} (connections ÷ throughput): this one waited {:.0}× that",
                format_ns(fair as f64),
                added as f64 / fair.max(1) as f64
            )
        }))
        .collect(),
        fix: fix.into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
