//! Test helpers for `latscope http`: private nginx instances on free loopback ports, tiny
//! misbehaving HTTP servers, and runners for latscope and wrk. Everything started here is
//! stopped in Drop; temp paths carry the pid.

#![allow(dead_code, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// Tests of one binary run in parallel threads; timing-sensitive ones take this lock so they
/// do not load the machine for each other.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fresh temp directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "latscope-http-{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A port nobody listens on right now (bind 0, read, close).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_listening(port: u16, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("{what} exited early: {st}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what} did not listen on port {port}");
}

/// How a private nginx is configured.
#[derive(Clone, Debug)]
pub struct NginxConf {
    pub tcp_nodelay: bool,
    pub sendfile: bool,
    /// `keepalive_timeout 0` makes nginx close after every response (with `Connection: close`).
    pub keepalive: bool,
    pub keepalive_requests: u32,
    pub access_log: bool,
    /// Serve HTTPS with this (cert, key) pair.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Size of /index.html.
    pub index_bytes: usize,
    /// Speak HTTP/2 (h2 with TLS, h2c with prior knowledge without).
    pub http2: bool,
}

impl Default for NginxConf {
    fn default() -> Self {
        NginxConf {
            tcp_nodelay: true,
            sendfile: true,
            keepalive: true,
            keepalive_requests: 1000,
            access_log: false,
            tls: None,
            index_bytes: 612,
            http2: false,
        }
    }
}

/// A private nginx (single process, foreground) on a free loopback port.
pub struct Nginx {
    pub port: u16,
    child: Child,
    pub dir: TempDir,
}

fn nginx_bin() -> &'static str {
    if Path::new("/usr/sbin/nginx").exists() {
        "/usr/sbin/nginx"
    } else {
        "nginx"
    }
}

impl Nginx {
    pub fn start(conf: NginxConf) -> Nginx {
        let dir = TempDir::new("nginx");
        let d = dir.0.display().to_string();
        std::fs::create_dir_all(dir.0.join("html")).unwrap();
        std::fs::create_dir_all(dir.0.join("logs")).unwrap();
        std::fs::create_dir_all(dir.0.join("tmp")).unwrap();
        std::fs::write(dir.0.join("html/index.html"), vec![b'a'; conf.index_bytes]).unwrap();
        // Retry on the (unlikely) race of another process taking the free port first.
        for _ in 0..5 {
            let port = free_port();
            let h2 = if conf.http2 { " http2" } else { "" };
            let listen = match &conf.tls {
                Some((cert, key)) => format!(
                    "listen 127.0.0.1:{port} ssl{h2}; ssl_certificate {}; ssl_certificate_key {};",
                    cert.display(),
                    key.display()
                ),
                None => format!("listen 127.0.0.1:{port}{h2};"),
            };
            let text = format!(
                "daemon off;\nmaster_process off;\nuser root;\npid {d}/nginx.pid;\nerror_log {d}/logs/error.log;\n\
                 events {{ worker_connections 4096; }}\n\
                 http {{\n  {access}\n  sendfile {sendfile};\n  tcp_nodelay {nodelay};\n  keepalive_timeout {ka};\n  keepalive_requests {kar};\n\
                 \x20 client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp; uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n\
                 \x20 server {{ {listen} root {d}/html; }}\n}}\n",
                access = if conf.access_log {
                    format!("access_log {d}/logs/access.log;")
                } else {
                    "access_log off;".into()
                },
                sendfile = if conf.sendfile { "on" } else { "off" },
                nodelay = if conf.tcp_nodelay { "on" } else { "off" },
                ka = if conf.keepalive { "75s" } else { "0" },
                kar = conf.keepalive_requests,
            );
            let conf_path = dir.0.join("nginx.conf");
            std::fs::write(&conf_path, text).unwrap();
            let mut child = Command::new(nginx_bin())
                .arg("-p")
                .arg(&dir.0)
                .arg("-c")
                .arg(&conf_path)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("nginx (apt: nginx-light) must be installed");
            std::thread::sleep(Duration::from_millis(50));
            if let Ok(Some(_)) = child.try_wait() {
                continue; // port taken: try another
            }
            wait_listening(port, &mut child, "nginx");
            return Nginx { port, child, dir };
        }
        panic!("could not start nginx");
    }

    /// The nginx process (master_process off: the one that serves).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self, path: &str) -> String {
        let scheme = if std::fs::read_to_string(self.dir.0.join("nginx.conf"))
            .unwrap()
            .contains("ssl_certificate")
        {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}{path}", self.port)
    }

    /// Lines in the access log (requests nginx answered).
    pub fn access_log_lines(&self) -> usize {
        std::fs::read_to_string(self.dir.0.join("logs/access.log"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
    let mut child = Command::new(env!("CARGO_BIN_EXE_latscope"))
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

pub fn make_certs() -> Certs {
    let dir = TempDir::new("certs");
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
