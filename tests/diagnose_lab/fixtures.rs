//! What the scenarios are built from: processes started inside a namespace, CPU-limited cgroups
//! (v1 `cpu.cfs_quota_us` or v2 `cpu.max`, whichever this host has), a resolver override for a
//! namespace, and the diagnose runner. Everything is undone on drop.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::lab::{BIN, netns};
use crate::seat::Seat;

/// The lab's Python servers (see the file's docstring).
pub fn servers_py() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/diagnose_lab/servers.py").to_string()
}

/// The lab's Node.js servers (see the file's header).
pub fn servers_js() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/diagnose_lab/servers.js").to_string()
}

/// Where program `name` is: /usr/bin or /usr/sbin first (Debian's, installed by setup.sh, not
/// a version manager's shim), then `PATH`.
pub fn program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    ["/usr/bin", "/usr/sbin"]
        .iter()
        .map(PathBuf::from)
        .chain(std::env::split_paths(&path))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The first of `names` that is not installed, with the remedy, as a one-line message.
pub fn missing(names: &[&str]) -> Option<String> {
    names.iter().find(|n| program(n).is_none()).map(|n| {
        format!(
            "`{n}` is not installed (neither in /usr/bin, /usr/sbin nor PATH): run scripts/setup.sh"
        )
    })
}

/// Debian's python3 (installed by setup.sh), not whatever a pyenv shim points to.
pub fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// A process started in a namespace with `ip netns exec` (which execs it: the child's pid is the
/// program's); killed on drop.
pub struct Proc(pub Child);

impl Proc {
    pub fn start(ns: &str, cmd: &[&str]) -> Proc {
        Proc(spawn_in(ns, cmd, Stdio::null()))
    }

    /// Like `start`, for a program that prints `marker` on a line of its own once it serves
    /// (the lab's python servers print "ready" after binding): returns once it has, at most 15 s
    /// (a UDP responder that is not yet bound answers a query with an ICMP error, which a client
    /// reads as a failed lookup at once). The rest of its output is read and dropped.
    pub fn start_ready(ns: &str, cmd: &[&str], marker: &str) -> Proc {
        use std::io::BufRead;
        let mut child = spawn_in(ns, cmd, Stdio::piped());
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        let wanted = marker.to_string();
        std::thread::spawn(move || {
            let mut said = false;
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if !said && line.trim() == wanted {
                    said = true;
                    let _ = tx.send(());
                }
            }
        });
        let proc = Proc(child);
        rx.recv_timeout(Duration::from_secs(15))
            .unwrap_or_else(|_| panic!("{cmd:?} did not print {marker:?} within 15 s"));
        proc
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

/// `cmd` run in namespace `ns` by `ip netns exec`, its stdout as given, no stdin or stderr.
fn spawn_in(ns: &str, cmd: &[&str], stdout: Stdio) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(cmd)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Load an nftables ruleset inside namespace `ns` (its tables go with the namespace).
pub fn nft(ns: &str, ruleset: &str) {
    use std::io::Write;
    let mut c = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("nft (nftables) is installed by setup.sh");
    c.stdin
        .take()
        .expect("stdin")
        .write_all(ruleset.as_bytes())
        .expect("write ruleset");
    assert!(c.wait().expect("nft").success(), "nft rejected the ruleset");
}

/// Wait until `addr` accepts TCP connections from inside namespace `ns`.
pub fn wait_tcp(ns: &str, addr: &str) {
    let addr: std::net::SocketAddr = addr.parse().expect("socket address");
    let deadline = Instant::now() + Duration::from_secs(15);
    netns::run_in(ns, || {
        while TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err() {
            assert!(Instant::now() < deadline, "{addr} never accepted");
            std::thread::sleep(Duration::from_millis(50));
        }
    });
}

pub use crate::lab::cgroup::CpuCgroup;

/// `ip netns exec` bind-mounts /etc/netns/NAME/resolv.conf over /etc/resolv.conf: a namespace's
/// own resolver. Removed on drop.
pub struct Resolver(PathBuf);

impl Resolver {
    pub fn new(ns: &str, nameserver: &str) -> Resolver {
        Resolver::with_conf(
            ns,
            &format!("nameserver {nameserver}\noptions timeout:2 attempts:1\n"),
        )
    }

    /// A resolv.conf of `text` (nameservers, a search list, options) for namespace `ns`.
    pub fn with_conf(ns: &str, text: &str) -> Resolver {
        let dir = PathBuf::from(format!("/etc/netns/{ns}"));
        std::fs::create_dir_all(&dir).expect("mkdir /etc/netns/NAME");
        std::fs::write(dir.join("resolv.conf"), text).expect("resolv.conf");
        Resolver(dir)
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `ip netns exec` also bind-mounts /etc/netns/NAME/hosts over /etc/hosts: a namespace's own
/// hosts file, with `lines` (`ADDRESS NAME`) after localhost. Removed on drop (the directory
/// too once empty).
pub struct Hosts(PathBuf);

impl Hosts {
    pub fn new(ns: &str, lines: &[&str]) -> Hosts {
        let dir = PathBuf::from(format!("/etc/netns/{ns}"));
        std::fs::create_dir_all(&dir).expect("mkdir /etc/netns/NAME");
        let mut text = String::from("127.0.0.1 localhost\n::1 localhost\n");
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        let file = dir.join("hosts");
        std::fs::write(&file, text).expect("hosts");
        Hosts(file)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// What one diagnose run said.
#[derive(Debug)]
pub struct Outcome {
    pub code: i32,
    pub rules: Vec<String>,
    /// The side each finding blames, in the findings' order.
    pub sides: Vec<String>,
    pub verdict: String,
    pub secs: f64,
    pub doc: Option<serde_json::Value>,
    pub stderr: String,
}

/// [`Outcome::code`] of a scenario that could not be built (a program it needs is missing).
pub const NOT_RUN: i32 = -2;

impl Outcome {
    /// A scenario that was not run, and why (in `verdict`).
    pub fn not_run(why: String) -> Outcome {
        Outcome {
            code: NOT_RUN,
            rules: vec![],
            sides: vec![],
            verdict: why,
            secs: 0.0,
            doc: None,
            stderr: String::new(),
        }
    }

    /// The top finding's rule, "clean" for exit 0, or what went wrong.
    pub fn top(&self) -> String {
        match (self.code, self.rules.first()) {
            (1, Some(r)) if r == "unexplained" => {
                format!("unexplained ({})", self.sides.first().map_or("?", |s| s))
            }
            (1, Some(r)) => r.clone(),
            (0, _) => "clean".into(),
            (NOT_RUN, _) => "not run".into(),
            (c, _) => format!("exit {c}"),
        }
    }
}

/// Run `latscope diagnose TARGET --json ARGS` from `seat` in namespace `ns` (inside `cgroup`
/// when given: the client's own CPU quota), killed after `limit`.
pub fn diagnose(
    seat: Seat,
    ns: &str,
    cgroup: Option<&Path>,
    target: &str,
    args: &[String],
    limit: Duration,
) -> Outcome {
    let t0 = Instant::now();
    let mut cmd = seat.command(ns, &[BIN, "diagnose", target, "--json"]);
    if let Some(cg) = cgroup {
        // The shell joins the cgroup, then becomes `ip netns exec …`: the program and every
        // process it starts inherit it (`ip netns exec` hides /sys/fs/cgroup afterwards, so
        // nothing inside could join it).
        let mut wrapped = Command::new("sh");
        wrapped
            .args(["-c", "echo $$ > \"$0/cgroup.procs\" && exec \"$@\""])
            .arg(cg)
            .arg(cmd.get_program())
            .args(cmd.get_args());
        cmd = wrapped;
    }
    let child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run latscope diagnose");
    let pid = child.id();
    let killer = std::thread::spawn(move || {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
            // SAFETY: signal 0 only checks that our child still exists.
            if unsafe { libc::kill(pid as i32, 0) } != 0 {
                return;
            }
        }
        // SAFETY: our own child, still running past its limit.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    let out = child.wait_with_output().expect("wait for diagnose");
    let secs = t0.elapsed().as_secs_f64();
    drop(killer);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let doc: Option<serde_json::Value> = serde_json::from_str(&stdout).ok();
    let findings = doc
        .as_ref()
        .and_then(|d| d["findings"].as_array().cloned())
        .unwrap_or_default();
    let field = |k: &str| -> Vec<String> {
        findings
            .iter()
            .filter_map(|f| f[k].as_str().map(String::from))
            .collect()
    };
    let (rules, sides) = (field("rule"), field("side"));
    Outcome {
        code: out.status.code().unwrap_or(-1),
        rules,
        sides,
        verdict: doc
            .as_ref()
            .and_then(|d| d["verdict"].as_str().map(String::from))
            .unwrap_or_default(),
        secs,
        doc,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
