#!/usr/bin/env python3
"""Generate latscope's capture corpus (tests/data/corpus/): small pcaps with hand-built bytes
(no scapy needed), each a few TCP conversations with known events — handshake, data, a timer
retransmission, duplicate ACKs and a fast retransmission, an out-of-order segment, zero-length
segments with an old sequence number, FIN close — wrapped in each link layer and encapsulation
latscope decodes. tests/integration/wire_corpus.rs checks latscope's counts on every file against tshark's.

Deterministic: the same bytes on every run. Usage: scripts/gen-corpus.py [OUT_DIR]
"""
import gzip
import os
import struct
import sys
import zlib

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "tests", "data", "corpus")

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
T0 = 1_700_000_000_000_000  # µs


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ip4(src, dst, proto, payload, ident=1):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident & 0xFFFF, 0x4000, 64,
                    proto, 0, bytes(src), bytes(dst))
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload


def ip6(src, dst, nh, payload):
    return struct.pack("!IHBB16s16s", 0x60000000, len(payload), nh, 64, bytes(src),
                       bytes(dst)) + payload


def tcp(sport, dport, seq, ack, flags, win, payload=b"", opts=b""):
    while len(opts) % 4:
        opts += b"\x01"
    off = (20 + len(opts)) // 4
    return struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                       off << 4, flags, win, 0, 0) + opts + payload


def udp(sport, dport, payload):
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def eth(et, payload):
    return b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01" + struct.pack("!H", et) + payload


SYN_OPTS = b"\x02\x04\x05\xb4\x04\x02\x01\x03\x03\x07"  # MSS 1460, SACK-permitted, wscale 7


class Conv:
    """One TCP connection; packets come out as bare IP packets with timestamps."""

    def __init__(self, out, cli, srv, cport, sport, isn_c, isn_s, v6=False, rtt_us=20_000):
        self.out, self.cli, self.srv, self.cport, self.sport = out, cli, srv, cport, sport
        self.nxt = [isn_c, isn_s]
        self.v6 = v6
        self.rtt = rtt_us
        self.ident = [1000 + cport, 5000 + cport]

    def send(self, t, c2s, flags, n=0, seq=None, ack=None, opts=b"", win=502):
        d = 0 if c2s else 1
        s = self.nxt[d] if seq is None else seq
        a = self.nxt[1 - d] if ack is None else ack
        src, dst = (self.cli, self.srv) if c2s else (self.srv, self.cli)
        sp, dp = (self.cport, self.sport) if c2s else (self.sport, self.cport)
        seg = tcp(sp, dp, s, a if flags & ACK else 0, flags, win, bytes(n), opts)
        self.ident[d] += 1
        pkt = ip6(src, dst, 6, seg) if self.v6 else ip4(src, dst, 6, seg, self.ident[d])
        self.out.append((t, pkt))
        end = s + n + (1 if flags & (SYN | FIN) else 0)
        if ((end - self.nxt[d]) & 0xFFFFFFFF) < 0x80000000:
            self.nxt[d] = end & 0xFFFFFFFF
        return s

    def handshake(self, t):
        h = self.rtt // 2
        self.send(t, True, SYN, opts=SYN_OPTS, win=64240)
        self.send(t + h, False, SYN | ACK, opts=SYN_OPTS, win=65160)
        self.send(t + 2 * h, True, ACK)
        return t + 2 * h

    def close(self, t):
        h = self.rtt // 2
        self.send(t, True, FIN | ACK)
        self.send(t + h, False, FIN | ACK)
        self.send(t + 2 * h, True, ACK)
        return t + 2 * h


def conversation(out, n, t, v6=False, mss=1448):
    """A request/response exchange with one of each event the counts cover; data segments
    carry `mss` bytes."""
    if v6:
        cli = bytes([0x20, 0x01, 0x0d, 0xb8] + [0] * 11 + [n + 1])
        srv = bytes([0x20, 0x01, 0x0d, 0xb8] + [0] * 11 + [0x80])
    else:
        cli, srv = bytes([10, 0, 1, n + 1]), bytes([10, 0, 2, 1])
    c = Conv(out, cli, srv, 40000 + n, 80, 0x1000_0000 * (n + 1), 0x7000_0000 + 977 * n, v6)
    t = c.handshake(t)
    # Request, ACKed.
    c.send(t + 1000, True, PSH | ACK, 120)
    c.send(t + 11000, False, ACK)
    # Response: four full segments; the second is seen after the third (out-of-order).
    base = c.nxt[1]
    t += 12000
    c.send(t, False, ACK, mss)
    c.send(t + 200, False, ACK, mss, seq=base + 2 * mss)
    c.send(t + 400, False, ACK, mss, seq=base + mss)
    c.nxt[1] = base + 3 * mss
    c.send(t + 600, False, PSH | ACK, mss)
    c.send(t + 20600, True, ACK)
    # Three duplicate ACKs for a lost segment, then its fast retransmission.
    t += 30000
    lost = c.nxt[1]
    c.send(t, False, ACK, mss)  # "lost" (captured before the loss point)
    c.send(t + 100, False, ACK, mss)
    c.send(t + 200, False, ACK, mss)
    c.send(t + 300, False, PSH | ACK, mss)
    c.send(t + 20100, True, ACK, ack=lost)
    c.send(t + 20200, True, ACK, ack=lost)
    c.send(t + 20300, True, ACK, ack=lost)
    c.send(t + 21000, False, ACK, mss, seq=lost)
    c.send(t + 41000, True, ACK)
    # A request answered late, its last segment resent by the timer (RTO) 300 ms later.
    t += 60000
    c.send(t, True, PSH | ACK, 80)
    seg = c.send(t + 30000, False, PSH | ACK, 700)
    c.send(t + 330000, False, PSH | ACK, 700, seq=seg)
    c.send(t + 350000, True, ACK)
    # Zero-length segments with an old sequence number: a pure ACK and a window update from
    # behind the sender's highest sequence (a middlebox, or reordering): no retransmission.
    t += 400000
    c.send(t, False, ACK, seq=seg)
    c.send(t + 1000, False, ACK, seq=seg, win=600)
    c.send(t + 2000, True, ACK, seq=c.nxt[0] - 80)
    return c.close(t + 10000)


def write_pcap(path, link, frames, snap=160, nanos=False):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D if nanos else 0xA1B2C3D4, 2, 4, 0, 0, snap,
                            link))
        for t, data in frames:
            cap = data[:snap]
            frac = (t % 1_000_000) * (1000 if nanos else 1)
            f.write(struct.pack("<IIII", t // 1_000_000, frac, len(cap), len(data)) + cap)


def packets(v6=False, conns=3, mss=1448):
    out = []
    t = T0
    for n in range(conns):
        conversation(out, n, t + n * 7000, v6, mss)
    out.sort(key=lambda p: p[0])
    return out


def vlan(tags, et, payload):
    """`tags` (outer first) of (tpid, vid) around `payload` of ethertype `et`."""
    b = payload
    inner = et
    for tpid, vid in reversed(tags):
        b = struct.pack("!HH", vid, inner) + b
        inner = tpid
    return eth(inner, b)


def pppoe(ip, v6=False):
    ppp = struct.pack("!H", 0x0057 if v6 else 0x0021) + ip
    return struct.pack("!BBHH", 0x11, 0, 0x1234, len(ppp)) + ppp


OUTER_A, OUTER_B = [192, 0, 2, 1], [192, 0, 2, 2]
BSSID, STA, GW = b"\x02\xbb\x00\x00\x00\x01", b"\x02\x5a\x00\x00\x00\x02", b"\x02\x6e\x00\x00\x00\x03"
LLC_SNAP_IP = b"\xaa\xaa\x03\x00\x00\x00\x08\x00"


def wlan(i, ip):
    """An 802.11 data frame carrying `ip`, the `i`-th: to the AP (client's packets) or from
    it, plain or QoS data, every fifth with four addresses (WDS), every seventh QoS one with
    an HT control field (+HTC)."""
    from_server = ip[12:16] == bytes([10, 0, 2, 1])
    qos = i % 2 == 1
    fc1 = 0x02 if from_server else 0x01
    if i % 5 == 0:
        fc1 = 0x03
    htc = qos and i % 7 == 0
    if htc:
        fc1 |= 0x80
    fc0 = 0x88 if qos else 0x08
    a1, a2, a3 = (STA, BSSID, GW) if from_server else (BSSID, STA, GW)
    h = struct.pack("<BBH", fc0, fc1, 44) + a1 + a2 + a3 + struct.pack("<H", (i & 0xFFF) << 4)
    if fc1 & 3 == 3:
        h += BSSID
    if qos:
        h += struct.pack("<H", i % 8)
    if htc:
        h += b"\0\0\0\0"
    return h + LLC_SNAP_IP + ip


def wlan_extras():
    """Frames with no readable IP around the data: a beacon (management) and a protected
    (WPA2-encrypted) data frame whose body is ciphertext."""
    beacon = struct.pack("<BBH", 0x80, 0, 0) + b"\xff" * 6 + BSSID + BSSID + b"\0\0" + bytes(12)
    protected = (struct.pack("<BBH", 0x88, 0x41, 44) + BSSID + STA + GW + b"\x10\0\0\0"
                 + bytes(range(8)) + bytes(range(60)))
    return beacon, protected


def radiotap(frame, i):
    """A radiotap header (flags and rate); every other frame carries its FCS, as flagged."""
    fcs = i % 2 == 0
    hdr = struct.pack("<BBHIBB", 0, 0, 10, 0x6, 0x10 if fcs else 0, 0x6c)
    return hdr + frame + (struct.pack("<I", zlib.crc32(frame)) if fcs else b"")


def arcnet(i, ip):
    """ARCnet as libpcap stores it, Linux header (LINKTYPE_ARCNET_LINUX): source and
    destination station IDs, the 2-byte offset field, then the protocol ID: RFC 1201 IP (212,
    with a split flag and sequence number) or, every third frame, RFC 1051 IP (240)."""
    src, dst = (0x02, 0x01) if ip[12:16] == bytes([10, 0, 2, 1]) else (0x01, 0x02)
    if i % 3 == 0:
        return struct.pack("!BBHB", src, dst, 0, 240) + ip
    return struct.pack("!BBHBBH", src, dst, 0, 212, 0, i & 0xFFFF) + ip


def arcnet_bsd(i, ip):
    """ARCnet with BSD's header (LINKTYPE_ARCNET_BSD): no offset field; IPv6 (ID 196, RFC 1201
    framing), every fourth frame an exception frame (split flag 0xff, padding, the ID again)."""
    src, dst = (0x02, 0x01) if ip[8:24] == ip6_server() else (0x01, 0x02)
    if i % 4 == 0:
        return struct.pack("!BBBBHBBH", src, dst, 196, 0xFF, 0xFFFF, 196, 0, i & 0xFFFF) + ip
    return struct.pack("!BBBBH", src, dst, 196, 0, i & 0xFFFF) + ip


def ip6_server():
    return bytes([0x20, 0x01, 0x0d, 0xb8] + [0] * 11 + [0x80])


def mgc(flags, ext=b""):
    """Juniper's pseudo-header: "MGC", flags (0x80: extensions follow, 0x01: incoming), and
    with 0x80 the extensions' length and TLVs."""
    h = b"MGC" + bytes([flags])
    if flags & 0x80:
        h += struct.pack("!H", len(ext)) + ext
    return h


# Extension TLVs: device interface index 7 (4 bytes, little-endian as JUNOS writes types
# < 128), logical unit 0 (1 byte).
JNX_EXT = b"\x01\x04" + struct.pack("<I", 7) + b"\x05\x01\x00"


def juniper_ether(i, ip):
    """LINKTYPE_JUNIPER_ETHER: the pseudo-header (with extensions on even frames), then
    Ethernet."""
    inbound = ip[12:16] == bytes([10, 0, 2, 1])
    flags = (0x01 if inbound else 0) | (0x80 if i % 2 == 0 else 0)
    return mgc(flags, JNX_EXT) + eth(0x0800, ip)


def juniper_ppp(i, ip):
    """LINKTYPE_JUNIPER_PPP: the pseudo-header, then PPP in HDLC-like framing."""
    return mgc(0x80 if i % 3 == 0 else 0, JNX_EXT) + b"\xff\x03\x00\x21" + ip


def juniper_atm1(i, ip):
    """LINKTYPE_JUNIPER_ATM1: the pseudo-header, a 4-byte ATM cookie (VPI/VCI), then
    LLC/SNAP-encapsulated IPv4 (RFC 2684)."""
    return mgc(0x01 if i % 2 else 0) + struct.pack("!I", 0x00200020) + LLC_SNAP_IP + ip


def amsdu(group, i):
    """An 802.11 QoS data frame whose body is an A-MSDU (QoS control bit 7) of the packets in
    `group`: each subframe destination, source, length, LLC/SNAP and the packet, padded to 4
    bytes except the last."""
    from_server = group[0][12:16] == bytes([10, 0, 2, 1])
    a1, a2, a3 = (STA, BSSID, GW) if from_server else (BSSID, STA, GW)
    h = struct.pack("<BBH", 0x88, 0x02 if from_server else 0x01, 44) + a1 + a2 + a3
    h += struct.pack("<HH", (i & 0xFFF) << 4, 0x80 | (i % 8))
    body = b""
    for k, ip in enumerate(group):
        da, sa = (STA, GW) if from_server else (GW, STA)
        sub = da + sa + struct.pack("!H", len(LLC_SNAP_IP) + len(ip)) + LLC_SNAP_IP + ip
        if k + 1 < len(group):
            sub += bytes(-len(sub) % 4)
        body += sub
    return h + body


def amsdu_frames(pkts):
    """Consecutive packets in the same direction less than 250 µs apart travel in one A-MSDU
    (at most 3), timestamped with the last one; the rest alone in one-subframe A-MSDUs."""
    frames, group, t_last = [], [], None
    for t, ip in pkts:
        same = group and ip[12:20] == group[0][12:20] and t - t_last < 250 and len(group) < 3
        if group and not same:
            frames.append((t_last, amsdu(group, len(frames))))
            group = []
        group.append(ip)
        t_last = t
    frames.append((t_last, amsdu(group, len(frames))))
    return frames


def main():
    os.makedirs(OUT, exist_ok=True)
    v4 = packets()
    v6 = packets(v6=True)
    # Frames are cut at 160 bytes (every header fits; the IP lengths still say how long the
    # segments were), which keeps the committed files small.
    files = {
        "ethernet.pcap": (1, [(t, eth(0x0800, p)) for t, p in v4]),
        "ethernet-ipv6.pcap": (1, [(t, eth(0x86DD, p)) for t, p in v6]),
        "raw-ip.pcap": (101, v4),
        "linux-sll.pcap": (113, [(t, struct.pack("!HHH8sH", 0, 1, 6, b"\2" * 8, 0x0800) + p)
                                 for t, p in v4]),
        "null-loopback.pcap": (0, [(t, struct.pack("<I", 2) + p) for t, p in v4]),
        "vlan-triple.pcap": (1, [(t, vlan([(0x88A8, 10), (0x8100, 20), (0x8100, 30)], 0x0800,
                                          p)) for t, p in v4]),
        "pppoe-qinq.pcap": (1, [(t, vlan([(0x88A8, 7), (0x8100, 8)], 0x8864, pppoe(p)))
                                for t, p in v4]),
        "ppp.pcap": (9, [(t, b"\xff\x03\x00\x21" + p) for t, p in v4]),
        "mpls.pcap": (1, [(t, eth(0x8847, struct.pack("!II", (100 << 12) | 64,
                                                       (200 << 12) | 0x100 | 64) + p))
                          for t, p in v4]),
        "gre.pcap": (1, [(t, eth(0x0800, ip4(OUTER_A, OUTER_B, 47,
                                             struct.pack("!HH", 0, 0x0800) + p)))
                         for t, p in v4]),
        "gre-teb-key.pcap": (1, [(t, eth(0x0800, ip4(OUTER_A, OUTER_B, 47,
                                                     struct.pack("!HHII", 0x3000, 0x6558, 42, i)
                                                     + eth(0x0800, p))))
                                 for i, (t, p) in enumerate(v4)]),
        "ipip.pcap": (1, [(t, eth(0x0800, ip4(OUTER_A, OUTER_B, 4, p))) for t, p in v4]),
        "vxlan.pcap": (1, [(t, eth(0x0800, ip4(OUTER_A, OUTER_B, 17, udp(
            50000 + i % 7, 4789, struct.pack("!II", 0x08000000, 100 << 8) + eth(0x0800, p)))))
                           for i, (t, p) in enumerate(v4)]),
        "geneve.pcap": (1, [(t, eth(0x0800, ip4(OUTER_A, OUTER_B, 17, udp(
            50000 + i % 7, 6081, struct.pack("!BBHI", 2, 0, 0x6558, 100 << 8)
            + struct.pack("!HBBI", 0x0103, 0x80, 1, 0xdeadbeef) + eth(0x0800, p)))))
                            for i, (t, p) in enumerate(v4)]),
    }
    beacon, protected = wlan_extras()
    air = [(T0 - 1000, beacon)] + [(t, wlan(i, p)) for i, (t, p) in enumerate(v4)] + \
        [(v4[-1][0] + 1000, protected)]
    files["wlan-80211.pcap"] = (105, air)
    files["wlan-radiotap.pcap"] = (127, [(t, radiotap(f, i)) for i, (t, f) in enumerate(air)])
    files["wlan-ppi.pcap"] = (192, [(t, struct.pack("<BBHI", 0, 0, 8, 105) + f) for t, f in air])
    # IP over InfiniBand: the 40-byte address pseudo-header (unicast: no GRH, the destination
    # QPN and GID), then RFC 4391's type and reserved bytes.
    files["ipoib.pcap"] = (242, [(t, b"\0" * 20 + struct.pack("!I", 0x48) + bytes(15) + b"\1"
                                  + struct.pack("!HH", 0x0800, 0) + p) for t, p in v4])
    # WCCP redirection in GRE: version 2 puts a 4-byte redirect header (service 0) before
    # the IPv4 packet; version 1 does not (every third frame).
    files["wccp.pcap"] = (1, [(t, eth(0x0800, ip4(OUTER_A, OUTER_B, 47, struct.pack(
        "!HH", 0, 0x883E) + (b"" if i % 3 == 0 else b"\0\0\0\x2a") + p)))
                              for i, (t, p) in enumerate(v4)])
    files["arcnet-linux.pcap"] = (129, [(t, arcnet(i, p)) for i, (t, p) in enumerate(v4)])
    files["arcnet-bsd.pcap"] = (7, [(t, arcnet_bsd(i, p)) for i, (t, p) in enumerate(v6)])
    files["juniper-ether.pcap"] = (178, [(t, juniper_ether(i, p)) for i, (t, p) in enumerate(v4)])
    files["juniper-ppp.pcap"] = (179, [(t, juniper_ppp(i, p)) for i, (t, p) in enumerate(v4)])
    files["juniper-atm1.pcap"] = (137, [(t, juniper_atm1(i, p)) for i, (t, p) in enumerate(v4)])
    for name, (link, frames) in files.items():
        write_pcap(os.path.join(OUT, name), link, frames)
    # A-MSDUs cannot be cut at 160 bytes without losing subframes: small segments (100 bytes)
    # and the whole frame captured.
    small = packets(mss=100)
    write_pcap(os.path.join(OUT, "wlan-amsdu.pcap"), 105, amsdu_frames(small), snap=4096)
    # The same capture gzip-compressed (tshark opens it too); mtime 0 keeps the bytes stable.
    with open(os.path.join(OUT, "ethernet.pcap"), "rb") as f:
        raw = f.read()
    with open(os.path.join(OUT, "ethernet-gzip.pcap.gz"), "wb") as f:
        f.write(gzip.compress(raw, mtime=0))
    print(f"{len(files) + 2} captures in {OUT}")


if __name__ == "__main__":
    main()
