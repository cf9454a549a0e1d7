//! Reading another process's socket options from the socket itself: pidfd_open(pid), then
//! pidfd_getfd(pidfd, fd) duplicates its fd into latscope (Linux 5.6+, needs ptrace attach
//! access: CAP_SYS_PTRACE for other users' or more privileged processes), getsockopt on the
//! duplicate, and the duplicate is closed at once. The target process is not stopped or
//! signalled; the socket is shared, so nothing about it changes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use latscope_core::model::sockets::SocketOptions;

use crate::socket::Proto;

/// Why a socket's options could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OptError {
    /// The process exited.
    ProcessGone,
    /// The fd was closed (or now holds a different file) — the socket closed during the scan.
    SocketGone,
    /// Not allowed (needs CAP_SYS_PTRACE, or Yama ptrace_scope forbids it).
    Denied,
    /// The kernel has no pidfd_open/pidfd_getfd (before 5.6).
    Unsupported,
    /// Something else, with the system's message.
    Other(String),
}

impl std::fmt::Display for OptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OptError::ProcessGone => f.write_str("the process exited during the scan"),
            OptError::SocketGone => f.write_str("the socket was closed during the scan"),
            OptError::Denied => {
                f.write_str("not permitted to duplicate the fd (needs CAP_SYS_PTRACE)")
            }
            OptError::Unsupported => f.write_str("pidfd_getfd is not available (Linux 5.6+)"),
            OptError::Other(m) => f.write_str(m),
        }
    }
}

/// An open pidfd for one process.
#[derive(Debug)]
pub struct Pidfd(OwnedFd);

impl Pidfd {
    /// pidfd_open(pid, 0).
    pub fn open(pid: u32) -> Result<Self, OptError> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd =
            unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0 as libc::c_uint) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ESRCH) => OptError::ProcessGone,
                Some(libc::ENOSYS) => OptError::Unsupported,
                Some(libc::EPERM) | Some(libc::EACCES) => OptError::Denied,
                _ => OptError::Other(format!("pidfd_open: {e}")),
            });
        }
        // SAFETY: a fresh fd returned by the kernel, owned from here on.
        Ok(Pidfd(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }))
    }

    /// Duplicate the process's `fd` into this process (closed when the result drops).
    pub fn get_fd(&self, fd: i32) -> Result<OwnedFd, OptError> {
        // SAFETY: pidfd_getfd(pidfd, targetfd, flags) returns a new fd (O_CLOEXEC) or -1.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_getfd,
                self.0.as_raw_fd(),
                fd,
                0 as libc::c_uint,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EBADF) => OptError::SocketGone,
                Some(libc::ESRCH) => OptError::ProcessGone,
                Some(libc::ENOSYS) => OptError::Unsupported,
                Some(libc::EPERM) | Some(libc::EACCES) => OptError::Denied,
                _ => OptError::Other(format!("pidfd_getfd: {e}")),
            });
        }
        // SAFETY: a fresh fd returned by the kernel, owned from here on.
        Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
    }
}

/// The inode of an open file (to check a duplicated fd is still the socket we looked for).
pub fn inode_of(fd: &OwnedFd) -> Option<u64> {
    // SAFETY: zeroed stat is valid; fstat fills it for a valid fd.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is valid (owned) and st is a valid out-pointer.
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) };
    (rc == 0).then_some(st.st_ino)
}

/// getsockopt for an int-sized option; None if the socket refuses it.
pub fn get_int(fd: RawFd, level: i32, name: i32) -> Option<i32> {
    latscope_sys::sockopt::get_int(fd, level, name).ok()
}

/// getsockopt for a string option (TCP_CONGESTION).
pub fn get_string(fd: RawFd, level: i32, name: i32) -> Option<String> {
    let mut buf = [0u8; 32];
    let len = latscope_sys::sockopt::get_bytes(fd, level, name, &mut buf).ok()?;
    let b = &buf[..len];
    let s = b.split(|&c| c == 0).next().unwrap_or(&[]);
    Some(String::from_utf8_lossy(s).into_owned())
}

const SO_BUSY_POLL: i32 = 46;
/// Newer TCP options (include/uapi/linux/tcp.h); older kernels answer ENOPROTOOPT.
pub const TCP_RTO_MAX_MS: i32 = 44;
/// TCP_RTO_MIN_US: the socket's minimum retransmission timeout, µs (kernel 6.11+).
pub const TCP_RTO_MIN_US: i32 = 45;
/// TCP_DELACK_MAX_US: the socket's longest ACK delay, µs (kernel 6.11+).
pub const TCP_DELACK_MAX_US: i32 = 46;
/// ioctl that returns an fd for a socket's network namespace (linux/sockios.h).
const SIOCGSKNS: libc::c_ulong = 0x894C;

/// For an IPv4/IPv6 socket: its address family and an open fd of its network namespace
/// (ioctl SIOCGSKNS; needs CAP_NET_ADMIN over that namespace). None for other sockets.
pub fn inet_socket_netns(fd: &OwnedFd) -> Option<(i32, std::fs::File)> {
    let domain = get_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_DOMAIN)?;
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return None;
    }
    // SAFETY: SIOCGSKNS takes no argument and returns a new namespace fd or -1.
    let ns = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCGSKNS as _) };
    if ns < 0 {
        return None;
    }
    // SAFETY: a fresh fd returned by the kernel, owned from here on.
    Some((
        domain,
        std::fs::File::from(unsafe { OwnedFd::from_raw_fd(ns) }),
    ))
}

/// The inode of a namespace fd (what `/proc/PID/ns/net` shows in brackets).
pub fn file_inode(f: &std::fs::File) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    f.metadata().ok().map(|m| m.ino())
}

/// Read every latency-relevant option of a socket fd (latscope's own descriptor).
pub fn read_options(fd: RawFd, proto: Proto) -> SocketOptions {
    let sol = libc::SOL_SOCKET;
    let tcp = libc::IPPROTO_TCP;
    let flag = |level, name| get_int(fd, level, name).map(|v| v != 0);
    let uint = |level, name| get_int(fd, level, name).and_then(|v| u32::try_from(v).ok());
    let mut o = SocketOptions {
        sndbuf: uint(sol, libc::SO_SNDBUF),
        rcvbuf: uint(sol, libc::SO_RCVBUF),
        keepalive: flag(sol, libc::SO_KEEPALIVE),
        busy_poll_us: uint(sol, SO_BUSY_POLL),
        ..SocketOptions::default()
    };
    if proto == Proto::Tcp {
        o.nodelay = flag(tcp, libc::TCP_NODELAY);
        o.cork = flag(tcp, libc::TCP_CORK);
        o.quickack_now = flag(tcp, libc::TCP_QUICKACK);
        // 0 when not set on the socket: the sysctl net.ipv4.tcp_notsent_lowat applies.
        o.notsent_lowat = get_int(fd, tcp, libc::TCP_NOTSENT_LOWAT).map(|v| v as u32);
        o.congestion = get_string(fd, tcp, libc::TCP_CONGESTION);
        o.user_timeout_ms = uint(tcp, libc::TCP_USER_TIMEOUT);
        o.maxseg = uint(tcp, libc::TCP_MAXSEG);
        o.rto_min_us = uint(tcp, TCP_RTO_MIN_US);
        o.rto_max_ms = uint(tcp, TCP_RTO_MAX_MS);
        o.delack_max_us = uint(tcp, TCP_DELACK_MAX_US);
        if o.keepalive == Some(true) {
            o.keepidle_s = uint(tcp, libc::TCP_KEEPIDLE);
            o.keepintvl_s = uint(tcp, libc::TCP_KEEPINTVL);
            o.keepcnt = uint(tcp, libc::TCP_KEEPCNT);
        }
    }
    o
}

/// Duplicate `fd` of the process behind `pidfd`, check it is still socket `inode`, read its
/// options, and close the duplicate.
pub fn read_remote(
    pidfd: &Pidfd,
    fd: i32,
    inode: u64,
    proto: Proto,
) -> Result<SocketOptions, OptError> {
    let dup = pidfd.get_fd(fd)?;
    if inode_of(&dup) != Some(inode) {
        // The fd number was closed and reused for something else.
        return Err(OptError::SocketGone);
    }
    let o = read_options(dup.as_raw_fd(), proto);
    drop(dup);
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn reads_own_socket_through_pidfd() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        c.set_nodelay(true).expect("nodelay");
        let pidfd = Pidfd::open(std::process::id()).expect("pidfd_open");
        let dup = pidfd.get_fd(c.as_raw_fd()).expect("pidfd_getfd");
        let ino = inode_of(&dup).expect("inode");
        drop(dup);
        let o = read_remote(&pidfd, c.as_raw_fd(), ino, Proto::Tcp).expect("options");
        assert_eq!(o.nodelay, Some(true));
        assert_eq!(o.cork, Some(false));
        assert!(o.congestion.is_some());
        assert_eq!(
            read_remote(&pidfd, c.as_raw_fd(), ino + 1, Proto::Tcp),
            Err(OptError::SocketGone)
        );
        assert_eq!(pidfd.get_fd(100_000).err(), Some(OptError::SocketGone));
    }
}
