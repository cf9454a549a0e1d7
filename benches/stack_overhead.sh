#!/usr/bin/env bash
# Overhead of `latscope stack` (all probes attached) on loopback traffic, measured in one run:
# sockperf ping-pong (UDP and TCP transactions/s) and iperf3 (TCP throughput), each without and
# with latscope attached, alternated (off, on, off, on) so drift on a shared machine hits both.
# Prints each figure and the ratio with/without (target ≥ 0.95×). Needs root, sockperf, iperf3.
#
#   benches/stack_overhead.sh [SECONDS_PER_RUN] [ROUNDS]
set -euo pipefail

SECS=${1:-5}
ROUNDS=${2:-2}
cd "$(dirname "$0")/.."
BIN=${LATSCOPE:-}
if [[ -z "$BIN" ]]; then
  if [[ -x target/release/latscope ]]; then BIN=target/release/latscope; else
    cargo build -q && BIN=target/debug/latscope
  fi
fi
for tool in sockperf iperf3; do
  command -v "$tool" >/dev/null || { echo "needs $tool (apt-get install $tool)"; exit 2; }
done

# Pick free ports (bind port 0 and read the number back).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SP_PORT=$(free_port); IP_PORT=$(free_port)

PIDS=()
# Per-program run time (bpftool's run_time_ns/run_cnt) needs kernel.bpf_stats_enabled: turned on
# for the run, restored on exit.
OLD_STATS=$(sysctl -n kernel.bpf_stats_enabled 2>/dev/null || echo "")
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  rm -f "/tmp/lsstk-bench-$$.json" "/tmp/lsstk-bench-$$.err"
  [[ -n "$OLD_STATS" ]] && sysctl -qw kernel.bpf_stats_enabled="$OLD_STATS" || true
}
trap cleanup EXIT INT TERM

sockperf server -i 127.0.0.1 -p "$SP_PORT" >/dev/null 2>&1 & PIDS+=($!)
sockperf server --tcp -i 127.0.0.1 -p "$((SP_PORT))" >/dev/null 2>&1 & PIDS+=($!)
iperf3 -s -B 127.0.0.1 -p "$IP_PORT" >/dev/null 2>&1 & PIDS+=($!)
sleep 1

# transactions/s from sockperf's "[Total Run] RunTime=X sec; ... ReceivedMessages=N"
pp() {
  sockperf ping-pong "$@" -i 127.0.0.1 -p "$SP_PORT" -t "$SECS" 2>&1 |
    awk -F'[=; ]+' '/Total Run/ { for (i=1;i<=NF;i++) { if ($i=="RunTime") t=$(i+1); if ($i=="ReceivedMessages") n=$(i+1) } } END { if (t>0) printf "%.0f\n", n/t; else print 0 }'
}
stream() {
  iperf3 -c 127.0.0.1 -p "$IP_PORT" -t "$SECS" -J 2>/dev/null |
    python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"])'
}

declare -A SUM LAST COST COSTS
# Total run time (ns) of latscope's BPF programs so far (needs kernel.bpf_stats_enabled).
bpf_ns() {
  bpftool prog show -j | python3 -c 'import json,sys; print(sum(p.get("run_time_ns",0) for p in json.load(sys.stdin) if p.get("name","").startswith("lsstk_")))'
}
measure() { # $1 = off|on
  local v
  v=$(pp); SUM[udp_$1]=$(( ${SUM[udp_$1]:-0} + v )); LAST[udp_$1]=$v; echo "  sockperf udp ping-pong ($1): $v transactions/s"
  v=$(pp --tcp); SUM[tcp_$1]=$(( ${SUM[tcp_$1]:-0} + v )); LAST[tcp_$1]=$v; echo "  sockperf tcp ping-pong ($1): $v transactions/s"
  v=$(stream); SUM[str_$1]=$(( ${SUM[str_$1]:-0} + v )); echo "  iperf3 tcp stream ($1): $(( v / 1000000 )) Mbit/s"
}

for r in $(seq 1 "$ROUNDS"); do
  echo "round $r: without latscope"
  measure off
  echo "round $r: with latscope stack (all probes)"
  "$BIN" stack -r 1h --json >/tmp/lsstk-bench-$$.json 2>/tmp/lsstk-bench-$$.err & LS=$!
  PIDS+=($LS)
  for _ in $(seq 1 100); do grep -q attached /tmp/lsstk-bench-$$.err 2>/dev/null && break; sleep 0.1; done
  grep -q attached /tmp/lsstk-bench-$$.err || { cat /tmp/lsstk-bench-$$.err; exit 5; }
  sleep 0.3
  measure on
  # Cost pass (stats switched on only here: they add two clock reads per program run).
  if [[ -n "$OLD_STATS" ]]; then
    for kind in udp tcp; do
      flag=""; [[ $kind == tcp ]] && flag="--tcp"
      sysctl -qw kernel.bpf_stats_enabled=1
      B0=$(bpf_ns); TPS=$(pp $flag); B1=$(bpf_ns)
      sysctl -qw kernel.bpf_stats_enabled="$OLD_STATS"
      python3 -c '
import sys
b0, b1, tps, secs, off = map(float, sys.argv[1:6]); kind = sys.argv[6]
per_tx = (b1 - b0) / (tps * secs) if tps else 0
print("  BPF time per %s transaction: %.0f ns (%.1f%% of a %.1f us transaction)" % (kind, per_tx, 100 * per_tx * off / 1e9 if off else 0, 1e6 / off if off else 0))
' "$B0" "$B1" "$TPS" "$SECS" "${LAST[${kind}_off]}" "$kind"
      COST[$kind]=$(python3 -c 'import sys; b0,b1,t,s=map(float,sys.argv[1:]); print((b1-b0)/(t*s) if t else 0)' "$B0" "$B1" "$TPS" "$SECS")
      COSTS[$kind]="${COSTS[$kind]:-} ${COST[$kind]}"
    done
  fi
  kill -INT "$LS"; wait "$LS" || true
  python3 - "/tmp/lsstk-bench-$$.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
tot = {}
for h in r["histograms"]:
    tot[h["probe"]] = tot.get(h["probe"], 0) + h["count"]
print("  samples recorded while on:", ", ".join(f"{k}={v}" for k, v in tot.items()))
PY
done
rm -f /tmp/lsstk-bench-$$.json /tmp/lsstk-bench-$$.err

ratio() { python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print('%.3f' % (b/a if a else 0))" "$1" "$2"; }
echo
echo "summary over $ROUNDS round(s) of ${SECS}s (ratio = with / without; target >= 0.95):"
echo "  sockperf udp ping-pong: $(ratio "${SUM[udp_off]}" "${SUM[udp_on]}")x"
echo "  sockperf tcp ping-pong: $(ratio "${SUM[tcp_off]}" "${SUM[tcp_on]}")x"
echo "  iperf3 tcp stream:      $(ratio "${SUM[str_off]}" "${SUM[str_on]}")x"
if [[ -n "${COSTS[udp]:-}" ]]; then
  echo "ratio predicted from the measured BPF time per transaction (robust to machine noise):"
  for kind in udp tcp; do
    python3 -c '
import sys
costs = [float(x) for x in sys.argv[1].split()]
off = float(sys.argv[2]) / float(sys.argv[3])  # mean transactions/s without latscope
c = sorted(costs)[len(costs) // 2]
print("  sockperf %s ping-pong: %.3fx  (%.0f ns of BPF per transaction, %.1f us per transaction)" % (sys.argv[4], 1 / (1 + c * off / 1e9), c, 1e6 / off))
' "${COSTS[$kind]}" "${SUM[${kind}_off]}" "$ROUNDS" "$kind"
  done
fi
