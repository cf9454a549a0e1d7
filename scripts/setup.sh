#!/usr/bin/env bash
# Install everything latscope needs on a fresh Debian 12 machine: system packages (listed one per
# line in scripts/packages.d/*.txt, comments with #) and a Rust toolchain new enough for
# edition 2024. Safe to rerun: it installs only what is missing.
#   scripts/setup.sh           everything the tests need (scripts/test.sh)
#   scripts/setup.sh --demo    without what only the tests use: the nightly toolchain and
#                              cargo-fuzz (built from source: minutes), and the QEMU test kernel
set -euo pipefail
cd "$(dirname "$0")/.."
for_tests=1
if [ "${1:-}" = "--demo" ]; then for_tests=0; fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "setup: run as root or install sudo" >&2; exit 4; }
  SUDO="sudo"
fi

packages=$(cat scripts/packages.d/*.txt | sed 's/#.*//' | tr -s ' \t' '\n' | grep -v '^$' | sort -u)
missing=""
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing $(echo "$missing" | wc -w) Debian packages (apt-get, quiet; a few minutes on a fresh machine):$missing"
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; answer no without a prompt.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections || true
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# Rust: the stable toolchain through rustup (Debian's rustc is too old for edition 2024).
if [ -f "$HOME/.cargo/env" ]; then . "$HOME/.cargo/env"; fi
need_rust=1
if command -v cargo >/dev/null 2>&1; then
  v=$(rustc --version | awk '{print $2}')
  if [ "$(printf '%s\n' 1.85.0 "$v" | sort -V | head -1)" = "1.85.0" ]; then need_rust=0; fi
fi
if [ "$need_rust" -eq 1 ]; then
  if command -v rustup >/dev/null 2>&1; then
    rustup toolchain install stable --profile minimal -c rustfmt -c clippy
    rustup default stable
  else
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt -c clippy
  fi
  . "$HOME/.cargo/env"
fi
if command -v rustup >/dev/null 2>&1; then
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
fi
# Fuzzing (scripts/fuzz.sh, run by scripts/test.sh): cargo-fuzz needs a nightly toolchain
# (-Zsanitizer); cargo-fuzz itself is pinned and built from its lock file. A failure here is an
# error: CI must not silently skip the fuzz targets.
CARGO_FUZZ_VERSION=0.13.1
if [ "$for_tests" -eq 0 ]; then
  echo "setup: ready for the demo ($(rustc --version))"
  exit 0
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  rustup toolchain install nightly --profile minimal ||
    { echo "setup: could not install the nightly toolchain (needed by cargo-fuzz)" >&2; exit 1; }
fi
if ! cargo fuzz --version 2>/dev/null | grep -qF "$CARGO_FUZZ_VERSION"; then
  cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION" ||
    { echo "setup: could not install cargo-fuzz $CARGO_FUZZ_VERSION" >&2; exit 1; }
fi
# The stock kernel tests/integration/stack_fentry_vm.rs boots (fentry/fexit need BPF trampolines).
$SUDO bash scripts/vm-kernel.sh
echo "setup: ready ($(rustc --version))"
