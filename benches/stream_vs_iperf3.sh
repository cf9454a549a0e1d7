#!/usr/bin/env bash
# latscope stream against iperf3 and nuttcp on loopback, in one run: one TCP stream, four TCP
# streams, and UDP at a fixed rate. Prints each tool's rate, CPU per byte where the tool reports
# it, and the ratios. Target: one TCP stream ≥ 1.0× iperf3, with less CPU per byte.
# Rounds alternate between the tools so that machine noise hits all of them.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-5}
ROUNDS=${ROUNDS:-3}
UDP_RATE=${UDP_RATE:-500M}
cargo build --release --quiet
L=./target/release/latscope
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
LP=$(port); IP=$(port); NP=$(port); ND=$(port)
$L serve --bind 127.0.0.1 --port "$LP" -q 2>/dev/null & LPID=$!
iperf3 -s -B 127.0.0.1 -p "$IP" >/dev/null 2>&1 & IPID=$!
nuttcp -S -P "$NP" -p "$ND" >/dev/null 2>&1 & NPID=$!
trap 'kill $LPID $IPID $NPID 2>/dev/null || true; pkill -f "nuttcp -S -P $NP" 2>/dev/null || true' EXIT
sleep 0.5

# latscope: receiver rate (bit/s) and sender CPU seconds per GB (user+sys, both sides).
ls_run() {
  $L stream 127.0.0.1:"$LP" -t "${SECS}s" "$@" --json | python3 -c '
import json,sys
d=json.load(sys.stdin); r=d["results"][0]
secs=d["duration_ns"]/1e9
cpu=sum((v["cost"]["cpu_user_pct"]+v["cost"]["cpu_sys_pct"])/100*secs for v in (r["sender"],r["receiver"]))
print(r["intervals"]["avg_bps"] or r["rate_bps"], cpu/(r["bytes_delivered"]/1e9))'
}
# iperf3: receiver rate and CPU seconds per GB (host+remote total %).
ip_run() {
  iperf3 -c 127.0.0.1 -p "$IP" -t "$SECS" -J "$@" | python3 -c '
import json,sys
d=json.load(sys.stdin); e=d["end"]
s=e.get("sum_received") or e["sum"]
secs=s["seconds"]; c=e["cpu_utilization_percent"]
cpu=(c["host_total"]+c["remote_total"])/100*secs
print(s["bits_per_second"], cpu/(s["bytes"]/1e9))'
}
# nuttcp: rate only (its CPU figure is per side, printed as %TX/%RX: sum them).
nt_run() {
  nuttcp -P "$NP" -p "$ND" -T "$SECS" -fparse "$@" 127.0.0.1 | python3 -c '
import sys,re
t=sys.stdin.read()
f=dict(re.findall(r"(\w+)=([0-9.]+)", t))
mbps=float(f["rate_Mbps"]); secs=float(f["real_seconds"]); mb=float(f["megabytes"])
cpu=(float(f.get("tx_cpu",0))+float(f.get("rx_cpu",0)))/100*secs
print(mbps*1e6, cpu/(mb*1.048576/1000))'
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A R C
for case in tcp1 tcp4 udp; do
  for tool in latscope iperf3 nuttcp; do : > "/tmp/lsb_${case}_${tool}"; done
  for i in $(seq "$ROUNDS"); do
    case $case in
      tcp1) ls_run >> /tmp/lsb_tcp1_latscope; ip_run >> /tmp/lsb_tcp1_iperf3; nt_run >> /tmp/lsb_tcp1_nuttcp ;;
      tcp4) ls_run -P 4 >> /tmp/lsb_tcp4_latscope; ip_run -P 4 >> /tmp/lsb_tcp4_iperf3; nt_run -N4 >> /tmp/lsb_tcp4_nuttcp ;;
      udp) ls_run -u -b "$UDP_RATE" -l 1400 >> /tmp/lsb_udp_latscope; ip_run -u -b "$UDP_RATE" -l 1400 >> /tmp/lsb_udp_iperf3; nt_run -u -R"$UDP_RATE" -l1400 >> /tmp/lsb_udp_nuttcp ;;
    esac
  done
  for tool in latscope iperf3 nuttcp; do
    R[$case,$tool]=$(awk '{print $1}' "/tmp/lsb_${case}_${tool}" | median)
    C[$case,$tool]=$(awk '{print $2}' "/tmp/lsb_${case}_${tool}" | median)
  done
done
printf '\nloopback, %s s per run, median of %s rounds (rate = receiver, CPU = both sides, s per GB)\n\n' "$SECS" "$ROUNDS"
printf '%-26s %14s %14s %14s %12s %12s\n' case latscope iperf3 nuttcp "ls/iperf3" "CPU/GB ls:ip3"
for case in tcp1 tcp4 udp; do
  python3 - "$case" "${R[$case,latscope]}" "${R[$case,iperf3]}" "${R[$case,nuttcp]}" "${C[$case,latscope]}" "${C[$case,iperf3]}" <<'PY'
import sys
case=sys.argv[1]; l,i,n,cl,ci=map(float,sys.argv[2:])
names={"tcp1":"TCP, 1 stream","tcp4":"TCP, 4 streams","udp":"UDP, fixed rate"}
g=lambda v: f"{v/1e9:.2f} Gbit/s"
print(f"{names[case]:<26} {g(l):>14} {g(i):>14} {g(n):>14} {l/i:>12.3f} {cl:>5.2f}:{ci:<5.2f}")
PY
done
