#!/usr/bin/env bash
# Promise: the real sol-router/sol-worker reject bad configs with exit 2 and file:line:column on
# stderr, --help exits 0, and --print-config output loads back to the same configuration.
set -u
: "${SOL_BUILD:?set SOL_BUILD to the build directory}"
: "${SOL_SOURCE:=$(cd "$(dirname "$0")/../.." && pwd)}"
ROUTER="$SOL_BUILD/router/sol-router"
WORKER="$SOL_BUILD/worker/sol-worker"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect RC PATTERN CMD...: exit status RC and stderr matching the grep -E PATTERN.
expect() {
    local want_rc=$1 pattern=$2
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" -ne "$want_rc" ]; then
        fail "$* -> exit $rc, expected $want_rc; stderr: $(cat "$tmp/err")"
    elif [ -n "$pattern" ] && ! grep -qE -- "$pattern" "$tmp/err"; then
        fail "$* -> stderr does not match /$pattern/: $(cat "$tmp/err")"
    fi
}

# bad_config NAME YAML PATTERN BINARY [FLAGS...]: the binary must refuse the file with exit 2.
bad_config() {
    local name=$1 yaml=$2 pattern=$3 bin=$4
    shift 4
    printf '%b' "$yaml" >"$tmp/$name.yaml"
    expect 2 "^$(basename "$bin"): $tmp/$name.yaml:$pattern" "$bin" --config "$tmp/$name.yaml" "$@"
}

bad_config type 'worker:\n  kv:\n    block_size: abc\n' \
    '3:17: worker\.kv\.block_size: expected an integer, found "abc"' "$WORKER" --backend sim
bad_config unknown 'worker:\n  kv: {block_sise: 16}\n' \
    '2:8: worker\.kv\.block_sise: unknown key \(did you mean "block_size"\?\)' "$WORKER"
bad_config range 'worker:\n  speculative: {k: 99}\n' \
    '2:20: worker\.speculative\.k: 99 is out of range' "$WORKER" --backend sim
bad_config dup 'router:\n  http: {listen: "127.0.0.1:1"}\n  http: {listen: "127.0.0.1:2"}\n' \
    '3:3: router\.http: duplicate key' "$ROUTER"
bad_config syntax 'router:\n  routing: [a\n' '3:1: YAML syntax error' "$ROUTER"
bad_config rule 'router:\n  routing:\n    rules:\n      - {if: {tag: x}}\n' \
    '4:9: router\.routing\.rules\[0\]: missing required key "pool"' "$ROUTER"
bad_config model 'worker:\n  pool: fast\n' '1:1: worker\.model: required' "$WORKER"
bad_config listen 'router:\n  http: {listen: nowhere}\n' '2:18: router\.http\.listen' "$ROUTER"

expect 2 "nope\.yaml: cannot open" "$ROUTER" --config "$tmp/nope.yaml"
expect 2 "unknown flag --lisen \(did you mean --listen\?\)" "$ROUTER" --lisen 1.2.3.4:5
expect 2 "--threads x: worker\.threads: expected an integer" "$WORKER" --threads x
expect 2 "--backend gpu: worker\.backend: expected one of cpu, cuda, sim" "$WORKER" --backend gpu
expect 2 "worker\.model: required" "$WORKER"
expect 2 "worker\.threads: 2 applies to backend cpu" "$WORKER" --backend cuda-emu --threads 2 --model m.gguf

# A good configuration is accepted (serving itself is covered by the cluster tests).
expect 0 "" "$ROUTER" --config "$SOL_SOURCE/deploy/config/local.yaml" --print-config
expect 0 "" "$WORKER" --config "$SOL_SOURCE/deploy/config/local.yaml" --backend sim --print-config

for bin in "$ROUTER" "$WORKER"; do
    "$bin" --help >"$tmp/help" 2>&1 || fail "$bin --help exited non-zero"
    for flag in --config --print-config --set --log-level --log-json --help; do
        grep -q -- "$flag" "$tmp/help" || fail "$bin --help does not list $flag"
    done
done
for flag in --listen --bind; do
    grep -q -- "$flag" <<<"$("$ROUTER" --help)" || fail "sol-router --help does not list $flag"
done
for flag in --router --pool --model --draft-model --threads --backend --no-mmap --mlock --id; do
    grep -q -- "$flag" <<<"$("$WORKER" --help)" || fail "sol-worker --help does not list $flag"
done

# --print-config shows the flags' values, and its output loads back to the same configuration.
for cfgfile in "$SOL_SOURCE"/deploy/config/*.yaml; do
    "$WORKER" --config "$cfgfile" --model /m/x.gguf --threads 3 --router tcp://h1:1 --router tcp://h2:2 \
        --print-config >"$tmp/w1.yaml" 2>"$tmp/err" || fail "worker --print-config $cfgfile: $(cat "$tmp/err")"
    grep -q '^  threads: 3$' "$tmp/w1.yaml" || fail "worker --print-config lacks the --threads value"
    grep -q 'router: \["tcp://h1:1", "tcp://h2:2"\]' "$tmp/w1.yaml" || fail "worker --router list not printed"
    "$WORKER" --config "$tmp/w1.yaml" --print-config >"$tmp/w2.yaml" 2>"$tmp/err" ||
        fail "printed worker config does not load: $(cat "$tmp/err")"
    diff <(tail -n +2 "$tmp/w1.yaml") <(tail -n +2 "$tmp/w2.yaml") >/dev/null ||
        fail "worker print -> load -> print differs for $cfgfile"
    "$ROUTER" --config "$cfgfile" --listen 0.0.0.0:9 --print-config >"$tmp/r1.yaml" 2>"$tmp/err" ||
        fail "router --print-config $cfgfile: $(cat "$tmp/err")"
    grep -q 'listen: "0.0.0.0:9"' "$tmp/r1.yaml" || fail "router --print-config lacks the --listen value"
    "$ROUTER" --config "$tmp/r1.yaml" --print-config >"$tmp/r2.yaml" 2>"$tmp/err" ||
        fail "printed router config does not load: $(cat "$tmp/err")"
    diff <(tail -n +2 "$tmp/r1.yaml") <(tail -n +2 "$tmp/r2.yaml") >/dev/null ||
        fail "router print -> load -> print differs for $cfgfile"
done

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "config_errors: all checks passed"
