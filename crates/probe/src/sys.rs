//! What only probes do with sockets: classic BPF filters that let a raw TCP or ICMP socket see
//! only its own probes' answers, the ICMP type filter of raw ICMP sockets, and the names of the
//! clocks a run's RTTs came from. Everything general — sockets (socket2), socket options,
//! `recvmsg` with its timestamps, TTLs and queued errors ([`latscope_sys::msg`]), `ppoll`
//! ([`latscope_sys::poll`]), `tcp_info` — lives in latscope-sys, one place for each call.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Duration;

use socket2::{Domain, Protocol, SockFilter, Socket, Type};

use latscope_sys::msg;
pub use latscope_sys::msg::{Msg, TsMode};

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

/// The address family of IPv6 (`v6`) or IPv4.
pub fn domain(v6: bool) -> Domain {
    if v6 { Domain::IPV6 } else { Domain::IPV4 }
}

/// A non-blocking, close-on-exec socket (socket2 sets close-on-exec).
pub fn socket(v6: bool, ty: Type, proto: libc::c_int) -> io::Result<Socket> {
    Socket::new(domain(v6), ty.nonblocking(), Some(Protocol::from(proto)))
}

/// The port a socket is bound to (`getsockname`).
pub fn local_port(s: &Socket) -> io::Result<u16> {
    s.local_addr()?
        .as_socket()
        .map(|a| a.port())
        .ok_or_else(|| io::Error::other("getsockname returned an unknown address family"))
}

/// `sendto` (or `send` when `to` is None, on a connected socket).
pub fn send_to(s: &Socket, data: &[u8], to: Option<SocketAddr>) -> io::Result<usize> {
    match to {
        Some(to) => s.send_to(data, &to.into()),
        None => s.send(data),
    }
}

/// Set the TTL / hop limit of outgoing unicast packets.
pub fn set_ttl(s: &Socket, v6: bool, ttl: u8) -> io::Result<()> {
    if v6 {
        s.set_unicast_hops_v6(u32::from(ttl))
    } else {
        s.set_ttl_v4(u32::from(ttl))
    }
}

/// The source address the kernel would use to reach `dst` (a connected UDP socket's name).
pub fn source_for(dst: IpAddr) -> io::Result<IpAddr> {
    let s = socket(dst.is_ipv6(), Type::DGRAM, 0)?;
    s.connect(&SocketAddr::new(dst, 9).into())?;
    s.local_addr()?
        .as_socket()
        .map(|a| a.ip())
        .ok_or_else(|| io::Error::other("getsockname returned an unknown address family"))
}

/// Read one queued message of a probe socket (its error queue with `errqueue`) without
/// blocking: `Ok(None)` when nothing is queued; the length is the datagram's even when `buf`
/// held only its start (MSG_TRUNC).
pub fn recv_msg(s: &Socket, buf: &mut [u8], errqueue: bool) -> io::Result<Option<Msg>> {
    let flags = libc::MSG_TRUNC | if errqueue { libc::MSG_ERRQUEUE } else { 0 };
    msg::try_recv(s.as_raw_fd(), buf, flags)
}

/// The kernel's RTT estimate of a TCP connection (`TCP_INFO` tcpi_rtt, microseconds). Right
/// after the handshake it is the SYN → SYN-ACK sample, timed in the kernel (tcp_ack_update_rtt
/// in net/ipv4/tcp_input.c), so scheduling delays of the caller do not enter it.
pub fn tcp_rtt_us(s: &Socket) -> Option<u32> {
    let info = latscope_sys::tcpinfo::read(s.as_raw_fd()).ok()?;
    (info.rtt_us > 0 && info.total_retrans == 0).then_some(info.rtt_us)
}

/// `SO_LINGER {on, 0}`: close() sends RST instead of FIN, leaving no TIME_WAIT behind.
pub fn set_linger_zero(s: &Socket) -> io::Result<()> {
    s.set_linger(Some(Duration::ZERO))
}

// Classic BPF (include/uapi/linux/filter.h, bpf_common.h): the instructions the filters use.
const LD_W: u16 = 0x00; // BPF_LD | BPF_W
const LD_H: u16 = 0x08; // BPF_LD | BPF_H
const LD_B: u16 = 0x10; // BPF_LD | BPF_B
const ABS: u16 = 0x20; // BPF_ABS: load at offset k of the packet
const IND: u16 = 0x40; // BPF_IND: load at offset X + k
const LDX_B_MSH: u16 = 0xb1; // BPF_LDX | BPF_B | BPF_MSH: X = 4 * ([k] & 0xf)
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K

fn bpf(code: u16, jt: u8, jf: u8, k: u32) -> SockFilter {
    SockFilter::new(code, jt, jf, k)
}

/// The end of every filter here: load the 16-bit field at `k` (`mode` [`ABS`] or [`IND`]) and
/// accept the packet if it is `value`, drop it if not.
fn accept_if_u16(mode: u16, k: u32, value: u16) -> [SockFilter; 4] {
    [
        bpf(LD_H | mode, 0, 0, k),
        bpf(JEQ_K, 0, 1, u32::from(value)),
        bpf(RET_K, 0, 0, 0xffff),
        bpf(RET_K, 0, 0, 0),
    ]
}

/// Attach a classic BPF filter to a raw TCP socket so the kernel hands it only segments from
/// `peer`'s port `port` (from `peer` itself, for IPv4 where the IP header is visible): a raw
/// TCP socket otherwise gets a copy of every TCP segment the host receives.
pub fn attach_tcp_filter(s: &Socket, peer: IpAddr, port: u16) -> io::Result<()> {
    let prog: Vec<SockFilter> = match peer {
        // Raw IPv4 sockets see the IP header: source address at 12 (else to the final drop),
        // then the TCP source port at the header length.
        IpAddr::V4(a) => [
            bpf(LD_W | ABS, 0, 0, 12),
            bpf(JEQ_K, 0, 4, u32::from_be_bytes(a.octets())),
            bpf(LDX_B_MSH, 0, 0, 0),
        ]
        .into_iter()
        .chain(accept_if_u16(IND, 0, port))
        .collect(),
        // Raw IPv6 sockets start at the TCP header.
        IpAddr::V6(_) => accept_if_u16(ABS, 0, port).into_iter().collect(),
    };
    s.attach_filter(&prog)
}

/// Attach a classic BPF filter to a raw ICMP / ICMPv6 socket that drops echo replies whose id
/// is not `ident` (other programs' pings); errors pass (the type test jumps to the accept), and
/// are matched in user space.
pub fn attach_echo_filter(s: &Socket, v6: bool, ident: u16) -> io::Result<()> {
    let prog: Vec<SockFilter> = if v6 {
        // ICMPv6 raw sockets start at the ICMPv6 header.
        [bpf(LD_B | ABS, 0, 0, 0), bpf(JEQ_K, 0, 2, 129)]
            .into_iter()
            .chain(accept_if_u16(ABS, 4, ident))
            .collect()
    } else {
        // IPv4 raw sockets start at the IP header: the ICMP header is at its length.
        [
            bpf(LDX_B_MSH, 0, 0, 0),
            bpf(LD_B | IND, 0, 0, 0),
            bpf(JEQ_K, 0, 2, 0),
        ]
        .into_iter()
        .chain(accept_if_u16(IND, 4, ident))
        .collect()
    };
    s.attach_filter(&prog)
}

/// Let a raw ICMP / ICMPv6 socket receive only the message types in `pass` (ICMP_FILTER,
/// ICMP6_FILTER in linux/icmp.h, linux/icmpv6.h: a set bit blocks a type), and give it a
/// bigger receive buffer: a raw ICMP socket otherwise queues every ICMP message of the host,
/// and a busy neighbour's pings could overflow it.
pub fn restrict_icmp(s: &Socket, v6: bool, pass: &[u8]) -> io::Result<()> {
    let _ = s.set_recv_buffer_size(4 << 20);
    if v6 {
        const ICMP6_FILTER: libc::c_int = 1;
        let mut blocked = [u32::MAX; 8];
        for &t in pass {
            blocked[usize::from(t >> 5)] &= !(1u32 << (t & 31));
        }
        latscope_sys::sockopt::set_raw(s.as_raw_fd(), libc::IPPROTO_ICMPV6, ICMP6_FILTER, &blocked)
    } else {
        const ICMP_FILTER: libc::c_int = 1;
        let mut blocked = u32::MAX;
        for &t in pass.iter().filter(|t| **t < 32) {
            blocked &= !(1u32 << t);
        }
        latscope_sys::sockopt::set_raw(s.as_raw_fd(), libc::SOL_RAW, ICMP_FILTER, &blocked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use latscope_sys::poll;

    #[test]
    fn tcp_filter_passes_only_the_peer_port() {
        let Ok(raw) = socket(false, Type::RAW, libc::IPPROTO_TCP) else {
            eprintln!("skipped: no CAP_NET_RAW");
            return;
        };
        // A closed port (bound, never listening) answers SYNs with RST.
        let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let other = holder.local_addr().expect("addr");
        let closed = {
            let s = socket(false, Type::STREAM, 0).expect("socket");
            let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
            s.bind(&any.into()).expect("bind");
            let p = local_port(&s).expect("addr");
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
        poll::readable(&[raw.as_raw_fd()], Duration::from_secs(2)).expect("poll");
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
            let (proto, lo) = if v6 {
                (libc::IPPROTO_ICMPV6, "::1")
            } else {
                (libc::IPPROTO_ICMP, "127.0.0.1")
            };
            let Ok(raw) = socket(v6, Type::RAW, proto) else {
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
            poll::readable(&[raw.as_raw_fd()], Duration::from_secs(2)).expect("poll");
            let m = recv_msg(&raw, &mut buf, false)
                .expect("recv")
                .expect("our reply");
            let icmp = if v6 { &buf[..m.len] } else { &buf[20..m.len] };
            assert_eq!(crate::packet::parse_echo(icmp), Some((ours, 2)), "v6={v6}");
        }
    }
}
