# Promise: a worker started with --tensor-parallel-size 2 (two CPU ranks) serves through the router
# the same greedy text as an unsharded worker, also with prefix caching hits and with speculative
# decoding; a worker whose rank stops (the test-only fault SOL_TEST_TP_STALL) reports itself
# unhealthy within worker.tp_timeout_ms, the router fails its streams over with nothing lost and
# /admin/workers shows it unhealthy with the reason; shapes that do not divide fail at start.
. "$(dirname "$0")/lib.sh"

M=$T_DIR/m.gguf
mkmodel "$M" --dim 128 --heads 8 --kv-heads 2 --ffn 256 --vocab 512 --layers 2 --seed 11
mkmodel "$T_DIR/draft.gguf" --draft-of "$M" --layers 1

start_router
N=4
body() { echo "{\"model\":\"demo\",\"prompt\":\"sharded prompt number $1 with a shared prefix\",\"max_tokens\":40,\"temperature\":0${2:-}}"; }
texts() { # TAG: the N completions, one file each
    for i in $(seq $N); do
        post /v1/completions "$(body "$i")" | json_get 'd["choices"][0]["text"]' >"$T_DIR/$1.$i"
        [ "$(status)" = 200 ] || fail "$1: request $i got $(status): $(cat "$T_DIR/body")"
        json_get '(d["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)' \
            <"$T_DIR/body" >"$T_DIR/$1.$i.cached"
    done
}
same() { # TAG
    for i in $(seq $N); do
        cmp -s "$T_DIR/ref.$i" "$T_DIR/$1.$i" ||
            fail "$1: text $i differs:\n got  '$(cat "$T_DIR/$1.$i")'\n want '$(cat "$T_DIR/ref.$i")'"
    done
}
stop_worker() { kill -TERM "${W_PID[$1]}"; wait "${W_PID[$1]}" 2>/dev/null || true; }

start_worker wf fast 1 1000 # the router is ready once each pool has a worker
start_cpu_worker one precise "$M"
wait_ready
wait_worker one
texts ref
stop_worker one

start_cpu_worker tp2 precise "$M" --threads 2 --tensor-parallel-size 2
wait_worker tp2
texts tp2
same tp2
texts tp2again # the same prompts again: prefix cache hits on both ranks
same tp2again
for i in $(seq $N); do # each prompt was seen before: its whole KV blocks come from the cache
    c=$(cat "$T_DIR/tp2again.$i.cached")
    [ "$c" -gt 0 ] || fail "tp2again: request $i reported no cached prompt tokens (usage.prompt_tokens_details)"
done
grep -q "tensor parallel 2" "$T_DIR/worker-tp2.log" || fail "tp2 did not load sharded"
ok "--tensor-parallel-size 2: the text of the unsharded worker (and again with cached prompt tokens: $(cat "$T_DIR"/tp2again.*.cached | tr "\n" " "))"
stop_worker tp2

start_cpu_worker spec precise "$M" --tensor-parallel-size 2 --draft-model "$T_DIR/draft.gguf"
wait_worker spec
texts spec
same spec
spec_counter() { # NAME: the spec worker's counter from /metrics (0 when absent)
    curl -s "$BASE/metrics" | awk -v n="$1" '$1 ~ "^"n"\\{" && $1 ~ /worker="spec"/ {v = $2} END {print v + 0}'
}
for _ in $(seq 50); do # a heartbeat carries the counters
    [ "$(spec_counter sol_worker_spec_verify_steps_total)" != 0 ] && break
    sleep 0.1
done
steps=$(spec_counter sol_worker_spec_verify_steps_total)
drafted=$(spec_counter sol_worker_spec_draft_tokens_total)
[ "$steps" != 0 ] && [ "$drafted" != 0 ] ||
    fail "tp2 + draft: no speculation happened (verify steps $steps, draft tokens $drafted): $(curl -s "$BASE/metrics" | grep spec_ | head)"
ok "tensor parallel 2 with speculative decoding: the same greedy text ($steps verify steps, $drafted draft tokens)"

# A rank that stops at its 12th step: the worker turns unhealthy, its streams fail over to tp1.
SOL_TEST_TP_STALL=1:12 start_cpu_worker stall precise "$M" --tensor-parallel-size 2 \
    --set worker.tp_timeout_ms=400
wait_worker stall
start_cpu_worker back precise "$M"
wait_worker back
streams_match_refs "the stall" "$N"
wait_unhealthy stall
why=$(workers_field stall unhealthy_reason)
grep -q "rank 1.*tp_timeout_ms" <<<"$why" || fail "unhealthy_reason: '$why'"
grep -q "the worker is unhealthy" "$T_DIR/router.log" || fail "the router logged no failover"
[ "$(workers_field stall failed_over)" -gt 0 ] || fail "no stream of the stalled worker failed over"
ok "a stalled rank: the worker reports unhealthy ('$why'), $N streams complete unchanged"

out=$("$WORKER_BIN" --backend cpu --model "$M" --router "$ZMQ_EP" --tensor-parallel-size 3 2>&1) &&
    fail "tensor parallel 3 started"
grep -q "tensor_parallel 3 does not divide llama.attention.head_count 8" <<<"$out" ||
    fail "tensor parallel 3: $out"
out=$("$WORKER_BIN" --backend sim --router "$ZMQ_EP" --tensor-parallel-size 2 2>&1) &&
    fail "sim with tensor parallel started"
grep -q "worker.tensor_parallel" <<<"$out" || fail "sim tp: $out"
out=$("$WORKER_BIN" --backend cpu --model "$M" --router "$ZMQ_EP" --dtype float16 2>&1) &&
    fail "--dtype float16 started"
grep -q "worker.dtype" <<<"$out" || fail "--dtype: $out"
ok "refused at start: a head count tensor parallel 3 does not divide, sim + tp, --dtype float16"

cfg=$("$WORKER_BIN" --print-config --model "$M" --tensor-parallel-size 4 --max-model-len 512 \
    --max-num-seqs 8 --no-enable-prefix-caching --gpu-memory-utilization 0.5 --dtype auto) ||
    fail "--print-config with the vLLM flags failed"
for want in "tensor_parallel: 4" "max_model_len: 512" "max_num_seqs: 8" "prefix_caching: false" \
    "memory_fraction: 0.5" "dtype: auto" "tp_timeout_ms: 60000"; do
    grep -q "$want" <<<"$cfg" || fail "--print-config lacks '$want'"
done
cfg=$("$WORKER_BIN" --print-config --model "$M" --enable-prefix-caching)
grep -q "prefix_caching: true" <<<"$cfg" || fail "--enable-prefix-caching"
ok "vLLM-style flags set their keys (--print-config)"
