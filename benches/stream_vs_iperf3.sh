#!/usr/bin/env bash
# latscope stream against iperf3 and nuttcp on loopback, in one run: one TCP stream, four TCP
# streams, and UDP at fixed rates (1400 B datagrams for every tool: iperf3 -l 1400, nuttcp
# -l1400). Prints each tool's delivered rate and its CPU-seconds per GB delivered, client and
# server together, as the OS counts them (the client's user+sys from wait4, the server's from
# /proc/PID/stat before and after the run: every thread, and reaped children), and the ratios.
# UDP lines also show the loss each tool reported, and a second table the jitter latscope and
# iperf3 reported (both RFC 3550 interarrival jitter at the receiver). CPU per GB is the figure least disturbed by
# a shared machine; rounds alternate the tools so that noise hits them alike; medians.
#
# Targets: one TCP stream ≥ 1.0× iperf3 at less CPU per GB; UDP CPU per GB ≤ iperf3's at every
# rate both tools sustain (loss < 1%).
#
#   benches/stream_vs_iperf3.sh                              # 5 s, 3 rounds, UDP 100M 500M 2G
#   SECS=2 ROUNDS=1 UDP_RATES=500M CASES=udp benches/stream_vs_iperf3.sh
#   BENCH_SUMMARY=FILE ...   # also append the ratios as TSV lines (benches/all.sh reads them)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
for tool in python3 iperf3 nuttcp; do
  command -v "$tool" >/dev/null || { echo "$tool not found (scripts/setup.sh installs it)" >&2; exit 2; }
done
if [ -z "${NO_BUILD:-}" ]; then (cd "$ROOT" && cargo build --release --quiet); fi
export SECS=${SECS:-5} ROUNDS=${ROUNDS:-3} UDP_RATES=${UDP_RATES:-100M 500M 2G}
export CASES=${CASES:-tcp1 tcp4 udp} LATSCOPE=${LATSCOPE:-$ROOT/target/release/latscope}
export BENCH_SUMMARY=${BENCH_SUMMARY:-}
exec python3 - <<'PY'
import json, os, re, socket, statistics, subprocess, sys, time

SECS, ROUNDS = int(os.environ["SECS"]), int(os.environ["ROUNDS"])
L = os.environ["LATSCOPE"]
TICK = os.sysconf("SC_CLK_TCK")

def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def proc_cpu_s(pid):
    """User+system seconds of a process: its threads, live and ended, and its reaped children."""
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in v[11:15]) / TICK

def run(server_pid, cmd):
    """Run a client; return (stdout, client CPU s, server CPU s) as the OS counted them."""
    before = proc_cpu_s(server_pid)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = p.stdout.read().decode(errors="replace")
    _, status, ru = os.wait4(p.pid, 0)
    time.sleep(0.3)  # the server's last datagrams and its final reply
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        sys.exit(f"failed: {' '.join(cmd)}")
    return out, ru.ru_utime + ru.ru_stime, proc_cpu_s(server_pid) - before

def rate_arg(r):  # "500M" → bits/s
    m = {"K": 1e3, "M": 1e6, "G": 1e9}
    return float(r[:-1]) * m[r[-1].upper()] if r[-1].upper() in m else float(r)

LP, IP, NP, ND = port(), port(), port(), port()
servers = {
    "latscope": subprocess.Popen([L, "serve", "--bind", "127.0.0.1", "--port", str(LP), "-q"],
                                 stderr=subprocess.DEVNULL),
    "iperf3": subprocess.Popen(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(IP)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    "nuttcp": subprocess.Popen(["nuttcp", "-S", "--nofork", "-P", str(NP), "-p", str(ND)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
}
time.sleep(0.5)

def latscope(args):
    out, c, s = run(servers["latscope"].pid,
                    [L, "stream", f"127.0.0.1:{LP}", "-t", f"{SECS}s", *args, "--json"])
    r = json.loads(out)["results"][0]
    u = r.get("udp")
    loss, jitter_ms = (u["loss_pct"], u["jitter_ns"] / 1e6) if u else (None, None)
    return r["rate_bps"], r["bytes_delivered"], c + s, loss, jitter_ms

def iperf3(args):
    out, c, s = run(servers["iperf3"].pid,
                    ["iperf3", "-c", "127.0.0.1", "-p", str(IP), "-t", str(SECS), "-J", *args])
    e = json.loads(out)["end"]
    loss = e.get("sum", {}).get("lost_percent")  # UDP only
    jitter_ms = e.get("sum", {}).get("jitter_ms")  # UDP only
    if "sum_received" in e:
        x = e["sum_received"]
        return x["bits_per_second"], x["bytes"], c + s, loss, jitter_ms
    x = e["sum"]  # older iperf3, UDP: the sender's bytes less the datagrams counted lost
    delivered = x["bytes"] * (1 - x["lost_percent"] / 100)
    return delivered * 8 / x["seconds"], delivered, c + s, loss, jitter_ms

def nuttcp(args):
    out, c, s = run(servers["nuttcp"].pid,
                    ["nuttcp", "-P", str(NP), "-p", str(ND), "-T", str(SECS), "-fparse", *args,
                     "127.0.0.1"])
    f = dict(re.findall(r"(\w+)=([0-9.]+)", out))
    delivered = float(f["megabytes"]) * 1048576
    loss = float(f["data_loss"]) if "data_loss" in f else None
    return float(f["rate_Mbps"]) * 1e6, delivered, c + s, loss, None

CASES = []
for case in os.environ["CASES"].split():
    if case == "tcp1":
        CASES.append(("TCP, 1 stream", [], [], []))
    elif case == "tcp4":
        CASES.append(("TCP, 4 streams", ["-P", "4"], ["-P", "4"], ["-N4"]))
    elif case == "udp":
        for r in os.environ["UDP_RATES"].split():
            CASES.append((f"UDP at {r}bit/s", ["-u", "-b", r, "-l", "1400"],
                          ["-u", "-b", r, "-l", "1400"], ["-u", f"-R{r}", "-l1400"]))

TOOLS = [("latscope", latscope), ("iperf3", iperf3), ("nuttcp", nuttcp)]
rows = []
try:
    for name, la, ia, na in CASES:
        got = {t: [] for t, _ in TOOLS}
        for i in range(ROUNDS):
            order = TOOLS if i % 2 == 0 else TOOLS[::-1]
            for t, f in order:
                rate, delivered, cpu, loss, jitter = f({"latscope": la, "iperf3": ia, "nuttcp": na}[t])
                got[t].append((rate, cpu / (delivered / 1e9) if delivered else float("inf"), loss, jitter))
        med = {t: tuple(statistics.median(x[k] for x in v) if v[0][k] is not None else None
                        for k in range(4)) for t, v in got.items()}
        rows.append((name, med))
finally:
    for p in servers.values():
        p.terminate()

load = os.getloadavg()
print(f"\nloopback, {SECS} s per run, median of {ROUNDS} rounds; load average "
      f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
print("rate = delivered (receiver's count); CPU = client + server, s per GB delivered\n")
print(f"{'case':<22} {'latscope':>22} {'iperf3':>22} {'nuttcp':>22} {'rate ls/ip3':>11} {'CPU ls/ip3':>10}")
cell = lambda m: f"{m[0]/1e9:6.2f}G {m[1]:5.2f}s" + (f" {m[2]:5.2f}%" if m[2] is not None else "       ")
summary = []
for name, m in rows:
    l, i, n = m["latscope"], m["iperf3"], m["nuttcp"]
    print(f"{name:<22} {cell(l):>22} {cell(i):>22} {cell(n):>22} {l[0]/i[0]:>11.3f} {l[1]/i[1]:>10.3f}")
    summary += [("stream", name, "rate", l[0], i[0], "iperf3", "higher"),
                ("stream", name, "CPU s/GB", l[1], i[1], "iperf3", "lower")]
udp = [(name, m) for name, m in rows if m["latscope"][3] is not None and m["iperf3"][3] is not None]
if udp:
    print(f"\n{'UDP jitter (RFC 3550)':<22} {'latscope ms':>12} {'iperf3 ms':>12}")
    for name, m in udp:
        print(f"{name:<22} {m['latscope'][3]:>12.4f} {m['iperf3'][3]:>12.4f}")
if os.environ.get("BENCH_SUMMARY"):
    with open(os.environ["BENCH_SUMMARY"], "a") as f:
        for s in summary:
            f.write("\t".join(str(x) for x in s) + "\n")
PY
