#!/usr/bin/env bash
# Run the cargo-fuzz targets (latscope-wire capture/packet decoding, latscope-http response
# parsing) for a while each (default 60 s).
#   scripts/fuzz.sh [SECONDS]
# Needs a nightly toolchain and cargo-fuzz (`rustup toolchain install nightly --profile minimal`,
# `cargo install cargo-fuzz`). Without them, the stable seed replay still runs:
#   cargo test -p latscope-wire --test seed_replay
set -uo pipefail
cd "$(dirname "$0")/../fuzz"
SECS=${1:-60}
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz on nightly is not available; running the stable seed replay instead" >&2
    cd ..
    rc=0
    cargo test -p latscope-http --lib parse::tests::random || rc=1
    cargo test -p latscope-wire --test seed_replay || rc=1
    exit $rc
fi
# Every target runs even when an earlier one crashed; crashes are collected and reported at the
# end (exit 1 if any).
failed=()
for t in capfile packet http_response; do
    mkdir -p "corpus/$t"
    echo "== fuzzing $t for ${SECS}s"
    if ! cargo +nightly fuzz run "$t" "corpus/$t" "seeds/$t" -- -max_total_time="$SECS" -max_len=65536 -rss_limit_mb=2048; then
        failed+=("$t")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "crashes in: ${failed[*]} (inputs under fuzz/artifacts/<target>/)" >&2
    ls fuzz/artifacts/*/ artifacts/*/ 2>/dev/null >&2
    exit 1
fi
echo "no crashes; corpus in fuzz/corpus/, replayed by: cargo test -p latscope-wire --test seed_replay"
