//! `tls_not_resumed`: a client that comes back on a new connection offers the TLS session the
//! server gave it, and the server makes it pay a full handshake again. Under TLS 1.2 that is a
//! round trip more than a resumed (abbreviated) handshake; under TLS 1.3 both take one, and a
//! refused session costs the server's CPU (a signature), not a round trip — not this rule.

use latscope_core::model::round_trips::TlsKind;

use super::*;

/// The round-trip step's second connection offered the first one's session and got a full
/// handshake of more round trips than a resumed one takes: the extra round trips are the
/// finding, never more than the handshake's share of them as measured.
pub fn tls_not_resumed(e: &Evidence) -> Option<Diagnosis> {
    let (p, rtt) = browser(e)?;
    let first = p.first.tls?;
    let again = p.returning.as_ref()?.opened.tls?;
    if again.kind == TlsKind::Resumed {
        return None;
    }
    let extra = again.round_trips().saturating_sub(1);
    // Each extra round trip priced as every TLS finding prices it (`tls_round_trip_ns`), never
    // more than `again`'s own share per round trip: it is a full handshake.
    let explains = u64::from(extra) * p.tls_round_trip_ns(rtt);
    if extra == 0 || explains < PHASE_FLOOR_NS {
        return None;
    }
    let evidence = vec![
        format!(
            "a first connection: {} in {}",
            first.describe(),
            format_ns(first.handshake_ns as f64)
        ),
        format!(
            "a second connection offering the session the first one got: {} again in {} ({}) where a resumed one takes 1",
            again.describe(),
            format_ns(again.handshake_ns as f64),
            count(u64::from(again.round_trips()), "round trip")
        ),
        format!(
            "each new connection of a returning client pays {} more of {}",
            count(u64::from(extra), "round trip"),
            format_ns(rtt as f64)
        ),
    ];
    Some(Diagnosis {
        rule: RuleId::TlsNotResumed,
        title: format!(
            "TLS sessions are not resumed: every new connection pays a full {} handshake, {} more than a resumed one",
            again.version.label(),
            count(u64::from(extra), "round trip")
        ),
        explains_ns: explains,
        confidence: 0.85,
        side: Side::Server,
        evidence,
        fix: "resume TLS sessions on the server: session tickets (nginx `ssl_session_tickets on`, with `ssl_session_ticket_key` shared by every server behind a load balancer) or a shared session cache (nginx `ssl_session_cache shared:SSL:10m`, Apache `SSLSessionCache`); TLS 1.3 makes a full handshake one round trip".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
