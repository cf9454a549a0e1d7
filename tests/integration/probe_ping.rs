//! `latscope ping` against delay lines, namespaces and loopback; agreement with hping3;
//! behaviour without CAP_NET_RAW.

use crate::lab;

use std::process::Command;
use std::time::Duration;

use lab::probe::{BIN, DelayLine, Netns, json, link, median};
use serde_json::Value;

fn p50_ms(v: &Value) -> f64 {
    v["rtt"]["p50_ns"].as_u64().expect("p50") as f64 / 1e6
}

#[test]
fn rtt_matches_injected_delay_in_every_mode() {
    require_root!();
    delay_line_check("10.8.0.2", "0.0.0.0:0");
}

#[test]
fn rtt_matches_injected_delay_in_every_mode_ipv6() {
    require_root!();
    delay_line_check("fd08::2", "[::]:0");
}

fn delay_line_check(target: &str, bind: &str) {
    // The bound is a fraction of the injected delay, held by a forwarder thread in this process.
    let _serial = lab::timing_lock();
    let delay = Duration::from_millis(20);
    let dl = DelayLine::new(delay);
    let tcp = lab::probe::tcp_server(Some(&dl.server), bind);
    let udp = lab::probe::udp_echo(Some(&dl.server), bind);
    let (tp, up) = (tcp.port.to_string(), udp.port.to_string());
    for (mode, port) in [
        ("--syn", tp.as_str()),
        ("--connect", tp.as_str()),
        ("--udp", up.as_str()),
        ("--icmp", "0"),
    ] {
        let _ = dl.take_held_median();
        let out = dl.client.latscope(&[
            "ping", mode, "-c", "15", "-i", "30ms", "-W", "2s", "-p", port, "--json", target,
        ]);
        let v = lab::probe::ok_json(&out, mode);
        assert_eq!(v["received"], 15, "{mode}: {v}");
        let p50 = p50_ms(&v);
        // The delay the packets really got: the forwarder's hold times (its own lateness on
        // a busy machine included, so the check is about latscope, not the scheduler).
        let (held, n) = dl.take_held_median();
        let d_ms = held.as_secs_f64() * 1e3;
        assert!(n >= 15, "{mode}: {n} packets crossed the delay line");
        assert!(
            (20.0..22.0).contains(&d_ms),
            "{mode}: the delay line held packets {d_ms:.3} ms"
        );
        // The bound: within max(3 %, 200 us) of the injected delay.
        let tol_ms = (d_ms * 0.03).max(0.2);
        eprintln!("{mode} {target}: median RTT {p50:.3} ms, injected {d_ms:.3} ms");
        assert!(
            (p50 - d_ms).abs() <= tol_ms,
            "{mode} {target}: median RTT {p50:.3} ms vs injected {d_ms:.3} ms (± {tol_ms:.3} ms)"
        );
        // Every RTT timed by the kernel: SO_TIMESTAMPING, or TCP_INFO's handshake sample.
        let want = if mode == "--connect" {
            "kernel handshake RTT (TCP_INFO"
        } else {
            "kernel software TX+RX"
        };
        assert!(
            v["timestamps"].as_str().expect("ts").starts_with(want),
            "{mode}: {}",
            v["timestamps"]
        );
        assert!(
            v["replies"]
                .as_array()
                .expect("replies")
                .iter()
                .all(|r| r["kernel_timestamps"] == true),
            "{mode}: every RTT kernel-timed"
        );
        if mode != "--icmp" {
            assert_eq!(v["port_state"], "open", "{mode}");
        }
    }
}

/// client (10.7.0.1) — server (10.7.0.2) over one veth.
fn pair() -> (Netns, Netns) {
    let c = Netns::new("pc").no_icmp_limits();
    let s = Netns::new("ps").no_icmp_limits();
    link(&c, "v", &s, "v");
    c.ip(&["addr", "add", "10.7.0.1/24", "dev", "v"]);
    s.ip(&["addr", "add", "10.7.0.2/24", "dev", "v"]);
    (c, s)
}

#[test]
fn syn_ping_port_states_and_no_half_open_connection() {
    require_root!();
    let (c, s) = pair();
    let open = lab::probe::tcp_server(Some(&s), "0.0.0.0:0");
    let filtered = open.port.wrapping_add(1).max(1024);
    let closed = open.port.wrapping_add(2).max(1025);
    s.exec(&["nft", "add table inet lsprobe"]);
    s.exec(&[
        "nft",
        "add chain inet lsprobe in { type filter hook input priority 0 ; policy accept ; }",
    ]);
    s.exec(&[
        "nft",
        &format!("add rule inet lsprobe in tcp dport {filtered} drop"),
    ]);
    let ping = |port: u16| {
        let p = port.to_string();
        let out = c.latscope(&[
            "ping", "--syn", "-c", "5", "-i", "20ms", "-W", "300ms", "-p", &p, "--json", "10.7.0.2",
        ]);
        (out.status.code(), json(&out))
    };
    let (code, v) = ping(open.port);
    assert_eq!(code, Some(0));
    assert_eq!(
        (
            v["sent"].as_u64(),
            v["received"].as_u64(),
            v["port_state"].as_str()
        ),
        (Some(5), Some(5), Some("open"))
    );
    assert_eq!(v["replies_by_kind"][0], serde_json::json!(["SA", 5]));
    assert_eq!(v["replies"][0]["flags"], "SA");
    assert_eq!(v["replies"][0]["ttl"], 64);
    let (code, v) = ping(closed);
    assert_eq!(code, Some(0));
    assert_eq!(
        (v["received"].as_u64(), v["port_state"].as_str()),
        (Some(5), Some("closed"))
    );
    assert_eq!(v["replies"][0]["flags"], "RA");
    let (code, v) = ping(filtered);
    assert_eq!(code, Some(1), "no answer at all is exit code 1");
    assert_eq!(
        (
            v["sent"].as_u64(),
            v["lost"].as_u64(),
            v["port_state"].as_str()
        ),
        (Some(5), Some(5), Some("filtered"))
    );
    assert_eq!(v["loss_percent"], 100.0);
    // The kernel reset every SYN-ACK (no socket owns the reserved source ports): nothing
    // half-open or established remains on the target.
    std::thread::sleep(Duration::from_millis(100));
    let ss = String::from_utf8_lossy(&s.exec(&["ss", "-tanH"]).stdout).to_string();
    assert!(
        !ss.lines()
            .any(|l| l.starts_with("SYN-RECV") || l.starts_with("ESTAB")),
        "half-open or established connections left on the target:\n{ss}"
    );
    assert!(
        ss.lines().any(|l| l.starts_with("LISTEN")),
        "the listener is still there:\n{ss}"
    );
}

fn hping3_rtts_ms(text: &str) -> Vec<f64> {
    text.lines()
        .filter_map(|l| l.split("rtt=").nth(1))
        .filter_map(|r| r.split_whitespace().next())
        .filter_map(|x| x.parse().ok())
        .collect()
}

#[test]
fn agrees_with_hping3_syn() {
    require_root!();
    let _serial = lab::timing_lock();
    let dl = DelayLine::new(Duration::from_millis(10));
    let tcp = lab::probe::tcp_server(Some(&dl.server), "0.0.0.0:0");
    let p = tcp.port.to_string();
    // hping3 prints 0.1 ms steps and times answers when its libpcap loop delivers them, which
    // adds 0.5-1 ms here (on loopback its median is ~0.6 ms for a ~25 us RTT, see
    // benches/ping_vs_hping3.sh), and much more when the machine is busy: its figures are
    // user-space ones. So: latscope never above hping3 (beyond its rounding), at most 1.5 ms
    // below, in one of three tries at a quiet moment.
    let mut last = String::new();
    for _ in 0..3 {
        let out = dl.client.try_exec(&[
            "hping3", "-S", "-p", &p, "-c", "10", "-i", "u30000", "10.8.0.2",
        ]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let mut theirs = hping3_rtts_ms(&text);
        assert!(
            theirs.len() >= 8,
            "hping3 output:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = dl.client.latscope(&[
            "ping", "--syn", "-c", "10", "-i", "30ms", "-p", &p, "--json", "10.8.0.2",
        ]);
        let ours = p50_ms(&json(&out));
        let theirs = median(&mut theirs);
        eprintln!("SYN median RTT over a 10 ms line: latscope {ours:.3} ms, hping3 {theirs:.3} ms");
        // The two runs follow each other through a user-space delay line: on a loaded machine
        // one of them can catch a slow moment of the line itself (latscope 15.7 ms vs 11.2 ms
        // once), so a disagreement either way is retried, not failed at once.
        if ours <= theirs + 0.1 && theirs - ours <= 1.5 {
            return;
        }
        last = format!("latscope median {ours:.3} ms vs hping3 {theirs:.3} ms");
    }
    panic!("no agreement with hping3 in 3 tries: {last}");
}

fn capsh(cmd: &str) -> std::process::Output {
    Command::new("capsh")
        .args(["--drop=cap_net_raw", "--", "-c", cmd])
        .output()
        .expect("capsh")
}

#[test]
fn without_cap_net_raw_syn_fails_clearly_and_default_falls_back_to_connect() {
    require_root!();
    let srv = lab::probe::tcp_server(None, "127.0.0.1:0");
    let out = capsh(&format!(
        "exec {BIN} ping --syn -c 1 -p {} 127.0.0.1",
        srv.port
    ));
    assert_eq!(out.status.code(), Some(4), "exit code 4 (privilege)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CAP_NET_RAW") && err.contains("--connect"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    let out = capsh(&format!(
        "exec {BIN} ping -c 3 -i 20ms -p {} --json 127.0.0.1",
        srv.port
    ));
    lab::assert_success(&out);
    let v = json(&out);
    assert_eq!(v["mode"], "connect");
    assert!(
        v["mode_reason"]
            .as_str()
            .expect("reason")
            .contains("no CAP_NET_RAW")
    );
    assert_eq!(
        (v["received"].as_u64(), v["port_state"].as_str()),
        (Some(3), Some("open"))
    );
    // trace falls back to UDP without the capability.
    let out = capsh(&format!(
        "exec {BIN} trace -q 1 -w 300ms -m 3 --json 127.0.0.1"
    ));
    lab::assert_success(&out);
    let v = json(&out);
    assert_eq!(v["mode"], "udp");
    assert_eq!(v["destination_reply"], "port_unreachable");
}

#[test]
fn loopback_ipv6_every_mode() {
    require_root!();
    let tcp = lab::probe::tcp_server(None, "[::1]:0");
    let udp = lab::probe::udp_echo(None, "[::1]:0");
    let (tp, up) = (tcp.port.to_string(), udp.port.to_string());
    for (mode, port, kind) in [
        ("--syn", tp.as_str(), "syn_ack"),
        ("--connect", tp.as_str(), "connected"),
        ("--udp", up.as_str(), "udp_echo"),
        ("--icmp", "0", "echo_reply"),
    ] {
        let out = lab::output(&[
            "ping", mode, "-6", "-c", "3", "-i", "10ms", "-p", port, "--json", "::1",
        ]);
        let v = lab::probe::ok_json(&out, mode);
        assert_eq!(v["address"], "::1");
        assert_eq!(v["received"], 3, "{mode}");
        assert_eq!(v["replies"][0]["kind"], kind, "{mode}");
    }
    // UDP to a closed port: ICMPv6 port unreachable is the answer, the port is closed.
    let closed = std::net::UdpSocket::bind("[::1]:0").expect("bind");
    let port = closed.local_addr().expect("addr").port().to_string();
    drop(closed);
    let out = lab::output(&[
        "ping", "--udp", "-c", "2", "-i", "10ms", "-p", &port, "--json", "::1",
    ]);
    let v = json(&out);
    assert_eq!(v["replies"][0]["kind"], "port_unreachable", "{v}");
    assert_eq!(v["port_state"], "closed");
}

#[test]
fn ctrl_c_prints_statistics_so_far() {
    require_root!();
    let out = lab::interrupt_after(
        &["ping", "--icmp", "-c", "100000", "-i", "5ms", "127.0.0.1"],
        Duration::from_millis(600),
    );
    assert_eq!(out.status.code(), Some(130));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ping statistics") && text.contains("interrupted"),
        "{text}"
    );
    let sent: u64 = text
        .lines()
        .find_map(|l| {
            l.split(" probes sent")
                .next()
                .filter(|_| l.contains("probes sent"))
                .and_then(|n| n.parse().ok())
        })
        .expect("a 'probes sent' line");
    assert!(sent > 10 && sent < 100_000, "{sent} probes before Ctrl-C");
}

#[test]
fn flood_and_json_schema() {
    require_root!();
    let out = lab::output(&["ping", "--icmp", "--flood", "-c", "3000", "127.0.0.1"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("seq="), "no per-reply lines in flood mode");
    assert!(text.contains("3000 probes sent, 3000 answered"), "{text}");
    for (kind, args) in [
        (
            "ping",
            vec![
                "ping",
                "--udp",
                "-c",
                "2",
                "-i",
                "10ms",
                "-p",
                "9",
                "--json",
                "127.0.0.1",
            ],
        ),
        (
            "trace",
            vec!["trace", "--icmp", "-q", "1", "--json", "127.0.0.1"],
        ),
        (
            "trace",
            vec![
                "trace",
                "--report",
                "-c",
                "2",
                "-i",
                "10ms",
                "--json",
                "127.0.0.1",
            ],
        ),
    ] {
        let out = Command::new(BIN).args(&args).output().expect("run");
        lab::validate(&json(&out), kind);
    }
}

#[test]
fn trace_report_ctrl_c_and_json_lines() {
    require_root!();
    let out = lab::interrupt_after(
        &[
            "trace",
            "--report",
            "--icmp",
            "-c",
            "100000",
            "-i",
            "5ms",
            "127.0.0.1",
        ],
        Duration::from_millis(600),
    );
    assert_eq!(out.status.code(), Some(130));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("report over") && text.contains("127.0.0.1") && text.contains("interrupted"),
        "{text}"
    );
    // --json-lines: one event per answer, then the summary.
    let out = lab::output(&[
        "ping",
        "--icmp",
        "-c",
        "3",
        "-i",
        "5ms",
        "--json-lines",
        "127.0.0.1",
    ]);
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 4);
    assert!(
        lines[..3]
            .iter()
            .all(|l| l["event"] == "reply" && l["rtt_ns"].as_u64() > Some(0))
    );
    assert_eq!(lines[3]["event"], "summary");
    assert_eq!(lines[3]["report"]["received"], 3);
}

#[test]
fn probes_overlap_when_the_interval_is_shorter_than_the_rtt() {
    require_root!();
    // The delay is held by a forwarder thread in this process: timing tests run one at a time.
    let _serial = lab::timing_lock();
    let dl = DelayLine::new(Duration::from_millis(20));
    let tcp = lab::probe::tcp_server(Some(&dl.server), "0.0.0.0:0");
    let udp = lab::probe::udp_echo(Some(&dl.server), "0.0.0.0:0");
    let (tp, up) = (tcp.port.to_string(), udp.port.to_string());
    // 1 ms apart over a 20 ms path: ~20 probes in flight, each matched to its own answer.
    for (mode, port) in [
        ("--syn", tp.as_str()),
        ("--udp", up.as_str()),
        ("--icmp", "0"),
    ] {
        let _ = dl.take_held_median();
        let out = dl.client.latscope(&[
            "ping", mode, "-c", "60", "-i", "1ms", "-W", "2s", "-p", port, "--json", "10.8.0.2",
        ]);
        let v = json(&out);
        assert_eq!(
            v["received"],
            60,
            "{mode}: {} stderr={}",
            v["replies_by_kind"],
            String::from_utf8_lossy(&out.stderr)
        );
        let p50 = p50_ms(&v);
        // Against what the forwarder really held (its own lateness on a busy machine is part
        // of the path the probes crossed), not the setting alone.
        let (held, n) = dl.take_held_median();
        let d_ms = held.as_secs_f64() * 1e3;
        assert!(n >= 60, "{mode}: {n} packets crossed the delay line");
        let tol_ms = (d_ms * 0.1).max(1.0);
        eprintln!("{mode}: median RTT {p50:.3} ms, held {d_ms:.3} ms");
        assert!(
            p50 > d_ms - 0.2 && p50 < d_ms + tol_ms,
            "{mode}: p50 {p50:.3} ms, the delay line held packets {d_ms:.3} ms"
        );
        let elapsed = v["elapsed_ns"].as_u64().expect("elapsed") as f64 / 1e6;
        // One after the other, 60 probes would take 60 x 20 ms = 1.2 s.
        assert!(elapsed < 600.0, "{mode}: probes overlapped ({elapsed} ms)");
        let mut seqs: Vec<u64> = v["replies"]
            .as_array()
            .expect("replies")
            .iter()
            .map(|r| r["seq"].as_u64().expect("seq"))
            .collect();
        seqs.sort();
        assert_eq!(
            seqs,
            (0..60).collect::<Vec<u64>>(),
            "{mode}: every probe answered once"
        );
    }
}
