//! `path_dominates`: the network path dominates.

use super::*;

/// The network path dominates: most of a request's time is the round trip itself.
pub fn path_dominates(e: &Evidence) -> Option<Diagnosis> {
    let (single, path, _) = host_excess(e)?;
    if path < 1_000_000 || (path as f64) < 0.6 * single as f64 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::PathDominates,
        title: "the network path dominates: the round trip is most of each request".into(),
        explains_ns: path,
        confidence: 0.9,
        side: Side::Network,
        evidence: vec![format!(
            "path RTT {} of a {} request ({:.0}%)",
            format_ns(path as f64),
            format_ns(single as f64),
            100.0 * path as f64 / single.max(1) as f64
        )],
        fix: "shorten the path (closer server, fewer hops, a CDN) or make fewer round trips per request (keep-alive, pipelining, batching)".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
