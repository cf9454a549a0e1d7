//! `recvmsg` and the control messages it carries: kernel timestamps (SO_TIMESTAMPING,
//! SO_TIMESTAMPNS), the TTL / hop limit of a received packet, extended errors from the error
//! queue (IP_RECVERR: ICMP errors and transmit timestamps) and UDP GRO segment sizes — with the
//! socket options that ask for them. The one place that walks a control buffer (Documentation/
//! networking/timestamping.rst, ip(7), ipv6(7), udp(7)).

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

use crate::sockopt::set_int;

/// The timestamping [`enable_timestamps`] got for a socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TsMode {
    /// No kernel timestamps.
    None,
    /// SO_TIMESTAMPNS: receive timestamps only.
    RxOnly,
    /// SO_TIMESTAMPING with software TX and RX timestamps and per-send ids (OPT_ID).
    TxRx,
}

/// Turn on the best software timestamping the kernel gives a datagram or raw socket: TX and RX
/// stamps with per-send keys (SO_TIMESTAMPING, OPT_ID, OPT_TSONLY), else receive stamps only
/// (SO_TIMESTAMPNS), else none.
pub fn enable_timestamps(fd: RawFd) -> TsMode {
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
pub fn enable_recv_ttl(fd: RawFd, v6: bool) -> io::Result<()> {
    if v6 {
        set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, 1)
    } else {
        set_int(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, 1)
    }
}

/// Queue ICMP errors about this socket's packets on its error queue (IP_RECVERR).
pub fn enable_recv_err(fd: RawFd, v6: bool) -> io::Result<()> {
    if v6 {
        set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVERR, 1)
    } else {
        set_int(fd, libc::IPPROTO_IP, libc::IP_RECVERR, 1)
    }
}

/// An extended error from the error queue (`struct sock_extended_err`, linux/errqueue.h).
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
    /// For timestamps: which stamp (SCM_TSTAMP_SND, SCM_TSTAMP_SCHED …).
    pub info: u32,
    /// For timestamps: the OPT_ID key of the send.
    pub data: u32,
    /// The address of the node that sent the ICMP error.
    pub offender: Option<IpAddr>,
}

/// What the control messages of one received message said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Control {
    /// Kernel receive (or, on the error queue, transmit) timestamp, CLOCK_REALTIME ns: the
    /// software stamp, or the hardware one when only that is present.
    pub kernel_ns: Option<u64>,
    /// TTL / hop limit of the packet, when asked for.
    pub ttl: Option<u8>,
    /// An extended error (error queue only).
    pub err: Option<ExtErr>,
    /// The segment size of a UDP GRO-coalesced datagram.
    pub gro_size: Option<usize>,
}

/// One received message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Msg {
    /// Bytes of data (more than the buffer held when MSG_TRUNC was asked for and it was cut).
    pub len: usize,
    /// The sender, when the socket reports one.
    pub from: Option<SocketAddr>,
    /// What the control messages said.
    pub control: Control,
}

/// `recvmsg` into `buf` with room for the sender's address and the control messages above;
/// `flags` as recvmsg(2) takes them (MSG_ERRQUEUE, MSG_DONTWAIT, MSG_TRUNC …). Nothing is
/// allocated: this is on every probe's and every timed exchange's path.
pub fn recv(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<Msg> {
    // 8-byte aligned control buffer, large enough for timestamps + TTL + an extended error.
    let mut control = [0u64; 64];
    // SAFETY: plain old data; all-zero is a valid value.
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
    // SAFETY: mh describes valid buffers (name, iov, control) for the duration of the call.
    let n = unsafe { libc::recvmsg(fd, &mut mh, flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Msg {
        len: n as usize,
        from: socket_addr(&from, mh.msg_namelen),
        // SAFETY: the kernel filled mh's control buffer and set msg_controllen.
        control: unsafe { parse_control(&mh) },
    })
}

/// [`recv`] without blocking: `Ok(None)` when nothing is queued.
pub fn try_recv(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<Option<Msg>> {
    match recv(fd, buf, flags | libc::MSG_DONTWAIT) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

fn ts_ns(ts: &libc::timespec) -> Option<u64> {
    let ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    (ns != 0).then_some(ns)
}

/// Read a `T` from the start of `data`, if it is long enough.
fn read<T: Copy>(data: &[u8]) -> Option<T> {
    // SAFETY: `data` holds at least size_of::<T>() bytes, read unaligned; callers only ask for
    // plain C types (integers, timespec, sock_extended_err) for which any bytes are valid.
    (data.len() >= size_of::<T>())
        .then(|| unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) })
}

/// The control messages of a message the kernel received into `h`.
///
/// # Safety
/// `h` must have been filled by `recvmsg`/`recvmmsg`: its `msg_control` points to a live buffer
/// of at least `msg_controllen` bytes, as the kernel left it.
pub unsafe fn parse_control(h: &libc::msghdr) -> Control {
    let mut out = Control::default();
    // SAFETY: CMSG_* walk the control buffer the kernel filled, within msg_controllen (the
    // caller's promise); each payload is a slice of its cmsg_len.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            let dlen = ((*c).cmsg_len as usize).saturating_sub(data as usize - c as usize);
            let data = std::slice::from_raw_parts(data, dlen);
            parse_one(&mut out, (*c).cmsg_level, (*c).cmsg_type, data);
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    out
}

fn parse_one(out: &mut Control, level: libc::c_int, ty: libc::c_int, data: &[u8]) {
    match (level, ty) {
        (libc::SOL_SOCKET, libc::SCM_TIMESTAMPING) => {
            // scm_timestamping: [0] software, [1] deprecated, [2] hardware.
            if let Some(t) = read::<[libc::timespec; 3]>(data) {
                out.kernel_ns = ts_ns(&t[0]).or(ts_ns(&t[2]));
            }
        }
        (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
            if let Some(t) = read::<libc::timespec>(data) {
                out.kernel_ns = ts_ns(&t);
            }
        }
        (libc::IPPROTO_IP, libc::IP_TTL) | (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => {
            if let Some(v) = read::<libc::c_int>(data) {
                out.ttl = u8::try_from(v).ok();
            }
        }
        (libc::IPPROTO_IP, libc::IP_RECVERR) | (libc::IPPROTO_IPV6, libc::IPV6_RECVERR) => {
            if let Some(ee) = read::<libc::sock_extended_err>(data) {
                // SO_EE_OFFENDER: the offender's address follows the error.
                let offender = address(&data[size_of::<libc::sock_extended_err>()..]);
                out.err = Some(ExtErr {
                    errno: ee.ee_errno,
                    origin: ee.ee_origin,
                    icmp_type: ee.ee_type,
                    icmp_code: ee.ee_code,
                    info: ee.ee_info,
                    data: ee.ee_data,
                    offender: offender.map(|a| a.ip()),
                });
            }
        }
        (libc::SOL_UDP, libc::UDP_GRO) => {
            if let Some(v) = read::<libc::c_int>(data) {
                out.gro_size = usize::try_from(v).ok().filter(|v| *v > 0);
            }
        }
        _ => {}
    }
}

/// The address the kernel wrote into `s` (`len` bytes), if it is IPv4 or IPv6.
pub fn socket_addr(s: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = (len as usize).min(size_of::<libc::sockaddr_storage>());
    // SAFETY: `s` is a live sockaddr_storage; `len` is clamped to its size.
    let bytes =
        unsafe { std::slice::from_raw_parts((s as *const libc::sockaddr_storage).cast(), len) };
    address(bytes)
}

/// Decode a kernel socket address (IPv4 or IPv6) from its bytes.
fn address(bytes: &[u8]) -> Option<SocketAddr> {
    let family = read::<libc::sa_family_t>(bytes)?;
    match i32::from(family) {
        libc::AF_INET => {
            let sin = read::<libc::sockaddr_in>(bytes)?;
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            let sin6 = read::<libc::sockaddr_in6>(bytes)?;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    #[test]
    fn addresses_decode_both_families_and_refuse_short_ones() {
        for a in ["192.0.2.7:4242", "[2001:db8::1%3]:53"] {
            let a: SocketAddr = a.parse().unwrap();
            let sa = socket2::SockAddr::from(a);
            // SAFETY: SockAddr's storage is a sockaddr_storage.
            let s = unsafe { &*sa.as_ptr().cast::<libc::sockaddr_storage>() };
            assert_eq!(socket_addr(s, sa.len()), Some(a));
            assert_eq!(socket_addr(s, sa.len() - 1), None);
        }
    }

    #[test]
    fn udp_loopback_sender_ttl_and_an_empty_queue() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_recv_ttl(a.as_raw_fd(), false).unwrap();
        b.set_ttl(42).unwrap();
        b.send_to(b"hello", a.local_addr().unwrap()).unwrap();
        a.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 2];
        let m = recv(a.as_raw_fd(), &mut buf, libc::MSG_TRUNC).unwrap();
        assert_eq!(m.len, 5, "MSG_TRUNC: the whole datagram's length");
        assert_eq!(m.from, Some(b.local_addr().unwrap()));
        assert_eq!(m.control.ttl, Some(42));
        assert!(try_recv(a.as_raw_fd(), &mut buf, 0).unwrap().is_none());
        assert!(
            try_recv(a.as_raw_fd(), &mut buf, libc::MSG_ERRQUEUE)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn udp_loopback_timestamps_on_the_realtime_clock() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.set_nonblocking(true).unwrap();
        let mode = enable_timestamps(a.as_raw_fd());
        assert_ne!(mode, TsMode::None, "this kernel supports socket timestamps");
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        // Timestamping is switched on globally from a workqueue: the first datagrams after
        // enabling it may carry none. Within a few tries one must.
        let mut stamped = None;
        for _ in 0..20 {
            let before = crate::clock::realtime_ns();
            b.send_to(b"hello", a.local_addr().unwrap()).unwrap();
            crate::poll::readable(&[a.as_raw_fd()], Duration::from_secs(2)).unwrap();
            let mut buf = [0u8; 64];
            let m = try_recv(a.as_raw_fd(), &mut buf, 0)
                .unwrap()
                .expect("a message");
            assert_eq!(m.len, 5);
            if let Some(k) = m.control.kernel_ns {
                stamped = Some((before, k));
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let (before, k) = stamped.expect("a kernel RX timestamp");
        assert!(
            k + 1_000_000 >= before && k <= crate::clock::realtime_ns() + 1_000_000,
            "timestamp on CLOCK_REALTIME"
        );
    }
}
