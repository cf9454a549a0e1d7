#!/usr/bin/env bash
# latscope analyze vs tshark on the same synthetic capture, in one run.
#
# Generates a pcap of PACKETS packets from CONCURRENT simultaneous HTTP/1.1 connections (with
# planted Nagle x delayed-ACK stalls, timer retransmissions and slow servers), then times
#   latscope analyze FILE --json
#   tshark -q -z conv,tcp -r FILE
# and prints packets/s of both, the ratio, latscope's peak RSS, and the peak RSS on a file half
# the size (memory must follow open connections, not file size). Then the same for a second
# shape with MANY connections open at once over a long capture span (the flow table's cost
# per packet must not grow with the connections open: closed ones expire in O(1)). Last, a
# shape of POOL connections that never close (a connection pool: all open over the whole
# capture), where memory must stay bounded per connection: it prints both tools' peak RSS, their
# ratio, and latscope's bytes per open connection (RSS above a one-connection capture's,
# divided by the connections open).
#
# Usage: benches/analyze_vs_tshark.sh [PACKETS] [CONCURRENT] [MANY] [POOL]
#        (defaults 3000000, 2000, 50000, 20000)
set -euo pipefail
cd "$(dirname "$0")/.."
PACKETS=${1:-3000000}
SHAPES="${2:-2000} ${3:-50000} ${4:-20000}:persistent"
TMP=$(mktemp -d /tmp/latscope-wire-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

cargo build --release -q --bin latscope
cargo build --release -q -p latscope-wire --example gen_pcap
BIN=target/release/latscope
GEN=target/release/examples/gen_pcap
command -v tshark >/dev/null || { echo "tshark is not installed (apt-get install tshark)"; exit 2; }

# /usr/bin/time -f: elapsed seconds and max RSS (KiB). analyze exits 1 when it finds stalls.
measure() { /usr/bin/time -f "%e %M" -o "$TMP/time.txt" "$@" >"$TMP/out.txt" 2>/dev/null || true; cat "$TMP/time.txt" | tail -1; }

# The RSS of analysing a one-connection capture: what is not per connection.
"$GEN" "$TMP/one.pcap" 1000 1 2>/dev/null
read -r _ BASE_KB < <(measure "$BIN" analyze "$TMP/one.pcap" --json --no-progress)

for SHAPE in $SHAPES; do
CONCURRENT=${SHAPE%%:*}
MODE=$([ "$SHAPE" = "$CONCURRENT" ] && echo "" || echo "${SHAPE#*:}")
echo "== $PACKETS packets, $CONCURRENT connections open at once${MODE:+ ($MODE: they never close)} =="
"$GEN" "$TMP/big.pcap" "$PACKETS" "$CONCURRENT" 11400714819323198485 $MODE 2>"$TMP/gen.txt"
"$GEN" "$TMP/half.pcap" $((PACKETS / 2)) "$CONCURRENT" 11400714819323198485 $MODE 2>/dev/null
cat "$TMP/gen.txt"
echo "file: $(du -h "$TMP/big.pcap" | cut -f1)"

# Warm the page cache so both tools read from memory.
cat "$TMP/big.pcap" > /dev/null
read -r LS_S LS_KB < <(measure "$BIN" analyze "$TMP/big.pcap" --json --no-progress)
cp "$TMP/out.txt" "$TMP/latscope.json"
read -r HALF_S HALF_KB < <(measure "$BIN" analyze "$TMP/half.pcap" --json --no-progress)
read -r TS_S TS_KB < <(measure tshark -q -z conv,tcp -r "$TMP/big.pcap")

python3 - "$PACKETS" "$LS_S" "$LS_KB" "$HALF_KB" "$TS_S" "$TS_KB" "$TMP/latscope.json" "$BASE_KB" <<'PY' 2>/dev/null || \
awk -v n="$PACKETS" -v ls="$LS_S" -v ts="$TS_S" -v kb="$LS_KB" -v half="$HALF_KB" -v tkb="$TS_KB" 'BEGIN {
  printf "latscope analyze: %.2f s, %.0f packets/s, peak RSS %.1f MiB (half-size file: %.1f MiB)\n", ls, n/ls, kb/1024, half/1024;
  printf "tshark conv,tcp : %.2f s, %.0f packets/s, peak RSS %.1f MiB\n", ts, n/ts, tkb/1024;
  printf "ratio (latscope/tshark packets/s): %.1fx\n", ts/ls }'
import json, sys
n, ls, kb, half, ts, tkb, path, base = sys.argv[1:]
n, ls, kb, half, ts, tkb = int(n), float(ls), int(kb), int(half), float(ts), int(tkb)
ls, ts = max(ls, 0.01), max(ts, 0.01)
r = json.load(open(path))
print(f"latscope analyze: {ls:.2f} s, {n/ls:,.0f} packets/s, peak RSS {kb/1024:.1f} MiB (half-size file: {half/1024:.1f} MiB)")
print(f"tshark conv,tcp : {ts:.2f} s, {n/ts:,.0f} packets/s, peak RSS {tkb/1024:.1f} MiB")
print(f"ratio (latscope/tshark packets/s): {ts/ls:.1f}x; peak RSS tshark/latscope: {tkb/max(kb, 1):.1f}x")
print(f"latscope found: {r['connections']} connections (peak {r['peak_open_connections']} open), "
      + ", ".join(f"{f['count']} {f['kind']}" for f in r['findings']))
peak = max(r['peak_open_connections'], 1)
import os
if os.environ.get("BENCH_SUMMARY"):
    with open(os.environ["BENCH_SUMMARY"], "a") as f:
        case = f"{n} packets, {r['peak_open_connections']} open"
        f.write(f"analyze\t{case}\tpackets/s\t{n/ls}\t{n/ts}\ttshark\thigher\n")
        f.write(f"analyze\t{case}\tpeak RSS KiB\t{kb}\t{tkb}\ttshark\tlower\n")
print(f"latscope memory per open connection: {(kb - int(base)) * 1024 / peak:,.0f} bytes "
      f"(peak RSS above a one-connection capture's {int(base)/1024:.1f} MiB, / {peak} open)")
PY
done
