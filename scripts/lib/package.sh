# Shared by scripts/build-deb.sh and scripts/build-image.sh (sourced, not run): their arguments,
# the tools they need, the version and the time stamp of what they build.

# package_args NAME "$@": parse [--binary PATH] [--out DIR] into $bin (default
# target/release/latscope, which must exist) and $out (default target/package); set $version
# (the binary's) and export SOURCE_DATE_EPOCH (default: the last commit's time, else the
# binary's), which dates every file and the image: the same binary builds the same artefact.
package_args() {
  local name=$1
  shift
  bin=target/release/latscope
  out=target/package
  while [ $# -gt 0 ]; do
    case $1 in
      --binary) bin=${2:?--binary needs a path}; shift 2 ;;
      --out) out=${2:?--out needs a directory}; shift 2 ;;
      *) echo "$name: unknown argument $1 (usage: $name.sh [--binary PATH] [--out DIR])" >&2; exit 2 ;;
    esac
  done
  if [ ! -x "$bin" ]; then
    echo "$name: $bin not found: build first (cargo build --release --locked)" >&2
    exit 2
  fi
  version=$("$bin" --version | awk '{ print $2 }')
  if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || stat -c %Y "$bin")
  fi
  export SOURCE_DATE_EPOCH
  mkdir -p "$out"
}

# need_tools NAME TOOL...: exit 4 naming the first tool missing from PATH.
need_tools() {
  local name=$1 tool
  shift
  for tool in "$@"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "$name: $tool not found: run scripts/setup.sh (scripts/packages.d/package.txt)" >&2
      exit 4
    fi
  done
}

# mib BYTES: "3.8 MiB".
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
