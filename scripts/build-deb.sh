#!/usr/bin/env bash
# Build the Debian package latscope_VERSION_ARCH.deb from a release build:
#   /usr/bin/latscope                                  stripped
#   /usr/share/man/man1/latscope.1.gz, latscope-SUBCOMMAND.1.gz   one page per subcommand
#   /usr/share/bash-completion/completions/latscope, /usr/share/zsh/vendor-completions/_latscope,
#   /usr/share/fish/vendor_completions.d/latscope.fish
#   /lib/systemd/system/latscope-agent.service, latscope-serve.service   (neither enabled nor started)
#   /etc/latscope/agent.toml, /etc/latscope/peers      conffiles (deploy/systemd/)
#   /usr/share/doc/latscope/copyright (with the Rust crates linked in), examples/ (deploy/)
# Pages and completions come from the binary itself (`latscope man`, `latscope completions`), as
# scripts/install.sh writes them. Depends is what dpkg-shlibdeps finds the binary links (libc6,
# libgcc-s1, libpcap0.8, libelf1, zlib1g), with the versions its symbols need.
# Usage: bash scripts/build-deb.sh [--binary PATH] [--out DIR]
#   --binary   the latscope to package (default target/release/latscope)
#   --out      where the .deb goes (default target/package)
# SOURCE_DATE_EPOCH (default: the last commit's time) dates every file: the same binary gives
# the same package (scripts/lib/package.sh). DEBFULLNAME and DEBEMAIL name the maintainer.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/package.sh
package_args build-deb "$@"
need_tools build-deb dpkg-deb dpkg-shlibdeps strip gzip
arch=$(dpkg --print-architecture)
maintainer="${DEBFULLNAME:-latscope maintainers} <${DEBEMAIL:-latscope@users.noreply.github.com}>"
deb="$out/latscope_${version}_${arch}.deb"

work=$(mktemp -d /tmp/latscope-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
root="$work/debian/latscope"
doc="$root/usr/share/doc/latscope"
install -d "$root/DEBIAN" "$root/usr/bin" "$root/usr/share/man/man1" \
  "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
  "$root/usr/share/fish/vendor_completions.d" "$root/lib/systemd/system" "$root/etc/latscope" \
  "$doc/examples/prometheus" "$doc/examples/grafana" "$doc/examples/kubernetes" "$out"

# The binary, stripped as dh_strip does (symbols and debug info out; the build ID kept).
strip --remove-section=.comment --remove-section=.note -o "$root/usr/bin/latscope" "$bin"
chmod 0755 "$root/usr/bin/latscope"
"$bin" man --out-dir "$root/usr/share/man/man1"
gzip -9n "$root"/usr/share/man/man1/*.1
"$bin" completions bash > "$root/usr/share/bash-completion/completions/latscope"
"$bin" completions zsh > "$root/usr/share/zsh/vendor-completions/_latscope"
"$bin" completions fish > "$root/usr/share/fish/vendor_completions.d/latscope.fish"
install -m 0644 deploy/systemd/latscope-agent.service deploy/systemd/latscope-serve.service "$root/lib/systemd/system/"
install -m 0644 deploy/systemd/agent.toml deploy/systemd/peers "$root/etc/latscope/"
install -m 0644 deploy/agent.example.toml deploy/agent.example.yaml "$doc/examples/"
install -m 0644 deploy/prometheus/* "$doc/examples/prometheus/"
install -m 0644 deploy/grafana/* "$doc/examples/grafana/"
install -m 0644 deploy/kubernetes/* "$doc/examples/kubernetes/"
{
  # The years of the project's history (the first commit's to this build's).
  first=$(git log --reverse --format=%cd --date=format:%Y 2>/dev/null | awk 'NR == 1')
  last=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)
  years=${first:-$last}
  if [ "$years" != "$last" ]; then years="$years-$last"; fi
  sed "s/@YEARS@/$years/" deploy/debian/copyright.head
  echo
  echo "Files: (the Rust crates in /usr/bin/latscope)"
  echo "Copyright: (c) their authors"
  echo "License: (as each crate declares it)"
  # name version|license, from the lock file: what the binary's build links (normal edges).
  cargo tree --locked --offline -e normal --prefix none -f '{p}|{l}' -p latscope 2>/dev/null \
    | sed 's/ (\*)$//; s/ (proc-macro)$//' | grep -v '(/' | sort -u \
    | awk -F'|' '{ printf " %s: %s\n", $1, ($2 == "" ? "(none declared)" : $2) }'
} > "$doc/copyright"
if ! grep -q '^ [a-z]' <(sed -n '/^Files: (the Rust crates/,$p' "$doc/copyright"); then
  echo "build-deb: cargo tree listed no crates (cargo and the crates' sources are needed)" >&2
  exit 1
fi

# A native package's changelog: this build (Debian's format: dpkg-parsechangelog reads it).
{
  echo "latscope ($version) unstable; urgency=medium"
  echo
  echo "  * latscope $version, built from $(git describe --always --dirty 2>/dev/null || echo "a source tree without git")."
  echo
  echo " -- $maintainer  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n > "$doc/changelog.gz"

install -m 0755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm "$root/DEBIAN/"
printf '/etc/latscope/agent.toml\n/etc/latscope/peers\n' > "$root/DEBIAN/conffiles"
# md5sums of the files dpkg does not treat as configuration (what `dpkg --verify` checks).
(cd "$root" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\0' | LC_ALL=C sort -z \
  | xargs -0 md5sum) > "$root/DEBIAN/md5sums"

# Depends: dpkg-shlibdeps maps each library the binary needs (DT_NEEDED) to its package and the
# version its symbols need. It reads debian/control from the current directory.
printf 'Source: latscope\n\nPackage: latscope\nArchitecture: any\n' > "$work/debian/control"
depends=$(cd "$work" && dpkg-shlibdeps -O -e debian/latscope/usr/bin/latscope 2>/dev/null \
  | sed -n 's/^shlibs:Depends=//p')
if [ -z "$depends" ]; then
  echo "build-deb: dpkg-shlibdeps found no dependencies for the binary" >&2
  exit 1
fi
installed_kib=$(du -sk --apparent-size --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: latscope
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $installed_kib
Depends: $depends
Section: net
Priority: optional
Homepage: https://github.com/latscope/latscope
Description: network latency and throughput at every layer, and where latency comes from
 latscope measures latency at every layer with one binary and one output
 model (tables, JSON): ping and trace probes, TCP connect, request/response
 against its own server, HTTP load, bulk throughput, packet capture and
 analysis, the kernel stack's latency (eBPF) and the sockets of running
 services. latscope diagnose names the cause of a latency with the evidence
 and the side to fix.
 .
 latscope agent measures a fleet continuously for Prometheus
 (latscope-agent.service, /etc/latscope/agent.toml); latscope-serve.service
 is the peer it measures against.
CONTROL

find "$root" -type d -exec chmod 0755 {} +
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
rm -f "$deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "build-deb: $deb ($(mib "$(stat -c %s "$deb")"), installs $(mib $((installed_kib * 1024)))); Depends: $depends"
