#!/usr/bin/env bash
# Fresh machine → the built-in demo: install everything, build, run `latscope demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -f "$HOME/.cargo/env" ]; then . "$HOME/.cargo/env"; fi
echo "demo: building latscope (release; about 2 minutes on a fresh machine)"
cargo build --release --locked
bash scripts/install.sh
exec ./target/release/latscope demo "$@"
