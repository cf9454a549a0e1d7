//! Ctrl-C delivers partial results in every long-running command, at every moment of its run.
//!
//! Each command is interrupted at a sweep of moments: as soon as its handler is in place (still
//! setting up), early, in the middle and near the end. The signal is sent the way `timeout -s
//! INT` (coreutils) sends it: to the process, then again a few milliseconds later (timeout
//! signals its child, then its process group). The second copy used to be taken as a second
//! Ctrl-C and killed the run before it printed anything (issue 41 item 1: `diagnose` printed
//! nothing in 5 of 8 tries). Every run must end by itself, promptly, with a report: valid JSON
//! of its schema that says `interrupted`, or a table that says so, and exit 130 (or its normal
//! code when it had already finished).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab::{BIN, ServeProcess, TempDir, http::TestServer, json_checked};

/// How long a run may take to stop and print after the signal: a diagnose step's stop is bounded
/// by its own teardown (a capture flushing, BPF detaching), never by its measuring time.
const STOP_WITHIN: Duration = Duration::from_secs(8);

/// Whether `pid` has a handler for SIGINT (bit 1 of SigCgt in /proc/PID/status): from then on
/// a Ctrl-C can only ask the run to stop. Before it, the default action applies (the process
/// has not measured anything yet).
fn catches_sigint(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
}

/// One interrupted run: its exit code, stdout, stderr and the time it took to stop.
struct Interrupted {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    stopped_in: Duration,
}

fn spawn(args: &[String]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run latscope")
}

/// Start `args`, wait until it catches SIGINT, wait `after`, then send SIGINT twice 5 ms
/// apart (one Ctrl-C as `timeout` delivers it) and collect what the run printed.
fn interrupt_at(args: &[String], after: Duration) -> Interrupted {
    let mut child = spawn(args);
    let pid = child.id();
    let t0 = Instant::now();
    while !catches_sigint(pid) {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{args:?} never installed its Ctrl-C handler"
        );
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(after);
    let sent = Instant::now();
    for _ in 0..2 {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
        std::thread::sleep(Duration::from_millis(5));
    }
    // Read both pipes while waiting (a full pipe would hold the run), bounded by a deadline.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if sent.elapsed() > STOP_WITHIN + Duration::from_secs(20) {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stopped_in = sent.elapsed();
    Interrupted {
        code: status.code(),
        stdout: reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
        stopped_in,
    }
}

/// Interrupt `args` (the command first) at each of `moments`, alternately with `--json` and
/// with the human table, and check every run delivered its partial report. `finished` are the
/// codes of a run that ended before the signal reached it.
fn sweep(args: &[&str], moments_ms: &[u64], finished: &[i32]) {
    let kind = args[0];
    for (i, &ms) in moments_ms.iter().enumerate() {
        let json = i % 2 == 0;
        let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        all.push("--no-progress".into());
        if json {
            all.push("--json".into());
        }
        let r = interrupt_at(&all, Duration::from_millis(ms));
        let what = format!(
            "{} interrupted at {ms} ms (exit {:?}, stopped in {:?})\nstderr: {}",
            all.join(" "),
            r.code,
            r.stopped_in,
            r.stderr
        );
        let code = r
            .code
            .unwrap_or_else(|| panic!("killed by a signal: {what}"));
        assert!(
            code == 130 || finished.contains(&code),
            "exit {code}, want 130 or {finished:?}: {what}\nstdout: {}",
            r.stdout
        );
        assert!(!r.stdout.trim().is_empty(), "printed nothing: {what}");
        assert!(
            r.stopped_in <= STOP_WITHIN,
            "took {:?} to stop: {what}",
            r.stopped_in
        );
        if code != 130 {
            continue;
        }
        if json {
            let doc = json_checked(&r.stdout, kind);
            let flag = doc
                .get("interrupted")
                .or_else(|| doc.get("report").and_then(|r| r.get("interrupted")));
            assert_eq!(flag, Some(&serde_json::json!(true)), "{what}\n{}", r.stdout);
        } else {
            assert!(
                r.stdout.to_lowercase().contains("interrupted"),
                "the table does not say it was interrupted: {what}\n{}",
                r.stdout
            );
        }
    }
}

#[test]
fn diagnose_delivers_its_report_at_every_moment() {
    require_root!();
    let serve = ServeProcess::start(&[]);
    let target = serve.target();
    // One run at -d 300ms takes ~4 s on loopback: from set-up through each step's stop.
    sweep(
        &["diagnose", &target, "-d", "300ms"],
        &[0, 300, 900, 1600, 2300, 3000, 3700],
        &[0, 1],
    );
}

#[test]
fn demo_delivers_its_report_at_every_moment() {
    sweep(&["demo", "-d", "300ms"], &[0, 700, 2000], &[0, 1]);
}

#[test]
fn measuring_runs_deliver_their_report_at_every_moment() {
    let serve = ServeProcess::start(&[]);
    let target = serve.target();
    let port = serve.port.to_string();
    // Set-up, early, the middle, and the last moments of a 1 s run.
    let moments = [0, 100, 500, 950];
    sweep(&["rr", &target, "-d", "1s"], &moments, &[0]);
    sweep(&["connect", &target, "-d", "1s"], &moments, &[0, 1]);
    sweep(&["stream", &target, "-d", "1s"], &moments, &[0, 1]);
    sweep(
        &["ping", "--connect", "-p", &port, "127.0.0.1", "-i", "20ms"],
        &[0, 150, 1000],
        &[],
    );
    let http = TestServer::start(lab::http::respond_always(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ));
    sweep(
        &["http", &http.url(), "-c", "2", "-d", "1s"],
        &moments,
        &[0],
    );
}

#[test]
fn privileged_runs_deliver_their_report_at_every_moment() {
    require_root!();
    let serve = ServeProcess::start(&[]);
    let port = serve.port.to_string();
    let moments = [0, 100, 500, 950];
    // Rounds every 100 ms: 1 s in all.
    sweep(
        &[
            "trace",
            "--stats",
            "-n",
            "10",
            "-i",
            "100ms",
            "-p",
            &port,
            "127.0.0.1",
        ],
        &moments,
        &[0],
    );
    // Open-ended: before, at and after its first interval.
    sweep(&["stack", "-i", "500ms"], &[0, 300, 1200], &[]);
    let dir = TempDir::new();
    let file = dir.path("c.pcap");
    sweep(
        &[
            "capture",
            "-I",
            "lo",
            "-w",
            file.to_str().unwrap(),
            "-d",
            "1s",
        ],
        &moments,
        &[0],
    );
}
