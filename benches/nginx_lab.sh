# Sourced by the HTTP benchmarks after `ROOT` is set: checks the tools they share (python3 and
# nginx, named by the Debian package that has them), sets NGINX_BIN, and builds latscope unless
# NO_BUILD is set. The nginx itself is started by nginx_lab.py.
for tool in python3 "$@"; do
    command -v "$tool" >/dev/null || { echo "$tool not found (scripts/setup.sh installs it)" >&2; exit 2; }
done
NGINX_BIN=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX_BIN" ] || { echo "nginx not found (apt install nginx-light)" >&2; exit 2; }
if [ -z "${NO_BUILD:-}" ]; then (cd "$ROOT" && cargo build --release --quiet); fi
