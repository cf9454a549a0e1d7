//! `--watch`: setsockopt calls system-wide, as they happen, without stopping anyone.
//!
//! How: one perf event per CPU on the `syscalls:sys_enter_setsockopt` tracepoint
//! (perf_event_open, PERF_TYPE_TRACEPOINT), with an in-kernel ftrace filter on the level
//! (SOL_SOCKET / SOL_TCP / SOL_UDP). Each sample carries the raw tracepoint record (fd, level,
//! optname, optval pointer, optlen), the caller's user stack pointer (PERF_SAMPLE_REGS_USER) and
//! a snapshot of the top of its user stack (PERF_SAMPLE_STACK_USER), taken at syscall entry. The
//! value passed almost always lives on the caller's stack (`int one = 1; setsockopt(.., &one, ..)`),
//! so it is read exactly from that snapshot; otherwise from the process's memory just after the
//! call (process_vm_readv), and labelled as such. The option's effective value is then read back
//! from the socket (pidfd_getfd + getsockopt).
//!
//! Why not a BPF program: this needs no compiler, no BTF and no libbpf at build or run time,
//! works wherever perf tracepoints are allowed (CAP_PERFMON or CAP_SYS_ADMIN), and the stack
//! snapshot gives the same exactness bpf_probe_read_user would for the common case.
//!
//! Everything is detached when the [`Watcher`] drops (fds closed, buffers unmapped). When tracefs
//! is not mounted, it is mounted only inside a private mount namespace of a short-lived helper
//! thread, to read the tracepoint's id and format: the system's mounts are never changed.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use latscope_core::model::sockets::SetsockoptEvent;

use crate::error::{InspectError, Result};
use crate::sockopt::{self, OptError, Pidfd};

const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_SAMPLE_TID: u64 = 1 << 1;
const PERF_SAMPLE_TIME: u64 = 1 << 2;
const PERF_SAMPLE_RAW: u64 = 1 << 10;
const PERF_SAMPLE_REGS_USER: u64 = 1 << 12;
const PERF_SAMPLE_STACK_USER: u64 = 1 << 13;
const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_COMM: u32 = 3;
const PERF_RECORD_SAMPLE: u32 = 9;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
/// _IOW('$', 6, char *)
const PERF_EVENT_IOC_SET_FILTER: libc::c_ulong = 0x4008_2406;
/// Bytes of user stack captured per call. The value passed sits in the caller's frame just above
/// the stack pointer at the syscall: 12 to 40 bytes for CPython, Rust std and nginx on x86_64
/// (measured), so 512 bytes leaves room and keeps samples small.
const STACK_DUMP: u32 = 512;
/// Ring buffer pages per CPU (a power of two): 1 MiB holds ~1,500 samples.
const RING_PAGES: usize = 256;

/// The user stack pointer's index in perf's register numbering (arch/*/include/uapi/asm/perf_regs.h).
#[cfg(target_arch = "x86_64")]
const PERF_REG_SP: Option<u32> = Some(7);
#[cfg(target_arch = "aarch64")]
const PERF_REG_SP: Option<u32> = Some(31);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const PERF_REG_SP: Option<u32> = None;

/// `struct perf_event_attr` up to PERF_ATTR_SIZE_VER5 (112 bytes).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved2: u16,
}

const FLAG_DISABLED: u64 = 1 << 0;
const FLAG_COMM: u64 = 1 << 9;
const FLAG_WATERMARK: u64 = 1 << 14;
const FLAG_USE_CLOCKID: u64 = 1 << 25;

/// Where the tracepoint's fields sit in its raw record (from its `format` file).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Offset of the socket fd.
    pub fd: usize,
    /// Offset of the option level.
    pub level: usize,
    /// Offset of the option name.
    pub optname: usize,
    /// Offset of the user pointer to the value.
    pub optval: usize,
    /// Offset of the value's length.
    pub optlen: usize,
}

/// Parse a tracefs `format` file for the setsockopt fields' offsets.
pub fn parse_format(text: &str) -> Option<Layout> {
    let mut l = Layout::default();
    let mut found = 0;
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("field:") else {
            continue;
        };
        let mut parts = rest.split(';');
        let decl = parts.next()?.trim();
        let name = decl.rsplit([' ', '*']).next()?.trim();
        let offset: usize = parts.next()?.trim().strip_prefix("offset:")?.parse().ok()?;
        let slot = match name {
            "fd" => &mut l.fd,
            "level" => &mut l.level,
            "optname" => &mut l.optname,
            "optval" => &mut l.optval,
            "optlen" => &mut l.optlen,
            _ => continue,
        };
        *slot = offset;
        found += 1;
    }
    (found == 5).then_some(l)
}

/// One setsockopt call as the kernel recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawCall {
    /// Process id of the caller.
    pub pid: u32,
    /// Thread id of the caller.
    pub tid: u32,
    /// CLOCK_MONOTONIC at the call; [`Watcher::poll`] converts it to Unix time.
    pub time_unix_ns: u64,
    /// The socket's file descriptor.
    pub fd: i32,
    /// Option level (SOL_TCP, SOL_SOCKET, ...).
    pub level: i32,
    /// Option name number.
    pub optname: i32,
    /// User-space address of the value.
    pub optval: u64,
    /// Length of the value, bytes.
    pub optlen: u32,
    /// (user stack pointer, bytes from it upwards) at syscall entry.
    pub stack: Option<(u64, Vec<u8>)>,
    /// The process name, when the kernel reported it (PERF_RECORD_COMM at exec) — so that
    /// short-lived processes are named even after they exit.
    pub comm: Option<String>,
}

struct CpuRing {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
    page: usize,
}

impl Drop for CpuRing {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned; nothing uses the mapping after this.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// The attached tracepoint: one perf event and ring buffer per CPU.
pub struct Watcher {
    rings: Vec<CpuRing>,
    layout: Layout,
    lost: u64,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC, ns.
    wall_offset_ns: i128,
    /// Process names seen in PERF_RECORD_COMM records (pid → name), bounded.
    comms: HashMap<u32, String>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("cpus", &self.rings.len())
            .field("lost", &self.lost)
            .finish()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // Closing the perf fds detaches from the tracepoint; unmapping frees the rings.
        self.rings.clear();
    }
}

const EVENT_DIR: &str = "events/syscalls/sys_enter_setsockopt";

fn read_event_files(root: &Path) -> Result<(u64, String)> {
    let dir = root.join(EVENT_DIR);
    let id = fs::read_to_string(dir.join("id"))
        .map_err(|e| InspectError::io(format!("reading {}/id", dir.display()), e))?
        .trim()
        .parse()
        .map_err(|_| InspectError::Malformed {
            what: "tracepoint id".into(),
            detail: "not a number".into(),
        })?;
    let format = fs::read_to_string(dir.join("format"))
        .map_err(|e| InspectError::io(format!("reading {}/format", dir.display()), e))?;
    Ok((id, format))
}

/// The setsockopt tracepoint's id and format. From a mounted tracefs if there is one; otherwise
/// a helper thread unshares its mount namespace (CLONE_NEWNS; needs CAP_SYS_ADMIN), makes it
/// private, mounts tracefs there and reads the two files — the mount vanishes with the thread.
fn tracepoint_files() -> Result<(u64, String)> {
    for p in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if Path::new(p).join(EVENT_DIR).exists() {
            return read_event_files(Path::new(p));
        }
    }
    let h = std::thread::Builder::new()
        .name("tracefs-helper".into())
        .spawn(|| -> Result<(u64, String)> {
            let fail = |what: &str| {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::PermissionDenied {
                    InspectError::Privilege {
                        what: format!("{what} to reach the setsockopt tracepoint"),
                        capability: "CAP_SYS_ADMIN, or tracefs mounted at /sys/kernel/tracing",
                    }
                } else {
                    InspectError::io(what, e)
                }
            };
            // SAFETY: unshare(CLONE_NEWNS) only affects this helper thread (it also unshares
            // its fs_struct); the thread ends right after reading two files.
            if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
                return Err(fail("unsharing the mount namespace"));
            }
            // SAFETY: static C strings; MS_REC|MS_PRIVATE keeps our mounts from propagating.
            if unsafe {
                libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                )
            } != 0
            {
                return Err(fail("making the private mount namespace private"));
            }
            // SAFETY: as above; the mount exists only in this thread's namespace.
            if unsafe {
                libc::mount(
                    c"tracefs".as_ptr(),
                    c"/sys/kernel/tracing".as_ptr(),
                    c"tracefs".as_ptr(),
                    0,
                    std::ptr::null(),
                )
            } != 0
            {
                return Err(fail("mounting tracefs"));
            }
            if !Path::new("/sys/kernel/tracing").join(EVENT_DIR).exists() {
                return Err(InspectError::Unsupported {
                    what: "the syscalls:sys_enter_setsockopt tracepoint".into(),
                    detail: "tracefs has no syscall events (needs CONFIG_FTRACE_SYSCALLS)".into(),
                });
            }
            read_event_files(Path::new("/sys/kernel/tracing"))
        })
        .map_err(|e| InspectError::io("starting the tracefs helper thread", e))?;
    h.join().map_err(|_| InspectError::Malformed {
        what: "tracefs helper thread".into(),
        detail: "it panicked".into(),
    })?
}

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

fn wall_offset_ns() -> i128 {
    clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_MONOTONIC)
}

fn online_cpus() -> Vec<i32> {
    let text = fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|s| !s.is_empty()) {
        let mut it = part.split('-');
        let a: Option<i32> = it.next().and_then(|s| s.parse().ok());
        let b: Option<i32> = it.next().and_then(|s| s.parse().ok());
        match (a, b) {
            (Some(a), Some(b)) => cpus.extend(a..=b),
            (Some(a), None) => cpus.push(a),
            _ => {}
        }
    }
    if cpus.is_empty() {
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        cpus.extend(0..n as i32);
    }
    cpus
}

impl Watcher {
    /// Attach to the tracepoint on every online CPU.
    pub fn open() -> Result<Self> {
        let (id, format) = tracepoint_files()?;
        let mut w = Watcher {
            rings: Vec::new(),
            layout: Layout::default(),
            lost: 0,
            wall_offset_ns: wall_offset_ns(),
            comms: HashMap::new(),
        };
        w.layout = parse_format(&format).ok_or_else(|| InspectError::Malformed {
            what: "sys_enter_setsockopt format".into(),
            detail: "fields fd/level/optname/optval/optlen not found".into(),
        })?;
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        for cpu in online_cpus() {
            w.rings.push(open_cpu(id, cpu, page)?);
        }
        Ok(w)
    }

    /// Samples the kernel had to drop because a ring buffer was full.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Wait up to `timeout_ms` for calls, and return those that arrived, oldest first.
    pub fn poll(&mut self, timeout_ms: i32) -> Vec<RawCall> {
        let mut fds: Vec<libc::pollfd> = self
            .rings
            .iter()
            .map(|r| libc::pollfd {
                fd: r.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: fds is a valid array of fds.len() pollfd structs.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        let mut out = Vec::new();
        let mut comms = Vec::new();
        for i in 0..self.rings.len() {
            let lost = drain(&self.rings[i], &self.layout, &mut out, &mut comms);
            self.lost += lost;
        }
        if self.comms.len() > 4096 {
            self.comms.clear();
        }
        self.comms.extend(comms);
        for c in &mut out {
            c.time_unix_ns = (i128::from(c.time_unix_ns) + self.wall_offset_ns).max(0) as u64;
            c.comm = self.comms.get(&c.pid).cloned();
        }
        out.sort_by_key(|c| c.time_unix_ns);
        out
    }
}

fn open_cpu(id: u64, cpu: i32, page: usize) -> Result<CpuRing> {
    let mut attr = PerfEventAttr {
        type_: PERF_TYPE_TRACEPOINT,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: id,
        sample_period: 1,
        sample_type: PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW,
        // Wake the reader when a quarter of the ring is full rather than at every call: a burst
        // of calls then costs one wake-up, and `poll` drains the rings at least every 100 ms.
        // FLAG_COMM: also report exec()s, to name processes that exit before we look them up.
        flags: FLAG_DISABLED | FLAG_USE_CLOCKID | FLAG_WATERMARK | FLAG_COMM,
        wakeup_events: (page * RING_PAGES / 4) as u32,
        // CLOCK_REALTIME is refused for tracepoints (not NMI-safe); MONOTONIC is converted to
        // wall-clock time with an offset taken at start.
        clockid: libc::CLOCK_MONOTONIC,
        ..PerfEventAttr::default()
    };
    if let Some(sp) = PERF_REG_SP {
        attr.sample_type |= PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
        attr.sample_regs_user = 1 << sp;
        attr.sample_stack_user = STACK_DUMP;
    }
    // SAFETY: attr is a valid perf_event_attr of the size it declares; pid -1 + cpu = every
    // process on that CPU; no group.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &raw const attr,
            -1 as libc::pid_t,
            cpu,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => InspectError::Privilege {
                what: "attaching to the syscalls:sys_enter_setsockopt tracepoint (perf_event_open)"
                    .into(),
                capability: "CAP_PERFMON (or CAP_SYS_ADMIN)",
            },
            _ => InspectError::io(format!("perf_event_open on CPU {cpu}"), e),
        });
    }
    // SAFETY: a fresh fd from the kernel, owned from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let len = page * (1 + RING_PAGES);
    // SAFETY: mapping the perf ring buffer of a valid perf fd, read/write as perf requires.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(InspectError::io(
            "mapping the perf ring buffer",
            io::Error::last_os_error(),
        ));
    }
    let ring = CpuRing {
        fd,
        base: base.cast(),
        len,
        page,
    };
    // Only the levels we care about reach user space; a kernel that rejects the filter just
    // sends everything, and we filter below.
    let filter = c"level == 1 || level == 6 || level == 17";
    // SAFETY: SET_FILTER takes a NUL-terminated string; ENABLE takes no argument.
    unsafe {
        libc::ioctl(
            ring.fd.as_raw_fd(),
            PERF_EVENT_IOC_SET_FILTER as _,
            filter.as_ptr(),
        );
        if libc::ioctl(ring.fd.as_raw_fd(), PERF_EVENT_IOC_ENABLE as _, 0) != 0 {
            return Err(InspectError::io(
                "enabling the perf event",
                io::Error::last_os_error(),
            ));
        }
    }
    Ok(ring)
}

/// Copy out every record in `ring`; returns the number of samples the kernel reported lost.
fn drain(
    ring: &CpuRing,
    layout: &Layout,
    out: &mut Vec<RawCall>,
    comms: &mut Vec<(u32, String)>,
) -> u64 {
    let data_size = ring.len - ring.page;
    // SAFETY: the first page of the mapping is struct perf_event_mmap_page; data_head is at
    // offset 1024 and data_tail at 1032, both 8-byte aligned u64 that the kernel and we share.
    let (head_ptr, tail_ptr) = unsafe {
        (
            &*(ring.base.add(1024) as *const AtomicU64),
            &*(ring.base.add(1032) as *const AtomicU64),
        )
    };
    let head = head_ptr.load(Ordering::Acquire);
    let mut tail = tail_ptr.load(Ordering::Relaxed);
    let mut lost = 0;
    // SAFETY: the data area is the mapping after the first page, data_size bytes long.
    let data = unsafe { std::slice::from_raw_parts(ring.base.add(ring.page), data_size) };
    let copy = |from: u64, n: usize| -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        let start = (from as usize) % data_size;
        let first = n.min(data_size - start);
        v.extend_from_slice(&data[start..start + first]);
        v.extend_from_slice(&data[..n - first]);
        v
    };
    while tail + 8 <= head {
        let hdr = copy(tail, 8);
        let ty = u32::from_ne_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        let size = u16::from_ne_bytes([hdr[6], hdr[7]]) as u64;
        if size < 8 || tail + size > head {
            break;
        }
        let rec = copy(tail + 8, size as usize - 8);
        match ty {
            PERF_RECORD_SAMPLE => {
                if let Some(c) = parse_sample(&rec, layout) {
                    out.push(c);
                }
            }
            PERF_RECORD_LOST if rec.len() >= 16 => lost += rd64(&rec, 8).unwrap_or(0),
            // struct { u32 pid, tid; char comm[]; }: keep process (not thread) names.
            PERF_RECORD_COMM if rec.len() > 8 && rd32(&rec, 0) == rd32(&rec, 4) => {
                let name = rec[8..].split(|&c| c == 0).next().unwrap_or(&[]);
                comms.push((
                    rd32(&rec, 0).unwrap_or(0),
                    String::from_utf8_lossy(name).into_owned(),
                ));
            }
            _ => {}
        }
        tail += size;
    }
    tail_ptr.store(tail, Ordering::Release);
    lost
}

fn rd64(b: &[u8], o: usize) -> Option<u64> {
    let s = b.get(o..o + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_ne_bytes(a))
}

fn rd32(b: &[u8], o: usize) -> Option<u32> {
    let s = b.get(o..o + 4)?;
    Some(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

/// Parse a PERF_RECORD_SAMPLE body (after the 8-byte header) for our sample_type.
pub fn parse_sample(rec: &[u8], layout: &Layout) -> Option<RawCall> {
    let pid = rd32(rec, 0)?;
    let tid = rd32(rec, 4)?;
    let time = rd64(rec, 8)?;
    let raw_size = rd32(rec, 16)? as usize;
    let raw = rec.get(20..20usize.checked_add(raw_size)?)?;
    let mut off = 20 + raw_size;
    // Syscall tracepoint arguments are stored as unsigned long; the low 32 bits hold the ints.
    let arg = |o: usize| rd64(raw, o);
    let mut call = RawCall {
        pid,
        tid,
        time_unix_ns: time,
        fd: arg(layout.fd)? as i32,
        level: arg(layout.level)? as i32,
        optname: arg(layout.optname)? as i32,
        optval: arg(layout.optval)?,
        optlen: arg(layout.optlen)? as u32,
        stack: None,
        comm: None,
    };
    if PERF_REG_SP.is_some() {
        let abi = rd64(rec, off)?;
        off += 8;
        let mut sp = None;
        if abi != 0 {
            sp = rd64(rec, off);
            off += 8;
        }
        let size = rd64(rec, off)? as usize;
        off += 8;
        if size > 0 {
            let end = off.checked_add(size)?;
            let bytes = rec.get(off..end)?;
            let dyn_size = rd64(rec, end).map(|d| d as usize).unwrap_or(size).min(size);
            if let Some(sp) = sp {
                call.stack = Some((sp, bytes[..dyn_size].to_vec()));
            }
        }
    }
    Some(call)
}

/// How an option's value is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Int,
    Str,
    Linger,
}

/// The options `--watch` reports: (level, optname) → (level name, option name, kind, the
/// option to read back for the effective value).
fn option_info(level: i32, optname: i32) -> Option<(&'static str, &'static str, Kind, i32)> {
    let i = Kind::Int;
    Some(match (level, optname) {
        (1, 7) => ("SOL_SOCKET", "SO_SNDBUF", i, 7),
        (1, 8) => ("SOL_SOCKET", "SO_RCVBUF", i, 8),
        (1, 32) => ("SOL_SOCKET", "SO_SNDBUFFORCE", i, 7),
        (1, 33) => ("SOL_SOCKET", "SO_RCVBUFFORCE", i, 8),
        (1, 9) => ("SOL_SOCKET", "SO_KEEPALIVE", i, 9),
        (1, 13) => ("SOL_SOCKET", "SO_LINGER", Kind::Linger, 13),
        (1, 46) => ("SOL_SOCKET", "SO_BUSY_POLL", i, 46),
        (1, 69) => ("SOL_SOCKET", "SO_PREFER_BUSY_POLL", i, 69),
        (1, 70) => ("SOL_SOCKET", "SO_BUSY_POLL_BUDGET", i, 70),
        (6, 1) => ("SOL_TCP", "TCP_NODELAY", i, 1),
        (6, 2) => ("SOL_TCP", "TCP_MAXSEG", i, 2),
        (6, 3) => ("SOL_TCP", "TCP_CORK", i, 3),
        (6, 4) => ("SOL_TCP", "TCP_KEEPIDLE", i, 4),
        (6, 5) => ("SOL_TCP", "TCP_KEEPINTVL", i, 5),
        (6, 6) => ("SOL_TCP", "TCP_KEEPCNT", i, 6),
        (6, 12) => ("SOL_TCP", "TCP_QUICKACK", i, 12),
        (6, 13) => ("SOL_TCP", "TCP_CONGESTION", Kind::Str, 13),
        (6, 18) => ("SOL_TCP", "TCP_USER_TIMEOUT", i, 18),
        (6, 25) => ("SOL_TCP", "TCP_NOTSENT_LOWAT", i, 25),
        (6, 44) => ("SOL_TCP", "TCP_RTO_MAX_MS", i, 44),
        (6, 45) => ("SOL_TCP", "TCP_RTO_MIN_US", i, 45),
        (6, 46) => ("SOL_TCP", "TCP_DELACK_MAX_US", i, 46),
        (17, 1) => ("SOL_UDP", "UDP_CORK", i, 1),
        _ => return None,
    })
}

fn decode(kind: Kind, b: &[u8]) -> Option<String> {
    match kind {
        Kind::Int => {
            // setsockopt accepts int options of 1..4 bytes on Linux (sockptr copy of min(len, 4)).
            let mut a = [0u8; 4];
            let n = b.len().min(4);
            if n == 0 {
                return None;
            }
            a[..n].copy_from_slice(&b[..n]);
            Some(i32::from_ne_bytes(a).to_string())
        }
        Kind::Str => {
            let s = b.split(|&c| c == 0).next().unwrap_or(&[]);
            Some(String::from_utf8_lossy(s).into_owned())
        }
        Kind::Linger => {
            let on = rd32(b, 0)?;
            let secs = rd32(b, 4)? as i32;
            Some(format!("onoff={} linger={secs}s", on != 0))
        }
    }
}

/// Read `len` bytes at `addr` in process `pid` (process_vm_readv; needs ptrace attach access).
fn read_process_memory(pid: u32, addr: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: local points into buf (len bytes); remote is only read by the kernel, in the
    // other process, with its own checks.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    (n == len as isize).then_some(buf)
}

/// Turns recorded calls into events, caching per process what is costly to look up again
/// (the name, a pidfd), so a burst of calls from one process costs a few syscalls each.
#[derive(Debug, Default)]
pub struct Decoder {
    procs: HashMap<u32, (String, Option<Pidfd>)>,
}

/// Processes remembered at most; the cache is simply emptied when full.
const DECODER_CACHE: usize = 1024;

impl Decoder {
    /// A decoder with empty caches.
    pub fn new() -> Self {
        Decoder::default()
    }

    /// The event for `call`; None for options `--watch` does not report. `read_back`: also read
    /// the option's effective value from the socket (a few syscalls; callers skip it in bursts so
    /// the rings keep draining).
    pub fn event(&mut self, call: &RawCall, read_back: bool) -> Option<SetsockoptEvent> {
        let (level_name, opt_name, kind, readback) = option_info(call.level, call.optname)?;
        let len = (call.optlen as usize).min(64);
        let mut value = None;
        let mut source = None;
        if len > 0 && call.optval != 0 {
            let from_stack = call.stack.as_ref().and_then(|(sp, bytes)| {
                let start = call.optval.checked_sub(*sp)? as usize;
                bytes
                    .get(start..start.checked_add(len)?)
                    .map(<[u8]>::to_vec)
            });
            let (bytes, src) = match from_stack {
                Some(b) => (Some(b), "stack snapshot at the call"),
                None => (
                    read_process_memory(call.pid, call.optval, len),
                    "process memory after the call",
                ),
            };
            if let Some(b) = bytes {
                value = decode(kind, &b);
                source = value.as_ref().map(|_| src.to_string());
            }
        }
        let effective = if read_back {
            self.read_back(call, readback, kind)
        } else {
            None
        };
        // The name at exec (from the kernel), else the one read from /proc by read_back.
        let comm = call
            .comm
            .clone()
            .or_else(|| self.procs.get(&call.pid).map(|p| p.0.clone()))
            .unwrap_or_else(|| "?".into());
        Some(SetsockoptEvent {
            event: "setsockopt".into(),
            unix_ms: call.time_unix_ns / 1_000_000,
            pid: call.pid,
            tid: call.tid,
            comm,
            fd: call.fd,
            level: level_name.into(),
            option: opt_name.into(),
            value,
            value_source: source,
            effective,
        })
    }

    /// Read the option back from the socket (through a cached pidfd; a stale one — the pid was
    /// reused — is replaced once).
    fn read_back(&mut self, call: &RawCall, name: i32, kind: Kind) -> Option<String> {
        for attempt in 0..2 {
            if attempt == 1 || !self.procs.contains_key(&call.pid) {
                if self.procs.len() >= DECODER_CACHE {
                    self.procs.clear();
                }
                let comm = crate::procfs::comm(call.pid);
                self.procs
                    .insert(call.pid, (comm, Pidfd::open(call.pid).ok()));
            }
            let pidfd = self.procs.get(&call.pid)?.1.as_ref()?;
            match pidfd.get_fd(call.fd) {
                Ok(dup) => {
                    let raw = dup.as_raw_fd();
                    return match kind {
                        Kind::Int => sockopt::get_int(raw, call.level, name).map(|v| v.to_string()),
                        Kind::Str => sockopt::get_string(raw, call.level, name),
                        Kind::Linger => None,
                    };
                }
                Err(OptError::ProcessGone) => continue,
                Err(_) => return None,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORMAT: &str = "name: sys_enter_setsockopt\nID: 2220\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:int fd;\toffset:16;\tsize:8;\tsigned:0;\n\tfield:int level;\toffset:24;\tsize:8;\tsigned:0;\n\tfield:int optname;\toffset:32;\tsize:8;\tsigned:0;\n\tfield:char * optval;\toffset:40;\tsize:8;\tsigned:0;\n\tfield:int optlen;\toffset:48;\tsize:8;\tsigned:0;\n";

    #[test]
    fn parses_format() {
        let l = parse_format(FORMAT).expect("layout");
        assert_eq!(
            l,
            Layout {
                fd: 16,
                level: 24,
                optname: 32,
                optval: 40,
                optlen: 48
            }
        );
        assert!(parse_format("field:int fd;\toffset:16;\tsize:8;").is_none());
    }

    #[test]
    fn decodes_a_sample_with_stack_snapshot() {
        let layout = parse_format(FORMAT).expect("layout");
        let mut raw = vec![0u8; 60];
        raw[16..24].copy_from_slice(&5u64.to_ne_bytes());
        raw[24..32].copy_from_slice(&6u64.to_ne_bytes());
        raw[32..40].copy_from_slice(&1u64.to_ne_bytes());
        raw[40..48].copy_from_slice(&0x7fff_0010u64.to_ne_bytes());
        raw[48..56].copy_from_slice(&4u64.to_ne_bytes());
        let mut rec = Vec::new();
        rec.extend_from_slice(&42u32.to_ne_bytes());
        rec.extend_from_slice(&43u32.to_ne_bytes());
        rec.extend_from_slice(&1_700_000_000_000_000_000u64.to_ne_bytes());
        rec.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
        rec.extend_from_slice(&raw);
        if PERF_REG_SP.is_some() {
            rec.extend_from_slice(&2u64.to_ne_bytes()); // abi 64
            rec.extend_from_slice(&0x7fff_0000u64.to_ne_bytes()); // sp
            rec.extend_from_slice(&32u64.to_ne_bytes());
            let mut stack = vec![0u8; 32];
            stack[16..20].copy_from_slice(&1i32.to_ne_bytes());
            rec.extend_from_slice(&stack);
            rec.extend_from_slice(&32u64.to_ne_bytes());
        }
        let c = parse_sample(&rec, &layout).expect("sample");
        assert_eq!(
            (c.pid, c.tid, c.fd, c.level, c.optname, c.optlen),
            (42, 43, 5, 6, 1, 4)
        );
        if PERF_REG_SP.is_some() {
            let e = Decoder::new().event(&c, true).expect("event");
            assert_eq!(e.option, "TCP_NODELAY");
            assert_eq!(e.value.as_deref(), Some("1"));
            assert_eq!(
                e.value_source.as_deref(),
                Some("stack snapshot at the call")
            );
            assert_eq!(e.unix_ms, 1_700_000_000_000);
        }
    }

    /// Deterministic pseudo-random bytes (xorshift64), for the no-panic tests below.
    fn noise(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn garbage_samples_do_not_panic() {
        let layout = parse_format(FORMAT).expect("layout");
        for seed in 0..2000u64 {
            let mut rec = noise(seed, (seed % 700) as usize);
            // Sometimes plausible sizes, sometimes huge ones.
            if rec.len() >= 24 && seed % 3 == 0 {
                rec[16..20].copy_from_slice(&56u32.to_ne_bytes());
            }
            if let Some(c) = parse_sample(&rec, &layout) {
                let _ = option_info(c.level, c.optname);
            }
        }
    }

    #[test]
    fn ignores_other_options() {
        assert!(option_info(1, 2).is_none()); // SO_REUSEADDR
        assert_eq!(decode(Kind::Str, b"bbr\0\0").as_deref(), Some("bbr"));
        assert_eq!(decode(Kind::Int, &[1]).as_deref(), Some("1"));
    }
}
