//! Packet building and parsing for probes, without syscalls: the Internet checksum, TCP SYN
//! segments, ICMP echo requests, UDP probe payloads whose checksum never changes (Paris
//! traceroute), and the parsing of replies and ICMP errors with the header they quote.
//! IP and TCP headers are read through the wire crate's checked views (one parser for both);
//! the ICMP messages and latscope's probe payloads, which the wire crate does not decode, are
//! read here.

use std::net::IpAddr;

use latscope_wire::packet::{Ipv4View, Ipv6View, TcpView};

/// IP protocol number of ICMP.
pub const PROTO_ICMP: u8 = 1;
/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// IP protocol number of ICMPv6.
pub const PROTO_ICMPV6: u8 = 58;

/// TCP flag: finish.
pub const TCP_FIN: u8 = 0x01;
/// TCP flag: synchronize.
pub const TCP_SYN: u8 = 0x02;
/// TCP flag: reset.
pub const TCP_RST: u8 = 0x04;
/// TCP flag: push.
pub const TCP_PSH: u8 = 0x08;
/// TCP flag: acknowledgment field valid.
pub const TCP_ACK: u8 = 0x10;

/// The first bytes of every UDP probe payload: latscope serve's echo request (`LSP1` + 0x01).
pub const LSP_MAGIC: &[u8; 4] = b"LSP1";
/// latscope serve's echo request / reply codes (byte 4 of the datagram).
pub const LSP_ECHO_REQUEST: u8 = 0x01;
/// latscope serve's echo reply code.
pub const LSP_ECHO_REPLY: u8 = 0x02;
/// Size of the fixed part of a UDP probe payload (magic, code, pad, id, compensation word).
pub const UDP_PROBE_MIN: usize = 10;
/// Size of the fixed part of an ICMP echo payload written by latscope (compensation word).
pub const ICMP_PROBE_MIN: usize = 2;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

#[cfg(test)]
fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
        *b.get(at + 2)?,
        *b.get(at + 3)?,
    ]))
}

/// Add `data` to a running one's-complement sum (RFC 1071), as big-endian 16-bit words.
pub fn sum16(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

/// Fold a running sum into the final Internet checksum (RFC 1071).
pub fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The transport pseudo-header sum (RFC 793 for IPv4, RFC 8200 §8.1 for IPv6).
pub fn pseudo_header_sum(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> u32 {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let acc = sum16(0, &s.octets());
            let acc = sum16(acc, &d.octets());
            acc + u32::from(proto) + len as u32
        }
        _ => {
            let s = match src {
                IpAddr::V6(a) => a.octets(),
                IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            };
            let d = match dst {
                IpAddr::V6(a) => a.octets(),
                IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            };
            let acc = sum16(0, &s);
            let acc = sum16(acc, &d);
            acc + ((len as u32) >> 16) + (len as u32 & 0xffff) + u32::from(proto)
        }
    }
}

/// A 20-byte TCP SYN segment (no options) with its checksum over the pseudo-header.
pub fn tcp_syn(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, seq: u32) -> [u8; 20] {
    let mut h = [0u8; 20];
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h[4..8].copy_from_slice(&seq.to_be_bytes());
    h[12] = 5 << 4; // data offset: 5 words
    h[13] = TCP_SYN;
    h[14..16].copy_from_slice(&64240u16.to_be_bytes()); // Linux's default SYN window
    let acc = sum16(pseudo_header_sum(src, dst, PROTO_TCP, h.len()), &h);
    h[16..18].copy_from_slice(&fold(acc).to_be_bytes());
    h
}

/// The fields of a received TCP segment that ping and trace use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSegment {
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Flag bits (`TCP_SYN`, ...).
    pub flags: u8,
}

/// Parse a whole TCP header (with its options) through the wire crate's checked view.
pub fn parse_tcp(b: &[u8]) -> Option<TcpSegment> {
    let t = TcpView::new_checked(b).ok()?;
    Some(TcpSegment {
        sport: t.src_port(),
        dport: t.dst_port(),
        seq: t.seq(),
        ack: t.ack(),
        flags: t.flags(),
    })
}

/// hping3-style flag letters: `SA`, `RA`, ...
pub fn tcp_flag_letters(flags: u8) -> String {
    let mut s = String::new();
    for (bit, c) in [
        (TCP_FIN, 'F'),
        (TCP_SYN, 'S'),
        (TCP_RST, 'R'),
        (TCP_PSH, 'P'),
        (TCP_ACK, 'A'),
    ] {
        if flags & bit != 0 {
            s.push(c);
        }
    }
    s
}

/// A parsed IPv4 header: what follows it and who sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Header {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Protocol of the payload.
    pub proto: u8,
    /// Time to live.
    pub ttl: u8,
    /// Identification field.
    pub id: u16,
    /// Header length in bytes.
    pub header_len: usize,
}

/// Parse an IPv4 header (as read from a raw IPv4 socket, or quoted in an ICMP error).
pub fn parse_ipv4(b: &[u8]) -> Option<Ipv4Header> {
    let h = Ipv4View::new_checked(b).ok()?;
    Some(Ipv4Header {
        src: IpAddr::from(h.src()),
        dst: IpAddr::from(h.dst()),
        proto: h.protocol(),
        ttl: h.ttl(),
        id: h.ident(),
        header_len: h.header_len(),
    })
}

/// ICMP message kinds that matter to ping and trace, for IPv4 and IPv6 alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcmpKind {
    /// Echo reply (the destination answered an echo request).
    EchoReply,
    /// Time exceeded in transit (a router on the path).
    TimeExceeded,
    /// Port unreachable (the destination: nothing listens on the UDP port).
    PortUnreachable,
    /// Administratively prohibited (a firewall rejects).
    Prohibited,
    /// Host unreachable (v4 codes 1, 7, 12; ICMPv6 address unreachable): a router has a route
    /// but the host does not answer on its link (ARP / neighbour discovery failed).
    HostUnreachable,
    /// Network unreachable (v4 codes 0, 6, 11; ICMPv6 no route to destination).
    NetUnreachable,
    /// Protocol unreachable (v4 code 2): the host does not speak the probe's protocol.
    ProtocolUnreachable,
    /// Another destination-unreachable code (fragmentation needed, source route failed, ...).
    Unreachable(u8),
    /// Anything else (ignored by the engines).
    Other(u8, u8),
}

/// Classify an ICMP (v4) or ICMPv6 type/code.
pub fn icmp_kind(v6: bool, ty: u8, code: u8) -> IcmpKind {
    if v6 {
        match (ty, code) {
            (129, _) => IcmpKind::EchoReply,
            (3, _) => IcmpKind::TimeExceeded,
            (1, 4) => IcmpKind::PortUnreachable,
            (1, 1) => IcmpKind::Prohibited,
            (1, 0) => IcmpKind::NetUnreachable,
            (1, 3) => IcmpKind::HostUnreachable,
            (1, c) => IcmpKind::Unreachable(c),
            (t, c) => IcmpKind::Other(t, c),
        }
    } else {
        match (ty, code) {
            (0, _) => IcmpKind::EchoReply,
            (11, _) => IcmpKind::TimeExceeded,
            (3, 3) => IcmpKind::PortUnreachable,
            (3, 9 | 10 | 13) => IcmpKind::Prohibited,
            (3, 0 | 6 | 11) => IcmpKind::NetUnreachable,
            (3, 1 | 7 | 12) => IcmpKind::HostUnreachable,
            (3, 2) => IcmpKind::ProtocolUnreachable,
            (3, c) => IcmpKind::Unreachable(c),
            (t, c) => IcmpKind::Other(t, c),
        }
    }
}

/// An ICMP echo request: type, code, checksum, id, seq, then `payload_len` bytes whose first
/// word compensates the sequence number, so the checksum is the same for every `seq` (the Paris
/// traceroute trick: per-flow load balancers that hash the first ICMP words see one flow).
/// The checksum is computed for `id`; ping sockets replace id and checksum themselves, and
/// still get a constant checksum since the id is constant per socket.
pub fn icmp_echo(v6: bool, id: u16, seq: u16, payload_len: usize) -> Vec<u8> {
    let mut p = vec![0u8; 8 + payload_len.max(ICMP_PROBE_MIN)];
    p[0] = if v6 { 128 } else { 8 };
    p[4..6].copy_from_slice(&id.to_be_bytes());
    p[6..8].copy_from_slice(&seq.to_be_bytes());
    p[8..10].copy_from_slice(&(!seq).to_be_bytes());
    for (i, b) in p[10..].iter_mut().enumerate() {
        *b = (i & 0xff) as u8;
    }
    if !v6 {
        // ICMPv6 checksums include the pseudo-header; the kernel fills them in for raw and
        // ping sockets alike.
        let c = fold(sum16(0, &p));
        p[2..4].copy_from_slice(&c.to_be_bytes());
    }
    p
}

/// The (id, seq) of an ICMP echo header.
pub fn parse_echo(b: &[u8]) -> Option<(u16, u16)> {
    Some((be16(b, 4)?, be16(b, 6)?))
}

/// A UDP probe payload: latscope serve's echo request (`LSP1` 0x01), a pad byte, the probe id
/// and its one's complement (so the UDP checksum does not depend on the id — Paris traceroute
/// keeps the whole flow, checksum included, constant), then filler up to `len` bytes.
pub fn udp_probe(id: u16, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len.max(UDP_PROBE_MIN)];
    p[0..4].copy_from_slice(LSP_MAGIC);
    p[4] = LSP_ECHO_REQUEST;
    p[6..8].copy_from_slice(&id.to_be_bytes());
    p[8..10].copy_from_slice(&(!id).to_be_bytes());
    for (i, b) in p[10..].iter_mut().enumerate() {
        *b = (i & 0xff) as u8;
    }
    p
}

/// The probe id of a UDP probe payload (`request`) or of latscope serve's echo of it.
pub fn parse_udp_probe(b: &[u8], want_code: u8) -> Option<u16> {
    if b.get(0..4)? != LSP_MAGIC || *b.get(4)? != want_code {
        return None;
    }
    let id = be16(b, 6)?;
    (be16(b, 8)? == !id).then_some(id)
}

/// The UDP checksum a probe carries on the wire (for tests and the Paris invariant).
pub fn udp_checksum(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, payload: &[u8]) -> u16 {
    let len = 8 + payload.len();
    let mut h = [0u8; 8];
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h[4..6].copy_from_slice(&(len as u16).to_be_bytes());
    let acc = sum16(pseudo_header_sum(src, dst, PROTO_UDP, len), &h);
    fold(sum16(acc, payload))
}

/// What an ICMP error quotes of the packet that caused it: enough to find the probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quote<'a> {
    /// Source and destination of the quoted (our) packet.
    pub src: IpAddr,
    /// Destination address of the quoted packet.
    pub dst: IpAddr,
    /// Protocol of the quoted packet's payload.
    pub proto: u8,
    /// The quoted transport header and whatever of the payload the router included.
    pub transport: &'a [u8],
}

/// An ICMP or ICMPv6 message as read from a raw socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IcmpMessage<'a> {
    /// What kind of ICMP message.
    pub kind: IcmpKind,
    /// The echo id/seq for echo replies.
    pub echo: Option<(u16, u16)>,
    /// The quoted packet for errors.
    pub quote: Option<Quote<'a>>,
}

/// Parse an ICMP message (starting at the ICMP header; for IPv4 raw sockets skip the IP header
/// first).
pub fn parse_icmp(v6: bool, b: &[u8]) -> Option<IcmpMessage<'_>> {
    let kind = icmp_kind(v6, *b.first()?, *b.get(1)?);
    let mut msg = IcmpMessage {
        kind,
        echo: None,
        quote: None,
    };
    match kind {
        IcmpKind::EchoReply => msg.echo = parse_echo(b),
        IcmpKind::Other(..) => {}
        _ => {
            let inner = b.get(8..)?;
            msg.quote = if v6 {
                parse_quoted_ipv6(inner)
            } else {
                parse_quoted_ipv4(inner)
            };
        }
    }
    Some(msg)
}

fn parse_quoted_ipv4(b: &[u8]) -> Option<Quote<'_>> {
    let h = parse_ipv4(b)?;
    Some(Quote {
        src: h.src,
        dst: h.dst,
        proto: h.proto,
        transport: b.get(h.header_len..)?,
    })
}

fn parse_quoted_ipv6(b: &[u8]) -> Option<Quote<'_>> {
    let h = Ipv6View::new_checked(b).ok()?;
    // Extension headers are not used by our probes; a quote with one is not ours.
    Some(Quote {
        src: IpAddr::from(h.src()),
        dst: IpAddr::from(h.dst()),
        proto: h.next_header(),
        transport: h.payload(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 4, 2));

    #[test]
    fn checksum_rfc1071_example() {
        // RFC 1071 §3: words 0001 f203 f4f5 f6f7 sum to ddf2 (before the complement).
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum16(0, &data)), !0xddf2);
        // An odd length pads with a zero byte.
        assert_eq!(fold(sum16(0, &[0x12])), !0x1200);
    }

    #[test]
    fn syn_checksum_verifies() {
        for (s, d) in [
            (A, B),
            (
                IpAddr::V6(Ipv6Addr::LOCALHOST),
                IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
            ),
        ] {
            let h = tcp_syn(s, d, 40000, 80, 0xdead_beef);
            // A correct checksum makes the whole sum fold to zero.
            assert_eq!(fold(sum16(pseudo_header_sum(s, d, PROTO_TCP, 20), &h)), 0);
            let seg = parse_tcp(&h).expect("parses");
            assert_eq!(
                (seg.sport, seg.dport, seg.seq, seg.flags),
                (40000, 80, 0xdead_beef, TCP_SYN)
            );
        }
    }

    #[test]
    fn echo_checksum_constant_across_seq() {
        let c: Vec<[u8; 2]> = (0..500u16)
            .map(|s| {
                let p = icmp_echo(false, 0x1234, s.wrapping_mul(131), 56);
                assert_eq!(fold(sum16(0, &p)), 0, "checksum valid");
                [p[2], p[3]]
            })
            .collect();
        assert!(
            c.iter().all(|x| *x == c[0]),
            "Paris: the ICMP checksum must not change with seq"
        );
        assert_eq!(parse_echo(&icmp_echo(false, 7, 9, 0)), Some((7, 9)));
    }

    #[test]
    fn udp_checksum_constant_across_ids() {
        let first = udp_checksum(A, B, 33434, 7373, &udp_probe(0, 64));
        for id in [1u16, 2, 255, 0x8000, 0xffff] {
            let p = udp_probe(id, 64);
            assert_eq!(
                udp_checksum(A, B, 33434, 7373, &p),
                first,
                "Paris: UDP checksum constant"
            );
            assert_eq!(parse_udp_probe(&p, LSP_ECHO_REQUEST), Some(id));
            let mut echo = p.clone();
            echo[4] = LSP_ECHO_REPLY;
            assert_eq!(parse_udp_probe(&echo, LSP_ECHO_REPLY), Some(id));
            assert_eq!(parse_udp_probe(&echo, LSP_ECHO_REQUEST), None);
        }
        assert_eq!(udp_probe(1, 0).len(), UDP_PROBE_MIN);
    }

    #[test]
    fn parses_time_exceeded_quoting_a_syn() {
        // ICMP time exceeded from a router, quoting our IPv4 header and 8 bytes of the SYN.
        let syn = tcp_syn(A, B, 40000, 80, 1000 + 7);
        let mut ip = vec![0x45, 0, 0, 40, 0x12, 0x34, 0, 0, 1, PROTO_TCP, 0, 0];
        ip.extend_from_slice(&[10, 0, 1, 1, 10, 0, 4, 2]);
        let mut icmp = vec![11, 0, 0, 0, 0, 0, 0, 0];
        icmp.extend_from_slice(&ip);
        icmp.extend_from_slice(&syn[..8]);
        let m = parse_icmp(false, &icmp).expect("parses");
        assert_eq!(m.kind, IcmpKind::TimeExceeded);
        let q = m.quote.expect("quote");
        assert_eq!((q.src, q.dst, q.proto), (A, B, PROTO_TCP));
        let seg = &q.transport;
        assert_eq!(be32(seg, 4), Some(1007));
        assert_eq!(icmp_kind(false, 3, 3), IcmpKind::PortUnreachable);
        assert_eq!(icmp_kind(true, 1, 4), IcmpKind::PortUnreachable);
        assert_eq!(icmp_kind(true, 3, 0), IcmpKind::TimeExceeded);
        // What traceroute marks !H, !N, !P: a router that cannot deliver.
        assert_eq!(icmp_kind(false, 3, 1), IcmpKind::HostUnreachable);
        assert_eq!(icmp_kind(true, 1, 3), IcmpKind::HostUnreachable);
        assert_eq!(icmp_kind(false, 3, 0), IcmpKind::NetUnreachable);
        assert_eq!(icmp_kind(true, 1, 0), IcmpKind::NetUnreachable);
        assert_eq!(icmp_kind(false, 3, 2), IcmpKind::ProtocolUnreachable);
        assert_eq!(icmp_kind(false, 3, 4), IcmpKind::Unreachable(4));
        // Truncated input never panics.
        for n in 0..icmp.len() {
            let _ = parse_icmp(false, &icmp[..n]);
            let _ = parse_icmp(true, &icmp[..n]);
        }
    }

    #[test]
    fn flag_letters() {
        assert_eq!(tcp_flag_letters(TCP_SYN | TCP_ACK), "SA");
        assert_eq!(tcp_flag_letters(TCP_RST | TCP_ACK), "RA");
    }
}
