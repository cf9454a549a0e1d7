//! The third seat's other end: `latscope serve --auth-file KEY --evidence-ports PORT` started in
//! the network namespace that holds the target's address, as an operator would run it on the
//! server's host, and the flags that point the client's diagnose at it.
//!
//! The namespace is found from the address alone (`ip -n NS addr`), so every scenario gets its
//! agent without saying where its server runs; a name is resolved as the client resolves it
//! (`getent ahosts` inside the client's namespace, IPv4 first: the address family most likely to
//! answer). A target whose address no namespace holds gets no agent, and the run is then
//! client-only; diagnose says so in its verdict.

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::lab::BIN;

/// The agent's port: not serve's usual 7373, which some scenarios' targets use.
const PORT: u16 = 7474;

/// A running agent; killed when dropped.
pub struct Agent {
    child: Child,
    key: std::path::PathBuf,
    /// diagnose's flags that use it.
    pub args: Vec<String>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.key);
    }
}

/// The host and port of a lab target (`http://HOST:PORT/…`, `HOST:PORT`, `[V6]:PORT`).
pub fn host_port(target: &str) -> Option<(String, u16)> {
    let (scheme, rest) = match target.split_once("://") {
        Some((s, r)) => (s, r),
        None => ("", target),
    };
    let authority = rest.split('/').next()?;
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && p.chars().all(|c| c.is_ascii_digit()) => {
            (h, p.parse().ok()?)
        }
        _ => (authority, if scheme == "https" { 443 } else { 80 }),
    };
    Some((host.trim_matches(['[', ']']).to_string(), port))
}

/// The addresses `host` has from inside namespace `ns`, IPv4 first.
fn resolve(ns: &str, host: &str) -> Vec<IpAddr> {
    if let Ok(ip) = host.parse() {
        return vec![ip];
    }
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "getent", "ahosts", host])
        .output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut ips: Vec<IpAddr> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    ips.sort_by_key(|ip| (ip.is_ipv6(), *ip));
    ips.dedup();
    ips
}

/// The network namespace that holds `ip` on one of its interfaces (the client's own for a
/// loopback address).
fn namespace_of(ip: IpAddr, client_ns: &str) -> Option<String> {
    if ip.is_loopback() {
        return Some(client_ns.to_string());
    }
    let list = Command::new("ip").args(["netns", "list"]).output().ok()?;
    let names: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect();
    let holds = |ns: &str| {
        Command::new("ip")
            .args(["-n", ns, "-o", "addr", "show"])
            .output()
            .map(|o| local_addresses(&String::from_utf8_lossy(&o.stdout)).contains(&ip))
            .unwrap_or(false)
    };
    names.into_iter().find(|ns| holds(ns))
}

/// The local addresses in `ip -o addr show` output: the word after `inet`/`inet6`, without its
/// prefix length. A point-to-point line (`inet 10.8.0.1 peer 10.8.0.2/32`) names its peer too,
/// which is not this namespace's address.
fn local_addresses(text: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            words.find(|w| *w == "inet" || *w == "inet6")?;
            words.next()?.split('/').next()?.parse().ok()
        })
        .collect()
}

/// Whether something listens on TCP `port` at `ip` inside `ns`.
fn listening(ns: &str, ip: IpAddr, port: u16) -> bool {
    Command::new("ip")
        .args(["netns", "exec", ns, "ss", "-ltnH"])
        .output()
        .map(|o| {
            let want = match ip {
                IpAddr::V4(v4) => format!("{v4}:{port}"),
                IpAddr::V6(v6) => format!("[{v6}]:{port}"),
            };
            String::from_utf8_lossy(&o.stdout).contains(&want)
        })
        .unwrap_or(false)
}

/// The target's address (as the client resolves it) and the namespace that holds it, with the
/// target's port.
pub fn server_of(client_ns: &str, target: &str) -> Result<(IpAddr, String, u16), String> {
    let (host, port) = host_port(target).ok_or_else(|| format!("target {target}: no host"))?;
    resolve(client_ns, &host)
        .into_iter()
        .find_map(|ip| namespace_of(ip, client_ns).map(|ns| (ip, ns, port)))
        .ok_or_else(|| format!("no namespace holds an address of {host}"))
}

/// Start the target's agent, or say why there is none.
pub fn start(client_ns: &str, target: &str, tag: &str) -> Result<Agent, String> {
    let (ip, ns, port) = server_of(client_ns, target)?;
    let key = std::env::temp_dir().join(format!("latscope-lab-agent-{}-{tag}", std::process::id()));
    let secret: String = format!("{:x}{:x}", rand_u64(), rand_u64());
    std::fs::write(&key, secret).map_err(|e| format!("key file: {e}"))?;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("key file: {e}"))?;
    let child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            BIN,
            "serve",
            "--bind",
            &ip.to_string(),
        ])
        .args(["--port", &PORT.to_string(), "--quiet"])
        .arg("--auth-file")
        .arg(&key)
        .args(["--evidence-ports", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("start the agent: {e}"))?;
    let agent_addr = match ip {
        IpAddr::V4(v4) => format!("{v4}:{PORT}"),
        IpAddr::V6(v6) => format!("[{v6}]:{PORT}"),
    };
    let agent = Agent {
        child,
        args: vec![
            "--server-agent".into(),
            agent_addr,
            "--auth-file".into(),
            key.display().to_string(),
        ],
        key,
    };
    let end = Instant::now() + Duration::from_secs(5);
    while !listening(&ns, ip, PORT) {
        if Instant::now() > end {
            return Err(format!("the agent in {ns} did not listen on {ip}:{PORT}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(agent)
}

/// A key's randomness: the kernel's.
fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: `b` is a valid 8-byte buffer for getrandom to fill.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    assert_eq!(n, 8, "getrandom");
    u64::from_ne_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::{host_port, local_addresses};

    #[test]
    fn a_point_to_point_peer_is_not_a_local_address() {
        let out = "2: dl0    inet 10.8.0.1 peer 10.8.0.2/32 scope global dl0\\       valid_lft forever\n\
                   3: eth0    inet6 fd00::2/64 scope global \\       valid_lft forever\n";
        let ips = local_addresses(out);
        assert_eq!(
            ips,
            vec![
                "10.8.0.1".parse::<std::net::IpAddr>().unwrap(),
                "fd00::2".parse().unwrap()
            ]
        );
    }

    #[test]
    fn lab_targets_name_their_host_and_port() {
        let hp = |t| host_port(t).unwrap();
        assert_eq!(hp("http://10.8.0.2:8080/"), ("10.8.0.2".into(), 8080));
        assert_eq!(hp("http://web.lab.test/x"), ("web.lab.test".into(), 80));
        assert_eq!(hp("https://h/"), ("h".into(), 443));
        assert_eq!(hp("10.8.0.2:7373"), ("10.8.0.2".into(), 7373));
        assert_eq!(hp("http://[fd00::2]:81/"), ("fd00::2".into(), 81));
    }
}
