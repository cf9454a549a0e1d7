//! Thin, safe wrappers over the socket calls probes need: raw and datagram sockets, kernel
//! timestamps (SO_TIMESTAMPING, falling back to SO_TIMESTAMPNS), `recvmsg` with its control
//! messages (timestamps, TTL / hop limit, extended errors from the error queue), and `poll`.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Which clock the RTTs of a run came from (reported, so users know what they compare).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TsSource {
    /// User-space clock around send and receive.
    User,
    /// Kernel receive timestamps (SO_TIMESTAMPNS or SO_TIMESTAMPING RX), user-space send time.
    KernelRx,
    /// Kernel software timestamps on both send (SO_TIMESTAMPING TX) and receive.
    Kernel,
    /// The kernel's handshake RTT sample of a TCP connection (TCP_INFO, 1 us resolution).
    TcpInfo,
}

impl TsSource {
    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            TsSource::User => "user-space clock",
            TsSource::KernelRx => "kernel RX (SO_TIMESTAMPNS) + user-space TX",
            TsSource::Kernel => "kernel software TX+RX (SO_TIMESTAMPING)",
            TsSource::TcpInfo => "kernel handshake RTT (TCP_INFO, 1 us resolution)",
        }
    }
}

/// The timestamping a socket got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TsMode {
    /// No kernel timestamps.
    None,
    /// SO_TIMESTAMPNS: receive timestamps only.
    RxOnly,
    /// SO_TIMESTAMPING with software TX and RX timestamps and per-send ids (OPT_ID).
    TxRx,
}

/// CLOCK_REALTIME in nanoseconds: the clock kernel software timestamps use.
pub use latscope_sys::clock::realtime_ns;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A non-blocking, close-on-exec socket.
pub fn socket(domain: libc::c_int, ty: libc::c_int, proto: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the returned descriptor is owned by the OwnedFd below.
    let fd =
        cvt(unsafe { libc::socket(domain, ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, proto) })?;
    // SAFETY: fd was just returned by socket() and is not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt` with an `int` value (latscope-sys's, on an owned descriptor).
pub fn set_int(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    latscope_sys::sockopt::set_int(fd.as_raw_fd(), level, name, v)
}

/// `setsockopt` with any plain-old-data value (latscope-sys's, on an owned descriptor).
pub fn set_raw<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    latscope_sys::sockopt::set_raw(fd.as_raw_fd(), level, name, v)
}

/// Turn on the best timestamping the kernel gives this socket.
pub fn enable_timestamps(fd: &OwnedFd) -> TsMode {
    let flags = libc::SOF_TIMESTAMPING_SOFTWARE
        | libc::SOF_TIMESTAMPING_RX_SOFTWARE
        | libc::SOF_TIMESTAMPING_TX_SOFTWARE
        | libc::SOF_TIMESTAMPING_OPT_ID
        | libc::SOF_TIMESTAMPING_OPT_TSONLY;
    if set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPING,
        flags as libc::c_int,
    )
    .is_ok()
    {
        return TsMode::TxRx;
    }
    if set_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1).is_ok() {
        return TsMode::RxOnly;
    }
    TsMode::None
}

/// Ask for the TTL (IPv4) or hop limit (IPv6) of received packets as a control message.
pub fn enable_recv_ttl(fd: &OwnedFd, v6: bool) -> io::Result<()> {
    if v6 {
        set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, 1)
    } else {
        set_int(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, 1)
    }
}

/// Queue ICMP errors about this socket's packets on its error queue (IP_RECVERR).
pub fn enable_recv_err(fd: &OwnedFd, v6: bool) -> io::Result<()> {
    if v6 {
        set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVERR, 1)
    } else {
        set_int(fd, libc::IPPROTO_IP, libc::IP_RECVERR, 1)
    }
}

/// Set the TTL / hop limit of outgoing unicast packets.
pub fn set_ttl(fd: &OwnedFd, v6: bool, ttl: u8) -> io::Result<()> {
    if v6 {
        set_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_UNICAST_HOPS,
            libc::c_int::from(ttl),
        )
    } else {
        set_int(fd, libc::IPPROTO_IP, libc::IP_TTL, libc::c_int::from(ttl))
    }
}

/// A socket address in the kernel's representation.
pub struct RawAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl RawAddr {
    /// The kernel form of `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
        let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
        let len = match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in.
                unsafe {
                    std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin)
                };
                size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in6.
                unsafe {
                    std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6)
                };
                size_of::<libc::sockaddr_in6>()
            }
        };
        RawAddr {
            storage,
            len: len as libc::socklen_t,
        }
    }

    fn ptr(&self) -> *const libc::sockaddr {
        (&self.storage as *const libc::sockaddr_storage).cast()
    }
}

/// Decode a kernel socket address (IPv4 or IPv6).
///
/// # Safety
/// `sa` must point to at least `len` readable bytes.
unsafe fn decode_addr(sa: *const libc::sockaddr, len: usize) -> Option<SocketAddr> {
    if len < size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY: the caller guarantees len readable bytes; we check the size of each variant.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
                let sin = std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in>());
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                    u16::from_be(sin.sin_port),
                )))
            }
            libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
                let sin6 = std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in6>());
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                    u16::from_be(sin6.sin6_port),
                    sin6.sin6_flowinfo,
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// `connect` (non-blocking sockets return `EINPROGRESS` as an error of kind WouldBlock-like;
/// callers check `raw_os_error`).
pub fn connect(fd: &OwnedFd, addr: SocketAddr) -> io::Result<()> {
    let a = RawAddr::new(addr);
    // SAFETY: a holds a valid sockaddr of length a.len.
    cvt(unsafe { libc::connect(fd.as_raw_fd(), a.ptr(), a.len) }).map(|_| ())
}

/// `bind`.
pub fn bind(fd: &OwnedFd, addr: SocketAddr) -> io::Result<()> {
    let a = RawAddr::new(addr);
    // SAFETY: a holds a valid sockaddr of length a.len.
    cvt(unsafe { libc::bind(fd.as_raw_fd(), a.ptr(), a.len) }).map(|_| ())
}

/// `getsockname`.
pub fn local_addr(fd: &OwnedFd) -> io::Result<SocketAddr> {
    // SAFETY: storage is writable and len tells the kernel its size.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: as above.
    cvt(unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    })?;
    // SAFETY: the kernel wrote len bytes into storage.
    unsafe {
        decode_addr(
            (&storage as *const libc::sockaddr_storage).cast(),
            len as usize,
        )
    }
    .ok_or_else(|| io::Error::other("getsockname returned an unknown address family"))
}

/// `SO_ERROR`: the pending error of a socket (used after a non-blocking connect).
pub fn take_error(fd: &OwnedFd) -> io::Result<Option<io::Error>> {
    let v = latscope_sys::sockopt::get_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_ERROR)?;
    Ok((v != 0).then(|| io::Error::from_raw_os_error(v)))
}

/// `sendto` (or `send` when `to` is None, on a connected socket).
pub fn send_to(fd: &OwnedFd, data: &[u8], to: Option<SocketAddr>) -> io::Result<usize> {
    let r = match to {
        Some(to) => {
            let a = RawAddr::new(to);
            // SAFETY: data is a live slice, a a valid sockaddr.
            unsafe {
                libc::sendto(
                    fd.as_raw_fd(),
                    data.as_ptr().cast(),
                    data.len(),
                    0,
                    a.ptr(),
                    a.len,
                )
            }
        }
        // SAFETY: data is a live slice.
        None => unsafe { libc::send(fd.as_raw_fd(), data.as_ptr().cast(), data.len(), 0) },
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// An extended error from the error queue (IP_RECVERR / IPV6_RECVERR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtErr {
    /// The errno the error maps to (ENOMSG for timestamps).
    pub errno: u32,
    /// SO_EE_ORIGIN_*: ICMP, ICMP6, or TIMESTAMPING.
    pub origin: u8,
    /// ICMP type of the error.
    pub icmp_type: u8,
    /// ICMP code of the error.
    pub icmp_code: u8,
    /// For timestamps: the OPT_ID key of the send.
    pub data: u32,
    /// The address of the node that sent the ICMP error.
    pub offender: Option<IpAddr>,
}

/// One received message with the control data probes use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Msg {
    /// Bytes of data (may exceed the buffer if truncated).
    pub len: usize,
    /// The sender.
    pub from: Option<SocketAddr>,
    /// Kernel receive (or, on the error queue, transmit) timestamp, CLOCK_REALTIME ns.
    pub kernel_ns: Option<u64>,
    /// TTL / hop limit of the packet, when asked for.
    pub ttl: Option<u8>,
    /// An extended error (error queue only).
    pub err: Option<ExtErr>,
}

fn ts_ns(ts: &libc::timespec) -> Option<u64> {
    let ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    (ns != 0).then_some(ns)
}

/// `recvmsg` into `buf`; `errqueue` reads the error queue instead. Non-blocking: returns
/// `Ok(None)` when nothing is queued.
pub fn recv_msg(fd: &OwnedFd, buf: &mut [u8], errqueue: bool) -> io::Result<Option<Msg>> {
    // 8-byte aligned control buffer, large enough for timestamps + TTL + an extended error.
    let mut control = [0u64; 64];
    // SAFETY: plain old data.
    let mut from: libc::sockaddr_storage = unsafe { zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain old data; every pointer set below outlives the call.
    let mut mh: libc::msghdr = unsafe { zeroed() };
    mh.msg_name = (&mut from as *mut libc::sockaddr_storage).cast();
    mh.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control.as_mut_ptr().cast();
    mh.msg_controllen = size_of::<[u64; 64]>() as _;
    let flags =
        libc::MSG_DONTWAIT | libc::MSG_TRUNC | if errqueue { libc::MSG_ERRQUEUE } else { 0 };
    // SAFETY: mh describes valid buffers (name, iov, control) for the duration of the call.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut mh, flags) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock {
            return Ok(None);
        }
        return Err(e);
    }
    let mut msg = Msg {
        len: n as usize,
        ..Msg::default()
    };
    // SAFETY: the kernel wrote msg_namelen bytes of address into `from`.
    msg.from = unsafe {
        decode_addr(
            (&from as *const libc::sockaddr_storage).cast(),
            mh.msg_namelen as usize,
        )
    };
    // SAFETY: CMSG_* walk the control buffer the kernel filled, within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&mh);
        while !c.is_null() {
            let (level, ty) = ((*c).cmsg_level, (*c).cmsg_type);
            let data = libc::CMSG_DATA(c);
            let dlen = (*c).cmsg_len as usize - (data as usize - c as usize);
            if level == libc::SOL_SOCKET
                && ty == libc::SCM_TIMESTAMPING
                && dlen >= 3 * size_of::<libc::timespec>()
            {
                // scm_timestamping: [0] software, [1] deprecated, [2] hardware.
                let t = std::ptr::read_unaligned(data.cast::<[libc::timespec; 3]>());
                msg.kernel_ns = ts_ns(&t[0]).or(ts_ns(&t[2]));
            } else if level == libc::SOL_SOCKET
                && ty == libc::SCM_TIMESTAMPNS
                && dlen >= size_of::<libc::timespec>()
            {
                msg.kernel_ns = ts_ns(&std::ptr::read_unaligned(data.cast::<libc::timespec>()));
            } else if (level == libc::IPPROTO_IP && ty == libc::IP_TTL)
                || (level == libc::IPPROTO_IPV6 && ty == libc::IPV6_HOPLIMIT)
            {
                if dlen >= size_of::<libc::c_int>() {
                    let v = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                    msg.ttl = u8::try_from(v).ok();
                }
            } else if ((level == libc::IPPROTO_IP && ty == libc::IP_RECVERR)
                || (level == libc::IPPROTO_IPV6 && ty == libc::IPV6_RECVERR))
                && dlen >= size_of::<libc::sock_extended_err>()
            {
                let ee_ptr = data.cast::<libc::sock_extended_err>();
                let ee = std::ptr::read_unaligned(ee_ptr);
                let off_len = dlen - size_of::<libc::sock_extended_err>();
                let offender = decode_addr(libc::SO_EE_OFFENDER(ee_ptr), off_len).map(|a| a.ip());
                msg.err = Some(ExtErr {
                    errno: ee.ee_errno,
                    origin: ee.ee_origin,
                    icmp_type: ee.ee_type,
                    icmp_code: ee.ee_code,
                    data: ee.ee_data,
                    offender,
                });
            }
            c = libc::CMSG_NXTHDR(&mh, c);
        }
    }
    Ok(Some(msg))
}

/// Wait until one of `fds` (at most 4) is readable or has a queued error, at most `timeout`.
/// Nothing is allocated: this is on every probe's path.
pub fn poll_in(fds: &[RawFd], timeout: Duration) -> io::Result<()> {
    let mut p = [libc::pollfd {
        fd: -1,
        events: libc::POLLIN,
        revents: 0,
    }; 4];
    if fds.len() > p.len() {
        return Err(io::Error::other("poll_in takes at most 4 descriptors"));
    }
    for (slot, &fd) in p.iter_mut().zip(fds) {
        slot.fd = fd;
    }
    ppoll(&mut p[..fds.len()], timeout)?;
    Ok(())
}

/// `ppoll` over `fds` — nanosecond timeouts, so microsecond intervals are kept; `Ok(false)`
/// when a signal interrupted the wait.
fn ppoll(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<bool> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    // SAFETY: fds is a live slice of pollfd of the given length; ts is valid.
    let r = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(true)
}

/// Wait for writability (non-blocking connect), returning revents per descriptor.
pub fn poll_out(fds: &[RawFd], timeout: Duration) -> io::Result<Vec<i16>> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        })
        .collect();
    if !ppoll(&mut p, timeout)? {
        return Ok(vec![0; fds.len()]);
    }
    Ok(p.iter().map(|x| x.revents).collect())
}

/// The source address the kernel would use to reach `dst` (a connected UDP socket's name).
pub fn source_for(dst: IpAddr) -> io::Result<IpAddr> {
    let domain = if dst.is_ipv6() {
        libc::AF_INET6
    } else {
        libc::AF_INET
    };
    let fd = socket(domain, libc::SOCK_DGRAM, 0)?;
    connect(&fd, SocketAddr::new(dst, 9))?;
    Ok(local_addr(&fd)?.ip())
}

/// The kernel's RTT estimate of a TCP connection (`TCP_INFO` tcpi_rtt, microseconds). Right
/// after the handshake it is the SYN → SYN-ACK sample, timed in the kernel (tcp_ack_update_rtt
/// in net/ipv4/tcp_input.c), so scheduling delays of the caller do not enter it.
pub fn tcp_rtt_us(fd: &OwnedFd) -> Option<u32> {
    // SAFETY: tcp_info is plain old data; all-zero is valid.
    let mut info: libc::tcp_info = unsafe { zeroed() };
    let r = latscope_sys::sockopt::get_raw(
        fd.as_raw_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_INFO,
        &mut info,
    );
    (r.is_ok() && info.tcpi_rtt > 0 && info.tcpi_total_retrans == 0).then_some(info.tcpi_rtt)
}

fn bpf(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// Attach a classic BPF filter to a raw TCP socket so the kernel hands it only segments from
/// `peer`'s port `port` (from `peer` itself, for IPv4 where the IP header is visible): a raw
/// TCP socket otherwise gets a copy of every TCP segment the host receives.
pub fn attach_tcp_filter(fd: &OwnedFd, peer: IpAddr, port: u16) -> io::Result<()> {
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const LD_H_ABS: u16 = 0x28; // BPF_LD | BPF_H | BPF_ABS
    const LD_H_IND: u16 = 0x48; // BPF_LD | BPF_H | BPF_IND
    const LDX_B_MSH: u16 = 0xb1; // BPF_LDX | BPF_B | BPF_MSH: X = 4 * ([k] & 0xf)
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    let prog: Vec<libc::sock_filter> = match peer {
        // Raw IPv4 sockets see the IP header: source address at 12, then the TCP source port
        // at the header length.
        IpAddr::V4(a) => vec![
            bpf(LD_W_ABS, 0, 0, 12),
            bpf(JEQ_K, 0, 4, u32::from_be_bytes(a.octets())),
            bpf(LDX_B_MSH, 0, 0, 0),
            bpf(LD_H_IND, 0, 0, 0),
            bpf(JEQ_K, 0, 1, u32::from(port)),
            bpf(RET_K, 0, 0, 0xffff),
            bpf(RET_K, 0, 0, 0),
        ],
        // Raw IPv6 sockets start at the TCP header.
        IpAddr::V6(_) => vec![
            bpf(LD_H_ABS, 0, 0, 0),
            bpf(JEQ_K, 0, 1, u32::from(port)),
            bpf(RET_K, 0, 0, 0xffff),
            bpf(RET_K, 0, 0, 0),
        ],
    };
    attach_filter(fd, &prog)
}

/// Let a raw ICMP / ICMPv6 socket receive only the message types in `pass` (ICMP_FILTER,
/// ICMP6_FILTER in linux/icmp.h, linux/icmpv6.h: a set bit blocks a type), and give it a
/// bigger receive buffer: a raw ICMP socket otherwise queues every ICMP message of the host,
/// and a busy neighbour's pings could overflow it.
pub fn restrict_icmp(fd: &OwnedFd, v6: bool, pass: &[u8]) -> io::Result<()> {
    let _ = set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20);
    if v6 {
        const ICMP6_FILTER: libc::c_int = 1;
        let mut blocked = [u32::MAX; 8];
        for &t in pass {
            blocked[usize::from(t >> 5)] &= !(1u32 << (t & 31));
        }
        set_raw(fd, libc::IPPROTO_ICMPV6, ICMP6_FILTER, &blocked)
    } else {
        const ICMP_FILTER: libc::c_int = 1;
        let mut blocked = u32::MAX;
        for &t in pass.iter().filter(|t| **t < 32) {
            blocked &= !(1u32 << t);
        }
        set_raw(fd, libc::SOL_RAW, ICMP_FILTER, &blocked)
    }
}

/// Attach a classic BPF filter to a raw ICMP / ICMPv6 socket that drops echo replies whose id
/// is not `ident` (other programs' pings); errors pass, and are matched in user space.
pub fn attach_echo_filter(fd: &OwnedFd, v6: bool, ident: u16) -> io::Result<()> {
    const LD_B_ABS: u16 = 0x30; // BPF_LD | BPF_B | BPF_ABS
    const LD_H_ABS: u16 = 0x28;
    const LD_B_IND: u16 = 0x50; // BPF_LD | BPF_B | BPF_IND
    const LD_H_IND: u16 = 0x48;
    const LDX_B_MSH: u16 = 0xb1;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    let prog: Vec<libc::sock_filter> = if v6 {
        // ICMPv6 raw sockets start at the ICMPv6 header.
        vec![
            bpf(LD_B_ABS, 0, 0, 0),
            bpf(JEQ_K, 0, 2, 129),
            bpf(LD_H_ABS, 0, 0, 4),
            bpf(JEQ_K, 0, 1, u32::from(ident)),
            bpf(RET_K, 0, 0, 0xffff),
            bpf(RET_K, 0, 0, 0),
        ]
    } else {
        // IPv4 raw sockets start at the IP header.
        vec![
            bpf(LDX_B_MSH, 0, 0, 0),
            bpf(LD_B_IND, 0, 0, 0),
            bpf(JEQ_K, 0, 2, 0),
            bpf(LD_H_IND, 0, 0, 4),
            bpf(JEQ_K, 0, 1, u32::from(ident)),
            bpf(RET_K, 0, 0, 0xffff),
            bpf(RET_K, 0, 0, 0),
        ]
    };
    attach_filter(fd, &prog)
}

/// Attach the classic BPF program `prog` to the socket (SO_ATTACH_FILTER).
fn attach_filter(fd: &OwnedFd, prog: &[libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    set_raw(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
}

/// `SO_LINGER {on, 0}`: close() sends RST instead of FIN, leaving no TIME_WAIT behind.
pub fn set_linger_zero(fd: &OwnedFd) -> io::Result<()> {
    set_raw(
        fd,
        libc::SOL_SOCKET,
        libc::SO_LINGER,
        &libc::linger {
            l_onoff: 1,
            l_linger: 0,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_loopback_timestamps_and_ttl() {
        let a = socket(libc::AF_INET, libc::SOCK_DGRAM, 0).expect("socket");
        bind(&a, "127.0.0.1:0".parse().expect("addr")).expect("bind");
        let mode = enable_timestamps(&a);
        enable_recv_ttl(&a, false).expect("recvttl");
        let to = local_addr(&a).expect("name");
        let b = socket(libc::AF_INET, libc::SOCK_DGRAM, 0).expect("socket");
        set_ttl(&b, false, 42).expect("ttl");
        assert_ne!(mode, TsMode::None, "this kernel supports socket timestamps");
        // Timestamping is switched on globally from a workqueue: the first datagrams after
        // enabling it may carry none. Within a few tries one must.
        let mut stamped = None;
        for _ in 0..20 {
            let before = realtime_ns();
            send_to(&b, b"hello", Some(to)).expect("send");
            poll_in(&[a.as_raw_fd()], Duration::from_secs(2)).expect("poll");
            let mut buf = [0u8; 64];
            let m = recv_msg(&a, &mut buf, false)
                .expect("recv")
                .expect("a message");
            assert_eq!(m.len, 5);
            assert_eq!(m.ttl, Some(42));
            assert!(recv_msg(&a, &mut buf, false).expect("recv").is_none());
            if let Some(k) = m.kernel_ns {
                stamped = Some((before, k));
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let (before, k) = stamped.expect("a kernel RX timestamp");
        assert!(
            k + 1_000_000 >= before && k <= realtime_ns() + 1_000_000,
            "timestamp on CLOCK_REALTIME"
        );
    }

    #[test]
    fn tcp_filter_passes_only_the_peer_port() {
        let Ok(raw) = socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_TCP) else {
            eprintln!("skipped: no CAP_NET_RAW");
            return;
        };
        // A closed port (bound, never listening) answers SYNs with RST.
        let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let other = holder.local_addr().expect("addr");
        let closed = {
            let s = socket(libc::AF_INET, libc::SOCK_STREAM, 0).expect("socket");
            bind(&s, "127.0.0.1:0".parse().expect("addr")).expect("bind");
            let p = local_addr(&s).expect("addr").port();
            drop(s);
            p
        };
        let lo: IpAddr = "127.0.0.1".parse().expect("ip");
        attach_tcp_filter(&raw, lo, closed).expect("attach");
        // Segments queued before the filter was attached (other programs' loopback traffic)
        // are not its business.
        let mut buf = [0u8; 256];
        while recv_msg(&raw, &mut buf, false).expect("recv").is_some() {}
        // Unrelated TCP traffic on loopback must not reach the socket.
        let c = std::net::TcpStream::connect(other).expect("connect");
        drop(c);
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            recv_msg(&raw, &mut buf, false).expect("recv").is_none(),
            "filtered out"
        );
        // A SYN to the closed port: its RST passes.
        let syn = crate::packet::tcp_syn(lo, lo, 40001, closed, 77);
        send_to(&raw, &syn, Some(SocketAddr::new(lo, 0))).expect("send");
        poll_in(&[raw.as_raw_fd()], Duration::from_secs(2)).expect("poll");
        let m = recv_msg(&raw, &mut buf, false)
            .expect("recv")
            .expect("the RST");
        let h = crate::packet::parse_ipv4(&buf[..m.len]).expect("ip");
        let seg = crate::packet::parse_tcp(&buf[h.header_len..m.len]).expect("tcp");
        assert_eq!((seg.sport, seg.dport, seg.ack), (closed, 40001, 78));
        assert!(seg.flags & crate::packet::TCP_RST != 0);
    }

    #[test]
    fn echo_filter_passes_only_our_id() {
        for v6 in [false, true] {
            let (domain, proto, lo) = if v6 {
                (libc::AF_INET6, libc::IPPROTO_ICMPV6, "::1")
            } else {
                (libc::AF_INET, libc::IPPROTO_ICMP, "127.0.0.1")
            };
            let Ok(raw) = socket(domain, libc::SOCK_RAW, proto) else {
                eprintln!("skipped: no CAP_NET_RAW");
                return;
            };
            let ours = 0x4c53;
            restrict_icmp(&raw, v6, if v6 { &[129, 1, 3] } else { &[0, 3, 11] })
                .expect("type filter");
            attach_echo_filter(&raw, v6, ours).expect("attach");
            let mut buf = [0u8; 256];
            while recv_msg(&raw, &mut buf, false).expect("recv").is_some() {}
            let to = SocketAddr::new(lo.parse().expect("ip"), 0);
            // Someone else's ping (and our own echo request, looped back): filtered out.
            send_to(
                &raw,
                &crate::packet::icmp_echo(v6, ours ^ 1, 1, 8),
                Some(to),
            )
            .expect("send");
            std::thread::sleep(Duration::from_millis(20));
            assert!(
                recv_msg(&raw, &mut buf, false).expect("recv").is_none(),
                "v6={v6}"
            );
            // Ours: the reply passes.
            send_to(&raw, &crate::packet::icmp_echo(v6, ours, 2, 8), Some(to)).expect("send");
            poll_in(&[raw.as_raw_fd()], Duration::from_secs(2)).expect("poll");
            let m = recv_msg(&raw, &mut buf, false)
                .expect("recv")
                .expect("our reply");
            let icmp = if v6 { &buf[..m.len] } else { &buf[20..m.len] };
            assert_eq!(crate::packet::parse_echo(icmp), Some((ours, 2)), "v6={v6}");
        }
    }
}
