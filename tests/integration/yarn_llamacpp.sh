#!/usr/bin/env bash
# Promise: YaRN RoPE scaling (rope.scaling.type = yarn: Qwen's long-context files, gpt-oss) gives
# llama.cpp's tokens. Three models written by sol-mkmodel --yarn: qwen3 (NEOX pairs, head size 64
# with dim 256, factor 4 over an original context of 128), llama (NORM pairs, factor 8 over 64) and
# qwen3moe (factor 32 over 4096, gpt-oss's values), each in F32 and Q8_0, a 48-token prompt:
# - in the llama.cpp-compatible mode the 32 greedy ids are identical and the logits agree within
#   1e-8 relative L2 for Q8_0 (measured 1.1e-9) and 1e-4 for F32 (measured up to 3.6e-6);
# - in the default mode the logits agree within 2e-2 (measured up to 8.5e-3);
# - the scaling is in effect: the same model written without YaRN's keys, run by Sol, is more
#   than 1e-3 from llama.cpp's logits for the YaRN file (measured 0.1-0.18), so a YaRN Sol
#   ignored could not pass.
set -euo pipefail
B=${SOL_BUILD:?}; S=${SOL_SOURCE:?}
. "$S/tests/peer/compare.sh"
require_peer
peer_workdir
N=32; P=$(seq -s, 100 147)
shapes=(
  "qwen3:--arch qwen3 --dim 256 --head-dim 64 --heads 4 --kv-heads 2 --ffn 512 --layers 2 --vocab 601 --ctx 2048 --seed 7 --yarn 4,128"
  "llama:--dim 256 --heads 4 --kv-heads 2 --ffn 512 --layers 2 --vocab 601 --ctx 2048 --seed 7 --yarn 8,64"
  "qwen3moe:--arch qwen3moe --dim 256 --heads 4 --kv-heads 2 --ffn 512 --experts 8 --expert-ffn 256 --layers 2 --vocab 601 --ctx 2048 --seed 7 --yarn 32,4096"
)
jobs=""; files=()
for s in "${shapes[@]}"; do
  name=${s%%:*}; flags=${s#*:}
  for t in f32 q8_0; do
    m=$work/$name-$t; files+=("$m")
    # shellcheck disable=SC2086
    "$B/tools/sol-mkmodel" -o "$m.gguf" $flags --type "$t" >/dev/null 2>&1
    # shellcheck disable=SC2086
    "$B/tools/sol-mkmodel" -o "$m-plain.gguf" ${flags% --yarn *} --type "$t" >/dev/null 2>&1
    peer_next
    sol_both_modes "$m.gguf" "$m"
    sol_both_modes "$m-plain.gguf" "$m-plain"
    jobs+=$(peer_job "$m.gguf" "$m")
  done
done
peer_run_jobs "$jobs"

pass=0; fail=0
for m in "${files[@]}"; do
  ctol=1e-8; case $m in *-f32) ctol=1e-4 ;; esac
  ids=$(same_prefix "$m.llamacpp.ids" "$m.ref.ids")
  crel=$(relL2 "$m.llamacpp.json" "$m.ref.json"); rel=$(relL2 "$m.exact.json" "$m.ref.json")
  prel=$(relL2 "$m-plain.llamacpp.json" "$m.ref.json")
  ok=0; [ "$ids" -ge $N ] && within "$crel" $ctol && within "$rel" 0.02 && ! within "$prel" 1e-3 && ok=1
  verdict $ok "$(basename "$m"): compatible $ids/$N ids, logits $crel (limit $ctol); default logits $rel (limit 0.02); without YaRN $prel (must exceed 1e-3)"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
