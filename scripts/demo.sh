#!/usr/bin/env bash
# Fresh machine → the built-in demo: install everything, build, run `latscope demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --demo
if [ -f "$HOME/.cargo/env" ]; then . "$HOME/.cargo/env"; fi
# Say what is being built and for how long before cargo's own progress (a bar on a terminal,
# one "Compiling" line per crate otherwise), so a cold build never looks like a hang.
crates=$(grep -c '^name = ' Cargo.lock)
if [ -x target/release/latscope ]; then
  echo "demo: building latscope (release): an earlier build is there, so only what changed is compiled (seconds to a minute)"
else
  echo "demo: building latscope (release): $crates crates from scratch — a few minutes (measured: 2 min 51 s on 2 cores with the crates already downloaded; $(nproc) cores here); cargo's progress follows"
fi
started=$(date +%s)
cargo build --release --locked
echo "demo: built target/release/latscope in $(($(date +%s) - started)) s"
bash scripts/install.sh
exec ./target/release/latscope demo "$@"
