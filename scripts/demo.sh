#!/usr/bin/env bash
# Fresh machine → the built-in demo: install everything, build, run `latscope demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -f "$HOME/.cargo/env" ]; then . "$HOME/.cargo/env"; fi
cargo build --release --locked --quiet
exec ./target/release/latscope demo "$@"
