# Promise: a mixture-of-experts model (qwen3moe: 8 experts, top-2; and gpt-oss) serves through the router in
# the fast pool with everything a dense one has: continuous batching (four streams at once), the
# same greedy text with tensor parallelism 2 (every expert split by columns) and again with
# prefix-cache hits, with speculative decoding from a dense draft (qwen3, the same vocabulary),
# on the CUDA backend (cuda-emu, one rank and two), and across a worker killed mid-stream
# (the streams move to another worker, token-exactly).
# ctest-timeout: 900
. "$(dirname "$0")/lib.sh"

M=$T_DIR/moe.gguf D=$T_DIR/draft.gguf
mkmodel "$M" --arch qwen3moe --dim 128 --heads 4 --kv-heads 2 --ffn 256 --experts 8 \
    --experts-used 2 --expert-ffn 128 --vocab 512 --layers 2 --seed 11
mkmodel "$D" --arch qwen3 --dim 64 --heads 4 --kv-heads 2 --ffn 128 --vocab 512 --layers 1 --seed 3

start_router
N=4
body() { echo "{\"model\":\"fast\",\"prompt\":\"expert prompt number $1 with a shared prefix\",\"max_tokens\":${MAXT:-32},\"temperature\":0${2:-}}"; }
texts() { # TAG [COUNT]: the completions (four at once: one batch), one file each
    local i pids=()
    for i in $(seq "${2:-$N}"); do
        curl -s "$BASE/v1/completions" -d "$(body "$i")" >"$T_DIR/$1.$i.json" &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i"; done
    for i in $(seq "${2:-$N}"); do
        json_get 'd["choices"][0]["text"]' <"$T_DIR/$1.$i.json" >"$T_DIR/$1.$i" ||
            fail "$1: request $i: $(cat "$T_DIR/$1.$i.json")"
        json_get '(d["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)' \
            <"$T_DIR/$1.$i.json" >"$T_DIR/$1.$i.cached"
    done
}
same() { # TAG [COUNT]
    for i in $(seq "${2:-$N}"); do
        cmp -s "$T_DIR/ref.$i" "$T_DIR/$1.$i" ||
            fail "$1: text $i differs:\n got  '$(cat "$T_DIR/$1.$i")'\n want '$(cat "$T_DIR/ref.$i")'"
    done
}
stop_worker() { kill -TERM "${W_PID[$1]}"; wait "${W_PID[$1]}" 2>/dev/null || true; }

start_worker wp precise 1 1000 # the router is ready once each pool has a worker
start_cpu_worker one fast "$M" --set worker.scheduler.max_num_seqs=4
wait_ready
wait_worker one
texts ref
grep -q "8 experts, 2 used per token" "$T_DIR/worker-one.log" || fail "the worker did not say it loaded a mixture: $(grep model "$T_DIR/worker-one.log" | head -2)"
for i in $(seq $N); do [ -s "$T_DIR/ref.$i" ] || fail "ref: text $i is empty"; done
ok "qwen3moe served in the fast pool: four streams at once"
stop_worker one

start_cpu_worker tp2 fast "$M" --threads 2 --tensor-parallel-size 2
wait_worker tp2
texts tp2
same tp2
texts tp2again
same tp2again
for i in $(seq $N); do
    [ "$(cat "$T_DIR/tp2again.$i.cached")" -gt 0 ] || fail "tp2again: request $i reported no cached prompt tokens"
done
ok "tensor parallel 2: the unsharded worker's text, and again from the prefix cache"
stop_worker tp2

start_cpu_worker spec fast "$M" --draft-model "$D"
wait_worker spec
texts spec
same spec
steps=$(curl -s "$BASE/metrics" | awk '$1 ~ /^sol_worker_spec_verify_steps_total\{/ && $1 ~ /worker="spec"/ {v = $2} END {print v + 0}')
for _ in $(seq 50); do
    [ "$steps" != 0 ] && break
    sleep 0.1
    steps=$(curl -s "$BASE/metrics" | awk '$1 ~ /^sol_worker_spec_verify_steps_total\{/ && $1 ~ /worker="spec"/ {v = $2} END {print v + 0}')
done
[ "$steps" != 0 ] || fail "spec: no verify step was counted"
ok "speculative decoding with a dense draft: the same greedy text ($steps verify steps)"
stop_worker spec

# cuda-emu: every kernel on the host (~2 tokens/s here), so a smaller mixture (4 experts, top-2)
# and one short stream each, against a CPU worker's text of the same file.
E=$T_DIR/emu.gguf
mkmodel "$E" --arch qwen3moe --dim 64 --heads 4 --kv-heads 2 --ffn 128 --experts 4 \
    --experts-used 2 --expert-ffn 64 --vocab 512 --layers 2 --seed 5
start_emu() { # ID TP
    "$WORKER_BIN" --backend cuda-emu --pool fast --id "$1" --router "$ZMQ_EP" --model "$E" \
        --tensor-parallel-size "$2" --set worker.heartbeat_ms=200 --set worker.kv.num_blocks=256 \
        >>"$T_DIR/worker-$1.log" 2>&1 &
    W_PID[$1]=$!
    T_PIDS+=("$!")
}
emu_body='{"model":"fast","prompt":"experts on a device","max_tokens":8,"temperature":0}'
emu_vs_cpu() { # TAG: $E on a CPU worker, then on cuda-emu with one rank and two: $want each
    start_cpu_worker "cpu_$1" fast "$E"
    wait_worker "cpu_$1"
    want=$(post /v1/completions "$emu_body" | json_get 'd["choices"][0]["text"]')
    [ "$(status)" = 200 ] && [ -n "$want" ] || fail "cpu_$1: $(status): $(cat "$T_DIR/body")"
    stop_worker "cpu_$1"
    for tp in 1 2; do
        start_emu "$1$tp" $tp
        wait_worker "$1$tp"
        got=$(post /v1/completions "$emu_body" | json_get 'd["choices"][0]["text"]')
        [ "$got" = "$want" ] || fail "$1: cuda-emu tp $tp: got '$got', want '$want' ($(status))"
        stop_worker "$1$tp"
    done
}
emu_vs_cpu emu
ok "cuda-emu, one rank and two: the CPU worker's text ('$want')"

# gpt-oss (8 experts, top-2; biases, attention sinks, a window of 8 positions on every other
# layer, which the prompts and completions pass, YaRN): four streams at once, the same text with
# tensor parallelism 2, and on cuda-emu (a smaller file, its experts in MXFP4, one rank and two)
# the CPU's text.
O=$T_DIR/oss.gguf OE=$T_DIR/oss-emu.gguf
mkmodel "$O" --arch gpt-oss --dim 128 --heads 4 --kv-heads 2 --ffn 128 --experts 8 \
    --experts-used 2 --sliding-window 8 --yarn 4,64 --vocab 512 --layers 2 --seed 5
mkmodel "$OE.f16" --arch gpt-oss --dim 64 --heads 4 --kv-heads 2 --ffn 64 --experts 4 \
    --experts-used 2 --sliding-window 4 --yarn 4,64 --vocab 512 --layers 2 --seed 5 --type f16
"$SOL_BUILD/tools/sol-quantize" "$OE.f16" "$OE" --type mxfp4_moe --quiet ||
    fail "sol-quantize --type mxfp4_moe failed"
same_as() { # TAG REF
    for i in $(seq $N); do
        cmp -s "$T_DIR/$2.$i" "$T_DIR/$1.$i" ||
            fail "$1: text $i differs:\n got  '$(cat "$T_DIR/$1.$i")'\n want '$(cat "$T_DIR/$2.$i")'"
    done
}
start_cpu_worker oss fast "$O" --set worker.scheduler.max_num_seqs=4
wait_worker oss
texts oref
grep -q "8 experts, 2 used per token" "$T_DIR/worker-oss.log" || fail "oss: not loaded as a mixture"
stop_worker oss
start_cpu_worker osstp fast "$O" --threads 2 --tensor-parallel-size 2
wait_worker osstp
texts osstp
same_as osstp oref
stop_worker osstp
E=$OE
emu_vs_cpu oemu
ok "gpt-oss: four streams at once, tensor parallel 2's text, and cuda-emu (one rank and two) the CPU's ('$want')"

# A worker killed mid-stream: it stops before its 6th step (the test-only fault
# SOL_TEST_ENGINE_STALL, so no stream has ended), then dies; its streams finish on the other
# worker, token-exactly.
SOL_TEST_ENGINE_STALL=6 start_cpu_worker a fast "$M" --set worker.scheduler.max_num_seqs=4
wait_worker a
pids=()
for i in $(seq $N); do
    curl -sN "$BASE/v1/completions" -d "$(body "$i" ',"stream":true')" >"$T_DIR/stream.$i" &
    pids+=($!)
done
# a holds all N (the only worker of the pool), and one stream has begun: the stall may come before
# a stream that arrived late has had a step, so not every stream need have begun
for _ in $(seq 300); do
    [ "$(workers_field a inflight)" = "$N" ] && break
    sleep 0.02
done
wait_inflight a stream 1
moved=$(workers_field a inflight)
start_cpu_worker b fast "$M" --set worker.scheduler.max_num_seqs=4
wait_worker b
kill -KILL "${W_PID[a]}"
wait "${W_PID[a]}" 2>/dev/null || true
for p in "${pids[@]}"; do wait "$p" || fail "a stream's curl failed"; done
for i in $(seq $N); do
    got=$(sse_text "$T_DIR/stream.$i")
    [ "$got" = "$(cat "$T_DIR/ref.$i")" ] || fail "stream $i differs after the kill:\n got  '$got'\n want '$(cat "$T_DIR/ref.$i")'"
done
grep -q "worker a (pool fast) is dead.*failing over $moved requests" "$T_DIR/router.log" ||
    fail "the router did not fail a's $moved streams over: $(grep -m3 'worker a' "$T_DIR/router.log")"
ok "a worker killed with $moved streams begun: every stream ends with the reference text"
