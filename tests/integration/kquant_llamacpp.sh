#!/usr/bin/env bash
# Promise: K-quant files decode alike in Sol and llama.cpp. For llama, qwen2, qwen3 and gemma3
# (sliding window 6, every second layer global) models of three shapes (see shape1..3) and each
# of Q4_K_M, Q5_K_M and Q6_K, both the file written by llama.cpp's own quantizer and the one
# written by sol-quantize load in both. In the llama.cpp-compatible mode (SOL_CPU_ATTN=llamacpp),
# which reproduces llama.cpp's float order throughout (K-quant kernels, attention, softmax,
# RMSNorm, RoPE, SiLU/GELU: docs/backend.md), every file gives the same 32 greedy ids and the
# last prompt position's logits within 1e-6 relative L2; in Sol's default mode the logits agree
# within 2e-2 (ids reported). The default mode's ~1.1-1.9% is the attention
# precision (Sol keeps F32 where llama.cpp rounds to F16), as for Q8_0 and Q4_0 files.
set -euo pipefail
B=${SOL_BUILD:?}; S=${SOL_SOURCE:?}
. "$S/tests/peer/compare.sh"
require_peer
peer_workdir

# llama.cpp's quantizer (tests/peer/llamacpp_quantize.c), built once per build dir.
lq=$("$peer/build_quantize.sh" "$B/peer")

N=32; P=1,15,27,300,42,7,99,128,5,260,311,17,450
# shape 1 (GQA, odd vocab): every type, from both quantizers; shape 2 (one KV head, three
# layers, wider FFN, another odd vocab): Q4_K_M and Q5_K_M from llama.cpp's quantizer; shape 3
# (head size 32, GQA 4:1, FFN 3 x dim, four layers; gemma3's window 6 then small against the
# prompt): Q4_K_M from llama.cpp's quantizer. Shape 3 found gemma3's query scale applied after the
# dot instead of to the query (1/sqrt(32) is no power of two: llama.cpp rounds the scaled query to
# F16), 0/32 ids before the fix.
shape1="--dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 --vocab 601 --ctx 256 --seed 7"
shape2="--dim 512 --layers 3 --heads 8 --kv-heads 1 --ffn 768 --vocab 1009 --ctx 256 --seed 5"
shape3="--dim 256 --layers 4 --heads 8 --kv-heads 2 --ffn 768 --vocab 1100 --ctx 256 --seed 7"
archs=(llama qwen2 qwen3 "gemma3:--sliding-window 6 --swa-pattern 2")
jobs=""; files=()
for spec in "${archs[@]}"; do
 a=${spec%%:*}; extra=""; [ "$a" = "$spec" ] || extra=${spec#*:}
 for sh in 1 2 3; do
  case $sh in
    1) shape=$shape1; ftypes=("q4_k_m:15" "q5_k_m:17" "q6_k:18"); bys=(lc sol) ;;
    2) shape=$shape2; ftypes=("q4_k_m:15" "q5_k_m:17"); bys=(lc) ;;
    3) shape=$shape3; ftypes=("q4_k_m:15"); bys=(lc) ;;
  esac
  base=$work/$a-s$sh
  # shellcheck disable=SC2086
  "$B/tools/sol-mkmodel" -o "$base.gguf" --arch "$a" $shape $extra --type f16 >/dev/null 2>&1
  for f in "${ftypes[@]}"; do
    name=${f%%:*}; ft=${f#*:}
    "$lq" "$base.gguf" "$base-$name-lc.gguf" "$ft" >"$work/lq.log" 2>&1 || { tail -5 "$work/lq.log"; exit 1; }
    [ $sh = 1 ] && "$B/tools/sol-quantize" "$base.gguf" "$base-$name-sol.gguf" --type "$name" --quiet 2>/dev/null
    for by in "${bys[@]}"; do
      m=$base-$name-$by; files+=("$m")
      peer_next
      for mode in exact llamacpp; do
        SOL_CPU_ISA=$pisa SOL_CPU_ATTN=$mode "$B/tools/sol-generate" -m "$m.gguf" --prompt-tokens "$P" -n $N --temp 0 \
          --tokens --threads 2 --logits "$m.$mode.json" >"$m.$mode.ids" 2>"$m.err" || { cat "$m.err"; exit 1; }
      done
      jobs+="{\"cpu\":\"$pb\",\"model\":\"$m.gguf\",\"tokens\":[$P],\"n\":$N,\"out\":\"$m.ref.ids\",\"logits\":\"$m.ref.json\"},"
    done
  done
 done
done
peer_run_jobs "$jobs"


pass=0; fail=0
for m in "${files[@]}"; do
  ids=$(same_prefix "$m.llamacpp.ids" "$m.ref.ids")
  crel=$(relL2 "$m.llamacpp.json" "$m.ref.json")
  rel=$(relL2 "$m.exact.json" "$m.ref.json")
  line="$(basename "$m"): llama.cpp-compatible $ids/$N ids, logits $crel (limit 1e-6); default logits $rel (limit 0.02)"
  if [ "$ids" -lt $N ] || ! within "$crel" 1e-6 || ! within "$rel" 0.02; then
    echo "FAIL $line"; fail=$((fail + 1))
  else
    echo "ok   $line"; pass=$((pass + 1))
  fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
