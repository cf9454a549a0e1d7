#!/usr/bin/env bash
# The agent's cost budget (issue 18): N targets (default 100) at 1 probe/s each for a few minutes;
# prints the agent's CPU (% of one core, from /proc/PID/stat) and RSS over time, and the same
# figures for Prometheus' blackbox_exporter (Debian package prometheus-blackbox-exporter)
# probing the same targets at the same rate (a real Prometheus scraping /probe once a second per
# target, the way blackbox is deployed), run side by side so both see the same machine load.
#   scripts/bench-agent.sh [SECONDS] (default 180; needs a release build: cargo build --release)
#   TARGETS=100 KIND=connect scripts/bench-agent.sh 600    (LATSCOPE=path/to/latscope to bench another build)
# Targets: TARGETS loopback TCP ports (a small python3 accept-and-close server); both tools do a
# TCP connect per probe (latscope `connect`, blackbox `tcp_connect`). Not in CI (minutes long).
set -uo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-180}
N=${TARGETS:-100}
KIND=${KIND:-connect}
WARM=${WARM:-20}
L=${LATSCOPE:-./target/release/latscope}
[ -x "$L" ] || { echo "bench-agent: build first: cargo build --release" >&2; exit 2; }
command -v python3 >/dev/null || { echo "bench-agent: python3 missing (scripts/setup.sh)" >&2; exit 2; }
. scripts/lib/bench.sh
bench_tmp bench-agent
trap 'exit 130' INT TERM
BASE=${BASE_PORT:-47000}
TICK=$(getconf CLK_TCK)

# The targets: N listening ports on 127.0.0.1 that accept and close.
accept_targets "$BASE" "$N"

# latscope agent: one target per port, KIND at 1 s.
CFG=$TMP/agent.toml
agent_targets_config "$BASE" "$N" "$KIND" >"$CFG"
AGENT_PORT=$((BASE + N + 10))
$L agent --config "$CFG" --listen "127.0.0.1:$AGENT_PORT" 2>"$TMP/agent.log" &
AGENT=$!
PIDS+=($AGENT)

# The peer: blackbox_exporter scraped by Prometheus once a second per target.
BB=""
BBPROM=""
if command -v prometheus-blackbox-exporter >/dev/null && command -v prometheus >/dev/null; then
    BB_PORT=$((BASE + N + 11))
    PROM_PORT=$((BASE + N + 12))
    printf 'modules:\n  tcp_connect:\n    prober: tcp\n    timeout: 1s\n' >"$TMP/blackbox.yml"
    prometheus-blackbox-exporter --config.file="$TMP/blackbox.yml" \
        --web.listen-address="127.0.0.1:$BB_PORT" >"$TMP/bb.log" 2>&1 &
    BB=$!
    PIDS+=($BB)
    {
        printf 'global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n'
        printf '  - job_name: blackbox\n    metrics_path: /probe\n    params:\n      module: [tcp_connect]\n    static_configs:\n      - targets: ['
        for i in $(seq 0 $((N - 1))); do printf '"127.0.0.1:%d"%s' $((BASE + i)) "$([ "$i" -lt $((N - 1)) ] && echo ,)"; done
        printf ']\n    relabel_configs:\n      - source_labels: [__address__]\n        target_label: __param_target\n'
        printf '      - source_labels: [__param_target]\n        target_label: instance\n'
        printf '      - target_label: __address__\n        replacement: 127.0.0.1:%d\n' "$BB_PORT"
        printf '  - job_name: latscope\n    scrape_interval: 15s\n    static_configs:\n      - targets: ["127.0.0.1:%d"]\n' "$AGENT_PORT"
    } >"$TMP/prometheus.yml"
    prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
        --web.listen-address="127.0.0.1:$PROM_PORT" >"$TMP/prom.log" 2>&1 &
    BBPROM=$!
    PIDS+=($BBPROM)
    PEER="blackbox_exporter $(prometheus-blackbox-exporter --version 2>&1 | awk 'NR==1 {print $3}')"
else
    echo "bench-agent: no peer (install prometheus-blackbox-exporter and prometheus: scripts/setup.sh)"
fi

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
rss_mib() { awk '/^VmRSS:/ {printf "%.1f", $2/1024}' "/proc/$1/status" 2>/dev/null || echo -; }
alive() { kill -0 "$1" 2>/dev/null; }

sleep "$WARM"
alive "$AGENT" || { echo "bench-agent: the agent died:"; cat "$TMP/agent.log"; exit 1; }
echo "bench-agent: $N targets, $KIND every 1 s, ${DUR}s measured after ${WARM}s warm-up, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
A0=$(cpu_ticks "$AGENT")
B0=0
[ -n "$BB" ] && B0=$(cpu_ticks "$BB")
T0=$(date +%s.%N)
printf '%6s %14s %14s %14s %14s\n' time agent_cpu_% agent_rss_MiB peer_cpu_% peer_rss_MiB
RSS_FIRST=$(rss_mib "$AGENT")
LA=$A0
LB=$B0
LT=$T0
END=$((SECONDS + DUR))
while [ $SECONDS -lt $END ]; do
    sleep 15
    alive "$AGENT" || { echo "bench-agent: the agent died"; exit 1; }
    now=$(date +%s.%N)
    a=$(cpu_ticks "$AGENT")
    b=0
    [ -n "$BB" ] && b=$(cpu_ticks "$BB")
    awk -v a="$a" -v la="$LA" -v b="$b" -v lb="$LB" -v t="$now" -v lt="$LT" -v tk="$TICK" \
        -v ra="$(rss_mib "$AGENT")" -v rb="$([ -n "$BB" ] && rss_mib "$BB" || echo -)" -v el=$((SECONDS - END + DUR)) \
        'BEGIN { printf "%5ds %14.2f %14s %14s %14s\n", el, 100*(a-la)/tk/(t-lt), ra, (rb=="-") ? "-" : sprintf("%.2f", 100*(b-lb)/tk/(t-lt)), rb }'
    LA=$a
    LB=$b
    LT=$now
done
T1=$(date +%s.%N)
A1=$(cpu_ticks "$AGENT")
RSS_LAST=$(rss_mib "$AGENT")
METRICS=$(curl -s "http://127.0.0.1:$AGENT_PORT/metrics" 2>/dev/null || true)
PROBES=$(echo "$METRICS" | awk '/^latscope_probes_total/ {s += $NF} END {print s+0}')
echo "---"
awk -v a0="$A0" -v a1="$A1" -v t0="$T0" -v t1="$T1" -v tk="$TICK" -v r0="$RSS_FIRST" -v r1="$RSS_LAST" -v n="$PROBES" \
    'BEGIN { printf "latscope agent: %.2f%% of one core (budget 2%%), RSS %s -> %s MiB, %d probes in total\n", 100*(a1-a0)/tk/(t1-t0), r0, r1, n }'
if [ -n "$BB" ]; then
    B1=$(cpu_ticks "$BB")
    SCRAPES=$(curl -s "http://127.0.0.1:$PROM_PORT/api/v1/query?query=sum(up%7Bjob%3D%22blackbox%22%7D)" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["result"][0]["value"][1])' 2>/dev/null || echo "?")
    awk -v a0="$A0" -v a1="$A1" -v b0="$B0" -v b1="$B1" -v t0="$T0" -v t1="$T1" -v tk="$TICK" -v peer="$PEER" -v up="$SCRAPES" \
        'BEGIN { pa = 100*(a1-a0)/tk/(t1-t0); pb = 100*(b1-b0)/tk/(t1-t0);
                 printf "%s: %.2f%% of one core (%s of %d targets up); latscope/peer CPU ratio %.2f\n", peer, pb, up, '"$N"', (pb > 0) ? pa/pb : 0 }'
    echo "(the peer's figure leaves out the Prometheus server that drives its probes)"
fi
