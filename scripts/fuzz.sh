#!/usr/bin/env bash
# Run every cargo-fuzz target (fuzz/fuzz_targets/*.rs) for a bounded time each, from its
# committed seeds (fuzz/seeds/<target>/) plus the corpus grown locally (fuzz/corpus/<target>/).
#   scripts/fuzz.sh [SECONDS]        default 60 per target; scripts/test.sh (CI) runs 5
# Each run first replays every input of the target's seeds and corpus (libFuzzer executes the
# corpus directories before it mutates), then fuzzes for the rest of SECONDS.
# Targets are built like `cargo build --release` but with debug assertions and overflow checks
# (cargo-fuzz's default, also pinned in fuzz/Cargo.toml), with AddressSanitizer: an arithmetic
# overflow on hostile input is a crash (issue 17, item 7).
#
# Every target runs even when an earlier one crashed; at the end a table gives each target's
# time, executions and result, and the script exits 1 if any crashed. A crash's input is kept:
# under fuzz/artifacts/<target>/ and copied to target/fuzz-crashes/ (the CI log also shows it
# in hex). Reproduce: cargo +nightly fuzz run <target> <file>; once fixed, add the file to
# fuzz/seeds/<target>/ so every later run replays it.
#
# Needs nightly and cargo-fuzz (scripts/setup.sh installs both). Without them this fails when
# LATSCOPE_FUZZ_REQUIRED=1 (CI); otherwise it says so and replays the seeds on stable instead, built with the same debug
# assertions and overflow checks (the `release-checked` profile).
set -uo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
# Targets fuzzed at once (each a libFuzzer process of one thread): one per CPU by default.
JOBS=${LATSCOPE_FUZZ_JOBS:-$(nproc)}
# LATSCOPE_FUZZ_DEV=1: the targets unoptimised (`cargo fuzz --dev`), a build of about half the CPU
# time for a short run that mostly replays the corpus (scripts/test.sh); slower executions. Such
# a run also leaves out the comparison tracing that guides mutations towards the constants an
# input is compared with (`--no-trace-compares`): what a few seconds of fuzzing gain from it is
# little, its instrumentation cost 9% of the build (158 → 144 CPU s, 27 Nov); AddressSanitizer,
# coverage guidance, debug assertions and overflow checks stay. The long runs keep it all.
profile_flag=""
if [ "${LATSCOPE_FUZZ_DEV:-0}" = 1 ]; then profile_flag="--dev --no-trace-compares"; fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    if [ "${LATSCOPE_FUZZ_REQUIRED:-0}" = 1 ]; then
        echo "fuzz: error: cargo-fuzz on a nightly toolchain is missing; run scripts/setup.sh" \
             "(rustup toolchain install nightly --profile minimal; cargo install cargo-fuzz --locked)" >&2
        exit 1
    fi
    echo "fuzz: cargo-fuzz on nightly is not available; replaying the seeds on stable (release-checked: overflow checks on) instead" >&2
    rc=0
    cargo test --profile release-checked -p latscope-wire --test seed_replay || rc=1
    cargo test --profile release-checked -p latscope-http --lib fuzzing || rc=1
    cargo test --profile release-checked -p latscope-net --lib serve::fuzzing || rc=1
    cargo test --profile release-checked -p latscope-capture --lib fuzzing || rc=1
    cargo test --profile release-checked -p latscope-exporter --lib fuzzing || rc=1
    exit $rc
fi
cd fuzz
mapfile -t targets < <(cargo +nightly fuzz list)
t0=$(date +%s)
echo "== building ${#targets[@]} fuzz targets (nightly, ASan, debug assertions + overflow checks${profile_flag:+, $profile_flag})"
if ! cargo +nightly fuzz build $profile_flag --debug-assertions; then
    echo "fuzz: error: the fuzz targets do not build" >&2
    exit 1
fi
build_s=$(( $(date +%s) - t0 ))
# One target's run: its table row in $rows_dir/<target>.row, CRASH or ok.
fuzz_one() {
    local t=$1 log s0 rc took execs
    mkdir -p "corpus/$t" "artifacts/$t"
    if [ ! -d "seeds/$t" ]; then
        echo "fuzz: error: no seeds for $t (fuzz/seeds/$t/)" >&2
        printf '%-18s %5ss %12s  CRASH (no seeds)' "$t" 0 "-" > "$rows_dir/$t.row"
        return
    fi
    echo "== fuzzing $t for ${SECS}s"
    log=$(mktemp)
    s0=$(date +%s)
    # -timeout: one input taking > 10 s is a hang, reported as a crash.
    cargo +nightly fuzz run $profile_flag --debug-assertions "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$SECS" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 >"$log" 2>&1
    rc=$?
    took=$(( $(date +%s) - s0 ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    if [ $rc -ne 0 ]; then
        # One target's report at a time, whole, when several run at once.
        {
            flock 9
            tail -n 40 "$log" >&2
            mkdir -p ../target/fuzz-crashes
            for f in artifacts/"$t"/*; do
                [ -f "$f" ] || continue
                cp "$f" "../target/fuzz-crashes/$t-$(basename "$f")"
                echo "fuzz: $t: input kept in fuzz/$f and target/fuzz-crashes/ ($(stat -c %s "$f") bytes):" >&2
                od -A x -t x1z -v "$f" | head -n 32 >&2
            done
        } 9>"$rows_dir/.lock"
        printf '%-18s %5ss %12s  CRASH' "$t" "$took" "${execs:-?}" > "$rows_dir/$t.row"
    else
        printf '%-18s %5ss %12s  ok (%s/s)' "$t" "$took" "${execs:-?}" \
            "$(( ${execs:-0} / (took > 0 ? took : 1) ))" > "$rows_dir/$t.row"
    fi
    rm -f "$log"
}
rows_dir=$(mktemp -d)
trap 'rm -rf "$rows_dir"' EXIT
running=0
for t in "${targets[@]}"; do
    if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
    fuzz_one "$t" &
    running=$((running + 1))
done
wait
failed=()
rows=()
for t in "${targets[@]}"; do
    row=$(cat "$rows_dir/$t.row" 2>/dev/null || printf '%-18s %6s %12s  CRASH (no result)' "$t" "-" "-")
    rows+=("$row")
    case $row in *CRASH*) failed+=("$t") ;; esac
done
echo "== fuzz summary (build ${build_s}s, total $(( $(date +%s) - t0 ))s)"
printf '%-18s %6s %12s  %s\n' target time execs result
printf '%s\n' "${rows[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: crashes in: ${failed[*]}" >&2
    exit 1
fi
