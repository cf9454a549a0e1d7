#!/usr/bin/env bash
# Probe rate and timestamp overhead of `latscope ping` against hping3, on loopback, in one run.
#
#   1. closed-loop flood rate: `latscope ping --flood` (next probe when the previous is answered),
#      TCP SYN and ICMP, probes/s; next to hping3's send-paced rate (`-i u1`, no waiting).
#   2. median loopback SYN RTT to an open port: latscope (kernel timestamps), latscope with the
#      user-space clock (--user-timestamps), and hping3 -S — and the ratios.
#
# Needs root (raw sockets), hping3 and iperf3 (a listener nobody talks to). Prints ratios: the
# machine is shared, absolute figures are noisy. Usage: benches/ping_vs_hping3.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000}
cargo build --release -q
LS=target/release/latscope
for t in hping3 iperf3; do command -v "$t" >/dev/null || { echo "needs $t" >&2; exit 2; }; done

# A free port with a listener (iperf3 -s only listens; SYN probes never reach accept()).
PORT=$(( 20000 + RANDOM % 20000 ))
while ss -ltnH "sport = :$PORT" | grep -q .; do PORT=$(( PORT + 1 )); done
iperf3 -s -p "$PORT" >/dev/null 2>&1 &
SRV=$!
trap 'kill $SRV 2>/dev/null || true' EXIT
for _ in $(seq 50); do ss -ltnH "sport = :$PORT" | grep -q . && break; sleep 0.1; done

json_field() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
now_ns() { date +%s%N; }

echo "== flood rate, $N probes, loopback =="
syn_rate=$($LS ping --syn --flood -c "$N" -p "$PORT" --json 127.0.0.1 | json_field "round(d['rate_per_sec'])")
icmp_rate=$($LS ping --icmp --flood -c "$N" --json 127.0.0.1 | json_field "round(d['rate_per_sec'])")
t0=$(now_ns)
hp_out=$(hping3 -S -q -p "$PORT" -i u1 -c "$N" 127.0.0.1 2>&1 || true)
t1=$(now_ns)
hp_rate=$(( N * 1000000000 / (t1 - t0) ))
hp_recv=$(sed -n 's/.* \([0-9]*\) packets received.*/\1/p' <<<"$hp_out")
printf '  latscope ping --syn --flood   %8s probes/s (closed loop: every probe answered before the next)\n' "$syn_rate"
printf '  latscope ping --icmp --flood  %8s probes/s\n' "$icmp_rate"
printf '  hping3 -S -i u1               %8s probes/s sent (open loop), %s of %s answers counted\n' "$hp_rate" "${hp_recv:-?}" "$N"
awk -v a="$syn_rate" -v b="$hp_rate" 'BEGIN { printf "  ratio latscope SYN flood / hping3 send rate: %.2f\n", a / b }'
if [ -n "${BENCH_SUMMARY:-}" ]; then
  printf 'ping\tSYN flood, loopback\tprobes/s\t%s\t%s\thping3\thigher\n' "$syn_rate" "$hp_rate" >>"$BENCH_SUMMARY"
fi

echo "== median loopback SYN RTT to an open port, 200 probes each, 5 ms apart =="
k=$($LS ping --syn -c 200 -i 5ms -p "$PORT" --json 127.0.0.1 | json_field "d['rtt']['p50_ns']/1000")
u=$($LS ping --syn -c 200 -i 5ms -p "$PORT" --user-timestamps --json 127.0.0.1 | json_field "d['rtt']['p50_ns']/1000")
h=$(hping3 -S -p "$PORT" -c 200 -i u5000 127.0.0.1 2>/dev/null | sed -n 's/.*rtt=\([0-9.]*\) ms.*/\1/p' | awk '{print $1*1000}' | median)
printf '  latscope (kernel SO_TIMESTAMPING)   %8.1f us\n' "$k"
printf '  latscope --user-timestamps          %8.1f us\n' "$u"
printf '  hping3 -S (prints 0.1 ms steps)     %8.1f us\n' "$h"
if [ -n "${BENCH_SUMMARY:-}" ] && awk -v h="$h" 'BEGIN { exit !(h > 0) }'; then
  printf 'ping\tSYN RTT p50, loopback\tus\t%s\t%s\thping3\tlower\n' "$k" "$h" >>"$BENCH_SUMMARY"
fi
awk -v k="$k" -v u="$u" -v h="$h" 'BEGIN {
  printf "  ratio user-space / kernel timestamps (latscope): %.2f  (scheduling and syscall time removed: %.1f us)\n", u / k, u - k
  if (h > 0) printf "  ratio hping3 / latscope kernel: %.2f\n", h / k; else print "  hping3 median rounds to 0.0 ms: below its resolution"
}'
