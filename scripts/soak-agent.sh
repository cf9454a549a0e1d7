#!/usr/bin/env bash
# The agent's memory soak (issue 18): N targets (default 100) at 1 probe/s each for hours; every
# SAMPLE seconds (default 60) it appends the agent's RSS (VmRSS from /proc/PID/status), open fds
# (/proc/PID/fd) and threads (Threads:) to a CSV, then prints the first, last and largest RSS and
# the slope of RSS over the last half of the run (least squares, KiB per hour): "flat memory" is a
# slope near 0 there, whatever the warm-up did.
#   scripts/soak-agent.sh [DURATION] [CSV]   DURATION in seconds or with a unit: 90m, 4h (default 2h)
#   TARGETS=100 KIND=connect SAMPLE=60 LATSCOPE=/tmp/latscope scripts/soak-agent.sh 4h /tmp/soak.csv
#   EXTRA=file.toml appends that TOML to the generated configuration (e.g. a [stack] section).
# Targets: TARGETS loopback TCP ports (a python3 accept-and-close server), as bench-agent.sh.
# Ctrl-C (or SIGTERM: a shell started in the background ignores SIGINT) stops early and still
# prints the summary of what was sampled. Not in CI.
set -uo pipefail
cd "$(dirname "$0")/.."
DUR_ARG=${1:-2h}
case $DUR_ARG in
    *h) DUR=$(( ${DUR_ARG%h} * 3600 )) ;;
    *m) DUR=$(( ${DUR_ARG%m} * 60 )) ;;
    *s) DUR=${DUR_ARG%s} ;;
    *) DUR=$DUR_ARG ;;
esac
[[ $DUR =~ ^[0-9]+$ ]] || { echo "soak-agent: bad duration '$DUR_ARG' (seconds, or 90m, 4h)" >&2; exit 2; }
N=${TARGETS:-100}
KIND=${KIND:-connect}
SAMPLE=${SAMPLE:-60}
L=${LATSCOPE:-./target/release/latscope}
[ -x "$L" ] || { echo "soak-agent: build first: cargo build --release (or LATSCOPE=path)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "soak-agent: python3 missing (scripts/setup.sh)" >&2; exit 2; }
. scripts/lib/bench.sh
bench_tmp soak-agent
CSV=${2:-$TMP/soak.csv}
STOP=0
trap 'STOP=1' INT TERM
BASE=${BASE_PORT:-48000}

accept_targets "$BASE" "$N"

CFG=$TMP/agent.toml
agent_targets_config "$BASE" "$N" "$KIND" "${EXTRA:-}" >"$CFG"
AGENT_PORT=$((BASE + N + 10))
$L agent --config "$CFG" --listen "127.0.0.1:$AGENT_PORT" 2>"$TMP/agent.log" &
AGENT=$!
PIDS+=($AGENT)

status() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status" 2>/dev/null; }
probes() {
    curl -s --max-time 5 "http://127.0.0.1:$AGENT_PORT/metrics" 2>/dev/null |
        awk '/^latscope_probes_total/ {s += $NF} END {print s+0}'
}
echo "soak-agent: $N targets, $KIND every 1 s, ${DUR}s, a sample every ${SAMPLE}s into $CSV (load $(cut -d' ' -f1 /proc/loadavg))"
echo "elapsed_s,rss_kib,fds,threads,probes" >"$CSV"
T0=$SECONDS
while :; do
    kill -0 "$AGENT" 2>/dev/null || { echo "soak-agent: the agent died:"; tail -5 "$TMP/agent.log"; break; }
    el=$((SECONDS - T0))
    fds=$(ls "/proc/$AGENT/fd" 2>/dev/null | wc -l)
    echo "$el,$(status "$AGENT" VmRSS),$fds,$(status "$AGENT" Threads),$(probes)" >>"$CSV"
    [ $STOP = 1 ] || [ "$el" -ge "$DUR" ] && break
    for _ in $(seq "$SAMPLE"); do
        [ $STOP = 1 ] || [ $((SECONDS - T0)) -ge "$DUR" ] && break
        sleep 1
    done
done
echo "---"
# Summary: first/last/max RSS, fds and threads ranges, least-squares slope of the last half.
awk -F, 'NR > 1 && $2 != "" { n++; t[n] = $1; r[n] = $2; f[n] = $3; h[n] = $4; p[n] = $5 }
END {
    if (n < 2) { print "soak-agent: fewer than two samples"; exit 1 }
    max = 0; fmin = f[1]; fmax = f[1]; hmin = h[1]; hmax = h[1]
    for (i = 1; i <= n; i++) {
        if (r[i] > max) { max = r[i]; tmax = t[i] }
        if (f[i] < fmin) fmin = f[i]; if (f[i] > fmax) fmax = f[i]
        if (h[i] < hmin) hmin = h[i]; if (h[i] > hmax) hmax = h[i]
    }
    s = int(n / 2) + 1; m = n - s + 1; sx = sy = sxx = sxy = 0
    for (i = s; i <= n; i++) { x = t[i] / 3600; sx += x; sy += r[i]; sxx += x * x; sxy += x * r[i] }
    d = m * sxx - sx * sx
    slope = (m > 1 && d > 0) ? (m * sxy - sx * sy) / d : 0
    printf "duration %.2f h, %d samples, %d probes\n", t[n] / 3600, n, p[n]
    w = 1; while (w < n && t[w] < 60) w++
    printf "RSS start %.1f MiB (%.1f MiB at %d s, warmed up), end %.1f MiB, max %.1f MiB (at %d s)\n", r[1] / 1024, r[w] / 1024, t[w], r[n] / 1024, max / 1024, tmax
    printf "RSS slope over the last half (%d s to %d s): %+.0f KiB/h\n", t[s], t[n], slope
    printf "fds %d..%d, threads %d..%d\n", fmin, fmax, hmin, hmax
}' "$CSV"
