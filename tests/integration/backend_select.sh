#!/usr/bin/env bash
# Promise: tools choose their compute backend by name through the registry: sol-generate runs on
# a named CPU path (cpu:scalar gives the same greedy ids as the default on this tiny model, where
# the paths agree), and unknown names, unknown variants and an unusable cuda are refused with the
# reason and a non-zero exit, never a crash. The llama.cpp reference mode is the variant
# cpu:llamacpp, for tools and (worker.backend_variant) for workers.
set -euo pipefail
B=${SOL_BUILD:?}
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$B/tools/sol-mkmodel" -o "$work/t.gguf" --preset tiny --type f32 --seed 5 >/dev/null 2>&1
gen() { "$B/tools/sol-generate" -m "$work/t.gguf" --prompt-tokens 5,9,13,2 -n 12 --temp 0 --tokens --threads 1 "$@"; }
a=$(gen)
b=$(gen --backend cpu:scalar)
[ "$(wc -l <<<"$a")" -eq 12 ] || fail "default backend gave $(wc -l <<<"$a") ids"
[ "$a" = "$b" ] || fail "cpu:scalar ids differ from the default: $a vs $b"

expect_refusal() { # pattern, backend spec
  set +e
  out=$(gen --backend "$2" 2>&1)
  rc=$?
  set -e
  [ $rc -ne 0 ] && [ $rc -lt 124 ] || fail "--backend $2 exited $rc: $out"
  grep -Eq "$1" <<<"$out" || fail "--backend $2: unclear message: $out"
}
expect_refusal "unknown backend 'tpu': this build has cpu, cuda" tpu
expect_refusal "backend cpu:neon: cpu:neon: 'neon' is neither a kernel ISA \(scalar, avx2, avx512\) nor a mode" cpu:neon
expect_refusal "cpu:avx2\+exact\+llamacpp: a mode \(exact, llamacpp\) given twice" cpu:avx2+exact+llamacpp
# the llama.cpp reference mode is a variant of the cpu backend; a worker takes it from
# worker.backend_variant (cpu only)
[ "$(gen --backend cpu:llamacpp | wc -l)" -eq 12 ] || fail "cpu:llamacpp gave no 12 ids"
set +e
out=$("$B/worker/sol-worker" --backend sim --pool p --router tcp://127.0.0.1:1 \
  --set worker.backend_variant=llamacpp --print-config 2>&1)
rc=$?
set -e
[ $rc = 2 ] && grep -q 'worker.backend_variant.*"llamacpp" applies to backend cpu' <<<"$out" ||
  fail "a variant for backend sim: rc $rc, $out"
out=$("$B/worker/sol-worker" --backend cpu --model "$work/t.gguf" --pool p --router tcp://127.0.0.1:1 \
  --set worker.backend_variant=scalar+llamacpp --print-config 2>&1)
grep -q 'backend_variant: "scalar+llamacpp"' <<<"$out" || fail "--print-config lacks the variant: $out"
set +e
out=$(timeout 20 "$B/worker/sol-worker" --backend cpu --model "$work/t.gguf" --pool p \
  --router tcp://127.0.0.1:1 --set worker.backend_variant=bogus 2>&1)
rc=$?
set -e
[ $rc = 2 ] && grep -q "worker.backend_variant: backend cpu:bogus: .*'bogus' is neither" <<<"$out" ||
  fail "a bad variant: rc $rc, $out"
expect_refusal "backend cuda: (no NVIDIA driver|no CUDA device|this build has no CUDA backend|the CUDA runtime)" cuda
# a test-only fault that does not parse is refused, never ignored
set +e
out=$(SOL_TEST_CUDA_EMU_FAULT=1:3:hangs "$B/tools/sol-generate" -m "$work/t.gguf" --backend cuda-emu \
  --prompt-tokens 5 -n 1 2>&1)
rc=$?
set -e
[ $rc = 2 ] && grep -q "SOL_TEST_CUDA_EMU_FAULT=1:3:hangs: expected DEVICE:N:hang or DEVICE:N:fail" <<<"$out" ||
  fail "a malformed SOL_TEST_CUDA_EMU_FAULT: rc $rc, $out"
set +e
out=$(SOL_EMU_SMS=12x "$B/tools/sol-generate" -m "$work/t.gguf" --backend cuda-emu \
  --prompt-tokens 5 -n 1 2>&1)
rc=$?
set -e
[ $rc = 2 ] && grep -q "SOL_EMU_SMS=12x: expected a multiprocessor count of 1..4096" <<<"$out" ||
  fail "a malformed SOL_EMU_SMS: rc $rc, $out"
echo "backend_select: ok"

# -n 0: the prompt's pass alone (sol-generate runs it through the engine, which samples once):
# no token printed, --logits written with one value per vocabulary entry
ids=$("$B/tools/sol-generate" -m "$work/t.gguf" --prompt-tokens 5,9,13,2 -n 0 --tokens --threads 1 \
  --logits "$work/n0.json" 2>/dev/null) || fail "-n 0 --logits failed"
[ -z "$ids" ] || fail "-n 0 printed tokens: $ids"
python3 -c 'import json, sys; assert len(json.load(open(sys.argv[1]))) == 512' "$work/n0.json" ||
  fail "-n 0: --logits is not the tiny vocabulary's 512 values"
echo "backend_select: -n 0 ok"
