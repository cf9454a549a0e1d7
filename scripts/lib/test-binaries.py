#!/usr/bin/env python3
"""Run the workspace's test binaries, built by `cargo test --no-run --message-format=json`, the
way scripts/test.sh wants them, and say where the time went.

  test-binaries.py CARGO_JSON LOG

- A binary runs alone, one test at a time, when its tests compare latency or rates with a bound
  or a peer tool measured in the same test (its sources call `timing_lock()`, the lab's serial
  marker: a neighbour loading the two cores would skew exactly those figures), or count the
  host's latscope eBPF programs (`lsstk_programs`: another binary's `stack` or `diagnose` would
  change the count).
- Every other binary runs its tests on LATSCOPE_TEST_THREADS threads (default 4: most of them
  wait on namespaces, timeouts and child processes, not on a CPU), and up to LATSCOPE_TEST_JOBS
  such binaries (default 2) run at once.
- Each binary runs from its package's directory, as `cargo test` runs it.
- When LATSCOPE_TEST_SERIAL_AFTER names files (separated by spaces), the binaries that run alone
  wait until they all exist (at most an hour): scripts/test.sh runs its fuzz stage, clippy and
  the doc tests beside the pool and writes one such file when each is over, so the timing tests
  have the cores to themselves. Those jobs run at the lowest priority;
  LATSCOPE_TEST_SERIAL_AFTER_PGID names their process groups, which get the normal priority back
  while the tests wait for them (nothing else is left to give way to).
- The binaries that share the pool start longest first, by the times the last run recorded
  (test-times.json beside LOG), so the long ones overlap the rest instead of ending the run.

Every binary's output goes to LOG (whole, one binary after another) and to stdout. At the end:
each binary's wall time, and the ten slowest tests (also kept in test-times.txt beside LOG) (libtest's `--report-time`: per-test
durations, unlocked for these already-built binaries with RUSTC_BOOTSTRAP=1 at run time only;
the code was compiled by the stable toolchain as usual). Exit status 1 when any binary failed.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

MARKERS = ("timing_lock(", "lsstk_programs")


def holds_marker(paths):
    """Whether any of the files holds one of the markers."""
    for p in paths:
        try:
            with open(p, encoding="utf-8", errors="replace") as f:
                if any(m in f.read() for m in MARKERS):
                    return True
        except OSError:
            pass
    return False


def rust_files(directory):
    """Every `.rs` file under `directory`."""
    return [
        os.path.join(d, f) for d, _, files in os.walk(directory) for f in files if f.endswith(".rs")
    ]


def runs_alone(src_path):
    """Whether a test target's sources hold one of the markers: the file itself, or for a
    `main.rs`/`lib.rs` root its whole directory (a crate's modules, a test's own folder)."""
    if os.path.basename(src_path) in ("main.rs", "lib.rs"):
        return holds_marker(rust_files(os.path.dirname(src_path)))
    return holds_marker([src_path])


def binaries(cargo_json):
    out = []
    with open(cargo_json, encoding="utf-8") as f:
        for line in f:
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if m.get("reason") != "compiler-artifact" or not m.get("executable"):
                continue
            if not m.get("profile", {}).get("test"):
                continue
            t = m["target"]
            pkg = os.path.dirname(m["manifest_path"])
            kind = t["kind"][0]
            label = t["name"] if kind == "test" else f"{t['name']} ({kind})"
            out.append(
                {
                    "label": label,
                    "exe": m["executable"],
                    "cwd": pkg,
                    "serial": runs_alone(t["src_path"]),
                }
            )
    return out


TIMED = re.compile(r"^test (.+?) \.\.\. (\w+) <([0-9.]+)s>")


def run(b, threads):
    n = 1 if b["serial"] else threads
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    env.pop("RUST_TEST_THREADS", None)
    cmd = [b["exe"], "-Z", "unstable-options", "--report-time", f"--test-threads={n}"]
    t0 = time.monotonic()
    p = subprocess.run(
        cmd,
        cwd=b["cwd"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    b["secs"] = time.monotonic() - t0
    b["rc"] = p.returncode
    b["threads"] = n
    b["output"] = p.stdout
    b["tests"] = [
        (float(m.group(3)), m.group(1), m.group(2))
        for m in map(TIMED.match, p.stdout.splitlines())
        if m
    ]
    return b


def wait_for(paths, limit_s=3600.0):
    """Wait until every file in `paths` (separated by spaces; empty: none) exists, at most
    `limit_s`; the seconds waited."""
    paths = (paths or "").split()
    if not paths:
        return 0.0
    missing = lambda: [p for p in paths if not os.path.exists(p)]
    if missing():
        for pgid in os.environ.get("LATSCOPE_TEST_SERIAL_AFTER_PGID", "").split():
            try:
                os.setpriority(os.PRIO_PGRP, int(pgid), 0)
                # Its session's autogroup too (scripts/test.sh lowers both).
                if os.path.exists(f"/proc/{int(pgid)}/autogroup"):
                    with open(f"/proc/{int(pgid)}/autogroup", "w") as f:
                        f.write("0")
            except (OSError, ValueError) as e:
                print(f"test-binaries: could not renice process group {pgid}: {e}", file=sys.stderr)
    t0 = time.monotonic()
    said = False
    while missing() and time.monotonic() - t0 < limit_s:
        if not said:
            print(f"\n== waiting for {' '.join(missing())} before the binaries that run alone", flush=True)
            said = True
        time.sleep(1)
    if missing():
        print(f"test-binaries: {' '.join(missing())} did not appear within {limit_s:.0f} s; going on", file=sys.stderr)
    return time.monotonic() - t0


def main():
    cargo_json, log_path = sys.argv[1], sys.argv[2]
    threads = int(os.environ.get("LATSCOPE_TEST_THREADS", "4"))
    jobs = int(os.environ.get("LATSCOPE_TEST_JOBS", "2"))
    bins = binaries(cargo_json)
    if not bins:
        print("test-binaries: no test binary in the build's messages", file=sys.stderr)
        return 1
    lock = threading.Lock()
    log = open(log_path, "w", encoding="utf-8")

    def report(b):
        with lock:
            head = f"\n== {b['label']} ({'alone, 1 thread' if b['serial'] else str(b['threads']) + ' threads'}): {b['secs']:.1f} s\n"
            for f in (sys.stdout, log):
                f.write(head + b["output"])
                f.flush()

    history_path = os.path.join(os.path.dirname(log_path) or ".", "test-times.json")
    try:
        with open(history_path, encoding="utf-8") as f:
            history = json.load(f)
    except (OSError, ValueError):
        history = {}
    t0 = time.monotonic()
    parallel = sorted(
        (b for b in bins if not b["serial"]), key=lambda b: -history.get(b["label"], 0.0)
    )
    serial = [b for b in bins if b["serial"]]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for b in pool.map(lambda b: run(b, threads), parallel):
            report(b)
    pool_wall = time.monotonic() - t0
    waited = wait_for(os.environ.get("LATSCOPE_TEST_SERIAL_AFTER"))
    for b in serial:
        report(run(b, threads))
    wall = time.monotonic() - t0
    log.close()

    lines = [
        f"== test binaries: {len(bins)} in {wall:.0f} s ({len(bins) - len(serial)} sharing the "
        f"cores: {pool_wall:.0f} s; then {waited:.0f} s waiting for the jobs beside them; "
        f"{len(serial)} alone with one thread: {sum(b['secs'] for b in serial):.0f} s)"
    ]
    for b in sorted(bins, key=lambda b: -b["secs"]):
        status = "ok" if b["rc"] == 0 else f"FAILED (exit {b['rc']})"
        lines.append(f"  {b['secs']:7.1f} s  {b['label']:<34} {b['threads']} thread(s)  {status}")
    tests = sorted(
        ((s, f"{b['label']}: {name}", r) for b in bins for (s, name, r) in b["tests"]),
        reverse=True,
    )
    lines.append("== the ten slowest tests")
    for s, name, r in tests[:10]:
        lines.append(f"  {s:7.1f} s  {name}{'' if r == 'ok' else ' (' + r + ')'}")
    summary = "\n".join(lines) + "\n"
    print("\n" + summary, end="")
    with open(history_path, "w", encoding="utf-8") as f:
        json.dump({b["label"]: round(b["secs"], 1) for b in bins}, f, indent=1)
    # scripts/test.sh prints it again at its very end.
    with open(os.path.join(os.path.dirname(log_path) or ".", "test-times.txt"), "w") as f:
        f.write(summary)
    return 0 if all(b["rc"] == 0 for b in bins) else 1


if __name__ == "__main__":
    sys.exit(main())
