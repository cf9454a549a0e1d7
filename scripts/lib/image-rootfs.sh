#!/usr/bin/env bash
# The container image's filesystem, assembled in DEST from a built binary. The one place that
# says what the image holds; both builds of the image run it:
#   - scripts/build-image.sh (offline, here: the libraries of this Debian 12 host),
#   - deploy/container/Containerfile's `runtime` stage (registry access: Debian 12 slim).
# It writes, and nothing else (no shell, no package manager, no compiler: no feature needs one):
#   /usr/bin/latscope                        the binary (strip it first)
#   every shared library it loads, at the path the dynamic loader resolves (ldd), and the loader
#   /etc/ssl/certs/ca-certificates.crt       Debian's CA bundle, for `--cacert` (the binary's own
#                                            trust store is Mozilla's roots, compiled in)
#   /etc/latscope/                           where the agent's configuration is mounted
#   /var/lib/latscope/                       the agent's state (findings_log)
#   /tmp/                                    mode 1777
# Files are root-owned; with SOURCE_DATE_EPOCH set, every time stamp is that (reproducible).
# Usage: bash scripts/lib/image-rootfs.sh BINARY DEST   (DEST must not exist yet)
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: image-rootfs.sh BINARY DEST" >&2
  exit 2
fi
bin=$1
dest=$2
if [ ! -x "$bin" ]; then
  echo "image-rootfs: $bin is not an executable" >&2
  exit 2
fi
if [ -e "$dest" ]; then
  echo "image-rootfs: $dest exists; give a new directory" >&2
  exit 2
fi
bundle=/etc/ssl/certs/ca-certificates.crt
if [ ! -s "$bundle" ]; then
  echo "image-rootfs: $bundle missing: install the Debian package ca-certificates" >&2
  exit 4
fi

install -d -m 0755 "$dest/usr/bin" "$dest/etc/ssl/certs" "$dest/etc/latscope" "$dest/var/lib/latscope"
install -d -m 1777 "$dest/tmp"
install -m 0755 "$bin" "$dest/usr/bin/latscope"
install -m 0644 "$bundle" "$dest$bundle"

# ldd's lines: "libpcap.so.0.8 => /lib/x86_64-linux-gnu/libpcap.so.0.8 (0x…)" for a library,
# "/lib64/ld-linux-x86-64.so.2 (0x…)" for the loader, "linux-vdso.so.1 (0x…)" for the kernel's
# (no file). A library ldd cannot find is an error: the image would not start.
ldd_out=$(ldd "$bin") || { echo "image-rootfs: ldd $bin failed (not a dynamic executable?)" >&2; exit 1; }
if grep -q 'not found' <<<"$ldd_out"; then
  echo "image-rootfs: libraries missing on this system:" >&2
  grep 'not found' <<<"$ldd_out" >&2
  exit 1
fi
while read -r path; do
  # The file itself, not the symbolic link: the loader asks for the soname's path only.
  install -D -m 0644 "$(readlink -f "$path")" "$dest$path"
done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$ldd_out")
interp=$(awk '$1 ~ /^\// { print $1 }' <<<"$ldd_out")
if [ -z "$interp" ]; then
  echo "image-rootfs: ldd names no dynamic loader for $bin" >&2
  exit 1
fi
chmod 0755 "$dest$interp"

if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
  find "$dest" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
fi
