#!/usr/bin/env bash
# tests/gpu/run.sh: everything Sol checks and measures on a real NVIDIA GPU, in one run of about
# 5 minutes (the device tool lends a GPU for 15 minutes to some tasks; docs/backend.md, "The
# CUDA backend"). Run from the repository root on the GPU machine:
#   tests/gpu/run.sh            (or OUT=/some/dir tests/gpu/run.sh: the report lands there)
# Steps, each printed with ok/FAIL:
#   1. build (Release, SOL_CUDA=ON, sm_80 + sm_90) into build-gpu/, unless it is already built;
#   2. the op test on the GPU against the CPU backend (test_cuda_backend, SOL_TEST_CUDA_SPEC=cuda);
#   3. whole models on the GPU against the CPU backend: greedy ids and logits
#      (tests/integration/cuda_emu_model.sh with SOL_TEST_CUDA_SPEC=cuda), and CUDA graphs against
#      --enforce-eager (cuda_emu_graphs.sh);
#   4. the timing table: device copy bandwidth, then decode tok/s at batch 1, 8 and 64 and
#      prefill tok/s for the 1b preset in F16, Q4_0 and Q4_K_M, each decode line with its share
#      of the weight-streaming roofline and the graph counters; then Q4_0 with --enforce-eager
#      (CUDA graphs off: the launch overhead graphs save) and with --batch-invariant (GEMV
#      prefill);
#   5. tensor parallelism over the GPUs present: greedy ids and logits of the 1b Q4_0 model at
#      TP = 2, 4, 8 (as many as there are GPUs) against TP 1 (sol-generate --tensor-parallel-size)
#      and its decode/prefill timing with the all-reduce's share; one GPU: "TP 1 only", said so.
# The report (summary.txt, the logs) goes to $OUT (default /tmp/sol-gpu). Exit status: 0 when
# every check passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/sol-gpu}
B=${SOL_GPU_BUILD:-build-gpu}
mkdir -p "$OUT"
S="$OUT/summary.txt"
: >"$S"
say() { echo "$*" | tee -a "$S"; }
status=0
check() { # name, command...: runs it, logs to $OUT/name.log, says ok/FAIL
  local name=$1; shift
  local t0=$SECONDS
  if "$@" >"$OUT/$name.log" 2>&1; then
    say "ok   $name ($((SECONDS - t0)) s)"
  else
    say "FAIL $name ($((SECONDS - t0)) s): see $OUT/$name.log"; tail -15 "$OUT/$name.log"; status=1
  fi
}

say "# Sol on a GPU, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
if command -v nvidia-smi >/dev/null; then
  say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
else
  say "GPU: nvidia-smi not found"
fi

build() {
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSOL_CUDA=ON &&
    cmake --build "$B" -j "$(nproc)" --target test_cuda_backend sol-generate sol-mkmodel \
      sol-quantize bench_decode
}
if [ -x "$B/tests/test_cuda_backend" ] && [ -x "$B/bench/bench_decode" ]; then
  say "ok   build (already built in $B)"
else
  check build build || { say "cannot go on without a build"; exit 1; }
fi

check op_test env SOL_TEST_CUDA_SPEC=cuda "$B/tests/test_cuda_backend"
check models_vs_cpu env SOL_TEST_CUDA_SPEC=cuda SOL_BUILD="$PWD/$B" SOL_SOURCE="$PWD" \
  bash tests/integration/cuda_emu_model.sh
check graphs_vs_eager env SOL_TEST_CUDA_SPEC=cuda SOL_BUILD="$PWD/$B" SOL_SOURCE="$PWD" \
  bash tests/integration/cuda_emu_graphs.sh

# The timing table.
W="$OUT/models"; mkdir -p "$W"
"$B/tools/sol-mkmodel" -o "$W/1b-f16.gguf" --preset 1b --type f16 >"$OUT/mkmodel.log" 2>&1 &&
  "$B/tools/sol-mkmodel" -o "$W/1b-q4_0.gguf" --preset 1b --type q4_0 >>"$OUT/mkmodel.log" 2>&1 &&
  "$B/tools/sol-quantize" "$W/1b-f16.gguf" "$W/1b-q4_k_m.gguf" --type q4_k_m --quiet \
    >>"$OUT/mkmodel.log" 2>&1 || { say "FAIL making the 1b models: see $OUT/mkmodel.log"; exit 1; }
say ""
say "## Timing (synthetic 1b preset: random weights, so speed only), context 512, weights uploaded"
say "bench_decode -m MODEL --backend cuda --batch 1,8,64 --ctx 512 --steps 64 --prefill 2048"
bw=$("$B/bench/bench_decode" -m "$W/1b-q4_0.gguf" --backend cuda --batch 1 --ctx 8 --steps 1 \
  --prefill 0 --measure-membw 1024 2>>"$OUT/bench.log" | sed -n 's/.*write): \([0-9.]*\) GB\/s/\1/p')
say "device copy bandwidth (1 GiB, read + write): ${bw:-?} GB/s"
for m in f16 q4_0 q4_k_m; do
  say "### $m"
  "$B/bench/bench_decode" -m "$W/1b-$m.gguf" --backend cuda --batch 1,8,64 --ctx 512 --steps 64 \
    --prefill 2048 ${bw:+--membw "$bw"} 2>>"$OUT/bench.log" | tee -a "$S" ||
    { status=1; say "FAIL bench_decode $m: $(tail -1 "$OUT/bench.log")"; }
done
say "### q4_0, --batch-invariant (prefill through the GEMV kernels)"
"$B/bench/bench_decode" -m "$W/1b-q4_0.gguf" --backend cuda --batch-invariant --batch 1 --ctx 512 \
  --steps 16 --prefill 2048 2>>"$OUT/bench.log" | tee -a "$S" ||
  { status=1; say "FAIL bench_decode --batch-invariant: $(tail -1 "$OUT/bench.log")"; }
say "### q4_0, --enforce-eager (no CUDA graphs: compare the decode rows with q4_0's above)"
"$B/bench/bench_decode" -m "$W/1b-q4_0.gguf" --backend cuda --enforce-eager --batch 1,8,64 \
  --ctx 512 --steps 64 --prefill 0 ${bw:+--membw "$bw"} 2>>"$OUT/bench.log" | tee -a "$S" ||
  { status=1; say "FAIL bench_decode --enforce-eager: $(tail -1 "$OUT/bench.log")"; }
say ""
say "## Tensor parallelism"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 2 ]; then
  say "${ngpu:-0} GPU(s): TP 1 only (tensor parallelism needs 2 or more; NCCL ranks not run)"
else
  gen() { # TP: greedy ids of a fixed prompt, logits to $OUT/tp$1.json
    "$B/tools/sol-generate" -m "$W/1b-q4_0.gguf" --backend cuda --tensor-parallel-size "$1" \
      --prompt-tokens 1,15043,3186,29892,590 -n 16 --temp 0 --tokens --logits "$OUT/tp$1.json"
  }
  gen 1 >"$OUT/tp1.ids" 2>>"$OUT/tp.log"
  for tp in 2 4 8; do
    [ "$tp" -le "$ngpu" ] || break
    if gen "$tp" >"$OUT/tp$tp.ids" 2>>"$OUT/tp.log" && cmp -s "$OUT/tp1.ids" "$OUT/tp$tp.ids"; then
      d=$(python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); print('%.3g' % max(abs(x-y) for x,y in zip(a,b)))" "$OUT/tp1.json" "$OUT/tp$tp.json")
      say "ok   tp$tp: greedy ids equal to TP 1, max |logit diff| $d"
    else
      say "FAIL tp$tp: ids differ from TP 1 or the run failed (see $OUT/tp.log)"; status=1
    fi
    "$B/bench/bench_decode" -m "$W/1b-q4_0.gguf" --backend cuda --tensor-parallel-size "$tp" \
      --batch 1,8,64 --ctx 512 --steps 32 --prefill 2048 2>>"$OUT/bench.log" | tee -a "$S" ||
      { status=1; say "FAIL bench_decode tp$tp: $(tail -1 "$OUT/bench.log")"; }
  done
fi
say ""
say "result: $([ $status = 0 ] && echo 'all checks passed' || echo 'FAILURES above')"
exit $status
