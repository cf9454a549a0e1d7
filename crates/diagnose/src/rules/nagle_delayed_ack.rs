//! `nagle_delayed_ack`: Nagle × delayed ACK.

use super::*;

/// The server's own sockets settle whose held data it is: with TCP_NODELAY on and no cork on
/// every connection Nagle holds nothing, and what an immediate ACK removed is another wait for
/// the client's ACK (a congestion window after loss, a policer): `delayed_ack` and the loss
/// rules name that, not Nagle.
pub(crate) fn server_never_holds(e: &Evidence) -> bool {
    e.server_sockets
        .as_ref()
        .is_some_and(|s| s.connections > 0 && s.nagle_on == 0 && s.corked == 0)
}

/// The capture saw the client's delayed ACKs release the server's data in a share of the
/// transactions (at least 3, and one in ten), and never a segment Nagle holds (a sub-MSS one):
/// what waited for the ACK were full segments, which Nagle never holds — a congestion window
/// cut by a loss or a policer the capture cannot see held them. TCP_QUICKACK on the client
/// removes that stall too, so it alone does not name Nagle. The lab's nginx policed by
/// nftables on its way out, from the client alone: 28 of 73 transactions released by the
/// client's delayed ACK, none Nagle-shaped, read as "set TCP_NODELAY" on a server that had it.
pub(crate) fn wire_holds_full_segments(e: &Evidence) -> bool {
    e.capture.as_ref().is_some_and(|c| {
        c.nagle.map_or(0, |n| n.total.count) == 0
            && c.delayed_ack.is_some_and(|d| {
                d.count >= 3 && d.count.saturating_mul(10) >= c.transactions.max(1)
            })
    })
}

/// Nagle × delayed ACK: requests take ~40 ms more than the path, and the stall disappears when
/// the client ACKs at once (TCP_QUICKACK), or the wire shows it. The server's Nagle algorithm
/// held the rest of a response until the client ACKed the first part; the client, with nothing
/// to send, delayed that ACK (TCP_ATO_MIN = 40 ms on Linux). The server is the side to fix.
pub fn nagle_delayed_ack(e: &Evidence) -> Option<Diagnosis> {
    let (single, path, excess) = host_excess(e)?;
    // The stall is the excess, or what TCP_QUICKACK removed from it (when the server also
    // thinks, the excess is the timer plus that).
    let removed = e
        .quickack
        .as_ref()
        .filter(|_| quickack_helped(e))
        .map(|q| single.saturating_sub(q.p50_ns));
    let timer_shaped = |ns: u64| TcpTimer::classify(ns).is_some_and(TcpTimer::is_delayed_ack);
    if !timer_shaped(excess) && !removed.is_some_and(timer_shaped) {
        return None;
    }
    // Decisive evidence, any of: an immediate ACK from the client removes the stall; the
    // capture shows Nagle-held segments released by delayed ACKs in most transactions; or it
    // shows delayed-ACK releases and the server's sockets have Nagle on.
    let quick = e
        .quickack
        .as_ref()
        .map(|q| q.p50_ns)
        .filter(|q| q.saturating_mul(10) <= single);
    let delack_nagle = wire_delayed_ack_with_server_nagle(e);
    if quick.is_none() && wire_nagle(e).is_none() && delack_nagle.is_none() {
        return None;
    }
    if server_never_holds(e) && wire_nagle(e).is_none() {
        return None;
    }
    if wire_holds_full_segments(e) && delack_nagle.is_none() {
        return None;
    }
    let mut evidence = vec![
        format!(
            "one request: p50 {} against a path RTT of {}",
            format_ns(single as f64),
            format_ns(path as f64)
        ),
        format!(
            "the extra {} matches a TCP timer: {}",
            format_ns(excess as f64),
            describe_stall(excess)
        ),
    ];
    if let Some(q) = quick {
        evidence.push(format!(
            "with TCP_QUICKACK on the client the same requests take {} (p50): the stall is the client's delayed ACK releasing data the server held back",
            format_ns(q as f64)
        ));
    }
    let mut confidence = 0.9;
    if let Some(c) = &e.capture
        && let Some(n) = c.nagle
    {
        evidence.push(format!(
            "on the wire: {} stalled by Nagle × delayed ACK, {} lost in all (e.g. connection {}, frames {} → {})",
            of(n.total.count, c.transactions, "transaction"),
            format_ns(n.total.lost_ns as f64),
            n.example.conn,
            n.example.since_frame,
            n.example.frame
        ));
        confidence = 0.95;
    }
    if let Some((c, d)) = delack_nagle {
        evidence.push(format!(
            "on the wire: {} waited for a delayed ACK ({} in all); with Nagle on at the server, those held segments are Nagle's{}",
            of(d.count, c.transactions, "transaction"),
            format_ns(d.lost_ns as f64),
            e.server_sockets
                .as_ref()
                .and_then(|s| s.snd_mss)
                .map(|m| format!(" (the connection's MSS is {m} B: a response smaller than that is one \"small\" segment)"))
                .unwrap_or_default()
        ));
    }
    if let Some((line, nagle_on)) = server_sockets_line(e) {
        evidence.push(line);
        confidence = if nagle_on {
            f64::max(confidence, 0.97)
        } else {
            0.75
        };
    }
    Some(Diagnosis {
        rule: RuleId::NagleDelayedAck,
        title: "Nagle × delayed ACK: the server holds part of each response until the client's delayed ACK".into(),
        // With TCP_QUICKACK the stall goes and what is left is someone else's (e.g. think
        // time); without the experiment, the hosts' whole excess.
        explains_ns: single.saturating_sub(
            e.quickack
                .as_ref()
                .filter(|_| quickack_helped(e))
                .map_or(path, |q| q.p50_ns),
        ),
        confidence,
        side: Side::Server,
        evidence,
        fix: "server: set TCP_NODELAY (nginx: `tcp_nodelay on`) or write each response in one call; client: re-arm TCP_QUICKACK after every read where the server cannot be changed".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// The server's sockets as the evidence names them ("TCP_NODELAY off on 3 of 4 connections"),
/// and whether any has Nagle on; `None` when none were read.
fn server_sockets_line(e: &Evidence) -> Option<(String, bool)> {
    let ss = e.server_sockets.as_ref().filter(|ss| ss.connections > 0)?;
    let line = format!(
        "the server's sockets ({}): {}{}",
        ss.process,
        match ss.nagle_on {
            0 => format!(
                "TCP_NODELAY on all {}",
                count(ss.connections as u64, "connection")
            ),
            n => format!(
                "TCP_NODELAY off on {}",
                of(n as u64, ss.connections as u64, "connection")
            ),
        },
        if ss.corked > 0 {
            format!(", TCP_CORK on {}", ss.corked)
        } else {
            String::new()
        }
    );
    Some((line, ss.nagle_on > 0))
}
