//! latscope diagnose names the cause: each case is a server with a known fault.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::process::Command;
use std::time::Duration;

use lab::diagnose::{json as diagnose, step};
use lab::*;

fn rules(doc: &serde_json::Value) -> Vec<String> {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn nagle_server_is_named_and_nodelay_is_clean() {
    // diagnose's rules weigh measured times; a neighbour test loading the CPUs (or capturing on
    // the same loopback) changes them.
    let _serial = lab::timing_lock();
    let slow = ServeProcess::start(&["--split-response", "128", "--nagle"]);
    let (code, doc) = diagnose(&slow.target(), &["--no-load"]);
    assert_eq!(code, 1, "findings exit 1");
    let top = &doc["findings"][0];
    assert_eq!(top["rule"], "nagle_delayed_ack", "{doc}");
    assert_eq!(top["side"], "server");
    assert!(top["fix"].as_str().unwrap().contains("TCP_NODELAY"));
    assert!(u64_of(&top["explains_ns"]) > 30_000_000);
    // The server runs on this host: its own socket says Nagle is on.
    let sockets = doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "server sockets")
        .unwrap();
    nagle_on_each_of_our_connections(sockets);

    let fast = ServeProcess::start(&["--split-response", "128"]);
    let (code, doc) = diagnose(&fast.target(), &["--no-load"]);
    assert_eq!(code, 0, "{doc}");
    assert!(rules(&doc).is_empty(), "{doc}");
    assert!(
        doc["verdict"]
            .as_str()
            .unwrap()
            .starts_with("no latency problem")
    );
    assert!(doc["budget"]["path_rtt_ns"].as_u64().is_some());
}

fn u64_of(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap()
}

/// The server-sockets step ran and read Nagle on at the server's end of each of our
/// connections of the step: one, or two when the step opened another between the socket scans
/// (each kept with its latest reading) — and no other client's connection.
fn nagle_on_each_of_our_connections(sockets: &serde_json::Value) {
    assert_eq!(sockets["status"], "ran", "{sockets}");
    let detail = sockets["detail"].as_str().unwrap();
    let count = |after: &str| -> Option<usize> {
        let rest = &detail[detail.find(after)? + after.len()..];
        rest.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    let (ours, nagle) = (count("]: "), count("TCP_NODELAY off on "));
    assert!(
        matches!(ours, Some(1..=2)) && nagle == ours && detail.contains(" connection"),
        "{sockets}"
    );
}

#[test]
fn think_time_is_not_nagle() {
    // diagnose's rules weigh measured times; a neighbour test loading the CPUs (or capturing on
    // the same loopback) changes them.
    let _serial = lab::timing_lock();
    let srv = ServeProcess::start(&["--think", "20ms"]);
    let (code, doc) = diagnose(&srv.target(), &["--no-load", "-c", "1"]);
    assert_eq!(code, 1);
    let r = rules(&doc);
    assert_eq!(r.first().map(String::as_str), Some("think_time"), "{doc}");
    assert!(!r.contains(&"nagle_delayed_ack".to_string()));
}

#[test]
fn one_worker_under_concurrency_is_socket_queueing() {
    // diagnose's rules weigh measured times; a neighbour test loading the CPUs (or capturing on
    // the same loopback) changes them.
    let _serial = lab::timing_lock();
    let srv = ServeProcess::start(&["--think", "5ms", "--workers", "1"]);
    let (code, doc) = diagnose(&srv.target(), &["--no-load", "-c", "8"]);
    assert_eq!(code, 1);
    let r = rules(&doc);
    assert_eq!(
        r.first().map(String::as_str),
        Some("socket_queueing"),
        "{doc}"
    );
    assert!(
        r.contains(&"think_time".to_string()),
        "the 5 ms per request is reported too: {doc}"
    );
}

#[test]
fn any_tcp_service_gets_the_path_and_the_skipped_steps() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || for _s in l.incoming().take(400) {});
    let (code, doc) = diagnose(&format!("127.0.0.1:{port}"), &[]);
    assert_eq!(code, 0, "a plain TCP service, nothing to find: {doc}");
    assert_eq!(doc["target_kind"], "tcp");
    let skipped: Vec<&str> = doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "skipped")
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(skipped.contains(&"one request"), "{doc}");
    // A step that did not apply was never cut short (issue 41: "cut short at its 0ns budget:
    // an address, not a name").
    for s in doc["steps"].as_array().unwrap() {
        let detail = s["detail"].as_str().unwrap();
        assert!(
            s["status"] != "skipped" || !detail.contains("cut short"),
            "{s}"
        );
    }
}

/// Issue 37: latscope itself under 1 ms of CPU per 100 ms (a pod's or a CI runner's limit) spent
/// two minutes loading its kernel probes and ran 147 s against a --max-time of 30 s. It keeps its
/// deadline now: the probes are skipped, saying why, and the verdict names its own starvation.
#[test]
fn a_client_starved_by_its_own_cgroup_keeps_its_deadline() {
    require_root!();
    let _serial = lab::timing_lock();
    let srv = ServeProcess::start(&[]);
    let cg = lab::cgroup::CpuCgroup::new(1_000);
    let t0 = std::time::Instant::now();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && exec {BIN} diagnose {} -d 500ms --no-load --max-time 8s --json",
            cg.dir.display(),
            srv.target()
        ))
        .output()
        .unwrap();
    let wall = t0.elapsed();
    let doc = json_checked(&String::from_utf8_lossy(&out.stdout), "diagnose");
    assert!(
        wall < Duration::from_secs(8 + 5),
        "ran {wall:?} against --max-time 8s: {doc}"
    );
    let stack = step(&doc, "kernel stack");
    assert_eq!(stack["status"], "skipped", "{stack}");
    assert!(
        stack["detail"]
            .as_str()
            .unwrap()
            .contains("own cgroup allows it 1ms of CPU per 100ms"),
        "{stack}"
    );
    assert_eq!(out.status.code(), Some(1), "{doc}");
    assert!(
        rules(&doc).contains(&"client_cpu_starved".to_string()),
        "{doc}"
    );
}

#[test]
fn without_privileges_the_verdict_is_reduced_but_correct() {
    require_root!();
    // diagnose's rules weigh measured times; a neighbour test loading the CPUs (or capturing on
    // the same loopback) changes them.
    let _serial = lab::timing_lock();
    let slow = ServeProcess::start(&["--split-response", "128", "--nagle"]);
    let out = Command::new("capsh")
        .args([
            "--drop=cap_net_raw,cap_net_admin,cap_bpf,cap_perfmon,cap_sys_admin",
            "--",
            "-c",
        ])
        .arg(format!(
            "{BIN} diagnose {} -d 1s --no-load --json",
            slow.target()
        ))
        .output()
        .expect("capsh (libcap2-bin) is installed by setup.sh");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = json_checked(&String::from_utf8_lossy(&out.stdout), "diagnose");
    assert_eq!(doc["findings"][0]["rule"], "nagle_delayed_ack");
    let path = doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "path")
        .unwrap();
    assert!(
        path["detail"].as_str().unwrap().contains("connect"),
        "fell back to connect probes: {path}"
    );
}

#[test]
fn unmeasurable_targets_exit_3_and_bad_input_2() {
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The global exit table: a target that cannot be measured is 3, never "no problem" (0).
    let (code, out, err) = run(&["diagnose", &format!("127.0.0.1:{free}")]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.starts_with("latscope: error: cannot connect to") && err.contains("refused"),
        "{err}"
    );
    // The report agrees with the exit code: no "no problem" verdict for what was not measured.
    assert!(!out.contains("No latency problem found"), "{out}");
    assert!(!out.contains("no problem on the path"), "{out}");
    assert!(out.contains("could not be measured"), "{out}");
    let (code, out, _) = run(&["diagnose", &format!("127.0.0.1:{free}"), "--json"]);
    assert_eq!(code, 3);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        doc["verdict"].as_str().unwrap().starts_with("not measured"),
        "{doc}"
    );
    let (code, _, err) = run(&["diagnose", "no-such-host.invalid"]);
    assert_eq!(code, 3, "{err}");
    let (code, _, err) = run(&["diagnose", "127.0.0.1", "-c", "0"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(&["diagnose", "http://[::1"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn the_same_server_in_two_namespaces_is_read_where_our_connection_went() {
    require_root!();
    // diagnose's rules weigh measured times; a neighbour test loading the CPUs (or capturing on
    // the same loopback) changes them.
    let _serial = lab::timing_lock();
    // Client a (10.63.0.1) — server b (10.63.0.2); a twin namespace has the same address and
    // a server on the same port, busy with a client of its own, unreachable from a.
    let mut lab = lab::netns::NetnsPair::new("dt", 63, 1500);
    let twin = lab::netns::Netns::new("dt");
    twin.ip(&["addr", "add", "10.63.0.2/32", "dev", "lo"]);
    let port = free_port().to_string();
    let b = lab.b.clone();
    let serve = ["serve", "--bind", "10.63.0.2", "--port", &port, "-q"];
    let mut nagle = serve.to_vec();
    nagle.extend(["--split-response", "128", "--nagle"]);
    lab.spawn(&b, &nagle);
    lab.spawn(&twin.name, &serve);
    std::thread::sleep(Duration::from_millis(500));
    let target = format!("10.63.0.2:{port}");
    // Paced (open loop), so that the other clients keep their connections busy without taking
    // both CPUs from diagnose for the whole run (closed-loop clients made it last a minute).
    lab.spawn(
        &twin.name,
        &["rr", &target, "-d", "60s", "-c", "4", "-q", "400"],
    );
    // b's server has clients of its own too: only our connection's server end counts.
    lab.spawn(&b, &["rr", &target, "-d", "60s", "-c", "3", "-q", "300"]);
    std::thread::sleep(Duration::from_millis(300));

    let (code, out, err) = lab.run(
        &lab.a.clone(),
        &["diagnose", &target, "-d", "1s", "--no-load", "--json"],
    );
    assert_eq!(code, 1, "{err}");
    let doc = json_checked(&out, "diagnose");
    // (Which finding ranks first depends on how b's own clients load its server.)
    // b's end of our connections: not the twin's server (Nagle off), not b's other clients.
    nagle_on_each_of_our_connections(step(&doc, "server sockets"));
    // The kernel stack watched b's namespace, where our packets went, and only our
    // connections' addresses there: b's own clients (from 10.63.0.2) are left out.
    let stack = step(&doc, "kernel stack");
    if stack["status"] == "ran" {
        let d = stack["detail"].as_str().unwrap();
        assert!(!d.starts_with("0 packets"), "{stack}");
        assert!(
            d.contains(&format!("packets from 10.63.0.1 to {target} ")),
            "{stack}"
        );
    }
}
