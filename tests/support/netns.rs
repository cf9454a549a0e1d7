//! Two network namespaces joined by a veth pair, built by the test and removed on drop.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command, Stdio};

fn ip(args: &[&str]) {
    let st = Command::new("ip")
        .args(args)
        .status()
        .expect("ip (iproute2) is installed by setup.sh");
    assert!(
        st.success(),
        "ip {args:?} failed (the namespace tests need root)"
    );
}

/// Namespaces `<tag>a<pid>` (10.<net>.0.1) and `<tag>b<pid>` (10.<net>.0.2), or with
/// [`NetnsPair::routed`] a router `<tag>r<pid>` between them.
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
    children: Vec<Child>,
}

impl NetnsPair {
    pub fn new(tag: &str, net: u8, mtu: u32) -> NetnsPair {
        let pid = std::process::id() % 100_000;
        let a = format!("{tag}a{pid}");
        let b = format!("{tag}b{pid}");
        let (va, vb) = (format!("{tag}va{pid}"), format!("{tag}vb{pid}"));
        let pair = NetnsPair {
            a: a.clone(),
            b: b.clone(),
            addr_a: format!("10.{net}.0.1"),
            addr_b: format!("10.{net}.0.2"),
            dev_a: va.clone(),
            dev_b: vb.clone(),
            router: None,
            children: vec![],
        };
        ip(&["netns", "add", &a]);
        ip(&["netns", "add", &b]);
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        ip(&["link", "set", &va, "netns", &a]);
        ip(&["link", "set", &vb, "netns", &b]);
        let mtu = mtu.to_string();
        for (ns, dev, addr) in [(&a, &va, &pair.addr_a), (&b, &vb, &pair.addr_b)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up", "mtu", &mtu]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        pair
    }

    /// a (10.<net>.1.1) — router (10.<net>.1.2 | 10.<net>.2.1) — b (10.<net>.2.2).
    pub fn routed(tag: &str, net: u8, mtu: u32) -> NetnsPair {
        let pid = std::process::id() % 100_000;
        let (a, r, b) = (
            format!("{tag}a{pid}"),
            format!("{tag}r{pid}"),
            format!("{tag}b{pid}"),
        );
        let (va, ra, rb, vb) = (
            format!("{tag}va{pid}"),
            format!("{tag}ra{pid}"),
            format!("{tag}rb{pid}"),
            format!("{tag}vb{pid}"),
        );
        let pair = NetnsPair {
            a: a.clone(),
            b: b.clone(),
            addr_a: format!("10.{net}.1.1"),
            addr_b: format!("10.{net}.2.2"),
            dev_a: va.clone(),
            dev_b: vb.clone(),
            router: Some((r.clone(), rb.clone())),
            children: vec![],
        };
        for ns in [&a, &r, &b] {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &ra]);
        ip(&["link", "add", &rb, "type", "veth", "peer", "name", &vb]);
        let mtu = mtu.to_string();
        for (dev, ns, addr) in [
            (&va, &a, format!("10.{net}.1.1/24")),
            (&ra, &r, format!("10.{net}.1.2/24")),
            (&rb, &r, format!("10.{net}.2.1/24")),
            (&vb, &b, format!("10.{net}.2.2/24")),
        ] {
            ip(&["link", "set", dev, "netns", ns]);
            ip(&["-n", ns, "addr", "add", &addr, "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up", "mtu", &mtu]);
        }
        ip(&[
            "-n",
            &a,
            "route",
            "add",
            "default",
            "via",
            &format!("10.{net}.1.2"),
        ]);
        ip(&[
            "-n",
            &b,
            "route",
            "add",
            "default",
            "via",
            &format!("10.{net}.2.1"),
        ]);
        let st = Command::new("ip")
            .args([
                "netns",
                "exec",
                &r,
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
            ])
            .status()
            .expect("sysctl");
        assert!(st.success());
        pair
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
        let child = Command::new("ip")
            .args(["netns", "exec", ns, super::BIN])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ip netns exec");
        self.children.push(child);
    }

    /// Run `latscope ARGS` in namespace `ns`; (exit code, stdout, stderr).
    pub fn run(&self, ns: &str, args: &[&str]) -> (i32, String, String) {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, super::BIN])
            .args(args)
            .output()
            .expect("run");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Deleting a namespace removes its end of the veth, and with it the pair.
        let router = self.router.as_ref().map(|(r, _)| r);
        for ns in [Some(&self.a), Some(&self.b), router].into_iter().flatten() {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}
