#!/usr/bin/env bash
# Run the cargo-fuzz targets (latscope-wire capture/packet decoding, latscope-http response
# parsing) for a while each (default 60 s).
#   scripts/fuzz.sh [SECONDS]
# Needs a nightly toolchain and cargo-fuzz (`rustup toolchain install nightly --profile minimal`,
# `cargo install cargo-fuzz`). Without them, the stable seed replay still runs:
#   cargo test -p latscope-wire --test seed_replay
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
SECS=${1:-60}
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz on nightly is not available; running the stable seed replay instead" >&2
    cd .. && cargo test -p latscope-http --lib parse::tests::random
    exec cargo test -p latscope-wire --test seed_replay
fi
for t in capfile packet http_response; do
    mkdir -p "corpus/$t"
    echo "== fuzzing $t for ${SECS}s"
    cargo +nightly fuzz run "$t" "corpus/$t" "seeds/$t" -- -max_total_time="$SECS" -max_len=65536 -rss_limit_mb=2048
done
echo "no crashes; corpus in fuzz/corpus/, replayed by: cargo test -p latscope-wire --test seed_replay"
