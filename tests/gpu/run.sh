#!/usr/bin/env bash
# tests/gpu/run.sh [BUNDLE]: what Sol checks and measures on a GPU lease, from the bundle that
# tests/gpu/bundle.sh made (default ./gpu-bundle). It never builds, needs no package (bash,
# coreutils, python3 and the CUDA tools of the GPU machine) and ends within 7 minutes: each step
# runs under `timeout`, capped by what is left of a 400-second budget, and a step the budget
# cannot reach is reported SKIP, never silently left out. docs/gpu-run.md gives the device call.
#
# Steps, in order of what a lease must not miss:
#   preflight    the GPU, where the CUDA libraries were found, the glibc mode, the backend loads
#   sass         registers/spills of every kernel; the decode kernels' SASS (sass.txt.gz)
#   op_test      test_cuda_backend on the GPU against the CPU backend
#   models       whole models, GPU against CPU: greedy ids and logits (compare.py), the prefill
#                GEMM, CUDA graphs against --enforce-eager, PDL against SOL_CUDA_PDL=0
#   membw        the device's copy bandwidth (the roofline of the timing table)
#   bench_*      decode tok/s at batch 1, 8, 64 and prefill tok/s (F16 tiles, and the int8
#                GEMMs with SOL_CUDA_GEMM=int8), with the roofline share, for
#                the 1b preset and an 8B-shaped stack (dim 4096, FFN 14336, 32/8 heads, 8 layers)
#                in F16, Q4_0 and Q4_K_M; Q4_0 1b again with --enforce-eager and without PDL
#   kernels      per-kernel-family GPU time of decode steps (ncu's gpu__time_duration)
#   memcheck, racecheck   compute-sanitizer over the op test
#   backend_ops  test_backend_ops: every op, every backend variant present
#   tp*          with 2 or more GPUs: NCCL tensor parallelism, ids and logits against TP 1
# Models are random-weight files made on the GPU machine in /tmp while the first steps run.
# $OUT (the device tool's folder; default /tmp/sol-gpu) gets 4 files: summary.txt (a few hundred
# lines at most), logs.tar.gz (every step's log), sass.txt.gz, kernels.csv.gz. Exit 0 when every
# step passed.
# A rehearsal without a GPU: SOL_GPU_REHEARSE=1 runs every step on cuda-emu with small shapes in
# place of the 1b and 8B models, and reports the GPU-only tools (ncu, compute-sanitizer) SKIP.
set -uo pipefail
BUNDLE=$(cd "${1:-gpu-bundle}" 2>/dev/null && pwd) || { echo "no bundle at ${1:-gpu-bundle}: make one with tests/gpu/bundle.sh" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/sol-gpu}
W=${SOL_GPU_WORK:-/tmp/sol-gpu-work}
BUDGET=${SOL_GPU_BUDGET:-400}
REHEARSE=${SOL_GPU_REHEARSE:-0}
BE=cuda CTX=512 STEPS=32 BATCHES=1,8,64 PREFILL=2048 MEMBW_MIB=2048
[ "$REHEARSE" = 1 ] && BE=cuda-emu CTX=4 STEPS=1 BATCHES=1,2 PREFILL=8 MEMBW_MIB=16 \
  BUDGET=${SOL_GPU_BUDGET:-1200} # the emulation is ~1000x slower: longer limits, same steps
mkdir -p "$OUT" "$W/logs" "$W/models"
S=$OUT/summary.txt
: >"$S"
DEADLINE=$((SECONDS + BUDGET))
status=0 rehearsal_skips=0
say() { echo "$*" | tee -a "$S"; }

# A bundled binary: directly (its RPATH finds the bundled libraries), or through the bundled
# glibc's loader where the host's glibc is older than the binaries need.
LOADER=""
bin() {
  local b=$1; shift
  if [ -n "$LOADER" ]; then
    "$LOADER" --library-path "$BUNDLE/lib/glibc:$BUNDLE/lib" "$BUNDLE/bin/$b" "$@"
  else
    "$BUNDLE/bin/$b" "$@"
  fi
}

# step NAME LIMIT COMMAND...: runs it under timeout (LIMIT, or what the budget has left), its
# output in logs/NAME.log; one line in the summary, with the log's tail on failure.
step() {
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 15 ]; then say "SKIP $name: the ${BUDGET}-second budget is spent"; status=1; return 1; fi
  [ "$REHEARSE" = 1 ] && limit=$((limit * 3))
  [ "$limit" -le "$left" ] || limit=$left
  local t0=$SECONDS rc=0
  # through bash, so the exported functions (bin, wait_for, ...) can be the command
  timeout -k 5 "$limit" bash -c '"$@"' step "$@" >"$W/logs/$name.log" 2>&1 || rc=$?
  if [ $rc = 0 ]; then
    say "ok   $name ($((SECONDS - t0)) s)"
  else
    [ $rc = 124 ] && say "FAIL $name: still running after $limit s (timeout)" ||
      say "FAIL $name: exit $rc after $((SECONDS - t0)) s"
    tail -8 "$W/logs/$name.log" | sed 's/^/     | /' | tee -a "$S"
    status=1
  fi
  return $rc
}
# The argv of a bundled binary, for tools that start it themselves (ncu, compute-sanitizer).
binv() {
  if [ -n "$LOADER" ]; then echo "$LOADER --library-path $BUNDLE/lib/glibc:$BUNDLE/lib $BUNDLE/bin/$1"; else echo "$BUNDLE/bin/$1"; fi
}
# gpu_tool NAME: 0 when the GPU-only tool can run; a rehearsal reports SKIP instead.
gpu_tool() {
  if [ "$REHEARSE" = 1 ]; then say "SKIP $1: a rehearsal (no GPU)"; rehearsal_skips=$((rehearsal_skips + 1)); return 1; fi
  return 0
}
export -f bin binv
export BUNDLE LOADER BE CTX STEPS MEMBW_MIB

finish() {
  [ -z "${models_pid:-}" ] || kill "$models_pid" 2>/dev/null # a model still being made
  tar -C "$W" -czf "$OUT/logs.tar.gz" logs 2>/dev/null
  say ""
  local r='every step passed'
  [ "$rehearsal_skips" = 0 ] || r="every step that a rehearsal can run passed; $rehearsal_skips GPU-only steps skipped"
  say "result: $([ $status = 0 ] && echo "$r" || echo 'FAILURES or SKIPS above') ($SECONDS s)"
  exit $status
}

say "# Sol on a GPU, $(date -u +%Y-%m-%dT%H:%MZ); bundle: $(head -1 "$BUNDLE/MANIFEST")"
say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"

[ -d /usr/local/cuda/bin ] && PATH=$PATH:/usr/local/cuda/bin # cuobjdump, compute-sanitizer
# A carried folder may lose its modes on the way: the binaries and the loader must run.
chmod u+x "$BUNDLE"/bin/* "$BUNDLE"/lib/glibc/ld-linux-x86-64.so.2 2>/dev/null || true
# --- preflight: libraries, glibc, the backend loads ---------------------------------------------
export SOL_CUDA_MODULE=$BUNDLE/lib/sol/libsol-cuda.so
wheels=$(timeout 30 python3 -c 'import glob, sys; print(":".join(sorted(glob.glob(sys.prefix + "/lib/python3*/site-packages/nvidia/*/lib"))))' 2>/dev/null)
export SOL_CUDA_LIB_PATH=${SOL_CUDA_LIB_PATH:-$wheels}
for l in libcuda.so.1 libcudart.so.13 libcublasLt.so.13 libnccl.so.2; do
  where=$(for d in ${SOL_CUDA_LIB_PATH//:/ } /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu; do
    [ -e "$d/$l" ] && { echo "$d"; break; }; done)
  say "lib $l: ${where:-not in SOL_CUDA_LIB_PATH or the driver folders (the loader also tries the system path)}"
done
if ! "$BUNDLE/bin/sol-generate" --help >/dev/null 2>"$W/logs/glibc.log"; then
  LOADER=$BUNDLE/lib/glibc/ld-linux-x86-64.so.2
  say "glibc: the host's is older than the bundle needs ($(grep -o 'GLIBC_[0-9.]*' "$W/logs/glibc.log" | head -1)): running through the bundled glibc"
else
  say "glibc: the host's ($(ldd --version 2>/dev/null | head -1 | grep -o '[0-9.]*$'))"
fi
export LOADER

M=$W/models
# Each model appears whole: written as NAME.part.gguf, then renamed.
mk() { bin sol-mkmodel -o "$M/$1.part.gguf" "${@:2}" >>"$W/logs/models_made.log" 2>&1 && mv "$M/$1.part.gguf" "$M/$1.gguf"; }
q() { bin sol-quantize "$M/$1.gguf" "$M/$2.part.gguf" --type "$3" --quiet >>"$W/logs/models_made.log" 2>&1 && mv "$M/$2.part.gguf" "$M/$2.gguf"; }
make_models() { # in the background, in the order the steps need them
  set -e
  mk tiny-f32 --preset tiny --seed 3
  mk tiny-q8 --preset tiny --seed 4 --type q8_0
  mk qwen3-f16 --arch qwen3 --dim 256 --heads 4 --kv-heads 2 --head-dim 64 --ffn 512 --layers 2 \
    --vocab 600 --ctx 128 --seed 5 --type f16
  q qwen3-f16 qwen3-q4k q4_k_m
  local s1=(--preset 1b)
  local s8=(--dim 4096 --ffn 14336 --heads 32 --kv-heads 8 --layers 8 --vocab 32000 --ctx 4096)
  if [ "$REHEARSE" = 1 ]; then
    s1=(--preset tiny)
    s8=(--dim 256 --ffn 512 --heads 8 --kv-heads 2 --layers 1 --vocab 600 --ctx 256)
  fi
  mk 1b-q4_0 "${s1[@]}" --type q4_0
  mk 1b-f16 "${s1[@]}" --type f16
  q 1b-f16 1b-q4_k_m q4_k_m
  mk 8b-q4_0 "${s8[@]}" --type q4_0
  mk 8b-f16 "${s8[@]}" --type f16
  q 8b-f16 8b-q4_k_m q4_k_m
}
make_models &
models_pid=$!
wait_for() { # a model of make_models, within the step's own timeout
  while [ ! -e "$M/$1.gguf" ]; do
    kill -0 $models_pid 2>/dev/null || { echo "making the models failed: $(tail -3 "$W/logs/models_made.log")"; return 1; }
    sleep 1
  done
}
export -f wait_for mk q
export M W models_pid REHEARSE

[ "$REHEARSE" = 1 ] && say "REHEARSAL on cuda-emu with small shapes: no figure below is a GPU's"
step preflight 30 bin sol-generate --help || finish
cat >"$W/probe.sh" <<'EOF'
wait_for tiny-f32 && bin sol-generate -m "$M/tiny-f32.gguf" --backend $BE --prompt-tokens 1,2,3 -n 2 --tokens
EOF
step backend_loads 60 bash "$W/probe.sh" || finish

# --- SASS: resources of every kernel, the decode kernels' code ----------------------------------
sass() {
  set -o pipefail
  cuobjdump --dump-resource-usage "$SOL_CUDA_MODULE" | grep -E 'Function|REG' |
    paste - - | sed -E 's/.*Function ([^ :]*).*REG:([0-9]+) STACK:([0-9]+) SHARED:([0-9]+) LOCAL:([0-9]+).*/\1 REG \2 STACK \3 SHARED \4 LOCAL \5/' |
    sort -u >"$W/logs/resources.txt"
  cuobjdump --dump-sass "$SOL_CUDA_MODULE" | gzip >"$OUT/sass.txt.gz" &&
    [ -s "$W/logs/resources.txt" ] && grep -q k_gemv <(zcat "$OUT/sass.txt.gz")
}
export -f sass
export OUT
if gpu_tool sass && step sass 60 bash -c sass; then
  say "kernels with local memory (spills) or a stack, per cuobjdump:"
  awk '($9 > 0 || $5 > 0) && n++ < 20 {print "     " $0}' "$W/logs/resources.txt" | tee -a "$S"
  [ -s "$W/logs/resources.txt" ] && say "     ($(wc -l <"$W/logs/resources.txt") kernel entries; the others have none)"
fi

# --- correctness -------------------------------------------------------------------------------
step op_test 120 env SOL_TEST_CUDA_SPEC=$BE bash -c 'bin test_cuda_backend'
cat >"$W/models.sh" <<'EOF'
# GPU against CPU: the limits are those of tests/integration/cuda_emu_model.sh (derivations there)
set -u
wait_for qwen3-q4k || exit 1
P=1,15,27,300,42,7,99 L=$(seq -s, 3 3 120) fail=0
C="python3 $HERE/compare.py"
for m in tiny-f32 tiny-q8 qwen3-q4k; do
  for be in cpu $BE; do
    bin sol-generate -m "$M/$m.gguf" --backend $be --prompt-tokens $P -n 24 --temp 0 --tokens \
      --logits "$W/$m.$be.json" >"$W/$m.$be.ids" || exit 1
  done
  need=0; [ $m = tiny-f32 ] && need=24
  $C ids "$W/$m.$BE.ids" "$W/$m.cpu.ids" --need $need --name "$m ids" || fail=1
  $C logits "$W/$m.$BE.json" "$W/$m.cpu.json" --limit 1e-3 --name "$m" || fail=1
  bin sol-generate -m "$M/$m.gguf" --backend $BE --enforce-eager --prompt-tokens $P -n 24 \
    --temp 0 --tokens --logits "$W/$m.eager.json" >"$W/$m.eager.ids" || exit 1
  $C ids "$W/$m.$BE.ids" "$W/$m.eager.ids" --name "$m graphs vs eager" || fail=1
  # programmatic dependent launch (sm_90) must not change a bit: the same ids without it
  SOL_CUDA_PDL=0 bin sol-generate -m "$M/$m.gguf" --backend $BE --prompt-tokens $P -n 24 \
    --temp 0 --tokens >"$W/$m.nopdl.ids" || exit 1
  $C ids "$W/$m.$BE.ids" "$W/$m.nopdl.ids" --name "$m PDL vs none" || fail=1
done
for m in tiny-q8 qwen3-q4k; do
  for be in cpu $BE; do
    bin sol-generate -m "$M/$m.gguf" --backend $be --prompt-tokens $L -n 1 --temp 0 --tokens \
      --logits "$W/$m.long.$be.json" >/dev/null || exit 1
  done
  $C logits "$W/$m.long.$BE.json" "$W/$m.long.cpu.json" --limit 2e-2 --name "$m 40-token prompt (GEMM)" || fail=1
  # the int8 kernels (k_mmq.cu): the CPU's Q8 activations and integer dots
  SOL_CUDA_GEMM=int8 bin sol-generate -m "$M/$m.gguf" --backend $BE --prompt-tokens $L -n 1 \
    --temp 0 --tokens --logits "$W/$m.long.int8.json" >/dev/null || exit 1
  $C logits "$W/$m.long.int8.json" "$W/$m.long.cpu.json" --limit 2e-2 --name "$m 40-token prompt (int8 GEMM)" || fail=1
done
exit $fail
EOF
export HERE
step models 120 bash "$W/models.sh"
grep -E '^(ok|FAIL)' "$W/logs/models.log" | sed 's/^/     /' | tee -a "$S"

# --- timing ------------------------------------------------------------------------------------
say ""
say "## Timing (random-weight models: speed only). bench_decode --batch $BATCHES --ctx $CTX --steps $STEPS --prefill $PREFILL; 4 warm-up steps and one warm-up prefill before each timing"
step membw 60 bash -c 'wait_for 1b-q4_0 && bin bench_decode -m "$M/1b-q4_0.gguf" --backend $BE --batch 1 --ctx 8 --steps 1 --prefill 0 --measure-membw $MEMBW_MIB'
bw=$(sed -n 's/.*write): \([0-9.]*\) GB\/s/\1/p' "$W/logs/membw.log")
say "device copy bandwidth ($MEMBW_MIB MiB buffers, read + write): ${bw:-?} GB/s"
bench() { # NAME MODEL [flags]: one bench_decode run, its result lines into the summary
  local name=$1 model=$2; shift 2
  step "$name" 120 bash -c 'wait_for "$0" && bin bench_decode -m "$M/$0.gguf" --backend $BE "$@"' \
    "$model" --ctx $CTX --steps $STEPS ${bw:+--membw "$bw"} "$@"
  [ -f "$W/logs/$name.log" ] &&
    grep -E '^(model|decode|prefill|cuda graphs)' "$W/logs/$name.log" | sed 's/^/     /' | tee -a "$S"
}
for m in 1b-q4_0 1b-f16 1b-q4_k_m 8b-q4_0 8b-f16 8b-q4_k_m; do
  bench "bench_$m" "$m" --batch $BATCHES --prefill $PREFILL
done
# the greedy token on the device (--greedy: 8 bytes a row come back, not the logits), as the
# engine runs plain greedy requests and as gpu_model.py's lean-q charges it
for m in 8b-q4_0 8b-q4_k_m; do
  bench "bench_${m}_greedy" "$m" --greedy --batch 1 --prefill 0
done
# the same without next_input's fusions (SOL_CUDA_NEXT_INPUT=0: the norms and quantizes as their
# own launches, 292 a step where the fused step has 164): what they save, beside the model's
# prediction of both (gpu_model.py --param next_input=0)
for m in 8b-q4_0 8b-q4_k_m; do
  SOL_CUDA_NEXT_INPUT=0 bench "bench_${m}_greedy_nonext" "$m" --greedy --batch 1 --prefill 0
done
bench bench_1b-q4_0_eager 1b-q4_0 --enforce-eager --batch $BATCHES --prefill 0
SOL_CUDA_PDL=0 bench bench_1b-q4_0_nopdl 1b-q4_0 --batch 1,8 --prefill 0 # what PDL saves
# split-K off (SOL_CUDA_SPLIT_K=0): the batch-64 step of the 8B Q4_K_M file with every GEMM whole,
# beside the run above (gpu_model.py --param split_k=0 predicts it)
SOL_CUDA_SPLIT_K=0 bench bench_8b-q4_k_m_nosplit 8b-q4_k_m --batch 64 --prefill 0
# the int8 GEMMs (SOL_CUDA_GEMM=int8) against the F16 tiles above: prefill and batch 64, 8B shapes
for m in 8b-q4_0 8b-q4_k_m; do
  SOL_CUDA_GEMM=int8 bench "bench_${m}_int8" "$m" --batch 64 --prefill $PREFILL
done

# The performance model (bench/gpu_model.py) beside the measurement: its prediction for each
# 8B-shaped file at batch 1, from the file's own shapes and types and the copy bandwidth measured
# above, for today's launch structure (unfused) and for the design it is checked against.
MODEL_PY=$HERE/gpu_model.py; [ -f "$MODEL_PY" ] || MODEL_PY=$HERE/../../bench/gpu_model.py
gpu_model_lines() {
  for m in 8b-q4_0 8b-f16 8b-q4_k_m; do
    [ -f "$M/$m.gguf" ] || continue
    for d in unfused default nonext; do
      python3 "$MODEL_PY" --gguf "$M/$m.gguf" ${bw:+--copy-bw "$bw"} --batch 1 --context $CTX \
        $([ $d = unfused ] && echo --unfused) $([ $d = nonext ] && echo --param next_input=0) --json |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print("model %s %s%s: %.1f tok/s predicted at batch 1 (%.0f%% of the copy roofline, %d launches)" % (sys.argv[1], d["design"], sys.argv[2], d["tok_s"], 100 * d["roof_copy"], d["nodes"]))' "$m" "$([ $d = nonext ] && echo ' next_input=0')" || return 1
    done
    grep -m1 -E '^decode batch +1,' "$W/logs/bench_$m.log" 2>/dev/null | sed "s/^/measured $m: /"
    grep -m1 -E '^decode batch +1,' "$W/logs/bench_${m}_greedy.log" 2>/dev/null |
      sed "s/^/measured $m: /"
    grep -m1 -E '^decode batch +1,' "$W/logs/bench_${m}_greedy_nonext.log" 2>/dev/null |
      sed "s/^/measured $m (SOL_CUDA_NEXT_INPUT=0): /"
  done
  # batch 64 on the F16 tiles with and without split-K (SOL_CUDA_SPLIT_K=0), predicted and run
  local q=8b-q4_k_m
  [ -f "$M/$q.gguf" ] || return 0
  for sk in 1 0; do
    python3 "$MODEL_PY" --gguf "$M/$q.gguf" ${bw:+--copy-bw "$bw"} --batch 64 --context $CTX \
      --param built_tc=1 --param split_k=$sk --json |
      python3 -c 'import json,sys; d=json.load(sys.stdin); print("model %s batch 64 split_k=%s: %.1f tok/s predicted (%d launches)" % (sys.argv[1], sys.argv[2], d["tok_s"], d["nodes"]))' "$q" "$sk" || return 1
  done
  grep -m1 -E '^decode batch +64,' "$W/logs/bench_$q.log" 2>/dev/null | sed "s/^/measured $q: /"
  grep -m1 -E '^decode batch +64,' "$W/logs/bench_${q}_nosplit.log" 2>/dev/null |
    sed "s/^/measured $q (SOL_CUDA_SPLIT_K=0): /"
}
export -f gpu_model_lines; export MODEL_PY CTX M W bw
step gpu_model 60 bash -c gpu_model_lines && sed 's/^/     /' "$W/logs/gpu_model.log" | tee -a "$S"
bench bench_1b-q4_0_batch_invariant 1b-q4_0 --batch-invariant --batch 1 --prefill $PREFILL

# Per-kernel-family time of decode steps (eager, so each kernel is its own launch): ncu reads
# the GPU's own duration of 600 kernel launches of batch-8 steps, after 2000 (the prefill, the
# warm-up steps and the first timed ones; 32 steps leave plenty past 2600 launches).
kernels() {
  wait_for 1b-q4_0 || return 1
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 2000 \
    --launch-count 600 $(binv bench_decode) -m "$M/1b-q4_0.gguf" --backend cuda \
    --enforce-eager --batch 8 --ctx 512 --steps 32 --prefill 0 >"$W/kernels.csv" &&
    gzip -c "$W/kernels.csv" >"$OUT/kernels.csv.gz" &&
    python3 "$HERE/compare.py" kernels "$W/kernels.csv"
}
export -f kernels
gpu_tool kernels && step kernels 120 bash -c kernels && sed 's/^/     /' "$W/logs/kernels.log" | grep -v '^     ==' | tail -12 | tee -a "$S"

# --- sanitizers and the whole op suite ---------------------------------------------------------
say ""
gpu_tool memcheck && step memcheck 150 env SOL_TEST_CUDA_SPEC=cuda compute-sanitizer --tool memcheck \
  --error-exitcode 9 $(binv test_cuda_backend)
gpu_tool racecheck && step racecheck 150 env SOL_TEST_CUDA_SPEC=cuda compute-sanitizer --tool racecheck \
  --error-exitcode 9 $(binv test_cuda_backend)
step backend_ops 120 bash -c 'bin test_backend_ops'

# Tensor parallelism over NCCL, where the machine has 2 or more GPUs: TP ids against TP 1.
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 2 ]; then
  say "tensor parallelism: ${ngpu:-0} GPU(s); NCCL ranks need 2 or more and were not run here"
else
  cat >"$W/tp.sh" <<'EOF'
set -u
wait_for 1b-q4_0 || exit 1
gen() { bin sol-generate -m "$M/1b-q4_0.gguf" --backend cuda --tensor-parallel-size $1 \
  --prompt-tokens 1,15043,3186,29892,590 -n 16 --temp 0 --tokens --logits "$W/tp$1.json" >"$W/tp$1.ids"; }
gen 1 || exit 1
gen $TP || exit 1
python3 "$HERE/compare.py" ids "$W/tp$TP.ids" "$W/tp1.ids" --name "TP $TP vs TP 1" &&
  python3 "$HERE/compare.py" logits "$W/tp$TP.json" "$W/tp1.json" --limit 1e-3 --name "TP $TP vs TP 1"
EOF
  for tp in 2 4 8; do
    [ "$tp" -le "$ngpu" ] || break
    step "tp$tp" 90 env TP=$tp bash "$W/tp.sh"
    grep -E '^(ok|FAIL)' "$W/logs/tp$tp.log" | sed 's/^/     /' | tee -a "$S"
    bench "bench_tp$tp" 1b-q4_0 --tensor-parallel-size $tp --batch $BATCHES --prefill $PREFILL
  done
fi
kill $models_pid 2>/dev/null
finish
