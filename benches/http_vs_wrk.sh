#!/usr/bin/env bash
# latscope http against wrk (and oha, if installed) on the same private nginx on loopback, with
# the same connections and threads, in one run. Prints requests/s and p99 of each tool and the
# ratios latscope/wrk. Rounds alternate the tools so that load from other processes on a shared
# machine hits them alike.
#
#   benches/http_vs_wrk.sh                 # 50 and 500 connections, 2 threads, 5 s, 2 rounds
#   SECS=10 ROUNDS=3 CONNS="50 500 1000" THREADS=2 benches/http_vs_wrk.sh
set -euo pipefail

SECS=${SECS:-5}
ROUNDS=${ROUNDS:-2}
CONNS=${CONNS:-"50 500"}
THREADS=${THREADS:-$(nproc)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LATSCOPE=${LATSCOPE:-$ROOT/target/release/latscope}

command -v wrk >/dev/null || { echo "wrk not found (apt install wrk)" >&2; exit 2; }
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { echo "nginx not found (apt install nginx-light)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 not found" >&2; exit 2; }
if [ ! -x "$LATSCOPE" ] || [ -z "${NO_BUILD:-}" ]; then
  (cd "$ROOT" && cargo build --release --quiet)
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAVE_OHA=0
command -v oha >/dev/null && HAVE_OHA=1

DIR=$(mktemp -d "/tmp/latscope-http-bench-$$-XXXX")
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
NGINX_PID=
cleanup() {
  if [ -n "$NGINX_PID" ]; then kill "$NGINX_PID" 2>/dev/null || true; wait "$NGINX_PID" 2>/dev/null || true; fi
  rm -rf "$DIR"
}
trap cleanup EXIT INT TERM

mkdir -p "$DIR/html" "$DIR/logs" "$DIR/tmp"
head -c 612 /dev/zero | tr '\0' 'a' > "$DIR/html/index.html"   # the size of nginx's default page
cat > "$DIR/nginx.conf" <<CONF
daemon off;
user root;
worker_processes auto;
pid $DIR/nginx.pid;
error_log $DIR/logs/error.log;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path $DIR/tmp; proxy_temp_path $DIR/tmp; fastcgi_temp_path $DIR/tmp;
  uwsgi_temp_path $DIR/tmp; scgi_temp_path $DIR/tmp;
  server { listen 127.0.0.1:$PORT backlog=4096; root $DIR/html; }
}
CONF
"$NGINX" -p "$DIR" -c "$DIR/nginx.conf" &
NGINX_PID=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.05; done
URL="http://127.0.0.1:$PORT/"

# tool c -> "req/s p99_ms"
run_wrk() {
  wrk -t "$THREADS" -c "$1" -d "${SECS}s" --timeout 2s --latency "$URL" | python3 -c '
import sys, re
t = sys.stdin.read()
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
v, u = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", t, re.M).groups()
print(rps, float(v) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[u])'
}
run_latscope() {
  "$LATSCOPE" http -t "$THREADS" -c "$1" -d "${SECS}s" --timeout 2s --json --no-progress "$URL" | python3 -c '
import sys, json
j = json.load(sys.stdin)
print(j["requests_per_sec"], j["latency"]["p99_ns"] / 1e6)' || true
}
run_oha() {
  oha -c "$1" -z "${SECS}s" --no-tui --output-format json "$URL" 2>/dev/null | python3 -c '
import sys, json
j = json.load(sys.stdin)
print(j["summary"]["requestsPerSec"], j["latencyPercentiles"]["p99"] * 1e3)'
}

echo "nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///') on 127.0.0.1:$PORT ($(nproc) cores), ${SECS}s per run, $THREADS threads, $ROUNDS rounds"
[ $HAVE_OHA = 1 ] || echo "(oha not installed: skipped)"
printf '%-6s %-5s %-9s %12s %10s\n' conns round tool "req/s" "p99 ms"
declare -A SUM
for c in $CONNS; do
  for r in $(seq "$ROUNDS"); do
    tools="wrk latscope"
    [ $HAVE_OHA = 1 ] && tools="$tools oha"
    # Alternate the order between rounds.
    [ $((r % 2)) = 0 ] && tools=$(echo $tools | tr ' ' '\n' | tac | tr '\n' ' ')
    for t in $tools; do
      read -r rps p99 < <(run_$t "$c")
      printf '%-6s %-5s %-9s %12.0f %10.2f\n' "$c" "$r" "$t" "$rps" "$p99"
      SUM[$c,$t,rps]=$(python3 -c "print(${SUM[$c,$t,rps]:-0} + $rps)")
      SUM[$c,$t,p99]=$(python3 -c "print(${SUM[$c,$t,p99]:-0} + $p99)")
    done
  done
done
echo
echo "mean over rounds; ratio = tool / wrk (req/s: higher is better)"
printf '%-6s %-9s %12s %10s %12s\n' conns tool "req/s" "p99 ms" "req/s ratio"
for c in $CONNS; do
  tools="wrk latscope"
  [ $HAVE_OHA = 1 ] && tools="$tools oha"
  for t in $tools; do
    python3 - "$c" "$t" "${SUM[$c,$t,rps]}" "${SUM[$c,$t,p99]}" "${SUM[$c,wrk,rps]}" "$ROUNDS" <<'PY'
import sys
c, t, rps, p99, wrk, n = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:])
print(f"{c:<6} {t:<9} {rps/n:12.0f} {p99/n:10.2f} {rps/wrk:11.2f}x")
PY
  done
done
