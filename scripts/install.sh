#!/usr/bin/env bash
# Put the built latscope on PATH with its shell completions and man pages:
#   PREFIX/bin/latscope
#   PREFIX/share/man/man1/latscope.1, latscope-SUBCOMMAND.1
#   PREFIX/share/bash-completion/completions/latscope
#   PREFIX/share/zsh/site-functions/_latscope
#   PREFIX/share/fish/vendor_completions.d/latscope.fish
# PREFIX defaults to /usr/local (on PATH, and searched by man, bash-completion, zsh and fish).
# Usage: bash scripts/install.sh [PREFIX]   (after `cargo build --release`)
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="${1:-${PREFIX:-/usr/local}}"
bin=target/release/latscope
if [ ! -x "$bin" ]; then
  echo "install: $bin not found: build first (cargo build --release --locked)" >&2
  exit 2
fi
mkdir -p "$prefix/bin" 2>/dev/null || true
if [ ! -w "$prefix/bin" ]; then
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then exec sudo bash "$0" "$prefix"; fi
  echo "install: $prefix is not writable: run as root, or give a prefix of your own (bash scripts/install.sh ~/.local)" >&2
  exit 4
fi
install -d "$prefix/bin" "$prefix/share/man/man1" "$prefix/share/bash-completion/completions" \
  "$prefix/share/zsh/site-functions" "$prefix/share/fish/vendor_completions.d"
install -m 0755 "$bin" "$prefix/bin/latscope"
"$bin" man --out-dir "$prefix/share/man/man1"
"$bin" completions bash > "$prefix/share/bash-completion/completions/latscope"
"$bin" completions zsh > "$prefix/share/zsh/site-functions/_latscope"
"$bin" completions fish > "$prefix/share/fish/vendor_completions.d/latscope.fish"
echo "install: latscope $("$prefix/bin/latscope" --version | awk '{print $2}') in $prefix/bin/latscope (man latscope; completions for bash, zsh, fish)"
