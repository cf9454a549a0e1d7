#!/usr/bin/env python3
"""Overhead of `latscope stack` (all probes attached) on loopback and veth traffic.

Workloads: `latscope rr` ping-pong over UDP and TCP (transactions/s) and `latscope stream` over
TCP (throughput), against `latscope serve`, on two paths (--path):

  loopback  client and server on 127.0.0.1 of this namespace, `latscope stack` here too;
  veth      the server in one network namespace, the client in another, joined by a veth pair
            (both created for the run under names of their own and always deleted at exit,
            Ctrl-C and errors included). `latscope stack` runs in the server's namespace
            (`nsenter --net`, no --netns filter): its tracepoint, kprobe and cgroup_skb programs
            see every packet of both namespaces, its netfilter links (LOCAL_OUT, POST_ROUTING)
            only the server's, since those attach in one namespace.

Each workload runs once, for a long time, printing a figure every --interval; meanwhile
`latscope stack` is attached and detached over and over (--phase seconds each), taking turns
between the full programs and the calibration programs (`--empty-programs`: the same programs on
the same hooks, each returning at once), with a detached phase between any two. Every interval
that lies wholly inside an attached period counts as "with" that set of programs, wholly inside a
detached period as "without"; intervals that straddle a change (or the loading of the programs)
are dropped. All sides thus see the same moments of a shared, noisy machine, interleaved a few
seconds apart, which separate runs never do.

Reported per workload and set of programs: the median figure with and without, their ratio
(target >= 0.95x), the ratio of each attached phase to the mean of the detached phases around it
(median and spread), and for the ping-pongs the added median round-trip time per transaction.

A second pass does not depend on the noise: with kernel.bpf_stats_enabled on (restored on exit),
the run time of this latscope's BPF programs (found from the stack process's own descriptors, so
another latscope on the machine is not counted) per transaction (per MB for the stream), with the
full programs and with the empty ones, and their ratio (target <= 1.5x). The stats add two clock
reads per program run to both, and they do not see the cost of entering a program (tracepoint
glue, cgroup and netfilter dispatch); the added round-trip times of the first pass do.

--floor adds to each workload phases with the full programs timing no packet
(`--sample 1000000000`; the stamper still stamps skbs that arrive without a kernel stamp).

Usage: sudo benches/stack_overhead.py [--path loopback|veth|both] [--seconds 48] [--phase 3]
       [--stack-args '--direction both'] [--floor] [--out results.json]
Needs root, bpftool, nsenter and ip (iproute2), and a release build (built if LATSCOPE is unset).
"""

import argparse
import datetime
import glob
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RATE_TARGET = 0.95  # issue 38: >= 0.95x the unprobed rate
BPF_TARGET = 1.5  # issue 38: BPF cost <= 1.5x an empty program on the same hooks


class BenchError(Exception):
    pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def sh(*argv, check=True):
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


class Loopback:
    """Client, server and latscope stack in this namespace, over 127.0.0.1."""

    name = "loopback"
    host = "127.0.0.1"

    def __init__(self):
        self.port = free_port()

    def setup(self):
        pass

    def server_prefix(self):
        return []

    client_prefix = stack_prefix = server_prefix

    def cleanup(self):
        pass


class Veth:
    """Two network namespaces joined by a veth pair: the server's and the client's."""

    name = "veth"

    def __init__(self):
        tag = f"{os.getpid() % 100000}"
        self.ns_server = f"lsstkb-{tag}-srv"
        self.ns_client = f"lsstkb-{tag}-cli"
        self.dev_server = f"lsb{tag}s"  # interface names: at most 15 characters
        self.dev_client = f"lsb{tag}c"
        self.host = "10.213.38.1"
        self.client_addr = "10.213.38.2"
        self.port = 7373  # a namespace of its own: nothing else listens there
        self.created = []

    def setup(self):
        for ns in (self.ns_server, self.ns_client):
            sh("ip", "netns", "add", ns)
            self.created.append(ns)
        sh("ip", "link", "add", self.dev_server, "type", "veth", "peer", "name", self.dev_client)
        for dev, ns, addr in ((self.dev_server, self.ns_server, self.host),
                              (self.dev_client, self.ns_client, self.client_addr)):
            sh("ip", "link", "set", dev, "netns", ns)
            run = ["ip", "-n", ns]
            sh(*run, "addr", "add", f"{addr}/24", "dev", dev)
            sh(*run, "link", "set", dev, "up")
            sh(*run, "link", "set", "lo", "up")
            # No IPv6 chatter (router solicitations, DAD) on the measured link.
            sh("ip", "netns", "exec", ns, "sysctl", "-qw",
               f"net.ipv6.conf.{dev}.disable_ipv6=1", check=False)
        sh("ip", "netns", "exec", self.ns_client, "ping", "-c", "1", "-W", "2", self.host)

    def _prefix(self, ns):
        # nsenter changes the network namespace only (`ip netns exec` also remounts /sys, which
        # hides the cgroup v2 mount latscope stack attaches its cgroup_skb programs through).
        return ["nsenter", f"--net=/run/netns/{ns}"]

    def server_prefix(self):
        return self._prefix(self.ns_server)

    def stack_prefix(self):
        return self._prefix(self.ns_server)

    def client_prefix(self):
        return self._prefix(self.ns_client)

    def cleanup(self):
        for ns in self.created:
            # Anything still running inside is ours (the namespace's name is this run's).
            pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", ns, check=False)
        self.created = []
        # Left in this namespace if moving it failed.
        for dev in (self.dev_server, self.dev_client):
            if os.path.exists(f"/sys/class/net/{dev}"):
                sh("ip", "link", "del", dev, check=False)


class Stack:
    """`latscope stack` attached and detached on demand; records when it was attached."""

    def __init__(self, binary, tmp, extra, label, prefix=()):
        self.label = label
        self.binary = binary
        self.tmp = tmp
        self.extra = extra
        self.prefix = list(prefix)
        self.proc = None
        self.periods = []  # (attached_at, detached_at) in time.monotonic()
        # (started, exited): the loading of the programs (the verifier takes a CPU of a small
        # machine for a while) and the tear-down are neither "with" nor "without".
        self.busy = []
        self.attached_line = ""
        self.samples = []  # packets recorded, per attached period

    def attach(self):
        base = os.path.join(self.tmp, "stack-" + self.label.replace(" ", "_"))
        err = open(base + ".err", "w+")
        self.jsonpath = base + ".json"
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            self.prefix + [self.binary, "stack", "-i", "1h", "--json"] + self.extra,
            stdout=open(self.jsonpath, "w"),
            stderr=err,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            err.seek(0)
            text = err.read()
            if "attached" in text:
                self.since = time.monotonic()
                self.attached_line = next(
                    (ln for ln in text.splitlines() if "attached" in ln), "").strip()
                return
            if self.proc.poll() is not None:
                self.proc = None
                raise BenchError(f"latscope stack ({self.label}) failed: {text.strip()}")
            time.sleep(0.02)
        self.kill()
        raise BenchError(f"latscope stack ({self.label}) did not attach within 30 s")

    def detach(self):
        if self.proc is None:
            return
        until = time.monotonic()
        try:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self.periods.append((self.since, until))
        self.busy.append((self.started, time.monotonic()))
        self.samples.append(self.recorded())

    def recorded(self):
        """Packets the run's report holds, over every histogram (the empty programs: none)."""
        try:
            report = json.load(open(self.jsonpath))
        except (OSError, ValueError):
            return None
        return sum(h.get("count", 0) for h in report.get("histograms", []))

    def kill(self):
        if self.proc is not None:
            try:
                self.proc.send_signal(signal.SIGINT)
                self.proc.wait(timeout=20)
            except (subprocess.TimeoutExpired, OSError):
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def prog_ids(self):
        """The ids of the BPF programs this stack process holds (its fds, links included)."""
        ids = set()
        for f in glob.glob(f"/proc/{self.proc.pid}/fdinfo/*"):
            try:
                text = open(f).read()
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith("prog_id:"):
                    ids.add(int(line.split()[1]))
        return ids

    def attached_over(self, a, b):
        return any(s <= a and b <= e for s, e in self.periods)

    def detached_over(self, a, b, margin=0.05):
        return not any(s - margin < b and a < e + margin for s, e in self.busy)


def start_server(binary, path):
    server = subprocess.Popen(
        path.server_prefix() + [binary, "serve", "--bind", path.host, "-p", str(path.port), "-q"],
        stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise BenchError(f"latscope serve exited ({server.returncode}) on {path.name}")
        # The server is up once a TCP connection to it is accepted (from the client's side).
        probe = path.client_prefix() + [sys.executable, "-c",
                                        "import socket,sys; socket.create_connection("
                                        f"('{path.host}', {path.port}), 1).close()"]
        if subprocess.run(probe, capture_output=True).returncode == 0:
            return server
        time.sleep(0.2)
    server.kill()
    raise BenchError(f"latscope serve did not listen on {path.name} within 10 s")


def stop_server(server):
    if server is None or server.poll() is not None:
        return
    server.send_signal(signal.SIGINT)
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def run_workload(args, binary, path, cmd, stacks):
    """Run one workload while attaching each of `stacks` in turn, with a detached phase between
    any two; return [(start, end, figure)] per interval."""
    argv = (path.client_prefix() + [binary] + cmd +
            [f"{path.host}:{path.port}", "--json-lines", "-i", f"{args.interval}s"])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    stop = threading.Event()
    failure = []

    def toggler():
        try:
            stop.wait(args.phase)  # detached first
            turn = 0
            while not stop.is_set():
                stack = stacks[turn % len(stacks)]
                turn += 1
                stack.attach()
                stop.wait(args.phase)
                stack.detach()
                stop.wait(args.phase)
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            failure.append(e)
            proc.terminate()

    t = threading.Thread(target=toggler, daemon=True)
    t.start()
    rows = []
    try:
        for line in proc.stdout:
            now = time.monotonic()
            ev = json.loads(line)
            kind = ev.get("event")
            if kind == "interval":
                p50 = (ev.get("latency") or {}).get("p50_ns") or 0
                rows.append((now, ev["start_ns"], ev["end_ns"], (ev["rate_per_sec"], p50)))
            elif kind == "stream_interval" and ev.get("side") == "client":
                rows.append((now, ev["start_ns"], ev["end_ns"], (ev["rate_bps"], 0)))
        proc.wait()
    finally:
        stop.set()
        t.join()
        for stack in stacks:
            stack.detach()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if failure:
        raise failure[0]
    if not rows:
        raise BenchError(f"no intervals from: {' '.join(argv)}")
    # The workload's clock starts at an unknown moment: the smallest (arrival - end) is the
    # best estimate of it (lines are printed as soon as an interval ends).
    origin = min(now - end / 1e9 for now, _, end, _ in rows)
    return [(origin + s / 1e9, origin + e / 1e9, v) for _, s, e, v in rows]


def classify(rows, stack, stacks, field=0):
    """Intervals wholly inside an attached period of `stack`, and wholly outside every period
    of all `stacks`."""
    on, off = [], []
    for a, b, v in rows:
        if stack.attached_over(a, b):
            on.append((a, v[field]))
        elif all(s.detached_over(a, b) for s in stacks):
            off.append((a, v[field]))
    return on, off


def phase_ratios(on, off, stack, compare=lambda x, y: x / y):
    """Each attached period's mean against the mean of the detached intervals next to it
    (`compare(inside, around)`: their ratio, or their difference)."""
    ratios = []
    for s, e in stack.periods:
        inside = [v for a, v in on if s <= a <= e]
        before = [v for a, v in off if s - 3 * (e - s) <= a < s]
        after = [v for a, v in off if e < a <= e + 3 * (e - s)]
        around = before + after
        if inside and around:
            ratios.append(compare(statistics.mean(inside), statistics.mean(around)))
    return ratios


def measure(args, binary, path, name, unit, scale, cmd, stacks):
    """One workload with `stacks` attached in turn; prints and returns each one's figures."""
    for stack in stacks:
        stack.periods = []
        stack.busy = []
    rows = run_workload(args, binary, path, cmd, stacks)
    res = {}
    for stack in stacks:
        label = name if stack is stacks[0] else ""
        on, off = classify(rows, stack, stacks)
        if not on or not off:
            print(f"  {label:17} {stack.label}: too few clean intervals "
                  f"(on {len(on)}, off {len(off)})")
            continue
        m_on = statistics.median(v for _, v in on)
        m_off = statistics.median(v for _, v in off)
        pr = phase_ratios(on, off, stack)
        spread = (f"per phase: median {statistics.median(pr):.3f}x, "
                  f"range {min(pr):.3f}-{max(pr):.3f}x over {len(pr)}") if pr else ""
        r = {"without": m_off, "with": m_on, "ratio": m_on / m_off, "intervals": [len(off), len(on)],
             "phase_ratios": pr}
        print(f"  {label:17} {stack.label:11} without {m_off / scale:8.0f} {unit}  with "
              f"{m_on / scale:8.0f} {unit}  ratio {m_on / m_off:.3f}x  "
              f"({len(off)}/{len(on)} intervals; {spread})")
        if unit == "tx/s":
            lon, loff = classify(rows, stack, stacks, 1)
            p_on = statistics.median(v for _, v in lon) / 1e3
            p_off = statistics.median(v for _, v in loff) / 1e3
            # The same against the detached intervals around each attached period: the load
            # of a shared machine drifts over a run, and a period is compared with its
            # neighbours only.
            deltas = [d / 1e3 for d in phase_ratios(lon, loff, stack, lambda x, y: x - y)]
            r.update(rtt_without_us=p_off, rtt_with_us=p_on, added_us=p_on - p_off,
                     added_us_phases=deltas)
            local = (f"; per phase: median {statistics.median(deltas):+.2f} us, range "
                     f"{min(deltas):+.2f} to {max(deltas):+.2f} over {len(deltas)}"
                     if deltas else "")
            print(f"  {'':17} {'':11} median RTT without {p_off:.2f} us, with {p_on:.2f} us: "
                  f"{p_on - p_off:+.2f} us per transaction{local}")
        res[stack.label] = r
    full, empty = res.get("all probes"), res.get("empty programs")
    if full and empty and full.get("added_us_phases") and empty.get("added_us_phases"):
        f, e = (statistics.median(x["added_us_phases"]) for x in (full, empty))
        if e > 0.05:
            print(f"  {'':17} added RTT (per-phase medians), all probes / empty programs: "
                  f"{f / e:.2f}x")
    return res


def bpf_totals(ids):
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True).stdout
    ns = runs = 0
    for p in json.loads(out or "[]"):
        if p.get("id") in ids:
            ns += p.get("run_time_ns", 0)
            runs += p.get("run_cnt", 0)
    return ns, runs


def set_stats(on):
    subprocess.run(["sysctl", "-qw", f"kernel.bpf_stats_enabled={1 if on else 0}"], check=True)


def cost_pass(binary, path, stack, workloads, secs):
    """BPF time of `stack`'s programs per unit of work (stats on), per workload."""
    res = {}
    stack.attach()
    try:
        ids = stack.prog_ids()
        if not ids:
            raise BenchError(f"latscope stack ({stack.label}) holds no BPF program")
        for key, cmd in workloads:
            argv = path.client_prefix() + [binary] + cmd + [
                f"{path.host}:{path.port}", "-d", f"{secs}s", "--json"]
            set_stats(True)
            try:
                ns0, n0 = bpf_totals(ids)
                out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
                ns1, n1 = bpf_totals(ids)
            finally:
                set_stats(False)
            r = json.loads(out)["results"][0]
            if key == "stream":
                units = r["bytes_delivered"] / 1e6  # per MB delivered
            else:  # per transaction, the warm-up's included (the programs ran for them too)
                units = r["transactions"] + r["transactions_per_sec"] * json.loads(out).get(
                    "warmup_ns", 0) / 1e9
            res[key] = ((ns1 - ns0) / units, (n1 - n0) / units, (ns1 - ns0) / max(n1 - n0, 1))
    finally:
        stack.detach()
    return res


def conditions():
    model = ""
    for line in sh("lscpu", check=False).stdout.splitlines():
        if line.startswith("Model name:"):
            model = line.split(":", 1)[1].strip()
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "kernel": platform.release(),
        "cpu": model,
        "cpus": os.cpu_count(),
        "loadavg": open("/proc/loadavg").read().split()[:3],
    }


def bench_path(args, binary, tmp, path, results):
    extra = args.stack_args.split()
    full = Stack(binary, tmp, extra, "all probes", path.stack_prefix())
    empty = Stack(binary, tmp, extra + ["--empty-programs"], "empty programs",
                  path.stack_prefix())
    floor = Stack(binary, tmp, extra + ["--sample", "1000000000"], "hooks only",
                  path.stack_prefix())
    stacks = [full] + ([] if args.no_empty else [empty]) + ([floor] if args.floor else [])
    server = None
    out = results.setdefault(path.name, {})
    try:
        path.setup()
        server = start_server(binary, path)
        secs = f"{args.seconds}s"
        workloads = [
            ("udp", "rr udp ping-pong", "tx/s", 1, ["rr", "--udp", "-d", secs]),
            ("tcp", "rr tcp ping-pong", "tx/s", 1, ["rr", "-d", secs]),
            ("stream", "stream tcp", "Mbit/s", 1e6, ["stream", "-d", secs]),
        ]
        wanted = args.workloads.split(",")
        workloads = [w for w in workloads if w[0] in wanted]
        print(f"== {path.name}: each workload {args.seconds:g} s; latscope stack "
              f"({', '.join(s.label for s in stacks)}) attached in turn for {args.phase:g} s, "
              f"detached {args.phase:g} s between; figures every {args.interval:g} s "
              f"(target >= {RATE_TARGET}x)")
        for key, name, unit, scale, cmd in workloads:
            out.setdefault(key, {})["rate"] = measure(args, binary, path, name, unit, scale, cmd,
                                                      stacks)
        for s in stacks:
            if s.attached_line:
                print(f"  [{s.label}] {s.attached_line}")
            got = [n for n in s.samples if n is not None]
            if got:
                loads = [p[0] - b[0] for p, b in zip(s.periods, s.busy)]
                print(f"  [{s.label}] packets recorded per attached period: "
                      f"{min(got)}-{max(got)} over {len(got)}; loading took "
                      f"{min(loads):.1f}-{max(loads):.1f} s (the last workload's)")
        if args.stats_old != "" and args.cost_seconds > 0:
            print(f"BPF run time ({path.name}; kernel.bpf_stats_enabled, {args.cost_rounds} "
                  f"round(s) of {args.cost_seconds:g} s per workload, median):")
            cost_workloads = [(k, {"udp": ["rr", "--udp"], "tcp": ["rr"],
                                   "stream": ["stream"]}[k]) for k, *_ in workloads]
            per = {s.label: {} for s in stacks}
            for _ in range(args.cost_rounds):
                for s in stacks:  # alternate, so both see the same stretch of load
                    for k, v in cost_pass(binary, path, s, cost_workloads,
                                          args.cost_seconds).items():
                        per[s.label].setdefault(k, []).append(v)
            for key, *_ in workloads:
                unit = "MB" if key == "stream" else "transaction"
                base = None
                for s in stacks:
                    rounds = per[s.label].get(key, [])
                    if not rounds:
                        continue
                    per_u = statistics.median(r[0] for r in rounds)
                    runs = statistics.median(r[1] for r in rounds)
                    per_run = statistics.median(r[2] for r in rounds)
                    spread = f"{min(r[0] for r in rounds):.0f}-{max(r[0] for r in rounds):.0f}"
                    line = (f"  {key:6} {s.label:14}: {per_u:7.0f} ns per {unit} ({spread}; "
                            f"{runs:.1f} program runs of {per_run:.0f} ns)")
                    if s is full:
                        base = per_u
                    elif s is empty and base is not None and per_u > 0:
                        line += (f"  all probes / empty: {base / per_u:.2f}x "
                                 f"(target <= {BPF_TARGET}x)")
                    print(line)
                    out.setdefault(key, {}).setdefault("bpf", {})[s.label] = {
                        "ns_per_unit": per_u, "unit": unit, "runs_per_unit": runs,
                        "ns_per_run": per_run, "rounds": [r[0] for r in rounds]}
    finally:
        # A second Ctrl-C (or a SIGTERM) must not cut the clean-up short.
        old = {sig: signal.signal(sig, signal.SIG_IGN)
               for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            for s in (full, empty, floor):
                s.kill()
            stop_server(server)
            path.cleanup()
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)


def summary(results):
    print("Summary (rate: all probes / unprobed, target >= 0.95x; BPF: all probes / empty "
          "programs, target <= 1.5x):")
    for pname, works in results.items():
        for key, r in works.items():
            rate = r.get("rate", {})
            full, empty = rate.get("all probes", {}), rate.get("empty programs", {})
            bpf = r.get("bpf", {})
            bf, be = bpf.get("all probes"), bpf.get("empty programs")
            cells = [f"{pname + ' ' + key:15}"]
            def rate_cell(x):
                pr = x.get("phase_ratios") or []
                return f"{x['ratio']:.3f}x" + (
                    f" (per phase {statistics.median(pr):.3f}x)" if pr else "")

            def added_cell(x):
                ph = x.get("added_us_phases") or []
                return f"{x['added_us']:+.2f} us/tx" + (
                    f" (per phase {statistics.median(ph):+.2f})" if ph else "")

            if full:
                # Met when the pooled ratio and the per-phase median both reach the target;
                # "not shown" when only one does (the load, not the probes, decides then).
                pr = full.get("phase_ratios") or [full["ratio"]]
                meets = [full["ratio"] >= RATE_TARGET, statistics.median(pr) >= RATE_TARGET]
                verdict = "met" if all(meets) else "not shown" if any(meets) else "NOT met"
                cells.append(f"rate {rate_cell(full)} ({verdict})")
            if empty:
                cells.append(f"empty programs' rate {rate_cell(empty)}")
            if "added_us" in full:
                cells.append(f"{added_cell(full)}, empty {added_cell(empty)}"
                             if "added_us" in empty else added_cell(full))
            if bf and be and be["ns_per_unit"] > 0:
                ratio = bf["ns_per_unit"] / be["ns_per_unit"]
                cells.append(f"BPF {bf['ns_per_unit']:.0f} / {be['ns_per_unit']:.0f} ns per "
                             f"{bf['unit']} = {ratio:.2f}x "
                             f"({'met' if ratio <= BPF_TARGET else 'NOT met'})")
            print("  " + "; ".join(cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", choices=["loopback", "veth", "both"], default="both",
                    help="loopback (127.0.0.1), veth (two network namespaces), or both")
    ap.add_argument("--seconds", type=float, default=48, help="length of each workload run")
    ap.add_argument("--phase", type=float, default=3, help="seconds attached / detached")
    ap.add_argument("--interval", type=float, default=0.5, help="workload reporting interval")
    ap.add_argument("--workloads", default="udp,tcp,stream",
                    help="comma-separated subset of udp, tcp, stream")
    ap.add_argument("--stack-args", default="",
                    help="extra arguments for latscope stack, e.g. '--direction both'")
    ap.add_argument("--no-empty", action="store_true",
                    help="no phases with the empty calibration programs (--empty-programs)")
    ap.add_argument("--floor", action="store_true",
                    help="also phases with the programs attached but timing no packet "
                         "(--sample 1000000000)")
    ap.add_argument("--cost-seconds", type=float, default=3,
                    help="length of each workload in the bpf_stats pass (0: no such pass)")
    ap.add_argument("--cost-rounds", type=int, default=2,
                    help="rounds of the bpf_stats pass (each set of programs once per round)")
    ap.add_argument("--out", metavar="FILE", help="also write the figures as JSON to FILE")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN; namespaces for --path veth)")
    binary = os.environ.get("LATSCOPE") or os.path.join(ROOT, "target/release/latscope")
    if not os.environ.get("LATSCOPE"):
        subprocess.run(["cargo", "build", "-q", "--release"], cwd=ROOT, check=True)
    binary = os.path.abspath(binary)

    args.stats_old = subprocess.run(["sysctl", "-n", "kernel.bpf_stats_enabled"],
                                    capture_output=True, text=True).stdout.strip()
    paths = {"loopback": [Loopback], "veth": [Veth], "both": [Loopback, Veth]}[args.path]

    # Ctrl-C is KeyboardInterrupt; SIGTERM and SIGHUP end the run the same way, through every
    # `finally` (namespaces deleted, programs detached, bpf_stats restored).
    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with it ignored

    cond = conditions()
    print(f"{cond['date_utc']}; kernel {cond['kernel']}; {cond['cpus']} x {cond['cpu']}; "
          f"load average {' '.join(cond['loadavg'])}; latscope stack {args.stack_args or '(rx)'}")
    tmp = tempfile.mkdtemp(prefix="lsstk-bench.")
    results = {}
    try:
        for make in paths:
            bench_path(args, binary, tmp, make(), results)
        summary(results)
        end_load = open("/proc/loadavg").read().split()[:3]
        print(f"load average at the end: {' '.join(end_load)}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"conditions": cond, "load_end": end_load,
                           "stack_args": args.stack_args, "results": results}, f, indent=1)
    except BenchError as e:
        sys.exit(f"stack_overhead: {e}")
    except KeyboardInterrupt:
        sys.exit("stack_overhead: interrupted (cleaned up)")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not stop the clean-up
        if args.stats_old != "":
            subprocess.run(["sysctl", "-qw", f"kernel.bpf_stats_enabled={args.stats_old}"])
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)


if __name__ == "__main__":
    main()
