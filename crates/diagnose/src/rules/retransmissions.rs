//! `retransmissions`: segments were lost (or their ACKs were) and sent again.

use super::*;

/// Whether the capture shows material loss: a loss rate of at least 1 in 1000 frames, or
/// waits for lost segments (retransmission timeouts, and sends that went on only on the peer's
/// next segment) that cost at least a tenth of a request's median (and 100 µs) per request. A
/// handful of retransmissions among a hundred thousand frames explains nothing. Returns the
/// time the waits cost per request and the evidence lines.
pub(crate) fn capture_loss(e: &Evidence) -> Option<(u64, Vec<String>)> {
    let c = e.capture.as_ref()?;
    let rto = c.rto_stalls.unwrap_or_default();
    let unseen = c.unseen_loss.unwrap_or_default();
    let (rto_n, rto_lost) = (rto.count, rto.lost_ns);
    let waited = rto_lost + unseen.lost_ns;
    let per_request = waited.checked_div(c.transactions).unwrap_or(waited);
    let median = e.single.as_ref().map(|s| s.p50_ns).unwrap_or(0);
    let time_material = per_request >= 100_000 && per_request * 10 >= median;
    let lost = lost_on_wire(e, c);
    if lost == 0 || !(loss_rate_material(e, c) || time_material) {
        return None;
    }
    let resent = lost - unseen.count;
    let spurious = c.retransmissions - resent;
    let mut lines = Vec::new();
    if c.retransmissions > 0 {
        lines.push(format!(
            "on the wire: {} retransmissions in {} frames{}; {rto_n} waited for the retransmission timer ({} lost)",
            c.retransmissions,
            c.frames,
            if spurious > 0 {
                format!(", {spurious} of them reported duplicate by the receiver (D-SACK)")
            } else {
                String::new()
            },
            format_ns(rto_lost as f64)
        ));
    }
    if unseen.count > 0 {
        lines.push(unseen_line(c, unseen));
    }
    Some((per_request, lines))
}

/// The evidence line for sends lost before the client's capture (direction server → client).
fn unseen_line(c: &CaptureEvidence, unseen: StallTotal) -> String {
    format!(
        "server → client: in {} the server stopped mid-answer with both windows open — it had already had more in flight on that connection, and the client's window had room — and went on only when the client's next segment reached it ({} lost, {} per transaction): what it had sent never reached the client's capture, and TCP sent it again unseen (a drop in the server's own output path or a policer fails the send and it is retried on the next ACK; a tail lost on the way is resent after a timer)",
        of(unseen.count, c.transactions, "transaction"),
        format_ns(unseen.lost_ns as f64),
        format_ns(unseen.lost_ns.checked_div(c.transactions).unwrap_or(0) as f64)
    )
}

/// Retransmissions: segments were lost (or their ACKs were) and sent again; a timer-driven
/// retransmission costs at least TCP_RTO_MIN (200 ms). The capture at the client sees the
/// client's retransmissions and those of the server that reach it, and the server's sends
/// that were lost before it and resent unseen (the server stopped with both windows open and
/// went on only on the client's next segment: loss on the server → client direction, which
/// the client's seat sees without the server's counters); the kernel's counters see
/// both sides' (the server's when it runs on this host) and the gaps loss leaves at the
/// receiver — loss on the server's way out shows there even when the capture misses it.
pub fn retransmissions(e: &Evidence) -> Option<Diagnosis> {
    let wire = capture_loss(e);
    let counters = counter_loss(e);
    if wire.is_none() && counters.is_empty() {
        return loss_inferred_from_timer(e).map(|tail| inferred(e, tail));
    }
    // What a request loses to it on average: the timeouts seen on the wire and the waits for
    // the client's ACK the loss caused, or else what the lost segments can have cost
    // ([`untimed_cost`]).
    let rto_ns = wire.as_ref().map_or(0, |(per_request, _)| *per_request);
    let ack_ns = loss_ack_stall_cost(e);
    let explains_ns = match rto_ns + ack_ns {
        0 => untimed_cost(e),
        cost => cost,
    };
    let mut evidence: Vec<String> = wire.map(|(_, l)| l).unwrap_or_default();
    evidence.extend(counters);
    if ack_ns > 0 {
        evidence.push(loss_ack_line(e, ack_ns));
    }
    Some(Diagnosis {
        rule: RuleId::Retransmissions,
        title: "packet loss: segments retransmitted".into(),
        explains_ns,
        confidence: if evidence.len() > 1 { 0.9 } else { 0.8 },
        side: Side::Network,
        evidence,
        fix: "find where packets are dropped: `nstat`/`ip -s link` on both hosts, interface errors, queue drops (`tc -s qdisc`), firewall rules; losses on a path you don't own need its operator".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// Requests whose tail waited a retransmission timer: which ones, their median, and the
/// quantile that shows it (`p99`, or `max` when fewer than one in a hundred met the timer).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TimerTail {
    pub what: &'static str,
    pub p50_ns: u64,
    pub quantile: &'static str,
    pub tail_ns: u64,
    pub path_ns: u64,
}

/// Loss the client's seat infers where it counts none: no retransmission reached its capture
/// and the server's counters are out of its reach, yet the server behaves as after losses —
/// every segment that waited for the client's delayed ACK was a full one, in a tenth of the
/// transactions or more (its congestion window held them, not Nagle: see
/// [`super::nagle_delayed_ack::wire_holds_full_segments`]), and the slowest requests waited a
/// retransmission timer beyond their median (TCP_RTO_MIN past the path's round trip, which no
/// delayed ACK, slow-start round or queue on a path that short makes). A policer or a drop on
/// the server's way out does both: the server resends what never left before the client's
/// capture can see a gap, and its window stays cut (the lab's nginx policed by nftables, from
/// the client alone: concurrent p99 479–676 ms over a 44 ms median on a 20 µs path, three runs).
/// Where the server's counters are readable they decide, and this is not asked.
pub(crate) fn loss_inferred_from_timer(e: &Evidence) -> Option<TimerTail> {
    let c = e.capture.as_ref()?;
    let server_counted = e.counters.is_some_and(|k| k.server.is_some());
    // A retransmission the receiver reported a duplicate of (a D-SACK back to this host) lost
    // nothing: the lab's policed nginx, one run of four, a request the client sent twice and
    // the server acknowledged twice, no other resend on the wire — that one had kept the
    // inference from being asked, and the delayed ACKs were named alone.
    if lost_on_wire(e, c) > 0
        || server_counted
        || e.server_sockets.is_some()
        || !super::nagle_delayed_ack::wire_holds_full_segments(e)
    {
        return None;
    }
    let path_ns = e.path.as_ref().or(e.handshake.as_ref())?.p50_ns;
    let rto_floor = *TcpTimer::DelayedAckMaxOrRtoMin.band_ns().start();
    let tails = [
        ("single requests", e.single.as_ref()),
        (
            "concurrent requests",
            e.concurrent.as_ref().map(|c| &c.latency),
        ),
    ];
    let timed =
        |s: &latscope_core::Summary, ns: u64| ns.saturating_sub(s.p50_ns) >= rto_floor + path_ns;
    tails
        .into_iter()
        .filter_map(|(what, s)| {
            let s = s.filter(|s| s.count > 0)?;
            // A timer's wait is at least TCP_RTO_MIN: one request that met it is as plain as a
            // hundredth (the lab's three runs: p99 264–700 ms, a set a little luckier has it
            // only in its slowest).
            let (quantile, tail_ns) = [("p99", s.p99_ns), ("max", s.max_ns)]
                .into_iter()
                .find(|&(_, ns)| timed(s, ns))?;
            Some(TimerTail {
                what,
                p50_ns: s.p50_ns,
                quantile,
                tail_ns,
                path_ns,
            })
        })
        .max_by_key(|t| (t.quantile == "p99", t.tail_ns - t.p50_ns))
}

/// The finding for loss inferred from the server's behaviour ([`loss_inferred_from_timer`]):
/// it costs a request the waits for the client's ACK its cut window made (counted on the
/// wire), and at least one request in a hundred its timer's wait.
fn inferred(e: &Evidence, tail: TimerTail) -> Diagnosis {
    let (held, transactions) = e
        .capture
        .as_ref()
        .and_then(|c| c.delayed_ack.map(|d| (d, c.transactions)))
        .unwrap_or_default();
    let per_request = held.lost_ns.checked_div(transactions).unwrap_or(0);
    let timer_share = if tail.quantile == "p99" {
        (tail.tail_ns - tail.p50_ns) / 100
    } else {
        0
    };
    Diagnosis {
        rule: RuleId::Retransmissions,
        title: "packet loss before this host saw it: the server resends on its timer".into(),
        explains_ns: per_request + timer_share,
        confidence: 0.6,
        side: Side::Network,
        evidence: vec![
            format!(
                "no retransmission reached this capture, yet the server sent as after losses: in {} every segment that waited for the client's delayed ACK was a full one — its congestion window held them ({} in all)",
                of(held.count, transactions, "transaction"),
                format_ns(held.lost_ns as f64)
            ),
            format!(
                "the slowest {} waited a retransmission timer: {} {} against a median of {} on a {} path (TCP_RTO_MIN is 200 ms)",
                tail.what,
                tail.quantile,
                format_ns(tail.tail_ns as f64),
                format_ns(tail.p50_ns as f64),
                format_ns(tail.path_ns as f64)
            ),
            "from the client alone the server's drops cannot be counted: a policer or a drop on its way out is resent before this capture sees a gap; the server's agent (`latscope serve --evidence-ports`) or `nstat -az TcpRetransSegs IpOutRequests IpOutTransmits` on the server counts them".into(),
        ],
        fix: "on the server, find what drops its output: a policer or shaper (`nft list ruleset`, `tc -s qdisc`), `nstat -az IpOutRequests IpOutTransmits TcpRetransSegs`; then the path's drops (`ip -s link`, the routers' counters)".into(),
        caused_by: None,
        causes: Vec::new(),
    }
}

/// What the loss costs a request when no wait for it was timed on the wire: the single requests'
/// mean beyond their median (the slow requests are the ones that waited for a retransmission),
/// but never more than the lost segments can have cost — each delays at most one request, by
/// at most the slowest request's excess over the median, shared over the requests measured. One
/// segment resent among 600 requests cannot make each of them 42 ms slower (a CPU-throttled
/// server's tail, two-ended, issue 41): that tail is another finding's.
pub(crate) fn untimed_cost(e: &Evidence) -> u64 {
    let Some(s) = e.single.as_ref().filter(|s| s.count > 0) else {
        return 0;
    };
    let excess = (s.mean_ns - s.p50_ns as f64).max(0.0) as u64;
    let most = lost_segments(e).saturating_mul(s.max_ns.saturating_sub(s.p50_ns)) / s.count;
    excess.min(most)
}

/// The loss is more than the client's own resends while none of its captured requests waited
/// for one: the capture of the single requests shows retransmission timeouts, sends lost
/// before it, or waits for the client's ACK the loss caused; or the single requests' p99 is a
/// retransmission timeout (TCP_RTO_MIN, 200 ms) beyond their median (the lab's loss from the
/// client + agent seat: p99 416 ms over 23.5 µs, the capture's resends all reported duplicate);
/// or the server's counters count loss of their own (what its output path drops the client's
/// capture never sees); or, without a capture, the finding's estimate (the requests' mean over
/// their median) is not 0. The
/// client's counters alone, with a capture that saw no wait, are no cause of slow handshakes:
/// a full accept queue drops the handshake's last ACK and the client resends its request until
/// the server takes the connection, which its counters cannot tell from loss (the lab's
/// accept-queue from the client's seat: 18 data segments resent, 0 ns lost on the wire).
pub(crate) fn loss_waits_seen(e: &Evidence, loss: &Diagnosis) -> bool {
    if e.capture.is_none() {
        return loss.explains_ns > 0;
    }
    let server_counted = e.counters.is_some_and(|c| {
        !c.shared
            && c.server.is_some_and(|s| {
                counter_material(s.lost_retrans() + s.local_out_drops(), s.out_segs)
                    || counter_material(s.ofo_queued, s.in_segs)
            })
    });
    let rto_floor = *TcpTimer::DelayedAckMaxOrRtoMin.band_ns().start();
    let timed_out = e
        .single
        .as_ref()
        .is_some_and(|s| s.p99_ns.saturating_sub(s.p50_ns) >= rto_floor);
    server_counted
        || timed_out
        || capture_loss(e).is_some_and(|(per_request, _)| per_request > 0)
        || loss_ack_stall_cost(e) > 0
}

/// The evidence line for the waits for the client's ACK that loss caused.
pub(crate) fn loss_ack_line(e: &Evidence, per_request: u64) -> String {
    let waits = match e
        .capture
        .as_ref()
        .and_then(|c| ack_stalls(c).map(|s| (c, s)))
    {
        Some((c, s)) => format!(
            "{} waited for the client's delayed ACK on the wire",
            of(s.count, c.transactions, "transaction")
        ),
        None => "TCP_QUICKACK on the client removed the wait from the median".into(),
    };
    format!(
        "the loss explains the waits for the client's ACK: {waits}, with {} lost meanwhile — after each loss the sender's window shrinks and the rest of a response waits for an ACK the client delays ({} per request)",
        count(lost_segments(e), "segment"),
        format_ns(per_request as f64)
    )
}
