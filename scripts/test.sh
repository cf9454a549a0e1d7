#!/usr/bin/env bash
# Fresh machine → every check: install everything, then formatting, lints and all tests (unit
# and integration, against real peers). Run as root: the tests build network namespaces, load
# eBPF programs and open raw sockets.
set -euo pipefail
cd "$(dirname "$0")/.."
# Where the time goes: each stage's wall time, printed at the end (and kept in
# target/test-times.txt with the test binaries' times).
t_start=$(date +%s)
t_stage=$t_start
stage_name=""
stages=()
stage() {
  local now
  now=$(date +%s)
  if [ -n "$stage_name" ]; then stages+=("$(printf '%6ss  %s' $((now - t_stage)) "$stage_name")"); fi
  t_stage=$now
  stage_name="$1"
  if [ -n "$1" ]; then echo "== $1"; fi
}
stage "setup (scripts/setup.sh)"
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
stage "cargo fmt --check"
cargo fmt --all -- --check
# The fuzz stage (its own nightly build with AddressSanitizer, then each target's seeds and corpus
# replayed plus a short run) needs nothing from the stages below: it runs beside them at the
# lowest CPU priority, taking only the cores the compiler and the namespace tests leave idle, and
# the tests that compare timings (run last, alone) start only once it is over. Its output goes
# to target/fuzz-output.txt and is shown at the end.
mkdir -p target
rm -f target/fuzz-output.txt target/fuzz.rc
fuzz_secs=${LATSCOPE_FUZZ_SECONDS:-5}
# Its own session, so that an early exit (fmt or clippy failing) stops all of it.
FUZZ_SECS=$fuzz_secs setsid -w nice -n 19 bash -c '
  t0=$(date +%s); rc=0
  LATSCOPE_FUZZ_REQUIRED=1 bash scripts/fuzz.sh "$FUZZ_SECS" > target/fuzz-output.txt 2>&1 || rc=1
  echo "$rc $(( $(date +%s) - t0 ))" > target/fuzz.rc' &
fuzz_job=$!
trap 'kill -- "-$fuzz_job" 2>/dev/null || true' EXIT
stage "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
stage "cargo test: build the release test binaries"
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
  stage "cargo test: run the test binaries (the timing ones after the fuzz stage)"
  LATSCOPE_TEST_SERIAL_AFTER=target/fuzz.rc LATSCOPE_TEST_SERIAL_AFTER_PGID=$fuzz_job \
    python3 scripts/lib/test-binaries.py target/test-binaries.json target/test-output.txt || test_rc=1
  stage "doc tests"
  cargo test --workspace --release --locked --doc 2>&1 | tee -a target/test-output.txt || test_rc=1
fi
stage "fuzz: every cargo-fuzz target, seeds and corpus replayed + ${fuzz_secs} s (nightly, ASan, overflow checks)"
# A crash fails CI; its input is kept in fuzz/artifacts/ and target/fuzz-crashes/. A missing
# nightly or cargo-fuzz is an error here, not a skip. The long runs: scripts/fuzz.sh (60 s each).
wait "$fuzz_job" || true
trap - EXIT
cat target/fuzz-output.txt
fuzz_rc=1
fuzz_took="?"
if [ -f target/fuzz.rc ]; then
  read -r fuzz_rc fuzz_took < target/fuzz.rc
fi
stage ""
# Where the time went (the test binaries' times are written by test-binaries.py), then one
# closing line for CI: the counts of every test binary added up.
{
  echo "== the stages: $(( $(date +%s) - t_start )) s in all"
  printf '%s\n' "${stages[@]}"
  echo "  (fuzz ran beside the stages above at the lowest priority: ${fuzz_took} s)"
} > target/stage-times.txt
if [ -f target/test-times.txt ]; then cat target/test-times.txt; fi
cat target/stage-times.txt
cat target/stage-times.txt >> target/test-times.txt
awk '/^test result:/ { for (i=1;i<=NF;i++) { if ($i ~ /^passed;?$/) p+=$(i-1); if ($i ~ /^failed;?$/) f+=$(i-1); if ($i ~ /^ignored;?$/) s+=$(i-1) } }
     END { printf "%d passed, %d failed, %d skipped\n", p, f, s; exit (f>0) }' target/test-output.txt || test_rc=1
if [ "$test_rc" -ne 0 ]; then
  echo "tests failed (or did not build: see '== cargo test' above)"
fi
if [ "$fuzz_rc" -ne 0 ]; then
  echo "fuzzing failed (crashes or a missing toolchain: see '== fuzz' above)"
fi
[ "$test_rc" -eq 0 ] && [ "$fuzz_rc" -eq 0 ]
