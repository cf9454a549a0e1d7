//! NETLINK_SOCK_DIAG / inet_diag (include/uapi/linux/inet_diag.h): every TCP and UDP socket of
//! the calling thread's network namespace, with tcp_info, congestion control and socket memory.
//! This is what `ss -tuiem` reads; it needs no privilege for sockets of the own namespace.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use latscope_core::model::sockets::SocketMemory;

use crate::error::{InspectError, Result};
use crate::netlink::{self, NLM_F_DUMP, NLM_F_REQUEST, Netlink, u32_at};
use crate::socket::{DiagSocket, Proto};
use crate::tcpinfo;

const NETLINK_SOCK_DIAG: i32 = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// Attribute types (enum in inet_diag.h).
const INET_DIAG_INFO: u16 = 2;
const INET_DIAG_CONG: u16 = 4;
const INET_DIAG_SKMEMINFO: u16 = 7;
/// `struct inet_diag_msg` is 72 bytes before its attributes.
const DIAG_MSG_LEN: usize = 72;

/// The sockets of one namespace, and what the reader should know about how they were read.
#[derive(Debug, Default)]
pub struct Listing {
    /// The sockets found.
    pub sockets: Vec<DiagSocket>,
    /// What the reader should know about how they were read (fallbacks, truncation).
    pub notes: Vec<String>,
}

/// Dump every TCP and UDP socket (IPv4 and IPv6) of the calling thread's network namespace.
///
/// Where the kernel has no sock_diag handler for a protocol (`ENOENT`: the tcp_diag/udp_diag
/// module is not loaded and cannot be — module loading disabled, a container or a VM without
/// the kernel's modules), that protocol's sockets come from `/proc/thread-self/net` instead,
/// without tcp_info or memory, and a note says so, rather than silently listing nothing.
pub fn dump_all() -> Result<Listing> {
    let mut nl = Netlink::open(NETLINK_SOCK_DIAG)?;
    let mut out = Listing::default();
    for proto in [Proto::Tcp, Proto::Udp] {
        let mut from_proc = false;
        for family in [libc::AF_INET, libc::AF_INET6] {
            if dump(&mut nl, family as u8, proto, &mut out.sockets)? == Dumped::NoHandler {
                let file = match (proto, family) {
                    (Proto::Tcp, libc::AF_INET) => "tcp",
                    (Proto::Tcp, _) => "tcp6",
                    (Proto::Udp, libc::AF_INET) => "udp",
                    (Proto::Udp, _) => "udp6",
                };
                if let Ok(text) = std::fs::read_to_string(format!("/proc/thread-self/net/{file}")) {
                    out.sockets.extend(crate::procnet::parse(proto, &text));
                    from_proc = true;
                }
            }
        }
        if from_proc {
            let p = proto.name();
            let without = match proto {
                Proto::Tcp => "tcp_info or socket memory",
                Proto::Udp => "socket memory",
            };
            out.notes.push(format!(
                "the kernel has no sock_diag handler for {p} here (the {p}_diag module is not \
                 loaded and could not be): {p} sockets read from /proc/net, without {without}"
            ));
        }
    }
    Ok(out)
}

#[derive(Debug, PartialEq, Eq)]
enum Dumped {
    Done,
    /// `ENOENT`: no inet_diag / tcp_diag / udp_diag handler in this kernel.
    NoHandler,
}

fn request(family: u8, proto: Proto) -> Vec<u8> {
    // struct inet_diag_req_v2: family, protocol, ext, pad, states, inet_diag_sockid (48 bytes).
    let mut req = vec![0u8; 56];
    req[0] = family;
    req[1] = match proto {
        Proto::Tcp => libc::IPPROTO_TCP as u8,
        Proto::Udp => libc::IPPROTO_UDP as u8,
    };
    // idiag_ext: bit (attr - 1) asks for attribute `attr`.
    req[2] = (1 << (INET_DIAG_INFO - 1))
        | (1 << (INET_DIAG_CONG - 1))
        | (1 << (INET_DIAG_SKMEMINFO - 1));
    req[4..8].copy_from_slice(&u32::MAX.to_ne_bytes()); // every state
    // Cookie "no cookie" (~0) so the kernel does not try to match one.
    req[48..56].copy_from_slice(&[0xff; 8]);
    req
}

fn dump(nl: &mut Netlink, family: u8, proto: Proto, out: &mut Vec<DiagSocket>) -> Result<Dumped> {
    let replies = match nl.request(
        SOCK_DIAG_BY_FAMILY,
        NLM_F_REQUEST | NLM_F_DUMP,
        &request(family, proto),
    ) {
        Ok(r) => r,
        Err(InspectError::Io { source, .. }) if source.raw_os_error() == Some(libc::ENOENT) => {
            return Ok(Dumped::NoHandler);
        }
        // No IPv6: nothing of that kind to show.
        Err(InspectError::Io { source, .. })
            if matches!(
                source.raw_os_error(),
                Some(libc::EAFNOSUPPORT) | Some(libc::EINVAL)
            ) =>
        {
            return Ok(Dumped::Done);
        }
        Err(e) => return Err(e),
    };
    for (ty, body) in replies {
        if ty != SOCK_DIAG_BY_FAMILY {
            continue;
        }
        out.push(parse_msg(proto, &body)?);
    }
    Ok(Dumped::Done)
}

fn addr(family: u8, b: &[u8], port_be: [u8; 2]) -> SocketAddr {
    let port = u16::from_be_bytes(port_be);
    let ip = if family == libc::AF_INET as u8 {
        IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
    } else {
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[..16]);
        IpAddr::V6(Ipv6Addr::from(a))
    };
    SocketAddr::new(ip, port)
}

/// Parse one `struct inet_diag_msg` and its attributes.
pub fn parse_msg(proto: Proto, b: &[u8]) -> Result<DiagSocket> {
    if b.len() < DIAG_MSG_LEN {
        return Err(InspectError::Malformed {
            what: "sock_diag message".into(),
            detail: format!("{} bytes, expected at least {DIAG_MSG_LEN}", b.len()),
        });
    }
    let family = b[0];
    let state = b[1];
    // inet_diag_sockid at offset 4: sport, dport (big endian), src[16], dst[16], if, cookie.
    let local = addr(family, &b[8..24], [b[4], b[5]]);
    let remote = addr(family, &b[24..40], [b[6], b[7]]);
    let uid = u32_at(b, 64);
    let inode = u64::from(u32_at(b, 68));
    let mut tcp = None;
    let mut cong = None;
    let mut mem = None;
    for (ty, p) in netlink::attrs(&b[DIAG_MSG_LEN..]) {
        match ty {
            INET_DIAG_INFO if proto == Proto::Tcp => tcp = tcpinfo::parse(p),
            INET_DIAG_CONG => {
                let s = p.split(|&c| c == 0).next().unwrap_or(&[]);
                cong = Some(String::from_utf8_lossy(s).into_owned());
            }
            INET_DIAG_SKMEMINFO if p.len() >= 36 => {
                mem = Some(SocketMemory {
                    rmem_alloc: u32_at(p, 0),
                    rcvbuf: u32_at(p, 4),
                    wmem_queued: u32_at(p, 20),
                    sndbuf: u32_at(p, 12),
                    drops: u32_at(p, 32),
                });
            }
            _ => {}
        }
    }
    if let Some(t) = tcp.as_mut() {
        t.congestion = cong;
    }
    Ok(DiagSocket {
        proto,
        local,
        remote,
        state,
        inode,
        uid,
        tcp,
        mem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::state_name;

    #[test]
    fn parses_a_v4_message_with_attributes() {
        let mut b = vec![0u8; DIAG_MSG_LEN];
        b[0] = libc::AF_INET as u8;
        b[1] = 10; // LISTEN
        b[4..6].copy_from_slice(&8080u16.to_be_bytes());
        b[8..12].copy_from_slice(&[127, 0, 0, 1]);
        b[64..68].copy_from_slice(&1000u32.to_ne_bytes());
        b[68..72].copy_from_slice(&4242u32.to_ne_bytes());
        netlink::push_attr(&mut b, INET_DIAG_CONG, b"cubic\0");
        let mut info = vec![0u8; 232];
        info[68..72].copy_from_slice(&500u32.to_ne_bytes());
        netlink::push_attr(&mut b, INET_DIAG_INFO, &info);
        let s = parse_msg(Proto::Tcp, &b).expect("parses");
        assert_eq!(s.local, "127.0.0.1:8080".parse().expect("addr"));
        assert_eq!(s.inode, 4242);
        assert_eq!(s.uid, 1000);
        assert_eq!(state_name(s.proto, s.state), "LISTEN");
        let t = s.tcp.expect("tcp_info");
        assert_eq!(t.rtt_us, 500);
        assert_eq!(t.congestion.as_deref(), Some("cubic"));
    }

    #[test]
    fn garbage_messages_and_tcp_info_do_not_panic() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for n in 0..3000usize {
            let b: Vec<u8> = (0..n % 400)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = parse_msg(Proto::Tcp, &b);
            let _ = parse_msg(Proto::Udp, &b);
            let _ = tcpinfo::parse(&b);
            let _ = crate::route::parse_metrics(&b);
        }
    }

    #[test]
    fn rejects_short_message() {
        assert!(parse_msg(Proto::Tcp, &[0u8; 10]).is_err());
    }
}
