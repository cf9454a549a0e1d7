//! `old_tls_version`: the server negotiates TLS 1.2 with a client that offers TLS 1.3, so a
//! full handshake takes two round trips where TLS 1.3 takes one (RFC 8446 §2).

use latscope_core::model::round_trips::{TlsKind, TlsVersion};

use super::*;

/// The round-trip step's first connection (latscope offers TLS 1.3 and 1.2) got a full TLS
/// 1.2 handshake: one round trip more than TLS 1.3 takes, for every client's first connection
/// (and every new one the server does not resume).
pub fn old_tls_version(e: &Evidence) -> Option<Diagnosis> {
    let (p, rtt) = browser(e)?;
    let t = p.first.tls?;
    if t.version != TlsVersion::Tls12 || t.kind == TlsKind::Resumed {
        return None;
    }
    // `t` is a full handshake: the price is never more than its own share per round trip.
    let explains = p.tls_round_trip_ns(rtt);
    if explains < PHASE_FLOOR_NS {
        return None;
    }
    let resumed = p
        .returning
        .as_ref()
        .and_then(|v| v.opened.tls)
        .map(|r| match r.kind {
            TlsKind::Resumed => "a returning client's connection is resumed in one round trip: the extra one is a first connection's".to_string(),
            _ => "a returning client's connection is not resumed either: every new connection pays it".to_string(),
        });
    let mut evidence = vec![format!(
        "latscope offered TLS 1.3 and 1.2; the server chose {} ({}), {} where TLS 1.3 takes 1 ({} each)",
        t.describe(),
        format_ns(t.handshake_ns as f64),
        count(u64::from(t.round_trips()), "round trip"),
        format_ns(rtt as f64)
    )];
    evidence.extend(resumed);
    Some(Diagnosis {
        rule: RuleId::OldTlsVersion,
        title: "the server speaks TLS 1.2: a new connection's handshake takes two round trips where TLS 1.3 takes one".into(),
        explains_ns: explains,
        confidence: 0.9,
        side: Side::Server,
        evidence,
        fix: "enable TLS 1.3 on the server (nginx `ssl_protocols TLSv1.2 TLSv1.3` — before nginx 1.23.4 the default leaves it out; Apache `SSLProtocol -all +TLSv1.2 +TLSv1.3`; an OpenSSL of 1.1.1 or later), and on any proxy or load balancer that ends TLS in front of it".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
