# Promise: a sol-worker with speculative decoding (draft model or n-gram) serves through the
# router the same greedy completions, token for token, as one without it.
. "$(dirname "$0")/lib.sh"

SHAPE=(--preset tiny --layers 4 --depth-decay 0.5 --seed 5)
mkmodel "$T_DIR/target.gguf" "${SHAPE[@]}" --type f32
"$SOL_BUILD/tools/sol-mkmodel" --draft-of "$T_DIR/target.gguf" --layers 1 -o "$T_DIR/draft.gguf" \
    >/dev/null 2>&1 || fail "cannot write the draft model"

start_router
start_cpu_worker p1 precise "$T_DIR/target.gguf" --set worker.kv.max_model_len=256
start_cpu_worker f1 fast "$T_DIR/target.gguf" --set worker.kv.max_model_len=256 \
    --set worker.speculative.method=draft --draft-model "$T_DIR/draft.gguf" \
    --set worker.speculative.k=5 --set worker.speculative.adaptive=false
wait_ready 300
for w in p1 f1; do wait_worker "$w"; done
grep -q "speculative decoding: draft-model, k 5" "$T_DIR/worker-f1.log" \
    || fail "worker f1 did not start speculative decoding: $(tail -3 "$T_DIR/worker-f1.log")"

for prompt in "Once upon a time there was" "a b c a b c a b c"; do
    body() { echo "{\"model\":\"$1\",\"prompt\":\"$prompt\",\"max_tokens\":40,\"temperature\":0}"; }
    plain=$(post /v1/completions "$(body precise)")
    [ "$(status)" = 200 ] || fail "precise: status $(status): $plain"
    spec=$(post /v1/completions "$(body fast)")
    [ "$(status)" = 200 ] || fail "fast: status $(status): $spec"
    [ "$(header X-Sol-Pool)" = fast ] || fail "served by pool '$(header X-Sol-Pool)', not fast"
    a=$(echo "$plain" | json_get 'd["choices"][0]["text"]')
    b=$(echo "$spec" | json_get 'd["choices"][0]["text"]')
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "greedy text differs with speculation: '$a' vs '$b'"
    [ "$(echo "$spec" | json_get 'd["usage"]["completion_tokens"]')" = 40 ] || fail "usage: $spec"
done
ok "greedy completions with speculative decoding equal those without"
