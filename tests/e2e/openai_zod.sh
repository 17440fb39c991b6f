# Promise: the official openai npm client's zod helpers work unmodified against Sol, on a model
# with a real vocabulary (llama.cpp's ggml-vocab-qwen2.gguf, 151,936 tokens, random weights made
# at test time) and the Qwen chat template with tools: parse + zodResponseFormat (integers,
# bounded numbers, enums, arrays, nested and nullable fields, a regex, uuid, an email with a
# maximum length, date-time), runTools with zodFunction (forced over two rounds, and under
# tool_choice auto), the stream helper with tools, tool_choice none. The vocabulary takes Qwen2.5's <tool_call> and
# </tool_call> (user-defined tokens 151657-8, padding in Qwen2's). Without node_modules (openai,
# zod) or the bundle: skip_test.
. "$(dirname "$0")/../integration/lib.sh"
. "$SOL_SOURCE/tests/peer/vocab.sh"

E2E=$SOL_SOURCE/tests/e2e
if ! command -v node >/dev/null || [ ! -d "$E2E/node_modules/openai" ] || [ ! -d "$E2E/node_modules/zod" ]; then
    skip_test "node or tests/e2e/node_modules/{openai,zod} is missing (run scripts/setup)"
fi
peer_vocab qwen2 || skip_test "the llama.cpp bundle in tests/peer is missing (run scripts/setup)"
M=$T_DIR/qwen-vocab.gguf
mkmodel "$M" --arch qwen2 --vocab-from "$SOL_BUILD/peer-data/ggml-vocab-qwen2.gguf" --seed 31 \
    --ctx 4096 --type f16 --user-token 151657='<tool_call>' --user-token 151658='</tool_call>'
start_router
start_worker wf fast 1 2000
start_cpu_worker w precise "$M" --chat-template qwen2.5
wait_ready
wait_worker w
(cd "$E2E" && timeout 600 node openai_zod.mjs "$BASE") || fail "openai zod helper checks failed"
ok "openai npm client's zod helpers at a 151,936-token vocabulary: parse, runTools, stream, none"
