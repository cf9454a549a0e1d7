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
    Some(Diagnosis {
        rule: RuleId::DelayedAck,
        title: "delayed ACKs hold data back (without Nagle)".into(),
        explains_ns: per_request,
        confidence: 0.8,
        side: Side::Client,
        evidence: vec![format!(
            "on the wire: {} waited for a delayed ACK, {} in all",
            of(n, c.transactions, "transaction"),
            format_ns(lost as f64)
        )],
        fix: "the receiver (client) should ACK at once: re-arm TCP_QUICKACK after reads, or per route `ip route change … quickack 1`; the sender can avoid waiting on ACKs by writing each message in one call".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
