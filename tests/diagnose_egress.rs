//! diagnose names a host's own way out (`host_egress`): the fault `tests/stack_tx.rs` reads back
//! at `local-out` (10,000 nftables rules on OUTPUT, ~140 µs a packet there, checked against the
//! kernel's SO_TIMESTAMPING) put on the client's host, with the server in another namespace over
//! a veth pair; the same pair without the rules names nothing there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod lab;

use std::process::Command;

use lab::stack::Lab;

/// `latscope diagnose` run in namespace A against B's server: its JSON.
fn diagnose_from_a(lab: &Lab, port: u16) -> serde_json::Value {
    let target = format!("{}:{port}", lab.ip_b);
    let out = Command::new("ip")
        .args(["netns", "exec", &lab.ns_a, lab::BIN, "diagnose", &target])
        .args(["--no-load", "-d", "1s", "--json"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "diagnose's JSON: {e}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn egress(doc: &serde_json::Value) -> Option<&serde_json::Value> {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "host_egress")
}

#[test]
fn output_rules_on_the_clients_host_are_named_at_local_out() {
    require_root!();
    let _g = lab::timing_lock();
    let mut lab = Lab::new("de");
    let port = lab::free_port();
    lab.serve_in_b(port);
    let clean = diagnose_from_a(&lab, port);
    assert!(egress(&clean).is_none(), "{:#}", clean["findings"]);
    lab.output_rules_a(10_000);
    let doc = diagnose_from_a(&lab, port);
    let f = egress(&doc).unwrap_or_else(|| panic!("{:#}", doc["findings"]));
    eprintln!("{f:#}");
    assert_eq!(f["side"], "client", "{f:#}");
    assert!(f["title"].as_str().unwrap().contains("local-out"), "{f:#}");
    assert!(f["fix"].as_str().unwrap().contains("OUTPUT rules"), "{f:#}");
    // One stage of the request's packet: ~140 µs, never less than the test's 100 µs bound.
    let explains = f["explains_ns"].as_u64().unwrap();
    assert!(explains >= 100_000, "{f:#}");
}
