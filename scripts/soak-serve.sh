#!/usr/bin/env bash
# Soak `latscope serve` (not in CI): honest and hostile clients together for N minutes; every
# 10 s print the server's threads, RSS, descriptors, running tests, and an honest rr's p99.
#   scripts/soak-serve.sh [MINUTES] (default 3; needs a release build: cargo build --release)
set -uo pipefail
cd "$(dirname "$0")/.."
MIN=${1:-3}
L=./target/release/latscope
PORT=${PORT:-7391}
T=127.0.0.1:$PORT
$L serve --port "$PORT" --max-tests 32 --max-connections 128 --max-memory 128MiB \
    --handshake-timeout 2s --per-source-rate 400M -q 2>/dev/null &
SRV=$!
PIDS=()
cleanup() { kill "${PIDS[@]}" "$SRV" 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT INT TERM
sleep 0.5
END=$((SECONDS + MIN * 60))
# Honest load: throughput tests both ways and UDP, back to back.
( while [ $SECONDS -lt $END ]; do $L stream "$T" -d 5s -P 2 >/dev/null 2>&1; $L stream "$T" -d 3s -R --udp -b 50M >/dev/null 2>&1; done ) & PIDS+=($!)
# Hostile: slowloris (idle connections that never greet), junk, oversized and 1 bit/s requests.
( while [ $SECONDS -lt $END ]; do for _ in $(seq 20); do exec {fd}<>/dev/tcp/127.0.0.1/$PORT && sleep 0.05; done; sleep 3; done ) 2>/dev/null & PIDS+=($!)
( while [ $SECONDS -lt $END ]; do printf 'GET / HTTP/1.1\r\n\r\n' >/dev/tcp/127.0.0.1/$PORT; head -c 300 /dev/urandom >/dev/tcp/127.0.0.1/$PORT; sleep 0.05; done ) 2>/dev/null & PIDS+=($!)
( while [ $SECONDS -lt $END ]; do $L stream "$T" -P 64 -l 4MiB --bidir -d 1s >/dev/null 2>&1; $L stream "$T" --udp -R -b 1 -d 1s >/dev/null 2>&1; $L rr "$T" --udp --request-size 20 --response-size 65000 -n 5 >/dev/null 2>&1; done ) & PIDS+=($!)
printf '%6s %8s %8s %6s %12s\n' time threads rss_MiB fds rr_p99_us
while [ $SECONDS -lt $END ]; do
    st=/proc/$SRV/status
    [ -r "$st" ] || { echo "the server died"; exit 1; }
    thr=$(awk '/^Threads:/ {print $2}' "$st")
    rss=$(awk '/^VmRSS:/ {printf "%.1f", $2/1024}' "$st")
    fds=$(ls /proc/$SRV/fd | wc -l)
    p99=$($L rr "$T" -d 2s --json 2>/dev/null | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["results"][0]["rtt"]["p99_ns"]/1e3,1))' 2>/dev/null || echo refused)
    printf '%6s %8s %8s %6s %12s\n' "${SECONDS}s" "$thr" "$rss" "$fds" "$p99"
    sleep 8
done
