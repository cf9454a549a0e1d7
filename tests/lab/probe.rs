//! Test networks for `latscope ping` / `latscope trace`, built from network namespaces the test
//! creates (names include the pid and a counter) and removes on Drop, even on failure:
//! - [`Chain`]: client — R1 — R2 — R3 — destination, veth links, IPv4 and IPv6 forwarding;
//! - [`DelayLine`]: two namespaces joined directly by the lab's delay line (`delay.rs`), holding
//!   every client→server packet (or server→client, or both) for a fixed delay;
//! - servers running inside a namespace on a thread that `setns`-ed into it.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

pub use super::delay::{Delay, TunLink};
pub use super::netns::{Netns, link};
pub use super::{BIN, unique};

/// client — R1 — R2 — R3 — destination. Subnet s (1..=4) joins node s-1 (`.1`, `::1`) and node
/// s (`.2`, `::2`): 10.9.s.0/24 and fd09:s::/64. Routers answer from their left address.
pub struct Chain {
    /// nodes[0] client, [1..=3] routers, [4] destination.
    pub nodes: Vec<Netns>,
}

impl Chain {
    pub fn new() -> Chain {
        let tags = ["c", "r1", "r2", "r3", "d"];
        let nodes: Vec<Netns> = tags
            .iter()
            .map(|t| Netns::new(t).no_icmp_limits())
            .collect();
        for s in 1..=4usize {
            let (l, r) = (&nodes[s - 1], &nodes[s]);
            link(l, "right", r, "left");
            l.ip(&["addr", "add", &format!("10.9.{s}.1/24"), "dev", "right"]);
            r.ip(&["addr", "add", &format!("10.9.{s}.2/24"), "dev", "left"]);
            l.ip(&[
                "-6",
                "addr",
                "add",
                &format!("fd09:{s}::1/64"),
                "dev",
                "right",
                "nodad",
            ]);
            r.ip(&[
                "-6",
                "addr",
                "add",
                &format!("fd09:{s}::2/64"),
                "dev",
                "left",
                "nodad",
            ]);
        }
        for (n, ns) in nodes.iter().enumerate() {
            if (1..=3).contains(&n) {
                ns.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
                ns.exec(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
            }
            for s in 1..=4usize {
                if s == n || s == n + 1 {
                    continue; // connected
                }
                let (via4, via6) = if s < n {
                    (format!("10.9.{n}.1"), format!("fd09:{n}::1"))
                } else {
                    (format!("10.9.{}.2", n + 1), format!("fd09:{}::2", n + 1))
                };
                ns.ip(&["route", "add", &format!("10.9.{s}.0/24"), "via", &via4]);
                ns.ip(&[
                    "-6",
                    "route",
                    "add",
                    &format!("fd09:{s}::/64"),
                    "via",
                    &via6,
                ]);
            }
        }
        // Every node must reach both ends before a test starts (IPv6 routes settle late).
        for ns in &nodes {
            ns.wait_route("fd09:1::1");
            ns.wait_route("fd09:4::2");
        }
        Chain { nodes }
    }

    pub fn client(&self) -> &Netns {
        &self.nodes[0]
    }

    pub fn dest(&self) -> &Netns {
        &self.nodes[4]
    }

    /// The addresses routers 1..=3 answer from, then the destination's.
    pub fn hops_v4() -> Vec<String> {
        vec![
            "10.9.1.2".into(),
            "10.9.2.2".into(),
            "10.9.3.2".into(),
            "10.9.4.2".into(),
        ]
    }

    pub fn hops_v6() -> Vec<String> {
        vec![
            "fd09:1::2".into(),
            "fd09:2::2".into(),
            "fd09:3::2".into(),
            "fd09:4::2".into(),
        ]
    }
}

/// A thread serving until dropped.
pub struct Server {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Run `serve` on a thread in `ns` (None: this namespace) until the [`Server`] is dropped:
/// `serve` sends its port once it is bound, then serves until the flag is set.
fn spawn_server<F>(ns: Option<&Netns>, serve: F) -> Server
where
    F: FnOnce(mpsc::Sender<u16>, Arc<AtomicBool>) + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let st = stop.clone();
    let body = move || serve(tx, st);
    let handle = match ns {
        Some(ns) => ns.spawn(body),
        None => std::thread::spawn(body),
    };
    let port = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("server started");
    Server {
        stop,
        handle: Some(handle),
        port,
    }
}

/// A TCP listener on `addr` (port 0: any) in `ns` (None: this namespace) that accepts and
/// closes connections.
pub fn tcp_server(ns: Option<&Netns>, addr: &str) -> Server {
    let addr: SocketAddr = addr.parse().expect("addr");
    spawn_server(ns, move |tx, stop| {
        let l = TcpListener::bind(addr).expect("bind tcp");
        l.set_nonblocking(true).expect("nonblocking");
        tx.send(l.local_addr().expect("addr").port())
            .expect("send port");
        while !stop.load(Ordering::SeqCst) {
            match l.accept() {
                Ok((s, _)) => drop(s),
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    })
}

/// A UDP echo implementing latscope serve's spec: `LSP1` 0x01 → same bytes with byte 4 = 0x02.
pub fn udp_echo(ns: Option<&Netns>, addr: &str) -> Server {
    let addr: SocketAddr = addr.parse().expect("addr");
    spawn_server(ns, move |tx, stop| {
        let s = UdpSocket::bind(addr).expect("bind udp");
        s.set_read_timeout(Some(Duration::from_millis(20)))
            .expect("timeout");
        tx.send(s.local_addr().expect("addr").port())
            .expect("send port");
        let mut buf = vec![0u8; 65536];
        while !stop.load(Ordering::SeqCst) {
            if let Ok((n, from)) = s.recv_from(&mut buf)
                && n >= 5
                && &buf[..4] == b"LSP1"
                && buf[4] == 1
            {
                buf[4] = 2;
                let _ = s.send_to(&buf[..n], from);
            }
        }
    })
}

/// A point-to-point link between namespaces `client` (10.8.0.1, fd08::1) and `server` (10.8.0.2,
/// fd08::2): the lab's delay line ([`TunLink`]) with the two ends on it. [`DelayLine::new`]
/// holds packets from client to server for `delay` and forwards the way back directly;
/// [`DelayLine::asymmetric`] sets each direction's delay and the devices' MTU.
pub struct DelayLine {
    /// The forwarder (dropped first: fields drop in order, the namespaces after it).
    pub link: TunLink,
    pub client: Netns,
    pub server: Netns,
    /// The client→server delay.
    pub delay: Duration,
    /// The server→client delay.
    pub delay_back: Duration,
}

impl DelayLine {
    /// Client→server packets held `delay`, the way back direct, MTU 1500.
    pub fn new(delay: Duration) -> DelayLine {
        DelayLine::asymmetric(delay, Duration::ZERO, 1500)
    }

    /// Client→server packets held `delay`, server→client packets held `delay_back`, both TUN
    /// devices at `mtu`.
    pub fn asymmetric(delay: Duration, delay_back: Duration, mtu: u32) -> DelayLine {
        let client = Netns::new("a").no_icmp_limits();
        let server = Netns::new("b").no_icmp_limits();
        let link = TunLink::new(
            &client,
            &server,
            "dl0",
            mtu,
            Delay {
                to_b: delay,
                to_a: delay_back,
            },
        );
        client.ip(&["addr", "add", "10.8.0.1", "peer", "10.8.0.2", "dev", "dl0"]);
        server.ip(&["addr", "add", "10.8.0.2", "peer", "10.8.0.1", "dev", "dl0"]);
        client.ip(&[
            "-6", "addr", "add", "fd08::1", "peer", "fd08::2", "dev", "dl0", "nodad",
        ]);
        server.ip(&[
            "-6", "addr", "add", "fd08::2", "peer", "fd08::1", "dev", "dl0", "nodad",
        ]);
        client.wait_route("fd08::2");
        server.wait_route("fd08::1");
        DelayLine {
            link,
            client,
            server,
            delay,
            delay_back,
        }
    }

    /// The median time packets of the delayed directions were actually held since the last
    /// call (the forwarder can be late on a busy machine: that lateness is part of the delay
    /// the probes saw), and how many packets.
    pub fn take_held_median(&self) -> (Duration, usize) {
        let [to_server, to_client] = self.link.take_held();
        let mut h = Vec::new();
        for (held, delay) in [(to_server, self.delay), (to_client, self.delay_back)] {
            if !delay.is_zero() {
                h.extend(held);
            }
        }
        h.sort();
        let n = h.len();
        (h.get(n / 2).copied().unwrap_or(self.delay), n)
    }
}

/// Parse latscope's `--json` output.
pub fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): stdout={} stderr={}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The JSON document of a run that must have exited with 0; `case` names the run in a failure.
pub fn ok_json(out: &Output, case: &str) -> serde_json::Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{case}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    json(out)
}

/// The median of a list of values.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    assert!(n > 0, "median of nothing");
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
