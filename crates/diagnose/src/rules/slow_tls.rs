//! `slow_tls`: a slow TLS handshake.

use super::*;

/// A slow TLS handshake: beyond its two round trips at most (TLS 1.2; 1.3 needs one), the
/// handshake spends milliseconds — the server's key exchange and signature, a long
/// certificate chain, or OCSP fetched inline.
pub fn slow_tls(e: &Evidence) -> Option<Diagnosis> {
    let ph = e.phases.as_ref()?;
    let tls = ph.tls_ns?;
    let path = e.path.as_ref().map_or(ph.connect_ns, |p| p.p50_ns);
    let beyond = tls.saturating_sub(2 * path);
    let total = ph.total_ns();
    if beyond < PHASE_FLOOR_NS || (tls as f64) < PHASE_SHARE * total as f64 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::SlowTls,
        title: "slow TLS handshake: the server spends milliseconds setting up each connection".into(),
        explains_ns: beyond,
        confidence: 0.8,
        side: Side::Server,
        evidence: vec![format!(
            "request phases (median of {}): TLS handshake {} of a {} request ({:.0}%), {} beyond two round trips of the path ({} each)",
            ph.requests,
            format_ns(tls as f64),
            format_ns(total as f64),
            100.0 * tls as f64 / total.max(1) as f64,
            format_ns(beyond as f64),
            format_ns(path as f64)
        )],
        fix: "on the server: an ECDSA certificate instead of a large RSA key, a short chain, OCSP stapling, TLS 1.3 and session resumption; on the client, reuse connections".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
