#!/usr/bin/env bash
# latscope http against wrk (and oha, if installed) on the same private nginx on loopback, with
# the same connections and threads, in one run. Prints requests/s, p99 and client CPU time per
# request of each tool, and the ratios latscope/wrk. Rounds alternate the order of the tools so
# that load from other processes on a shared machine hits them alike; the ratio of the medians
# over rounds is the headline. CPU µs per request (user+sys of the client process, from
# wait4) is the figure least disturbed by a noisy machine.
#
# Client and nginx share the machine's cores, so requests/s is set by how much CPU nginx gets:
# the client that spends less CPU per request leaves nginx more. nginx runs one worker per core
# (`worker_processes auto`), so the server can use every core the client leaves free; the CPU per
# request is the figure that isolates the client.
#
# nginx's own CPU per request is printed beside it, with the cores client and nginx kept busy:
# when those two fill the cores (-t2 on a 2-core machine), requests/s is cores / (client CPU +
# nginx CPU per request), so the ratio of requests/s can be no better than the "bound" column,
# (wrk's client + nginx CPU per request) / (the tool's), however cheap the client gets. When they
# leave cores idle (-t1), requests/s is set by the wake-up chain, not by CPU.
#
#   benches/http_vs_wrk.sh                 # 1 and 2 threads × 50 and 500 connections, 5 s, 3 rounds
#   SECS=10 ROUNDS=5 CONNS="50 500 1000" THREADS="1 2" benches/http_vs_wrk.sh
#   LATSCOPE_BEFORE=/tmp/latscope.old benches/http_vs_wrk.sh   # also an older build, same rounds
#   CALLGRIND=1 ROUNDS=0 benches/http_vs_wrk.sh  # only user-space instructions per request
#   BENCH_SUMMARY=FILE ...   # also append the ratios as TSV lines (benches/all.sh reads them)
#
# CALLGRIND=1 adds the one figure that load on the machine cannot move: the client's user-space
# instructions per request, counted by valgrind's callgrind over -n 20000 and -n 40000 requests
# (one thread, 50 connections); the difference divided by 20000 removes start-up and exit.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benches/nginx_lab.sh" wrk

export BENCH_SUMMARY=${BENCH_SUMMARY:-} CALLGRIND=${CALLGRIND:-} SECS=${SECS:-5} ROUNDS=${ROUNDS:-3} CONNS=${CONNS:-"50 500"} THREADS=${THREADS:-"1 $(nproc)"}
export LATSCOPE=${LATSCOPE:-$ROOT/target/release/latscope} LATSCOPE_BEFORE=${LATSCOPE_BEFORE:-} NGINX_BIN
export BENCH_DIR="$ROOT/benches"
exec python3 - <<'PY'
import json, os, re, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

SECS, ROUNDS = int(os.environ["SECS"]), int(os.environ["ROUNDS"])
THREADS = [int(t) for t in os.environ["THREADS"].split()]
CONNS = [int(c) for c in os.environ["CONNS"].split()]
LATSCOPE, BEFORE, NGINX = os.environ["LATSCOPE"], os.environ["LATSCOPE_BEFORE"], os.environ["NGINX_BIN"]
HAVE_OHA = shutil.which("oha") is not None

sys.path.insert(0, os.environ["BENCH_DIR"])
from nginx_lab import Nginx
lab = Nginx(NGINX, "latscope-http-bench")
d, port, url, cleanup = lab.dir, lab.port, lab.url, lab.stop
try:

    def timed(argv):
        """Run a client: its output, its CPU seconds, and nginx's CPU seconds meanwhile."""
        before = lab.cpu_s()
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        out = p.stdout.read().decode()
        _, _, ru = os.wait4(p.pid, 0)
        return out, ru.ru_utime + ru.ru_stime, lab.cpu_s() - before

    def ms(v, unit): return float(v) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

    def run_wrk(c, t):
        out, cpu, srv = timed(["wrk", "-t", str(t), "-c", str(c), "-d", f"{SECS}s", "--timeout", "2s", "--latency", url])
        n = int(re.search(r"(\d+) requests in", out).group(1))
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        p99 = ms(*re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", out, re.M).groups())
        return rps, p99, cpu / n * 1e6, srv / n * 1e6, (cpu + srv) / SECS

    def run_latscope(c, t, binary=LATSCOPE):
        out, cpu, srv = timed([binary, "http", "-t", str(t), "-c", str(c), "-d", f"{SECS}s", "--timeout", "2s", "--json", "--no-progress", url])
        j = json.loads(out)
        # The warm-up's requests cost CPU too: charge the CPU to every request answered.
        n = max(j["requests"] + j.get("warmup_requests", 0), 1)
        return j["requests_per_sec"], j["latency"]["p99_ns"] / 1e6, cpu / n * 1e6, srv / n * 1e6, (cpu + srv) / ((j["elapsed_ns"] + j["warmup_ns"]) / 1e9)

    def run_oha(c, t):
        # oha has no thread option (tokio's runtime uses every core).
        out, cpu, srv = timed(["oha", "-c", str(c), "-z", f"{SECS}s", "--no-tui", "--output-format", "json", url])
        j = json.loads(out)
        rps = j["summary"]["requestsPerSec"]
        n = max(rps * SECS, 1)
        return rps, j["latencyPercentiles"]["p99"] * 1e3, cpu / n * 1e6, srv / n * 1e6, (cpu + srv) / SECS

    tools = ["wrk", "latscope"] + (["before"] if BEFORE else []) + (["oha"] if HAVE_OHA else [])
    runners = {"wrk": run_wrk, "latscope": run_latscope, "oha": run_oha,
               "before": lambda c, t: run_latscope(c, t, BEFORE)}
    print(f"nginx on 127.0.0.1:{port}, {os.cpu_count()} cores, {SECS}s per run, threads {THREADS}, {ROUNDS} rounds"
          + ("" if HAVE_OHA else " (oha not installed: skipped)") + (f"; before = {BEFORE}" if BEFORE else ""))
    print(f"{'thr':<4} {'conns':<6} {'round':<5} {'tool':<9} {'req/s':>10} {'p99 ms':>9} {'CPU us/req':>11} {'nginx us/req':>13} {'busy cores':>11}")
    res = {}
    cases = [(t, c) for t in THREADS for c in CONNS]
    # Rounds outermost: every case is measured once before any is measured again, so a burst of
    # load from other processes spreads over the cases instead of spoiling one.
    for r in range(ROUNDS):
        for t, c in cases:
            order = tools if r % 2 == 0 else tools[::-1]
            for tool in order:
                rps, p99, cpu, srv, busy = runners[tool](c, t)
                res.setdefault((t, c, tool), []).append((rps, p99, cpu, srv, busy))
                print(f"{t:<4} {c:<6} {r+1:<5} {tool:<9} {rps:10.0f} {p99:9.2f} {cpu:11.2f} {srv:13.2f} {busy:11.2f}", flush=True)
    if ROUNDS > 0:
        print("\nmedians over rounds. ratio = tool / wrk within each round (the two ran back to back), then")
        print("the median of those ratios. req/s: higher is better; CPU/req: lower is better. bound = (wrk's")
        print("client + nginx CPU per request) / (the tool's): the best req/s ratio possible when the two fill the cores")
        print(f"{'thr':<4} {'conns':<6} {'tool':<9} {'req/s':>10} {'p99 ms':>9} {'CPU us/req':>11} {'nginx us/req':>13} {'busy cores':>11} {'req/s ratio':>12} {'p99 ratio':>10} {'CPU ratio':>10} {'bound':>7}")
        for t, c in cases:
            w = res[(t, c, "wrk")]
            for tool in tools:
                xs = res[(t, c, tool)]
                med = [statistics.median(x[i] for x in xs) for i in range(5)]
                ratio = [statistics.median(x[i] / y[i] for x, y in zip(xs, w)) for i in range(3)]
                bound = statistics.median((y[2] + y[3]) / (x[2] + x[3]) for x, y in zip(xs, w))
                print(f"{t:<4} {c:<6} {tool:<9} {med[0]:10.0f} {med[1]:9.2f} {med[2]:11.2f} {med[3]:13.2f} {med[4]:11.2f} {ratio[0]:11.2f}x {ratio[1]:9.2f}x {ratio[2]:9.2f}x {bound:6.2f}x")
                if tool == "latscope" and os.environ.get("BENCH_SUMMARY"):
                    wm = [statistics.median(x[i] for x in w) for i in range(3)]
                    with open(os.environ["BENCH_SUMMARY"], "a") as f:
                        for i, metric, better in [(0, "req/s", "higher"), (2, "CPU us/req", "lower")]:
                            f.write(f"http\t-t{t} -c{c}\t{metric}\t{med[i]}\t{wm[i]}\twrk\t{better}\n")

    def instructions(binary, argv):
        out = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={d}/cg.out"] + [binary] + argv,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True).stderr
        return int(re.search(r"Collected : (\d+)", out).group(1))

    if os.environ["CALLGRIND"]:
        print("\nuser-space instructions per request (callgrind, -t 1 -c 50, (I(-n 40000) - I(-n 20000)) / 20000)")
        for name, binary in [("latscope", LATSCOPE)] + ([("before", BEFORE)] if BEFORE else []):
            i = [instructions(binary, ["http", "-t", "1", "-c", "50", "-n", str(n), "--no-progress", "--json", url])
                 for n in (20000, 40000)]
            print(f"{name:<9} {(i[1] - i[0]) / 20000:8.0f}")
finally:
    cleanup()
PY
