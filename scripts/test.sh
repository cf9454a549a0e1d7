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
# No line tables for latscope's own crates in this build (Cargo.toml keeps them for perf and
# backtraces in everyday release builds): every test binary is compiled and linked once here, and
# a failing test's panic message still names its file and line.
export CARGO_PROFILE_RELEASE_DEBUG=false
# A full run (release tests linted by clippy, fuzzing) needs about 12 GB under target/; say so up front
# instead of failing later with "No space left on device" in the middle of a compile.
mkdir -p target
free_kb=$(df -Pk target | awk 'NR==2 { print $4 }')
if [ "${free_kb:-0}" -lt $((12 * 1024 * 1024)) ]; then
  echo "warning: only $((free_kb / 1024)) MB free under target/; a full test run needs about 12 GB (free some space, e.g. old target/ folders)" >&2
fi
stage "cargo fmt --check"
cargo fmt --all -- --check
# Two jobs need nothing from the release build of the tests and run beside it at the lowest CPU
# priority, each in its own session (an early exit stops all of it), its output in
# target/NAME-output.txt and "EXIT-CODE SECONDS" in target/NAME.rc when it is over:
# - fuzz: its own nightly build with AddressSanitizer, then each target's seeds and corpus
#   replayed plus a short run (the long runs: scripts/fuzz.sh, 60 s each);
# - doc tests, once the release build they link against is there.
# clippy is not a job of its own: the release build is the lint pass (see below). The release
# build and then the pool of namespace tests (which mostly wait on namespaces, child processes and
# timeouts) keep the normal priority; these jobs take the cores they leave idle. The tests that
# compare timings (run last, alone) start only once both are over. A failing job does not stop
# the others: the end says what failed.
mkdir -p target
rm -f target/fuzz-output.txt target/fuzz.rc target/doctests-output.txt target/doctests.rc target/lints.txt
beside_pgids=""
beside() {
  local name=$1
  shift
  # shellcheck disable=SC2016
  # setsid makes a session, and with the scheduler's autogroups (kernel.sched_autogroup_enabled,
  # on in Debian's kernels) a session gets a fair share of the CPU whatever its nice value: the
  # autogroup's own nice is what puts it behind the build.
  setsid -w nice -n 19 bash -c '
    echo 19 > /proc/self/autogroup 2>/dev/null || true
    name=$1; shift; t0=$(date +%s); rc=0
    "$@" > "target/$name-output.txt" 2>&1 || rc=1
    echo "$rc $(( $(date +%s) - t0 ))" > "target/$name.rc"' beside "$name" "$@" &
  beside_pgids="$beside_pgids $!"
}
trap 'for g in $beside_pgids; do kill -- "-$g" 2>/dev/null || true; done' EXIT
fuzz_secs=${LATSCOPE_FUZZ_SECONDS:-5}
beside fuzz env LATSCOPE_FUZZ_REQUIRED=1 LATSCOPE_FUZZ_DEV=1 bash scripts/fuzz.sh "$fuzz_secs"
stage "cargo test: build the release test binaries, linted by clippy (fuzz beside at the lowest priority)"
# Build every test binary once, then run them with scripts/lib/test-binaries.py: a binary
# whose tests compare latency or rates with a peer tool (its sources call `timing_lock()`) runs
# alone, one test at a time, since a neighbour loading the two cores would skew exactly those
# figures (so does one that counts the host's eBPF programs); the others run several tests and two
# binaries at a time (they wait on namespaces and child processes, not on a CPU). It prints
# each binary's time and the ten slowest tests.
# This build is also clippy's: clippy-driver compiles the workspace's own crates
# (RUSTC_WORKSPACE_WRAPPER, what `cargo clippy` sets for its check build; dependencies are
# compiled by rustc as always), so every lib, bin, test and example target is linted as
# `cargo clippy --workspace --all-targets` lints them, without a second compile of the workspace
# and its dependencies (a check build shares no artifact with a release build: it took 300 CPU
# seconds on two cores). The lints stay warnings — they must not keep the tests from running —
# and scripts/lib/cargo-messages.py counts them: any is a failure at the end, as
# `cargo clippy -- -D warnings` would be. The doc tests below run under the same wrapper, or
# cargo would rebuild the crates they link against.
# A failing test does not stop the run here: the other stages still run, and the end says what failed.
test_rc=0
beside_failed=""
rm -f target/test-times.txt
clippy_driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)
if [ -z "$clippy_driver" ]; then
  echo "clippy-driver is missing (rustup component add clippy; scripts/setup.sh installs it): the build is not linted" >&2
  beside_failed=" clippy"
fi
lint_env=(env "RUSTC_WORKSPACE_WRAPPER=$clippy_driver" CLIPPY_ARGS=)
# --timings: cargo's report of each unit's compile time (target/cargo-timings/), summed up by
# scripts/lib/cargo-timings.py into target/build-times.txt and printed at the end.
rm -f target/cargo-timings/cargo-timing.html
"${lint_env[@]}" cargo test --workspace --release --locked --no-run --timings --message-format=json \
  | python3 scripts/lib/cargo-messages.py target/test-binaries.json target/lints.txt || test_rc=1
python3 scripts/lib/cargo-timings.py > target/build-times.txt 2>&1 || true
lints=$(cat target/lints.txt 2>/dev/null || echo "?")
if [ -n "$clippy_driver" ] && [ "$lints" != 0 ]; then beside_failed=" clippy"; fi
if [ "$test_rc" -eq 0 ]; then
  beside doctests "${lint_env[@]}" cargo test --workspace --release --locked --doc
  stage "cargo test: run the test binaries (fuzz and doc tests beside; the timing ones after them)"
  LATSCOPE_TEST_SERIAL_AFTER="target/fuzz.rc target/doctests.rc" \
    LATSCOPE_TEST_SERIAL_AFTER_PGID="$beside_pgids" \
    python3 scripts/lib/test-binaries.py target/test-binaries.json target/test-output.txt || test_rc=1
fi
stage "the jobs beside: fuzz (every cargo-fuzz target, seeds and corpus replayed + ${fuzz_secs} s; nightly, ASan, overflow checks), doc tests"
# A fuzz crash fails CI; its input is kept in fuzz/artifacts/ and target/fuzz-crashes/. A missing
# nightly or cargo-fuzz is an error here, not a skip.
for g in $beside_pgids; do wait "$g" || true; done
trap - EXIT
beside_took=""
for name in fuzz doctests; do
  # The doc tests never started when the test build failed, which is said below.
  if [ "$name" = doctests ] && [ ! -f target/doctests-output.txt ]; then continue; fi
  echo "== $name"
  cat "target/$name-output.txt"
  rc=1
  took="?"
  if [ -f "target/$name.rc" ]; then read -r rc took < "target/$name.rc"; fi
  beside_took="$beside_took $name $took s,"
  if [ "$name" = doctests ]; then
    cat target/doctests-output.txt >> target/test-output.txt
    if [ "$rc" -ne 0 ]; then test_rc=1; fi
  elif [ "$rc" -ne 0 ]; then
    beside_failed="$beside_failed $name"
  fi
done
stage ""
# Where the time went (the test binaries' times are written by test-binaries.py), then one
# closing line for CI: the counts of every test binary added up.
{
  echo "== the stages: $(( $(date +%s) - t_start )) s in all"
  printf '%s\n' "${stages[@]}"
  echo "  (beside the build and the tests, at the lowest priority:${beside_took%,})"
} > target/stage-times.txt
if [ -f target/build-times.txt ]; then cat target/build-times.txt; fi
if [ -f target/test-times.txt ]; then cat target/test-times.txt; fi
cat target/stage-times.txt
cat target/stage-times.txt >> target/test-times.txt
awk '/^test result:/ { for (i=1;i<=NF;i++) { if ($i ~ /^passed;?$/) p+=$(i-1); if ($i ~ /^failed;?$/) f+=$(i-1); if ($i ~ /^ignored;?$/) s+=$(i-1) } }
     END { printf "%d passed, %d failed, %d skipped\n", p, f, s; exit (f>0) }' target/test-output.txt || test_rc=1
if [ "$test_rc" -ne 0 ]; then
  echo "tests failed (or did not build: see '== cargo test' above)"
fi
for name in $beside_failed; do
  case $name in
    fuzz) echo "fuzzing failed (crashes or a missing toolchain: see '== fuzz' above)" ;;
    clippy) echo "clippy failed: $lints warning(s) in the workspace's crates (see '== cargo test: build' above)" ;;
  esac
done
[ "$test_rc" -eq 0 ] && [ -z "$beside_failed" ]
