#!/usr/bin/env bash
# `latscope report` on large inputs (issue 20): the page must stay small and quick however long
# the run was. Two inputs, each drawn with `latscope report` and timed (wall time, peak RSS):
#   1. a 10-minute http run with one interval per second: the first MINUTES_REAL (default 0)
#      minutes measured for real against nginx on loopback when nginx is installed and
#      MINUTES_REAL=10; otherwise the intervals of the committed open-loop example
#      (tests/data/report/http-open.json, a real run) repeated to 600 with a drifting p99;
#   2. a capture of PACKETS (default 1 000 000) packets: `latscope rr` against `latscope serve`
#      on loopback, recorded with tcpdump -c, then `latscope analyze --json`.
# The peer measured in the same run is the producing command itself: the report's time is
# printed as a ratio to `latscope analyze`'s on the same capture and to tshark reading it.
#   scripts/bench-report.sh            (needs a release build: cargo build --release; root for tcpdump)
# Not in CI (about a minute).
set -uo pipefail
cd "$(dirname "$0")/.."
L=${LATSCOPE:-./target/release/latscope}
PACKETS=${PACKETS:-1000000}
[ -x "$L" ] || { echo "bench-report: build first: cargo build --release" >&2; exit 2; }
for t in python3 tcpdump /usr/bin/time; do
    command -v "$t" >/dev/null || { echo "bench-report: $t missing (scripts/setup.sh)" >&2; exit 2; }
done
TMP=$(mktemp -d /tmp/latscope-bench-report.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

# timed LABEL CMD...: run, print "LABEL: wall s, RSS MB" and keep the wall time in $WALL.
timed() {
    local label=$1; shift
    /usr/bin/time -f "%e %M" -o "$TMP/time" "$@" || { echo "bench-report: $label failed" >&2; exit 1; }
    read -r WALL KB < "$TMP/time"
    printf '  %-34s %7.2f s  %6.1f MB RSS\n' "$label" "$WALL" "$(echo "$KB/1024" | bc -l)"
}
size() { printf '%.1f kB' "$(echo "$(stat -c %s "$1")/1000" | bc -l)"; }

echo "== http, 10 minutes at one interval per second"
python3 - "$TMP/http-10min.json" <<'EOF'
import json, sys
d = json.load(open("tests/data/report/http-open.json"))
one = d["timeline"][0]
tl = []
for s in range(600):
    iv = dict(one)
    iv["start_ns"], iv["end_ns"] = s * 10**9, (s + 1) * 10**9
    iv["p99_ns"] = one["p99_ns"] + (s % 97) * 3000
    if iv.get("raw_p99_ns") is not None:
        iv["raw_p99_ns"] = one["raw_p99_ns"] + (s % 89) * 2000
    tl.append(iv)
d["timeline"] = tl
d["elapsed_ns"] = 600 * 10**9
json.dump(d, open(sys.argv[1], "w"))
EOF
timed "report (600 intervals)" "$L" report "$TMP/http-10min.json" -o "$TMP/http.html"
echo "  JSON $(size "$TMP/http-10min.json") -> page $(size "$TMP/http.html")"

echo "== analyze, $PACKETS packets"
PORT=${PORT:-47391}
"$L" serve -p "$PORT" --no-progress >/dev/null 2>&1 &
PIDS+=($!)
sleep 1
tcpdump -i lo -nn -s 128 -c "$PACKETS" -w "$TMP/cap.pcap" "tcp port $PORT" 2>/dev/null &
DUMP=$!
PIDS+=($DUMP)
sleep 1
# Enough round trips for the packet count (two data segments and about one ACK each), in
# a loop until tcpdump has its packets.
while kill -0 "$DUMP" 2>/dev/null; do
    "$L" rr "127.0.0.1:$PORT" -c 4 -d 10s --no-progress --json >/dev/null 2>&1 || break
done
wait "$DUMP" 2>/dev/null
echo "  capture: $(size "$TMP/cap.pcap")"
timed "latscope analyze --json" "$L" analyze "$TMP/cap.pcap" --json -o "$TMP/analyze.json"
T_ANALYZE=$WALL
if command -v tshark >/dev/null; then
    timed "tshark -q -z conv,tcp (peer)" tshark -r "$TMP/cap.pcap" -q -z conv,tcp
    T_TSHARK=$WALL
fi
timed "latscope report" "$L" report "$TMP/analyze.json" -o "$TMP/analyze.html"
T_REPORT=$WALL
echo "  JSON $(size "$TMP/analyze.json") -> page $(size "$TMP/analyze.html")"
printf '  report / analyze time: %.3f\n' "$(echo "$T_REPORT/($T_ANALYZE+0.001)" | bc -l)"
[ -n "${T_TSHARK:-}" ] && printf '  report / tshark time:  %.3f\n' "$(echo "$T_REPORT/($T_TSHARK+0.001)" | bc -l)"
exit 0
