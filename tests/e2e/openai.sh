# Promise: the official openai npm client works against sol-router + sim workers (completions and
# chat, plain and streamed with usage). Without node_modules: skip_test.
. "$(dirname "$0")/../integration/lib.sh"

E2E=$SOL_SOURCE/tests/e2e
if ! command -v node >/dev/null || [ ! -d "$E2E/node_modules/openai" ]; then
    skip_test "node or tests/e2e/node_modules/openai is missing (run scripts/setup)"
fi
start_router
start_worker wf fast 1 2000
start_worker wp precise 1 2000
wait_ready
(cd "$E2E" && timeout 60 node openai_client.mjs "$BASE") || fail "openai client checks failed"
ok "openai npm client: completions and chat, plain and streamed"
