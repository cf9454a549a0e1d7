#!/usr/bin/env bash
# Build the latscope container image offline, from a release build and this Debian 12 host's
# libraries (no registry: the image has no base). The filesystem comes from
# scripts/lib/image-rootfs.sh, the image's configuration from the last stage of
# deploy/container/Containerfile (the registry build's file, whose `runtime` stage is replaced by
# that filesystem). Writes:
#   localhost/latscope:VERSION in podman's image store (push it: docs/agent.md)
#   OUT/latscope_VERSION_image.tar   the same image as a docker-archive (podman load, docker load,
#                                    ctr images import, kind load image-archive, skopeo copy)
# and prints the image's size, uncompressed and as a registry stores it (gzip).
# Usage: bash scripts/build-image.sh [--binary PATH] [--out DIR]
#   --binary   the latscope to package (default target/release/latscope; stripped on the way)
#   --out      where the archive goes (default target/package)
# SOURCE_DATE_EPOCH (default: the last commit's time) dates the files and the image: the same
# binary gives the same image ID.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/package.sh
package_args build-image "$@"
need_tools build-image podman strip ldd
image="localhost/latscope:$version"
archive="$out/latscope_${version}_image.tar"

work=$(mktemp -d /tmp/latscope-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/runtime" "$work/context" "$out"
strip -o "$work/latscope" "$bin"
bash scripts/lib/image-rootfs.sh "$work/latscope" "$work/runtime/rootfs"
# The image this tag named before (a rebuild from another binary leaves it unnamed: removed below).
previous=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
# Only the last stage is built: it needs `runtime`, which the build context replaces, so the
# stages that pull from registries are skipped. The main context is empty (nothing is copied
# from it in that stage).
podman build --quiet --pull=never --layers=false --timestamp "$SOURCE_DATE_EPOCH" \
  --build-context "runtime=$work/runtime" --build-arg "VERSION=$version" \
  -f deploy/container/Containerfile -t "$image" "$work/context" >/dev/null
if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$image")" ]; then
  podman rmi "$previous" >/dev/null 2>&1 || true   # still used by a container: kept
fi
rm -f "$archive"
podman save --quiet --format docker-archive -o "$archive" "$image"

size=$(podman image inspect --format '{{.Size}}' "$image")
gz=$(gzip -9 -c "$archive" | wc -c)
echo "build-image: $image ($(mib "$size"), $(mib "$gz") compressed as a registry stores it) and $archive"
