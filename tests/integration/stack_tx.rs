//! `latscope stack --direction tx`: each transmit stage proven against a fault injected on the
//! client's way out, read back at that stage only (needs root). Namespace A (the client) sends to
//! B over a veth pair; latscope watches A's packets to B's port.
//!
//! - 10,000 nftables rules on A's OUTPUT hook: `local-out` takes ≥ 100 µs, the stages around it
//!   stay small, and the kernel's own send timestamps on the client's socket (SO_TIMESTAMPING:
//!   send() → qdisc) grow by as much as the stages before the qdisc add up to;
//! - a tbf qdisc on A's veth, kept full by a UDP sender that its send buffer holds back: the
//!   `qdisc` stage's mean is the queue's backlog (sampled with `tc -s`) ÷ the rate, within 20%
//!   (Little's law);
//! - a clean veth: every stage small, every packet through every stage, and no TX completion
//!   (veth hands the skb to B's receive path), which the report says.
#![allow(clippy::unwrap_used)]

use crate::lab;

use std::time::Duration;

use lab::stack::{Lab, hist, report};
use latscope_core::Log2Histogram;
use latscope_core::model::stack::{Probe, StackReport};

/// The stages between IP output and the driver: every packet A sends passes all of them.
const PATH: [Probe; 5] = [
    Probe::LocalOut,
    Probe::PostRouting,
    Probe::DevEgress,
    Probe::Qdisc,
    Probe::Driver,
];

/// `n` request/response transactions A → B with the transmit stages attached.
fn run(lab: &Lab, listener: &std::net::TcpListener, port: u16, n: usize) -> StackReport {
    let stack = lab.tx_stack_to_port(port, &[]);
    lab.tcp_transactions(listener, n, 100, Duration::ZERO);
    let (code, out) = stack.interrupt();
    assert_eq!(code, 130);
    lab::json_checked(&out, "stack");
    report(&out)
}

fn p50(r: &StackReport, p: Probe) -> f64 {
    hist(r, p).quantile_ns(0.5)
}

fn figures(r: &StackReport) -> String {
    let mut s = String::new();
    for h in &r.histograms {
        s += &format!(
            "{} n={} p50={:.0} p99={:.0} mean={:.0}; ",
            h.probe, h.count, h.p50_ns, h.p99_ns, h.mean_ns
        );
    }
    s
}

/// rr from A to B with the transmit stages attached: (the report, rr's JSON).
fn rr_run(lab: &Lab, port: u16, n: usize) -> (StackReport, serde_json::Value) {
    let stack = lab.tx_stack_to_port(port, &[]);
    let rr = lab.rr_from_a(port, n);
    let (code, out) = stack.interrupt();
    assert_eq!(code, 130);
    lab::json_checked(&out, "stack");
    (report(&out), rr)
}

/// The stages from the write to the qdisc, summed (means): what SO_TIMESTAMPING's
/// send() → qdisc spans.
fn to_the_qdisc_ns(r: &StackReport) -> f64 {
    [
        Probe::TcpSendQueue,
        Probe::LocalOut,
        Probe::PostRouting,
        Probe::DevEgress,
    ]
    .iter()
    .map(|p| hist(r, *p).mean_ns())
    .sum()
}

#[test]
fn ten_thousand_output_rules_show_at_local_out_only() {
    require_root!();
    let _g = lab::timing_lock();
    let mut lab = Lab::new("tn");
    let port = lab::free_port();
    lab.serve_in_b(port);
    // One measured transaction: nearly every packet A sends is then one of the exchanges rr
    // stamps after its run (200), so the stages and the kernel's stamps time the same sends.
    let (before, rr0) = rr_run(&lab, port, 1);
    lab.output_rules_a(10_000);
    let (after, rr1) = rr_run(&lab, port, 1);
    let stamped = |rr: &serde_json::Value| {
        rr["client_stack"]["send_to_sched"]["samples"]
            .as_u64()
            .unwrap()
    };
    let n = stamped(&rr0).min(stamped(&rr1));
    assert!(n >= 100, "{rr0} {rr1}");
    // The kernel's own send() → qdisc on rr's socket (SO_TIMESTAMPING), as a mean: exact, and
    // what a sum of stages is compared with (a median of a sum is no sum of medians).
    let sched = |rr: &serde_json::Value| rr["client_stack"]["send_to_sched"]["mean_ns"].as_f64();
    eprintln!(
        "before: {}\nafter: {}\nSO_TIMESTAMPING send→qdisc {} → {}",
        figures(&before),
        figures(&after),
        rr0["client_stack"]["send_to_sched"],
        rr1["client_stack"]["send_to_sched"]
    );
    for r in [&before, &after] {
        let st = r
            .probes
            .iter()
            .find(|s| s.probe == Probe::LocalOut)
            .unwrap();
        assert!(st.available(), "local-out: {:?}", st.refused);
        // Every request A sends passes LOCAL_OUT once.
        assert!(hist(r, Probe::LocalOut).count() >= n, "{}", figures(r));
    }
    // Means, not the log2 medians: these are exact, the medians only placed within a bucket.
    let mean = |r: &StackReport, p| hist(r, p).mean_ns();
    let (lo0, lo1) = (
        mean(&before, Probe::LocalOut),
        mean(&after, Probe::LocalOut),
    );
    assert!(lo0 < 20_000.0, "local-out without rules: {lo0} ns");
    // What 10,000 rules cost depends on the machine (a faster one walks them in ~90 µs, a
    // slower one in 150): the growth must be material, and most of what the kernel's own
    // timestamps on rr's socket saw send() → qdisc grow by (below, independently).
    let (s0, s1) = (sched(&rr0).unwrap(), sched(&rr1).unwrap());
    assert!(
        lo1 - lo0 >= 30_000.0,
        "local-out with 10,000 rules: {lo0:.0} → {lo1:.0} ns"
    );
    assert!(
        lo1 - lo0 >= 0.8 * (s1 - s0),
        "local-out grew by {:.0} ns, send() → qdisc by {:.0} ns: the rules' cost is not at local-out",
        lo1 - lo0,
        s1 - s0
    );
    // The stages around it do not see the rules.
    for p in [
        Probe::TcpSendQueue,
        Probe::PostRouting,
        Probe::DevEgress,
        Probe::Qdisc,
        Probe::Driver,
    ] {
        let (a, b) = (p50(&before, p), p50(&after, p));
        assert!(
            b < 20_000.0 && b < a * 3.0 + 5_000.0,
            "{p}: p50 {a} → {b} ns"
        );
    }
    // Independently, the kernel's timestamps on rr's own socket: send() → qdisc grew by what
    // the stages before the qdisc add up to (within a fifth).
    let (ours, kernels) = (to_the_qdisc_ns(&after) - to_the_qdisc_ns(&before), s1 - s0);
    assert!(
        (ours - kernels).abs() <= 0.2 * kernels,
        "write → qdisc grew by {ours:.0} ns by the stages, {kernels:.0} ns by SO_TIMESTAMPING"
    );
}

#[test]
fn a_tbf_backlog_shows_at_the_qdisc_as_backlog_over_rate() {
    require_root!();
    let _g = lab::timing_lock();
    let lab = Lab::new("tq");
    let (_listener, _udp, port) = lab.servers();
    const RATE_BPS: f64 = 20e6;
    // A limit the queue never reaches: the sender's send buffer (64 KiB, doubled by the kernel)
    // bounds what waits in it, ~55 datagrams (~57 kB, ~23 ms at 20 Mbit/s), and nothing drops.
    lab.exec_a(&[
        "tc",
        "qdisc",
        "add",
        "dev",
        lab.dev_a(),
        "root",
        "tbf",
        "rate",
        "20mbit",
        "burst",
        "16kb",
        "limit",
        "1mb",
    ]);
    let stack = lab.tx_stack_to_port(port, &["--probes", "dev-egress,qdisc,driver"]);
    // Send for 3 s while sampling the queue's backlog with tc, from 0.5 s on (it fills in
    // ~25 ms).
    let flood = {
        std::thread::scope(|sc| {
            let f = sc.spawn(|| lab.udp_flood(port, 1000, 65536, Duration::from_secs(3)));
            std::thread::sleep(Duration::from_millis(500));
            let mut samples = Vec::new();
            while !f.is_finished() {
                samples.push(lab.qdisc_backlog_a());
                std::thread::sleep(Duration::from_millis(50));
            }
            (f.join().unwrap(), samples)
        })
    };
    let (sent, samples) = flood;
    std::thread::sleep(Duration::from_millis(200)); // the queue drains
    let (code, out) = stack.interrupt();
    assert_eq!(code, 130);
    let r = report(&out);
    let q: Log2Histogram = hist(&r, Probe::Qdisc);
    let backlog = samples.iter().sum::<u64>() as f64 / samples.len().max(1) as f64;
    let want_ns = backlog * 8.0 / RATE_BPS * 1e9;
    eprintln!(
        "{sent} datagrams sent; tc backlog mean {backlog:.0} B over {} samples → {:.2} ms; {}",
        samples.len(),
        want_ns / 1e6,
        figures(&r)
    );
    assert!(samples.len() >= 20, "{samples:?}");
    assert!(
        backlog > 30_000.0,
        "the queue was not kept full: {samples:?}"
    );
    // 3 s at 20 Mbit/s of 1042-byte frames: ~7,000 through the queue, every one sent.
    assert!(q.count() >= 5_000, "{}", figures(&r));
    assert!(
        q.count() + 100 >= sent as u64,
        "{sent} sent: {}",
        figures(&r)
    );
    let mean = q.mean_ns();
    assert!(
        (mean - want_ns).abs() <= 0.2 * want_ns,
        "qdisc mean {:.2} ms, backlog ÷ rate {:.2} ms",
        mean / 1e6,
        want_ns / 1e6
    );
    // The wait is the qdisc's only: the driver and the egress hooks stay fast.
    for p in [Probe::DevEgress, Probe::Driver] {
        let h = hist(&r, p);
        assert!(
            h.count() >= 5_000 && h.quantile_ns(0.5) < 20_000.0,
            "{p}: {}",
            figures(&r)
        );
    }
}

#[test]
fn a_clean_veth_keeps_every_stage_small_and_says_it_has_no_completion() {
    require_root!();
    let _g = lab::timing_lock();
    let lab = Lab::new("tc");
    let (listener, _udp, port) = lab.servers();
    const N: usize = 300;
    let r = run(&lab, &listener, port, N);
    eprintln!("{}", figures(&r));
    // Every packet A sends to the port passes every stage from IP output to the driver: the
    // counts agree (a packet is in each stage once), and each stage is a few microseconds.
    let counts: Vec<u64> = PATH.iter().map(|p| hist(&r, *p).count()).collect();
    assert!(counts[0] >= N as u64, "{counts:?}");
    for c in &counts {
        assert!(c.abs_diff(counts[0]) <= counts[0] / 50, "{counts:?}");
    }
    for p in PATH {
        assert!(p50(&r, p) < 20_000.0, "{p}: {}", figures(&r));
    }
    // Each request was written once and sent once: a send-queue sample per request, short
    // with TCP_NODELAY and an idle connection.
    let sq = hist(&r, Probe::TcpSendQueue);
    assert!(
        (N as u64..=N as u64 + 5).contains(&sq.count()),
        "{}",
        figures(&r)
    );
    assert!(sq.quantile_ns(0.5) < 50_000.0, "{}", figures(&r));
    // veth hands every skb to B: no completion to time, and the report says so.
    assert_eq!(hist(&r, Probe::TxCompletion).count(), 0);
    let handed = r
        .stamps
        .iter()
        .find(|s| s.probe == Probe::TxCompletion)
        .map_or(0, |s| s.stats.handed_on);
    assert!(
        handed >= counts[4] * 9 / 10,
        "handed on {handed} of {counts:?}"
    );
}
