#!/usr/bin/env python3
"""Where a cargo build's time went, from the report `cargo build --timings` writes.

  cargo-timings.py [REPORT]      default target/cargo-timings/cargo-timing.html

Prints the build's units grouped by what they are (the dependencies, the build scripts, the
workspace's libraries and binaries, its unit-test harnesses, its integration tests), each
group's unit count and compile seconds added up, then the twenty longest units. The seconds
are each unit's own wall time from its start to its end: on two cores two units overlap, so a
group's sum is CPU time more than wall time. Fresh units (not compiled in this build) have no
time and are left out.
"""

import json
import sys

WORKSPACE_PREFIX = "latscope"


def units(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = text.find("UNIT_DATA = ")
    if start < 0:
        raise SystemExit(f"cargo-timings: {path}: no UNIT_DATA (not a cargo --timings report?)")
    start = text.index("[", start)
    # The array ends at the first "];" after it (the JSON holds no such pair inside strings).
    end = text.index("];", start) + 1
    return json.loads(text[start:end])


def group(u):
    # "target" is "" for a library, ' build-script' / ' build-script (run)', ' NAME "lib" (test)'
    # for a unit-test harness, ' NAME "test" (test)' for an integration test, ' NAME "bin"', …
    target = u.get("target", "")
    if "build-script" in target:
        return "build scripts (compiled and run)"
    if not u["name"].startswith(WORKSPACE_PREFIX):
        return "dependencies"
    if '"test"' in target:
        return "our integration tests (tests/*.rs)"
    if "(test)" in target:
        return "our unit-test harnesses (cfg(test) libraries and binaries)"
    return "our libraries, binaries and examples"


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "target/cargo-timings/cargo-timing.html"
    data = [u for u in units(path) if u.get("duration", 0) > 0]
    if not data:
        print("cargo-timings: nothing was compiled")
        return
    wall = max(u["start"] + u["duration"] for u in data)
    groups = {}
    for u in data:
        n, s = groups.get(group(u), (0, 0.0))
        groups[group(u)] = (n + 1, s + u["duration"])
    total = sum(s for _, s in groups.values())
    print(f"== the build: {len(data)} units, {wall:.0f} s wall, {total:.0f} s of unit time")
    for name, (n, s) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"  {s:7.0f} s  {100 * s / total:3.0f}%  {n:4d} units  {name}")
    print("== the twenty longest units")
    for u in sorted(data, key=lambda u: -u["duration"])[:20]:
        what = f"{u['name']} {u.get('target', '').strip()}".strip()
        print(f"  {u['duration']:7.1f} s  {what}")


if __name__ == "__main__":
    main()
