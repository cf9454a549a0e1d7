#!/usr/bin/env bash
# latscope rr against sockperf ping-pong, TCP, 64 B messages, on loopback, in one run.
# Both clients measure the same `sockperf server` (latscope with --peer sockperf); latscope rr
# against latscope serve is shown as well. Rounds alternate between the tools so that machine
# noise hits both; the median of the rounds is reported. Targets: median RTT ratio ≤ 1.0 and
# transactions/s ≥ 1.0× sockperf.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-4}
cargo build --release --quiet
L=./target/release/latscope
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SP_PORT=$(port); LS_PORT=$(port)
sockperf server --tcp -i 127.0.0.1 -p "$SP_PORT" >/dev/null 2>&1 & SP_PID=$!
$L serve --bind 127.0.0.1 --port "$LS_PORT" -q 2>/dev/null & LS_PID=$!
trap 'kill $SP_PID $LS_PID 2>/dev/null || true' EXIT
sleep 0.5

json_fig() { python3 -c 'import json,sys; r=json.load(sys.stdin)["results"][0]; print(r["rtt"]["p50_ns"]/1000, r["transactions_per_sec"])'; }
declare -a LS_SP LS_LS SP
for i in $(seq "$ROUNDS"); do
  LS_SP+=("$($L rr 127.0.0.1:$SP_PORT --peer sockperf -s 64 -d ${SECS}s --json | json_fig)")
  out=$(sockperf ping-pong --tcp -i 127.0.0.1 -p "$SP_PORT" -m 64 -t "$SECS" --full-rtt 2>&1)
  p50=$(echo "$out" | awk -F= '/percentile 50.000/ {gsub(/ /,"",$2); print $2}')
  rate=$(echo "$out" | sed -n 's/.*RunTime=\([0-9.]*\) sec; SentMessages=\([0-9]*\).*/\2 \1/p' | awk '{printf "%.1f", $1/$2}')
  SP+=("$p50 $rate")
  LS_LS+=("$($L rr 127.0.0.1:$LS_PORT -s 64 -d ${SECS}s --json | json_fig)")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
col() { local n=$1; shift; for x in "$@"; do echo "$x" | awk -v n="$n" '{print $n}'; done; }
sp_p50=$(median $(col 1 "${SP[@]}")); sp_tps=$(median $(col 2 "${SP[@]}"))
ls_p50=$(median $(col 1 "${LS_SP[@]}")); ls_tps=$(median $(col 2 "${LS_SP[@]}"))
nat_p50=$(median $(col 1 "${LS_LS[@]}")); nat_tps=$(median $(col 2 "${LS_LS[@]}"))
printf '\nTCP ping-pong, 64 B, loopback, median of %s rounds of %s s\n\n' "$ROUNDS" "$SECS"
printf '%-44s %12s %14s\n' "client → server" "p50 RTT (us)" "trans/s"
printf '%-44s %12.2f %14.0f\n' "sockperf ping-pong → sockperf server" "$sp_p50" "$sp_tps"
printf '%-44s %12.2f %14.0f\n' "latscope rr --peer sockperf → sockperf server" "$ls_p50" "$ls_tps"
printf '%-44s %12.2f %14.0f\n' "latscope rr → latscope serve" "$nat_p50" "$nat_tps"
python3 - "$ls_p50" "$sp_p50" "$ls_tps" "$sp_tps" <<'PY'
import sys
ls_p50, sp_p50, ls_tps, sp_tps = map(float, sys.argv[1:])
r1, r2 = ls_p50 / sp_p50, ls_tps / sp_tps
print(f"\nmedian RTT ratio latscope/sockperf: {r1:.3f}  (target <= 1.0) {'OK' if r1 <= 1.0 else 'MISSED'}")
print(f"transactions/s ratio latscope/sockperf: {r2:.3f}  (target >= 1.0) {'OK' if r2 >= 1.0 else 'MISSED'}")
import os
if os.environ.get("BENCH_SUMMARY"):
    with open(os.environ["BENCH_SUMMARY"], "a") as f:
        f.write(f"rr\tTCP 64 B ping-pong\tp50 RTT us\t{ls_p50}\t{sp_p50}\tsockperf\tlower\n")
        f.write(f"rr\tTCP 64 B ping-pong\ttrans/s\t{ls_tps}\t{sp_tps}\tsockperf\thigher\n")
PY
