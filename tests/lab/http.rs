//! Helpers for `latscope http`: tiny misbehaving HTTP servers, a runner that measures the
//! client's peak memory, wrk, and certificates. Everything started here is stopped in Drop.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use super::nginx::{Nginx, NginxConf};
pub use super::{TempDir, free_port};

/// A tiny threaded HTTP server whose behaviour per connection is a closure; stops on drop.
pub struct TestServer {
    pub port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Read one request head (up to the empty line); false on EOF or error.
pub fn read_request(s: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut b = [0u8; 1024];
    loop {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                buf.extend_from_slice(&b[..n]);
                if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    return true;
                }
            }
        }
    }
}

impl TestServer {
    pub fn start<F>(handler: F) -> TestServer
    where
        F: Fn(TcpStream) + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let handler = Arc::new(handler);
        let st = stop.clone();
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        s.set_nonblocking(false).unwrap();
                        s.set_nodelay(true).unwrap();
                        let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
                        let h = handler.clone();
                        std::thread::spawn(move || h(s));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        TestServer {
            port,
            stop,
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serve `response` to every request on the connection until the client closes.
pub fn respond_always(response: &'static [u8]) -> impl Fn(TcpStream) + Send + Sync + 'static {
    move |mut s: TcpStream| {
        while read_request(&mut s) {
            if s.write_all(response).is_err() {
                return;
            }
        }
    }
}

/// Output of a latscope run.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub json: serde_json::Value,
    /// Peak resident set size of the latscope process, KiB.
    pub max_rss_kib: u64,
}

/// Run the latscope binary, wait with `wait4` to learn its peak RSS, and parse stdout as JSON
/// when possible.
#[allow(clippy::zombie_processes)] // reaped by wait4 below, which std does not know about
pub fn latscope(args: &[&str]) -> Run {
    let mut child = Command::new(super::BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    });
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; `status` and `usage` are valid out-pointers. `child` is
    // not waited on through std afterwards.
    let r = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert!(r > 0, "wait4 failed");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    let stdout = t_out.join().unwrap();
    let stderr = t_err.join().unwrap();
    let json = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    Run {
        code,
        stdout,
        stderr,
        json,
        max_rss_kib: usage.ru_maxrss as u64,
    }
}

pub fn ms(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap() / 1e6
}

/// Run wrk and return its p50 latency in milliseconds.
pub fn wrk_p50_ms(url: &str, connections: u32, threads: u32, secs: u32) -> f64 {
    let out = Command::new("wrk")
        .args([
            "--latency",
            "-c",
            &connections.to_string(),
            "-t",
            &threads.to_string(),
            "-d",
            &format!("{secs}s"),
            url,
        ])
        .output()
        .expect("wrk must be installed (apt: wrk)");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("50%"))
        .unwrap_or_else(|| panic!("no p50 in wrk output:\n{text}"));
    parse_wrk_time_ms(line.split_whitespace().nth(1).unwrap())
}

/// wrk prints "1.23ms", "456.00us", "1.01s".
pub fn parse_wrk_time_ms(s: &str) -> f64 {
    let (num, scale) = if let Some(v) = s.strip_suffix("us") {
        (v, 1e-3)
    } else if let Some(v) = s.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1e3)
    } else {
        (s, 1.0)
    };
    num.parse::<f64>().unwrap() * scale
}

/// A CA and a server certificate for 127.0.0.1/localhost signed by it, made with openssl.
pub struct Certs {
    pub dir: TempDir,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A self-signed certificate for localhost made as a newcomer makes one: `openssl req -x509
/// -newkey rsa:2048 -nodes -subj /CN=localhost -addext subjectAltName=DNS:localhost` (OpenSSL's
/// default configuration makes it a CA certificate, basicConstraints CA:TRUE). `ca` is the
/// certificate itself.
pub fn make_self_signed() -> Certs {
    let dir = TempDir::new();
    let (cert, key) = (dir.0.join("self.pem"), dir.0.join("self.key"));
    let st = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args([
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl");
    assert!(st.success(), "openssl req -x509");
    Certs {
        ca: cert.clone(),
        cert,
        key,
        dir,
    }
}

pub fn make_certs() -> Certs {
    let dir = TempDir::new();
    let p = |n: &str| dir.0.join(n);
    let run = |args: &[&str]| {
        let st = Command::new("openssl")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl");
        assert!(st.success(), "openssl {args:?}");
    };
    let s = |p: PathBuf| p.display().to_string();
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=latscope test CA",
        "-keyout",
        &s(p("ca.key")),
        "-out",
        &s(p("ca.pem")),
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        &s(p("srv.key")),
        "-out",
        &s(p("srv.csr")),
    ]);
    std::fs::write(
        p("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        &s(p("srv.csr")),
        "-CA",
        &s(p("ca.pem")),
        "-CAkey",
        &s(p("ca.key")),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &s(p("ext.cnf")),
        "-out",
        &s(p("srv.pem")),
    ]);
    Certs {
        ca: p("ca.pem"),
        cert: p("srv.pem"),
        key: p("srv.key"),
        dir,
    }
}
