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

# The KV pool is sized from the device's free memory after weights and activations; when one
# max_model_len sequence does not fit, start-up fails with the figures (a pretend 12 MiB device).
mkmodel "$T_DIR/long.gguf" --preset tiny --ctx 32768 --seed 2
out=$(SOL_CUDA_EMU_MEMORY_MB=12 timeout 60 "$WORKER_BIN" --backend cuda-emu --pool p \
    --router "$ZMQ_EP" --model "$T_DIR/long.gguf" --set worker.kv.max_model_len=32768 2>&1) &&
    fail "a KV pool too small for max_model_len started"
grep -q "KV pool: 0.90 of .* MiB free device memory (after weights and workspace)" <<<"$out" ||
    fail "no device-memory figures in: $out"
grep -q "needs 2048 blocks, 8.0 MiB" <<<"$out" || fail "the needed size is not named: $out"
out=$(SOL_CUDA_EMU_MEMORY_MB=12 timeout 60 "$WORKER_BIN" --backend cuda-emu --pool p \
    --router "$ZMQ_EP" --model "$T_DIR/long.gguf" --set worker.kv.max_model_len=32768 \
    --gpu-memory-utilization 0.1 2>&1) && fail "--gpu-memory-utilization 0.1 started"
grep -q "KV pool: 0.10 of" <<<"$out" || fail "--gpu-memory-utilization is not the KV share: $out"
ok "a device too small for one max_model_len sequence is a start-up error with the figures"

# Device choice: the emulation has devices 0..7 (one per tensor-parallel rank); worker.device is a
# cuda-only key.
out=$("$WORKER_BIN" --backend cuda-emu --device 8 --pool p --router "$ZMQ_EP" \
    --model "$T_DIR/m.gguf" 2>&1) && fail "--device 8 on cuda-emu started"
grep -q "worker.device" <<<"$out" || fail "--device 8: $out"
out=$("$WORKER_BIN" --backend cpu --device 1 --pool p --router "$ZMQ_EP" \
    --model "$T_DIR/m.gguf" 2>&1) && fail "--device 1 on cpu started"
grep -q "worker.device.*applies to backend cuda" <<<"$out" || fail "--device with cpu: $out"
out=$("$WORKER_BIN" --backend cuda-emu --device 7 --pool p --router "$ZMQ_EP" --model "$T_DIR/m.gguf" \
    --tensor-parallel-size 2 2>&1) && fail "devices 7..8 started"
grep -q "worker.device.*emulation has 0..7" <<<"$out" || fail "tensor_parallel: $out"
ok "--device and tensor_parallel are refused where they cannot apply"
