#!/usr/bin/env bash
# What the live terminal view costs: `latscope http` against a private nginx on loopback, the
# same load with the view (stdout a pty made by `script`, so the view is really drawn) and with
# --no-tui (same pty), in alternating rounds so that load from other processes hits both alike.
# Prints per round and the medians: requests/s (exact: the --hgrm total count over the fixed
# duration) and the client's CPU µs per request (user+sys of `script` and latscope, from wait4),
# and the ratios view/no-view. The view feeds on the engine's per-second interval merge and
# redraws 4 times a second from its own thread; the target is a req/s ratio within noise (≥ 0.97).
#
#   benches/tui_overhead.sh                        # 50 connections, 1 thread, 5 s, 5 rounds
#   SECS=10 ROUNDS=7 CONNS=100 THREADS=2 benches/tui_overhead.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benches/nginx_lab.sh" script

export SECS=${SECS:-5} ROUNDS=${ROUNDS:-5} CONNS=${CONNS:-50} THREADS=${THREADS:-1}
export LATSCOPE=${LATSCOPE:-$ROOT/target/release/latscope} NGINX_BIN
export BENCH_DIR="$ROOT/benches"
exec python3 - <<'PY'
import os, re, resource, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

SECS, ROUNDS = int(os.environ["SECS"]), int(os.environ["ROUNDS"])
CONNS, THREADS = int(os.environ["CONNS"]), int(os.environ["THREADS"])
LATSCOPE, NGINX = os.environ["LATSCOPE"], os.environ["NGINX_BIN"]

sys.path.insert(0, os.environ["BENCH_DIR"])
from nginx_lab import Nginx
lab = Nginx(NGINX, "latscope-tui-bench")
d, port, cleanup = lab.dir, lab.port, lab.stop

def one(view):
    hgrm = f"{d}/run.hgrm"
    cmd = [LATSCOPE, "http", f"http://127.0.0.1:{port}/", "-c", str(CONNS), "-t", str(THREADS),
           "-d", f"{SECS}s", "--hgrm", hgrm] + ([] if view else ["--no-tui"])
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="100", LINES="40")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # script's pty has no size without a terminal on stdin: give it one, or nothing is drawn.
    p = subprocess.run(["script", "-q", "-e", "-c", "stty rows 40 cols 100; " + " ".join(cmd), "/dev/null"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = p.stdout.decode("utf-8", "replace")
    drawn = "q or Ctrl-C: stop with partial results" in out
    if drawn != view:
        raise SystemExit(f"the view was {'not ' if view else ''}drawn (exit {p.returncode}):\n{out[-2000:]}")
    total = int(re.search(r"Total count\s*=\s*(\d+)", open(hgrm).read()).group(1))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return total / SECS, cpu * 1e6 / max(total, 1)

try:
    one(False)  # warm nginx and the page cache
    res = {True: [], False: []}
    print(f"latscope http -c {CONNS} -t {THREADS} -d {SECS}s on a pty, {ROUNDS} rounds")
    print(f"{'round':>5} {'view req/s':>12} {'no-view req/s':>14} {'view cpu µs/req':>16} {'no-view cpu µs/req':>19}")
    for r in range(ROUNDS):
        order = [True, False] if r % 2 == 0 else [False, True]
        got = {v: one(v) for v in order}
        for v in (True, False): res[v].append(got[v])
        print(f"{r+1:>5} {got[True][0]:>12.0f} {got[False][0]:>14.0f} {got[True][1]:>16.2f} {got[False][1]:>19.2f}")
    med = {v: (statistics.median(x[0] for x in res[v]), statistics.median(x[1] for x in res[v])) for v in res}
    print(f"median  view {med[True][0]:.0f} req/s, {med[True][1]:.2f} µs CPU/req;"
          f"  no view {med[False][0]:.0f} req/s, {med[False][1]:.2f} µs CPU/req")
    print(f"ratio view/no-view: req/s {med[True][0]/med[False][0]:.3f}, CPU per request {med[True][1]/med[False][1]:.3f}")
finally:
    cleanup()
PY
