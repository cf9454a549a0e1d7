//! Helpers for the `latscope sockets` integration tests: running the binary, setting socket
//! options, network namespaces, a private nginx, and a `--watch` child. Everything created here
//! has a name with "lsi" and the test's pid, and is removed on drop.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_latscope");

/// Run latscope with `args`.
pub fn latscope(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run latscope")
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

/// A free TCP port on 127.0.0.1 (bound then released; good enough on loopback).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The inode of a namespace file.
pub fn inode(path: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

/// A named network namespace with loopback up, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        let name = format!("lsi{}{tag}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        let st = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .unwrap();
        assert!(st.success(), "ip netns add {name}");
        let ns = Netns { name };
        let st = Command::new("ip")
            .args(["-n", &ns.name, "link", "set", "lo", "up"])
            .status()
            .unwrap();
        assert!(st.success());
        ns
    }

    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A private nginx (nginx-light) on 127.0.0.1:`port`, with its own prefix in a temp dir; stopped
/// and removed on drop.
pub struct Nginx {
    pub dir: PathBuf,
    pub port: u16,
    pub child: Child,
}

impl Nginx {
    /// Start nginx with `tcp_nodelay on|off`, optionally inside network namespace `netns`.
    pub fn start(tag: &str, nodelay: bool, netns: Option<&Netns>) -> Nginx {
        let dir = std::env::temp_dir().join(format!("lsi{}{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        std::fs::create_dir_all(dir.join("html")).unwrap();
        std::fs::write(dir.join("html/index.html"), "hello from nginx\n").unwrap();
        let port = free_port();
        let d = dir.display();
        let conf = format!(
            "daemon off;\nworker_processes 1;\nerror_log {d}/logs/error.log;\npid {d}/logs/nginx.pid;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;\n  \
             uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n  tcp_nodelay {};\n  keepalive_timeout 60;\n  \
             server {{ listen 127.0.0.1:{port}; root {d}/html; }}\n}}\n",
            if nodelay { "on" } else { "off" }
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let conf_path = dir.join("nginx.conf");
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.name, "nginx"]);
                c
            }
            None => Command::new("nginx"),
        };
        cmd.arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&conf_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().expect("start nginx (nginx-light)");
        let n = Nginx { dir, port, child };
        // Ready when the worker exists (the listener is open before workers are forked).
        let deadline = Instant::now() + Duration::from_secs(10);
        while n.worker().is_none() {
            assert!(
                Instant::now() < deadline,
                "nginx did not start: {}",
                n.error_log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        n
    }

    pub fn master(&self) -> u32 {
        self.child.id()
    }

    /// The worker process's pid.
    pub fn worker(&self) -> Option<u32> {
        let pid = self.master();
        let s = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        s.split_whitespace().next()?.parse().ok()
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("logs/error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: fast shutdown; the master stops its workers.
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
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
