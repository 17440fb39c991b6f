# Promise: a worker on the CUDA kernels (--backend cuda-emu: the host emulation, no GPU needed)
# joins a pool like any other, announces its backend, and serves a request through the router
# with the same greedy text as a CPU worker on the same model.
. "$(dirname "$0")/lib.sh"

mkmodel "$T_DIR/m.gguf" --preset tiny --seed 2
start_router
start_cpu_worker c1 fast "$T_DIR/m.gguf"
"$WORKER_BIN" --backend cuda-emu --pool precise --id g1 --router "$ZMQ_EP" --model "$T_DIR/m.gguf" \
    --set worker.heartbeat_ms=200 --set worker.kv.num_blocks=256 >>"$T_DIR/worker-g1.log" 2>&1 &
T_PIDS+=("$!")
wait_ready 300
for w in c1 g1; do wait_worker "$w"; done
[ "$(workers_field g1 backend)" = cuda-emu ] || fail "g1 does not announce backend cuda-emu"
ok "a cuda-emu worker joins the precise pool"

req='"prompt":"one two three","max_tokens":8,"temperature":0'
gpu=$(post /v1/completions "{\"model\":\"precise\",$req}")
[ "$(status)" = 200 ] || fail "cuda-emu worker: status $(status): $gpu"
[ "$(header X-Sol-Pool)" = precise ] || fail "routed to $(header X-Sol-Pool), not precise"
cpu=$(post /v1/completions "{\"model\":\"fast\",$req}")
[ "$(status)" = 200 ] || fail "cpu worker: status $(status): $cpu"
a=$(echo "$gpu" | json_get 'd["choices"][0]["text"]')
b=$(echo "$cpu" | json_get 'd["choices"][0]["text"]')
[ -n "$a" ] && [ "$a" = "$b" ] || fail "cuda-emu text '$a' differs from the CPU's '$b'"
ok "the same greedy text from the cuda-emu and the CPU worker"
