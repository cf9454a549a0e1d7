//! The live terminal view as a person meets it: the real binary in a tmux pane (a real pty),
//! keys sent with `send-keys`, the screen read with `capture-pane`. `q` and Ctrl-C end the run
//! with its partial results; the terminal is given back (cooked mode, echo, main screen) after
//! a stop, after a normal end, and after an error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use lab::http::{TestServer, respond_always};
use lab::*;

/// A private tmux server (its own socket) running one command in an 100×40 pane; killed on drop.
struct Pane {
    socket: String,
    dir: PathBuf,
}

impl Pane {
    /// Run `args` of the binary in a new pane; afterwards the pane's shell records the exit code
    /// and the terminal's settings (`stty -a`) in files and stays open.
    fn run(args: &[&str]) -> Pane {
        let socket = unique("tui");
        let dir = std::env::temp_dir().join(&socket);
        std::fs::create_dir_all(&dir).unwrap();
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        let script = format!(
            "'{BIN}' {} ; echo $? > {d}/rc; stty -a > {d}/stty; echo PANE-DONE; sleep 600",
            quoted.join(" "),
            d = dir.display()
        );
        let out = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", "100", "-y", "40", "-s", "t"])
            .args(["sh", "-c", &script])
            .env("TERM", "xterm-256color")
            .output()
            .expect("tmux runs (scripts/setup.sh installs it)");
        assert!(
            out.status.success(),
            "tmux: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Pane { socket, dir }
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The visible screen (and the scroll-back, so nothing printed scrolls away).
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-S", "-200", "-t", "t"])
    }

    /// Wait until the screen shows `text`; panic with the screen after `secs`.
    fn wait_for(&self, text: &str, secs: u64) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if s.contains(text) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(secs),
                "no {text:?} on screen after {secs} s:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn keys(&self, keys: &str) {
        self.tmux(&["send-keys", "-t", "t", keys]);
    }

    /// After the command ended: its exit code, and whether the terminal is back to normal.
    fn finished(&self) -> (i32, String) {
        let screen = self.wait_for("PANE-DONE", 30);
        assert_eq!(
            self.tmux(&["display-message", "-p", "-t", "t", "#{alternate_on}"])
                .trim(),
            "0",
            "the alternate screen was left:\n{screen}"
        );
        let stty = std::fs::read_to_string(self.dir.join("stty")).unwrap();
        for (flag, meaning) in [
            ("icanon", "line editing"),
            ("echo", "echo"),
            ("isig", "Ctrl-C"),
        ] {
            assert!(
                stty.split_whitespace().any(|w| w == flag),
                "{meaning} ({flag}) not restored: {stty}"
            );
        }
        let rc = std::fs::read_to_string(self.dir.join("rc")).unwrap();
        (rc.trim().parse().unwrap(), screen)
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const HINT: &str = "q or Ctrl-C: stop with partial results";

#[test]
fn rr_live_view_stops_on_q_with_partial_results() {
    let srv = server(None, None, None);
    let target = addr_arg(srv.tcp_addr);
    let pane = Pane::run(&["rr", &target, "-d", "60s"]);
    let live = pane.wait_for("trans/s", 20);
    assert!(live.contains(HINT), "{live}");
    assert!(
        live.contains("of 60 s"),
        "progress against the duration:\n{live}"
    );
    // The percentiles so far appear once the first interval is in.
    let live = pane.wait_for("p99.9", 20);
    assert!(live.contains("latency histogram so far"), "{live}");
    pane.keys("q");
    let (rc, screen) = pane.finished();
    assert_eq!(rc, 130, "a stopped run exits 130:\n{screen}");
    assert!(
        screen.contains("request/response") && screen.contains("interrupted"),
        "the partial results are printed as usual:\n{screen}"
    );
    assert!(
        !screen.contains(HINT),
        "the live view is gone from the main screen:\n{screen}"
    );
}

#[test]
fn http_live_view_stops_on_ctrl_c() {
    let web = TestServer::start(respond_always(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ));
    let url = web.url();
    let pane = Pane::run(&["http", &url, "-c", "4", "-t", "1", "-d", "60s"]);
    let live = pane.wait_for("req/s", 20);
    assert!(live.contains("latscope http"), "{live}");
    pane.wait_for("p99.9", 20);
    pane.keys("C-c");
    let (rc, screen) = pane.finished();
    assert_eq!(rc, 130, "{screen}");
    assert!(
        screen.contains("Requests/sec") || screen.contains("req/s"),
        "{screen}"
    );
}

#[test]
fn the_terminal_is_restored_after_an_error_and_after_a_normal_end() {
    // Nobody listens: the run fails after the view took the screen.
    let port = free_port();
    let pane = Pane::run(&["http", &format!("http://127.0.0.1:{port}/"), "-d", "5s"]);
    let (rc, screen) = pane.finished();
    assert_eq!(rc, 3, "unreachable target:\n{screen}");
    assert!(screen.contains("latscope: error:"), "{screen}");

    let srv = server(None, None, None);
    let pane = Pane::run(&["rr", &addr_arg(srv.tcp_addr), "-d", "2s"]);
    let (rc, screen) = pane.finished();
    assert_eq!(rc, 0, "{screen}");
    assert!(screen.contains("request/response"), "{screen}");
}

#[test]
fn no_tui_keeps_the_plain_output() {
    let srv = server(None, None, None);
    // --no-progress asks for no live drawing at all: no view either.
    for flag in ["--no-tui", "--no-progress"] {
        let pane = Pane::run(&["rr", &addr_arg(srv.tcp_addr), "-d", "2s", flag]);
        // Mid-run, where the view would be up (it leaves no trace once it is closed).
        std::thread::sleep(std::time::Duration::from_millis(1000));
        let during = pane.screen();
        assert!(!during.contains(HINT), "{flag}: a live view:\n{during}");
        let (rc, screen) = pane.finished();
        assert_eq!(rc, 0, "{screen}");
        assert!(
            !screen.contains(HINT),
            "{flag} shows no live view:\n{screen}"
        );
        assert!(screen.contains("request/response"), "{screen}");
    }
}
