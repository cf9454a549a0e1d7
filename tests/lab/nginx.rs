//! Private nginx instances: their own prefix in a temp dir, a free loopback port, optionally in
//! a network namespace; stopped (and the dir removed) on drop.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{TempDir, free_port, netns};

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
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// Size of /index.html.
    pub index_bytes: usize,
    /// Speak HTTP/2 (h2 with TLS, h2c with prior knowledge without).
    pub http2: bool,
    /// A master process and one worker (as deployed) instead of one process that serves.
    pub master_process: bool,
    /// Run inside this network namespace (by name).
    pub netns: Option<String>,
    /// The IPv4 address to listen on (an address of `netns` when set).
    pub addr: String,
    /// More directives for the `http` block, e.g. `ssl_session_tickets off;`.
    pub extra: String,
    /// Parameters of the `listen` directive, e.g. `sndbuf=4k backlog=1`.
    pub listen_params: String,
    /// More directives for the `server` block, e.g. `location = /old { return 302 /new; }`.
    pub server_extra: String,
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
            master_process: false,
            netns: None,
            addr: "127.0.0.1".into(),
            extra: String::new(),
            listen_params: String::new(),
            server_extra: String::new(),
        }
    }
}

/// A private nginx (foreground) on a free port of its address (127.0.0.1 by default).
pub struct Nginx {
    pub port: u16,
    pub child: Child,
    pub dir: TempDir,
    conf: NginxConf,
}

fn nginx_bin() -> &'static str {
    if Path::new("/usr/sbin/nginx").exists() {
        "/usr/sbin/nginx"
    } else {
        "nginx"
    }
}

impl NginxConf {
    fn text(&self, d: &str, port: u16) -> String {
        let h2 = if self.http2 { " http2" } else { "" };
        let h2 = format!("{h2} {}", self.listen_params);
        let listen = match &self.tls {
            Some((cert, key)) => format!(
                "listen {}:{port} ssl{h2}; ssl_certificate {}; ssl_certificate_key {};",
                self.addr,
                cert.display(),
                key.display()
            ),
            None => format!("listen {}:{port}{h2};", self.addr),
        };
        let process = if self.master_process {
            "worker_processes 1;"
        } else {
            "master_process off;\nuser root;"
        };
        let on = |b: bool| if b { "on" } else { "off" };
        format!(
            "daemon off;\n{process}\npid {d}/nginx.pid;\nerror_log {d}/logs/error.log;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n  {access}\n  sendfile {sendfile};\n  tcp_nodelay {nodelay};\n  keepalive_timeout {ka};\n  keepalive_requests {kar};\n\
             \x20 client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp; uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n\
             \x20 {extra}\n\x20 server {{ {listen} root {d}/html; {server_extra} }}\n}}\n",
            extra = self.extra,
            server_extra = self.server_extra,
            access = if self.access_log {
                format!("access_log {d}/logs/access.log;")
            } else {
                "access_log off;".into()
            },
            sendfile = on(self.sendfile),
            nodelay = on(self.tcp_nodelay),
            ka = if self.keepalive { "75s" } else { "0" },
            kar = self.keepalive_requests,
        )
    }
}

impl Nginx {
    pub fn start(conf: NginxConf) -> Nginx {
        let dir = TempDir::new();
        let d = dir.0.display().to_string();
        for sub in ["html", "logs", "tmp"] {
            std::fs::create_dir_all(dir.path(sub)).unwrap();
        }
        // Readable by nginx's workers whatever the umask: with a master they run as `nobody`,
        // and a page they cannot read is a 403, not the page.
        for d in [dir.0.clone(), dir.path("html")] {
            std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
        }
        std::fs::write(dir.path("html/index.html"), vec![b'a'; conf.index_bytes]).unwrap();
        std::fs::set_permissions(
            dir.path("html/index.html"),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        // Retry on the (unlikely) race of another process taking the free port first.
        for _ in 0..5 {
            let port = free_port();
            let conf_path = dir.path("nginx.conf");
            std::fs::write(&conf_path, conf.text(&d, port)).unwrap();
            let mut cmd = match &conf.netns {
                Some(ns) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", ns, nginx_bin()]);
                    c
                }
                None => Command::new(nginx_bin()),
            };
            let mut child = cmd
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
            let ng = Nginx {
                port,
                child,
                dir,
                conf,
            };
            ng.wait_ready();
            return ng;
        }
        panic!("could not start nginx");
    }

    /// Until it accepts connections (in its namespace) or, with a master, its worker exists
    /// (the listener is open before workers are forked; no test connection is left behind in
    /// the socket tables the `sockets` tests read).
    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let port = self.port;
        let addr = self.conf.addr.as_str();
        let connects = || TcpStream::connect((addr, port)).is_ok();
        loop {
            let up = match (&self.conf.netns, self.conf.master_process) {
                (_, true) => self.worker().is_some(),
                (Some(ns), false) => netns::run_in(ns, connects),
                (None, false) => connects(),
            };
            if up {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nginx did not start on port {port}: {}",
                self.error_log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process nginx was started as: the one that serves, or with `master_process` the master.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn master(&self) -> u32 {
        self.child.id()
    }

    /// The worker process's pid (with `master_process`).
    pub fn worker(&self) -> Option<u32> {
        let pid = self.master();
        let s = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        s.split_whitespace().next()?.parse().ok()
    }

    pub fn url(&self, path: &str) -> String {
        let scheme = if self.conf.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}:{}{path}", self.conf.addr, self.port)
    }

    /// Lines in the access log (requests nginx answered).
    pub fn access_log_lines(&self) -> usize {
        std::fs::read_to_string(self.dir.path("logs/access.log"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path("logs/error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: fast shutdown; a master stops its workers. Then make sure.
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
    }
}
