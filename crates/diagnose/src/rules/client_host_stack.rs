//! `client_host_stack`: the client's own host holds its packets — between the application's
//! `send()` and the driver (netfilter OUTPUT/POSTROUTING, the qdisc) or between the driver and
//! `recv()` (PREROUTING/INPUT, softirq, the wake-up).

use super::*;

/// Time in the client's own stack. Two instruments see it, either is enough:
/// - kernel timestamps on latscope's own packets (SO_TIMESTAMPING: send → qdisc → driver, and
///   driver → recv), the direct measurement;
/// - a `connect()` that takes many SYN pings: the ping's kernel timestamps are taken after this
///   host's way-out hooks and before its way-in ones, the connect pays them (a SYN out, a
///   SYN-ACK in), so the difference is this host's per-packet cost.
///
/// It fires when that cost is high ([`client_stack_high`]: at least [`client_stack_floor`], or
/// a way out alone of at least [`client_egress_floor`] by the timestamps) and a material part
/// (a fifth) of a request; it explains at most the hosts' share of a request (what a request's
/// packets pay on this host's way out and in, never more than was measured beyond the path).
/// The timestamps are taken on HTTP(S) targets' requests as on latscope's own exchanges, so the
/// rule reads the same for both.
pub fn client_host_stack(e: &Evidence) -> Option<Diagnosis> {
    let cost = client_stack_ns(e)?;
    if !client_stack_high(e) {
        return None;
    }
    let path = e.path.as_ref().map_or(0, |p| p.p50_ns);
    let (explains, single_line) = match host_excess(e) {
        Some((single, _, host)) => {
            if cost.saturating_mul(5) < single {
                return None;
            }
            (
                cost.min(host),
                Some(format!(
                    "one request: p50 {} against a path RTT of {}",
                    format_ns(single as f64),
                    format_ns(path as f64)
                )),
            )
        }
        // A TCP service with no requests: a connect is what is measured.
        None => (cost, None),
    };
    if explains == 0 {
        return None;
    }
    let mut evidence = Vec::new();
    if let Some(c) = e.client_host.filter(|c| c.samples > 0) {
        let f = |v: Option<u64>| v.map_or("-".into(), |n| format_ns(n as f64));
        evidence.push(format!(
            "kernel timestamps on latscope's own packets ({}): send() → qdisc {}, send() → driver {}, driver → recv() {} (medians)",
            count(c.samples, "sample"),
            f(c.send_to_qdisc_ns),
            f(c.send_to_driver_ns),
            f(c.driver_to_recv_ns)
        ));
        if let Some(tx) = c
            .send_to_driver_ns
            .filter(|&tx| tx >= client_egress_floor(e))
        {
            evidence.push(format!(
                "the way out alone (send() → driver, no wake-up on it) takes {}: as long as the path's RTT or more, where a healthy stack takes a few microseconds",
                format_ns(tx as f64)
            ));
        }
    }
    if let Some(x) = connect_excess(e) {
        let connect = e.handshake.as_ref().map_or(0, |h| h.p50_ns);
        evidence.push(format!(
            "connect() p50 {} against a SYN ping of {} (kernel timestamps, taken after this host's way-out hooks): {} in this host per SYN and SYN-ACK",
            format_ns(connect as f64),
            format_ns(path as f64),
            format_ns(x as f64)
        ));
    }
    evidence.extend(single_line);
    evidence.extend(concurrent_line(e));
    if let Some(n) = &e.host_noise {
        evidence.push(format!(
            "this host wakes a sleeping thread {} late (p50): not a busy CPU alone",
            format_ns(n.p50_ns as f64)
        ));
    }
    let confidence = if e.client_host.is_some_and(|c| c.samples > 0) {
        0.85
    } else {
        0.7
    };
    Some(Diagnosis {
        rule: RuleId::ClientHostStack,
        title: format!(
            "the client's own host holds every packet: {} in its stack per exchange",
            format_ns(cost as f64)
        ),
        explains_ns: explains,
        confidence,
        side: Side::Client,
        evidence,
        fix: "on the client: count its netfilter rules on the way out and in (`nft list ruleset`, `iptables-save | wc -l`: OUTPUT, POSTROUTING, PREROUTING, INPUT; conntrack), look at its qdisc (`tc -s qdisc`) and its CPU (softirq time in `mpstat`), then measure again".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// The concurrent requests' extra wait, when a measurement places it on this host rather than
/// in the server's queue ([`wait_on_client`]): the line that says so, and by which measurement.
fn concurrent_line(e: &Evidence) -> Option<String> {
    let c = e.concurrent.as_ref()?;
    let single = e.single.as_ref()?.p50_ns;
    let wait = c.latency.p50_ns.saturating_sub(single);
    let n = c.connections;
    let why = match wait_on_client(e, n, wait)? {
        WaitOnClient::ServerReadPromptly { p90_ns } => format!(
            "the server's kernel saw their requests read from its socket within {} (p90): they did not queue there",
            format_ns(p90_ns as f64)
        ),
        WaitOnClient::StackCovers { stack_ns } => format!(
            "{n} exchanges through this host's stack ({} each) take {}: their packets take it one after another",
            format_ns(stack_ns as f64),
            format_ns(stack_ns.saturating_mul(u64::from(n)) as f64)
        ),
        WaitOnClient::ServerShareSmall { server_ns } => format!(
            "the server's share of a request ({}), {n} times over, is not half of it",
            format_ns(server_ns as f64)
        ),
    };
    Some(format!(
        "{n} at once: p50 {} longer than one at a time: this host's, not the server's queue — {why}",
        format_ns(wait as f64)
    ))
}
