//! `/proc/PID/net/{tcp,tcp6,udp,udp6}`: the sockets of a process's network namespace as text.
//! Less than sock_diag gives (no tcp_info, no memory), but readable without entering the
//! namespace and without CAP_SYS_PTRACE or CAP_SYS_ADMIN, so latscope still lists the sockets of
//! namespaces (containers) it is not allowed to enter.
//!
//! Format (net/ipv4/tcp_ipv4.c get_tcp4_sock, net/ipv6/tcp_ipv6.c, net/ipv4/udp.c): addresses
//! are the raw 32-bit words printed with %08X (so in host byte order), ports are %04X numbers.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::socket::{DiagSocket, Proto};

fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(
            u32::from_str_radix(ip, 16).ok()?.to_ne_bytes(),
        )),
        32 => {
            let mut b = [0u8; 16];
            for (i, chunk) in b.chunks_mut(4).enumerate() {
                let w = u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok()?;
                chunk.copy_from_slice(&w.to_ne_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Parse the text of one `/proc/net/{tcp,tcp6,udp,udp6}` file. Lines that do not parse are
/// skipped.
pub fn parse(proto: Proto, text: &str) -> Vec<DiagSocket> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
            if f.len() < 10 {
                return None;
            }
            Some(DiagSocket {
                proto,
                local: parse_addr(f[1])?,
                remote: parse_addr(f[2])?,
                state: u8::from_str_radix(f[3], 16).ok()?,
                uid: f[7].parse().ok()?,
                inode: f[9].parse().ok()?,
                tcp: None,
                mem: None,
            })
        })
        .collect()
}

/// Every TCP/UDP socket of the network namespace process `pid` lives in; files that cannot be
/// read (the process exited, no IPv6) contribute nothing.
pub fn sockets_of(pid: u32) -> Vec<DiagSocket> {
    let mut out = Vec::new();
    for (file, proto) in [
        ("tcp", Proto::Tcp),
        ("tcp6", Proto::Tcp),
        ("udp", Proto::Udp),
        ("udp6", Proto::Udp),
    ] {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{file}")) {
            out.extend(parse(proto, &text));
        }
    }
    out
}

/// Like [`sockets_of`], but only the first time a namespace is met: `/proc/PID/net/tcp` has one
/// inode per network namespace, so `seen` (inodes met so far) skips namespaces already read —
/// the host namespace is shared by most processes, and its files can be large.
pub fn sockets_of_new_ns(pid: u32, seen: &mut std::collections::HashSet<u64>) -> Vec<DiagSocket> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(format!("/proc/{pid}/net/tcp")) {
        Ok(m) if !seen.insert(m.ino()) => Vec::new(),
        _ => sockets_of(pid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v4_and_v6_lines() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:115C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1195191 1 00000000e01e0f0f 100 0 0 10 0\n   1: garbage\n";
        let v = parse(Proto::Tcp, v4);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].local, "127.0.0.1:4444".parse().expect("addr"));
        assert_eq!(v[0].state, 10);
        assert_eq!(v[0].inode, 1195191);
        // ::1 port 80, as the kernel prints it on a little-endian machine.
        let v6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000   101        0 777 1 0000000000000000 100 0 0 10 0\n";
        if cfg!(target_endian = "little") {
            let v = parse(Proto::Tcp, v6);
            assert_eq!(v[0].local, "[::1]:80".parse().expect("addr"));
            assert_eq!(v[0].uid, 101);
        }
    }

    #[test]
    fn agrees_with_sock_diag_on_own_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let from_proc = sockets_of(std::process::id());
        let p = from_proc
            .iter()
            .find(|s| s.local.port() == port && s.state == 10)
            .expect("listed in /proc");
        let from_diag = crate::diag::dump_all().expect("sock_diag").sockets;
        let d = from_diag
            .iter()
            .find(|s| s.inode == p.inode)
            .expect("same inode in sock_diag");
        assert_eq!(
            (d.local, d.remote, d.state, d.uid),
            (p.local, p.remote, p.state, p.uid)
        );
    }
}
