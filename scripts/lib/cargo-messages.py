#!/usr/bin/env python3
"""Read `cargo --message-format=json` on stdin; keep every message for test-binaries.py, show the
compiler's diagnostics as cargo would, and count the lint findings in the workspace's own crates.

  cargo test --no-run --message-format=json ... | cargo-messages.py MESSAGES_OUT LINTS_OUT

scripts/test.sh builds the release test binaries with clippy-driver as the compiler of the
workspace's own crates (RUSTC_WORKSPACE_WRAPPER, what `cargo clippy` sets for its check build),
so that one build is both the lint pass and the test build. Lints stay warnings there — a lint
must not keep the tests from running — and this counts them: LINTS_OUT gets one line, the number
of distinct warnings and errors reported for the workspace's crates (a crate compiled twice, as
a library and as its unit tests, reports the same warning twice: counted once). Dependencies'
warnings are capped by cargo and never counted.
"""

import json
import sys


def main():
    messages_out, lints_out = sys.argv[1], sys.argv[2]
    seen = set()
    with open(messages_out, "w", encoding="utf-8") as out:
        for line in sys.stdin:
            out.write(line)
            try:
                m = json.loads(line)
            except ValueError:
                # Not a JSON message (a build script's stray output): show it as it came.
                sys.stdout.write(line)
                continue
            if m.get("reason") != "compiler-message":
                continue
            msg = m.get("message") or {}
            rendered = msg.get("rendered") or ""
            sys.stdout.write(rendered)
            # Workspace members are path dependencies; registry crates are capped by cargo.
            local = str(m.get("package_id", "")).startswith("path+file://")
            # "N warnings emitted" summaries have no span: not findings of their own.
            if local and msg.get("level") in ("warning", "error") and msg.get("spans"):
                seen.add(rendered)
    sys.stdout.flush()
    with open(lints_out, "w", encoding="utf-8") as f:
        f.write(f"{len(seen)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
