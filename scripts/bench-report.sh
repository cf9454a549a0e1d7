#!/usr/bin/env bash
# `latscope report` on large inputs (issue 20): the page must stay small and quick however long
# the run was. Two real inputs, each drawn with `latscope report` under /usr/bin/time (wall
# time, peak RSS), page size in bytes:
#   1. `latscope http` for HTTP_DURATION (default 10m) in open loop at RATE req/s (default 1500,
#      modest on purpose: the figure is the page, not the throughput) against a private nginx
#      on loopback; one timeline interval per second, so 600 intervals;
#   2. `latscope analyze` of a capture of PACKETS (default 1 000 000) packets, made by
#      CAPTURE=synth (default: the wire crate's traffic generator, thousands of HTTP
#      connections with planted Nagle/delayed-ACK stalls, retransmissions and slow responses;
#      needs `cargo build --release -p latscope-wire --example gen_pcap`) or CAPTURE=tcpdump
#      (`latscope rr` against `latscope serve` on loopback recorded with tcpdump -c; root);
#      then the page of `analyze --conn` of its worst connection (the ladder) as well.
# The peer measured in the same run is the producing command: the report's time is printed as
# a ratio to `latscope analyze`'s on the same capture (and to tshark's when installed).
#   nice -n 19 scripts/bench-report.sh         (needs: cargo build --release; nginx, tcpdump)
#   HTTP_DURATION=20s PACKETS=100000 scripts/bench-report.sh     (a quick check)
#   PARTS=analyze KEEP=/tmp/pages scripts/bench-report.sh   (one part; keep the JSON and pages)
# Not in CI (about 11 minutes).
set -uo pipefail
cd "$(dirname "$0")/.."
L=${LATSCOPE:-./target/release/latscope}
GEN=${GEN_PCAP:-./target/release/examples/gen_pcap}
PACKETS=${PACKETS:-1000000}
RATE=${RATE:-1500}
HTTP_DURATION=${HTTP_DURATION:-10m}
CAPTURE=${CAPTURE:-synth}
PARTS=${PARTS:-http analyze}
NGINX=${NGINX:-/usr/sbin/nginx}
[ -x "$L" ] || { echo "bench-report: build first: cargo build --release" >&2; exit 2; }
[ -x "$NGINX" ] || { echo "bench-report: nginx missing (scripts/setup.sh installs nginx-light)" >&2; exit 2; }
for t in python3 /usr/bin/time; do
    command -v "$t" >/dev/null || { echo "bench-report: $t missing (scripts/setup.sh)" >&2; exit 2; }
done
case $CAPTURE in
    synth) [ -x "$GEN" ] || { echo "bench-report: build the generator: cargo build --release -p latscope-wire --example gen_pcap" >&2; exit 2; } ;;
    tcpdump) command -v tcpdump >/dev/null || { echo "bench-report: tcpdump missing (scripts/setup.sh)" >&2; exit 2; } ;;
    *) echo "bench-report: CAPTURE must be synth or tcpdump, not '$CAPTURE'" >&2; exit 2 ;;
esac
. scripts/lib/bench.sh
bench_tmp bench-report
trap 'exit 130' INT TERM

# timed LABEL CMD...: run with stdout to $OUT (default /dev/null), print "LABEL: wall s, peak
# RSS"; the wall time stays in $WALL. Exit status 0 is success, and 1 too with FOUND=1 (the
# measurement ran and found problems: analyze's planted stalls).
timed() {
    local label=$1 rc; shift
    /usr/bin/time -v -o "$TMP/time" "$@" > "${OUT:-/dev/null}"
    rc=$?
    if [ "$rc" != 0 ] && ! { [ "$rc" = 1 ] && [ -n "${FOUND:-}" ]; }; then
        echo "bench-report: $label failed (exit status $rc)" >&2
        exit 1
    fi
    WALL=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s }' "$TMP/time")
    local kb; kb=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$TMP/time")
    printf '  %-36s %8.2f s  %7.1f MB peak RSS\n' "$label" "$WALL" "$(echo "$kb/1024" | bc -l)"
}
bytes() { stat -c %s "$1"; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# points FILE: the coordinates the page's SVG paths and marks carry (what thinning bounds).
points() { python3 -c 'import re, sys; t = open(sys.argv[1]).read(); print(sum(len(re.findall(r"-?\d+(?:\.\d+)?,-?\d+(?:\.\d+)?", p)) for p in re.findall(r"points=\"([^\"]*)\"", t)) + t.count("<circle") + t.count("<rect"))' "$1"; }

echo "== $(date -u '+%F %T UTC'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $("$L" --version)"

# keep FILE...: copy results and pages to $KEEP as soon as they exist.
keep() { [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP" && cp "$@" "$KEEP"/; }; }

bench_http() {
    echo "== http, $HTTP_DURATION in open loop at $RATE req/s against nginx on loopback"
    PORT=$(free_port)
    mkdir -p "$TMP/nginx/html" "$TMP/nginx/logs" "$TMP/nginx/tmp"
    head -c 1024 /dev/zero | tr '\0' a > "$TMP/nginx/html/index.html"
    D=$TMP/nginx
    cat > "$D/nginx.conf" <<EOF
daemon off;
master_process off;
user root;
pid $D/nginx.pid;
error_log $D/logs/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $D/tmp; proxy_temp_path $D/tmp; fastcgi_temp_path $D/tmp; uwsgi_temp_path $D/tmp; scgi_temp_path $D/tmp;
  server { listen 127.0.0.1:$PORT; root $D/html; }
}
EOF
"$NGINX" -p "$D" -c "$D/nginx.conf" >/dev/null 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    sleep 0.1
done
OUT=$TMP/http.json FOUND=1 timed "latscope http ($HTTP_DURATION)" \
    "$L" http "http://127.0.0.1:$PORT/" -q "$RATE" -c 8 -t 1 -d "$HTTP_DURATION" --json --no-progress --no-tui
echo "  intervals: $(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["timeline"]))' "$TMP/http.json")"
timed "latscope report (http)" "$L" report "$TMP/http.json" -o "$TMP/http.html"
echo "  JSON $(bytes "$TMP/http.json") B -> page $(bytes "$TMP/http.html") B, $(points "$TMP/http.html") points drawn"
keep "$TMP/http.json" "$TMP/http.html"
}

bench_analyze() {

echo "== analyze, $PACKETS packets ($CAPTURE)"
if [ "$CAPTURE" = synth ]; then
    timed "gen_pcap" "$GEN" "$TMP/cap.pcap" "$PACKETS"
else
    PORT=$(free_port)
    "$L" serve -p "$PORT" --quiet >/dev/null 2>&1 &
    PIDS+=($!)
    sleep 1
    tcpdump -i lo -nn -s 128 -c "$PACKETS" -w "$TMP/cap.pcap" "tcp port $PORT" 2>/dev/null &
    DUMP=$!
    PIDS+=($DUMP)
    sleep 1
    # Round trips (two data segments and about one ACK each) until tcpdump has its packets.
    while kill -0 "$DUMP" 2>/dev/null; do
        "$L" rr "127.0.0.1:$PORT" -c 4 -d 10s --no-progress --no-tui --json >/dev/null 2>&1 || break
    done
    wait "$DUMP" 2>/dev/null
fi
echo "  capture: $(bytes "$TMP/cap.pcap") B"
OUT=$TMP/analyze.json FOUND=1 timed "latscope analyze --json" "$L" analyze "$TMP/cap.pcap" --json --no-progress
T_ANALYZE=$WALL
if command -v tshark >/dev/null; then
    timed "tshark -q -z conv,tcp (peer)" tshark -r "$TMP/cap.pcap" -q -z conv,tcp 2>/dev/null
    T_TSHARK=$WALL
fi
timed "latscope report (analyze)" "$L" report "$TMP/analyze.json" -o "$TMP/analyze.html"
T_REPORT=$WALL
echo "  JSON $(bytes "$TMP/analyze.json") B -> page $(bytes "$TMP/analyze.html") B, $(points "$TMP/analyze.html") points drawn"
printf '  report / analyze time: %.3f\n' "$(echo "$T_REPORT/($T_ANALYZE+0.001)" | bc -l)"
[ -z "${T_TSHARK:-}" ] || printf '  report / tshark time:  %.3f\n' "$(echo "$T_REPORT/($T_TSHARK+0.001)" | bc -l)"

WORST=$(python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))["top_connections"]; print(c[0]["id"] if c else "")' "$TMP/analyze.json")
if [ -n "$WORST" ]; then
    OUT=$TMP/conn.json FOUND=1 timed "latscope analyze --conn $WORST --json" "$L" analyze "$TMP/cap.pcap" --conn "$WORST" --json --no-progress
    timed "latscope report (--conn $WORST)" "$L" report "$TMP/conn.json" -o "$TMP/conn.html"
    echo "  JSON $(bytes "$TMP/conn.json") B -> page $(bytes "$TMP/conn.html") B"
fi
keep "$TMP"/analyze.json "$TMP"/analyze.html "$TMP"/conn.*
}

for part in $PARTS; do
    case $part in
        http) bench_http ;;
        analyze) bench_analyze ;;
        *) echo "bench-report: PARTS lists http and analyze, not '$part'" >&2; exit 2 ;;
    esac
done
[ -z "${KEEP:-}" ] || echo "== results and pages kept in $KEEP"
exit 0
