#!/usr/bin/env bash
# latscope sockets against its peer tools, in the same run:
#   1. scanning N loopback connections: `ss -tanpi` (sock_diag + /proc, like latscope)
#      vs `latscope sockets --all --json` (sock_diag + /proc + pidfd_getfd/getsockopt per socket);
#   2. the cost a watcher imposes on an application making setsockopt calls:
#      `strace -f -e trace=setsockopt` (ptrace: stops the caller at every syscall)
#      vs `latscope sockets --watch` (perf tracepoint: the caller never stops).
# Prints figures and ratios (ratios matter: the machine is shared and noisy).
# Needs: root, python3, ss (iproute2), strace. Usage: benches/sockets.sh [N_CONNECTIONS] [N_CALLS]
set -euo pipefail
N=${1:-2000}
CALLS=${2:-200000}
cd "$(dirname "$0")/.."
cargo build --release -q
BIN=target/release/latscope
TMP=$(mktemp -d /tmp/lsi-bench.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

now() { date +%s.%N; }
best_of() { # best_of K cmd... → best wall time in seconds
  local k=$1; shift; local best=999999
  for _ in $(seq "$k"); do
    local t0 t1; t0=$(now); "$@" >/dev/null 2>&1 || true; t1=$(now)
    best=$(echo "$t1 - $t0" | bc -l | awk -v b="$best" '{print ($1<b)?$1:b}')
  done
  echo "$best"
}

# 1. N connections held by one process.
ulimit -n $((N * 2 + 100))
python3 - "$N" >"$TMP/port" <<'PY' &
import socket, sys, time
n = int(sys.argv[1])
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(n)
keep = []
for _ in range(n):
    c = socket.create_connection(l.getsockname()); a, _ = l.accept(); keep += [c, a]
print(l.getsockname()[1], flush=True)
time.sleep(3600)
PY
PIDS+=($!)
while [ ! -s "$TMP/port" ]; do sleep 0.1; done
HOLDER=${PIDS[0]}
SOCKS=$((N * 2 + 1))
T_SS=$(best_of 5 ss -tanpi)
T_LS=$(best_of 5 "$BIN" sockets --pid "$HOLDER" --json)
T_LS_ALL=$(best_of 5 "$BIN" sockets --all --json)
ROWS=$("$BIN" sockets --pid "$HOLDER" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(1 for s in d["sockets"] if s["options"]))')
printf 'scan of %d sockets of one process (best of 5)\n' "$SOCKS"
printf '  ss -tanpi                       %8.1f ms   (sock_diag + /proc; no options)\n' "$(echo "$T_SS*1000" | bc -l)"
printf '  latscope sockets --pid --json   %8.1f ms   (%d sockets with options read via pidfd_getfd)\n' "$(echo "$T_LS*1000" | bc -l)" "$ROWS"
printf '  latscope sockets --all --json   %8.1f ms\n' "$(echo "$T_LS_ALL*1000" | bc -l)"
printf '  ratio latscope --pid / ss       %8.2f\n' "$(echo "$T_LS / $T_SS" | bc -l)"
printf '  per socket (latscope --pid)     %8.1f us\n' "$(echo "$T_LS*1000000/$SOCKS" | bc -l)"
kill "$HOLDER"

# 2. An application making CALLS setsockopt(TCP_NODELAY) calls, alone / watched / straced.
cat >"$TMP/app.py" <<'PY'
import socket, sys, time
n = int(sys.argv[1]); s = socket.socket()
t0 = time.perf_counter()
for i in range(n):
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, i & 1)
print(time.perf_counter() - t0)
PY
app() { python3 "$TMP/app.py" "$CALLS"; }
T_BASE=$(app)
"$BIN" sockets --watch --json-lines >"$TMP/watch.out" 2>"$TMP/watch.err" &
W=$!; PIDS+=($W)
until grep -q watching "$TMP/watch.err"; do sleep 0.1; done
T_WATCH=$(app)
sleep 1; kill -INT "$W"; wait "$W" || true
SEEN=$(grep -c '"TCP_NODELAY"' "$TMP/watch.out" || true)
LOST=$(tail -1 "$TMP/watch.out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["report"]["lost"])' 2>/dev/null || echo "?")
T_STRACE=$(strace -f -qq -e trace=setsockopt -o /dev/null python3 "$TMP/app.py" "$CALLS")
printf '\n%d setsockopt calls by one process\n' "$CALLS"
printf '  alone                           %8.3f s\n' "$T_BASE"
printf '  under latscope --watch          %8.3f s   (%d events reported, %s lost)\n' "$T_WATCH" "$SEEN" "$LOST"
printf '  under strace -f                 %8.3f s\n' "$T_STRACE"
printf '  slowdown latscope --watch       %8.2fx\n' "$(echo "$T_WATCH / $T_BASE" | bc -l)"
printf '  slowdown strace                 %8.2fx\n' "$(echo "$T_STRACE / $T_BASE" | bc -l)"
if [ -n "${BENCH_SUMMARY:-}" ]; then
  printf 'sockets\tscan of %s sockets\ts\t%s\t%s\tss\tlower\n' "$SOCKS" "$T_LS" "$T_SS" >>"$BENCH_SUMMARY"
  printf 'sockets\t%s setsockopt calls watched\ts\t%s\t%s\tstrace\tlower\n' "$CALLS" "$T_WATCH" "$T_STRACE" >>"$BENCH_SUMMARY"
fi
