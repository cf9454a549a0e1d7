#!/usr/bin/env bash
# Every benchmark, with short settings, and one table of latscope's ratios against its peers
# (each measured in the same run as latscope). Needs root (raw sockets, BPF) and what
# scripts/setup.sh installs. Each bench's own output goes to a log beside the table.
#
#   benches/all.sh              # short: ~6 minutes on 2 cores
#   FULL=1 benches/all.sh       # each bench's own defaults (much longer, steadier figures)
#   ONLY="stream http" benches/all.sh
#
# A ratio is latscope / peer; "better" says whether latscope is ahead on that line (higher
# is better for rates, lower for times, CPU and memory). The machine's load average is printed
# with the table: on a shared machine, read CPU figures before rates.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
LOGS=$(mktemp -d /tmp/latscope-benches.XXXXXX)
export BENCH_SUMMARY="$LOGS/summary.tsv"
: >"$BENCH_SUMMARY"
cargo build --release --quiet || exit 2
export NO_BUILD=1
ONLY=${ONLY:-stream http rr ping analyze sockets tui stack startup}
short() { [ -z "${FULL:-}" ]; }

# name, then the command (short settings unless FULL is set).
bench() {
  local name=$1; shift
  case " $ONLY " in *" $name "*) ;; *) return 0 ;; esac
  printf '%-8s … ' "$name"
  local t0=$SECONDS
  if "$@" >"$LOGS/$name.log" 2>&1; then
    printf 'done in %d s\n' $((SECONDS - t0))
  else
    printf 'FAILED (exit %d): see %s\n' "$?" "$LOGS/$name.log"
  fi
}

if short; then
  bench stream env SECS=2 ROUNDS=1 UDP_RATES="100M 500M" benches/stream_vs_iperf3.sh
  bench http env SECS=2 ROUNDS=1 CONNS="50 500" THREADS="1 2" benches/http_vs_wrk.sh
  bench rr env SECS=2 ROUNDS=1 benches/rr_vs_sockperf.sh
  bench ping benches/ping_vs_hping3.sh 500
  bench analyze benches/analyze_vs_tshark.sh 300000 500 5000 2000
  bench sockets benches/sockets.sh 500 50000
  bench tui env SECS=2 ROUNDS=1 benches/tui_overhead.sh
  bench stack python3 benches/stack_overhead.py --seconds 8 --phase 2 --workloads udp
  bench startup python3 benches/startup.py --runs 10
else
  bench stream benches/stream_vs_iperf3.sh
  bench http benches/http_vs_wrk.sh
  bench rr benches/rr_vs_sockperf.sh
  bench ping benches/ping_vs_hping3.sh
  bench analyze benches/analyze_vs_tshark.sh
  bench sockets benches/sockets.sh
  bench tui benches/tui_overhead.sh
  bench stack python3 benches/stack_overhead.py
  bench startup python3 benches/startup.py
fi

python3 - "$BENCH_SUMMARY" "$LOGS" <<'PY'
import os, sys, time
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
load = os.getloadavg()
print(f"\nlatscope against its peers, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
      f"{os.uname().nodename}, {os.cpu_count()} CPUs, "
      f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
print(f"{'bench':<8} {'case':<30} {'figure':<13} {'latscope':>12} {'peer':>12} {'peer tool':<9} {'ratio':>7}  ahead?")
fmt = lambda v: f"{v:12,.0f}" if abs(v) >= 1000 else f"{v:12.3g}"
for bench, case, metric, ls, peer, tool, better in rows:
    ls, peer = float(ls), float(peer)
    ratio = ls / peer if peer else float("inf")
    ahead = ratio >= 1 if better == "higher" else ratio <= 1
    print(f"{bench:<8} {case:<30} {metric:<13} {fmt(ls)} {fmt(peer)} {tool:<9} {ratio:6.2f}x  "
          f"{'yes' if ahead else 'NO'} ({better} is better)")
print("\nno peer (latscope against itself): tui (live view / --no-tui) and stack (probes attached /"
      " detached); their ratios are in their logs.")
print(f"logs: {sys.argv[2]}")
PY
