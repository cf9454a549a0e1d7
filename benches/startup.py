#!/usr/bin/env python3
"""Start-up time of the shipped binary, against peers measured in the same run.

  python3 benches/startup.py [--runs N] [--binary PATH] [--image NAME]

- `latscope --version` (exec to exit) against `iperf3 --version`;
- `latscope serve` from exec until a TCP connect to its port succeeds (the first moment a client
  can be served) against `iperf3 -s` and `sockperf server --tcp`, each on a free loopback port;
- with --image (or when podman has localhost/latscope:VERSION): `podman run --rm IMAGE --version`
  and serve in the container until its port answers (host network): podman's own start-up
  dominates these, and there is no peer image to compare with.

The binary is stripped first (what the package and the image ship; default
target/release/latscope, built if missing). Prints the median and p90 of N runs (default 30)
and the ratios; with BENCH_SUMMARY set, appends the ratios as TSV lines (benches/all.sh).
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exec_to_exit(argv):
    """Seconds from spawn to exit of `argv` (output discarded)."""
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def spawn_to_ready(argv_for_port, deadline_s=10.0, stop=None):
    """Seconds from spawn until a TCP connect to the server's port succeeds, then stop it."""
    port = free_port()
    argv = argv_for_port(port)
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return time.perf_counter() - t0
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"{argv} exited with {proc.returncode} before listening")
                if time.perf_counter() - t0 > deadline_s:
                    raise RuntimeError(f"{argv} not listening within {deadline_s} s")
                time.sleep(0.0002)
    finally:
        if stop:
            stop(port)
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def remove_cgroups(name):
    """rmdir NAME and what is under it in every cgroup hierarchy (deepest first)."""
    with open("/proc/mounts") as f:
        tops = [l.split()[1] for l in f if l.split()[2] in ("cgroup", "cgroup2")]
    for top in tops:
        base = os.path.join(top, name)
        for _ in range(50):
            for d, _subdirs, _files in sorted(os.walk(base), key=lambda w: -w[0].count("/")):
                try:
                    os.rmdir(d)
                except OSError:
                    pass
            if not os.path.exists(base):
                break
            time.sleep(0.1)


def measure(label, fn, runs):
    fn()  # warm the page cache and the dynamic loader's
    samples = sorted(fn() for _ in range(runs))
    p50 = statistics.median(samples)
    p90 = samples[min(len(samples) - 1, int(0.9 * len(samples)))]
    print(f"  {label:<44} p50 {p50 * 1e3:8.2f} ms   p90 {p90 * 1e3:8.2f} ms")
    return p50


def summary(case, ls, peer, tool):
    print(f"  ratio latscope / {tool}: {ls / peer:.2f}")
    if os.environ.get("BENCH_SUMMARY"):
        with open(os.environ["BENCH_SUMMARY"], "a") as f:
            f.write(f"startup\t{case}\tms\t{ls * 1e3:.3f}\t{peer * 1e3:.3f}\t{tool}\tlower\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/latscope"))
    ap.add_argument("--image", default=None)
    a = ap.parse_args()
    if not os.path.exists(a.binary):
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    for tool in ("iperf3", "sockperf", "strip"):
        if not shutil.which(tool):
            sys.exit(f"startup: {tool} not found (scripts/setup.sh installs it)")
    tmp = tempfile.mkdtemp(prefix="latscope-startup.")
    try:
        ls = os.path.join(tmp, "latscope")
        subprocess.run(["strip", "-o", ls, a.binary], check=True)
        version = subprocess.run([ls, "--version"], capture_output=True, text=True).stdout.split()[1]
        load = os.getloadavg()
        print(f"start-up, {a.runs} runs each, {os.cpu_count()} CPUs, load average "
              f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; latscope {version} stripped "
              f"({os.path.getsize(ls) / 1048576:.1f} MiB)")

        print("== exec to exit: --version")
        v_ls = measure("latscope --version", lambda: exec_to_exit([ls, "--version"]), a.runs)
        v_ip = measure("iperf3 --version", lambda: exec_to_exit(["iperf3", "--version"]), a.runs)
        summary("--version, exec to exit", v_ls, v_ip, "iperf3")

        print("== exec to the first accepted TCP connect")
        s_ls = measure("latscope serve --bind 127.0.0.1 -p PORT",
                       lambda: spawn_to_ready(lambda p: [ls, "serve", "--bind", "127.0.0.1", "-p", str(p)]),
                       a.runs)
        s_ip = measure("iperf3 -s -B 127.0.0.1 -p PORT",
                       lambda: spawn_to_ready(lambda p: ["iperf3", "-s", "-B", "127.0.0.1", "-p", str(p)]),
                       a.runs)
        s_sp = measure("sockperf server --tcp -i 127.0.0.1 -p PORT",
                       lambda: spawn_to_ready(lambda p: ["sockperf", "server", "--tcp", "-i", "127.0.0.1",
                                                         "-p", str(p)]),
                       a.runs)
        summary("serve ready", s_ls, s_ip, "iperf3")
        summary("serve ready", s_ls, s_sp, "sockperf")

        image = a.image or f"localhost/latscope:{version}"
        have = shutil.which("podman") and subprocess.run(
            ["podman", "image", "exists", image]).returncode == 0
        if not have:
            print(f"== no image {image} (bash scripts/build-image.sh): container start-up not measured")
            return
        # The host's own limits (podman's default raises them, which a host without
        # CAP_SYS_RESOURCE refuses) and runc (see tests/integration/deploy_kits.rs).
        import resource
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
        # A cgroup parent of its own, removed at the end (podman's default one stays behind).
        parent = f"latscope-startup-{os.getpid()}"
        run = ["podman", "--runtime", "runc", "run", "--rm", "--network", "host", "--cap-drop", "all",
               "--cgroup-parent", "/" + parent,
               "--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]
        runs = max(5, a.runs // 3)
        print(f"== the image {image}, {runs} runs (podman's start-up included; no peer)")
        names = []

        def container(port):
            names.append(f"latscope-startup-{os.getpid()}-{port}")
            return run + ["--name", names[-1], image, "serve", "--bind", "127.0.0.1", "-p", str(port)]

        def stop(port):
            subprocess.run(["podman", "stop", "--time", "5", names[-1]],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        try:
            measure("podman run --rm IMAGE --version",
                    lambda: exec_to_exit(run + [image, "--version"]), runs)
            measure("podman run IMAGE serve: first accepted connect",
                    lambda: spawn_to_ready(container, deadline_s=30, stop=stop), runs)
        finally:
            remove_cgroups(parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
