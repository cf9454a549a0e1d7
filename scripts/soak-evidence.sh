#!/usr/bin/env bash
# Soak the evidence endpoint (`latscope serve --auth-file KEY --evidence-ports ...`, or with
# ENDPOINT=agent `latscope agent` with an [evidence] section; issue 26 item 6; not in CI): one
# evidence request every second for N minutes (each observes ~0.5 s while an rr test runs
# against the observed port), and every 10 s print the agent's threads, RSS, descriptors, the
# eBPF programs it holds and those loaded on the host. At the end: the answered/refused counts,
# RSS first, last and largest, and whether any eBPF program, scan thread or capture was left
# behind (the agent must hold none once the requests end).
#   [ENDPOINT=serve|agent] scripts/soak-evidence.sh [MINUTES] (default 10; needs root and a
#   release build: cargo build --release)
set -uo pipefail
cd "$(dirname "$0")/.."
MIN=${1:-10}
L=${LATSCOPE:-./target/release/latscope}
APORT=${APORT:-7392}
TPORT=${TPORT:-7393}
DIR=$(mktemp -d)
KEY=$DIR/key
head -c 32 /dev/urandom | base64 >"$KEY"
chmod 600 "$KEY"
$L serve --port "$TPORT" -q 2>/dev/null &
TGT=$!
if [ "${ENDPOINT:-serve}" = agent ]; then
    printf 'listen = "127.0.0.1:0"\n[evidence]\nauth_file = "%s"\nports = [%s]\nlisten = "127.0.0.1:%s"\n' \
        "$KEY" "$TPORT" "$APORT" >"$DIR/agent.toml"
    $L agent --config "$DIR/agent.toml" 2>"$DIR/agent.log" &
else
    $L serve --port "$APORT" --auth-file "$KEY" --evidence-ports "$TPORT" -q 2>/dev/null &
fi
AGT=$!
PIDS=()
cleanup() { kill "${PIDS[@]}" "$AGT" "$TGT" 2>/dev/null; wait 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT INT TERM
sleep 0.5
progs_on_host() { bpftool prog show 2>/dev/null | grep -c '^[0-9]*:' ; }
progs_held() { grep -l '^prog_type:' /proc/"$AGT"/fdinfo/* 2>/dev/null | wc -l; }
BASE_PROGS=$(progs_on_host)
END=$((SECONDS + MIN * 60))
# Traffic on the observed port, so each observation has connections to read.
( while [ $SECONDS -lt $END ]; do $L rr 127.0.0.1:$TPORT -d 5s >/dev/null 2>&1; done ) & PIDS+=($!)
# The client: one request a second (a minimal client of the exchange, in Python, so the soak
# measures the agent and not a diagnose run).
python3 - "$APORT" "$TPORT" "$KEY" "$((MIN * 60))" >"$DIR/client.log" 2>&1 <<'EOF' & PIDS+=($!)
import hashlib, hmac, json, os, socket, struct, sys, time
aport, tport, keyfile, secs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
key = open(keyfile, 'rb').read().rstrip()
def frame(obj):
    b = json.dumps(obj).encode()
    return struct.pack('>I', len(b)) + b
def read_exact(s, n):
    b = b''
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError
        b += c
    return b
def read_frame(s):
    (n,) = struct.unpack('>I', read_exact(s, 4))
    return json.loads(read_exact(s, n))
ok = refused = failed = 0
end = time.monotonic() + secs
while time.monotonic() < end:
    t0 = time.monotonic()
    try:
        s = socket.create_connection(('127.0.0.1', aport), timeout=30)
        read_exact(s, 10)
        hello = read_frame(s)
        nonce = os.urandom(32)
        mac = hmac.new(key, b'latscope auth v1' + bytes.fromhex(hello['challenge']) + nonce, hashlib.sha256).hexdigest()
        out = b'LATSCOPE' + struct.pack('>H', 1)
        out += frame({'software': 'soak', 'auth': {'nonce': nonce.hex(), 'mac': mac}})
        out += frame({'kind': 'evidence', 'request_bytes': 1, 'response_bytes': 1, 'duration_ms': 5000,
                      'server': {'write_mode': 'single', 'split_at': 0, 'think_ns': 0,
                                 'sockopts': {'nodelay': True, 'quickack': False, 'cork': False,
                                              'sndbuf': None, 'rcvbuf': None},
                                 'drop_every': 0}})
        out += frame({'version': 1, 'port': tport})
        s.sendall(out)
        r = read_frame(s)
        if r.get('type') != 'accepted':
            refused += 1
            print('refused', r, flush=True)
        else:
            time.sleep(0.5)
            s.sendall(b'd')
            e = read_frame(s)
            ok += 1 if e.get('version') == 1 else 0
        s.close()
    except Exception as ex:
        failed += 1
        print('failed', repr(ex), flush=True)
    time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
print(f'answered {ok}, refused {refused}, failed {failed}', flush=True)
EOF
CLIENT=${PIDS[-1]}
printf '%6s %8s %8s %6s %10s %12s\n' time threads rss_MiB fds bpf_held bpf_on_host
FIRST_RSS=
MAX_RSS=0
while [ $SECONDS -lt $END ]; do
    st=/proc/$AGT/status
    [ -r "$st" ] || { echo "the agent died"; exit 1; }
    thr=$(awk '/^Threads:/ {print $2}' "$st")
    rss=$(awk '/^VmRSS:/ {printf "%.1f", $2/1024}' "$st")
    FIRST_RSS=${FIRST_RSS:-$rss}
    MAX_RSS=$(awk -v a="$MAX_RSS" -v b="$rss" 'BEGIN {print (b > a) ? b : a}')
    fds=$(ls /proc/$AGT/fd | wc -l)
    printf '%6s %8s %8s %6s %10s %12s\n' "${SECONDS}s" "$thr" "$rss" "$fds" "$(progs_held)" "$(progs_on_host)"
    sleep 10
done
wait "$CLIENT" 2>/dev/null
sleep 1
tail -1 "$DIR/client.log"
grep -c '^failed' "$DIR/client.log" | sed 's/^/client failures logged: /'
# Refusals by reason (the message without its figures).
grep '^refused' "$DIR/client.log" | sed -n "s/.*'message': '\([^']*\)'.*/\1/p" | sed 's/[0-9]\+/N/g' | sort | uniq -c
rss=$(awk '/^VmRSS:/ {printf "%.1f", $2/1024}' /proc/$AGT/status)
thr=$(awk '/^Threads:/ {print $2}' /proc/$AGT/status)
held=$(progs_held)
echo "agent after the requests: RSS ${FIRST_RSS} → ${rss} MiB (largest ${MAX_RSS}), ${thr} threads, ${held} eBPF programs held; host: $(progs_on_host) programs (before: ${BASE_PROGS})"
[ "$held" -eq 0 ] || { echo "eBPF programs left behind in the agent"; exit 1; }
