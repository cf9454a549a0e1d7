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

/// Namespaces `<tag>a<pid>` (10.<net>.0.1) and `<tag>b<pid>` (10.<net>.0.2).
pub struct NetnsPair {
    pub a: String,
    pub b: String,
    pub addr_a: String,
    pub addr_b: String,
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
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}
