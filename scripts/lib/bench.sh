# Shared by the benchmark and soak scripts (sourced, not run): a temp directory and background
# processes that are cleaned up however the script ends, and the agent benchmarks' loopback
# targets and configuration.

# bench_tmp NAME: make $TMP (/tmp/latscope-NAME.XXXXXX) and an EXIT trap that kills every pid in
# $PIDS and removes $TMP.
bench_tmp() {
    TMP=$(mktemp -d "/tmp/latscope-$1.XXXXXX")
    PIDS=()
    trap bench_cleanup EXIT
}

bench_cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$TMP"
}

# accept_targets BASE N: N listening TCP ports on 127.0.0.1 from BASE that accept and close
# (one python3 process, added to $PIDS).
accept_targets() {
    python3 - "$1" "$2" >/dev/null 2>&1 <<'PY' &
import selectors, socket, sys
base, n = int(sys.argv[1]), int(sys.argv[2])
sel = selectors.DefaultSelector()
for p in range(base, base + n):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", p)); s.listen(1024); s.setblocking(False)
    sel.register(s, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        try:
            c, _ = key.fileobj.accept(); c.close()
        except OSError:
            pass
PY
    PIDS+=($!)
    sleep 1
}

# agent_targets_config BASE N KIND [EXTRA_TOML_FILE]: an agent configuration on stdout with one
# target per port, measured with KIND every second.
agent_targets_config() {
    echo 'listen = "127.0.0.1:0"'
    if [ -n "${4:-}" ]; then cat "$4"; fi
    for i in $(seq 0 $(($2 - 1))); do
        printf '[[target]]\nname = "t%d"\naddress = "127.0.0.1"\nmeasure = [{ kind = "%s", port = %d, interval = "1s", timeout = "1s" }]\n' \
            "$i" "$3" $(($1 + i))
    done
}
