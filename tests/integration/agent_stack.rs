//! `latscope agent` with a `[stack]` section (root): the kernel stack histograms are scraped over
//! HTTP with nonzero log2 buckets after loopback traffic, and detached on SIGTERM; without
//! CAP_BPF/CAP_PERFMON (dropped from the bounding set before exec) the agent says which
//! capabilities are missing, in its log and in `latscope_stack_unavailable`, and keeps probing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab::stack::{BIN, lsstk_programs};
use lab::{TempDir, free_port};

/// The agent, killed on drop if a test fails before it stops.
struct Agent {
    child: Child,
    addr: SocketAddr,
    log: std::path::PathBuf,
}

impl Agent {
    fn start(dir: &TempDir, stack: &str, drop_caps: bool) -> Agent {
        let open = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = open.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for c in open.incoming() {
                drop(c);
            }
        });
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let cfg = dir.path("agent.toml");
        std::fs::write(
            &cfg,
            format!(
                "listen = \"{addr}\"\n[[target]]\nname = \"open\"\naddress = \"127.0.0.1\"\n\
                 measure = [{{ kind = \"connect\", port = {port}, interval = \"200ms\" }}]\n{stack}"
            ),
        )
        .unwrap();
        let log = dir.path("agent.log");
        let mut cmd = Command::new(BIN);
        cmd.args(["agent", "--config"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if drop_caps {
            // SAFETY: prctl is async-signal-safe; the closure only calls it and reads errno.
            unsafe {
                cmd.pre_exec(|| {
                    // CAP_SYS_ADMIN (21) too: it stands in for the other two.
                    for cap in [39, 38, 21] {
                        if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    Ok(())
                })
            };
        }
        let child = cmd.spawn().unwrap();
        Agent { child, addr, log }
    }

    fn metrics(&self) -> String {
        let Ok(mut s) = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2)) else {
            return String::new();
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        );
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Poll /metrics until `ok` holds (30 s at most); the page that satisfied it.
    fn wait_for(&mut self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let page = self.metrics();
            if ok(&page) {
                return page;
            }
            assert!(
                self.child.try_wait().unwrap().is_none(),
                "the agent exited: {}",
                self.log()
            );
            assert!(
                Instant::now() < deadline,
                "{what} within 30 s; log: {}\n{page}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGTERM; the exit code.
    fn terminate(mut self) -> Option<i32> {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            assert!(Instant::now() < deadline, "no exit 15 s after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of the first sample line starting with `prefix` (name and labels).
fn sample(page: &str, prefix: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// 200 small request/response exchanges over loopback: segments read by a socket reader.
fn loopback_traffic() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut b = [0u8; 64];
        while c.read_exact(&mut b).is_ok() {
            c.write_all(&b).unwrap();
        }
    });
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_nodelay(true).unwrap();
    let mut b = [7u8; 64];
    for _ in 0..200 {
        c.write_all(&b).unwrap();
        c.read_exact(&mut b).unwrap();
    }
    drop(c);
    server.join().unwrap();
}

#[test]
fn stack_histograms_are_scraped_and_detached_and_a_refusal_names_the_capability() {
    require_root!();
    let dir = TempDir::new();
    let before = lsstk_programs().len();
    let stack = "[stack]\nprobes = [\"tcp-socket-read\", \"ip-start\"]\n";
    let mut agent = Agent::start(&dir, stack, false);
    agent.wait_for("the probes attached", |p| {
        sample(p, "latscope_stack_probes{state=\"attached\"}") == Some(2.0)
    });
    assert!(lsstk_programs().len() > before, "no lsstk_ program loaded");
    loopback_traffic();
    let fam = "latscope_stack_tcp_socket_read_seconds";
    let page = agent.wait_for("tcp-socket-read samples", |p| {
        p.lines()
            .any(|l| l.starts_with(&format!("{fam}_count{{")) && !l.ends_with(" 0"))
    });
    assert!(page.contains(&format!("# TYPE {fam} histogram")), "{page}");
    assert!(
        agent.log().contains("[stack]: 2 probes attached"),
        "{}",
        agent.log()
    );
    // The buckets: le = 2^k ns in seconds, cumulative, some finite one counting samples.
    let mut last = 0.0;
    let mut nonzero_finite = false;
    for l in page
        .lines()
        .filter(|l| l.starts_with(&format!("{fam}_bucket{{")))
    {
        let le = l.split("le=\"").nth(1).unwrap().split('"').next().unwrap();
        let v: f64 = l.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(v >= last, "not cumulative: {l}");
        last = v;
        if le != "+Inf" {
            let ns = le.parse::<f64>().unwrap() * 1e9;
            let k = ns.log2().round();
            assert!(
                (ns - 2f64.powf(k)).abs() < 1e-3 * ns,
                "le={le} is not 2^k ns"
            );
            nonzero_finite |= v > 0.0;
        }
        assert!(l.contains("hook=\""), "{l}");
    }
    assert!(
        nonzero_finite,
        "every sample above the last bucket:\n{page}"
    );
    // The agent's own probes carry on beside them.
    assert!(sample(&page, "latscope_probes_total{target=\"open\"").unwrap_or(0.0) > 0.0);
    assert_eq!(agent.terminate(), Some(0));
    let t0 = Instant::now();
    while lsstk_programs().len() > before && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        lsstk_programs().len() <= before,
        "programs left after SIGTERM: {:?}",
        lsstk_programs()
    );

    // Without CAP_BPF/CAP_PERFMON (nor CAP_SYS_ADMIN): one line and a metric name what is
    // missing, and the connect probes go on.
    let mut agent = Agent::start(&dir, "[stack]\n", true);
    let page = agent.wait_for("the refusal exported", |p| {
        p.contains("latscope_stack_unavailable{")
            && sample(p, "latscope_probes_total{target=\"open\"").unwrap_or(0.0) >= 3.0
    });
    assert_eq!(
        sample(
            &page,
            "latscope_stack_unavailable{reason=\"privilege\",missing=\"CAP_BPF,CAP_PERFMON\"}"
        ),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        sample(&page, "latscope_stack_probes{state=\"unavailable\"}"),
        Some(7.0),
        "{page}"
    );
    let log = agent.log();
    assert!(
        log.contains("lacks CAP_BPF,CAP_PERFMON") && log.contains("everything else carries on"),
        "{log}"
    );
    assert!(!page.contains("latscope_stack_tcp_socket_read_seconds_bucket"));
    assert_eq!(agent.terminate(), Some(0));
}
