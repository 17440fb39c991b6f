#!/usr/bin/env bash
# Promise: `scripts/start` with no options serves the committed demo models (models/demo, trained
# here on the KJV Bible): the precise pool (F16) continues a verse in the Bible's words (85% or
# more of them words of the training text: a random model writes sub-word junk), the fast pool
# (Q4_0 written on first start + the trained draft, speculating) answers a sampled chat turn in the
# same words and stops by itself (finish_reason "stop" at <|im_end|>), and its speculation
# proposes and accepts drafts.
. "$(dirname "$0")/lib.sh"
S=$SOL_SOURCE
start_cluster
port=$START_PORT; start_pid=$START_PID
[ -f "$T_DIR/models/demo-target-q4_0.gguf" ] || fail "no Q4_0 written for the fast pool"
BASE="http://127.0.0.1:$port"

words_ok() { # TEXT: 5 words at least, 85% of them the training text's (models/demo/words.txt)
  python3 - "$1" "$S/models/demo/words.txt" <<'PYEOF'
import re, sys
vocab = set(open(sys.argv[2]).read().split())
words = re.findall(r"[A-Za-z]+", sys.argv[1])
strange = [w for w in words if w not in vocab]
assert len(words) >= 5 and len(strange) <= 0.15 * len(words), (words, strange)
PYEOF
}
out=$(post /v1/completions '{"model":"precise","prompt":"And the LORD said unto Moses,","max_tokens":32,"temperature":0}')
[ "$(status)" = 200 ] || fail "precise: $(status) $out"
text=$(json_get 'd["choices"][0]["text"]' <<<"$out")
words_ok "$text" || fail "precise: not the Bible's words: '$text'"

out=$(post /v1/chat/completions '{"model":"fast","messages":[{"role":"user","content":"And God said, Let there be light: and there was light."}],"max_tokens":120,"temperature":0.7,"seed":3}')
[ "$(status)" = 200 ] || fail "fast chat: $(status) $out"
answer=$(json_get 'd["choices"][0]["message"]["content"]' <<<"$out")
words_ok "$answer" || fail "fast chat: not the Bible's words: '$answer'"
[ "$(json_get 'd["choices"][0]["finish_reason"]' <<<"$out")" = stop ] || fail "fast chat did not stop by itself: $out"
# the counters come with the worker's next heartbeat (a loaded machine may delay it)
for _ in $(seq 50); do
    metrics=$(curl -s "$BASE/metrics")
    drafted=$(sed -n 's/^sol_worker_spec_draft_tokens_total{pool="fast",[^}]*} //p' <<<"$metrics")
    accepted=$(sed -n 's/^sol_worker_spec_accepted_tokens_total{pool="fast",[^}]*} //p' <<<"$metrics")
    [ "${drafted:-0}" -gt 0 ] && [ "${accepted:-0}" -gt 0 ] && break
    sleep 0.2
done
[ "${drafted:-0}" -gt 0 ] && [ "${accepted:-0}" -gt 0 ] || fail "fast pool: drafted '$drafted', accepted '$accepted'"
kill -TERM $start_pid; wait $start_pid 2>/dev/null || true
ok "precise: '${text:0:60}...'; fast chat: '${answer:0:60}...' (stopped); $accepted of $drafted draft tokens accepted"
