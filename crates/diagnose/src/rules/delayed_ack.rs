//! `delayed_ack`: delayed ACK alone.

use super::*;

/// Delayed ACK alone: the capture shows segments waiting for a delayed ACK without Nagle being
/// the reason (e.g. a sender whose window or TCP_CORK needs the ACK), in a material share of
/// transactions.
pub fn delayed_ack(e: &Evidence) -> Option<Diagnosis> {
    let c = e.capture.as_ref()?;
    let StallTotal {
        count: n,
        lost_ns: lost,
    } = c.delayed_ack?;
    let per_request = lost.checked_div(c.transactions).unwrap_or(lost);
    if n * 10 < c.transactions.max(1) || per_request < 1_000_000 {
        return None;
    }
    // With Nagle on at the server, the held data is Nagle's: `nagle_delayed_ack` names it
    // and sends the user to the server, not the client.
    if e.server_sockets.as_ref().is_some_and(|s| s.nagle_on > 0) {
        return None;
    }
    let mut evidence = vec![format!(
        "on the wire: {} waited for a delayed ACK, {} in all",
        of(n, c.transactions, "transaction"),
        format_ns(lost as f64)
    )];
    let mut fix = String::from(
        "the receiver (client) should ACK at once: re-arm TCP_QUICKACK after reads, or per route `ip route change … quickack 1`; the sender can avoid waiting on ACKs by writing each message in one call",
    );
    // Full segments held, never a Nagle-sized one: the server's congestion window stopped it
    // (the lab's nginx policed on its way out, from the client alone). The client's quick ACK
    // removes the wait; why the window is that small is the server's to find.
    if super::nagle_delayed_ack::wire_holds_full_segments(e) {
        evidence.push("every segment that waited was a full one, which Nagle never holds: the server's congestion window held them — cut by a loss or a policer on its way out that this capture cannot see, or still opening".into());
        fix.push_str("; on the server, find what keeps its congestion window small: drops on its way out (`nstat -az IpOutRequests IpOutTransmits TcpRetransSegs`), a policer or shaper (`nft list ruleset`, `tc -s qdisc`)");
    }
    Some(Diagnosis {
        rule: RuleId::DelayedAck,
        title: "delayed ACKs hold data back (without Nagle)".into(),
        explains_ns: per_request,
        confidence: 0.8,
        side: Side::Client,
        evidence,
        fix,
        caused_by: None,
        causes: Vec::new(),
    })
}
