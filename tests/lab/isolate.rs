//! Running a program as a user on another machine would: in a network namespace of the lab, but
//! with a PID namespace, a mount namespace and a cgroup namespace of its own (`unshare --pid
//! --mount --cgroup --fork --mount-proc`: /proc lists only its own processes; /sys/fs/cgroup is
//! a read-only tmpfs, empty unless the program was put in a cgroup of its CPU controller — a
//! pod's or a CI runner's CPU limit — which it then sees as the root of its own cgroup
//! hierarchies, v1 `cpu` and v2, read-only, as a container does; it never sees the host's other
//! cgroups, the server's among them) and
//! without CAP_SYS_ADMIN, CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE in its bounding and
//! inheritable sets (`setpriv`), so it can neither enter other namespaces, read other
//! processes' sockets, load eBPF nor open perf events. CAP_NET_RAW and CAP_NET_ADMIN stay: it
//! can capture its own traffic, as `tcpdump` on a laptop can. The diagnose lab's client seats
//! and the agent fleet's client agent run so.

/// The capabilities dropped (setpriv's names).
pub const DROPPED: &[&str] = &["sys_admin", "bpf", "perfmon", "sys_ptrace"];

/// Their bits in /proc/PID/status's `CapEff` (linux/capability.h).
pub const DROPPED_BITS: u64 = (1 << 21) | (1 << 39) | (1 << 38) | (1 << 19);

/// Before the namespaces: which of its hierarchies put the program in a cgroup of its own (not
/// the root) — `cpu` for the v1 CPU controller's, `v2` for the unified one — handed to
/// [`MOUNT_CGROUPS`] in the environment.
const OWN_CGROUP: &str = r#"export LAB_OWN_CGROUP="$(awk -F: '$3 != "/" && $2 ~ /(^|,)cpu(,|$)/ { printf "cpu " } $3 != "/" && $1 == "0" && $2 == "" { printf "v2 " }' /proc/self/cgroup)"
exec "$@""#;

/// Inside the namespaces: a read-only tmpfs over /sys/fs/cgroup (`ip netns exec` has mounted a
/// /sys of its own, where it is empty), holding the hierarchies where the program is in a
/// cgroup of its own, rooted there by the new cgroup namespace: v1 `cpu` (co-mounted with
/// `cpuacct` where the host has them so) and v2; then the program, without the variable.
const MOUNT_CGROUPS: &str = r#"own=$LAB_OWN_CGROUP; unset LAB_OWN_CGROUP
mount -t tmpfs -o mode=0755 none /sys/fs/cgroup || exit 125
case " $own " in *" cpu "*)
  mkdir /sys/fs/cgroup/cpu
  mount -t cgroup -o ro,cpu none /sys/fs/cgroup/cpu 2>/dev/null ||
    mount -t cgroup -o ro,cpu,cpuacct none /sys/fs/cgroup/cpu 2>/dev/null || rmdir /sys/fs/cgroup/cpu ;;
esac
case " $own " in *" v2 "*)
  mkdir /sys/fs/cgroup/unified
  mount -t cgroup2 -o ro none /sys/fs/cgroup/unified 2>/dev/null || rmdir /sys/fs/cgroup/unified ;;
esac
mount -o remount,ro,mode=0555 /sys/fs/cgroup || exit 125
exec "$@""#;

/// The words that run `argv` isolated, to follow `ip netns exec NS`.
pub fn isolated(argv: &[&str]) -> Vec<String> {
    let drop: Vec<String> = DROPPED.iter().map(|c| format!("-{c}")).collect();
    let drop = drop.join(",");
    // --kill-child: when `unshare` is killed (a time limit, a test's clean-up), the program
    // (pid 1 of its namespace) goes too.
    let mut words: Vec<String> = [
        "sh",
        "-c",
        OWN_CGROUP,
        "sh",
        "unshare",
        "--pid",
        "--mount",
        "--cgroup",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "sh",
        "-c",
        MOUNT_CGROUPS,
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
