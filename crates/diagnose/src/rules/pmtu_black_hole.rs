//! `pmtu_black_hole`: full-size segments are lost on the path while small ones pass, and a
//! smaller MSS gets the response through — a link with a smaller MTU whose ICMP "fragmentation
//! needed" (IPv6: "packet too big") never reaches the sender.

use super::*;

/// Path-MTU black hole: the MSS experiment's fetch as this host connects normally got no
/// complete response, the same fetch announcing a smaller MSS did. Nothing else tells these
/// apart from the client: a request that hangs looks like a dead server, except that the
/// handshake and the small segments pass.
pub fn pmtu_black_hole(e: &Evidence) -> Option<Diagnosis> {
    let m = e.mss?;
    if !m.black_hole() {
        return None;
    }
    let normal = m
        .normal_mss
        .map_or("this host's usual MSS".to_string(), |n| format!("MSS {n}"));
    let mut evidence = vec![
        format!(
            "a GET announcing {normal} got no complete response ({} arrived before the fetch gave up)",
            format_bytes_u64(m.normal_bytes)
        ),
        format!(
            "the same GET announcing MSS {} {} in {} ({})",
            m.lowered_mss,
            if m.lowered_completed {
                "completed"
            } else {
                "kept receiving full segments"
            },
            format_ns(m.lowered_ns as f64),
            format_bytes_u64(m.lowered_bytes)
        ),
    ];
    if let Some(n) = m.normal_mss {
        evidence.push(format!(
            "so the path's MTU lies between {} and {} bytes (a full segment is its MSS plus 40 bytes of IPv4 and TCP headers; 60 with IPv6)",
            m.lowered_mss + 40,
            n + 39
        ));
    }
    if e.connect_failures.attempts > 0 && e.target.is_some() {
        let done = e
            .connect_failures
            .attempts
            .saturating_sub(e.connect_failures.refused + e.connect_failures.timed_out);
        evidence.push(format!(
            "connections open ({} completed): small packets pass",
            of(done, e.connect_failures.attempts, "handshake")
        ));
    }
    Some(Diagnosis {
        rule: RuleId::PmtuBlackHole,
        title: "a path-MTU black hole: full-size segments never arrive, smaller ones do".into(),
        // A request never completes: at least the time the fetch waited for it.
        explains_ns: crate::evidence::MSS_FETCH_TIMEOUT.as_nanos() as u64,
        confidence: 0.9,
        side: Side::Network,
        evidence,
        fix: "let ICMP \"fragmentation needed\" (type 3 code 4; ICMPv6 \"packet too big\") through the firewalls on the path; or clamp the MSS where the MTU shrinks (nftables: `tcp flags syn tcp option maxseg size set rt mtu`); or, on the hosts, `sysctl net.ipv4.tcp_mtu_probing=1` (packetization-layer PMTUD, RFC 4821)".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

fn format_bytes_u64(n: u64) -> String {
    latscope_core::units::format_bytes(n as f64)
}
