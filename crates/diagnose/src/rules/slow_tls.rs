//! `slow_tls`: a slow TLS handshake.

use super::*;

/// What the handshake spends beyond its round trips must be at least this share of the
/// request: over a long path a millisecond of the server's signature is no finding beside the
/// round trips (those are the round-trip rules').
const BEYOND_SHARE: f64 = 0.05;

/// A slow TLS handshake: beyond its round trips (as the browser's first connection negotiated
/// them — one for TLS 1.3, two for a full TLS 1.2 handshake —, else two at most), the
/// handshake spends milliseconds — the server's key exchange and signature, a long certificate
/// chain, or OCSP fetched inline.
pub fn slow_tls(e: &Evidence) -> Option<Diagnosis> {
    let ph = e.phases.as_ref()?;
    let tls = ph.tls_ns?;
    let path = e.path.as_ref().map_or(ph.connect_ns, |p| p.p50_ns);
    let rounds = e
        .browser
        .as_ref()
        .and_then(|b| b.first.tls)
        .map_or(2, |t| t.round_trips());
    // The client's own CPU over the handshake (its key exchange, the chain's verification) is
    // no part of the server's: on a slow 2-core VM a healthy ECDSA P-256 handshake took 1.0–1.2
    // ms with latscope's own share in it, and read slow_tls in one run of two at the floor.
    let client_cpu = ph.tls_client_cpu_ns.unwrap_or(0);
    let beyond = tls
        .saturating_sub(u64::from(rounds) * path)
        .saturating_sub(client_cpu);
    let total = ph.total_ns();
    if beyond < PHASE_FLOOR_NS
        || (tls as f64) < PHASE_SHARE * total as f64
        || (beyond as f64) < BEYOND_SHARE * total as f64
    {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::SlowTls,
        title: "slow TLS handshake: the server spends milliseconds setting up each connection".into(),
        explains_ns: beyond,
        confidence: 0.8,
        side: Side::Server,
        evidence: vec![format!(
            "request phases (median of {}): TLS handshake {} of a {} request ({:.0}%), {} beyond its {} of the path ({} each){}",
            ph.requests,
            format_ns(tls as f64),
            format_ns(total as f64),
            100.0 * tls as f64 / total.max(1) as f64,
            format_ns(beyond as f64),
            count(u64::from(rounds), "round trip"),
            format_ns(path as f64),
            ph.tls_client_cpu_ns
                .map(|c| format!(" and the client's own {} of CPU", format_ns(c as f64)))
                .unwrap_or_default()
        )],
        fix: "on the server: an ECDSA certificate instead of a large RSA key, a short chain, OCSP stapling, TLS 1.3 and session resumption; on the client, reuse connections".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
