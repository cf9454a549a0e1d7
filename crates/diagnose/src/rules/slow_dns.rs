//! `slow_dns`: slow name resolution.

use super::*;

/// Slow name resolution: the DNS lookup is a large share of a URL request (paid on every new
/// connection whose name is not cached).
pub fn slow_dns(e: &Evidence) -> Option<Diagnosis> {
    let ph = e.phases.as_ref()?;
    let total = ph.total_ns();
    if ph.dns_ns < PHASE_FLOOR_NS || (ph.dns_ns as f64) < PHASE_SHARE * total as f64 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::SlowDns,
        title: "slow name resolution: the DNS lookup dominates a new connection's request".into(),
        explains_ns: ph.dns_ns,
        confidence: 0.85,
        side: Side::Client,
        evidence: vec![format!(
            "request phases (median of {}): DNS {} of a {} request ({:.0}%)",
            ph.requests,
            format_ns(ph.dns_ns as f64),
            format_ns(total as f64),
            100.0 * ph.dns_ns as f64 / total.max(1) as f64
        )],
        fix: "check the resolver (`resolvectl status`, /etc/resolv.conf: the first nameserver answers slowly or times out); use a local caching resolver, or keep connections alive so the lookup is rare".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
