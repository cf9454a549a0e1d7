#!/usr/bin/env bash
# Fresh machine → every check: install everything, then formatting, lints and all tests (unit
# and integration, against real peers). Run as root: the tests build network namespaces, load
# eBPF programs and open raw sockets.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -f "$HOME/.cargo/env" ]; then . "$HOME/.cargo/env"; fi
export CARGO_TERM_COLOR=never
# No incremental caches: CI builds once, and they would double target/'s size on disk.
export CARGO_INCREMENTAL=0
# A full run (clippy, release tests, fuzzing) needs about 12 GB under target/; say so up front
# instead of failing later with "No space left on device" in the middle of a compile.
mkdir -p target
free_kb=$(df -Pk target | awk 'NR==2 { print $4 }')
if [ "${free_kb:-0}" -lt $((12 * 1024 * 1024)) ]; then
  echo "warning: only $((free_kb / 1024)) MB free under target/; a full test run needs about 12 GB (free some space, e.g. old target/ folders)" >&2
fi
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test (release: the tests compare speed and latency with peer tools)"
# Build every test binary once, then run them with scripts/lib/test-binaries.py: a binary whose
# tests compare latency or rates with a peer tool (its sources call `timing_lock()`) runs alone,
# one test at a time, since a neighbour loading the two cores would skew exactly those figures
# (so does one that counts the host's eBPF programs); the others run several tests and two
# binaries at a time (they wait on namespaces and child processes, not on a CPU). It prints each
# binary's time and the ten slowest tests.
# A failing test does not stop the run here: fuzzing still runs, and the end says what failed.
test_rc=0
rm -f target/test-times.txt
cargo test --workspace --release --locked --no-run --message-format=json-render-diagnostics \
  > target/test-binaries.json || test_rc=1
if [ "$test_rc" -eq 0 ]; then
  python3 scripts/lib/test-binaries.py target/test-binaries.json target/test-output.txt || test_rc=1
  echo "== doc tests"
  cargo test --workspace --release --locked --doc 2>&1 | tee -a target/test-output.txt || test_rc=1
fi
echo "== fuzz: every cargo-fuzz target for 20 s (nightly, ASan, overflow checks)"
# A crash fails CI; its input is kept in fuzz/artifacts/ and target/fuzz-crashes/. A missing
# nightly or cargo-fuzz is an error here, not a skip.
fuzz_rc=0
LATSCOPE_FUZZ_REQUIRED=1 bash scripts/fuzz.sh "${LATSCOPE_FUZZ_SECONDS:-20}" || fuzz_rc=1
# Where the time went (written by test-binaries.py), then one closing line for CI: the counts
# of every test binary added up.
if [ -f target/test-times.txt ]; then cat target/test-times.txt; fi
awk '/^test result:/ { for (i=1;i<=NF;i++) { if ($i ~ /^passed;?$/) p+=$(i-1); if ($i ~ /^failed;?$/) f+=$(i-1); if ($i ~ /^ignored;?$/) s+=$(i-1) } }
     END { printf "%d passed, %d failed, %d skipped\n", p, f, s; exit (f>0) }' target/test-output.txt || test_rc=1
if [ "$test_rc" -ne 0 ]; then
  echo "tests failed (or did not build: see '== cargo test' above)"
fi
if [ "$fuzz_rc" -ne 0 ]; then
  echo "fuzzing failed (crashes or a missing toolchain: see '== fuzz' above)"
fi
[ "$test_rc" -eq 0 ] && [ "$fuzz_rc" -eq 0 ]
