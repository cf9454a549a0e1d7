//! Where diagnose runs from: the two seats of every lab scenario.
//!
//! - [`Seat::ServerHost`]: `ip netns exec CLIENT_NS latscope …` as root with every capability, so
//!   diagnose may find the server in another namespace of the same host and read its sockets,
//!   its processes, its cgroups and its kernel stack (what the lab did until round 5);
//! - [`Seat::ClientOnly`]: a user on another machine. The same client network namespace, but
//!   diagnose also gets PID, mount and cgroup namespaces of its own (`unshare --pid --mount
//!   --cgroup --fork --mount-proc`: /proc lists only its own processes; a read-only tmpfs over
//!   /sys/fs/cgroup holds only the client's own cgroup where it was put in one, as a container's
//!   does: `lab::isolate`) and loses CAP_SYS_ADMIN, CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE from its
//!   bounding and inheritable sets (`setpriv`), so it can neither enter other namespaces, read
//!   other processes' sockets, load eBPF nor open perf events. CAP_NET_RAW and CAP_NET_ADMIN
//!   stay: it can capture its own traffic, as `tcpdump` on a laptop can;
//! - [`Seat::ClientAgent`]: the client seat above, with `--server-agent` pointed at a
//!   `latscope serve --evidence-ports` running on the server's side (`agent.rs`): the two-ended
//!   diagnosis, which should be as right as the server-host seat.
//!
//! [`observe`] looks around from inside a seat with tools that are not latscope (`ss -tanp`,
//! /proc, `bpftool`, the capability sets), so the isolation is checked independently of what
//! diagnose says it could see.

use std::process::Command;

use crate::lab::isolate::{DROPPED, DROPPED_BITS, isolated};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seat {
    /// On the server's host: may see the server's namespace, sockets, kernel and cgroups.
    ServerHost,
    /// From the client alone: its own network, PID and mount namespaces, no privileges to look
    /// beyond them.
    ClientOnly,
    /// From the client alone, with the server's agent answering evidence requests.
    ClientAgent,
}

impl Seat {
    pub const ALL: [Seat; 3] = [Seat::ServerHost, Seat::ClientOnly, Seat::ClientAgent];

    /// The word used in the lab's table and in `LAB_SEAT`.
    pub fn name(self) -> &'static str {
        match self {
            Seat::ServerHost => "server-host",
            Seat::ClientOnly => "client-only",
            Seat::ClientAgent => "client+agent",
        }
    }

    /// The seats `LAB_SEAT` picks (`server-host`, `client-only`, `client+agent`, a comma list;
    /// every seat when unset or `all`).
    pub fn from_env() -> Vec<Seat> {
        match std::env::var("LAB_SEAT").as_deref() {
            Ok("all") | Err(_) => Seat::ALL.to_vec(),
            Ok(list) => list
                .split(',')
                .map(|w| {
                    Seat::ALL
                        .into_iter()
                        .find(|s| s.name() == w.trim())
                        .unwrap_or_else(|| {
                            panic!(
                                "LAB_SEAT={w}: use server-host, client-only, client+agent or all"
                            )
                        })
                })
                .collect(),
        }
    }

    /// Whether diagnose runs isolated from the server's host (the client seats).
    pub fn isolated(self) -> bool {
        self != Seat::ServerHost
    }

    /// A command that runs `argv` from this seat inside network namespace `ns`.
    pub fn command(self, ns: &str, argv: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]);
        if self.isolated() {
            c.args(isolated(argv));
            return c;
        }
        c.args(argv);
        c
    }
}

/// What a program sees from a seat, read with tools that are not latscope.
#[derive(Debug)]
pub struct View {
    /// `ss -tanp` lines that name a process (`users:(…)`).
    pub sockets_with_process: Vec<String>,
    /// The command lines of every process in /proc.
    pub processes: Vec<String>,
    /// `bpftool prog list` succeeded.
    pub bpf: bool,
    /// The effective capability set (`CapEff`).
    pub cap_eff: u64,
    /// Cgroups below the roots of the hierarchies mounted at /sys/fs/cgroup: none, where the
    /// seat shows at most the client's own cgroup (as the root of its namespace).
    pub cgroups: Vec<String>,
}

/// The script [`observe`] runs: sections separated by marker lines.
const LOOK: &str = r#"
echo '@ss'; ss -tanp
echo '@proc'; for d in /proc/[0-9]*; do tr '\0\n' '  ' < "$d/cmdline" 2>/dev/null; echo; done
echo '@bpf'; if bpftool prog list >/dev/null 2>&1; then echo yes; else echo no; fi
echo '@cap'; sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status
echo '@cgroup'; find /sys/fs/cgroup -mindepth 2 -type d 2>/dev/null
"#;

/// Look around from `seat` in namespace `ns`.
pub fn observe(seat: Seat, ns: &str) -> View {
    let out = seat
        .command(ns, &["sh", "-c", LOOK])
        .output()
        .expect("run the seat's look-around (sh, ss, bpftool)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut section = "";
    let mut v = View {
        sockets_with_process: vec![],
        processes: vec![],
        bpf: false,
        cap_eff: 0,
        cgroups: vec![],
    };
    for line in text.lines() {
        if let Some(s) = line.strip_prefix('@') {
            section = match s {
                "ss" | "proc" | "bpf" | "cap" | "cgroup" => s,
                _ => section,
            };
            continue;
        }
        match section {
            "ss" if line.contains("users:(") => v.sockets_with_process.push(line.into()),
            "proc" if !line.trim().is_empty() => v.processes.push(line.trim().into()),
            "bpf" => v.bpf = line.trim() == "yes",
            "cap" => v.cap_eff = u64::from_str_radix(line.trim(), 16).unwrap_or(u64::MAX),
            "cgroup" if !line.trim().is_empty() => v.cgroups.push(line.trim().into()),
            _ => {}
        }
    }
    v
}

impl View {
    /// Why this view is not a client's alone, or `None` when it is: no socket tied to a
    /// process, no process but the look-around's own (its shell, `ss`/`tr`/`sed`/`bpftool`/`find`,
    /// and pid 1, the `sh -c` the seat starts), no eBPF, none of the dropped capabilities, no
    /// cgroup but its own.
    pub fn leaks(&self) -> Option<String> {
        let own = |p: &str| {
            let prog = p.split_whitespace().next().unwrap_or("");
            let base = prog.rsplit('/').next().unwrap_or(prog);
            matches!(base, "sh" | "tr" | "sed" | "bpftool" | "ss" | "find")
        };
        if !self.sockets_with_process.is_empty() {
            return Some(format!(
                "ss -tanp names processes: {:?}",
                self.sockets_with_process
            ));
        }
        if let Some(p) = self.processes.iter().find(|p| !own(p)) {
            return Some(format!("/proc shows another process: {p}"));
        }
        if self.bpf {
            return Some("bpftool prog list succeeded".into());
        }
        if self.cap_eff & DROPPED_BITS != 0 {
            return Some(format!(
                "CapEff {:x} keeps one of {DROPPED:?}",
                self.cap_eff
            ));
        }
        if !self.cgroups.is_empty() {
            return Some(format!(
                "/sys/fs/cgroup shows other cgroups: {:?}",
                self.cgroups
            ));
        }
        None
    }
}
