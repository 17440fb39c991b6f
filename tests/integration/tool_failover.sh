# Promise: a streamed tool call survives its worker dying in the middle of it. tool_choice
# "required" (a grammar) at temperature 0 on a pool of two Hermes-template workers: the worker
# holding the stream is frozen part-way through the call and killed with SIGKILL; the request
# resumes on the other worker from the tokens already generated (the grammar replayed over them),
# and the client's assembled delta.tool_calls equal the undisturbed run's call exactly, with
# finish_reason "tool_calls" and no error.
. "$(dirname "$0")/lib.sh"

# About a millisecond per token (as in cluster_real.sh), so the call takes long enough to be cut.
mkmodel "$T_DIR/m.gguf" --preset tiny --dim 256 --ffn 768 --layers 4 --ctx 4096 --seed 5
printf 'router:\n  routing: {pools: [precise], default_pool: precise}\n' >"$T_DIR/router.yaml"
start_router --config "$T_DIR/router.yaml" --set router.workers.dead_after_ms=10000
start_cpu_worker a precise "$T_DIR/m.gguf" --chat-template qwen2.5
start_cpu_worker b precise "$T_DIR/m.gguf" --chat-template qwen2.5
wait_ready 300
for w in a b; do wait_worker "$w"; done

BODY='{"model":"precise","messages":[{"role":"user","content":"Write it down."}],
"tools":[{"type":"function","function":{"name":"note","parameters":{"type":"object",
"properties":{"lines":{"type":"array","minItems":16,"maxItems":16,"items":{"type":"string",
"minLength":90,"maxLength":100}}},"required":["lines"],
"additionalProperties":false}}}],"tool_choice":"required","parallel_tool_calls":false,
"temperature":0,"max_tokens":2500'
t0=$(date +%s%N)
post /v1/chat/completions "$BODY}" >"$T_DIR/ref.json"
ref_ms=$((($(date +%s%N) - t0) / 1000000))
[ "$(status)" = 200 ] || fail "reference: $(cat "$T_DIR/ref.json")"
[ "$(json_get 'd["choices"][0]["finish_reason"]' <"$T_DIR/ref.json")" = tool_calls ] \
    || fail "the reference run did not end in a call: $(head -c 400 "$T_DIR/ref.json")"
echo "     reference call took ${ref_ms} ms"

victim=""
for attempt in 1 2 3 4; do # on a loaded machine the call may finish before the freeze
    curl -sN "$BASE/v1/chat/completions" -d "$BODY,\"stream\":true}" >"$T_DIR/kill.sse" &
    cpid=$!
    sleep "$(python3 -c "print($ref_ms / 3000)")" # about a third of the call
    kill -STOP "${W_PID[a]}" "${W_PID[b]}"
    if grep -q '^data: \[DONE\]' "$T_DIR/kill.sse"; then
        kill -CONT "${W_PID[a]}" "${W_PID[b]}"
        wait "$cpid" || true
        echo "     the call finished before the freeze (attempt $attempt); again"
        continue
    fi
    for w in a b; do [ "$(workers_field "$w" inflight)" = 1 ] && victim=$w; done
    break
done
[ -n "$victim" ] || { kill -CONT "${W_PID[a]}" "${W_PID[b]}"; fail "no worker held the call when frozen"; }
survivor=a
[ "$victim" = a ] && survivor=b
grep -q '"tool_calls"' "$T_DIR/kill.sse" && fail "the call was already out before the kill"
kill -9 "${W_PID[$victim]}"
kill -CONT "${W_PID[$survivor]}"
wait "$cpid" || fail "the failover stream's curl failed"
python3 - "$T_DIR/kill.sse" "$T_DIR/ref.json" <<'EOF' || fail "the failed-over call differs from the undisturbed one"
import json, sys
calls, fin, done = {}, None, False
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.strip()
    if line == "data: [DONE]":
        done = True
    elif line.startswith("data: {"):
        d = json.loads(line[6:])
        assert "error" not in d, d
        for c in d["choices"]:
            for tc in c["delta"].get("tool_calls") or []:
                s = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
                s["name"] += tc["function"].get("name", "")
                s["arguments"] += tc["function"].get("arguments", "")
            fin = c["finish_reason"] or fin
ref = [c["function"] for c in json.load(open(sys.argv[2]))["choices"][0]["message"]["tool_calls"]]
got = [calls[i] for i in sorted(calls)]
assert done and fin == "tool_calls", (done, fin)
assert got == ref, (got, ref)
print("     call after failover:", got[0]["name"], len(got[0]["arguments"]), "bytes of arguments")
EOF
grep -q "fails over" "$T_DIR/router.log" || fail "the router log shows no failover"
ok "kill -9 of $victim in the middle of a tool call: finished on $survivor, the same call"
