//! `bottleneck_bandwidth`: serialisation at the path's bottleneck rate is a material part of a
//! request.

use super::*;

/// The least serialisation time worth a finding: 1 ms, a 125 kB response at 1 Gbit/s. Below it
/// the "bottleneck" of a fast path is the hosts' own copying (a 1 MiB page over a veth reads as
/// ~10 Gbit/s, 0.8 ms): every large healthy page would be named a bandwidth problem, and no link
/// upgrade would save the time. The floor alone is a machine's speed (the same veth delivered
/// 6.65 Gbit/s on a slower machine, 1.26 ms): what an HTTP load carried at once over the same
/// path raises the rate to the least the path's bottleneck is
/// ([`crate::evidence::Bottleneck::carried`]), so one response's pace is not read as a link's.
pub const SERIALISATION_FLOOR_NS: u64 = 1_000_000;

/// A prediction and the measurement it predicts agree: within a factor of 2 either way.
fn matches(predicted: u64, measured: u64) -> bool {
    predicted > 0 && measured > 0 && predicted <= 2 * measured && measured <= 2 * predicted
}

/// Whether N exchanges serialised one after another at the bottleneck are what the concurrent
/// step measured: N × the serialisation matches its p50 beyond the path's round trip. Then
/// requests queue on the link, not in the server. A prediction the measurement does not bear
/// out (8 × 205 µs = 1.64 ms against 156 µs measured) is no evidence of anything.
pub(crate) fn bandwidth_explains_concurrency(e: &Evidence) -> bool {
    let (Some(ser), Some(c)) = (e.serialisation_share_ns(), e.concurrent.as_ref()) else {
        return false;
    };
    let path = e.path.as_ref().map_or(0, |p| p.p50_ns);
    matches(
        ser * u64::from(c.connections),
        c.latency.p50_ns.saturating_sub(path),
    )
}

/// Whether an end's own instrument says a window or a buffer paced the responses, so that the
/// rate they settled at is that limit's pace and no link's: the client's window could open no
/// wider and the transfer ran at its pace over the path's round trip (seen by the client, or by
/// the server's socket waiting for that window most of its busy time), or the server's socket
/// waited for room in a send buffer smaller than its congestion window most of its busy time.
/// The lab's 16 KiB `tcp_rmem` and `sndbuf=4k` on a veth: responses settling at 0.77–2.4
/// Gbit/s, read as a link of that rate while the server's tcp_info said 94% receive-window- or
/// send-buffer-limited. A link's queue instead inflates the round trip the transfer sees, so a
/// transfer behind one falls far below window ÷ the idle path's round trip.
fn paced_by_an_end(e: &Evidence) -> bool {
    let limits = e.server_sockets.as_ref().and_then(|s| s.limits);
    let held = |us: u64, l: &latscope_core::model::transfer::TransferLimits| {
        us >= MIN_LIMITED_US && l.share(us) >= LIMITED_SHARE
    };
    let at_window_pace = window_pace(e).is_some_and(|p| p.ratio() >= WINDOW_PACED);
    let window = at_window_pace
        && (e.download.is_some_and(|d| window_cannot_grow(&d))
            || limits.is_some_and(|l| held(l.rwnd_limited_us, &l)));
    let cwnd = e.server_sockets.as_ref().and_then(|s| s.cwnd_bytes);
    let buffer = limits.is_some_and(|l| {
        held(l.sndbuf_limited_us, &l)
            && l.sndbuf_limited_us >= l.rwnd_limited_us
            && l.sndbuf_bytes
                .zip(cwnd)
                .is_some_and(|(b, c)| u64::from(b) < c)
    });
    window || buffer
}

/// How a direction's rate was measured, for the evidence.
fn rate_line(dir: &str, r: &LinkRate) -> String {
    let rate = latscope_core::units::format_bitrate(r.rate_bps);
    match r.source {
        RateSource::BulkTransfer => {
            format!("a bulk transfer {dir} reaches {rate}: that direction's bottleneck rate")
        }
        RateSource::PacketTrains { pairs } => format!(
            "packet trains of the responses ({dir}): back-to-back segments arrive spaced as at {rate} (median of {pairs} segment pairs)"
        ),
        RateSource::Delivery { responses } => format!(
            "the client's capture: large responses ({dir}) arrive at {rate} once their transfer settles, evenly paced as a link drains its queue (median of {})",
            count(responses, "response")
        ),
        RateSource::Carried {
            connections,
            one_bps,
        } => format!(
            "{connections} requests at once carried {rate} {dir}, where one response alone arrived at {}: the path's bottleneck is at least that",
            latscope_core::units::format_bitrate(one_bps as f64)
        ),
    }
}

/// The bottleneck's rate: a request and its response take a material time just to be
/// serialised onto the slowest link, and N of them at once queue for it N deep. That is the
/// network's share of the budget (the hosts are not slow; the link is), and adding server
/// workers would not help. Each direction's bytes are serialised at that direction's rate; a
/// serialisation time above what a request measured is contradicted by it and claims nothing,
/// and the queueing of N requests is claimed only when the concurrent step measured it.
pub fn bottleneck_bandwidth(e: &Evidence) -> Option<Diagnosis> {
    let b = e.bottleneck?;
    if b.down
        .is_some_and(|r| matches!(r.source, RateSource::Delivery { .. }))
        && b.up.is_none()
        && paced_by_an_end(e)
    {
        return None;
    }
    let single = e.single.as_ref()?.p50_ns;
    let ser = e.serialisation_share_ns()?;
    if ser < SERIALISATION_FLOOR_NS || (ser as f64) < 0.3 * single as f64 {
        return None;
    }
    let mut evidence = Vec::new();
    let mut parts = Vec::new();
    let directions = [
        ("client → server", "request", &b.up),
        ("server → client", "response", &b.down),
    ];
    for (dir, what, rate) in directions {
        let Some(r) = rate else { continue };
        evidence.push(rate_line(dir, r));
        parts.push(format!(
            "the {what}'s {} B take {}",
            r.wire_bytes,
            format_ns(r.serialisation_ns() as f64)
        ));
    }
    evidence.push(format!(
        "at that rate {}, of a {} request",
        parts.join(" and "),
        format_ns(single as f64)
    ));
    match (b.up.is_some(), b.down.is_some()) {
        (true, false) => evidence.push(
            "only the client → server direction was measured: the responses' serialisation is not counted".into(),
        ),
        (false, true) => evidence.push(
            "only the server → client direction was measured: the requests' serialisation is not counted".into(),
        ),
        _ => {}
    }
    // What one request loses to the link: its serialisation, never more than it measured. The
    // queueing of concurrent requests behind each other is evidence, not a per-request cost.
    let explains = ser;
    if let Some(c) = &e.concurrent
        && bandwidth_explains_concurrency(e)
    {
        evidence.push(format!(
            "{} at once: p50 {} — they queue for the link ({} × {} = {}, as measured)",
            c.connections,
            format_ns(c.latency.p50_ns as f64),
            c.connections,
            format_ns(ser as f64),
            format_ns((ser * u64::from(c.connections)) as f64)
        ));
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
