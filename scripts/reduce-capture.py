#!/usr/bin/env python3
"""Cut a public capture down to what a judged-findings test needs, keeping every frame number.

    scripts/reduce-capture.py IN OUT.pcap.gz CONN[,CONN...]

The connections named (latscope's connection numbers, as `latscope analyze --conn N` shows
them) keep every frame: whole up to 384 bytes (a line of typed text the analyzer compares,
up to 256 bytes, stays whole), else cut to 160 bytes (headers and the start of the payload:
the HTTP request and status lines, the analyzer's own greeting — it reads no more). Every
other connection keeps only its first frame and its SYNs, cut to the headers, so that
connections are numbered as in the original; every other frame becomes an empty record with
its original timestamp, so frame numbers stay those of the original file. The result is a
gzip-compressed pcap (latscope reads it as it is).

Needs tshark/editcap (a pcapng input is converted to pcap first; one link type) and the
latscope binary (LATSCOPE, default target/release/latscope) to number the connections.
"""

import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile

WHOLE_UP_TO = 384
CUT_TO = 160
HEADERS_ONLY = 128  # link + IP (v4/v6, with options) + TCP with options


def connections(latscope, path):
    """(client, server, first_frame, id) of every connection latscope numbers."""
    out = subprocess.run(
        [latscope, "analyze", "--json", "--top", "1000000", "--examples", "0", path],
        capture_output=True, text=True, check=False).stdout
    doc = json.loads(out)
    return [(c["client"], c["server"], c["first_frame"], c["id"]) for c in doc["top_connections"]]


def endpoint(ip, port):
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def frame_owners(path, conns):
    """frame number -> (connection id, is SYN) for every TCP frame, as latscope numbers them."""
    fields = ["frame.number", "ip.src", "ipv6.src", "tcp.srcport", "ip.dst", "ipv6.dst",
              "tcp.dstport", "tcp.flags.syn"]
    cmd = ["tshark", "-n", "-r", path, "-Y", "tcp && !icmp && !icmpv6", "-T", "fields",
           "-E", "occurrence=l"]
    for f in fields:
        cmd += ["-e", f]
    rows = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    by_pair = {}
    for client, server, first, cid in conns:
        by_pair.setdefault(frozenset((client, server)), []).append((first, cid))
    owners = {}
    for line in rows.splitlines():
        c = line.split("\t")
        if len(c) < 8 or not c[3]:
            continue
        src = endpoint(c[1] or c[2], c[3])
        dst = endpoint(c[4] or c[5], c[6])
        cands = sorted(by_pair.get(frozenset((src, dst)), []))
        frame = int(c[0])
        owner = None
        for first, cid in cands:
            if first <= frame:
                owner = cid
        if owner is not None:
            owners[frame] = (owner, c[7] in ("1", "True"))
    return owners


def reduce(src, dst, keep, latscope):
    with tempfile.TemporaryDirectory() as tmp:
        pcap = os.path.join(tmp, "in.pcap")
        subprocess.run(["editcap", "-F", "pcap", src, pcap], check=True)
        conns = connections(latscope, src)
        firsts = {first for _, _, first, _ in conns}
        owners = frame_owners(src, conns)
        with open(pcap, "rb") as f:
            data = f.read()
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    header = bytearray(data[:24])
    struct.pack_into(endian + "I", header, 16, 65535)
    out = [bytes(header)]
    pos, frame = 24, 0
    while pos + 16 <= len(data):
        sec, frac, incl, orig = struct.unpack_from(endian + "IIII", data, pos)
        body = data[pos + 16:pos + 16 + incl]
        pos += 16 + incl
        frame += 1
        owner = owners.get(frame)
        if owner and owner[0] in keep:
            cut = body if len(body) <= WHOLE_UP_TO else body[:CUT_TO]
        elif owner and (frame in firsts or owner[1]):
            cut = body[:HEADERS_ONLY]
        else:
            cut = b""
        out.append(struct.pack(endian + "IIII", sec, frac, len(cut), orig) + cut)
    with gzip.open(dst, "wb", compresslevel=9) as g:
        g.write(b"".join(out))


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    keep = {int(x) for x in sys.argv[3].split(",")}
    latscope = os.environ.get("LATSCOPE", "target/release/latscope")
    reduce(sys.argv[1], sys.argv[2], keep, latscope)


if __name__ == "__main__":
    main()
