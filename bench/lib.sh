# bench/lib.sh: process harness shared by the benchmark scripts that start Sol processes —
# free loopback ports, a scratch folder, and a trap that stops every started process.
# Sourced (not run); callers append each background PID to `pids`.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
bench_harness() { # bench_harness NAME: sets dir (scratch) and pids, installs the cleanup trap
    dir=$(mktemp -d "${TMPDIR:-/tmp}/sol-bench-$1.XXXXXX")
    pids=()
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}
bench_cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
