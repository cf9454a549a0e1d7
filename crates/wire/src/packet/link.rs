//! Link layers beyond the common ones: ARCnet (BSD and Linux headers), Juniper's capture
//! pseudo-header in front of each of its link types, and the subframes of 802.11 A-MSDUs.
//!
//! Each follows what Wireshark's dissector reads (`packet-arcnet.c`, `packet-juniper.c`,
//! `packet-ieee80211.c`), so that `analyze` counts the TCP frames tshark counts; anything
//! else (a missing magic number, an unknown payload type, a cut header) is a skip reason,
//! never a guess.

use super::{
    ETH_P_IP, ETH_P_IPV6, ETH_P_MPLS_UC, SkipReason, be16, be32, ethernet_payload, ppp_payload,
};

/// An ethertype and the bytes it describes.
type Payload<'a> = Result<(u16, &'a [u8]), SkipReason>;

/// ARCnet protocol IDs (Wireshark's `arcnet_pids.h`, after RFC 1051 and RFC 1201).
mod arcnet_id {
    /// IPv4, RFC 1051 framing (no fragmentation fields).
    pub const IP_1051: u8 = 240;
    /// ARP, RFC 1051 framing.
    pub const ARP_1051: u8 = 241;
    /// IPv4, RFC 1201 framing (split flag and sequence number follow the ID).
    pub const IP_1201: u8 = 212;
    /// IPv6 (BSD's `arcnet.h`), RFC 1201 framing.
    pub const IPV6: u8 = 196;
    /// ANSI/ATA 878.1 diagnostics: no fragmentation fields.
    pub const DIAGNOSE: u8 = 128;
    /// BACnet: no fragmentation fields.
    pub const BACNET: u8 = 205;
}

/// An ARCnet frame as libpcap stores it: source and destination station IDs (1 byte each),
/// the hardware offset field (2 bytes, Linux header only: LINKTYPE_ARCNET_LINUX 129), the
/// protocol ID, then for RFC 1201 protocols a split flag and a 2-byte sequence number. A BSD
/// header (LINKTYPE_ARCNET_BSD 7) may be an *exception* frame: split flag 0xff, 2 bytes of
/// padding and the protocol ID again before the real split flag.
pub(super) fn arcnet_payload(b: &[u8], linux: bool) -> Payload<'_> {
    let mut off = if linux { 4 } else { 2 };
    let id = *b.get(off).ok_or(SkipReason::Truncated)?;
    off += 1;
    match id {
        arcnet_id::IP_1051 | arcnet_id::ARP_1051 | arcnet_id::DIAGNOSE | arcnet_id::BACNET => {}
        _ => {
            let split = *b.get(off).ok_or(SkipReason::Truncated)?;
            if !linux && split == 0xff {
                off += 4;
            }
            off += 3;
        }
    }
    let et = match id {
        arcnet_id::IP_1051 | arcnet_id::IP_1201 => ETH_P_IP,
        arcnet_id::IPV6 => ETH_P_IPV6,
        _ => return Err(SkipReason::NotIp),
    };
    Ok((et, b.get(off..).ok_or(SkipReason::Truncated)?))
}

/// The Juniper link types (`LINKTYPE_JUNIPER_*`) whose payload can carry IP. Every frame
/// starts with the pseudo-header JUNOS writes ("MGC", flags, optional extensions), then a
/// header specific to the type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Juniper {
    /// LINKTYPE_JUNIPER_MLPPP (130): multilink PPP, after a PIC cookie of 0, 2, 4 or 8 bytes.
    Mlppp,
    /// LINKTYPE_JUNIPER_GGSN (133): a little-endian payload type and a VLAN ID.
    Ggsn,
    /// LINKTYPE_JUNIPER_ATM2 (135): an 8-byte ATM cookie, then LLC/SNAP, PPP, Ethernet or IP.
    Atm2,
    /// LINKTYPE_JUNIPER_SERVICES (136): a services-PIC cookie (16 bytes in, 12 out), then IPv4.
    Services,
    /// LINKTYPE_JUNIPER_ATM1 (137): a 4-byte ATM cookie, then LLC/SNAP or IP.
    Atm1,
    /// LINKTYPE_JUNIPER_PPPOE (167): an Ethernet frame.
    Pppoe,
    /// LINKTYPE_JUNIPER_ETHER (178): an Ethernet frame.
    Ether,
    /// LINKTYPE_JUNIPER_PPP (179): 2 bytes, then a PPP frame.
    Ppp,
    /// LINKTYPE_JUNIPER_CHDLC (181): a Cisco HDLC frame.
    Chdlc,
    /// LINKTYPE_JUNIPER_VP (183): an 18-byte voice-PIC header, then IPv4.
    Vp,
}

impl Juniper {
    /// The Juniper type of a link type number, if it is one we decode.
    pub fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            130 => Juniper::Mlppp,
            133 => Juniper::Ggsn,
            135 => Juniper::Atm2,
            136 => Juniper::Services,
            137 => Juniper::Atm1,
            167 => Juniper::Pppoe,
            178 => Juniper::Ether,
            179 => Juniper::Ppp,
            181 => Juniper::Chdlc,
            183 => Juniper::Vp,
            _ => return None,
        })
    }

    /// Its link type number.
    pub fn to_u32(self) -> u32 {
        match self {
            Juniper::Mlppp => 130,
            Juniper::Ggsn => 133,
            Juniper::Atm2 => 135,
            Juniper::Services => 136,
            Juniper::Atm1 => 137,
            Juniper::Pppoe => 167,
            Juniper::Ether => 178,
            Juniper::Ppp => 179,
            Juniper::Chdlc => 181,
            Juniper::Vp => 183,
        }
    }
}

/// Flag bits of the pseudo-header's fourth byte.
const JNX_IN: u8 = 0x01;
const JNX_NO_L2: u8 = 0x02;
const JNX_EXT: u8 = 0x80;

/// JUNOS payload types (Wireshark's `packet-juniper.h`), named in the pseudo-header when the
/// L2 header was stripped, or guessed from cookies.
mod jnx_proto {
    pub const IP: u32 = 2;
    pub const MPLS_IP: u32 = 3;
    pub const IP_MPLS: u32 = 4;
    pub const MPLS: u32 = 5;
    pub const IP6: u32 = 6;
    pub const MPLS_IP6: u32 = 7;
    pub const IP6_MPLS: u32 = 8;
    pub const PPP: u32 = 200;
    pub const LLC: u32 = 202;
    pub const LLC_SNAP: u32 = 203;
    pub const ETHER: u32 = 204;
    pub const CHDLC: u32 = 208;
    /// Undocumented; Wireshark skips 4 bytes and reads IPv4.
    pub const UNKNOWN_A248: u32 = 0xa248;
}

/// The payload of JUNOS type `proto`.
fn jnx_payload(proto: u32, b: &[u8]) -> Payload<'_> {
    match proto {
        jnx_proto::IP | jnx_proto::MPLS_IP => Ok((ETH_P_IP, b)),
        jnx_proto::IP6 | jnx_proto::MPLS_IP6 => Ok((ETH_P_IPV6, b)),
        jnx_proto::MPLS | jnx_proto::IP_MPLS | jnx_proto::IP6_MPLS => Ok((ETH_P_MPLS_UC, b)),
        jnx_proto::PPP => ppp_payload(b),
        jnx_proto::ETHER => ethernet_payload(b),
        jnx_proto::CHDLC => {
            let et = be16(b, 2).ok_or(SkipReason::Truncated)?;
            Ok((et, b.get(4..).ok_or(SkipReason::Truncated)?))
        }
        jnx_proto::LLC | jnx_proto::LLC_SNAP => llc_snap(b),
        jnx_proto::UNKNOWN_A248 => Ok((ETH_P_IP, b.get(4..).ok_or(SkipReason::Truncated)?)),
        _ => Err(SkipReason::NotIp),
    }
}

/// An LLC header that is SNAP (AA AA 03) with an RFC 1042 or 802.1H (bridge tunnel) OUI:
/// the ethertype and what follows. Other LLC (OSI, NetBIOS, STP) carries no IP.
pub(super) fn llc_snap(b: &[u8]) -> Payload<'_> {
    let llc = b.get(..8).ok_or(SkipReason::Truncated)?;
    if llc[..3] != [0xaa, 0xaa, 0x03] || !matches!(llc[3..6], [0, 0, 0] | [0, 0, 0xf8]) {
        return Err(SkipReason::NotIp);
    }
    Ok((u16::from_be_bytes([llc[6], llc[7]]), &b[8..]))
}

/// A Juniper frame of type `kind`: the pseudo-header (magic "MGC", flags, then when the
/// extension flag is set a 2-byte length and that many bytes of TLVs), then either the
/// payload with its 4-byte little-endian JUNOS type (L2 header stripped) or the type's own
/// header. A frame without the magic number is malformed (Wireshark tries it as if the
/// pseudo-header were absent; JUNOS has written the magic since 7.x).
pub(super) fn juniper_payload(kind: Juniper, b: &[u8]) -> Payload<'_> {
    let magic = b.get(..4).ok_or(SkipReason::Truncated)?;
    if magic[..3] != *b"MGC" {
        return Err(SkipReason::Malformed);
    }
    let flags = magic[3];
    let off = if flags & JNX_EXT != 0 {
        6 + usize::from(be16(b, 4).ok_or(SkipReason::Truncated)?)
    } else {
        4
    };
    let rest = b.get(off..).ok_or(SkipReason::Truncated)?;
    if flags & JNX_NO_L2 != 0 {
        let p = rest.get(..4).ok_or(SkipReason::Truncated)?;
        let proto = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
        return jnx_payload(proto, &rest[4..]);
    }
    let skip = |n: usize| rest.get(n..).ok_or(SkipReason::Truncated);
    match kind {
        Juniper::Ether | Juniper::Pppoe => ethernet_payload(rest),
        Juniper::Ppp => ppp_payload(skip(2)?),
        Juniper::Chdlc => jnx_payload(jnx_proto::CHDLC, rest),
        Juniper::Ggsn => {
            let proto = super::le16(rest, 0).ok_or(SkipReason::Truncated)?;
            jnx_payload(u32::from(proto), skip(4)?)
        }
        Juniper::Vp => Ok((ETH_P_IP, skip(18)?)),
        Juniper::Services => Ok((ETH_P_IP, skip(if flags & JNX_IN != 0 { 16 } else { 12 })?)),
        Juniper::Atm1 | Juniper::Atm2 => juniper_atm(kind == Juniper::Atm2, flags, rest),
        Juniper::Mlppp => juniper_mlppp(flags, rest),
    }
}

/// PPP protocol numbers Wireshark's Juniper dissector takes as the start of a PPP frame.
fn ppp_guess(proto: u16) -> bool {
    matches!(
        proto,
        0x0021
            | 0x0023
            | 0x0281
            | 0x0283
            | 0x8021
            | 0x8023
            | 0x8281
            | 0xc021
            | 0xc023
            | 0xc223
            | 0x003d
            | 0x0057
            | 0x8057
    )
}

/// The IP version a first header byte suggests (IPv4 with a plausible IHL, or IPv6).
fn ip_guess(b0: u8) -> u32 {
    match b0 {
        0x45..=0x4f => jnx_proto::IP,
        0x60..=0x6f => jnx_proto::IP6,
        _ => 0,
    }
}

/// Juniper ATM1/ATM2 PICs: a cookie (4 bytes on ATM1, 8 on ATM2; a top byte 0x80 on ATM1, or
/// bits 0x70 on ATM2, mark an OAM cell), then the encapsulation is recognised as Wireshark
/// does: LLC/SNAP, OSI NLPID, Ethernet (ATM2, outgoing, a non-zero gap count), VC-muxed PPP
/// (ATM2), Cisco NLPID, VC-muxed IP.
fn juniper_atm(atm2: bool, flags: u8, b: &[u8]) -> Payload<'_> {
    let cookie = b.get(..8).ok_or(SkipReason::Truncated)?;
    let cookie1 = be32(cookie, 0).ok_or(SkipReason::Truncated)?;
    let (hlen, oam) = if atm2 {
        (8, cookie[7] & 0x70 != 0)
    } else {
        (4, cookie1 >> 24 == 0x80)
    };
    if oam {
        return Err(SkipReason::NotIp);
    }
    let p = &b[hlen..];
    match p {
        [0xfe, 0xfe, 0x03, ..] => return Err(SkipReason::NotIp),
        [0xaa, 0xaa, 0x03, ..] => return llc_snap(p),
        _ => {}
    }
    if atm2 && flags & JNX_IN == 0 && cookie1 & 0x3f != 0 {
        return ethernet_payload(p);
    }
    if atm2 && be16(p, 0).is_some_and(ppp_guess) {
        return ppp_payload(p);
    }
    match p.first() {
        None => Err(SkipReason::Truncated),
        Some(0x03) => Err(SkipReason::NotIp),
        Some(&b0) => jnx_payload(ip_guess(b0), p),
    }
}

/// Juniper multilink PPP: a services-PIC cookie (4 bytes with ID 0x54, 8 with ID 0x40/0x47
/// naming the layer-3 protocol), or, without one, the PPP guesses of Wireshark's dissector
/// (an FF 03 header, a 2-byte ML-PIC cookie before a PPP protocol, or a bare PPP protocol).
fn juniper_mlppp(flags: u8, b: &[u8]) -> Payload<'_> {
    let c = b.get(..8).ok_or(SkipReason::Truncated)?;
    let cookie = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
    let (mut proto, mut cookie_len) = match c[0] {
        0x54 => (jnx_proto::PPP, 4),
        0x40 | 0x47 => {
            let dir = (cookie >> 24) & 3;
            let proto = match (cookie >> 16) & 0xf0 {
                // IPv4 — unless the direction bits say incoming without RE: IS-IS over PPP.
                0x00 if flags & JNX_IN != 0 && dir != 3 => jnx_proto::PPP,
                0x00 => jnx_proto::IP,
                0x10 => jnx_proto::IP6,
                0x20 => jnx_proto::MPLS,
                _ => 0,
            };
            (proto, 8)
        }
        _ => (0, 0),
    };
    let mut off = 0;
    if cookie_len == 0 && be16(b, 0) == Some(0xff03) {
        proto = jnx_proto::PPP;
        off = 2;
    }
    if cookie_len == 0 && be16(b, off + 2).is_some_and(ppp_guess) {
        proto = jnx_proto::PPP;
        cookie_len = 2;
    }
    if cookie_len == 0 && be16(b, off).is_some_and(ppp_guess) {
        proto = jnx_proto::PPP;
    }
    jnx_payload(
        proto,
        b.get(off + cookie_len..).ok_or(SkipReason::Truncated)?,
    )
}

/// The subframes of an 802.11 A-MSDU (IEEE 802.11-2020 §9.3.2.2.2): destination and source
/// address, a 2-byte big-endian length, that many bytes of MSDU (LLC/SNAP, then the packet),
/// then padding to a multiple of 4 bytes before the next subframe. Yields, for each, the
/// MSDU's offset in the A-MSDU, its length as sent, and its captured bytes.
#[derive(Debug, Clone)]
pub(super) struct Subframes<'a> {
    body: &'a [u8],
    off: usize,
}

impl<'a> Subframes<'a> {
    /// The subframes of A-MSDU `body`.
    pub(super) fn new(body: &'a [u8]) -> Self {
        Subframes { body, off: 0 }
    }
}

impl<'a> Iterator for Subframes<'a> {
    type Item = (usize, usize, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        // Fewer bytes left than a subframe header: the end (or a trailing FCS).
        let len = usize::from(be16(self.body, self.off.checked_add(12)?)?);
        let start = self.off + 14;
        let end = start.saturating_add(len);
        let msdu = self.body.get(start..end.min(self.body.len()))?;
        self.off = end.div_ceil(4).saturating_mul(4);
        Some((start, len, msdu))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::tests::{assert_inner, inner_ip};
    use super::super::{LinkType, SkipReason, decode, decode_packets};
    use super::*;

    /// ARCnet (RFC 1201 and RFC 1051 framing) in Linux's and BSD's headers, read as tshark reads
    /// them: station IDs 0x01 → 0x02, then the protocol ID.
    #[test]
    fn arcnet_frames_decode() {
        let ip = inner_ip();
        // Linux: src, dst, 2-byte offset, ID 212 (RFC 1201 IP), split flag 0, sequence 7.
        let mut f = vec![0x01, 0x02, 0x00, 0x00, 212, 0x00, 0x00, 0x07];
        f.extend_from_slice(&ip);
        assert_inner(&f, LinkType::ArcnetLinux);
        // Linux, ID 240 (RFC 1051 IP): no split flag or sequence.
        let mut f = vec![0x01, 0x02, 0x00, 0x00, 240];
        f.extend_from_slice(&ip);
        assert_inner(&f, LinkType::ArcnetLinux);
        // BSD: no offset field; an exception frame (split flag 0xff, padding 0xffff, the ID
        // again), then the real split flag and sequence number.
        let mut f = vec![0x01, 0x02, 212, 0xff, 0xff, 0xff, 212, 0x00, 0x00, 0x07];
        f.extend_from_slice(&ip);
        assert_inner(&f, LinkType::ArcnetBsd);
        let mut f = vec![0x01, 0x02, 212, 0x00, 0x00, 0x07];
        f.extend_from_slice(&ip);
        assert_inner(&f, LinkType::ArcnetBsd);
        // RFC 1201 ARP (213) carries no IP; a header cut before its sequence number.
        let arp = [0x01, 0x02, 0x00, 0x00, 213, 0, 0, 0, 0, 1, 8, 0];
        assert_eq!(
            decode(LinkType::ArcnetLinux, &arp).err(),
            Some(SkipReason::NotIp)
        );
        assert_eq!(
            decode(LinkType::ArcnetLinux, &[0x01, 0x02, 0x00, 0x00, 212, 0x00]).err(),
            Some(SkipReason::Truncated)
        );
    }

    /// The pseudo-header: "MGC", flags (0x80 extensions, 0x02 no L2 header, 0x01 incoming).
    fn mgc(flags: u8, ext: &[u8]) -> Vec<u8> {
        let mut v = b"MGC".to_vec();
        v.push(flags);
        if flags & 0x80 != 0 {
            v.extend_from_slice(&(ext.len() as u16).to_be_bytes());
            v.extend_from_slice(ext);
        }
        v
    }

    fn juniper(kind: Juniper) -> LinkType {
        LinkType::Juniper(kind)
    }

    #[test]
    fn juniper_ethernet_ppp_chdlc_and_stripped_l2() {
        let ip = inner_ip();
        let eth = {
            let mut v = vec![2u8; 12];
            v.extend_from_slice(&[0x08, 0x00]);
            v.extend_from_slice(&ip);
            v
        };
        // Ethernet with extension TLVs: interface index 1 (4 bytes), media type Ethernet (1).
        let mut f = mgc(0x81, &[0x01, 0x04, 0x2a, 0, 0, 0, 0x03, 0x01, 0x01]);
        f.extend_from_slice(&eth);
        assert_inner(&f, juniper(Juniper::Ether));
        // PPP: 2 bytes (FF 03), then the protocol 0x0021 and IPv4.
        let mut f = mgc(0x00, &[]);
        f.extend_from_slice(&[0xff, 0x03, 0x00, 0x21]);
        f.extend_from_slice(&ip);
        assert_inner(&f, juniper(Juniper::Ppp));
        // Cisco HDLC: address 0x0f, control 0, ethertype.
        let mut f = mgc(0x01, &[]);
        f.extend_from_slice(&[0x0f, 0x00, 0x08, 0x00]);
        f.extend_from_slice(&ip);
        assert_inner(&f, juniper(Juniper::Chdlc));
        // L2 header stripped: the JUNOS type 2 (IPv4) in little-endian, on any Juniper type.
        let mut f = mgc(0x02, &[]);
        f.extend_from_slice(&[2, 0, 0, 0]);
        f.extend_from_slice(&ip);
        assert_inner(&f, juniper(Juniper::Ether));
        // GGSN: type 2 (little-endian) and a VLAN ID, then IPv4.
        let mut f = mgc(0x00, &[]);
        f.extend_from_slice(&[2, 0, 0x0a, 0]);
        f.extend_from_slice(&ip);
        assert_inner(&f, juniper(Juniper::Ggsn));
        // Services PIC: 12 bytes of cookie outgoing, 16 incoming.
        for (flags, n) in [(0x00, 12), (0x01, 16)] {
            let mut f = mgc(flags, &[]);
            f.extend_from_slice(&vec![0u8; n]);
            f.extend_from_slice(&ip);
            assert_inner(&f, juniper(Juniper::Services));
        }
        // No magic number, an unknown stripped type, a cut extension: not read.
        let mut f = b"XYZ\x00".to_vec();
        f.extend_from_slice(&eth);
        let no_magic = decode(juniper(Juniper::Ether), &f).err();
        assert_eq!(no_magic, Some(SkipReason::Malformed));
        let mut f = mgc(0x02, &[]);
        f.extend_from_slice(&[10, 0, 0, 0]);
        f.extend_from_slice(&ip);
        assert_eq!(
            decode(juniper(Juniper::Ether), &f).err(),
            Some(SkipReason::NotIp)
        );
        let mut f = mgc(0x80, &[1, 4, 0, 0, 0, 0]);
        f.truncate(8);
        assert_eq!(
            decode(juniper(Juniper::Ether), &f).err(),
            Some(SkipReason::Truncated)
        );
    }

    #[test]
    fn juniper_atm_and_mlppp_heuristics() {
        let ip = inner_ip();
        // ATM1: 4-byte cookie, then LLC/SNAP with ethertype IPv4.
        let mut f = mgc(0x00, &[]);
        f.extend_from_slice(&[0, 0, 0, 0x20]);
        f.extend_from_slice(&[0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00]);
        f.extend_from_slice(&ip);
        assert_inner(&f, juniper(Juniper::Atm1));
        // ATM1 OAM cell (cookie's top byte 0x80): no IP.
        let mut oam = mgc(0x00, &[]);
        oam.extend_from_slice(&[0x80, 0, 0, 0, 0, 0, 0, 0]);
        oam.extend_from_slice(&ip);
        assert_eq!(
            decode(juniper(Juniper::Atm1), &oam).err(),
            Some(SkipReason::NotIp)
        );
        // ATM2: 8-byte cookie, then VC-muxed PPP (protocol 0x0021), and VC-muxed bare IPv4.
        let mut f = mgc(0x01, &[]);
        f.extend_from_slice(&[0u8; 8]);
        f.extend_from_slice(&[0x00, 0x21]);
        f.extend_from_slice(&ip);
        assert_inner(&f, juniper(Juniper::Atm2));
        let mut f = mgc(0x01, &[]);
        f.extend_from_slice(&[0u8; 8]);
        f.extend_from_slice(&ip);
        assert_inner(&f, juniper(Juniper::Atm2));
        // MLPPP: an LS-PIC cookie (ID 0x54, 4 bytes) before PPP; an AS-PIC cookie (ID 0x47,
        // 8 bytes) whose protocol bits say IPv4, outgoing.
        let mut f = mgc(0x00, &[]);
        f.extend_from_slice(&[0x54, 0, 0, 1, 0x00, 0x21]);
        f.extend_from_slice(&ip);
        assert_inner(&f, juniper(Juniper::Mlppp));
        let mut f = mgc(0x00, &[]);
        f.extend_from_slice(&[0x47, 0, 0, 0, 0, 0, 0, 0]);
        f.extend_from_slice(&ip);
        assert_inner(&f, juniper(Juniper::Mlppp));
        // No cookie: FF 03 then PPP.
        let mut f = mgc(0x00, &[]);
        f.extend_from_slice(&[0xff, 0x03, 0x00, 0x21]);
        f.extend_from_slice(&ip);
        assert_inner(&f, juniper(Juniper::Mlppp));
    }

    /// An A-MSDU of two subframes, each DA, SA, length, LLC/SNAP and an IPv4 TCP segment, the
    /// first padded to 4 bytes: both packets are read, and `decode` gives the first.
    #[test]
    fn amsdu_subframes_decode() {
        let ip = inner_ip();
        let mut second = ip.clone();
        second[20..22].copy_from_slice(&4321u16.to_be_bytes()); // TCP source port
        let sub = |p: &[u8]| {
            let mut v = vec![0x02; 6];
            v.extend_from_slice(&[0x04; 6]);
            v.extend_from_slice(&((8 + p.len()) as u16).to_be_bytes());
            v.extend_from_slice(&[0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00]);
            v.extend_from_slice(p);
            v
        };
        // QoS data to the AP, QoS control with the A-MSDU bit (0x80).
        let mut f = vec![0x88, 0x01, 0, 0];
        f.extend_from_slice(&[0u8; 20]);
        f.extend_from_slice(&[0x80, 0x00]);
        let mut first = sub(&ip);
        assert_eq!(first.len() % 4, 3, "the test must exercise the padding");
        first.push(0);
        f.extend(first);
        f.extend(sub(&second));
        let ports: Vec<u16> = decode_packets(LinkType::Ieee80211, &f, Some(f.len()))
            .map(|d| match d.unwrap().transport {
                super::super::Transport::Tcp { tcp, payload_len } => {
                    assert_eq!(payload_len, 5);
                    tcp.src_port()
                }
                _ => 0,
            })
            .collect();
        assert_eq!(ports, [1234, 4321]);
        assert_inner(&f, LinkType::Ieee80211);
        // Subframe walk over a cut capture: what was captured of the second MSDU is given,
        // with its length as sent.
        let body = &f[26..];
        let subs: Vec<_> = Subframes::new(&body[..body.len() - 30]).collect();
        assert_eq!(subs.len(), 2);
        assert_eq!(subs[1].1, 8 + ip.len());
        // A length beyond the body, then nothing more: no panic, no loop.
        let bogus = [0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2];
        assert_eq!(Subframes::new(&bogus).count(), 1);
        assert_eq!(Subframes::new(&bogus[..13]).count(), 0);
    }
}
