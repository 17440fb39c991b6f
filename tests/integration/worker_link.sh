#!/usr/bin/env bash
# Promise: the real sol-worker binary says sim is a simulation, refuses cuda honestly (exit 2,
# naming worker.backend and the reason: no device and the driver's error, or no CUDA in this build),
# starts with --backend sim, drains on SIGTERM and exits 0. (The streaming drain against a peer
# ROUTER socket is unit/test_link's test_binary_sigterm_drains, which runs this same binary.)
set -euo pipefail
W="${SOL_BUILD:?}/worker/sol-worker"
fail() { echo "FAIL: $*" >&2; exit 1; }

help=$("$W" --help)
grep -qi "simulation" <<<"$help" || fail "--help does not call the sim backend a simulation"

set +e
out=$("$W" --backend cuda --model /nonexistent.gguf --router tcp://127.0.0.1:1 --pool fast 2>&1)
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "--backend cuda exited $rc, expected 2: $out"
grep -Eq "worker\.backend: backend cuda: (no NVIDIA driver: the driver.s library|no CUDA device: the driver|this build has no CUDA backend|the CUDA runtime .* was not found)" <<<"$out" ||
  fail "no clear cuda message: $out"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$W" --backend sim --router tcp://127.0.0.1:1 --pool fast --id it-worker --log-json 2>"$log" &
pid=$!
for _ in $(seq 50); do grep -q '"registering' "$log" 2>/dev/null && break; grep -q registering "$log" && break; sleep 0.1; done
grep -q "registering" "$log" || { kill -9 $pid; fail "worker never tried to register: $(cat "$log")"; }
head -1 "$log" | grep -q '^{' || fail "--log-json did not log JSON: $(head -1 "$log")"
kill -TERM $pid
set +e
wait $pid
rc=$?
set -e
[ "$rc" -eq 0 ] || fail "SIGTERM drain exited $rc, expected 0: $(cat "$log")"
grep -q "drained" "$log" || fail "no drain in the log: $(cat "$log")"
echo "worker_link: ok"
