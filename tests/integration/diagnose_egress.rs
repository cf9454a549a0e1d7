//! diagnose names a host's own way out (`host_egress`): the fault `tests/integration/stack_tx.rs` reads back
//! at `local-out` (10,000 nftables rules on OUTPUT, ~140–220 µs a packet there, checked against
//! the kernel's SO_TIMESTAMPING) put on the client's host, with the server in another namespace
//! over a veth pair; the same pair without the rules names nothing there. The finding's cost is
//! checked against the kernel's own send → qdisc times on rr's socket.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

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
    // What a packet's send costs by the kernel's own clock (SO_TIMESTAMPING on rr's socket,
    // send() → the qdisc, the mean of 200 exchanges): an instrument that is not the stack's
    // probes, read before and after the rules.
    let to_qdisc = |lab: &Lab| {
        let rr = lab.rr_from_a(port, 1);
        rr["client_stack"]["send_to_sched"]["mean_ns"]
            .as_f64()
            .unwrap_or_else(|| panic!("rr's host-stack times: {rr}"))
    };
    let before = to_qdisc(&lab);
    lab.output_rules_a(10_000);
    let doc = diagnose_from_a(&lab, port);
    let per_packet = to_qdisc(&lab) - before;
    let f = egress(&doc).unwrap_or_else(|| panic!("{:#}", doc["findings"]));
    eprintln!("{f:#}");
    assert_eq!(f["side"], "client", "{f:#}");
    assert!(f["title"].as_str().unwrap().contains("local-out"), "{f:#}");
    assert!(f["fix"].as_str().unwrap().contains("OUTPUT rules"), "{f:#}");
    // The finding's cost is what the rules cost the request's packet — by the kernel's clock
    // above, within 2× — and never more than the request grew by: the single request's median
    // with the rules beyond the one without them. That growth is the floor, not the measure:
    // it also holds whatever else the rules' CPU time costs a 2-core host (400–530 µs a
    // request for a 200 µs walk on an idle machine, where diagnose's sleeping thread woke
    // 100–150 µs late at the median during the requests), which the finding does not claim.
    let single = |d: &serde_json::Value| d["budget"]["single_request_ns"].as_u64().unwrap();
    let added = single(&doc).saturating_sub(single(&clean));
    let explains = f["explains_ns"].as_u64().unwrap();
    eprintln!(
        "single request p50: {} ns clean, {} ns with the rules; send() → qdisc +{per_packet:.0} ns; the finding explains {explains} ns",
        single(&clean),
        single(&doc)
    );
    assert!(
        added >= 30_000 && per_packet >= 30_000.0,
        "the rules added {added} ns to a request, {per_packet:.0} ns to a send: the fault did not take"
    );
    let x = explains as f64;
    assert!(
        x * 2.0 >= per_packet && x <= per_packet * 2.0,
        "explains {explains} ns, the rules cost a send {per_packet:.0} ns by SO_TIMESTAMPING: {f:#}"
    );
    assert!(
        explains <= added * 2,
        "explains {explains} ns, more than the request grew by ({added} ns): {f:#}"
    );
}
