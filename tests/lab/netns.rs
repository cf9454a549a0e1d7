//! Network namespaces built by the test and removed on drop: [`Netns`] (one namespace),
//! [`link`] (a veth pair between two), [`NetnsPair`] (two namespaces joined directly or through
//! a router). Deleting a namespace removes its interfaces, and with them the veth pairs.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use super::delay::{Delay, TunLink};
use super::{BIN, sh, unique};

/// A named network namespace with `lo` up, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// `ls<tag><pid>x<n>` (see [`super::unique`]); panics when not root.
    pub fn new(tag: &str) -> Netns {
        let name = unique(tag);
        let st = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .expect("ip (iproute2) is installed by setup.sh");
        assert!(st.success(), "ip netns add {name} failed (needs root)");
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// Let the namespace answer every ICMP error and use IPv6 addresses at once (no duplicate
    /// address detection): what traceroute and ping tests need to count every probe.
    pub fn no_icmp_limits(self) -> Netns {
        for kv in [
            "net.ipv4.icmp_ratelimit=0",
            "net.ipv6.icmp.ratelimit=0",
            "net.ipv4.icmp_msgs_per_sec=100000",
            "net.ipv6.conf.all.accept_dad=0",
            "net.ipv6.conf.default.accept_dad=0",
        ] {
            self.sysctl(kv);
        }
        self
    }

    /// Set the MTU of `lo` (captures on loopback then see Ethernet-sized segments).
    pub fn with_lo_mtu(self, mtu: u32) -> Netns {
        self.ip(&["link", "set", "lo", "mtu", &mtu.to_string(), "up"]);
        self
    }

    /// The namespace's file, as `--netns` takes it.
    pub fn path(&self) -> String {
        path(&self.name)
    }

    /// `ip -n NAME ARGS...` (must succeed).
    pub fn ip(&self, args: &[&str]) -> Output {
        let mut v = vec!["ip", "-n", &self.name];
        v.extend_from_slice(args);
        sh(&v)
    }

    /// `sysctl -qw KEY=VALUE` inside the namespace.
    pub fn sysctl(&self, kv: &str) {
        self.exec(&["sysctl", "-qw", kv]);
    }

    /// `ip netns exec NAME ARGS...` (must succeed).
    pub fn exec(&self, args: &[&str]) -> Output {
        let mut v = vec!["ip", "netns", "exec", &self.name];
        v.extend_from_slice(args);
        sh(&v)
    }

    /// `ip netns exec NAME ARGS...`, whatever its exit status.
    pub fn try_exec(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// Run latscope inside the namespace.
    pub fn latscope(&self, args: &[&str]) -> Output {
        let mut v = vec![BIN];
        v.extend_from_slice(args);
        self.try_exec(&v)
    }

    /// Load an nftables ruleset inside the namespace (its tables go with it).
    pub fn nft(&self, ruleset: &str) {
        use std::io::Write;
        let mut c = Command::new("ip")
            .args(["netns", "exec", &self.name, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin
            .take()
            .unwrap()
            .write_all(ruleset.as_bytes())
            .unwrap();
        assert!(c.wait().unwrap().success(), "nft rejected the ruleset");
    }

    /// Wait until `addr` is routable from this namespace: IPv6 addresses and their routes are
    /// completed from a kernel workqueue, later than `ip addr add` returns on a busy machine.
    pub fn wait_route(&self, addr: &str) {
        for _ in 0..200 {
            if self
                .try_exec(&["ip", "route", "get", addr])
                .status
                .success()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{addr} never became routable in {}", self.name);
    }

    /// Run `f` on a thread that lives in this namespace (sockets it makes belong here).
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        spawn_in(&self.name, f)
    }

    /// Run `f` in this namespace and wait for its result.
    pub fn run_in<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        run_in(&self.name, f)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// The file of namespace `name`.
pub fn path(name: &str) -> String {
    format!("/run/netns/{name}")
}

/// Move the calling thread into namespace `name` (setns only moves the calling thread).
fn enter(name: &str) {
    let p = path(name);
    let fd = File::open(&p).unwrap_or_else(|e| panic!("open {p}: {e}"));
    // SAFETY: fd is an open namespace file; setns affects only this thread.
    let rc = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {p}: {}", std::io::Error::last_os_error());
}

/// Run `f` on a new thread inside namespace `name`.
pub fn spawn_in<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    let name = name.to_string();
    std::thread::spawn(move || {
        enter(&name);
        f()
    })
}

/// Run `f` on a scoped thread inside namespace `name` and return its result.
pub fn run_in<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(move || {
            enter(name);
            f()
        })
        .join()
        .unwrap()
    })
}

/// A veth pair `a_if` (in `a`) — `b_if` (in `b`), both up. The pair is made inside the
/// namespaces, so nothing is left in the host's when a namespace goes.
pub fn link(a: &Netns, a_if: &str, b: &Netns, b_if: &str) {
    a.ip(&[
        "link", "add", a_if, "type", "veth", "peer", "name", b_if, "netns", &b.name,
    ]);
    a.ip(&["link", "set", a_if, "up"]);
    b.ip(&["link", "set", b_if, "up"]);
}

/// Two namespaces `a` (10.<net>.0.1) and `b` (10.<net>.0.2) joined by a veth pair, or with
/// [`NetnsPair::routed`] a router between them, or with [`NetnsPair::with_rtt`] a path of any
/// round trip; processes started in them are killed and the namespaces deleted on drop.
pub struct NetnsPair {
    pub a: String,
    pub b: String,
    pub addr_a: String,
    pub addr_b: String,
    /// The veth ends in `a` and `b`.
    pub dev_a: String,
    pub dev_b: String,
    /// With a router: its namespace and its interface towards `b` (the place to shape).
    pub router: Option<(String, String)>,
    /// With a router: its interface towards `a` (the place to shape the way to the client).
    pub router_to_a: Option<String>,
    /// The IPv6 addresses of `a` and `b` (pairs made by [`NetnsPair::with_rtt`]).
    pub addr6_a: Option<String>,
    pub addr6_b: Option<String>,
    /// The round trip the path adds ([`NetnsPair::with_rtt`]; zero otherwise).
    pub rtt: Duration,
    /// The far path's edges: (namespace, interface) of the router facing `a` and facing `b`.
    edges: Option<[(String, String); 2]>,
    children: Vec<Child>,
    /// The far path's delay line; stopped before the namespaces go.
    delay: Option<TunLink>,
    /// Dropped after `children` are killed (fields drop after `Drop::drop`).
    namespaces: Vec<Netns>,
}

impl NetnsPair {
    pub fn new(tag: &str, net: u8, mtu: u32) -> NetnsPair {
        let (a, b) = (Netns::new(tag), Netns::new(tag));
        let (dev_a, dev_b) = (unique("va"), unique("vb"));
        link(&a, &dev_a, &b, &dev_b);
        let (addr_a, addr_b) = (format!("10.{net}.0.1"), format!("10.{net}.0.2"));
        let mtu = mtu.to_string();
        for (ns, dev, addr) in [(&a, &dev_a, &addr_a), (&b, &dev_b, &addr_b)] {
            ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", dev]);
            ns.ip(&["link", "set", dev, "up", "mtu", &mtu]);
        }
        NetnsPair {
            a: a.name.clone(),
            b: b.name.clone(),
            addr_a,
            addr_b,
            dev_a,
            dev_b,
            router: None,
            router_to_a: None,
            addr6_a: None,
            addr6_b: None,
            rtt: Duration::ZERO,
            edges: None,
            children: vec![],
            delay: None,
            namespaces: vec![a, b],
        }
    }

    /// a (10.<net>.1.1) — router (10.<net>.1.2 | 10.<net>.2.1) — b (10.<net>.2.2).
    pub fn routed(tag: &str, net: u8, mtu: u32) -> NetnsPair {
        let (a, r, b) = (Netns::new(tag), Netns::new(tag), Netns::new(tag));
        let (va, ra, rb, vb) = (unique("va"), unique("ra"), unique("rb"), unique("vb"));
        link(&a, &va, &r, &ra);
        link(&r, &rb, &b, &vb);
        let mtu = mtu.to_string();
        for (dev, ns, addr) in [
            (&va, &a, format!("10.{net}.1.1/24")),
            (&ra, &r, format!("10.{net}.1.2/24")),
            (&rb, &r, format!("10.{net}.2.1/24")),
            (&vb, &b, format!("10.{net}.2.2/24")),
        ] {
            ns.ip(&["addr", "add", &addr, "dev", dev]);
            ns.ip(&["link", "set", dev, "up", "mtu", &mtu]);
        }
        a.ip(&["route", "add", "default", "via", &format!("10.{net}.1.2")]);
        b.ip(&["route", "add", "default", "via", &format!("10.{net}.2.1")]);
        r.sysctl("net.ipv4.ip_forward=1");
        NetnsPair {
            a: a.name.clone(),
            b: b.name.clone(),
            addr_a: format!("10.{net}.1.1"),
            addr_b: format!("10.{net}.2.2"),
            dev_a: va,
            dev_b: vb,
            router: Some((r.name.clone(), rb.clone())),
            router_to_a: Some(ra.clone()),
            addr6_a: None,
            addr6_b: None,
            rtt: Duration::ZERO,
            edges: Some([(r.name.clone(), ra), (r.name.clone(), rb)]),
            children: vec![],
            delay: None,
            namespaces: vec![a, r, b],
        }
    }

    /// `a` and `b` with a path of round trip `rtt` between them, over IPv4 and IPv6, MTU `mtu`
    /// end to end, the delay half each way:
    ///
    /// - `rtt` zero: the lab's near world, a veth pair as [`NetnsPair::new`] makes (10.<net>.0.1
    ///   — 10.<net>.0.2) with fd<net>::1 — fd<net>::2 (`net` in hex);
    /// - otherwise a — veth — ra ≈ rb — veth — b: two routers joined by a [`TunLink`] whose
    ///   forwarder holds each packet rtt/2 each way (a: 10.<net>.1.1, fd<net>:1::1; b:
    ///   10.<net>.2.2, fd<net>:2::2; the delay line 10.<net>.3.0/24, fd<net>:3::/64). The ends
    ///   keep veth interfaces (Ethernet, offloads) as on a real host; [`NetnsPair::edge_to_a`]
    ///   and [`NetnsPair::edge_to_b`] name the routers' interfaces facing them (the places to
    ///   shape a path's rate or drop on it).
    pub fn with_rtt(tag: &str, net: u8, mtu: u32, rtt: Duration) -> NetnsPair {
        if !rtt.is_zero() {
            return NetnsPair::far(tag, net, mtu, Delay::rtt(rtt));
        }
        let mut p = NetnsPair::new(tag, net, mtu);
        let (v6a, v6b) = (format!("fd{net:02x}::1"), format!("fd{net:02x}::2"));
        for (ns, dev, addr) in [(&p.a, &p.dev_a, &v6a), (&p.b, &p.dev_b, &v6b)] {
            sh(&[
                "ip",
                "-n",
                ns,
                "-6",
                "addr",
                "add",
                &format!("{addr}/64"),
                "dev",
                dev,
                "nodad",
            ]);
        }
        p.namespaces[0].wait_route(&v6b);
        (p.addr6_a, p.addr6_b) = (Some(v6a), Some(v6b));
        p
    }

    /// a — veth — ra ≈ rb — veth — b with `delay` on the line between the routers (zero: the
    /// same routers and forwarder, no hold), addressed as [`NetnsPair::with_rtt`] says.
    pub fn far(tag: &str, net: u8, mtu: u32, delay: Delay) -> NetnsPair {
        let (a, ra, rb, b) = (
            Netns::new(tag),
            Netns::new(tag),
            Netns::new(tag),
            Netns::new(tag),
        );
        let (va, ra_a, rb_b, vb) = (unique("va"), unique("ra"), unique("rb"), unique("vb"));
        link(&a, &va, &ra, &ra_a);
        link(&rb, &rb_b, &b, &vb);
        let line = TunLink::new(&ra, &rb, "far", mtu, delay);
        let mtu_s = mtu.to_string();
        let v6 = |sub: u8, host: u8| format!("fd{net:02x}:{sub}::{host}");
        for (ns, dev, sub, host) in [
            (&a, &va, 1, 1),
            (&ra, &ra_a, 1, 2),
            (&rb, &rb_b, 2, 1),
            (&b, &vb, 2, 2),
        ] {
            ns.ip(&[
                "addr",
                "add",
                &format!("10.{net}.{sub}.{host}/24"),
                "dev",
                dev,
            ]);
            ns.ip(&[
                "-6",
                "addr",
                "add",
                &format!("{}/64", v6(sub, host)),
                "dev",
                dev,
                "nodad",
            ]);
            ns.ip(&["link", "set", dev, "up", "mtu", &mtu_s]);
        }
        for (ns, me, peer, far_side) in [(&ra, 1, 2, 2), (&rb, 2, 1, 1)] {
            ns.ip(&[
                "addr",
                "add",
                &format!("10.{net}.3.{me}"),
                "peer",
                &format!("10.{net}.3.{peer}"),
                "dev",
                "far",
            ]);
            ns.ip(&[
                "-6",
                "addr",
                "add",
                &v6(3, me),
                "peer",
                &v6(3, peer),
                "dev",
                "far",
                "nodad",
            ]);
            ns.ip(&[
                "route",
                "add",
                &format!("10.{net}.{far_side}.0/24"),
                "dev",
                "far",
            ]);
            ns.ip(&[
                "-6",
                "route",
                "add",
                &format!("fd{net:02x}:{far_side}::/64"),
                "dev",
                "far",
            ]);
            ns.sysctl("net.ipv4.ip_forward=1");
            ns.sysctl("net.ipv6.conf.all.forwarding=1");
        }
        for (ns, gw) in [(&a, 1), (&b, 2)] {
            ns.ip(&[
                "route",
                "add",
                "default",
                "via",
                &format!("10.{net}.{gw}.{}", 3 - gw),
            ]);
            ns.ip(&["-6", "route", "add", "default", "via", &v6(gw, 3 - gw)]);
        }
        a.wait_route(&v6(2, 2));
        b.wait_route(&v6(1, 1));
        NetnsPair {
            a: a.name.clone(),
            b: b.name.clone(),
            addr_a: format!("10.{net}.1.1"),
            addr_b: format!("10.{net}.2.2"),
            dev_a: va,
            dev_b: vb,
            router: Some((rb.name.clone(), rb_b.clone())),
            router_to_a: None,
            addr6_a: Some(v6(1, 1)),
            addr6_b: Some(v6(2, 2)),
            rtt: delay.total(),
            edges: Some([(ra.name.clone(), ra_a), (rb.name.clone(), rb_b)]),
            children: vec![],
            delay: Some(line),
            namespaces: vec![a, ra, rb, b],
        }
    }

    /// The router's namespace and interface facing `a` (routed and far pairs).
    pub fn edge_to_a(&self) -> Option<(String, String)> {
        self.edges.as_ref().map(|e| e[0].clone())
    }

    /// The router's namespace and interface facing `b` (routed and far pairs).
    pub fn edge_to_b(&self) -> Option<(String, String)> {
        self.edges.as_ref().map(|e| e[1].clone())
    }

    /// The far path's delay line ([`NetnsPair::with_rtt`] with a round trip).
    pub fn delay_line(&self) -> Option<&TunLink> {
        self.delay.as_ref()
    }

    /// The namespaces of the pair, a and b first, then any routers.
    pub fn namespace_names(&self) -> Vec<String> {
        let mut v = vec![self.a.clone(), self.b.clone()];
        v.extend(
            self.namespaces
                .iter()
                .map(|n| n.name.clone())
                .filter(|n| *n != self.a && *n != self.b),
        );
        v
    }

    /// Run any command in namespace `ns`; panics if it fails.
    pub fn exec(&self, ns: &str, cmd: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(cmd)
            .output()
            .expect("ip netns exec");
        assert!(
            out.status.success(),
            "{cmd:?} in {ns}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Start any program in namespace `ns` in the background; killed on drop.
    pub fn spawn_cmd(&mut self, ns: &str, cmd: &[&str]) {
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(cmd)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ip netns exec");
        self.children.push(child);
    }

    /// Start `latscope ARGS` in namespace `ns` in the background; killed on drop.
    pub fn spawn(&mut self, ns: &str, args: &[&str]) {
        let mut cmd = vec![BIN];
        cmd.extend_from_slice(args);
        self.spawn_cmd(ns, &cmd);
    }

    /// Run `latscope ARGS` in namespace `ns`; (exit code, stdout, stderr).
    pub fn run(&self, ns: &str, args: &[&str]) -> (i32, String, String) {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, BIN])
            .args(args)
            .output()
            .expect("run");
        super::split(&out)
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
