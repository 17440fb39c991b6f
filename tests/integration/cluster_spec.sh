# Promise: a sol-worker with speculative decoding (draft model or n-gram) serves through the
# router the same greedy completions, token for token, as one without it, and its speculative
# counters (verify steps, drafted/accepted/emitted tokens, time) reach the router's /metrics.
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

# The worker's speculative counters reach the router's /metrics with its next heartbeat (200 ms).
metric() { # metric NAME WORKER: the sample's value, "" when absent
    echo "$scrape" | sed -n "s/^$1{pool=\"[a-z]*\",worker=\"$2\"} //p" | sed -n 1p
}
steps=""
for _ in $(seq 100); do
    scrape=$(curl -s "$BASE/metrics")
    steps=$(metric sol_worker_spec_verify_steps_total f1)
    [ -n "$steps" ] && [ "$steps" != 0 ] && break
    sleep 0.1
done
[ -n "$steps" ] && [ "$steps" -gt 0 ] || fail "sol_worker_spec_verify_steps_total for f1 is '$steps'"
drafted=$(metric sol_worker_spec_draft_tokens_total f1)
accepted=$(metric sol_worker_spec_accepted_tokens_total f1)
emitted=$(metric sol_worker_spec_emitted_tokens_total f1)
# greedy with a draft derived from the target: some drafts pass, never more than were made
[ "$accepted" -gt 0 ] && [ "$accepted" -le "$drafted" ] \
    || fail "accepted $accepted of $drafted drafted tokens"
# each verify step emits its accepted drafts plus one token; 80 completion tokens were served
[ "$emitted" = $((accepted + steps)) ] && [ "$emitted" -le 80 ] \
    || fail "$emitted tokens emitted by $steps verify steps that accepted $accepted"
grep -q "^vllm:spec_decode_num_drafts_total{.*worker=\"f1\"} $steps\$" <<<"$scrape" \
    || fail "vllm:spec_decode_num_drafts_total for f1 differs from $steps"
for s in draft verify; do
    python3 -c "import sys; sys.exit(not float(sys.argv[1]) > 0)" \
        "$(metric sol_worker_spec_${s}_seconds_total f1)" || fail "sol_worker_spec_${s}_seconds_total"
done
[ "$(metric sol_worker_spec_verify_steps_total p1)" = 0 ] || fail "p1 reports verify steps"
ok "speculative counters on /metrics: $steps verify steps, $accepted of $drafted drafts accepted"
