#!/usr/bin/env bash
# The diagnose lab as a benchmark: every scenario of tests/diagnose_lab/ (real servers and real
# kernel faults in namespaces it builds), diagnosed from three seats (the server's host;
# the client alone: own PID and mount namespaces, no CAP_SYS_ADMIN/BPF/PERFMON/SYS_PTRACE; and that
# client with --server-agent pointed at `latscope serve --evidence-ports` beside the server),
# then top-1 accuracy per seat and the false-positive rate on healthy servers. Needs root.
#
# Each scenario runs at each of its round trips (~0, and 20–40 ms through the lab's delay line
# for those where distance changes the answer) three times on a fresh set-up: it counts as right
# only when all three runs are, and a top finding that changes between runs is listed as a flip.
#
#   scripts/diagnose-lab.sh                 the lab from every seat (three to four hours: split it)
#   scripts/diagnose-lab.sh --holdout       the held-back scenarios only (--holdout6: round 6's,
#                                           --holdout-far: issue 37's far world, run once at its end)
#   scripts/diagnose-lab.sh NAME[,NAME…]    some scenarios by name (NAME@20ms: one round trip)
#   LAB_SEAT=client-only scripts/diagnose-lab.sh   seats (server-host, client-only, client+agent; a comma list)
#   LAB_RTT=20,40 scripts/diagnose-lab.sh   round trips (ms) of the scenarios built at several
#   LAB_RUNS=1 scripts/diagnose-lab.sh      runs per scenario, seat and round trip (default 3)
#   LAB_LOCK=FILE scripts/diagnose-lab.sh   hold an flock on FILE around each run (a shared machine)
#   LAB_JSON_DIR=DIR scripts/diagnose-lab.sh   also keep each run's JSON report in DIR
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "diagnose-lab: needs root (network namespaces, nftables, tc, cgroups)" >&2
  exit 4
fi
case "${1:-}" in
  --holdout) export LAB_SET=holdout ;;
  --holdout6) export LAB_SET=holdout6 ;;
  --holdout-far) export LAB_SET=holdout-far ;;
  "") ;;
  -h|--help) sed -n 2,20p "$0"; exit 0 ;;
  *) export LAB_ONLY="$1" ;;
esac
cargo build --release --locked --quiet
exec cargo test --release --locked --quiet --test diagnose_lab -- --ignored --exact lab --nocapture --test-threads=1
