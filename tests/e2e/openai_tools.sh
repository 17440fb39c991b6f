# Promise: the official openai npm client's tool calling works against sol-router + a CPU worker
# (random weights, --chat-template qwen2.5): required and named calls always parse, the stream
# helper assembles tool_calls, a tool result round trip answers. Without node_modules:
# skip_test.
. "$(dirname "$0")/../integration/lib.sh"

E2E=$SOL_SOURCE/tests/e2e
if ! command -v node >/dev/null || [ ! -d "$E2E/node_modules/openai" ]; then
    skip_test "node or tests/e2e/node_modules/openai is missing (run scripts/setup)"
fi
M=$T_DIR/m.gguf
mkmodel "$M" --seed 29 --ctx 2048
start_router
start_worker wf fast 1 2000
start_cpu_worker w precise "$M" --chat-template qwen2.5
wait_ready
wait_worker w
(cd "$E2E" && timeout 300 node openai_tools.mjs "$BASE") || fail "openai client tool checks failed"
ok "openai npm client: tool calls plain, named, streamed (stream helper), round trip"
