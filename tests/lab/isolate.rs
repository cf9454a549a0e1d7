//! Running a program as a user on another machine would: in a network namespace of the lab, but
//! with a PID namespace and a mount namespace of its own (`unshare --pid --mount --fork
//! --mount-proc`: /proc lists only its own processes; an empty tmpfs hides /sys/fs/cgroup) and
//! without CAP_SYS_ADMIN, CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE in its bounding and
//! inheritable sets (`setpriv`), so it can neither enter other namespaces, read other
//! processes' sockets, load eBPF nor open perf events. CAP_NET_RAW and CAP_NET_ADMIN stay: it
//! can capture its own traffic, as `tcpdump` on a laptop can. The diagnose lab's client seats
//! and the agent fleet's client agent run so.

/// The capabilities dropped (setpriv's names).
pub const DROPPED: &[&str] = &["sys_admin", "bpf", "perfmon", "sys_ptrace"];

/// Their bits in /proc/PID/status's `CapEff` (linux/capability.h).
pub const DROPPED_BITS: u64 = (1 << 21) | (1 << 39) | (1 << 38) | (1 << 19);

/// The words that run `argv` isolated, to follow `ip netns exec NS`.
pub fn isolated(argv: &[&str]) -> Vec<String> {
    let drop: Vec<String> = DROPPED.iter().map(|c| format!("-{c}")).collect();
    let drop = drop.join(",");
    // --kill-child: when `unshare` is killed (a time limit, a test's clean-up), the program
    // (pid 1 of its namespace) goes too.
    let mut words: Vec<String> = [
        "unshare",
        "--pid",
        "--mount",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "sh",
        "-c",
        "mount -t tmpfs -o ro,mode=0555 none /sys/fs/cgroup && exec \"$@\"",
        "sh",
        "setpriv",
        "--bounding-set",
        &drop,
        "--inh-caps",
        &drop,
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    words.extend(argv.iter().map(|s| s.to_string()));
    words
}
