#!/usr/bin/env bash
# Promise: `scripts/start --model FILE.gguf` serves a user's own file: the precise pool runs it as
# given, the fast pool its Q4_K_M written once by sol-quantize (an already-quantized file is served
# as it is), both answer completions through the router; a missing file is refused with exit 2.
. "$(dirname "$0")/lib.sh"
S=$SOL_SOURCE
set +e
out=$(SOL_BUILD_DIR=$SOL_BUILD "$S/scripts/start" --no-setup --model "$T_DIR/none.gguf" 2>&1)
rc=$?
set -e
[ $rc -eq 2 ] && grep -q "none.gguf: no such file" <<<"$out" || fail "missing --model: exit $rc: $out"

"$SOL_BUILD/tools/sol-mkmodel" -o "$T_DIR/mine.gguf" --arch qwen3 --dim 256 --layers 2 --heads 4 \
  --kv-heads 2 --ffn 512 --vocab 600 --type f16 --seed 3 >/dev/null 2>&1
start_cluster --model "$T_DIR/mine.gguf"
port=$START_PORT; start_pid=$START_PID
[ -f "$T_DIR/models/mine-q4_k_m.gguf" ] || fail "no Q4_K_M written for the fast pool"
for pool in fast precise; do
  r=$(curl -fs "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"model\":\"$pool\",\"prompt\":\"hello world\",\"max_tokens\":8,\"temperature\":0}")
  grep -q '"finish_reason"' <<<"$r" || fail "$pool: no completion: $r"
  grep -q '"completion_tokens":8' <<<"$r" || fail "$pool: expected 8 tokens: $r"
done
grep -q "qwen3, .* parameters, weights .*q4_k" "$T_DIR/start.log" || fail "fast worker did not log its Q4_K weights"
kill -TERM $start_pid; wait $start_pid 2>/dev/null || true
ok "precise pool on the file, fast pool on its Q4_K_M"
