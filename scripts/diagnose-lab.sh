#!/usr/bin/env bash
# The diagnose lab as a benchmark: every scenario of tests/diagnose_lab/ (real servers and real
# kernel faults in namespaces it builds), one diagnose run each from three seats (the server's host;
# the client alone: own PID and mount namespaces, no CAP_SYS_ADMIN/BPF/PERFMON/SYS_PTRACE; and that
# client with --server-agent pointed at `latscope serve --evidence-ports` beside the server),
# then top-1 accuracy per seat and the false-positive rate on healthy servers. Needs root.
#
#   scripts/diagnose-lab.sh                 the lab from every seat (about 15 minutes)
#   scripts/diagnose-lab.sh --holdout       the held-back scenarios only (--holdout6: round 6's)
#   scripts/diagnose-lab.sh NAME[,NAME…]    some scenarios by name
#   LAB_SEAT=client-only scripts/diagnose-lab.sh   seats (server-host, client-only, client+agent; a comma list)
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
  "") ;;
  -h|--help) sed -n 2,11p "$0"; exit 0 ;;
  *) export LAB_ONLY="$1" ;;
esac
cargo build --release --locked --quiet
exec cargo test --release --locked --quiet --test diagnose_lab -- --ignored --exact lab --nocapture --test-threads=1
