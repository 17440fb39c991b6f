# Promise: a worker whose two tensor-parallel ranks run the CUDA backend (--backend cuda-emu: the
# host emulation, its NCCL communicator included) serves the unsharded CPU worker's greedy text;
# when one rank's device hangs inside a collective (the emulation's test-only fault
# SOL_TEST_CUDA_EMU_FAULT), its waits time out at worker.tp_timeout_ms instead of hanging, every
# rank aborts its communicator, the worker reports itself unhealthy naming the stuck rank, and the
# router fails its streams over to another worker with the same text, token for token.
# ctest-timeout: 900
. "$(dirname "$0")/lib.sh"

M=$T_DIR/m.gguf
mkmodel "$M" --dim 128 --heads 8 --kv-heads 2 --ffn 256 --vocab 512 --layers 2 --seed 11

start_router
N=4
# Short streams: every kernel of the emulation runs on the host (a step can take a second here).
body() { echo "{\"model\":\"demo\",\"prompt\":\"sharded prompt number $1 on two devices\",\"max_tokens\":24,\"temperature\":0${2:-}}"; }
start_emu_worker() { # ID ARGS...: a cuda-emu worker with two ranks in the pool precise
    local id=$1
    shift
    "$WORKER_BIN" --backend cuda-emu --pool precise --id "$id" --router "$ZMQ_EP" --model "$M" \
        --tensor-parallel-size 2 --set worker.heartbeat_ms=200 --set worker.kv.num_blocks=256 \
        "$@" >>"$T_DIR/worker-$id.log" 2>&1 &
    W_PID[$id]=$!
    T_PIDS+=("$!")
}
stop_worker() { kill -TERM "${W_PID[$1]}"; wait "${W_PID[$1]}" 2>/dev/null || true; }

start_worker wf fast 1 1000 # the router is ready once each pool has a worker
start_cpu_worker one precise "$M"
wait_ready
wait_worker one
for i in $(seq $N); do
    post /v1/completions "$(body "$i")" | json_get 'd["choices"][0]["text"]' >"$T_DIR/ref.$i"
    [ "$(status)" = 200 ] || fail "ref: request $i got $(status): $(cat "$T_DIR/body")"
done
stop_worker one

start_emu_worker tp2
wait_worker tp2
for i in 1 2; do
    got=$(post /v1/completions "$(body "$i")" | json_get 'd["choices"][0]["text"]')
    [ "$(status)" = 200 ] || fail "tp2: request $i got $(status): $(cat "$T_DIR/body")"
    [ "$got" = "$(cat "$T_DIR/ref.$i")" ] || fail "tp2: text $i differs:\n got  '$got'\n want '$(cat "$T_DIR/ref.$i")'"
done
grep -q "tensor parallel 2" "$T_DIR/worker-tp2.log" || fail "tp2 did not load sharded"
ok "two cuda-emu ranks: the text of the unsharded CPU worker"
stop_worker tp2

# Device 1 hangs at its 33rd collective (two layers, two all-reduces each: the 9th step, within
# the streams below); a backup worker takes the streams over. The deadline leaves an emulated
# step (host kernels on a loaded machine) time to finish: only the hang may miss it.
SOL_TEST_CUDA_EMU_FAULT=1:33:hang start_emu_worker hang --set worker.tp_timeout_ms=8000
wait_worker hang
start_cpu_worker back precise "$M"
wait_worker back
streams_match_refs "the hang" "$N"
wait_unhealthy hang
why=$(workers_field hang unhealthy_reason)
grep -q "rank 1.*stuck.*tp_timeout_ms" <<<"$why" || fail "unhealthy_reason: '$why'"
[ "$(workers_field hang failed_over)" -gt 0 ] || fail "no stream of the hung worker failed over"
for r in 0 1; do # every rank said what it saw
    grep -q "tensor-parallel rank $r failed step" "$T_DIR/worker-hang.log" ||
        fail "rank $r did not report the abort: $(grep -i 'rank' "$T_DIR/worker-hang.log" | tail -5)"
done
ok "a hung device: the worker reports unhealthy ('$why'), every rank aborted, $N streams complete unchanged"
