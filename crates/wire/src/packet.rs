//! Zero-copy checked packet views and the link → IP → TCP/UDP decoder.
//!
//! Each view (`Ipv4View`, `TcpView`, …) wraps a borrowed byte slice; `new_checked` verifies
//! once that every fixed field is inside the slice, after which the accessors read without
//! further checks failing (they still use `get` so a logic error can never panic).
//!
//! Why hand-written rather than etherparse/pnet: the analyzer touches every packet of captures
//! with millions of frames, and needs only a dozen fields. A generic parser builds option lists,
//! extension-header chains and error contexts we would throw away; reading the fields we use
//! straight from the slice keeps the per-packet cost to a few bounds checks and loads, which is
//! what lets `analyze` run an order of magnitude faster than tshark.

use std::net::IpAddr;

mod link;
pub use link::Juniper;
use link::{Subframes, arcnet_payload, juniper_payload, llc_snap};

use latscope_core::model::analyze::SkipReason;

/// Link-layer header types (the pcap `LINKTYPE_*` registry) we decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkType {
    /// LINKTYPE_NULL (0): BSD loopback, 4-byte address family in host order.
    Null,
    /// LINKTYPE_ETHERNET (1), with 802.1Q / 802.1ad tags.
    Ethernet,
    /// LINKTYPE_RAW (101) and DLT_RAW (12/14): a bare IPv4 or IPv6 packet.
    Raw,
    /// LINKTYPE_LOOP (108): OpenBSD loopback, address family in network order.
    Loop,
    /// LINKTYPE_LINUX_SLL (113): Linux cooked capture v1.
    LinuxSll,
    /// LINKTYPE_IPV4 (228).
    Ipv4,
    /// LINKTYPE_IPV6 (229).
    Ipv6,
    /// LINKTYPE_LINUX_SLL2 (276): Linux cooked capture v2.
    LinuxSll2,
    /// LINKTYPE_PPP (9) and LINKTYPE_PPP_HDLC (50): PPP, with or without HDLC framing.
    Ppp,
    /// LINKTYPE_PPP_ETHER (51): PPPoE without the Ethernet header.
    PppEther,
    /// LINKTYPE_C_HDLC (104): Cisco HDLC.
    CiscoHdlc,
    /// LINKTYPE_IEEE802_11 (105): 802.11 frames without a radio header.
    Ieee80211,
    /// LINKTYPE_IEEE802_11_RADIOTAP (127): a radiotap header, then 802.11.
    Radiotap,
    /// LINKTYPE_PPI (192): a Per-Packet Information header naming the link type that follows.
    Ppi,
    /// LINKTYPE_IPOIB (242): IP over InfiniBand, a 40-byte address header then RFC 4391's
    /// 4-byte encapsulation header.
    IpoIb,
    /// LINKTYPE_ARCNET_BSD (7): ARCnet with BSD's header (no offset field; exception frames).
    ArcnetBsd,
    /// LINKTYPE_ARCNET_LINUX (129): ARCnet with Linux's header (with the offset field).
    ArcnetLinux,
    /// LINKTYPE_JUNIPER_* : Juniper's "MGC" pseudo-header, then the type's own header.
    Juniper(Juniper),
    /// Anything else: frames are counted and skipped.
    Other(u32),
}

impl LinkType {
    /// Map a pcap/pcapng link type number.
    pub fn from_u32(v: u32) -> Self {
        match v {
            0 => LinkType::Null,
            1 => LinkType::Ethernet,
            12 | 14 | 101 => LinkType::Raw,
            108 => LinkType::Loop,
            113 => LinkType::LinuxSll,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            276 => LinkType::LinuxSll2,
            9 | 50 => LinkType::Ppp,
            51 => LinkType::PppEther,
            104 => LinkType::CiscoHdlc,
            105 => LinkType::Ieee80211,
            127 => LinkType::Radiotap,
            192 => LinkType::Ppi,
            242 => LinkType::IpoIb,
            7 => LinkType::ArcnetBsd,
            129 => LinkType::ArcnetLinux,
            o => Juniper::from_u32(o).map_or(LinkType::Other(o), LinkType::Juniper),
        }
    }

    /// The number written in file headers.
    pub fn to_u32(self) -> u32 {
        match self {
            LinkType::Null => 0,
            LinkType::Ethernet => 1,
            LinkType::Raw => 101,
            LinkType::Loop => 108,
            LinkType::LinuxSll => 113,
            LinkType::Ipv4 => 228,
            LinkType::Ipv6 => 229,
            LinkType::LinuxSll2 => 276,
            LinkType::Ppp => 9,
            LinkType::PppEther => 51,
            LinkType::CiscoHdlc => 104,
            LinkType::Ieee80211 => 105,
            LinkType::Radiotap => 127,
            LinkType::Ppi => 192,
            LinkType::IpoIb => 242,
            LinkType::ArcnetBsd => 7,
            LinkType::ArcnetLinux => 129,
            LinkType::Juniper(j) => j.to_u32(),
            LinkType::Other(o) => o,
        }
    }
}

#[inline]
fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at + 2)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

#[inline]
fn le16(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|s| u16::from_le_bytes([s[0], s[1]]))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// An IPv4 header view.
#[derive(Debug, Clone, Copy)]
pub struct Ipv4View<'a> {
    buf: &'a [u8],
    ihl: usize,
}

impl<'a> Ipv4View<'a> {
    /// Check version, IHL and that the header is captured.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, SkipReason> {
        let b0 = *buf.first().ok_or(SkipReason::Truncated)?;
        if b0 >> 4 != 4 {
            return Err(SkipReason::Malformed);
        }
        let ihl = usize::from(b0 & 0x0f) * 4;
        if ihl < 20 {
            return Err(SkipReason::Malformed);
        }
        if buf.len() < ihl {
            return Err(SkipReason::Truncated);
        }
        Ok(Ipv4View { buf, ihl })
    }
    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        self.ihl
    }
    /// Total length field (header + payload, as sent, not as captured).
    pub fn total_len(&self) -> u16 {
        be16(self.buf, 2).unwrap_or(0)
    }
    /// Identification field.
    pub fn ident(&self) -> u16 {
        be16(self.buf, 4).unwrap_or(0)
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buf.get(8).copied().unwrap_or(0)
    }
    /// Protocol number (6 TCP, 17 UDP).
    pub fn protocol(&self) -> u8 {
        self.buf.get(9).copied().unwrap_or(0)
    }
    /// Fragment offset in 8-byte units (0 for the first fragment).
    pub fn frag_offset(&self) -> u16 {
        be16(self.buf, 6).unwrap_or(0) & 0x1fff
    }
    /// Source address.
    pub fn src(&self) -> [u8; 4] {
        let mut a = [0u8; 4];
        a.copy_from_slice(&self.buf[12..16]);
        a
    }
    /// Destination address.
    pub fn dst(&self) -> [u8; 4] {
        let mut a = [0u8; 4];
        a.copy_from_slice(&self.buf[16..20]);
        a
    }
    /// Captured bytes after the header.
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[self.ihl..]
    }
}

/// An IPv6 header view (fixed header; extension headers are walked by [`decode`]).
#[derive(Debug, Clone, Copy)]
pub struct Ipv6View<'a> {
    buf: &'a [u8],
}

impl<'a> Ipv6View<'a> {
    /// Check version and that the 40-byte header is captured.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, SkipReason> {
        let b0 = *buf.first().ok_or(SkipReason::Truncated)?;
        if b0 >> 4 != 6 {
            return Err(SkipReason::Malformed);
        }
        if buf.len() < 40 {
            return Err(SkipReason::Truncated);
        }
        Ok(Ipv6View { buf })
    }
    /// Payload length field.
    pub fn payload_len(&self) -> u16 {
        be16(self.buf, 4).unwrap_or(0)
    }
    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buf[6]
    }
    /// Source address.
    pub fn src(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buf[8..24]);
        a
    }
    /// Destination address.
    pub fn dst(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buf[24..40]);
        a
    }
    /// Captured bytes after the fixed header.
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[40..]
    }
}

/// TCP flag bits.
pub mod flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
    /// URG.
    pub const URG: u8 = 0x20;
}

/// TCP options we use: MSS, window scale, SACK-permitted, timestamps, SACK blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpOptions {
    /// MSS option (SYN only).
    pub mss: Option<u16>,
    /// Window scale shift (SYN only).
    pub wscale: Option<u8>,
    /// SACK permitted (SYN only).
    pub sack_permitted: bool,
    /// Timestamps (TSval, TSecr).
    pub timestamps: Option<(u32, u32)>,
    /// Number of SACK blocks.
    pub sack_blocks: u8,
    /// The first SACK block (left, right edge).
    pub first_sack: Option<(u32, u32)>,
}

/// A TCP header view.
#[derive(Debug, Clone, Copy)]
pub struct TcpView<'a> {
    buf: &'a [u8],
    hlen: usize,
}

impl<'a> TcpView<'a> {
    /// Check data offset and that the whole header (with options) is captured.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, SkipReason> {
        if buf.len() < 20 {
            return Err(SkipReason::Truncated);
        }
        let hlen = usize::from(buf[12] >> 4) * 4;
        if hlen < 20 {
            return Err(SkipReason::Malformed);
        }
        if buf.len() < hlen {
            return Err(SkipReason::Truncated);
        }
        Ok(TcpView { buf, hlen })
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.buf[0], self.buf[1]])
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes([self.buf[2], self.buf[3]])
    }
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        u32::from_be_bytes([self.buf[4], self.buf[5], self.buf[6], self.buf[7]])
    }
    /// Acknowledgement number.
    pub fn ack(&self) -> u32 {
        u32::from_be_bytes([self.buf[8], self.buf[9], self.buf[10], self.buf[11]])
    }
    /// Header length with options.
    pub fn header_len(&self) -> usize {
        self.hlen
    }
    /// Flags byte (FIN..CWR).
    pub fn flags(&self) -> u8 {
        self.buf[13]
    }
    /// Raw (unscaled) window.
    pub fn window(&self) -> u16 {
        u16::from_be_bytes([self.buf[14], self.buf[15]])
    }
    /// Captured payload bytes.
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[self.hlen..]
    }
    /// Whether a SYN's options are laid out as Linux writes them (`tcp_options_write()`): MSS
    /// first, then SACK-permitted, timestamps and window scale in that order, whichever are
    /// present. Windows, macOS and the BSDs put window scale before SACK-permitted or the
    /// timestamps. Evidence of a Linux sender, for detectors of Linux-only timers.
    pub fn syn_options_in_linux_order(&self) -> bool {
        let opts = &self.buf[20..self.hlen];
        // Rank of each option Linux writes, in its order.
        let rank = |kind: u8| match kind {
            2 => Some(0),
            4 => Some(1),
            8 => Some(2),
            3 => Some(3),
            _ => None,
        };
        let (mut i, mut last, mut first) = (0, 0, true);
        while i < opts.len() {
            let kind = opts[i];
            if kind == 0 {
                break;
            }
            if kind == 1 {
                i += 1;
                continue;
            }
            let len = opts.get(i + 1).map_or(0, |&l| usize::from(l));
            if len < 2 {
                break;
            }
            if let Some(r) = rank(kind) {
                if (first && r != 0) || (!first && r <= last) {
                    return false;
                }
                last = r;
            } else if first {
                return false;
            }
            first = false;
            i += len;
        }
        !first
    }

    /// Walk the options. Malformed options end the walk (what we got so far is kept).
    pub fn options(&self) -> TcpOptions {
        let mut o = TcpOptions::default();
        let opts = &self.buf[20..self.hlen];
        let mut i = 0;
        while i < opts.len() {
            let kind = opts[i];
            match kind {
                0 => break,
                1 => {
                    i += 1;
                    continue;
                }
                _ => {}
            }
            let Some(&len) = opts.get(i + 1) else { break };
            let len = usize::from(len);
            if len < 2 || i + len > opts.len() {
                break;
            }
            let body = &opts[i + 2..i + len];
            match (kind, body.len()) {
                (2, 2) => o.mss = Some(u16::from_be_bytes([body[0], body[1]])),
                (3, 1) => o.wscale = Some(body[0].min(14)),
                (4, 0) => o.sack_permitted = true,
                (5, n) if n >= 8 && n % 8 == 0 => {
                    o.sack_blocks = (n / 8) as u8;
                    o.first_sack = Some((be32(body, 0).unwrap_or(0), be32(body, 4).unwrap_or(0)));
                }
                (8, 8) => {
                    o.timestamps = Some((be32(body, 0).unwrap_or(0), be32(body, 4).unwrap_or(0)))
                }
                _ => {}
            }
            i += len;
        }
        o
    }
}

/// A UDP header view.
#[derive(Debug, Clone, Copy)]
pub struct UdpView<'a> {
    buf: &'a [u8],
}

impl<'a> UdpView<'a> {
    /// Check that the 8-byte header is captured.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, SkipReason> {
        if buf.len() < 8 {
            return Err(SkipReason::Truncated);
        }
        Ok(UdpView { buf })
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.buf[0], self.buf[1]])
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes([self.buf[2], self.buf[3]])
    }
    /// Length field (header + payload).
    pub fn length(&self) -> u16 {
        u16::from_be_bytes([self.buf[4], self.buf[5]])
    }
}

/// An IP address in a fixed 16-byte form (IPv4 mapped into the first 4 bytes), cheap to hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Addr {
    /// 4 or 6.
    pub version: u8,
    /// Address bytes; IPv4 uses the first 4.
    pub bytes: [u8; 16],
}

impl Addr {
    fn v4(a: [u8; 4]) -> Self {
        let mut bytes = [0u8; 16];
        bytes[..4].copy_from_slice(&a);
        Addr { version: 4, bytes }
    }
    fn v6(bytes: [u8; 16]) -> Self {
        Addr { version: 6, bytes }
    }
    /// As a std address.
    pub fn ip(&self) -> IpAddr {
        if self.version == 4 {
            IpAddr::from([self.bytes[0], self.bytes[1], self.bytes[2], self.bytes[3]])
        } else {
            IpAddr::from(self.bytes)
        }
    }
}

/// The transport part of a decoded frame.
#[derive(Debug, Clone, Copy)]
pub enum Transport<'a> {
    /// TCP: the header view and the payload length as sent (from the IP length, so it is right
    /// even when the snap length cut the captured payload).
    Tcp {
        /// The header.
        tcp: TcpView<'a>,
        /// Payload length on the wire.
        payload_len: u32,
    },
    /// UDP.
    Udp(UdpView<'a>),
    /// An ICMP or ICMPv6 error quoting the start of a TCP segment (RFC 792, RFC 4443 §2.4):
    /// the frame's addresses are the quoted segment's, as it was sent. No segment of the
    /// connection, but tshark counts it a TCP frame of it.
    IcmpTcp(QuotedTcp),
}

/// The TCP segment an ICMP error quotes, and what the error says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotedTcp {
    /// The quoted segment's source port.
    pub src_port: u16,
    /// Its destination port.
    pub dst_port: u16,
    /// Its sequence number.
    pub seq: u32,
    /// "Fragmentation needed" (ICMP type 3 code 4, RFC 1191) or "packet too big" (ICMPv6 type
    /// 2, RFC 8201): the next hop's MTU.
    pub mtu: Option<u32>,
}

/// A frame decoded down to its transport header.
#[derive(Debug, Clone, Copy)]
pub struct Decoded<'a> {
    /// Source address.
    pub src: Addr,
    /// Destination address.
    pub dst: Addr,
    /// TCP or UDP.
    pub transport: Transport<'a>,
    /// The IPv4 identification field (None for IPv6): tells a frame captured twice from a
    /// retransmission, which carries a new one.
    pub ip_id: Option<u16>,
}

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const ETH_P_QINQ: u16 = 0x9100;
const ETH_P_PPPOE_SESSION: u16 = 0x8864;
const ETH_P_MPLS_UC: u16 = 0x8847;
const ETH_P_MPLS_MC: u16 = 0x8848;
/// Transparent Ethernet bridging: an Ethernet frame inside GRE or Geneve.
const ETH_P_TEB: u16 = 0x6558;

/// GRE protocol type of WCCP-redirected packets.
const GRE_WCCP: u16 = 0x883e;

/// UDP ports of the tunnels tshark decodes by default (IANA): VXLAN (RFC 7348), Geneve
/// (RFC 8926).
const UDP_VXLAN: u16 = 4789;
const UDP_GENEVE: u16 = 6081;

/// Layers peeled at most (VLAN tags, MPLS labels, tunnels together): a bound against crafted
/// frames that nest forever; real traffic uses a handful.
const MAX_LAYERS: usize = 16;

/// A PPP protocol number as the ethertype that carries the same payload.
fn ppp_to_ethertype(proto: u16) -> u16 {
    match proto {
        0x0021 => ETH_P_IP,
        0x0057 => ETH_P_IPV6,
        0x0281 => ETH_P_MPLS_UC,
        0x0283 => ETH_P_MPLS_MC,
        _ => 0,
    }
}

/// A PPP frame (RFC 1661), with or without the HDLC address/control bytes (RFC 1662) and with
/// a compressed (1-byte, odd) or full protocol field: (ethertype, payload).
fn ppp_payload(b: &[u8]) -> Result<(u16, &[u8]), SkipReason> {
    let b = if b.starts_with(&[0xff, 0x03]) {
        &b[2..]
    } else {
        b
    };
    let first = *b.first().ok_or(SkipReason::Truncated)?;
    let (proto, rest) = if first & 1 == 1 {
        (u16::from(first), &b[1..])
    } else {
        (be16(b, 0).ok_or(SkipReason::Truncated)?, &b[2..])
    };
    Ok((ppp_to_ethertype(proto), rest))
}

/// What a link-layer frame carries: one network-layer packet (its ethertype and bytes), or
/// an 802.11 A-MSDU whose subframes each carry one.
#[derive(Debug, Clone, Copy)]
enum L2<'a> {
    Packet(u16, &'a [u8]),
    Amsdu(&'a [u8]),
}

/// Find what a link-layer frame carries: the 802.11 family (plain, radiotap, PPI) here, every
/// other link type in [`link_packet`].
fn link_payload(link: LinkType, frame: &[u8]) -> Result<L2<'_>, SkipReason> {
    match link {
        LinkType::Ieee80211 => wlan_payload(frame),
        LinkType::Radiotap => {
            // Version 0, pad, then the header's whole length (little-endian, RFC-less de facto
            // standard: radiotap.org).
            let len = le16(frame, 2).ok_or(SkipReason::Truncated)?;
            wlan_payload(frame.get(usize::from(len)..).ok_or(SkipReason::Truncated)?)
        }
        LinkType::Ppi => {
            // Version, flags, header length and the DLT of what follows (all little-endian).
            let len = usize::from(le16(frame, 2).ok_or(SkipReason::Truncated)?);
            let dlt = frame
                .get(4..8)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .ok_or(SkipReason::Truncated)?;
            let inner = frame.get(len..).ok_or(SkipReason::Truncated)?;
            match LinkType::from_u32(dlt) {
                LinkType::Ppi => Err(SkipReason::Malformed),
                l => link_payload(l, inner),
            }
        }
        _ => link_packet(link, frame).map(|(et, b)| L2::Packet(et, b)),
    }
}

/// The network-layer packet inside a frame of a link type that carries exactly one:
/// (ethertype-ish, bytes).
#[inline]
fn link_packet(link: LinkType, frame: &[u8]) -> Result<(u16, &[u8]), SkipReason> {
    match link {
        LinkType::Ethernet => ethernet_payload(frame),
        LinkType::LinuxSll => {
            let et = be16(frame, 14).ok_or(SkipReason::Truncated)?;
            Ok((et, frame.get(16..).ok_or(SkipReason::Truncated)?))
        }
        LinkType::LinuxSll2 => {
            let et = be16(frame, 0).ok_or(SkipReason::Truncated)?;
            Ok((et, frame.get(20..).ok_or(SkipReason::Truncated)?))
        }
        LinkType::Null | LinkType::Loop => {
            let b = frame.get(..4).ok_or(SkipReason::Truncated)?;
            // Address family in host order (NULL) or network order (LOOP); either byte order
            // of AF_INET (2) and the BSD values of AF_INET6 (24, 28, 30) are accepted.
            let le = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            let be = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            let fam = if le < 256 { le } else { be };
            let et = match fam {
                2 => ETH_P_IP,
                10 | 24 | 28 | 30 => ETH_P_IPV6,
                _ => return Err(SkipReason::NotIp),
            };
            Ok((et, &frame[4..]))
        }
        LinkType::Raw | LinkType::Ipv4 | LinkType::Ipv6 => raw_ip(frame),
        LinkType::Ppp => ppp_payload(frame),
        LinkType::PppEther => pppoe_payload(frame),
        LinkType::CiscoHdlc => {
            // Address, control, then an ethertype.
            let et = be16(frame, 2).ok_or(SkipReason::Truncated)?;
            Ok((et, frame.get(4..).ok_or(SkipReason::Truncated)?))
        }
        LinkType::IpoIb => {
            // Wireshark's packet-ipoib.c: a 40-byte pseudo-header (the GRH, or the
            // destination address), then the type and two reserved bytes.
            let et = be16(frame, 40).ok_or(SkipReason::Truncated)?;
            Ok((et, frame.get(44..).ok_or(SkipReason::Truncated)?))
        }
        LinkType::ArcnetBsd => arcnet_payload(frame, false),
        LinkType::ArcnetLinux => arcnet_payload(frame, true),
        LinkType::Juniper(kind) => juniper_payload(kind, frame),
        // The 802.11 family is read by `link_payload`, never here.
        LinkType::Ieee80211 | LinkType::Radiotap | LinkType::Ppi | LinkType::Other(_) => {
            Err(SkipReason::UnknownLinkType)
        }
    }
}

/// An 802.11 frame (IEEE 802.11-2020 §9.2): data frames (plain or QoS, with 3 or 4
/// addresses and an HT control field) carrying LLC/SNAP give their ethertype and payload, or
/// their A-MSDU; management, control and null-data frames carry no IP; protected frames are
/// encrypted.
fn wlan_payload(b: &[u8]) -> Result<L2<'_>, SkipReason> {
    let (fc0, fc1) = match b {
        [a, f, ..] => (*a, *f),
        _ => return Err(SkipReason::Truncated),
    };
    let (kind, subtype) = ((fc0 >> 2) & 3, fc0 >> 4);
    // Version 0, data type, a subtype that carries data (bit 2 set: null function).
    if fc0 & 3 != 0 || kind != 2 || subtype & 0x4 != 0 {
        return Err(SkipReason::NotIp);
    }
    if fc1 & 0x40 != 0 {
        return Err(SkipReason::Encrypted);
    }
    let qos = subtype & 0x8 != 0;
    let mut off = 24 + if fc1 & 3 == 3 { 6 } else { 0 };
    let mut amsdu = false;
    if qos {
        // QoS control; bit 7 of its first byte: the body is an A-MSDU.
        let qc = *b.get(off).ok_or(SkipReason::Truncated)?;
        amsdu = qc & 0x80 != 0;
        off += 2;
        // +HTC: the Order bit in a QoS data frame adds a 4-byte HT control field.
        if fc1 & 0x80 != 0 {
            off += 4;
        }
    }
    let body = b.get(off..).ok_or(SkipReason::Truncated)?;
    if amsdu {
        return Ok(L2::Amsdu(body));
    }
    llc_snap(body).map(|(et, p)| L2::Packet(et, p))
}

/// A bare IP packet: the version nibble says which.
fn raw_ip(b: &[u8]) -> Result<(u16, &[u8]), SkipReason> {
    match *b.first().ok_or(SkipReason::Truncated)? >> 4 {
        4 => Ok((ETH_P_IP, b)),
        6 => Ok((ETH_P_IPV6, b)),
        _ => Err(SkipReason::Malformed),
    }
}

/// An Ethernet II header (VLAN tags are peeled by [`network_layer`]).
fn ethernet_payload(frame: &[u8]) -> Result<(u16, &[u8]), SkipReason> {
    let et = be16(frame, 12).ok_or(SkipReason::Truncated)?;
    Ok((et, frame.get(14..).ok_or(SkipReason::Truncated)?))
}

/// A PPPoE session header (RFC 2516: version/type, code, session id, length), then PPP.
fn pppoe_payload(b: &[u8]) -> Result<(u16, &[u8]), SkipReason> {
    if b.len() < 6 {
        return Err(SkipReason::Truncated);
    }
    // Version 1, type 1, code 0 (session data).
    if b[0] != 0x11 || b[1] != 0 {
        return Err(SkipReason::NotIp);
    }
    ppp_payload(&b[6..])
}

/// An MPLS label stack (RFC 3032) down to the bottom-of-stack label, then what it carries: IP
/// (by the version nibble) or, after a zero nibble, a pseudowire control word (RFC 4385) and
/// an Ethernet frame (RFC 4448), as Wireshark guesses.
fn mpls_payload(mut b: &[u8]) -> Result<(u16, &[u8]), SkipReason> {
    for _ in 0..MAX_LAYERS {
        let label = be32(b, 0).ok_or(SkipReason::Truncated)?;
        b = &b[4..];
        if label & 0x100 != 0 {
            let first = *b.first().ok_or(SkipReason::Truncated)?;
            return match first >> 4 {
                4 | 6 => raw_ip(b),
                0 => ethernet_payload(b.get(4..).ok_or(SkipReason::Truncated)?),
                _ => Err(SkipReason::NotIp),
            };
        }
    }
    Err(SkipReason::Malformed)
}

/// Peel VLAN tags (any number: 802.1Q, 802.1ad, the old 0x9100), PPPoE sessions, MPLS label
/// stacks and bridged Ethernet until an IPv4 or IPv6 packet: (its ethertype, its bytes).
fn network_layer(mut et: u16, mut b: &[u8]) -> Result<(u16, &[u8]), SkipReason> {
    for _ in 0..MAX_LAYERS {
        (et, b) = match et {
            ETH_P_IP | ETH_P_IPV6 => return Ok((et, b)),
            ETH_P_8021Q | ETH_P_8021AD | ETH_P_QINQ => {
                let inner = be16(b, 2).ok_or(SkipReason::Truncated)?;
                (inner, &b[4..])
            }
            ETH_P_PPPOE_SESSION => pppoe_payload(b)?,
            ETH_P_MPLS_UC | ETH_P_MPLS_MC => mpls_payload(b)?,
            ETH_P_TEB => ethernet_payload(b)?,
            _ => return Err(SkipReason::NotIp),
        };
    }
    Err(SkipReason::Malformed)
}

/// A GRE header (RFC 2784/2890; version 1 is PPTP's enhanced GRE, RFC 2637, carrying PPP):
/// (ethertype of the payload, payload).
fn gre_payload(b: &[u8]) -> Result<(u16, &[u8]), SkipReason> {
    let fl = be16(b, 0).ok_or(SkipReason::Truncated)?;
    let proto = be16(b, 2).ok_or(SkipReason::Truncated)?;
    let (csum, key, seq) = (fl & 0x8000 != 0, fl & 0x2000 != 0, fl & 0x1000 != 0);
    // Routing present (RFC 1701) is not used by anything that carries TCP.
    if fl & 0x4000 != 0 {
        return Err(SkipReason::NotIp);
    }
    let mut off = 4 + 4 * usize::from(key) + 4 * usize::from(seq);
    match fl & 7 {
        0 if proto == GRE_WCCP => {
            // WCCP redirection (draft-wilson-wrec-wccp-v2 §4.12): IPv4, after a 4-byte
            // redirect header in version 2. Like Wireshark, the header is taken to be there
            // when the byte after GRE does not start an IPv4 header.
            off += 4 * usize::from(csum);
            let rest = b.get(off..).ok_or(SkipReason::Truncated)?;
            let first = *rest.first().ok_or(SkipReason::Truncated)?;
            let ip = if first >> 4 == 4 {
                rest
            } else {
                rest.get(4..).ok_or(SkipReason::Truncated)?
            };
            Ok((ETH_P_IP, ip))
        }
        0 => {
            off += 4 * usize::from(csum);
            Ok((proto, b.get(off..).ok_or(SkipReason::Truncated)?))
        }
        1 if proto == 0x880b => {
            // Enhanced GRE: the acknowledgement bit adds a field; the payload is PPP.
            off += 4 * usize::from(fl & 0x0080 != 0);
            ppp_payload(b.get(off..).ok_or(SkipReason::Truncated)?)
        }
        _ => Err(SkipReason::NotIp),
    }
}

/// VXLAN (RFC 7348): 8 bytes with the I flag, then an Ethernet frame.
fn vxlan_payload(b: &[u8]) -> Result<(u16, &[u8]), SkipReason> {
    if b.len() < 8 {
        return Err(SkipReason::Truncated);
    }
    ethernet_payload(&b[8..])
}

/// Geneve (RFC 8926): version 0, options of the stated length, then the protocol type's payload.
fn geneve_payload(b: &[u8]) -> Result<(u16, &[u8]), SkipReason> {
    let b0 = *b.first().ok_or(SkipReason::Truncated)?;
    if b0 >> 6 != 0 {
        return Err(SkipReason::Malformed);
    }
    let off = 8 + usize::from(b0 & 0x3f) * 4;
    let proto = be16(b, 2).ok_or(SkipReason::Truncated)?;
    Ok((proto, b.get(off..).ok_or(SkipReason::Truncated)?))
}

/// Decode a captured frame down to TCP or UDP, trusting the IP length fields (the frame's
/// original length is unknown; it may have been cut by the snap length).
#[inline]
pub fn decode(link: LinkType, frame: &[u8]) -> Result<Decoded<'_>, SkipReason> {
    decode_frame(link, frame, None)
}

/// Decode a captured frame whose length on the wire was `orig_len` (pcap's original length):
/// an IP length larger than the frame itself is not trusted, as in Wireshark ("IPv4 total
/// length exceeds packet length"), and the payload is bounded by what was on the wire.
#[inline]
pub fn decode_with_orig_len(
    link: LinkType,
    frame: &[u8],
    orig_len: u32,
) -> Result<Decoded<'_>, SkipReason> {
    decode_frame(link, frame, Some(orig_len as usize))
}

#[inline]
fn decode_frame(
    link: LinkType,
    frame: &[u8],
    orig_len: Option<usize>,
) -> Result<Decoded<'_>, SkipReason> {
    decode_packets(link, frame, orig_len)
        .next()
        .unwrap_or(Err(SkipReason::NotIp))
}

/// Decode every packet a captured frame carries: one for most frames, one per subframe of an
/// 802.11 A-MSDU (an empty A-MSDU gives none). `orig_len`: the frame's length on the wire
/// (pcap's original length), when known — IP lengths beyond it are not trusted.
#[inline]
pub fn decode_packets(link: LinkType, frame: &[u8], orig_len: Option<usize>) -> Packets<'_> {
    let (one, amsdu) = match link_payload(link, frame) {
        Ok(L2::Packet(et, b)) => (Some(network_packet(frame, et, b, orig_len)), None),
        Ok(L2::Amsdu(body)) => (
            None,
            Some(AmsduPackets {
                subframes: Subframes::new(body),
                // Wire bytes from the start of the A-MSDU body on, when known.
                wire: orig_len.map(|o| o.saturating_sub(frame.len() - body.len())),
            }),
        ),
        Err(e) => (Some(Err(e)), None),
    };
    Packets { one, amsdu }
}

/// The packet `b` (of ethertype `et`, a suffix of `frame`) decoded down to TCP/UDP.
#[inline]
fn network_packet<'a>(
    frame: &'a [u8],
    et: u16,
    b: &'a [u8],
    orig_len: Option<usize>,
) -> Result<Decoded<'a>, SkipReason> {
    let (et, ip) = network_layer(et, b)?;
    // IP bytes that were on the wire, when the original frame length is known (every slice
    // here is a suffix of the frame, so its offset is the length difference).
    let ip_wire = orig_len.map(|o| o.saturating_sub(frame.len() - ip.len()));
    decode_ip(et, ip, ip_wire, 0)
}

/// The packets of one frame, decoded (see [`decode_packets`]).
#[derive(Debug, Clone)]
pub struct Packets<'a> {
    one: Option<Result<Decoded<'a>, SkipReason>>,
    amsdu: Option<AmsduPackets<'a>>,
}

/// The subframes of an A-MSDU still to decode.
#[derive(Debug, Clone)]
struct AmsduPackets<'a> {
    subframes: Subframes<'a>,
    wire: Option<usize>,
}

impl<'a> Iterator for Packets<'a> {
    type Item = Result<Decoded<'a>, SkipReason>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if let Some(one) = self.one.take() {
            return Some(one);
        }
        let a = self.amsdu.as_mut()?;
        let (at, len, msdu) = a.subframes.next()?;
        // The MSDU's bytes as sent: its length field, bounded by the frame's original length.
        let msdu_wire = a.wire.map_or(len, |w| len.min(w.saturating_sub(at)));
        let d = llc_snap(msdu).and_then(|(et, b)| {
            let (et, ip) = network_layer(et, b)?;
            let ip_wire = msdu_wire.saturating_sub(msdu.len() - ip.len());
            decode_ip(et, ip, Some(ip_wire), 0)
        });
        Some(d)
    }
}

/// The addresses, protocol, transport bytes and transport length on the wire of one IP packet.
struct IpPacket<'a> {
    src: Addr,
    dst: Addr,
    proto: u8,
    l4: &'a [u8],
    l4_wire: usize,
    ip_id: Option<u16>,
}

/// Decode the IP packet `ip` (ethertype `et`) down to TCP/UDP, through IP-in-IP, GRE, VXLAN
/// and Geneve tunnels (`depth` of them so far). `ip_wire`: the packet's bytes on the wire, when
/// known.
fn decode_ip(
    et: u16,
    ip: &[u8],
    ip_wire: Option<usize>,
    depth: usize,
) -> Result<Decoded<'_>, SkipReason> {
    let p = match et {
        ETH_P_IP => ipv4_packet(ip, ip_wire)?,
        ETH_P_IPV6 => ipv6_packet(ip, ip_wire)?,
        _ => return Err(SkipReason::NotIp),
    };
    let tunnel = depth < MAX_LAYERS;
    let inner = |et: u16, b| tunnelled(&p, et, b, depth);
    match p.proto {
        6 => {
            let tcp = TcpView::new_checked(p.l4)?;
            let payload_len = p.l4_wire.saturating_sub(tcp.header_len()) as u32;
            Ok(Decoded {
                src: p.src,
                dst: p.dst,
                transport: Transport::Tcp { tcp, payload_len },
                ip_id: p.ip_id,
            })
        }
        17 => {
            let udp = UdpView::new_checked(p.l4)?;
            let body = &p.l4[8..];
            let tunnelled = match (udp.src_port(), udp.dst_port()) {
                _ if !tunnel => None,
                (UDP_VXLAN, _) | (_, UDP_VXLAN) => Some(vxlan_payload(body)),
                (UDP_GENEVE, _) | (_, UDP_GENEVE) => Some(geneve_payload(body)),
                _ => None,
            };
            // A tunnel port whose payload does not decode is plain UDP, as it was sent.
            if let Some(Ok(d)) = tunnelled.map(|r| r.and_then(|(et, b)| inner(et, b))) {
                return Ok(d);
            }
            Ok(Decoded {
                src: p.src,
                dst: p.dst,
                transport: Transport::Udp(udp),
                ip_id: p.ip_id,
            })
        }
        1 => icmp_error(p.l4, false),
        58 => icmp_error(p.l4, true),
        4 if tunnel => inner(ETH_P_IP, p.l4),
        41 if tunnel => inner(ETH_P_IPV6, p.l4),
        47 if tunnel => {
            let (et, b) = gre_payload(p.l4)?;
            inner(et, b)
        }
        _ => Err(SkipReason::NotTcpUdp),
    }
}

/// An ICMP (`v6`: ICMPv6) message: an error quoting a TCP segment becomes
/// [`Transport::IcmpTcp`] with the quoted segment's addresses; anything else is not TCP/UDP.
/// Errors quote the offending packet's IP header and at least 8 bytes after it (RFC 792, RFC
/// 4443 §2.4) — the ports and the sequence number — and its length fields are the original
/// packet's, so the quoted header is read by hand, not by a view that checks its lengths.
fn icmp_error(icmp: &[u8], v6: bool) -> Result<Decoded<'_>, SkipReason> {
    let (&kind, &code) = (
        icmp.first().ok_or(SkipReason::Truncated)?,
        icmp.get(1).ok_or(SkipReason::Truncated)?,
    );
    // Destination unreachable, packet too big, time exceeded, parameter problem (ICMPv6
    // 1–4; ICMP 3, 4, 11, 12). A redirect (5) quotes a packet that was delivered — tshark
    // gives it no TCP stream — and is no error of the connection.
    let error = if v6 {
        (1..=4).contains(&kind)
    } else {
        matches!(kind, 3 | 4 | 11 | 12)
    };
    let quoted = icmp
        .get(8..)
        .filter(|_| error)
        .ok_or(SkipReason::NotTcpUdp)?;
    let mtu = match (v6, kind, code) {
        (false, 3, 4) => be16(icmp, 6).map(u32::from),
        (true, 2, _) => icmp
            .get(4..8)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        _ => None,
    };
    let (src, dst, proto, l4) = if v6 {
        let h = quoted.get(..40).ok_or(SkipReason::Truncated)?;
        let (mut s, mut d) = ([0u8; 16], [0u8; 16]);
        s.copy_from_slice(&h[8..24]);
        d.copy_from_slice(&h[24..40]);
        (Addr::v6(s), Addr::v6(d), h[6], &quoted[40..])
    } else {
        let ihl = usize::from(quoted.first().ok_or(SkipReason::Truncated)? & 0x0f) * 4;
        let h = quoted.get(..ihl.max(20)).ok_or(SkipReason::Truncated)?;
        let s = [h[12], h[13], h[14], h[15]];
        let d = [h[16], h[17], h[18], h[19]];
        (Addr::v4(s), Addr::v4(d), h[9], &quoted[ihl.max(20)..])
    };
    // The quoted TCP header whole (tshark, too, counts a quote cut within it as no segment
    // of a connection: a "host unreachable" quoting 8 bytes of a SYN).
    let header = l4.get(12).map_or(usize::MAX, |o| usize::from(o >> 4) * 4);
    if proto != 6 || header < 20 || l4.len() < header {
        return Err(SkipReason::NotTcpUdp);
    }
    let q = QuotedTcp {
        src_port: be16(l4, 0).ok_or(SkipReason::Truncated)?,
        dst_port: be16(l4, 2).ok_or(SkipReason::Truncated)?,
        seq: u32::from_be_bytes([l4[4], l4[5], l4[6], l4[7]]),
        mtu,
    };
    Ok(Decoded {
        src,
        dst,
        transport: Transport::IcmpTcp(q),
        ip_id: None,
    })
}

/// The packet a tunnel carries (`b`, of ethertype `et`, inside `outer`'s transport bytes).
fn tunnelled<'a>(
    outer: &IpPacket<'a>,
    et: u16,
    b: &'a [u8],
    depth: usize,
) -> Result<Decoded<'a>, SkipReason> {
    let (et, ip) = network_layer(et, b)?;
    // Its bytes on the wire: what the outer length leaves after the tunnel headers (every
    // slice is a suffix of the outer transport bytes).
    let wire = outer.l4_wire.saturating_sub(outer.l4.len() - ip.len());
    decode_ip(et, ip, Some(wire), depth + 1)
}

fn ipv4_packet(ip: &[u8], ip_wire: Option<usize>) -> Result<IpPacket<'_>, SkipReason> {
    let v4 = Ipv4View::new_checked(ip)?;
    if v4.frag_offset() != 0 {
        return Err(SkipReason::Fragment);
    }
    let total = usize::from(v4.total_len());
    // TSO/GRO captures carry total length 0 for super-packets: fall back to captured.
    let wire = if total >= v4.header_len() {
        total - v4.header_len()
    } else {
        v4.payload().len()
    };
    let wire = ip_wire.map_or(wire, |w| wire.min(w.saturating_sub(v4.header_len())));
    Ok(IpPacket {
        src: Addr::v4(v4.src()),
        dst: Addr::v4(v4.dst()),
        proto: v4.protocol(),
        l4: v4.payload(),
        l4_wire: wire,
        ip_id: Some(v4.ident()),
    })
}

fn ipv6_packet(ip: &[u8], ip_wire: Option<usize>) -> Result<IpPacket<'_>, SkipReason> {
    let v6 = Ipv6View::new_checked(ip)?;
    let mut nh = v6.next_header();
    let mut rest = v6.payload();
    let mut wire = usize::from(v6.payload_len());
    if wire == 0 {
        wire = rest.len(); // jumbogram or GSO
    }
    if let Some(w) = ip_wire {
        wire = wire.min(w.saturating_sub(40));
    }
    // Walk hop-by-hop (0), routing (43), destination options (60) and fragment (44).
    for _ in 0..8 {
        match nh {
            0 | 43 | 60 => {
                let n = *rest.first().ok_or(SkipReason::Truncated)?;
                let len = (usize::from(*rest.get(1).ok_or(SkipReason::Truncated)?) + 1) * 8;
                rest = rest.get(len..).ok_or(SkipReason::Truncated)?;
                wire = wire.saturating_sub(len);
                nh = n;
            }
            44 => {
                let n = *rest.first().ok_or(SkipReason::Truncated)?;
                let off = be16(rest, 2).ok_or(SkipReason::Truncated)? >> 3;
                if off != 0 {
                    return Err(SkipReason::Fragment);
                }
                rest = rest.get(8..).ok_or(SkipReason::Truncated)?;
                wire = wire.saturating_sub(8);
                nh = n;
            }
            _ => break,
        }
    }
    Ok(IpPacket {
        src: Addr::v6(v6.src()),
        dst: Addr::v6(v6.dst()),
        proto: nh,
        l4: rest,
        l4_wire: wire,
        ip_id: None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod tests {
    use super::*;

    /// Build an Ethernet/IPv4/TCP frame (test helper shared with other modules' tests).
    #[allow(clippy::too_many_arguments)] // a test frame builder: one argument per header field
    pub(crate) fn eth_ipv4_tcp(
        src: [u8; 4],
        dst: [u8; 4],
        sport: u16,
        dport: u16,
        seq: u32,
        ack: u32,
        fl: u8,
        win: u16,
        opts: &[u8],
        payload: &[u8],
    ) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ETH_P_IP.to_be_bytes());
        let thl = 20 + opts.len();
        let total = 20 + thl + payload.len();
        crate::synth::ipv4_tcp_header(&mut f, total, src, dst);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&seq.to_be_bytes());
        f.extend_from_slice(&ack.to_be_bytes());
        f.push(((thl / 4) as u8) << 4);
        f.push(fl);
        f.extend_from_slice(&win.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0]);
        f.extend_from_slice(opts);
        f.extend_from_slice(payload);
        f
    }

    /// The IPv4/TCP packet of an Ethernet test frame.
    fn ipv4_tcp() -> Vec<u8> {
        eth_ipv4_tcp(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            1234,
            80,
            7,
            0,
            0x02,
            100,
            &[],
            &[],
        )[14..]
            .to_vec()
    }

    /// An 802.11 data frame: `fc0` (type/subtype), `fc1` (flags), then what the flags ask for.
    fn wlan_frame(fc0: u8, fc1: u8, qos: &[u8], body: &[u8]) -> Vec<u8> {
        let mut f = vec![fc0, fc1, 0, 0];
        f.extend_from_slice(&[0u8; 20]);
        if fc1 & 3 == 3 {
            f.extend_from_slice(&[0u8; 6]);
        }
        f.extend_from_slice(qos);
        f.extend_from_slice(body);
        f
    }

    fn snap_ip() -> Vec<u8> {
        let mut b = vec![0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00];
        b.extend_from_slice(&ipv4_tcp());
        b
    }

    fn port(d: Result<Decoded<'_>, SkipReason>) -> Result<u16, SkipReason> {
        match d?.transport {
            Transport::Tcp { tcp, .. } => Ok(tcp.dst_port()),
            _ => Err(SkipReason::NotTcpUdp),
        }
    }

    #[test]
    fn wlan_data_frames_decode_and_protected_ones_are_encrypted() {
        let body = snap_ip();
        // Plain data to the AP; QoS data with four addresses and +HTC.
        let plain = wlan_frame(0x08, 0x01, &[], &body);
        assert_eq!(port(decode(LinkType::Ieee80211, &plain)), Ok(80));
        // QoS control (TID 3), then the HT control field.
        let f = wlan_frame(0x88, 0x83, &[0x03, 0x00, 0, 0, 0, 0], &body);
        assert_eq!(port(decode(LinkType::Ieee80211, &f)), Ok(80));
        // Protected: the body is ciphertext.
        let f = wlan_frame(0x88, 0x41, &[0, 0], &body);
        assert_eq!(
            decode(LinkType::Ieee80211, &f).err(),
            Some(SkipReason::Encrypted)
        );
        // Null data, a beacon: no IP read.
        for f in [
            wlan_frame(0x48, 0x01, &[], &[]),
            wlan_frame(0x80, 0x00, &[], &body),
        ] {
            assert_eq!(
                decode(LinkType::Ieee80211, &f).err(),
                Some(SkipReason::NotIp)
            );
        }
        // Radiotap (12-byte header) and PPI (naming 802.11) in front of the plain frame.
        let mut rt = vec![0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        rt.extend_from_slice(&plain);
        assert_eq!(port(decode(LinkType::Radiotap, &rt)), Ok(80));
        let mut ppi = vec![0, 0, 8, 0, 105, 0, 0, 0];
        ppi.extend_from_slice(&plain);
        assert_eq!(port(decode(LinkType::Ppi, &ppi)), Ok(80));
        // Cut inside the LLC header.
        assert_eq!(
            decode(LinkType::Ieee80211, &plain[..28]).err(),
            Some(SkipReason::Truncated)
        );
    }

    #[test]
    fn ipoib_and_wccp_decode() {
        let mut ib = vec![0u8; 40];
        ib.extend_from_slice(&[0x08, 0x00, 0, 0]);
        ib.extend_from_slice(&ipv4_tcp());
        assert_eq!(port(decode(LinkType::IpoIb, &ib)), Ok(80));
        // GRE 0x883e, with (WCCPv2) and without (v1) the redirect header.
        for redirect in [&[0u8, 0, 0, 0x2a][..], &[][..]] {
            let mut gre = vec![0, 0, 0x88, 0x3e];
            gre.extend_from_slice(redirect);
            gre.extend_from_slice(&ipv4_tcp());
            let total = 20 + gre.len();
            let mut f = vec![0u8; 12];
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0, (total >> 8) as u8, total as u8]);
            f.extend_from_slice(&[0, 0, 0x40, 0, 64, 47, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2]);
            f.extend_from_slice(&gre);
            assert_eq!(port(decode(LinkType::Ethernet, &f)), Ok(80));
        }
    }

    #[test]
    fn decodes_tcp_with_options() {
        let opts = [
            2, 4, 0x05, 0xb4, 1, 3, 3, 7, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 4, 2, 0, 0, 0, 0,
        ];
        let f = eth_ipv4_tcp(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            1234,
            80,
            100,
            0,
            flags::SYN,
            65535,
            &opts,
            b"",
        );
        let d = decode(LinkType::Ethernet, &f).unwrap();
        let Transport::Tcp { tcp, payload_len } = d.transport else {
            panic!("not tcp")
        };
        assert_eq!(payload_len, 0);
        assert_eq!(tcp.src_port(), 1234);
        assert_eq!(tcp.seq(), 100);
        let o = tcp.options();
        assert_eq!(o.mss, Some(1460));
        assert_eq!(o.wscale, Some(7));
        assert_eq!(o.timestamps, Some((1, 2)));
        assert!(o.sack_permitted);
        assert_eq!(d.src.ip().to_string(), "10.0.0.1");
    }

    #[test]
    fn payload_len_from_ip_even_when_snapped() {
        let f = eth_ipv4_tcp(
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            1,
            2,
            0,
            0,
            flags::ACK,
            1,
            &[],
            &[7u8; 100],
        );
        let cut = &f[..14 + 20 + 20 + 10];
        let d = decode(LinkType::Ethernet, cut).unwrap();
        let Transport::Tcp { payload_len, tcp } = d.transport else {
            panic!()
        };
        assert_eq!(payload_len, 100);
        assert_eq!(tcp.payload().len(), 10);
    }

    /// An IP length beyond the frame's original length is not trusted (tshark class 4); one
    /// beyond the captured length of a snapped frame is.
    #[test]
    fn ip_length_bounded_by_original_frame_length() {
        let f = eth_ipv4_tcp(
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            1,
            2,
            0,
            0,
            flags::ACK,
            1,
            &[],
            b"",
        );
        let mut bogus = f.clone();
        bogus[16..18].copy_from_slice(&4096u16.to_be_bytes());
        let len = |d: Decoded<'_>| match d.transport {
            Transport::Tcp { payload_len, .. } => payload_len,
            _ => panic!(),
        };
        let orig = bogus.len() as u32;
        assert_eq!(
            len(decode_with_orig_len(LinkType::Ethernet, &bogus, orig).unwrap()),
            0
        );
        assert_eq!(len(decode(LinkType::Ethernet, &bogus).unwrap()), 4096 - 40);
        let full = eth_ipv4_tcp(
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            1,
            2,
            0,
            0,
            0x10,
            1,
            &[],
            &[7; 100],
        );
        let cut = &full[..64];
        let d = decode_with_orig_len(LinkType::Ethernet, cut, full.len() as u32).unwrap();
        assert_eq!(len(d), 100);
    }

    #[test]
    fn vlan_sll_and_raw() {
        let f = eth_ipv4_tcp(
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            1,
            2,
            0,
            0,
            flags::ACK,
            1,
            &[],
            b"x",
        );
        let mut v = f[..12].to_vec();
        v.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        v.extend_from_slice(&f[12..]);
        assert!(decode(LinkType::Ethernet, &v).is_ok());
        let ip = &f[14..];
        assert!(decode(LinkType::Raw, ip).is_ok());
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&ETH_P_IP.to_be_bytes());
        sll.extend_from_slice(ip);
        assert!(decode(LinkType::LinuxSll, &sll).is_ok());
        let mut sll2 = ETH_P_IP.to_be_bytes().to_vec();
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend_from_slice(ip);
        assert!(decode(LinkType::LinuxSll2, &sll2).is_ok());
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend_from_slice(ip);
        assert!(decode(LinkType::Null, &null).is_ok());
        assert_eq!(
            decode(LinkType::Other(147), ip).unwrap_err(),
            SkipReason::UnknownLinkType
        );
    }

    /// An IPv4 header (protocol `proto`) around `payload`.
    fn ipv4(proto: u8, payload: &[u8]) -> Vec<u8> {
        let total = (20 + payload.len()) as u16;
        let mut v = vec![0x45, 0];
        v.extend_from_slice(&total.to_be_bytes());
        v.extend_from_slice(&[0, 7, 0x40, 0, 64, proto, 0, 0, 172, 16, 0, 1, 172, 16, 0, 2]);
        v.extend_from_slice(payload);
        v
    }

    fn udp(dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = 40000u16.to_be_bytes().to_vec();
        v.extend_from_slice(&dport.to_be_bytes());
        v.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(payload);
        v
    }

    fn ether(et: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![2u8; 12];
        v.extend_from_slice(&et.to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    /// The inner TCP segment every encapsulation test wraps: 10.0.0.1:1234 → 10.0.0.2:80, 5 bytes.
    pub(super) fn inner_ip() -> Vec<u8> {
        let f = eth_ipv4_tcp(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            1234,
            80,
            7,
            0,
            flags::ACK | flags::PSH,
            100,
            &[],
            b"hello",
        );
        f[14..].to_vec()
    }

    /// `frame` (of link type `link`) decodes to [`inner_ip`]'s segment.
    pub(super) fn assert_inner(frame: &[u8], link: LinkType) {
        let d = decode_with_orig_len(link, frame, frame.len() as u32)
            .unwrap_or_else(|e| panic!("{e:?}"));
        let Transport::Tcp { tcp, payload_len } = d.transport else {
            panic!("not TCP")
        };
        assert_eq!((tcp.src_port(), tcp.dst_port(), payload_len), (1234, 80, 5));
        assert_eq!(d.src.ip().to_string(), "10.0.0.1");
        assert_eq!(d.dst.ip().to_string(), "10.0.0.2");
    }

    /// Each encapsulation tshark decodes is peeled down to the inner TCP segment.
    #[test]
    fn encapsulations_reach_the_inner_tcp() {
        let ip = inner_ip();
        let tag = |_outer: u16, inner: u16| {
            let mut v = vec![0x00, 0x05];
            v.extend_from_slice(&inner.to_be_bytes());
            v
        };
        // Triple VLAN tags: 802.1ad, 802.1Q, 802.1Q.
        let mut t = tag(ETH_P_8021AD, ETH_P_8021Q);
        t.extend(tag(ETH_P_8021Q, ETH_P_8021Q));
        t.extend(tag(ETH_P_8021Q, ETH_P_IP));
        t.extend_from_slice(&ip);
        assert_inner(&ether(ETH_P_8021AD, &t), LinkType::Ethernet);
        // PPPoE session over QinQ.
        let mut pppoe = vec![0x11, 0x00, 0x12, 0x34];
        pppoe.extend_from_slice(&((ip.len() + 2) as u16).to_be_bytes());
        pppoe.extend_from_slice(&[0x00, 0x21]);
        pppoe.extend_from_slice(&ip);
        let mut q = tag(ETH_P_8021AD, ETH_P_8021Q);
        q.extend(tag(ETH_P_8021Q, ETH_P_PPPOE_SESSION));
        q.extend_from_slice(&pppoe);
        assert_inner(&ether(ETH_P_8021AD, &q), LinkType::Ethernet);
        assert_inner(&pppoe, LinkType::PppEther);
        // PPP link with HDLC framing.
        let mut ppp = vec![0xff, 0x03, 0x00, 0x21];
        ppp.extend_from_slice(&ip);
        assert_inner(&ppp, LinkType::Ppp);
        // An MPLS stack of two labels; then a pseudowire carrying Ethernet.
        let mut mpls = vec![0x00, 0x01, 0x00, 0x40, 0x00, 0x02, 0x01, 0x40];
        mpls.extend_from_slice(&ip);
        assert_inner(&ether(ETH_P_MPLS_UC, &mpls), LinkType::Ethernet);
        let mut pw = vec![0x00, 0x03, 0x01, 0x40, 0, 0, 0, 0];
        pw.extend(ether(ETH_P_IP, &ip));
        assert_inner(&ether(ETH_P_MPLS_UC, &pw), LinkType::Ethernet);
        // GRE: plain IPv4, and with key + sequence carrying bridged Ethernet.
        let mut gre = vec![0x00, 0x00, 0x08, 0x00];
        gre.extend_from_slice(&ip);
        assert_inner(&ether(ETH_P_IP, &ipv4(47, &gre)), LinkType::Ethernet);
        let mut gre = vec![0x30, 0x00, 0x65, 0x58, 0, 0, 0, 9, 0, 0, 0, 1];
        gre.extend(ether(ETH_P_IP, &ip));
        assert_inner(&ether(ETH_P_IP, &ipv4(47, &gre)), LinkType::Ethernet);
        // PPTP's enhanced GRE (version 1, key, sequence and acknowledgement) carrying PPP.
        let mut gre = vec![0x30, 0x81, 0x88, 0x0b, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3];
        gre.extend_from_slice(&[0xff, 0x03, 0x00, 0x21]);
        gre.extend_from_slice(&ip);
        assert_inner(&ether(ETH_P_IP, &ipv4(47, &gre)), LinkType::Ethernet);
        // IP in IP.
        assert_inner(&ether(ETH_P_IP, &ipv4(4, &ip)), LinkType::Ethernet);
        // VXLAN and Geneve (with 8 bytes of options) over UDP.
        let mut vx = vec![0x08, 0, 0, 0, 0, 0, 0x64, 0];
        vx.extend(ether(ETH_P_IP, &ip));
        assert_inner(
            &ether(ETH_P_IP, &ipv4(17, &udp(4789, &vx))),
            LinkType::Ethernet,
        );
        let mut gnv = vec![0x02, 0x00, 0x65, 0x58, 0, 0, 0x64, 0];
        gnv.extend_from_slice(&[0u8; 8]);
        gnv.extend(ether(ETH_P_IP, &ip));
        assert_inner(
            &ether(ETH_P_IP, &ipv4(17, &udp(6081, &gnv))),
            LinkType::Ethernet,
        );
        // A tunnel port whose payload is not a tunnel stays UDP.
        let junk = ether(ETH_P_IP, &ipv4(17, &udp(4789, &[1, 2, 3])));
        assert!(matches!(
            decode(LinkType::Ethernet, &junk).unwrap().transport,
            Transport::Udp(_)
        ));
        // Tunnels nested without end are refused, not followed forever.
        let mut deep = ip.clone();
        for _ in 0..40 {
            deep = ipv4(4, &deep);
        }
        assert!(decode(LinkType::Raw, &deep).is_err());
    }

    /// The inner packet's length is bounded by the outer one's: an inner IP length larger than
    /// what the tunnel carried on the wire is not trusted.
    #[test]
    fn inner_length_bounded_by_outer() {
        let mut ip = inner_ip();
        ip[2..4].copy_from_slice(&4000u16.to_be_bytes());
        let f = ether(ETH_P_IP, &ipv4(4, &ip));
        let d = decode(LinkType::Ethernet, &f).unwrap();
        let Transport::Tcp { payload_len, .. } = d.transport else {
            panic!()
        };
        assert_eq!(payload_len, 5);
    }

    #[test]
    fn every_prefix_is_safe() {
        let f = eth_ipv4_tcp(
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            1,
            2,
            0,
            0,
            flags::ACK,
            1,
            &[1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2],
            b"hello",
        );
        for n in 0..f.len() {
            let _ = decode(LinkType::Ethernet, &f[..n]).map(|d| {
                if let Transport::Tcp { tcp, .. } = d.transport {
                    tcp.options();
                }
            });
        }
    }
}
