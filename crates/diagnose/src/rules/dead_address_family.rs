//! `dead_address_family`: one address family of the target's name does not answer while the
//! other does — typically an AAAA record that nothing serves — and every new connection of a
//! client that tries it first pays for it.

use super::*;

/// RFC 8305's Connection Attempt Delay: a Happy Eyeballs client starts its next address this
/// long after the first when the first has not connected (250 ms recommended).
const ATTEMPT_DELAY_NS: u64 = 250_000_000;

/// Dead address family: the address-families step connected to one family's address and got
/// no connection from the other's (no answer, unreachable, or refused). A client that prefers
/// the dead family (IPv6 first, RFC 6724) loses, per new connection, the Connection Attempt
/// Delay with Happy Eyeballs (less when the failure comes back sooner), and its whole connect
/// timeout without.
pub fn dead_address_family(e: &Evidence) -> Option<Diagnosis> {
    let probes = e.families.as_ref()?;
    let alive = probes.iter().find(|p| p.reach == FamilyReach::Connected)?;
    let dead = probes
        .iter()
        .find(|p| p.reach != FamilyReach::Connected && p.addr.is_ipv6() != alive.addr.is_ipv6())?;
    let fam = |ip: &std::net::IpAddr| if ip.is_ipv6() { "IPv6" } else { "IPv4" };
    let how = match dead.reach {
        FamilyReach::TimedOut => format!(
            "no answer to its SYNs in {}",
            format_ns(dead.spent_ns as f64)
        ),
        FamilyReach::Unreachable => {
            format!("unreachable (after {})", format_ns(dead.spent_ns as f64))
        }
        FamilyReach::Refused => "a reset: nothing listens on the port there".into(),
        FamilyReach::Connected => return None,
    };
    // A Happy Eyeballs client moves on after the attempt delay, or sooner when the dead
    // address fails sooner (a reset, an ICMP error).
    let per_connection = match dead.reach {
        FamilyReach::TimedOut => ATTEMPT_DELAY_NS,
        _ => dead.spent_ns.min(ATTEMPT_DELAY_NS),
    };
    let mut evidence = vec![
        format!("{} {}: {how}", fam(&dead.addr), dead.addr),
        format!(
            "{} {}: connects in {}",
            fam(&alive.addr),
            alive.addr,
            format_ns(alive.spent_ns as f64)
        ),
        format!(
            "a client that tries {} first waits {} per new connection with Happy Eyeballs (RFC 8305's attempt delay), its whole connect timeout without (minutes for a plain connect())",
            fam(&dead.addr),
            format_ns(per_connection as f64)
        ),
    ];
    if dead.addr.is_ipv6() {
        evidence.push("RFC 6724 prefers IPv6 where the client has an IPv6 route: most dual-stack clients try the dead family first".into());
    }
    Some(Diagnosis {
        rule: RuleId::DeadAddressFamily,
        title: format!(
            "the name's {} address does not answer: each new connection that tries it first waits {}",
            fam(&dead.addr),
            format_ns(per_connection as f64)
        ),
        explains_ns: per_connection,
        confidence: 0.85,
        side: Side::Server,
        evidence,
        fix: format!(
            "serve the service on {addr} (listener, firewall, routing), or remove the name's {rr} record until it is; clients can force the working family meanwhile (`-{n}` here, curl `-{n}`)",
            addr = dead.addr,
            rr = if dead.addr.is_ipv6() { "AAAA" } else { "A" },
            n = if dead.addr.is_ipv6() { 4 } else { 6 },
        ),
        caused_by: None,
        causes: Vec::new(),
    })
}
