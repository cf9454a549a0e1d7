//! `bottleneck_bandwidth`: serialisation at the path's bottleneck rate is a material part of a
//! request.

use super::*;

/// Whether N exchanges serialised one after another at the bottleneck account for at least half
/// of the concurrent latency: then requests queue on the link, not in the server.
pub(crate) fn bandwidth_explains_concurrency(e: &Evidence) -> bool {
    let (Some(b), Some(c)) = (e.bottleneck, e.concurrent.as_ref()) else {
        return false;
    };
    let queued = b.serialisation_ns() * u64::from(c.connections);
    queued.saturating_mul(2) >= c.latency.p50_ns
}

/// The bottleneck's rate: a request and its response take a material time just to be
/// serialised onto the slowest link, and N of them at once queue for it N deep. That is the
/// network's share of the budget (the hosts are not slow; the link is), and adding server
/// workers would not help.
pub fn bottleneck_bandwidth(e: &Evidence) -> Option<Diagnosis> {
    let b = e.bottleneck?;
    let single = e.single.as_ref()?.p50_ns;
    let ser = b.serialisation_ns();
    if ser < 100_000 || (ser as f64) < 0.3 * single as f64 {
        return None;
    }
    let rate = latscope_core::units::format_bitrate(b.rate_bps);
    let mut evidence = vec![
        match b.source {
            RateSource::BulkTransfer => {
                format!("a bulk transfer on the path reaches {rate}: the bottleneck rate")
            }
            RateSource::PacketTrains { pairs } => format!(
                "packet trains of the responses: back-to-back segments arrive spaced as at {rate} (median of {pairs} segment pairs): the bottleneck rate"
            ),
        },
        format!(
            "one request and its response ({} B on the wire) take {} to serialise at that rate, of a {} request",
            b.wire_bytes,
            format_ns(ser as f64),
            format_ns(single as f64)
        ),
    ];
    let mut explains = ser;
    if let Some(c) = &e.concurrent
        && bandwidth_explains_concurrency(e)
    {
        evidence.push(format!(
            "{} at once: p50 {} — they queue for the link ({} × {} = {})",
            c.connections,
            format_ns(c.latency.p50_ns as f64),
            c.connections,
            format_ns(ser as f64),
            format_ns((ser * u64::from(c.connections)) as f64)
        ));
        explains = explains.max(c.latency.p50_ns.saturating_sub(single) + ser);
    }
    Some(Diagnosis {
        rule: RuleId::BottleneckBandwidth,
        title: "the path's bandwidth: each response takes material time to serialise at the bottleneck".into(),
        explains_ns: explains,
        confidence: 0.8,
        side: Side::Network,
        evidence,
        fix: "a faster link at the bottleneck, or fewer bytes per request (compression, smaller responses, fewer round trips carrying data); more server workers would not help".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
