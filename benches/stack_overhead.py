#!/usr/bin/env python3
"""Overhead of `latscope stack` (all probes attached) on loopback traffic.

Workloads: `latscope rr` ping-pong over UDP and TCP (transactions/s) and `latscope stream` over
TCP (throughput), against `latscope serve` on 127.0.0.1. Each workload runs once, for a long
time, printing a figure every --interval; meanwhile `latscope stack` is attached and detached
over and over (--phase seconds each). Every interval that lies wholly inside an attached period
counts as "with", wholly inside a detached period as "without"; intervals that straddle a change
(or the loading of the programs) are dropped. Both sides thus see the same moments of a shared,
noisy machine, interleaved a few seconds apart, which separate runs never do.

Reported per workload: the median figure with and without, their ratio (target >= 0.95), and the
ratio of each attached phase to the mean of the detached phases around it (median and spread).

A second figure does not depend on the noise: with kernel.bpf_stats_enabled on (a separate pass;
restored on exit), the run time of latscope's BPF programs per transaction, and the ratio it
predicts. The stats add two clock reads per program run, so that figure is an upper bound.

--floor adds to each ping-pong phases with the same programs at the same hooks but no packet
timed at any probe (`--sample 1000000000`; the stamper still stamps skbs that arrive without a
kernel stamp), taking turns with the full phases (a detached phase between any two): the price of
being at those hooks at all, which no work saved inside the programs can go below.

Usage: sudo benches/stack_overhead.py [--seconds 40] [--phase 3] [--interval 0.5] [--floor]
Needs root, bpftool, and a release build (built if missing).
"""

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Stack:
    """`latscope stack` attached and detached on demand; records when it was attached."""

    def __init__(self, binary, tmp, extra, label=""):
        self.label = label
        self.binary = binary
        self.tmp = tmp
        self.extra = extra
        self.proc = None
        self.periods = []  # (attached_at, detached_at) in time.monotonic()

    def attach(self):
        err = open(os.path.join(self.tmp, "stack.err"), "w+")
        self.proc = subprocess.Popen(
            [self.binary, "stack", "-i", "1h", "--json"] + self.extra,
            stdout=open(os.path.join(self.tmp, "stack.json"), "w"),
            stderr=err,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            err.seek(0)
            text = err.read()
            if "attached" in text:
                self.since = time.monotonic()
                return
            if self.proc.poll() is not None:
                sys.exit(f"latscope stack failed: {text.strip()}")
            time.sleep(0.02)
        sys.exit("latscope stack did not attach within 20 s")

    def detach(self):
        if self.proc is None:
            return
        until = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=20)
        self.proc = None
        self.periods.append((self.since, until))

    def attached_over(self, a, b):
        return any(s <= a and b <= e for s, e in self.periods)

    def detached_over(self, a, b, margin=0.05):
        return not any(s - margin < b and a < e + margin for s, e in self.periods)


def run_workload(args, binary, port, cmd, stacks):
    """Run one workload while attaching each of `stacks` in turn, with a detached phase between
    any two; return [(start, end, figure)] per interval."""
    argv = [binary] + cmd + [f"127.0.0.1:{port}", "--json-lines", "-i", f"{args.interval}s"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    stop = threading.Event()

    def toggler():
        time.sleep(args.phase)  # detached first
        turn = 0
        while not stop.is_set():
            stack = stacks[turn % len(stacks)]
            turn += 1
            stack.attach()
            stop.wait(args.phase)
            stack.detach()
            stop.wait(args.phase)

    t = threading.Thread(target=toggler, daemon=True)
    t.start()
    rows = []
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
    stop.set()
    t.join()
    for stack in stacks:
        stack.detach()
    if not rows:
        sys.exit(f"no intervals from: {' '.join(argv)}")
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


def phase_ratios(on, off, stack):
    """Each attached period's mean against the mean of the detached intervals next to it."""
    ratios = []
    for s, e in stack.periods:
        inside = [v for a, v in on if s <= a <= e]
        before = [v for a, v in off if s - 2 * (e - s) <= a < s]
        after = [v for a, v in off if e < a <= e + 2 * (e - s)]
        around = before + after
        if inside and around:
            ratios.append(statistics.mean(inside) / statistics.mean(around))
    return ratios


def bpf_totals():
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True).stdout
    ns = runs = 0
    for p in json.loads(out or "[]"):
        if p.get("name", "").startswith("lsstk_"):
            ns += p.get("run_time_ns", 0)
            runs += p.get("run_cnt", 0)
    return ns, runs


def cost_pass(binary, port, stack, secs):
    """BPF time per transaction (stats on), per transport."""
    res = {}
    stack.attach()
    try:
        for name, extra in (("udp", ["--udp"]), ("tcp", [])):
            subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=1"], check=True)
            ns0, n0 = bpf_totals()
            out = subprocess.run(
                [binary, "rr", f"127.0.0.1:{port}", "-d", f"{secs}s", "--json"] + extra,
                capture_output=True, text=True, check=True).stdout
            ns1, n1 = bpf_totals()
            subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=0"], check=True)
            r = json.loads(out)["results"][0]
            tx = r["transactions"] + r["transactions_per_sec"] * 0.2  # + warm-up
            res[name] = ((ns1 - ns0) / tx, (n1 - n0) / tx, (ns1 - ns0) / max(n1 - n0, 1))
    finally:
        stack.detach()
    return res


def measure(args, binary, port, name, unit, scale, cmd, stacks):
    """One workload with `stacks` attached in turn; prints each one's with/without figures."""
    for stack in stacks:
        stack.periods = []
    rows = run_workload(args, binary, port, cmd, stacks)
    for stack in stacks:
        label = name if stack is stacks[0] else f"  {stack.label}"
        on, off = classify(rows, stack, stacks)
        if not on or not off:
            print(f"  {label}: too few clean intervals (on {len(on)}, off {len(off)})")
            continue
        m_on = statistics.median(v for _, v in on)
        m_off = statistics.median(v for _, v in off)
        pr = phase_ratios(on, off, stack)
        spread = (f"per phase: median {statistics.median(pr):.3f}x, "
                  f"range {min(pr):.3f}-{max(pr):.3f}x over {len(pr)}") if pr else ""
        print(f"  {label:17} without {m_off / scale:9.0f} {unit}  with {m_on / scale:9.0f} "
              f"{unit}  ratio {m_on / m_off:.3f}x  ({len(off)}/{len(on)} intervals; {spread})")
        if unit == "tx/s":
            lon, loff = classify(rows, stack, stacks, 1)
            p_on = statistics.median(v for _, v in lon) / 1e3
            p_off = statistics.median(v for _, v in loff) / 1e3
            print(f"  {'':17} median RTT without {p_off:.2f} us, with {p_on:.2f} us: "
                  f"{p_on - p_off:+.2f} us per transaction")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=40, help="length of each workload run")
    ap.add_argument("--phase", type=float, default=3, help="seconds attached / detached")
    ap.add_argument("--interval", type=float, default=0.5, help="workload reporting interval")
    ap.add_argument("--workloads", default="udp,tcp,stream",
                    help="comma-separated subset of udp, tcp, stream")
    ap.add_argument("--stack-args", default="",
                    help="extra arguments for latscope stack, e.g. '--probes udp-start'")
    ap.add_argument("--floor", action="store_true",
                    help="also measure each ping-pong with the same programs attached but timing "
                         "no packet (--sample 1000000000): the cost of the hooks themselves")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (CAP_BPF, CAP_PERFMON)")
    binary = os.environ.get("LATSCOPE") or os.path.join(ROOT, "target/release/latscope")
    if not os.environ.get("LATSCOPE"):
        subprocess.run(["cargo", "build", "-q", "--release"], cwd=ROOT, check=True)

    old_stats = subprocess.run(["sysctl", "-n", "kernel.bpf_stats_enabled"],
                               capture_output=True, text=True).stdout.strip()
    tmp = tempfile.mkdtemp(prefix="lsstk-bench.")
    port = free_port()
    server = subprocess.Popen([binary, "serve", "--bind", "127.0.0.1", "-p", str(port), "-q"],
                              stderr=subprocess.DEVNULL)
    stack = Stack(binary, tmp, args.stack_args.split())
    floor = Stack(binary, tmp, args.stack_args.split() + ["--sample", "1000000000"], "hooks only")
    try:
        time.sleep(0.5)
        secs = f"{args.seconds}s"
        workloads = [
            ("udp", "rr udp ping-pong", "tx/s", 1, ["rr", "--udp", "-d", secs]),
            ("tcp", "rr tcp ping-pong", "tx/s", 1, ["rr", "-d", secs]),
            ("stream", "stream tcp", "Mbit/s", 1e6, ["stream", "-t", secs]),
        ]
        wanted = args.workloads.split(",")
        workloads = [w[1:] for w in workloads if w[0] in wanted]
        print(f"each workload {args.seconds:.0f} s; latscope stack attached/detached every "
              f"{args.phase:g} s; figures every {args.interval:g} s (target >= 0.95x)")
        for name, unit, scale, cmd in workloads:
            both = args.floor and unit == "tx/s"
            measure(args, binary, port, name, unit, scale, cmd, [stack, floor] if both else [stack])
        if old_stats != "":
            print("BPF time per transaction (kernel.bpf_stats_enabled; an upper bound):")
            for which in [stack, floor] if args.floor else [stack]:
                cost = cost_pass(binary, port, which, 3)
                for name, (per_tx, runs, per_run) in cost.items():
                    print(f"  rr {name}{' ' + which.label if which.label else ''}: {per_tx:.0f} ns "
                          f"per transaction ({runs:.1f} program runs of {per_run:.0f} ns)")
    finally:
        stack.detach()
        floor.detach()
        server.send_signal(signal.SIGINT)
        server.wait(timeout=10)
        if old_stats != "":
            subprocess.run(["sysctl", "-qw", f"kernel.bpf_stats_enabled={old_stats}"])
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)


if __name__ == "__main__":
    main()
