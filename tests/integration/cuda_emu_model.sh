#!/usr/bin/env bash
# Promise: a whole model runs on the CUDA backend through the host emulation (backend cuda-emu:
# the GPU backend's own code, every activation in a device buffer) as on the CPU backend: the
# same 24 greedy ids for an F32 model, and for Q8_0, Q4_K and Q4_0 (a qwen3 shape with q/k norms) the last
# prompt position's logits within 1e-3 relative L2 (the kernels sum in other orders). A 40-token
# prompt takes the tensor-core prefill kernels: k_mma.cu's F16 tiles (x and weights in F16) or,
# with SOL_CUDA_GEMM=int8, k_mmq.cu's int8 GEMMs (the CPU's Q8 activations and integer dots), and
# k_flash.cu's attention (q and the softmax weights in F16): logits within 2e-2, the tiny Q8_0
# model's with int8, whose attention stays in floats, within 1e-3; the backend's counters show
# the kernels ran; the quantized models'
# decode steps ran the fused norm+quantize and gated-product quantize launches, and the Q4_0 one's
# o projections read the attention combine's Q8_0 output (graph steps split at the cap); the
# llama ones' decode steps roped and wrote the cache in the q/k/v projections' store, the qwen3
# ones normed, roped and wrote it in one launch after them. The
# emulation runs a fiber per GPU thread: small models only.
# SOL_TEST_CUDA_SPEC=cuda runs the same comparisons on a GPU (tests/gpu/run.sh). CUDA graphs and
# bench_decode: cuda_emu_graphs.sh.
set -euo pipefail
B=${SOL_BUILD:?}; S=${SOL_SOURCE:?}
. "$S/tests/peer/compare.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
P=1,15,27,300,42,7,99
"$B/tools/sol-mkmodel" -o "$work/f32.gguf" --preset tiny --seed 3 >/dev/null 2>&1
"$B/tools/sol-mkmodel" -o "$work/q8.gguf" --preset tiny --seed 4 --type q8_0 >/dev/null 2>&1
"$B/tools/sol-mkmodel" -o "$work/qwen3.gguf" --arch qwen3 --dim 256 --heads 4 --kv-heads 2 \
  --head-dim 64 --ffn 512 --layers 2 --vocab 600 --ctx 128 --seed 5 --type f16 >/dev/null 2>&1
"$B/tools/sol-quantize" "$work/qwen3.gguf" "$work/q4k.gguf" --type q4_k_m --quiet 2>/dev/null
"$B/tools/sol-quantize" "$work/qwen3.gguf" "$work/q40.gguf" --type q4_0 --quiet 2>/dev/null
DEV=${SOL_TEST_CUDA_SPEC:-cuda-emu}
fail=0
for m in f32 q8 q4k q40; do
  for be in cpu "$DEV"; do
    th=(); [ "$be" = cpu ] && th=(--threads 1) # cuda-emu refuses --threads: it has none
    "$B/tools/sol-generate" -m "$work/$m.gguf" --backend "$be" --prompt-tokens "$P" -n 24 --temp 0 \
      --tokens "${th[@]}" --logits "$work/$m.$be.json" >"$work/$m.$be.ids" 2>"$work/err" ||
      { echo "FAIL $m on $be: $(tail -3 "$work/err")"; exit 1; }
  done
  ids=$(same_prefix "$work/$m.$DEV.ids" "$work/$m.cpu.ids")
  rel=$(relL2 "$work/$m.$DEV.json" "$work/$m.cpu.json")
  line="$m: $DEV $ids/24 ids of the CPU's, logits $rel apart (limit 1e-3)"
  if ! within "$rel" 1e-3 || { [ "$m" = f32 ] && [ "$ids" -lt 24 ]; }; then
    echo "FAIL $line"; fail=1
  else
    echo "ok   $line"
  fi
  # the quantized models decode with the fused prologues (norm+quantize for q/k/v and gate/up,
  # the gated product quantized where the down projection reads it, or by the gate/up GEMV:
  # counted below); the F32 one cannot. Every
  # llama model (f32, q8) ropes and writes the cache in the q/k/v projections' store (rope+KV) on
  # its decode steps; the qwen3 ones' per-head q/k norms come between, so they norm, rope and
  # write the cache in one launch after the projections (q/k norm+rope+KV), every step
  fz=$(sed -n 's/.*fused prologues: \([0-9]*\) norm+quantize, \([0-9]*\) glu+quantize, \([0-9]*\) attention+quantize, \([0-9]*\) rope+KV, \([0-9]*\) q\/k norm+rope+KV.*/\1 \2 \3 \4 \5/p' "$work/err")
  read -r normq gluq attq ropekv qknorm <<<"${fz:-0 0 0 0 0}"
  # and the quantized models' gate/up GEMVs make the down projection's activations of the gated
  # product (the F32 model's down reads floats: none)
  gz=$(sed -n 's/.*gated-product blocks: \([0-9]*\) gate\/up GEMVs made them, \([0-9]*\) reads.*/\1 \2/p' "$work/err")
  read -r glum glur <<<"${gz:-0 0}"
  fused_ok=0
  if [ "$m" = f32 ]; then [ "$normq$gluq$attq" = 000 ] && fused_ok=1
  else [ "$normq" -gt 0 ] && [ "$((gluq + glum))" -gt 0 ] && fused_ok=1; fi
  # only o weights that take Q8_0 activations (q4_0, q8_0) at a head_dim that is a multiple of
  # 32 (not the tiny q8 model's 16)
  if [ "$m" = q40 ] && [ "$attq" -eq 0 ]; then fused_ok=0; fi
  case $m in
    f32 | q8) [ "$ropekv" -gt 0 ] && [ "$qknorm" -eq 0 ] || fused_ok=0 ;;
    *) [ "$ropekv" -eq 0 ] && [ "$qknorm" -gt 0 ] || fused_ok=0 ;;
  esac
  # every model's decode steps normalize x (and quantize it for the next weight) in the last block
  # of the o and down projections' GEMV, and the next op reads that (next_input's norm tails)
  tz=$(sed -n 's/.*norm tails: \([0-9]*\) GEMVs normalized and quantized their output, \([0-9]*\) reads.*/\1 \2/p' "$work/err")
  read -r tails tailr <<<"${tz:-0 0}"
  echo "     $m: $tails norm tails made, $tailr read; $glum gated-product activations made, $glur read"
  [ "$tails" -gt 0 ] && [ "$tailr" -gt 0 ] || fused_ok=0
  if [ "$m" = f32 ]; then [ "$glum$glur" = 00 ] || fused_ok=0
  else [ "$glum" -gt 0 ] && [ "$glur" -gt 0 ] || fused_ok=0; fi
  if [ "$fused_ok" = 1 ]; then
    echo "ok   $m: $normq norm+quantize, $gluq glu+quantize, $attq attention+quantize, $ropekv rope+KV and $qknorm q/k norm+rope+KV launches"
  else
    echo "FAIL $m: fused prologues '$fz' ($(grep -o 'fused prologues.*' "$work/err"))"; fail=1
  fi
done
# The prefill GEMM: prompts of more than 16 tokens, on the F16 tiles (k_mma.cu, the default) and
# under SOL_CUDA_GEMM=int8 on the int8 kernels (k_mmq.cu: the GEMV's activations and integers).
L=$(seq -s, 3 3 120)
for m in q8 q4k q40; do
  "$B/tools/sol-generate" -m "$work/$m.gguf" --backend cpu --threads 1 --prompt-tokens "$L" -n 1 \
    --temp 0 --tokens --logits "$work/$m.long.cpu.json" >/dev/null 2>"$work/err" ||
    { echo "FAIL long prompt $m on cpu: $(tail -3 "$work/err")"; exit 1; }
  for gemm in f16 int8; do
    SOL_CUDA_GEMM=$gemm "$B/tools/sol-generate" -m "$work/$m.gguf" --backend "$DEV" \
      --prompt-tokens "$L" -n 1 --temp 0 --tokens --logits "$work/$m.long.$gemm.json" >/dev/null \
      2>"$work/err" || { echo "FAIL long prompt $m ($gemm) on $DEV: $(tail -3 "$work/err")"; exit 1; }
    rel=$(relL2 "$work/$m.long.$gemm.json" "$work/$m.long.cpu.json")
    # with int8, q8 (tiny preset: head_dim 16, attention on k_attention.cu in floats) has nothing
    # in F16 left: the decode limit; qwen3's attention runs k_flash.cu in F16
    lim=2e-2; [ "$m$gemm" = q8int8 ] && lim=1e-3
    line="$m, 40-token prompt ($gemm GEMM): logits $rel apart (limit $lim)"
    if within "$rel" "$lim"; then echo "ok   $line"; else echo "FAIL $line"; fail=1; fi
    # ... and it ran on the tensor-core kernels (k_mma.cu or k_mmq.cu, k_flash.cu), not a
    # fallback; the tiny preset's head_dim 16 is not one k_flash.cu takes (64, 128): its
    # attention stays on k_attention.cu, qwen3's 64 goes to the tensor cores.
    # q/k/v (and gate/up) read one conversion of x: 3 shared of 5 GEMMs a layer
    tc=$(sed -n 's/.*tensor cores: \([0-9]*\) GEMMs, \([0-9]*\) prefill attention calls, \([0-9]*\) int8 GEMMs, \([0-9]*\) on a shared x.*/\1 \2 \3 \4/p' "$work/err")
    read -r gemms flash int8 shared <<<"${tc:-0 0 0 0}"
    flash_ok=$([ "$flash" -gt 0 ] && echo 1 || echo 0)
    [ "$m" = q8 ] && flash_ok=$([ "$flash" = 0 ] && echo 1 || echo 0)
    # int8: every GEMM on int8 tensor cores (the head is a GEMV of the last position); f16: none
    want8=0; [ "$gemm" = int8 ] && want8=$gemms
    if [ "$gemms" -gt 0 ] && [ "$flash_ok" = 1 ] && [ "$int8" = "$want8" ] && [ "$shared" -gt 0 ]; then
      echo "ok   $m ($gemm): the prompt ran $gemms tensor-core GEMMs ($int8 int8, $shared on a shared x) and $flash prefill attention calls"
    else
      echo "FAIL $m ($gemm): tensor-core launches: '${tc}' ($(grep 'tensor cores' "$work/err"))"; fail=1
    fi
  done
done
# A value the backend does not know is refused by name.
if [ "$DEV" = cuda-emu ]; then
  if SOL_CUDA_GEMM=fp8 "$B/tools/sol-generate" -m "$work/q4k.gguf" --backend "$DEV" \
    --prompt-tokens 1,2 -n 1 >/dev/null 2>"$work/err"; then
    echo "FAIL SOL_CUDA_GEMM=fp8 was accepted"; fail=1
  elif grep -q "SOL_CUDA_GEMM=fp8: expected int8 or f16" "$work/err"; then
    echo "ok   SOL_CUDA_GEMM=fp8 is refused by name"
  else
    echo "FAIL SOL_CUDA_GEMM=fp8: $(tail -2 "$work/err")"; fail=1
  fi
fi
exit $fail
