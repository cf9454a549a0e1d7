//! Helpers for the capture/analyze tests: `latscope capture` (or tcpdump) in the background,
//! small HTTP servers with chosen write patterns, and tshark queries. Background processes are
//! stopped in Drop.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

pub use super::netns::Netns;
pub use super::{BIN, TempDir, unique};

/// A background capture process; SIGINT on stop (and on drop, as a safety net).
pub struct Bg {
    child: Option<Child>,
    /// The file the process writes packet by packet (tcpdump -U): stop waits until it stops
    /// growing, because tcpdump's SIGINT handler breaks its loop without draining the ring, and
    /// on a loaded machine it may not yet have read the last packets.
    written: Option<std::path::PathBuf>,
}

fn wait_ready(child: &mut Child, marker: &'static str) {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stderr);
        let mut line = String::new();
        let mut sent = false;
        while r.read_line(&mut line).unwrap_or(0) > 0 {
            if !sent && line.contains(marker) {
                let _ = tx.send(());
                sent = true;
            }
            line.clear();
        }
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("capture did not start within 20 s");
    // The socket is bound before the line is printed; give the ring a moment anyway.
    std::thread::sleep(Duration::from_millis(200));
}

/// Spawn `cmd` with stderr piped and wait until it prints `marker` (its capture socket is bound).
pub fn spawn_ready(mut cmd: Command, marker: &'static str) -> Child {
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    wait_ready(&mut child, marker);
    child
}

impl Bg {
    /// `latscope capture` with `args`, optionally inside a network namespace.
    pub fn latscope_capture(netns: Option<&str>, args: &[&str]) -> Bg {
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, BIN, "capture"]);
                c
            }
            None => {
                let mut c = Command::new(BIN);
                c.arg("capture");
                c
            }
        };
        let mut child = cmd
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_ready(&mut child, "capturing on");
        Bg {
            child: Some(child),
            written: None,
        }
    }

    /// `latscope capture -i lo -w FILE FILTER`, optionally inside a network namespace.
    pub fn latscope_capture_lo(netns: Option<&str>, file: &Path, filter: &str) -> Bg {
        Bg::latscope_capture(netns, &["-i", "lo", "-w", file.to_str().unwrap(), filter])
    }

    /// tcpdump writing `file` with `filter` on `iface`.
    pub fn tcpdump(iface: &str, file: &Path, filter: &str) -> Bg {
        // --immediate-mode: without it tcpdump reads the kernel's ring a block at a time (a
        // block is handed over when full or after its 1 s timeout), so packets of the last
        // second before the Ctrl-C are counted by the kernel but never written.
        let mut child = Command::new("tcpdump")
            .args(["-i", iface, "--immediate-mode", "-U", "-n", "-w"])
            .arg(file)
            .arg(filter)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump is installed (scripts/packages.d/wire.txt)");
        wait_ready(&mut child, "listening on");
        Bg {
            child: Some(child),
            written: Some(file.to_path_buf()),
        }
    }

    /// Ctrl-C, then wait for the process to flush and exit.
    pub fn stop(mut self) -> Output {
        let child = self.child.take().unwrap();
        // Let the last packets reach the ring before stopping.
        std::thread::sleep(Duration::from_millis(300));
        if let Some(file) = &self.written {
            wait_until_stable(file);
        }
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        child.wait_with_output().unwrap()
    }
}

/// Wait (at most 10 s) until `file`'s size has not changed for 500 ms.
fn wait_until_stable(file: &Path) {
    let size = || std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    let mut last = size();
    let mut stable_since = std::time::Instant::now();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline
        && stable_since.elapsed() < Duration::from_millis(500)
    {
        std::thread::sleep(Duration::from_millis(100));
        let now = size();
        if now != last {
            last = now;
            stable_since = std::time::Instant::now();
        }
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// How the test server writes its response.
#[derive(Clone, Copy, Debug)]
pub enum Pattern {
    /// Header and body in two writes, Nagle on (the default).
    SplitNagle,
    /// Header and body in two writes with TCP_NODELAY.
    SplitNoDelay,
    /// Sleep, then the whole response in one write.
    Think(Duration),
}

/// A tiny HTTP/1.1 keep-alive server on 127.0.0.1:0 that serves `conns` connections.
pub fn http_server(pattern: Pattern, conns: usize) -> (SocketAddr, JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        for _ in 0..conns {
            let Ok((mut s, _)) = l.accept() else { return };
            if matches!(pattern, Pattern::SplitNoDelay) {
                s.set_nodelay(true).unwrap();
            }
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                let n = match s.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                buf.extend_from_slice(&chunk[..n]);
                while let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    buf.drain(..i + 4);
                    let head = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n";
                    match pattern {
                        Pattern::SplitNagle | Pattern::SplitNoDelay => {
                            s.write_all(head).unwrap();
                            s.write_all(b"body").unwrap();
                        }
                        Pattern::Think(d) => {
                            std::thread::sleep(d);
                            let mut all = head.to_vec();
                            all.extend_from_slice(b"body");
                            s.write_all(&all).unwrap();
                        }
                    }
                }
            }
        }
    });
    (addr, h)
}

/// `conns` keep-alive connections of `reqs` requests each; returns each request's latency.
pub fn http_client(addr: SocketAddr, conns: usize, reqs: usize) -> Vec<Duration> {
    let mut out = Vec::new();
    for _ in 0..conns {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        for i in 0..reqs {
            let t0 = std::time::Instant::now();
            s.write_all(format!("GET /{i} HTTP/1.1\r\nHost: lab\r\n\r\n").as_bytes())
                .unwrap();
            let mut got = Vec::new();
            let mut chunk = [0u8; 1024];
            while !got.ends_with(b"body") {
                let n = s.read(&mut chunk).unwrap();
                assert!(n > 0, "server closed early");
                got.extend_from_slice(&chunk[..n]);
            }
            out.push(t0.elapsed());
        }
        let _ = s.shutdown(Shutdown::Write);
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
    out
}

/// Run `latscope analyze FILE --json [extra]`; returns (exit code, JSON).
pub fn analyze_json(file: &Path, extra: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(BIN)
        .arg("analyze")
        .arg(file)
        .arg("--json")
        .args(extra)
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "analyze output is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, v)
}

/// Count the frames of `file` matching a tshark display filter ("" = all).
pub fn tshark_count(file: &Path, filter: &str) -> u64 {
    let mut c = Command::new("tshark");
    c.arg("-r")
        .arg(file)
        .args(["-T", "fields", "-e", "frame.number"]);
    if !filter.is_empty() {
        c.args(["-Y", filter]);
    }
    let out = c
        .output()
        .expect("tshark is installed (scripts/packages.d/wire.txt)");
    assert!(
        out.status.success(),
        "tshark failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count() as u64
}
