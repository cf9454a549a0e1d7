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
    /// The process's stderr, whole once it has exited.
    stderr: Option<JoinHandle<String>>,
}

/// Wait until `child` prints `marker` on stderr. Its whole stderr is still kept: the returned
/// thread yields it once the process has exited (tcpdump's closing counts say what it lost).
fn wait_ready(child: &mut Child, marker: &'static str) -> JoinHandle<String> {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stderr);
        let mut all = String::new();
        let mut line = String::new();
        let mut sent = false;
        while r.read_line(&mut line).unwrap_or(0) > 0 {
            if !sent && line.contains(marker) {
                let _ = tx.send(());
                sent = true;
            }
            all.push_str(&line);
            line.clear();
        }
        all
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("capture did not start within 20 s");
    // The socket is bound before the line is printed; give the ring a moment anyway.
    std::thread::sleep(Duration::from_millis(200));
    reader
}

/// Spawn `cmd` with stderr piped and wait until it prints `marker` (its capture socket is bound).
pub fn spawn_ready(mut cmd: Command, marker: &'static str) -> Child {
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    drop(wait_ready(&mut child, marker));
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
        let stderr = wait_ready(&mut child, "capturing on");
        Bg {
            child: Some(child),
            written: None,
            stderr: Some(stderr),
        }
    }

    /// `latscope capture -i lo -w FILE FILTER`, optionally inside a network namespace.
    pub fn latscope_capture_lo(netns: Option<&str>, file: &Path, filter: &str) -> Bg {
        Bg::latscope_capture(netns, &["-i", "lo", "-w", file.to_str().unwrap(), filter])
    }

    /// tcpdump writing `file` with `filter` on `iface`.
    pub fn tcpdump(iface: &str, file: &Path, filter: &str) -> Bg {
        Bg::tcpdump_with(iface, file, filter, &[])
    }

    /// tcpdump with nanosecond timestamps in `file` (the default pcap rounds to microseconds), a
    /// 64 MiB ring of 2 KiB frames (the default snap length makes each slot 256 KiB: 256 slots)
    /// and buffered writes: a closed-loop HTTP run on loopback is ~70,000 packet copies a second,
    /// more than tcpdump writing packet by packet (-U) keeps up with on a loaded machine. The
    /// file is complete only once it has stopped.
    pub fn tcpdump_ns(iface: &str, file: &Path, filter: &str) -> Bg {
        Bg::tcpdump_with(
            iface,
            file,
            filter,
            &["--time-stamp-precision=nano", "-B", "65536", "-s", "2048"],
        )
    }

    fn tcpdump_with(iface: &str, file: &Path, filter: &str, extra: &[&str]) -> Bg {
        let per_packet = extra.is_empty();
        // --immediate-mode: without it tcpdump reads the kernel's ring a block at a time (a
        // block is handed over when full or after its 1 s timeout), so packets of the last
        // second before the Ctrl-C are counted by the kernel but never written.
        let mut child = Command::new("tcpdump")
            .args(["-i", iface, "--immediate-mode", "-n"])
            .args(if per_packet { &["-U"][..] } else { extra })
            .arg("-w")
            .arg(file)
            .arg(filter)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump is installed (scripts/packages.d/wire.txt)");
        let stderr = wait_ready(&mut child, "listening on");
        Bg {
            child: Some(child),
            written: Some(file.to_path_buf()),
            stderr: Some(stderr),
        }
    }

    /// Ctrl-C, then wait for the process to flush and exit; its whole stderr is in the output.
    pub fn stop(mut self) -> Output {
        let child = self.child.take().unwrap();
        // Let the last packets reach the ring before stopping.
        std::thread::sleep(Duration::from_millis(300));
        if let Some(file) = &self.written {
            wait_until_stable(file);
        }
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let mut out = child.wait_with_output().unwrap();
        if let Some(reader) = self.stderr.take() {
            out.stderr = reader.join().unwrap_or_default().into_bytes();
        }
        out
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

/// Each HTTP response's time since its request on the wire (tshark's `http.time`: request
/// packet to response packet), in nanoseconds, sorted.
pub fn tshark_http_times_ns(file: &Path) -> Vec<u64> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(["-Y", "http.response", "-T", "fields", "-e", "http.time"])
        .output()
        .expect("tshark is installed (scripts/packages.d/wire.txt)");
    assert!(
        out.status.success(),
        "tshark failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut t: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse::<f64>().ok())
        .map(|s| (s * 1e9).round() as u64)
        .collect();
    t.sort_unstable();
    t
}

/// tcpdump's closing counts (its stderr after Ctrl-C): what it wrote, what the kernel's filter
/// accepted for it (every copy, dropped ones included: tpacket_stats' tp_packets), and what the
/// kernel dropped for want of room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpdumpCounts {
    pub captured: u64,
    pub received: u64,
    pub dropped: u64,
}

impl TcpdumpCounts {
    /// Parse "N packets captured", "N packets received by filter", "N packets dropped by kernel".
    pub fn parse(stderr: &str) -> Option<TcpdumpCounts> {
        let count = |suffix: &str| {
            stderr.lines().find_map(|l| {
                l.trim()
                    .strip_suffix(suffix)
                    .and_then(|n| n.trim().parse::<u64>().ok())
            })
        };
        Some(TcpdumpCounts {
            captured: count("packets captured")?,
            received: count("packets received by filter")?,
            dropped: count("packets dropped by kernel")?,
        })
    }

    /// Packets the filter accepted that are not in the file (dropped, or left unread in the ring
    /// at the Ctrl-C), on interface `iface`. On the loopback device the kernel's filter sees each
    /// packet twice, sent and received, and libpcap discards the sent copy in user space: there
    /// `received` counts two copies of every packet, written or not.
    pub fn lost_on(self, iface: &str) -> u64 {
        let copies = if iface == "lo" { 2 } else { 1 };
        self.received.saturating_sub(copies * self.captured) / copies
    }
}

/// One line per packet of `file` that names it across captures of the same traffic (IP ID,
/// addresses, ports, TCP flags, sequence and acknowledgement numbers, length), sorted.
pub fn tshark_packets(file: &Path) -> Vec<String> {
    let fields = [
        "ip.id",
        "ip.src",
        "ip.dst",
        "tcp.srcport",
        "tcp.dstport",
        "udp.srcport",
        "udp.dstport",
        "tcp.flags",
        "tcp.seq_raw",
        "tcp.ack_raw",
        "frame.len",
    ];
    let mut c = Command::new("tshark");
    c.arg("-r").arg(file).args(["-T", "fields"]);
    for f in fields {
        c.args(["-e", f]);
    }
    let out = c
        .output()
        .expect("tshark is installed (scripts/packages.d/wire.txt)");
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// The packets of `a` that `b` lacks, and those of `b` that `a` lacks (as multisets: a packet
/// seen twice in one and once in the other is a difference).
pub fn packet_difference(a: &[String], b: &[String]) -> (Vec<String>, Vec<String>) {
    let mut only_a = vec![];
    let mut only_b = vec![];
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x == y => {
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x < y => {
                only_a.push(x.clone());
                i += 1;
            }
            (Some(_), Some(y)) => {
                only_b.push(y.clone());
                j += 1;
            }
            (Some(x), None) => {
                only_a.push(x.clone());
                i += 1;
            }
            (None, Some(y)) => {
                only_b.push(y.clone());
                j += 1;
            }
            (None, None) => break,
        }
    }
    (only_a, only_b)
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

/// The directory of public captures (`LATSCOPE_PCAPS_DIR`, else `../shared/pcaps` beside the
/// checkout or the worktree's parent), if this machine has it.
pub fn pcaps_dir() -> Option<std::path::PathBuf> {
    if let Some(d) = std::env::var_os("LATSCOPE_PCAPS_DIR") {
        return Some(std::path::PathBuf::from(d));
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    ["../shared/pcaps", "../../shared/pcaps"]
        .iter()
        .map(|p| root.join(p))
        .find(|p| p.is_dir())
}
