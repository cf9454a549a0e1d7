//! serve + rr/connect over TCP, UDP and unix, in-process and through the binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use lab::*;
use latscope_core::model::Meta;
use latscope_core::model::rr::Transport;
use latscope_net::rr::{RrConfig, StopAfter};
use latscope_net::sock::Target;

fn cfg(
    target: Target,
    addr: Option<std::net::SocketAddr>,
    transport: Transport,
    count: u64,
) -> RrConfig {
    RrConfig {
        connections: 2,
        stop_after: StopAfter::Count(count),
        warmup: Duration::from_millis(50),
        timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(2),
        interval: Duration::from_millis(200),
        ..RrConfig::probe(target, addr, transport)
    }
}

fn run_engine(c: &RrConfig) -> latscope_core::model::rr::RrReport {
    let stop = AtomicBool::new(false);
    let mut events = 0;
    let r = latscope_net::rr::run(
        c,
        Meta::new("rr", "test", 0),
        &stop,
        &mut |ev, h| {
            // The histogram handed over is the interval's: the live view's percentiles so far
            // are built from these.
            assert_eq!(ev.count, h.count(), "interval histogram matches its event");
            events += 1;
        },
        true,
    )
    .expect("rr runs");
    assert!(events >= 1, "interval events were delivered");
    r
}

#[test]
fn in_process_tcp_udp_unix() {
    let _timing = timing_lock();
    let path = sock_path("inproc");
    let srv = server(Some(path.clone()), None, None);
    let a = srv.tcp_addr;
    let tcp = run_engine(&cfg(
        Target::Inet {
            host: "127.0.0.1".into(),
            port: a.port(),
        },
        Some(a),
        Transport::Tcp,
        1001,
    ));
    let udp = run_engine(&cfg(
        Target::Inet {
            host: "127.0.0.1".into(),
            port: a.port(),
        },
        Some(a),
        Transport::Udp,
        1001,
    ));
    let unix = run_engine(&cfg(
        Target::Unix(path.clone()),
        None,
        Transport::Unix,
        1001,
    ));
    for (name, r) in [("tcp", &tcp), ("udp", &udp), ("unix", &unix)] {
        let s = &r.results[0];
        assert_eq!(
            s.transactions, 1001,
            "{name}: exact count over 2 connections"
        );
        assert_eq!(s.lost, 0, "{name}");
        assert!(s.errors.is_empty(), "{name}: {:?}", s.errors);
        assert!(
            s.rtt.p50_ns > 1_000 && s.rtt.p50_ns < 5_000_000,
            "{name}: p50 {}",
            s.rtt.p50_ns
        );
        assert!(
            s.rtt.min_ns <= s.rtt.p50_ns
                && s.rtt.p50_ns <= s.rtt.p99_ns
                && s.rtt.p99_ns <= s.rtt.max_ns
        );
        assert_eq!(s.one_way_p50_ns, s.rtt.p50_ns / 2);
    }
    drop(srv);
    assert!(
        !path.exists(),
        "the server removes its unix socket when it stops"
    );
}

#[test]
fn binary_tcp_udp_unix_json() {
    let _timing = timing_lock();
    let path = sock_path("bin");
    let srv = server(Some(path.clone()), None, None);
    let addr = addr_arg(srv.tcp_addr);
    let unix = format!("unix:{}", path.display());
    for args in [
        vec![addr.as_str()],
        vec![addr.as_str(), "--udp"],
        vec![unix.as_str()],
    ] {
        let mut full = vec!["rr", "-n", "300", "-c", "3"];
        full.extend(&args);
        let doc = json_run(&full, 0);
        assert_eq!(doc["results"][0]["transactions"], 300, "{args:?}");
        assert_eq!(doc["connections"], 3);
    }
    // The human table names the figures.
    let (code, out, _) = run(&["rr", &addr, "-n", "100"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("p99.9") && out.contains("one-way p50") && out.contains("64 B / 64 B"),
        "{out}"
    );
}

#[test]
fn udp_losses_are_counted_and_the_run_completes() {
    let _timing = timing_lock();
    let srv = server(None, None, None);
    let addr = addr_arg(srv.tcp_addr);
    // Every 5th datagram the server receives is dropped: in any 100 consecutive requests,
    // exactly 20. Each loss costs one 50 ms timeout, so the run cannot hang.
    // Losses are a finding (exit 1).
    let doc = json_run(
        &[
            "rr",
            &addr,
            "--udp",
            "-n",
            "100",
            "--timeout",
            "50ms",
            "--server-drop-every",
            "5",
        ],
        1,
    );
    assert_eq!(doc["results"][0]["lost"], 20, "{doc}");
    assert_eq!(doc["results"][0]["transactions"], 80);
}

/// Run `latscope ARGS --json` (an rr run that must succeed) and return its RTT median, ns.
fn rr_p50_ns(args: &[&str]) -> u64 {
    json_run(args, 0)["results"][0]["rtt"]["p50_ns"]
        .as_u64()
        .unwrap()
}

#[test]
fn nagle_split_response_stalls_and_nodelay_does_not() {
    let _timing = timing_lock();
    let slow = server(None, Some(nagle_split(128)), None);
    let p50 = rr_p50_ns(&["rr", &addr_arg(slow.tcp_addr), "-s", "1024", "-d", "1500ms"]);
    assert!(
        (35_000_000..=50_000_000).contains(&p50),
        "Nagle × delayed ACK p50 {p50} ns"
    );
    // Half of a delayed ACK's stall is no one-way latency: the table says "-" there.
    let (_, out, _) = run(&["rr", &addr_arg(slow.tcp_addr), "-s", "1024", "-d", "1s"]);
    let row = out
        .lines()
        .find(|l| l.contains("B / 1024 B"))
        .unwrap_or_else(|| panic!("no result row: {out}"));
    assert!(row.trim_end().ends_with(" -"), "{row}");

    // The same split writes with TCP_NODELAY on: no stall.
    let fast = server(None, None, None);
    let p50 = rr_p50_ns(&[
        "rr",
        &addr_arg(fast.tcp_addr),
        "-s",
        "1024",
        "-d",
        "1s",
        "--server-split",
        "128",
    ]);
    assert!(p50 < 2_000_000, "TCP_NODELAY p50 {p50} ns");

    // Client-side fix: TCP_QUICKACK re-armed after every read releases the held body.
    let p50 = rr_p50_ns(&[
        "rr",
        &addr_arg(slow.tcp_addr),
        "-s",
        "1024",
        "-d",
        "1s",
        "--quickack",
    ]);
    assert!(p50 < 2_000_000, "client TCP_QUICKACK p50 {p50} ns");
}

#[test]
fn size_sweep_flags_the_stalling_sizes() {
    let _timing = timing_lock();
    let srv = server(None, None, None);
    // Responses up to 256 B go out in one write; larger ones as 256 B + rest with Nagle on.
    // A flagged jump is a finding (exit 1).
    let doc = json_run(
        &[
            "rr",
            &addr_arg(srv.tcp_addr),
            "--sizes",
            "64:2048:x2",
            "-d",
            "600ms",
            "--server-split",
            "256",
            "--server-nagle",
        ],
        1,
    );
    let flagged: Vec<u64> = doc["size_jump"]["sizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(flagged, vec![512, 1024, 2048], "{doc}");
    assert!(
        doc["size_jump"]["likely_cause"]
            .as_str()
            .unwrap()
            .starts_with("~40 ms")
    );
    assert_eq!(doc["results"].as_array().unwrap().len(), 6);
}

#[test]
fn open_loop_rate_is_kept() {
    let _timing = timing_lock();
    let srv = server(None, None, None);
    let doc = json_run(
        &[
            "rr",
            &addr_arg(srv.tcp_addr),
            "-q",
            "2000",
            "-c",
            "2",
            "-d",
            "2s",
        ],
        0,
    );
    let n = doc["results"][0]["transactions"].as_u64().unwrap();
    assert!((3800..=4200).contains(&n), "2000/s for 2 s gave {n}");
    assert!(
        doc["results"][0]["rtt_from_intended"]["count"]
            .as_u64()
            .unwrap()
            == n
    );
    assert_eq!(doc["load"]["kind"], "open");
}

#[test]
fn connect_and_crr() {
    let _timing = timing_lock();
    let srv = server(None, None, None);
    let addr = addr_arg(srv.tcp_addr);
    let doc = json_run(&["connect", &addr, "-n", "150", "-P", "3"], 0);
    assert_eq!(doc["succeeded"], 150);
    assert!(doc["connect"]["p50_ns"].as_u64().unwrap() > 0);
    let doc = json_run(&["connect", &addr, "--crr", "-n", "80"], 0);
    assert_eq!(doc["transaction"]["count"], 80);
    assert!(doc["transaction"]["p50_ns"].as_u64() >= doc["connect"]["p50_ns"].as_u64());
}

#[test]
fn refused_connects_are_counted_not_fatal() {
    let _timing = timing_lock();
    // A port nobody listens on; nothing succeeded: the target exit code.
    let target = format!("127.0.0.1:{}", free_port());
    let doc = json_run(&["connect", &target, "-n", "7"], 3);
    assert_eq!(doc["refused"], 7);
    assert_eq!(doc["attempts"], 7);
}

/// sockperf ping-pong's median RTT in µs (with --full-rtt) against `port`.
fn sockperf_p50_us(port: u16, secs: u32) -> f64 {
    let pp = std::process::Command::new("sockperf")
        .args([
            "ping-pong",
            "--tcp",
            "-i",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-m",
            "64",
            "-t",
            &secs.to_string(),
            "--full-rtt",
        ])
        .output()
        .expect("sockperf ping-pong");
    let text =
        String::from_utf8_lossy(&pp.stdout).into_owned() + &String::from_utf8_lossy(&pp.stderr);
    text.lines()
        .find(|l| l.contains("percentile 50.000"))
        .and_then(|l| l.rsplit('=').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sockperf median in: {text}"))
}

#[test]
fn rr_agrees_with_sockperf_on_the_same_server() {
    let _timing = timing_lock();
    let port = free_port();
    let mut sp = std::process::Command::new("sockperf")
        .args([
            "server",
            "--tcp",
            "-i",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("sockperf is installed by scripts/setup.sh");
    std::thread::sleep(Duration::from_millis(500));
    let target = format!("127.0.0.1:{port}");
    // Alternate the two clients so that a noisy neighbour hits both; compare each one's best
    // median (the machine is shared: interference only ever adds latency).
    let (mut ours, mut theirs) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        let p50 = rr_p50_ns(&["rr", &target, "--peer", "sockperf", "-d", "1s"]) as f64 / 1000.0;
        ours = ours.min(p50);
        theirs = theirs.min(sockperf_p50_us(port, 1));
    }
    let _ = sp.kill();
    let _ = sp.wait();
    let ratio = ours / theirs;
    assert!(
        (0.75..=1.25).contains(&ratio),
        "latscope p50 {ours} us vs sockperf {theirs} us (ratio {ratio:.2})"
    );
}

#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    // `latscope rr … --json-lines | head -1`: the run stops at its next write, exit 0, no error.
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let srv = server(None, None, None);
    let mut child = Command::new(lab::BIN)
        .args([
            "rr",
            &addr_arg(srv.tcp_addr),
            "--udp",
            "-d",
            "20s",
            "-i",
            "100ms",
            "--json-lines",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("\"interval\""), "{first}");
    // The reader (and with it the pipe's read end) is gone now.
    let started = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}
