//! Helpers for the `latscope sockets` tests: socket options as the test sees them, report rows,
//! a keep-alive HTTP connection, and a `sockets --watch` child (killed on drop).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::RawFd;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

pub use super::netns::Netns;
pub use super::nginx::{Nginx, NginxConf};
pub use super::{BIN, free_port, output as latscope};

/// A private nginx as deployed (a master and one worker) on 127.0.0.1, `tcp_nodelay on|off`,
/// optionally inside network namespace `netns`.
pub fn nginx(nodelay: bool, netns: Option<&Netns>) -> Nginx {
    Nginx::start(NginxConf {
        tcp_nodelay: nodelay,
        master_process: true,
        netns: netns.map(|ns| ns.name.clone()),
        ..NginxConf::default()
    })
}

/// Run latscope with `args` (which should include --json) and parse stdout.
pub fn latscope_json(args: &[&str]) -> (Value, Output) {
    let out = latscope(args);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "latscope {args:?} printed no JSON ({e}); exit {:?}; stderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (v, out)
}

/// setsockopt(fd, level, name, int).
pub fn setopt(fd: RawFd, level: i32, name: i32, val: i32) {
    // SAFETY: val lives across the call; the size matches.
    let rc = unsafe { libc::setsockopt(fd, level, name, (&raw const val).cast(), 4) };
    assert_eq!(
        rc,
        0,
        "setsockopt({level}, {name}, {val}): {}",
        std::io::Error::last_os_error()
    );
}

/// getsockopt(fd, level, name) as int: the test's own view, the oracle for latscope's.
pub fn getopt(fd: RawFd, level: i32, name: i32) -> i32 {
    let mut v: i32 = 0;
    let mut len: libc::socklen_t = 4;
    // SAFETY: v and len are valid out-pointers.
    let rc = unsafe { libc::getsockopt(fd, level, name, (&raw mut v).cast(), &mut len) };
    assert_eq!(rc, 0);
    v
}

/// A sysctl as a number.
pub fn sysctl(path: &str) -> i64 {
    std::fs::read_to_string(format!("/proc/sys/{path}"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The socket rows of a report held by `pid` under `fd`.
pub fn row(report: &Value, pid: u32, fd: RawFd) -> &Value {
    report["sockets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["owners"]
                .as_array()
                .unwrap()
                .iter()
                .any(|o| o["pid"] == pid && o["fd"] == fd)
        })
        .unwrap_or_else(|| {
            panic!(
                "no row for pid {pid} fd {fd} in {}",
                serde_json::to_string_pretty(report).unwrap()
            )
        })
}

/// The inode of a namespace file.
pub fn inode(path: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

/// Open a keep-alive HTTP/1.1 connection, make one request and read the whole response; the
/// connection stays open.
pub fn http_keepalive(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /index.html HTTP/1.1\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "nginx closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(h) = text.find("\r\n\r\n") {
            let len: usize = text[..h]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if buf.len() >= h + 4 + len {
                assert!(text.starts_with("HTTP/1.1 200"), "{text}");
                return s;
            }
        }
    }
}

/// A `latscope sockets --watch --json-lines` child; lines arrive on a channel.
pub struct Watch {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
}

impl Watch {
    /// Start it and wait until it says it is attached.
    pub fn start(extra: &[&str]) -> Watch {
        let mut child = Command::new(BIN)
            .args(["sockets", "--watch", "--json-lines", "--duration", "60s"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let (etx, erx) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = etx.send(l);
            }
        });
        let line = erx
            .recv_timeout(Duration::from_secs(20))
            .expect("watch said nothing");
        assert!(
            line.contains("watching setsockopt calls"),
            "watch did not start: {line}"
        );
        Watch { child, lines }
    }

    /// Wait (at most `secs`) for an event matching `pred`.
    pub fn wait_for(&self, secs: u64, pred: impl Fn(&Value) -> bool) -> Option<Value> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let v: Value = serde_json::from_str(&l).expect("watch printed a JSON line");
                    if v["event"] == "setsockopt" && pred(&v) {
                        return Some(v);
                    }
                }
                Err(_) => return None,
            }
        }
        None
    }

    /// Ctrl-C it; return its exit code and the remaining lines.
    pub fn interrupt(mut self) -> (Option<i32>, Vec<Value>) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let st = self.child.wait().unwrap();
        // The reader thread ends at EOF, which disconnects the channel.
        let mut rest = Vec::new();
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            if let Ok(v) = serde_json::from_str(&l) {
                rest.push(v);
            }
        }
        (st.code(), rest)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
