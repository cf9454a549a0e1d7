//! The few system interfaces the loader needs besides libbpf: RX software timestamping, clock
//! offsets, BTF presence, kprobe support, the cgroup v2 root, netfilter links in a network
//! namespace, and name → number resolution for filters.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::StackError;

/// A socket that asks for software RX timestamps. While any socket does, the kernel stamps every
/// received skb (`net_enable_timestamp()`, a global static key) — the stamp latscope measures
/// from. Dropping it lets the kernel turn stamping off again.
#[derive(Debug)]
pub struct RxTimestamping {
    _fd: OwnedFd,
}

impl RxTimestamping {
    /// Open a UDP socket with `SO_TIMESTAMPING = SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE`.
    pub fn enable() -> Result<Self, StackError> {
        // SAFETY: plain socket(2) call; the result is checked before use.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(StackError::System(format!(
                "socket for RX timestamping: {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: fd is a fresh, valid descriptor we own from here on.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let flags: libc::c_int =
            (libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE) as libc::c_int;
        if let Err(e) = latscope_sys::sockopt::set_int(
            owned.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPING,
            flags,
        ) {
            return Err(StackError::System(format!(
                "enabling software RX timestamps (SO_TIMESTAMPING): {e}"
            )));
        }
        Ok(RxTimestamping { _fd: owned })
    }
}

fn clock_ns(id: libc::clockid_t) -> Option<i128> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write into.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    (rc == 0).then(|| i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec))
}

/// (CLOCK_TAI − CLOCK_REALTIME, CLOCK_REALTIME − CLOCK_MONOTONIC) in ns. skb->tstamp is
/// CLOCK_REALTIME; BPF can read TAI (bpf_ktime_get_tai_ns, 6.1+), which unlike REALTIME − MONO
/// only changes at leap seconds.
pub fn clock_offsets_ns() -> (u64, u64) {
    let real = clock_ns(libc::CLOCK_REALTIME).unwrap_or(0);
    let tai = clock_ns(libc::CLOCK_TAI).unwrap_or(real);
    let mono = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0);
    let tai_off = (tai - real).max(0);
    // Round to whole seconds: TAI − UTC is an integer number of seconds; the difference of two
    // successive clock reads is not.
    let tai_off = ((tai_off + 500_000_000) / 1_000_000_000) * 1_000_000_000;
    (tai_off as u64, (real - mono).max(0) as u64)
}

/// Effective capabilities of this process (64-bit mask), via capget(2).
pub fn effective_caps() -> Option<u64> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut hdr = Header {
        version: 0x2008_0522,
        pid: 0,
    }; // _LINUX_CAPABILITY_VERSION_3
    let mut data = [Data::default(); 2];
    // SAFETY: capget with a v3 header reads into two Data structs, which we provide.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut hdr as *mut Header, data.as_mut_ptr()) };
    (rc == 0).then(|| u64::from(data[0].effective) | (u64::from(data[1].effective) << 32))
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Tracing BPF programs need CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN, which implies both).
pub fn check_caps() -> Result<(), StackError> {
    let Some(caps) = effective_caps() else {
        return Ok(());
    }; // cannot tell: let the kernel decide
    let has = |c: u32| caps & (1u64 << c) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    let missing: Vec<&str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|(c, _)| !has(*c))
        .map(|(_, n)| n)
        .collect();
    Err(StackError::Privilege(format!(
        "missing {}",
        missing.join(" and ")
    )))
}

/// Whether the kernel has a kfunc (a function in its BTF that BPF programs may call), e.g.
/// `bpf_cast_to_kern_ctx` (6.2+). Unknown (BTF unreadable) counts as present: the verifier then
/// has the last word.
pub fn has_kfunc(name: &str) -> bool {
    match libbpf_rs::btf::Btf::from_vmlinux() {
        Ok(btf) => btf
            .type_by_name::<libbpf_rs::btf::types::Func>(name)
            .is_some(),
        Err(_) => true,
    }
}

/// CO-RE needs the kernel's BTF.
pub fn check_btf() -> Result<(), StackError> {
    if Path::new("/sys/kernel/btf/vmlinux").exists() {
        Ok(())
    } else {
        Err(StackError::NoBtf)
    }
}

/// Whether the kernel has kprobes (`CONFIG_KPROBES`): its perf event source is then listed.
pub fn has_kprobes() -> bool {
    Path::new("/sys/bus/event_source/devices/kprobe").exists()
}

/// The network namespace with inode `inode` as a file to enter, `None` when it is latscope's own
/// (nothing to enter). Looked for as `ip netns identify` does: the names in /run/netns, then the
/// processes' /proc/PID/ns/net.
pub fn netns_file(inode: u64) -> Result<Option<File>, String> {
    let ino = |p: &Path| std::fs::metadata(p).map(|m| m.ino()).ok();
    if ino(Path::new("/proc/self/ns/net")) == Some(inode) {
        return Ok(None);
    }
    for path in latscope_sys::netns::namespace_paths() {
        if ino(&path) == Some(inode) {
            return File::open(&path)
                .map(Some)
                .map_err(|e| format!("opening {}: {e}", path.display()));
        }
    }
    Err(format!(
        "no /run/netns name or process is in network namespace {inode}, so latscope cannot enter it"
    ))
}

/// Attach the netfilter program `prog_fd` at (`hooknum`, `priority`) for IPv4 and IPv6, in the
/// network namespace `netns` (`None`: latscope's own). A netfilter link belongs to the namespace
/// of the thread that creates it, so another namespace's are created on a helper thread that
/// entered it. The kernel allows one BPF hook per priority: when another latscope (an agent, a
/// diagnose run) holds it, the next priority inwards is taken (`step` is +1 for a first
/// priority, −1 for a last), up to 16 of them. IPv6 is best effort (a kernel booted with
/// `ipv6.disable=1` has no IPv6 hooks).
pub fn netfilter_links(
    prog_fd: i32,
    hooknum: u32,
    priority: i32,
    netns: Option<&File>,
) -> Result<Vec<OwnedFd>, String> {
    let step = if priority < 0 { 1 } else { -1 };
    let create = move || -> Result<Vec<OwnedFd>, String> {
        let mut links = Vec::new();
        for pf in [libc::NFPROTO_IPV4, libc::NFPROTO_IPV6] {
            let mut last = 0;
            for k in 0..16 {
                last = netfilter_link(prog_fd, pf as u32, hooknum, priority + step * k);
                if last != -libc::EBUSY {
                    break;
                }
            }
            if last >= 0 {
                // SAFETY: `last` is a fresh link descriptor we own from here on.
                links.push(unsafe { OwnedFd::from_raw_fd(last) });
            } else if pf == libc::NFPROTO_IPV4 {
                return Err(format!(
                    "netfilter link: {}",
                    std::io::Error::from_raw_os_error(-last)
                ));
            }
        }
        Ok(links)
    };
    match netns {
        None => create(),
        Some(ns) => {
            let ns = ns
                .try_clone()
                .map_err(|e| format!("network namespace file: {e}"))?;
            latscope_sys::netns::run_in(ns, create)
                .map_err(|e| format!("entering the network namespace: {e}"))?
        }
    }
}

/// One BPF_LINK_CREATE of a netfilter program: the link's descriptor, or −errno.
fn netfilter_link(prog_fd: i32, pf: u32, hooknum: u32, priority: i32) -> i32 {
    use libbpf_rs::libbpf_sys as sys;
    // SAFETY: a plain C struct of integers, pointers and a union of such, for which all-zero is
    // the documented "no options" value.
    let mut opts: sys::bpf_link_create_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of::<sys::bpf_link_create_opts>() as _;
    opts.__bindgen_anon_1.netfilter = sys::bpf_link_create_opts__bindgen_ty_1__bindgen_ty_5 {
        pf,
        hooknum,
        priority,
        flags: 0,
    };
    // SAFETY: prog_fd is a loaded netfilter program the caller keeps open; opts is a fully
    // initialised bpf_link_create_opts of the size it declares.
    unsafe { sys::bpf_link_create(prog_fd, 0, sys::BPF_NETFILTER, &opts) }
}

/// The mount point of the cgroup v2 hierarchy (unified or hybrid layout).
pub fn cgroup2_mount() -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_dev, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then(|| dir.to_string())
    })
}

/// Open the cgroup v2 root for attaching cgroup_skb programs to every socket.
pub fn open_cgroup2_root() -> Result<File, StackError> {
    let dir = cgroup2_mount()
        .ok_or_else(|| StackError::System("no cgroup v2 hierarchy is mounted".into()))?;
    File::open(&dir).map_err(|e| StackError::System(format!("open {dir}: {e}")))
}

/// A bad filter value.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FilterError(pub String);

/// Interface name or index → ifindex (names are looked up in latscope's own network namespace).
pub fn resolve_ifindex(s: &str) -> Result<u32, FilterError> {
    if let Ok(n) = s.parse::<u32>() {
        return Ok(n);
    }
    let c =
        std::ffi::CString::new(s).map_err(|_| FilterError(format!("bad interface name '{s}'")))?;
    // SAFETY: c is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(FilterError(format!(
            "no interface '{s}' in this network namespace (see `ip link`; or give its ifindex)"
        )))
    } else {
        Ok(idx)
    }
}

/// Interface index → name, if it exists in this namespace.
pub fn ifname(ifindex: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: buf has IF_NAMESIZE bytes as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(ifindex, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success buf holds a NUL-terminated name.
    let name = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Some(name.to_string_lossy().into_owned())
}

/// Network namespace: an inode number, or a path such as /proc/PID/ns/net or /run/netns/NAME.
pub fn resolve_netns(s: &str) -> Result<u64, FilterError> {
    if let Ok(n) = s.parse::<u64>() {
        return Ok(n);
    }
    let p = if Path::new(s).exists() {
        s.to_string()
    } else {
        format!("/run/netns/{s}")
    };
    std::fs::metadata(&p)
        .map(|m| m.ino())
        .map_err(|e| FilterError(format!("network namespace '{s}': {e} (give a path like /proc/PID/ns/net, a name in /run/netns, or an inode)")))
}

/// cgroup: an id, or a cgroup v2 directory (absolute, or relative to the cgroup2 mount).
pub fn resolve_cgroup(s: &str) -> Result<u64, FilterError> {
    if let Ok(n) = s.parse::<u64>() {
        return Ok(n);
    }
    let p = if s.starts_with('/') && Path::new(s).is_dir() {
        s.to_string()
    } else {
        let root = cgroup2_mount()
            .ok_or_else(|| FilterError("no cgroup v2 hierarchy is mounted".into()))?;
        format!("{root}/{}", s.trim_start_matches('/'))
    };
    std::fs::metadata(&p).map(|m| m.ino()).map_err(|e| {
        FilterError(format!(
            "cgroup '{s}': {e} (give a cgroup v2 directory or its id)"
        ))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn clock_offsets_are_sane() {
        let (tai, mono) = clock_offsets_ns();
        assert_eq!(tai % 1_000_000_000, 0);
        assert!(tai <= 100 * 1_000_000_000, "TAI-UTC {tai}");
        assert!(mono > 0);
    }

    #[test]
    fn resolves_numbers_and_rejects_unknown_names() {
        assert_eq!(resolve_ifindex("7").ok(), Some(7));
        assert!(resolve_ifindex("nosuchif0xyz").is_err());
        assert_eq!(resolve_ifindex("lo").ok(), Some(1));
        assert_eq!(resolve_netns("4026531840").ok(), Some(4026531840));
        assert!(resolve_netns("/nonexistent/ns").is_err());
    }
}
