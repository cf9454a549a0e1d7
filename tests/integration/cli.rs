//! The command line as a user meets it: bad input, schemas, progress-free JSON, Ctrl-C, demo.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use lab::*;
use latscope_net::proto::Limits;

/// Every error is one line on stderr, starting with "latscope: error:".
fn assert_one_line_error(err: &str) {
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {err:?}");
    assert!(lines[0].starts_with("latscope: error: "), "{err}");
}

#[test]
fn bad_input_gets_one_line_and_a_documented_code() {
    let srv = server(
        None,
        None,
        Some(Limits {
            max_tests: 8,
            max_duration_ms: 10_000,
            max_message_bytes: 1 << 20,
        }),
    );
    let addr = addr_arg(srv.tcp_addr);
    let free_port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let refused = format!("127.0.0.1:{free_port}");
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["rr", &refused, "-n", "5"], 3, "refused"),
        (
            vec!["rr", "no-such-host.invalid", "-n", "5"],
            3,
            "cannot reach",
        ),
        (vec!["rr", &addr, "-s", "0"], 2, "out of range"),
        (vec!["rr", &addr, "-s", "5GiB"], 2, "out of range"),
        (
            vec!["rr", &addr, "-s", "2MiB", "-n", "5"],
            3,
            "exceeds this server's limit",
        ),
        (
            vec!["rr", &addr, "-d", "30s"],
            3,
            "exceeds this server's limit",
        ),
        // In the user's terms, not the server's count with warm-up and slack ("a 7202 s test"
        // for `-d 2h`, issue 41).
        (
            vec!["rr", &addr, "-d", "30s"],
            3,
            "-d 30s exceeds this server's limit of 10s",
        ),
        (
            vec!["rr", &addr, "-d", "9s"],
            3,
            "-d 9s with its warm-up (200ms) and 2s of slack exceeds this server's limit of 10s",
        ),
        (
            vec!["stream", &addr, "-d", "1m"],
            3,
            "a 1m test exceeds this server's limit of 10s",
        ),
        (vec!["rr", &addr, "-d", "5parsecs"], 2, "invalid duration"),
        // One duration rule: the unit is required, and the error suggests it.
        (
            vec!["ping", "-i", "200", "127.0.0.1"],
            2,
            "200 what? write 200ms or 200s",
        ),
        (vec!["rr", &addr, "-d", "2"], 2, "2 what? write 2ms or 2s"),
        (vec!["stack", "-i", "1", "-d", "1"], 2, "1 what?"),
        (
            vec!["sockets", "--watch", "-d", "5"],
            2,
            "5 what? write 5ms or 5s",
        ),
        (vec!["rr", &addr, "--sizes", "1:10:x1"], 2, "factor"),
        (vec!["rr", &addr, "--udp", "-s", "8"], 2, "20-byte"),
        (vec!["rr", &addr, "-n", "0"], 2, "at least 1"),
        (vec!["rr", "127.0.0.1:0"], 2, "invalid port"),
        (vec!["rr"], 2, "no target"),
        (vec!["connect", &addr, "-P", "0"], 2, "--connections"),
        (
            vec!["rr", "127.0.0.1:7373", "-p", "9"],
            2,
            "names port 7373 but --port says 9",
        ),
        (vec!["stack", "-i", "lo"], 2, "give -I lo"),
        (vec!["stack", "-i", "3"], 2, "give -I 3"),
        (
            vec!["analyze", "a.pcap", "b.pcap", "--json"],
            2,
            "one capture file",
        ),
        (vec!["serve", "--port", "notaport"], 2, "invalid value"),
        (vec!["rr", &addr, "--bogus-flag"], 2, "unexpected argument"),
        (
            vec![
                "report",
                concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/corpus/ipip.pcap"),
                "-o",
                "-",
            ],
            2,
            "is a capture, not a result: run `latscope analyze",
        ),
    ];
    for (args, want, text) in cases {
        let t0 = Instant::now();
        let (code, _out, err) = run(&args);
        assert_eq!(code, want, "{args:?}: {err}");
        assert_one_line_error(&err);
        assert!(err.contains(text), "{args:?}: {err}");
        assert!(
            t0.elapsed() < Duration::from_secs(8),
            "{args:?} took {:?}",
            t0.elapsed()
        );
    }
}

#[test]
fn wrong_protocol_on_the_port_is_named() {
    // An HTTP server that answers anything with 400, like nginx does to our greeting.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(4) {
            let Ok(mut s) = s else { continue };
            let mut b = [0u8; 64];
            let _ = s.read(&mut b);
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let (code, _, err) = run(&["rr", &format!("127.0.0.1:{port}"), "-n", "5"]);
    assert_eq!(code, 3);
    assert_one_line_error(&err);
    assert!(
        err.contains("does not speak the latscope protocol") && err.contains("HTTP/1.1 400"),
        "{err}"
    );
}

#[test]
fn hostile_clients_do_not_stall_others() {
    let srv = server(None, None, None);
    let addr = srv.tcp_addr;
    // One client connects and says nothing; another sends garbage; a third a huge frame length.
    let _idle = std::net::TcpStream::connect(addr).unwrap();
    let mut garbage = std::net::TcpStream::connect(addr).unwrap();
    garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut huge = std::net::TcpStream::connect(addr).unwrap();
    let mut g = b"LATSCOPE\x00\x01".to_vec();
    g.extend_from_slice(&u32::MAX.to_be_bytes());
    huge.write_all(&g).unwrap();
    let t0 = Instant::now();
    let (code, out, err) = run(&["rr", &addr_arg(addr), "-n", "200", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json_checked(&out, "rr")["results"][0]["transactions"], 200);
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "served at once despite the idle client"
    );
    // The garbage client got a clear refusal or was closed, never left hanging past the timeout.
    garbage
        .set_read_timeout(Some(Duration::from_secs(4)))
        .unwrap();
    let mut buf = Vec::new();
    let _ = garbage.read_to_end(&mut buf);
    assert!(
        buf.starts_with(b"LATSCOPE"),
        "the server greets first, then closes on garbage"
    );
}

#[test]
fn test_limit_is_enforced() {
    let srv = server(
        None,
        None,
        Some(Limits {
            max_tests: 1,
            max_duration_ms: 60_000,
            max_message_bytes: 1 << 20,
        }),
    );
    let addr = addr_arg(srv.tcp_addr);
    let (code, _, err) = run(&["rr", &addr, "-c", "2", "-n", "10"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("busy: 1 tests running, retry later"), "{err}");
}

#[test]
fn json_lines_streams_intervals_then_the_summary() {
    let srv = server(None, None, None);
    let (code, out, err) = run(&[
        "rr",
        &addr_arg(srv.tcp_addr),
        "-d",
        "1200ms",
        "-w",
        "0s",
        "-i",
        "300ms",
        "--json-lines",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert!(lines.len() >= 4, "{out}");
    let (last, intervals) = lines.split_last().unwrap();
    for ev in intervals {
        assert_eq!(ev["event"], "interval");
        validate(ev, "interval");
    }
    assert_eq!(last["event"], "summary");
    validate(&last["report"], "rr");
    let sum: u64 = intervals.iter().map(|e| e["count"].as_u64().unwrap()).sum();
    assert_eq!(
        sum,
        last["report"]["results"][0]["transactions"]
            .as_u64()
            .unwrap(),
        "intervals add up to the total"
    );
}

/// A table on a pipe keeps every column; on 80 columns it leaves some out, names them and the
/// flag that keeps them (`--wide`), which does.
#[test]
fn tables_are_full_width_off_a_terminal_and_with_wide() {
    let srv = server(None, None, None);
    let addr = addr_arg(srv.tcp_addr);
    let table = |columns: Option<&str>, extra: &[&str]| {
        let mut cmd = std::process::Command::new(BIN);
        cmd.args(["rr", &addr, "-n", "200", "--no-progress"])
            .args(extra);
        cmd.env_remove("COLUMNS");
        if let Some(c) = columns {
            cmd.env("COLUMNS", c);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let piped = table(None, &[]);
    assert!(
        piped.split_whitespace().any(|w| w == "p99.9")
            && piped.contains("p99.99")
            && !piped.contains("left out"),
        "{piped}"
    );
    let narrow = table(Some("80"), &[]);
    let header = narrow.lines().find(|l| l.contains("p50")).unwrap();
    assert!(!header.contains("p99.99"), "{narrow}");
    assert!(
        narrow.contains("left out to fit 80 columns") && narrow.contains("--wide"),
        "{narrow}"
    );
    let wide = table(Some("80"), &["--wide"]);
    let header = wide.lines().find(|l| l.contains("p50")).unwrap();
    assert!(
        header.contains("p99.99") && !wide.contains("left out"),
        "{wide}"
    );
}

fn sigint_after(child: &mut std::process::Child, after: Duration) {
    std::thread::sleep(after);
    let _ = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
}

#[test]
fn ctrl_c_prints_partial_results_and_cleans_up() {
    let path = sock_path("sigint");
    let mut serve = ServeProcess::start(&["--unix", path.to_str().unwrap()]);
    // Listening, not only bound: the socket file appears at bind(), before listen(), and a
    // connect in between is refused (exit 3 on a loaded machine).
    let t0 = Instant::now();
    while std::os::unix::net::UnixStream::connect(&path).is_err()
        && t0.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut rr = std::process::Command::new(BIN)
        .args([
            "rr",
            &format!("unix:{}", path.display()),
            "-d",
            "30s",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    sigint_after(&mut rr, Duration::from_millis(1500));
    let out = rr.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let doc = json_checked(&String::from_utf8_lossy(&out.stdout), "rr");
    assert_eq!(doc["interrupted"], true);
    assert!(doc["results"][0]["transactions"].as_u64().unwrap() > 100);

    sigint_after(&mut serve.child, Duration::from_millis(100));
    let status = serve.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(!path.exists(), "serve removed its unix socket on Ctrl-C");
}

#[test]
fn demo_tells_the_story() {
    // Its medians are held to bounds, and its healthy server must read clean: on a host the
    // pool's other tests load, that server's threads truly wait milliseconds for a CPU and
    // diagnose says so (run_queue_delay, 3 of 6 runs beside three busy loops). Run alone.
    let _serial = timing_lock();
    let (code, out, err) = run(&["demo", "-d", "1s", "--json"]);
    assert_eq!(code, 0, "{err}");
    let doc = json_checked(&out, "demo");
    let v = &doc["verdict"];
    assert_eq!(v["same_path"], true, "{doc}");
    assert_eq!(v["stalled"], true, "{doc}");
    assert_eq!(v["slow_cause"], "nagle_delayed_ack", "{doc}");
    assert_eq!(v["side_to_fix"], "server");
    assert_eq!(v["healthy_is_clean"], true, "{doc}");
    let p50 = |i: usize| {
        doc["servers"][i]["diagnosis"]["budget"]["single_request_ns"]
            .as_u64()
            .unwrap()
    };
    assert!(
        p50(0) < 2_000_000 && (35_000_000..=50_000_000).contains(&p50(1)),
        "{} vs {}",
        p50(0),
        p50(1)
    );
    // The evidence includes the quick-ack experiment and the server's own socket option.
    let evidence = doc["servers"][1]["diagnosis"]["findings"][0]["evidence"].to_string();
    assert!(
        evidence.contains("TCP_QUICKACK") && evidence.contains("TCP_NODELAY off on"),
        "{evidence}"
    );
}

#[test]
fn every_subcommand_has_help_with_examples() {
    let (code, top, _) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(top.contains("Exit codes"));
    for cmd in [
        "serve", "rr", "connect", "stream", "ping", "trace", "sockets", "stack", "diagnose",
        "demo", "schema",
    ] {
        let (code, out, _) = run(&[cmd, "--help"]);
        assert_eq!(code, 0, "{cmd}");
        assert!(out.contains("Examples:"), "{cmd} --help has examples");
        assert!(top.contains(cmd), "top-level help lists {cmd}");
    }
}

/// Issue 41's words: the top-level help names each command's options as that command spells
/// them; capture's help does not speak of analyze; clap's similar names come best first; a
/// negative value gets no "use '-- -1'"; a name that does not resolve is worded one way.
#[test]
fn the_words_name_what_the_commands_take() {
    let (_, top, _) = run(&["--help"]);
    // Each command's summary, its wrapped lines joined.
    let mut summaries: Vec<(String, String)> = Vec::new();
    for line in top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
    {
        match line.strip_prefix("  ") {
            Some(rest) if !rest.starts_with(' ') => {
                let (cmd, text) = rest.split_once(' ').unwrap_or((rest, ""));
                summaries.push((cmd.to_string(), text.to_string()));
            }
            _ => {
                if let Some(last) = summaries.last_mut() {
                    last.1 += line;
                }
            }
        }
    }
    assert!(summaries.iter().any(|(c, _)| c == "trace"), "{top}");
    for (cmd, text) in &summaries {
        let flags: Vec<&str> = text
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("--"))
            .map(|w| w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()))
            .filter(|w| !w.is_empty())
            .collect();
        if flags.is_empty() {
            continue;
        }
        let (code, help, _) = run(&[cmd, "--help"]);
        assert_eq!(code, 0, "{cmd}");
        for f in flags {
            assert!(
                help.contains(&format!("--{f} ")) || help.contains(&format!("--{f}\n")),
                "the top-level help says `{cmd} --{f}`, which `{cmd} --help` does not list"
            );
        }
    }
    let (_, capture, _) = run(&["capture", "--help"]);
    assert!(!capture.contains("analyze:"), "{capture}");
    let (code, _, err) = run(&["stram"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("exist: 'stream'"),
        "the best match first: {err}"
    );
    let (code, _, err) = run(&["rr", "127.0.0.1", "-d", "-1s"]);
    assert_eq!(code, 2);
    assert!(
        !err.contains("'-- -1'") && err.contains("negative"),
        "{err}"
    );
    for args in [
        &["rr", "no-such-host.invalid", "-n", "1"][..],
        &["ping", "no-such-host.invalid", "-n", "1"],
        &["http", "http://no-such-host.invalid/", "-n", "1"],
    ] {
        let (code, _, err) = run(args);
        assert_eq!(code, 3, "{args:?}: {err}");
        assert_one_line_error(&err);
        assert!(
            err.contains("cannot reach no-such-host.invalid")
                && err.contains("the name 'no-such-host.invalid' does not resolve ("),
            "{args:?}: {err}"
        );
    }
}

/// A port already in use: `serve` and `agent --listen` exit with one documented code (2: the
/// port the user chose cannot be used) and one line naming the address and the remedy, not a
/// raw "Address already in use (os error 98)" with exit 5. `agent --check` counts the targets
/// and measurements as the agent's start-up line does, the peers' included (it said "0 targets
/// with 0 measurements, 2 peers" where the agent ran 2 targets, 4 measurements).
#[test]
fn a_port_in_use_is_exit_2_in_one_line_and_check_counts_as_start_up_does() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let at = format!("127.0.0.1:{port}");
    let dir = TempDir::new();
    std::fs::write(dir.path("peers.txt"), "127.0.0.2 b\n127.0.0.3 c\n").unwrap();
    let cfg = dir.path("agent.toml");
    std::fs::write(
        &cfg,
        "listen = \"127.0.0.1:0\"\n[peers]\nfile = \"peers.txt\"\n\
         measure = [{ kind = \"connect\", port = 22 }, { kind = \"rr\" }]\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    for args in [
        vec!["serve", "--port", &port],
        vec!["agent", "--config", cfg, "--listen", &at],
    ] {
        let (code, _out, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_one_line_error(&err);
        assert!(
            err.contains(&at) && err.contains("already in use") && err.contains("choose another"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("os error"), "{args:?}: {err}");
    }
    let (code, out, err) = run(&["agent", "--config", cfg, "--check"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("ok (2 targets with 4 measurements, 2 peers"),
        "{out}"
    );
}
