#!/usr/bin/env bash
# The diagnose lab as a benchmark: every scenario of tests/diagnose_lab/ (real servers and real
# kernel faults in namespaces it builds), one diagnose run each, then top-1 accuracy and the
# false-positive rate on healthy servers. Needs root.
#
#   scripts/diagnose-lab.sh                 the lab (about 5 minutes)
#   scripts/diagnose-lab.sh --holdout       the held-back scenarios only
#   scripts/diagnose-lab.sh NAME[,NAME…]    some scenarios by name
#   LAB_JSON_DIR=DIR scripts/diagnose-lab.sh   also keep each run's JSON report in DIR
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "diagnose-lab: needs root (network namespaces, nftables, tc, cgroups)" >&2
  exit 4
fi
case "${1:-}" in
  --holdout) export LAB_SET=holdout ;;
  "") ;;
  -h|--help) sed -n 2,9p "$0"; exit 0 ;;
  *) export LAB_ONLY="$1" ;;
esac
cargo build --release --locked --quiet
exec cargo test --release --locked --quiet --test diagnose_lab -- --ignored --exact lab --nocapture --test-threads=1
