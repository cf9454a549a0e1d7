#!/usr/bin/env bash
# latscope http against wrk (and oha, if installed) on the same private nginx on loopback, with
# the same connections and threads, in one run. Prints requests/s, p99 and client CPU time per
# request of each tool, and the ratios latscope/wrk. Rounds alternate the order of the tools so
# that load from other processes on a shared machine hits them alike; the ratio of the medians
# over rounds is the headline. CPU µs per request (user+sys of the client process, from
# wait4) is the figure least disturbed by a noisy machine.
#
#   benches/http_vs_wrk.sh                 # 50 and 500 connections, 2 threads, 5 s, 3 rounds
#   SECS=10 ROUNDS=5 CONNS="50 500 1000" THREADS=2 benches/http_vs_wrk.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
command -v wrk >/dev/null || { echo "wrk not found (apt install wrk)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 not found (apt install python3)" >&2; exit 2; }
NGINX_BIN=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX_BIN" ] || { echo "nginx not found (apt install nginx-light)" >&2; exit 2; }
if [ -z "${NO_BUILD:-}" ]; then (cd "$ROOT" && cargo build --release --quiet); fi

export SECS=${SECS:-5} ROUNDS=${ROUNDS:-3} CONNS=${CONNS:-"50 500"} THREADS=${THREADS:-$(nproc)}
export LATSCOPE=${LATSCOPE:-$ROOT/target/release/latscope} NGINX_BIN
exec python3 - <<'PY'
import json, os, re, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

SECS, ROUNDS, THREADS = int(os.environ["SECS"]), int(os.environ["ROUNDS"]), int(os.environ["THREADS"])
CONNS = [int(c) for c in os.environ["CONNS"].split()]
LATSCOPE, NGINX = os.environ["LATSCOPE"], os.environ["NGINX_BIN"]
HAVE_OHA = shutil.which("oha") is not None

d = tempfile.mkdtemp(prefix=f"latscope-http-bench-{os.getpid()}-")
for sub in ("html", "logs", "tmp"):
    os.makedirs(f"{d}/{sub}")
with open(f"{d}/html/index.html", "w") as f:
    f.write("a" * 612)  # the size of nginx's default page
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
with open(f"{d}/nginx.conf", "w") as f:
    f.write(f"""daemon off; user root; worker_processes auto; pid {d}/nginx.pid; error_log {d}/logs/error.log;
events {{ worker_connections 8192; }}
http {{ access_log off;
  client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp; uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
  server {{ listen 127.0.0.1:{port} backlog=4096; root {d}/html; }} }}
""")
nginx = subprocess.Popen([NGINX, "-p", d, "-c", f"{d}/nginx.conf"])

def cleanup(*_):
    nginx.send_signal(signal.SIGTERM)
    try: nginx.wait(5)
    except subprocess.TimeoutExpired: nginx.kill()
    shutil.rmtree(d, ignore_errors=True)
signal.signal(signal.SIGTERM, lambda *a: (cleanup(), sys.exit(1)))
try:
    for _ in range(100):
        try: socket.create_connection(("127.0.0.1", port), 0.1).close(); break
        except OSError: time.sleep(0.05)
    url = f"http://127.0.0.1:{port}/"

    def timed(argv):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        out = p.stdout.read().decode()
        _, _, ru = os.wait4(p.pid, 0)
        return out, ru.ru_utime + ru.ru_stime

    def ms(v, unit): return float(v) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

    def run_wrk(c):
        out, cpu = timed(["wrk", "-t", str(THREADS), "-c", str(c), "-d", f"{SECS}s", "--timeout", "2s", "--latency", url])
        n = int(re.search(r"(\d+) requests in", out).group(1))
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        p99 = ms(*re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", out, re.M).groups())
        return rps, p99, cpu / n * 1e6

    def run_latscope(c):
        out, cpu = timed([LATSCOPE, "http", "-t", str(THREADS), "-c", str(c), "-d", f"{SECS}s", "--timeout", "2s", "--json", "--no-progress", url])
        j = json.loads(out)
        return j["requests_per_sec"], j["latency"]["p99_ns"] / 1e6, cpu / max(j["requests"], 1) * 1e6

    def run_oha(c):
        out, cpu = timed(["oha", "-c", str(c), "-z", f"{SECS}s", "--no-tui", "--output-format", "json", url])
        j = json.loads(out)
        rps = j["summary"]["requestsPerSec"]
        return rps, j["latencyPercentiles"]["p99"] * 1e3, cpu / max(rps * SECS, 1) * 1e6

    tools = ["wrk", "latscope"] + (["oha"] if HAVE_OHA else [])
    runners = {"wrk": run_wrk, "latscope": run_latscope, "oha": run_oha}
    print(f"nginx on 127.0.0.1:{port}, {os.cpu_count()} cores, {SECS}s per run, {THREADS} threads, {ROUNDS} rounds"
          + ("" if HAVE_OHA else " (oha not installed: skipped)"))
    print(f"{'conns':<6} {'round':<5} {'tool':<9} {'req/s':>10} {'p99 ms':>9} {'CPU us/req':>11}")
    res = {}
    for c in CONNS:
        for r in range(ROUNDS):
            order = tools if r % 2 == 0 else tools[::-1]
            for t in order:
                rps, p99, cpu = runners[t](c)
                res.setdefault((c, t), []).append((rps, p99, cpu))
                print(f"{c:<6} {r+1:<5} {t:<9} {rps:10.0f} {p99:9.2f} {cpu:11.2f}", flush=True)
    print("\nmedians over rounds. ratio = tool / wrk within each round (the two ran back to back), then")
    print("the median of those ratios. req/s: higher is better; CPU/req: lower is better")
    print(f"{'conns':<6} {'tool':<9} {'req/s':>10} {'p99 ms':>9} {'CPU us/req':>11} {'req/s ratio':>12} {'p99 ratio':>10} {'CPU ratio':>10}")
    for c in CONNS:
        w = res[(c, "wrk")]
        for t in tools:
            xs = res[(c, t)]
            med = [statistics.median(x[i] for x in xs) for i in range(3)]
            ratio = [statistics.median(x[i] / y[i] for x, y in zip(xs, w)) for i in range(3)]
            print(f"{c:<6} {t:<9} {med[0]:10.0f} {med[1]:9.2f} {med[2]:11.2f} {ratio[0]:11.2f}x {ratio[1]:9.2f}x {ratio[2]:9.2f}x")
finally:
    cleanup()
PY
