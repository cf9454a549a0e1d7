//! Helpers for `latscope stack`: two network namespaces joined by a veth pair with traffic
//! generators that run inside them (and, for the transmit path, a qdisc and netfilter rules on
//! A's way out), and a runner for the real binary (killed on drop).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use latscope_core::Log2Histogram;
use latscope_core::model::stack::{Probe, StackReport};

pub use super::BIN;
use super::netns::{self, NetnsPair};

/// Two namespaces A (10.77.0.1) and B (10.77.0.2) joined by a veth pair, deleted on drop.
pub struct Lab {
    pub ns_a: String,
    pub ns_b: String,
    pub ip_a: Ipv4Addr,
    pub ip_b: Ipv4Addr,
    /// B's end of the veth pair.
    pub dev_b: String,
    pair: NetnsPair,
}

impl Lab {
    pub fn new(tag: &str) -> Lab {
        let pair = NetnsPair::new(tag, 77, 1500);
        Lab {
            ns_a: pair.a.clone(),
            ns_b: pair.b.clone(),
            ip_a: pair.addr_a.parse().unwrap(),
            ip_b: pair.addr_b.parse().unwrap(),
            dev_b: pair.dev_b.clone(),
            pair,
        }
    }

    /// B's namespace file, as `--netns` takes it.
    pub fn netns_b(&self) -> String {
        netns::path(&self.ns_b)
    }

    /// A's namespace file.
    pub fn netns_a(&self) -> String {
        netns::path(&self.ns_a)
    }

    /// A's end of the veth pair.
    pub fn dev_a(&self) -> &str {
        &self.pair.dev_a
    }

    /// Run a command in A (must succeed); its stdout.
    pub fn exec_a(&self, cmd: &[&str]) -> String {
        self.pair.exec(&self.ns_a, cmd)
    }

    /// Start `latscope serve` in B on `port` (killed with the lab), and wait until it answers.
    pub fn serve_in_b(&mut self, port: u16) {
        let (ip, p) = (self.ip_b.to_string(), port.to_string());
        self.pair.spawn(
            &self.ns_b.clone(),
            &["serve", "--bind", &ip, "--port", &p, "-q"],
        );
        let addr = SocketAddr::from((self.ip_b, port));
        let t0 = Instant::now();
        while netns::run_in(&self.ns_a, || {
            TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err()
        }) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "latscope serve did not start in B"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `latscope rr` from A to B's `port` (`n` transactions, no warm-up: every packet of the
    /// run is one rr times or stamps, the same kind of send), as JSON.
    pub fn rr_from_a(&self, port: u16, n: usize) -> serde_json::Value {
        let target = format!("{}:{port}", self.ip_b);
        let n = n.to_string();
        let (code, out, err) = self.pair.run(
            &self.ns_a,
            &["rr", &target, "-n", &n, "--warmup", "0s", "--json"],
        );
        assert_eq!(code, 0, "rr: {err}");
        super::json_checked(&out, "rr")
    }

    /// `latscope stack --json --direction tx` for A's packets to B's `port`, plus `extra`.
    pub fn tx_stack_to_port(&self, port: u16, extra: &[&str]) -> Stack {
        let netns = self.netns_a();
        let port = port.to_string();
        let mut args = vec!["--json", "--netns", &netns, "--rport", &port];
        if !extra.contains(&"--probes") {
            args.extend(["--direction", "tx"]);
        }
        args.extend_from_slice(extra);
        Stack::start(&args)
    }

    /// `n` nftables rules that match nothing on A's OUTPUT hook (every packet A sends walks all
    /// of them), loaded with `nft -f` from a file.
    pub fn output_rules_a(&self, n: u32) {
        let table = format!("lstx{}", std::process::id());
        let mut rules = format!(
            "table inet {table} {{\n chain out {{\n  type filter hook output priority 0; policy accept;\n"
        );
        for i in 0..n {
            rules.push_str(&format!(
                "  ip daddr 192.0.2.{} tcp dport {} counter\n",
                i % 250,
                10_000 + i % 1000
            ));
        }
        rules.push_str(" }\n}\n");
        let path = std::env::temp_dir().join(format!("{table}.nft"));
        std::fs::write(&path, rules).unwrap();
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns_a, "nft", "-f"])
            .arg(&path)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(
            out.status.success(),
            "nft -f: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listed = self.exec_a(&["nft", "list", "chain", "inet", &table, "out"]);
        let counted = listed.lines().filter(|l| l.contains("counter")).count();
        assert_eq!(counted, n as usize, "nft lists {counted} rules, not {n}");
    }

    /// UDP datagrams of `size` bytes A → B's `port`, back to back for `how_long` (nobody needs to
    /// read them). The socket's send buffer is `sndbuf` bytes: a sender whose datagrams wait in a
    /// slow qdisc blocks once they fill it and is woken as each leaves, so the queue stays as
    /// full as the buffer allows, whatever the scheduler does. Returns how many were sent.
    pub fn udp_flood(&self, port: u16, size: usize, sndbuf: i32, how_long: Duration) -> usize {
        let addr = SocketAddr::from((self.ip_b, port));
        netns::spawn_in(&self.ns_a, move || {
            let c = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
            // SAFETY: setsockopt on a valid descriptor with a correctly sized int.
            let rc = unsafe {
                libc::setsockopt(
                    c.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_SNDBUF,
                    (&sndbuf as *const i32).cast(),
                    std::mem::size_of::<i32>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0, "SO_SNDBUF");
            c.connect(addr).unwrap();
            let msg = vec![3u8; size];
            let t0 = Instant::now();
            let mut sent = 0;
            while t0.elapsed() < how_long {
                if c.send(&msg).is_ok() {
                    sent += 1;
                }
            }
            sent
        })
        .join()
        .unwrap()
    }

    /// The backlog of A's root qdisc on its veth, bytes, as `tc -s` reports it.
    pub fn qdisc_backlog_a(&self) -> u64 {
        let out = self.exec_a(&["tc", "-s", "-j", "qdisc", "show", "dev", &self.pair.dev_a]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .find(|q| q["root"] == true)
            .and_then(|q| q["backlog"].as_u64())
            .unwrap_or_else(|| panic!("no root qdisc backlog in {out}"))
    }

    /// A TCP listener and a UDP socket on the same port in B.
    pub fn servers(&self) -> (TcpListener, UdpSocket, u16) {
        let ip = self.ip_b;
        netns::run_in(&self.ns_b, move || {
            let l = TcpListener::bind((ip, 0)).unwrap();
            let port = l.local_addr().unwrap().port();
            let u = UdpSocket::bind((ip, port)).unwrap();
            (l, u, port)
        })
    }

    /// `latscope stack --json` filtered to B's namespace and local `port`, plus `extra`.
    pub fn stack_on_port(&self, port: u16, extra: &[&str]) -> Stack {
        let netns = self.netns_b();
        let port = port.to_string();
        let mut args = vec!["--json", "--netns", &netns, "--lport", &port];
        args.extend_from_slice(extra);
        Stack::start(&args)
    }

    /// `n` request/response transactions A → B of `size` bytes; the server (in B) sleeps `think`
    /// before each read (the "too few workers" case).
    pub fn tcp_transactions(&self, listener: &TcpListener, n: usize, size: usize, think: Duration) {
        let addr = SocketAddr::from((self.ip_b, listener.local_addr().unwrap().port()));
        let listener = listener.try_clone().unwrap();
        let server = netns::spawn_in(&self.ns_b, move || {
            let (mut conn, _) = listener.accept().unwrap();
            conn.set_nodelay(true).unwrap();
            let mut buf = vec![0u8; size];
            for _ in 0..n {
                if !think.is_zero() {
                    std::thread::sleep(think);
                }
                conn.read_exact(&mut buf).unwrap();
                conn.write_all(b"k").unwrap();
            }
        });
        let client = netns::spawn_in(&self.ns_a, move || {
            let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
            c.set_nodelay(true).unwrap();
            let msg = vec![7u8; size];
            let mut r = [0u8; 1];
            for _ in 0..n {
                c.write_all(&msg).unwrap();
                c.read_exact(&mut r).unwrap();
            }
        });
        client.join().unwrap();
        server.join().unwrap();
    }

    /// Send `n` datagrams of `size` bytes A → B back to back while B does not read; B reads them
    /// all once `hold` has passed since the last was sent. Returns how many B read (the receive
    /// buffer is raised so that none should be dropped).
    pub fn udp_burst(&self, server: &UdpSocket, n: usize, size: usize, hold: Duration) -> usize {
        let addr = SocketAddr::from((self.ip_b, server.local_addr().unwrap().port()));
        let server = server.try_clone().unwrap();
        let big = 8 << 20;
        // SAFETY: setsockopt on a valid descriptor with a correctly sized int.
        let rc = unsafe {
            libc::setsockopt(
                server.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&big as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "SO_RCVBUFFORCE");
        let (sent_tx, sent_rx) = std::sync::mpsc::channel::<()>();
        let reader = netns::spawn_in(&self.ns_b, move || {
            sent_rx.recv().unwrap();
            std::thread::sleep(hold);
            server.set_nonblocking(true).unwrap();
            let mut buf = vec![0u8; 65536];
            let mut got = 0;
            while server.recv(&mut buf).is_ok() {
                got += 1;
            }
            got
        });
        let sender = netns::spawn_in(&self.ns_a, move || {
            let c = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
            for _ in 0..n {
                c.send_to(&vec![1u8; size], addr).unwrap();
            }
            // Let the last datagrams cross the veth before the hold starts.
            std::thread::sleep(Duration::from_millis(20));
            sent_tx.send(()).unwrap();
        });
        sender.join().unwrap();
        reader.join().unwrap()
    }

    /// Send `n` datagrams of `size` bytes A → B, each read in B before the next is sent.
    /// Returns how many were read.
    pub fn udp_datagrams(&self, server: &UdpSocket, n: usize, size: usize) -> usize {
        let addr = SocketAddr::from((self.ip_b, server.local_addr().unwrap().port()));
        let server = server.try_clone().unwrap();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (ack_tx, ack_rx) = std::sync::mpsc::channel::<bool>();
        let reader = netns::spawn_in(&self.ns_b, move || {
            server
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            let mut buf = vec![0u8; 65536];
            while go_rx.recv().is_ok() {
                let _ = ack_tx.send(server.recv(&mut buf).is_ok());
            }
        });
        let sender = netns::spawn_in(&self.ns_a, move || {
            let c = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
            let mut got = 0;
            for _ in 0..n {
                c.send_to(&vec![1u8; size], addr).unwrap();
                go_tx.send(()).unwrap();
                if ack_rx.recv().unwrap() {
                    got += 1;
                }
            }
            got
        });
        let got = sender.join().unwrap();
        reader.join().unwrap();
        got
    }
}

/// A running `latscope stack`.
pub struct Stack {
    pub child: Child,
    stderr: Arc<Mutex<String>>,
    stdout: Option<std::thread::JoinHandle<String>>,
}

impl Stack {
    /// Start and wait until it says its probes are attached.
    pub fn start(args: &[&str]) -> Stack {
        let mut child = Command::new(BIN)
            .arg("stack")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let err_pipe = child.stderr.take().unwrap();
        let e = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err_pipe).lines().map_while(Result::ok) {
                if line.contains("attached") {
                    let _ = tx.send(());
                }
                e.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let mut out_pipe = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out_pipe.read_to_string(&mut s);
            s
        });
        let t0 = Instant::now();
        loop {
            if rx.recv_timeout(Duration::from_millis(100)).is_ok() {
                break;
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!(
                    "latscope stack exited early ({st}): {}",
                    stderr.lock().unwrap()
                );
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "latscope stack did not attach: {}",
                stderr.lock().unwrap()
            );
        }
        // net_enable_timestamp() flips a static key from a workqueue: give it a moment.
        std::thread::sleep(Duration::from_millis(200));
        Stack {
            child,
            stderr,
            stdout: Some(stdout),
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The /metrics address it announced.
    pub fn metrics_addr(&self) -> SocketAddr {
        let err = self.stderr();
        let i = err.find("http://").expect("no metrics address announced");
        let rest = &err[i + 7..];
        rest[..rest.find("/metrics").unwrap()].parse().unwrap()
    }

    /// Ctrl-C, then wait: (exit code, stdout).
    pub fn interrupt(mut self) -> (i32, String) {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        self.wait()
    }

    pub fn wait(&mut self) -> (i32, String) {
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if t0.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                panic!("latscope stack did not stop: {}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = self.stdout.take().unwrap().join().unwrap();
        (status.code().unwrap_or(-1), out)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parse `--json` output.
pub fn report(stdout: &str) -> StackReport {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {stdout}"))
}

/// One probe's histogram summed over groups.
pub fn hist(r: &StackReport, p: Probe) -> Log2Histogram {
    let mut h = Log2Histogram::new();
    for x in r.histograms.iter().filter(|x| x.probe == p) {
        h.merge(&x.hist);
    }
    h
}

/// Names of loaded BPF programs that belong to latscope stack.
pub fn lsstk_programs() -> Vec<String> {
    let out = Command::new("bpftool")
        .args(["prog", "list"])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .skip_while(|w| *w != "name")
                .nth(1)
                .map(str::to_string)
        })
        .filter(|n| n.starts_with("lsstk_"))
        .collect()
}

/// `lsstk_programs()` once the kernel has finished freeing: programs are released after an RCU
/// grace period once their last file descriptor is closed, so poll for up to 5 s.
pub fn lsstk_programs_settled() -> Vec<String> {
    let t0 = Instant::now();
    loop {
        let p = lsstk_programs();
        if p.is_empty() || t0.elapsed() > Duration::from_secs(5) {
            return p;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
