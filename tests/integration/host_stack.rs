//! The client host's own stack (issue 25 item 2): 2000 nftables OUTPUT rules that match
//! nothing, on the client's own packets only, make every send() → qdisc slower (rr's
//! `client_stack`), while a SYN ping's RTT does not see them: its kernel TX timestamp is taken
//! after the hook. All inside a namespace of the test's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use lab::netns::Netns;
use serde_json::Value;

fn json(ns: &Netns, args: &[&str], kind: &str) -> Value {
    let mut v = args.to_vec();
    v.push("--json");
    let out = ns.latscope(&v);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lab::json_checked(&String::from_utf8_lossy(&out.stdout), kind)
}

/// (rr's send → qdisc median, SYN ping's median RTT), ns.
fn measure(ns: &Netns, port: u16) -> (u64, u64) {
    let target = format!("127.0.0.1:{port}");
    let rr = json(ns, &["rr", &target, "-n", "300"], "rr");
    let stack = &rr["client_stack"];
    let sched = stack["send_to_sched"]["p50_ns"].as_u64().unwrap();
    assert!(
        stack["send_to_sched"]["samples"].as_u64().unwrap() >= 100,
        "{stack}"
    );
    let p = port.to_string();
    let ping = json(
        ns,
        &[
            "ping",
            "--syn",
            "127.0.0.1",
            "-p",
            &p,
            "-c",
            "30",
            "-i",
            "20ms",
        ],
        "ping",
    );
    (sched, ping["rtt"]["p50_ns"].as_u64().unwrap())
}

#[test]
fn output_rules_slow_the_clients_sends_but_not_a_syn_ping() {
    require_root!();
    let _quiet = lab::timing_lock();
    let ns = Netns::new("hs");
    let server = ns.run_in(|| lab::server(None, None, None));
    let port = server.tcp_addr.port();
    let (base_sched, base_ping) = measure(&ns, port);
    // The server's own packets leave at the first rule (on loopback they cross OUTPUT too);
    // the client's walk 2000 rules for addresses that never occur.
    let mut rules = format!(
        "table inet slow {{\n chain out {{\n type filter hook output priority 0;\n tcp sport {port} accept\n"
    );
    for i in 0..2000u32 {
        rules.push_str(&format!(
            "ip daddr 198.18.{}.{} drop;\n",
            i / 250,
            i % 250 + 1
        ));
    }
    rules.push_str(" }\n}\n");
    ns.nft(&rules);
    let (slow_sched, slow_ping) = measure(&ns, port);
    eprintln!(
        "send→qdisc p50 {base_sched} → {slow_sched} ns; SYN ping p50 {base_ping} → {slow_ping} ns"
    );
    assert!(
        slow_sched > 3 * base_sched && slow_sched > base_sched + 10_000,
        "2000 OUTPUT rules show up in send→qdisc: {base_sched} → {slow_sched} ns"
    );
    assert!(
        slow_ping < base_ping * 2 + 20_000,
        "the SYN ping does not see them: {base_ping} → {slow_ping} ns"
    );
}
