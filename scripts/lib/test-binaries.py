#!/usr/bin/env python3
"""Run the workspace's test binaries, built by `cargo test --no-run --message-format=json`, the
way scripts/test.sh wants them, and say where the time went.

  test-binaries.py CARGO_JSON LOG

- A test runs alone, with nothing else running, when it compares latency or rates with a bound
  or a peer tool measured in the same test (its code calls `timing_lock()`, the lab's serial
  marker: a neighbour loading the two cores would skew exactly those figures), or counts the
  host's latscope eBPF programs (`lsstk_programs`: another binary's `stack` or `diagnose` would
  change the count) — directly or through a function it calls, in its own sources or the lab's
  helpers (tests/lab/), found by a scan of the code without comments and literals. Such a
  binary's other tests join the pool (the binary runs twice, each time given its part's test
  names with `--exact`); a test the scan did not find in the binary's `--list` runs alone.
- Every other test binary (or part) runs its tests on LATSCOPE_TEST_THREADS threads (default 4: most of them
  wait on namespaces, timeouts and child processes, not on a CPU), and up to LATSCOPE_TEST_JOBS
  such binaries (default 2) run at once.
- Each binary runs from its package's directory, as `cargo test` runs it.
- The package's integration tests are one binary (tests/integration/main.rs, a module per
  subject): each module runs as a binary of its own, in its own process, under its name.
- When LATSCOPE_TEST_SERIAL_AFTER names files (separated by spaces), the binaries that run alone
  wait until they all exist (at most an hour): scripts/test.sh runs its fuzz stage and the doc
  tests beside the pool and writes one such file when each is over, so the timing tests
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
            # Read once: a second f.read() is empty, which had hidden every marker after the
            # first (stack_cleanup, which counts eBPF programs, ran in the pool beside diagnose
            # tests that load theirs).
            with open(p, encoding="utf-8", errors="replace") as f:
                text = f.read()
            if any(m in text for m in MARKERS):
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


def strip_rust(text):
    """Rust source with comments, string and char literals blanked (newlines kept), so that
    braces and names can be counted: what is left is code."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 258]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = len(re.match(r'r(#*)"', text[i:]).group(1))
            j = text.find('"' + "#" * hashes, i + 2 + hashes)
            i = n if j < 0 else j + 1 + hashes
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'" and i + 1 < n and text[i + 1] == "\\":
            j = text.find("'", i + 2)
            i = n if j < 0 else j + 1
        elif c == "'" and i + 2 < n and text[i + 2] == "'":
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")
MOD = re.compile(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{")
TEST_ATTR = re.compile(r"#\[(?:tokio::)?test\b[^\]]*\]\s*(?:#\[[^\]]*\]\s*)*(?:pub\s+)?(?:async\s+)?fn\s*$")


def close_brace(code, at):
    """Index just past the brace matching the `{` at `at`."""
    depth = 0
    for k in range(at, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k + 1
    return len(code)


def functions(code, module):
    """Every `fn` with a body in `code`: (name, qualified test name, body, is_test). Inline
    `mod x { .. }` blocks extend the module path."""
    mods = [(MOD.match(code, m.start()).group(1), m.end() - 1, close_brace(code, m.end() - 1))
            for m in MOD.finditer(code)]
    out = []
    for m in FN.finditer(code):
        name = m.group(1)
        brace, semi = code.find("{", m.end()), code.find(";", m.end())
        if brace < 0 or (0 <= semi < brace):
            continue  # a declaration without a body (trait method, extern)
        body = code[brace:close_brace(code, brace)]
        path = module + [mn for mn, a, b in mods if a < m.start() < b]
        is_test = bool(TEST_ATTR.search(code[max(0, m.start() - 400):m.start() + 2]))
        out.append((name, "::".join(path + [name]), body, is_test))
    return out


def module_of(path, root_dir):
    """A file's module path below its crate root's directory (`a/b.rs`, `a/b/mod.rs`: a::b)."""
    rel = os.path.relpath(path, root_dir)[:-3].split(os.sep)
    if rel[-1] in ("mod", "main", "lib"):
        rel = rel[:-1]
    return [p for p in rel if p]


def marked_tests(src_path, module=None):
    """For a test target: (its test names whose code — or a function it calls, transitively,
    in the target or in tests/lab/ — holds a marker, every test name found), or None when its
    sources cannot be read. With `module`, only that module's file (or folder) of the target
    and the lab: functions are matched by name, and another module's function of the same name
    must not mark this one's tests."""
    root_dir = os.path.dirname(src_path)
    if module is not None:
        folder = os.path.join(root_dir, module)
        own = rust_files(folder) if os.path.isdir(folder) else [os.path.join(root_dir, module + ".rs")]
    elif os.path.basename(src_path) in ("main.rs", "lib.rs"):
        own = rust_files(root_dir)
    else:
        own = [src_path]
    lab = os.path.join(os.path.dirname(root_dir) if os.path.basename(root_dir) != "tests" else root_dir, "lab")
    helpers = [p for p in rust_files(lab) if p not in own] if os.path.isdir(lab) else []
    fns = []
    try:
        for p in own + helpers:
            with open(p, encoding="utf-8", errors="replace") as f:
                code = strip_rust(f.read())
            # A test file is its crate's root; a test folder's files are modules of its main.rs.
            module = [] if p == src_path else module_of(p, root_dir) if p in own else ["lab"]
            fns += [(fn, p in own) for fn in functions(code, module)]
    except OSError:
        return None
    hot = {name for (name, _, body, _), _ in fns if any(mk in body for mk in MARKERS)}
    grew = True
    while grew:
        calls = lambda body: any(re.search(r"\b" + re.escape(h) + r"\s*[(:<!]", body) for h in hot)
        new = {name for (name, _, body, _), _ in fns if name not in hot and calls(body)}
        grew = bool(new)
        hot |= new
    tests = [(q, name in hot or any(mk in body for mk in MARKERS))
             for (name, q, body, is_test), own_file in fns if is_test and own_file]
    return {q for q, h in tests if h}, {q for q, _ in tests}


# Test binaries that hold many subjects, one module each: the package's integration tests are one
# binary (tests/integration/main.rs, so that the lab and the crates' generic code are compiled
# and linked once), and each of its modules runs here as its own binary did — its tests given by
# name, in a process of its own, labelled with the module's name, alone or in the pool by the
# same scan.
BY_MODULE = {"integration"}


def listed_tests(b):
    """The binary's test names (`--list`), or None when it cannot be listed."""
    try:
        out = subprocess.run([b["exe"], "--list", "--format=terse"], cwd=b["cwd"],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {ln[:-len(": test")] for ln in out.splitlines() if ln.endswith(": test")}


def parts(b, names, found):
    """A binary (or one module of it) as parts: its listed tests that hold a marker (or that the
    source scan could not find, counted as holding one) alone, the rest in the pool — each part
    runs the binary with its test names (`--exact`). All of them marked, or no scan: one part."""
    if found is None:
        return [b]
    marked, known = found
    alone = {t for t in names if t in marked or t not in known}
    if not names or alone == names:
        return [b]
    if not alone:
        return [dict(b, serial=False)]
    return [
        dict(b, label=f"{b['label']} [{len(names - alone)} shared]", serial=False, only=sorted(names - alone)),
        dict(b, label=f"{b['label']} [{len(alone)} alone]", only=sorted(alone)),
    ]


def split(b):
    """A binary that runs alone, as parts ([`parts`]); a binary of [`BY_MODULE`], one binary per
    module first. A binary that cannot be listed or read stays one part."""
    by_module = b["label"] in BY_MODULE
    found = marked_tests(b["src"]) if b["serial"] and not by_module else None
    if found is None and not by_module:
        return [b]
    names = listed_tests(b)
    if names is None:
        return [b]
    if not by_module:
        return parts(b, names, found)
    modules = {}
    for t in names:
        modules.setdefault(t.split("::")[0], set()).add(t)
    out = []
    for module, tests in sorted(modules.items()):
        part = dict(b, label=module, only=sorted(tests))
        # Alone or pooled by the module's own scan (its file and the lab's helpers).
        marked = marked_tests(b["src"], module) if b["serial"] else None
        if marked is not None and not marked[0]:
            part["serial"] = False
        out += parts(part, tests, marked)
    return out


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
            out += split(
                {
                    "label": label,
                    "exe": m["executable"],
                    "cwd": pkg,
                    "src": t["src_path"],
                    "serial": runs_alone(t["src_path"]),
                }
            )
    return out


def short(b, name):
    """A test's name without its module's, when the module is the binary's label."""
    module = b["label"].split(" [")[0] + "::"
    return name[len(module):] if name.startswith(module) else name


TIMED = re.compile(r"^test (.+?) \.\.\. (\w+) <([0-9.]+)s>")


def run(b, threads):
    n = 1 if b["serial"] else threads
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    env.pop("RUST_TEST_THREADS", None)
    cmd = [b["exe"], "-Z", "unstable-options", "--report-time", f"--test-threads={n}"]
    if b.get("only"):
        cmd += ["--exact", *b["only"]]
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
        ((s, f"{b['label']}: {short(b, name)}", r) for b in bins for (s, name, r) in b["tests"]),
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
