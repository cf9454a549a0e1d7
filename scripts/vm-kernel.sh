#!/usr/bin/env bash
# Fetch the kernel that tests/integration/stack_fentry_vm.rs boots under QEMU: Debian 12's stock kernel
# (linux-image-amd64, 6.1), whose BPF trampolines make fentry/fexit work — the path real servers
# take and this build machine's kernel refuses. Keeps only vmlinuz and the modules the test's
# initramfs loads (virtio, 9p). Safe to rerun: does nothing when the kernel is already there.
#
#   scripts/vm-kernel.sh [DIR]      # default: $LATSCOPE_VM_DIR or /var/cache/latscope/vm
set -euo pipefail

DIR=${1:-${LATSCOPE_VM_DIR:-/var/cache/latscope/vm}}
MODULES="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci 9pnet 9pnet_virtio netfs fscache 9p"

if [ -f "$DIR/vmlinuz" ] && [ -f "$DIR/modules/9p.ko" ]; then
  echo "vm-kernel: ready in $DIR ($(cat "$DIR/version"))"
  exit 0
fi
resolve() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'; }
pkg=$(resolve)
if [ -z "$pkg" ]; then
  apt-get update -qq
  pkg=$(resolve)
fi
[ -n "$pkg" ] || { echo "vm-kernel: cannot resolve linux-image-amd64 (apt-get update first)" >&2; exit 2; }

work=$(mktemp -d /tmp/latscope-vm-kernel.XXXXXX)
trap 'rm -rf "$work"' EXIT
# apt's sandbox user must be able to write the download directory.
chmod 755 "$work"
(cd "$work" && apt-get download -q "$pkg" >/dev/null 2>&1) || {
  echo "vm-kernel: apt-get download $pkg failed" >&2
  exit 2
}
dpkg-deb -x "$work"/*.deb "$work/root"

mkdir -p "$DIR/modules"
cp "$work"/root/boot/vmlinuz-* "$DIR/vmlinuz"
for m in $MODULES; do
  f=$(find "$work/root/lib/modules" -name "$m.ko" | head -1)
  [ -n "$f" ] || { echo "vm-kernel: module $m not in $pkg" >&2; exit 2; }
  cp "$f" "$DIR/modules/"
done
echo "$MODULES" > "$DIR/modules/order"
basename "$work"/root/boot/vmlinuz-* | sed 's/^vmlinuz-//' > "$DIR/version"
echo "vm-kernel: $pkg in $DIR"
