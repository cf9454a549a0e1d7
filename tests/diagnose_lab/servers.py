#!/usr/bin/env python3
"""Small servers for the diagnose lab, each written the way an application would be, not the way
latscope expects: the lab starts them inside the namespaces it builds.

  servers.py http ADDR PORT [--split] [--think-ms MS] [--single] [--pause-ms MS --pause-every N]
                           [--backlog N] [--accept-ms MS] [--close]
      HTTP/1.1 keep-alive server answering every request with a 1 KiB body.
      --split     header and body in two send() calls, TCP_NODELAY left off (Nagle on)
      --think-ms  sleep before answering (application time)
      --work-ms   compute for MS of CPU time before answering (rendering, serialising)
      --pause-ms, --pause-every
                  every Nth request (counted over the whole server) waits MS first, as a
                  stop-the-world pause (garbage collection, a lock held by a periodic job) would
      --single    one thread serving every connection from one event loop (a single worker,
                  like a Node.js or asyncio server doing its work synchronously)
      --backlog   listen() backlog (default 1024)
      --accept-ms the accepting thread spends MS after each new connection before it accepts
                  the next (per-connection book-keeping done on the acceptor)
      --close     answer with `Connection: close` and close after each response: every request
                  is a new connection
  servers.py dns ADDR PORT NAME IPV4 DELAY_MS [--no-aaaa] [--log FILE]
      A UDP DNS responder: A queries for NAME get IPV4 after DELAY_MS, everything else gets
      NXDOMAIN (also after the delay); AAAA for NAME gets an empty answer.
      --no-aaaa   AAAA queries (for any name) get no answer at all, as from a resolver or a
                  middlebox that drops them: the client waits for its timeout
      --log       append "NAME TYPE" for every query received to FILE
"""

import socket
import struct
import sys
import threading
import time

BODY = b"x" * 1024


PAUSE = {"every": 0, "s": 0.0, "n": 0}
PAUSE_LOCK = threading.Lock()


def maybe_pause():
    if not PAUSE["every"]:
        return
    with PAUSE_LOCK:
        PAUSE["n"] += 1
        hit = PAUSE["n"] % PAUSE["every"] == 0
    if hit:
        time.sleep(PAUSE["s"])


CLOSE = {"on": False}


WORK = {"s": 0.0}


def work():
    """Burn WORK["s"] of this thread's CPU time (not wall time: a throttled or preempted thread
    takes longer)."""
    if not WORK["s"]:
        return
    end = time.thread_time() + WORK["s"]
    x = 0
    while time.thread_time() < end:
        for i in range(200):
            x += i * i


def http_conn(conn, split, think_s):
    buf = b""
    with conn:
        while True:
            while b"\r\n\r\n" not in buf:
                try:
                    chunk = conn.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk
            _, buf = buf.split(b"\r\n\r\n", 1)
            if think_s:
                time.sleep(think_s)
            work()
            maybe_pause()
            try:
                respond(conn, split)
            except OSError:
                return
            if CLOSE["on"]:
                return


def respond(conn, split):
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
        + str(len(BODY)).encode()
        + (b"\r\nConnection: close" if CLOSE["on"] else b"")
        + b"\r\n\r\n"
    )
    if split:
        conn.sendall(head)
        conn.sendall(BODY)
    else:
        conn.sendall(head + BODY)


def event_loop(ls, split, think_s):
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(ls, selectors.EVENT_READ)
    bufs = {}
    while True:
        for key, _ in sel.select():
            s = key.fileobj
            if s is ls:
                conn, _ = ls.accept()
                if not split:
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sel.register(conn, selectors.EVENT_READ)
                bufs[conn] = b""
                continue
            try:
                chunk = s.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                sel.unregister(s)
                bufs.pop(s, None)
                s.close()
                continue
            bufs[s] += chunk
            while b"\r\n\r\n" in bufs[s]:
                _, bufs[s] = bufs[s].split(b"\r\n\r\n", 1)
                if think_s:
                    time.sleep(think_s)  # the work blocks the only thread
                try:
                    respond(s, split)
                except OSError:
                    break


def http(args):
    addr, port = args[0], int(args[1])
    split = "--split" in args
    single = "--single" in args
    think_s = 0.0
    if "--think-ms" in args:
        think_s = float(args[args.index("--think-ms") + 1]) / 1000.0
    if "--work-ms" in args:
        WORK["s"] = float(args[args.index("--work-ms") + 1]) / 1000.0
    if "--pause-every" in args:
        PAUSE["every"] = int(args[args.index("--pause-every") + 1])
        PAUSE["s"] = float(args[args.index("--pause-ms") + 1]) / 1000.0
    backlog = int(args[args.index("--backlog") + 1]) if "--backlog" in args else 1024
    accept_s = float(args[args.index("--accept-ms") + 1]) / 1000.0 if "--accept-ms" in args else 0.0
    CLOSE["on"] = "--close" in args
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    ls = socket.socket(fam, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(backlog)
    print("ready", flush=True)
    if single:
        event_loop(ls, split, think_s)
        return
    while True:
        conn, _ = ls.accept()
        if not split:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=http_conn, args=(conn, split, think_s), daemon=True).start()
        if accept_s:
            time.sleep(accept_s)


def qname(msg):
    """The question's name and the offset after the question."""
    i, labels = 12, []
    while msg[i]:
        n = msg[i]
        labels.append(msg[i + 1 : i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    qtype, _qclass = struct.unpack("!HH", msg[i + 1 : i + 5])
    return ".".join(labels).lower(), qtype, i + 5


def dns_answer(msg, name, ipv4):
    q, qtype, end = qname(msg)
    question = msg[12:end]
    (tid,) = struct.unpack("!H", msg[:2])
    if q != name:
        return struct.pack("!HHHHHH", tid, 0x8183, 1, 0, 0, 0) + question
    if qtype != 1:
        return struct.pack("!HHHHHH", tid, 0x8180, 1, 0, 0, 0) + question
    rr = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + socket.inet_aton(ipv4)
    return struct.pack("!HHHHHH", tid, 0x8180, 1, 1, 0, 0) + question + rr


def dns(args):
    addr, port, name, ipv4, delay_s = (
        args[0],
        int(args[1]),
        args[2].lower().rstrip("."),
        args[3],
        float(args[4]) / 1000.0,
    )
    no_aaaa = "--no-aaaa" in args
    log = open(args[args.index("--log") + 1], "a", buffering=1) if "--log" in args else None
    s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))
    print("ready", flush=True)

    def answer(msg, peer):
        try:
            q, qtype, _ = qname(msg)
        except (IndexError, struct.error):
            return
        if log:
            log.write(f"{q} {qtype}\n")
        if no_aaaa and qtype == 28:
            return
        time.sleep(delay_s)
        try:
            s.sendto(dns_answer(msg, name, ipv4), peer)
        except (OSError, IndexError, struct.error):
            pass

    while True:
        msg, peer = s.recvfrom(4096)
        if len(msg) > 12:
            threading.Thread(target=answer, args=(msg, peer), daemon=True).start()


if __name__ == "__main__":
    {"http": http, "dns": dns}[sys.argv[1]](sys.argv[2:])
