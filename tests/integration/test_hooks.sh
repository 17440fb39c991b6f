#!/usr/bin/env bash
# Promise: every test-only environment setting the sources read (getenv("SOL_TEST_...")) is in
# worker/main.c's k_test_hooks table and listed in docs/configuration.md, and a worker started
# with one logs a warning naming it: a hook that changes the production path is never silent.
. "$(dirname "$0")/lib.sh"
S=$SOL_SOURCE
used=$(grep -rhoE 'getenv\("SOL_TEST_[A-Z_]+"\)' "$S"/worker "$S"/router "$S"/common "$S"/tools |
    sed -E 's/getenv\("(.*)"\)/\1/' | sort -u)
[ -n "$used" ] || fail "found no getenv(\"SOL_TEST_...\") at all: the scan is broken"
table=$(sed -n '/k_test_hooks\[\] = {/,/^};/p' "$S/worker/main.c")
for v in $used; do
    grep -q "\"$v\"" <<<"$table" || fail "$v is read by the sources but not in worker/main.c's k_test_hooks"
    grep -q "\`$v" "$S/docs/configuration.md" || fail "$v is not listed in docs/configuration.md"
done
ok "$(wc -w <<<"$used") test-only settings, each in k_test_hooks and in docs/configuration.md"
echo "nohost.example 127.0.0.1" >"$T_DIR/resolve"
start_router
SOL_TEST_RESOLVE_FILE=$T_DIR/resolve start_worker h1 fast 1 100
wait_worker h1
grep -q "test-only setting SOL_TEST_RESOLVE_FILE=$T_DIR/resolve is active" "$T_DIR/worker-h1.log" ||
    fail "no warning for SOL_TEST_RESOLVE_FILE: $(head -5 "$T_DIR/worker-h1.log")"
start_worker h2 fast 1 100
wait_worker h2
! grep -q "test-only setting" "$T_DIR/worker-h2.log" || fail "a worker without hooks warned of one"
ok "a worker with SOL_TEST_RESOLVE_FILE warns at start; one without does not"
