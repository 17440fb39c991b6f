# Promise: chat tool calling through the router in each family's format - Hermes (qwen2.5),
# Llama 3.1 JSON and Mistral v0.3 [TOOL_CALLS]: tool_choice "required" and a named function
# always give calls that parse (random weights, temperature 1: the grammar makes them, in the
# pool's format), with finish_reason "tool_calls", arguments valid against the function's
# parameters, streamed as delta.tool_calls pieces that assemble to the same calls; n > 1 gives
# each choice its own calls; "auto" and "none" answer; a tool result round trip renders; a
# template without a tool format refuses tools with a 400 naming it. The Mistral model has
# Mistral v0.3's control tokens ([INST], [TOOL_CALLS], ...): a call it opens with the single
# [TOOL_CALLS] control token is taken by the grammar, also under "auto" with strict tools.
. "$(dirname "$0")/lib.sh"

M=$T_DIR/m.gguf M3=$T_DIR/m3.gguf
mkmodel "$M" --seed 23 --ctx 2048
mkmodel "$M3" --seed 23 --ctx 2048 --control-token '[INST]' --control-token '[/INST]' \
  --control-token '[TOOL_CALLS]' --control-token '[AVAILABLE_TOOLS]' \
  --control-token '[/AVAILABLE_TOOLS]' --control-token '[TOOL_RESULTS]' \
  --control-token '[/TOOL_RESULTS]'
TOOL_CALLS_ID=$("$SOL_BUILD/tools/sol-tokenize" -m "$M3" --special --no-bos <<<'[TOOL_CALLS]')
[[ $TOOL_CALLS_ID =~ ^[0-9]+$ ]] || fail "[TOOL_CALLS] is not one token of m3: '$TOOL_CALLS_ID'"
BRACE_ID=$("$SOL_BUILD/tools/sol-tokenize" -m "$M" --no-bos <<<'a{') # "a{" -> "▁a" "{"
BRACE_ID=${BRACE_ID##* }
[[ $BRACE_ID =~ ^[0-9]+$ ]] || fail "no '{' token in m: '$BRACE_ID'"
cat >"$T_DIR/router.yaml" <<EOF
router:
  routing: {pools: [precise, fast, llama, mistral], default_pool: precise}
EOF
start_router --config "$T_DIR/router.yaml"
start_cpu_worker w precise "$M" --chat-template qwen2.5
start_cpu_worker plain fast "$M" # the synthetic model's own template (llama-2) has no tool format
start_cpu_worker l31 llama "$M" --chat-template llama3.1
start_cpu_worker m3 mistral "$M3" --chat-template mistral-v3
wait_ready
wait_worker w

python3 - "$BASE" "$(dirname "$0")" "$TOOL_CALLS_ID" "$BRACE_ID" <<'PY' || fail "tool calls: see above"
import json, sys
sys.path.insert(0, sys.argv[2])
import oai_post
base, tool_calls_id, brace_id = sys.argv[1], sys.argv[3], sys.argv[4]

def post(body, stream=False):
    return oai_post.post(base, "/v1/chat/completions", body, stream)

tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
          "parameters": {"type": "object", "properties": {
              "city": {"type": "string", "maxLength": 12},
              "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"],
              "additionalProperties": False}}},
         {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
          "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
          "required": ["a", "b"]}}}]

def check_call(c):
    assert c["type"] == "function" and c["id"], c
    args = json.loads(c["function"]["arguments"])
    if c["function"]["name"] == "get_weather":
        assert set(args) == {"city", "unit"} and args["unit"] in ("c", "f"), args
        assert len(args["city"]) <= 12, args
    else:
        assert c["function"]["name"] == "add" and set(args) == {"a", "b"}, c
        assert isinstance(args["a"], int) and isinstance(args["b"], int), args

msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
n_stop = 0
for seed in range(1, 21):
    st, r = post({"model": "precise", "messages": msgs, "tools": tools, "tool_choice": "required",
                  "temperature": 1, "seed": seed, "max_tokens": 120})
    assert st == 200, r
    ch = r["choices"][0]
    if ch["finish_reason"] == "length":
        continue
    n_stop += 1
    assert ch["finish_reason"] == "tool_calls", ch
    assert ch["message"]["tool_calls"], ch
    for c in ch["message"]["tool_calls"]:
        check_call(c)
print(f"  required: {n_stop} of 20 ended with tool_calls, all valid")
assert n_stop >= 10

# a named function: only that one is called
st, r = post({"model": "precise", "messages": msgs, "tools": tools, "temperature": 1, "seed": 5,
              "tool_choice": {"type": "function", "function": {"name": "add"}}, "max_tokens": 120})
assert st == 200, r
calls = r["choices"][0]["message"].get("tool_calls") or []
assert r["choices"][0]["finish_reason"] == "length" or (calls and all(
    c["function"]["name"] == "add" for c in calls)), r
[check_call(c) for c in calls]
print("  named:", [c["function"]["arguments"] for c in calls])

# streamed: the pieces assemble as the official client does it
for seed in range(1, 6):
    st, ev = post({"model": "precise", "messages": msgs, "tools": tools, "tool_choice": "required",
                   "temperature": 1, "seed": seed, "max_tokens": 120, "stream": True}, stream=True)
    assert st == 200, ev
    got, fin = {}, None
    for e in ev:
        d = e["choices"][0]["delta"] if e["choices"] else {}
        for tc in d.get("tool_calls") or []:
            slot = got.setdefault(tc["index"], {"id": "", "type": "function",
                                               "function": {"name": "", "arguments": ""}})
            slot["id"] += tc.get("id", "")
            slot["function"]["name"] += tc.get("function", {}).get("name", "")
            slot["function"]["arguments"] += tc.get("function", {}).get("arguments", "")
        if e["choices"] and e["choices"][0]["finish_reason"]:
            fin = e["choices"][0]["finish_reason"]
    if fin == "length":
        continue
    assert fin == "tool_calls" and got, (fin, got)
    [check_call(c) for c in got.values()]
    st, r = post({"model": "precise", "messages": msgs, "tools": tools, "tool_choice": "required",
                  "temperature": 1, "seed": seed, "max_tokens": 120})
    assert [c["function"] for c in r["choices"][0]["message"]["tool_calls"]] == \
        [got[i]["function"] for i in sorted(got)], (r, got)
print("  streamed tool calls assemble to the non-streamed ones")

# auto answers; none answers with no call, plain or streamed, whatever the model writes (its
# text, even one shaped like a call, is content); a tool result round trip renders
st, r = post({"model": "precise", "messages": msgs, "tools": tools, "tool_choice": "auto",
              "max_tokens": 8, "temperature": 0})
assert st == 200 and r["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls"), r
for seed in range(1, 6):
    st, r = post({"model": "precise", "messages": msgs, "tools": tools, "tool_choice": "none",
                  "max_tokens": 40, "temperature": 1, "seed": seed})
    ch = r["choices"][0]
    assert st == 200 and ch["finish_reason"] in ("stop", "length"), r
    assert not ch["message"].get("tool_calls") and isinstance(ch["message"]["content"], str), ch
    st, ev = post({"model": "precise", "messages": msgs, "tools": tools, "tool_choice": "none",
                   "max_tokens": 40, "temperature": 1, "seed": seed, "stream": True}, stream=True)
    assert st == 200, ev
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in ev if e["choices"])
    assert not any(e["choices"][0]["delta"].get("tool_calls") for e in ev if e["choices"]), ev
    assert text == ch["message"]["content"], (text, ch)
print("  none: 5 seeds, no tool_calls plain or streamed, the same content both ways")
history = msgs + [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_1",
          "type": "function", "function": {"name": "get_weather",
          "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},
          {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}]
st, r = post({"model": "precise", "messages": history, "tools": tools, "max_tokens": 8,
              "temperature": 0})
assert st == 200, r
print("  tool result round trip: 200,", r["choices"][0]["finish_reason"])

# n > 1: each choice is its own sample with its own calls (ids unique across choices)
st, r = post({"model": "precise", "messages": msgs, "tools": tools, "tool_choice": "required",
              "temperature": 1, "seed": 3, "max_tokens": 120, "n": 3})
assert st == 200 and len(r["choices"]) == 3, r
ids = []
for ch in r["choices"]:
    assert ch["finish_reason"] in ("tool_calls", "length"), ch
    for c in ch["message"].get("tool_calls") or []:
        check_call(c)
        ids.append(c["id"])
assert ids and len(ids) == len(set(ids)), ids
st, ev = post({"model": "precise", "messages": msgs, "tools": tools, "tool_choice": "required",
               "temperature": 1, "seed": 3, "max_tokens": 120, "n": 3, "stream": True},
              stream=True)
assert st == 200, ev
per = {}
for e in ev:
    for ch in e["choices"]:
        for tc in ch["delta"].get("tool_calls") or []:
            per.setdefault(ch["index"], []).append(tc["function"]["name"])
want = {i: [c["function"]["name"] for c in ch["message"].get("tool_calls") or []]
        for i, ch in enumerate(r["choices"])}
assert {i: v for i, v in want.items() if v} == per, (want, per)
print("  n=3 with tools:", {i: len(v) for i, v in per.items()}, "calls per choice")

# the other families' formats: Llama 3.1 JSON and Mistral [TOOL_CALLS]
for pool in ("llama", "mistral"):
    n_stop, last = 0, None
    for seed in range(1, 9):
        # odd seeds one call (a random model rarely stops adding calls), even seeds parallel
        st, r = post({"model": pool, "messages": msgs, "tools": tools, "tool_choice": "required",
                      "temperature": 1, "seed": seed, "max_tokens": 120,
                      "parallel_tool_calls": seed % 2 == 0})
        assert st == 200, r
        ch = r["choices"][0]
        if ch["finish_reason"] == "length":
            continue
        n_stop += 1
        assert ch["finish_reason"] == "tool_calls" and ch["message"]["tool_calls"], ch
        assert ch["message"]["content"] is None, ch
        for c in ch["message"]["tool_calls"]:
            check_call(c)
            if pool == "mistral":
                assert len(c["id"]) == 9 and c["id"].isalnum(), c
        last = ch["message"]["tool_calls"][0]
    assert n_stop >= 3, (pool, n_stop)
    n_named = 0
    for seed in range(2, 6):
        st, ev = post({"model": pool, "messages": msgs, "tools": tools, "temperature": 1,
                       "seed": seed, "tool_choice": {"type": "function", "function": {"name": "add"}},
                       "max_tokens": 120, "stream": True}, stream=True)
        assert st == 200, ev
        got, fin = {}, None
        for e in ev:
            for tc in (e["choices"][0]["delta"].get("tool_calls") or []) if e["choices"] else []:
                got.setdefault(tc["index"], tc)
            if e["choices"] and e["choices"][0]["finish_reason"]:
                fin = e["choices"][0]["finish_reason"]
        # a named call must stream: at least one call, every one the named function (a cut by
        # max_tokens is the only way to end without one)
        assert fin in ("tool_calls", "length"), (pool, seed, fin)
        assert fin == "length" or got, (pool, seed, "named streamed call: no delta.tool_calls")
        assert all(c["function"]["name"] == "add" for c in got.values()), got
        n_named += fin == "tool_calls"
    assert n_named >= 2, (pool, "named streamed calls that ended with tool_calls:", n_named)
    history = msgs + [{"role": "assistant", "content": None, "tool_calls": [last]},
                      {"role": "tool", "tool_call_id": last["id"], "content": "{\"temp\": 21}"}]
    st, r = post({"model": pool, "messages": history, "tools": tools, "max_tokens": 8,
                  "temperature": 0})
    assert st == 200, r
    print(f"  {pool}: {n_stop} of 8 required ended with tool_calls, all valid; named streamed;",
          "round trip 200")

# Mistral under auto with strict tools: the model opens the call with its [TOOL_CALLS] control
# token (logit_bias makes it likely, as training does; the grammar refuses control tokens unless
# the router names the format's opening), then the lazy grammar holds the call to the schema.
strict = [dict(t, function=dict(t["function"], strict=True)) for t in tools]
n_calls = 0
for seed in range(1, 6):
    body = {"model": "mistral", "messages": msgs, "tools": strict, "tool_choice": "auto",
            "temperature": 1, "seed": seed, "max_tokens": 120, "logit_bias": {tool_calls_id: 30},
            "parallel_tool_calls": False}
    st, r = post(body)
    assert st == 200, r
    ch = r["choices"][0]
    if ch["finish_reason"] == "length":
        continue
    assert ch["finish_reason"] == "tool_calls" and ch["message"]["tool_calls"], ch
    assert ch["message"]["content"] is None, ch
    for c in ch["message"]["tool_calls"]:
        check_call(c)
    n_calls += 1
    st, ev = post(dict(body, stream=True), stream=True)
    got = {}
    for e in ev:
        for tc in (e["choices"][0]["delta"].get("tool_calls") or []) if e["choices"] else []:
            g = got.setdefault(tc["index"], {"name": "", "arguments": ""})
            g["name"] += tc["function"].get("name") or ""
            g["arguments"] += tc["function"].get("arguments") or ""
    assert [got[i] for i in sorted(got)] == \
        [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
         for c in ch["message"]["tool_calls"]], (got, ch)
assert n_calls >= 3, ("mistral auto + strict: answers that called a tool", n_calls)
print(f"  mistral auto + strict: {n_calls} of 5 opened with the [TOOL_CALLS] control token,",
      "calls valid, streamed alike")

# Llama 3.1 under auto with strict tools: an answer that opens with "{" is held to a call of the
# schema; one that opens otherwise is free text. logit_bias on "{" makes answers open with it.
n_calls = n_text = 0
for seed in range(1, 7):
    for bias in ({brace_id: 30}, {}):
        st, r = post({"model": "llama", "messages": msgs, "tools": strict, "tool_choice": "auto",
                      "temperature": 1, "seed": seed, "max_tokens": 120, "logit_bias": bias,
                      "parallel_tool_calls": False})
        assert st == 200, r
        ch = r["choices"][0]
        if ch["message"].get("tool_calls"):
            assert ch["finish_reason"] == "tool_calls" and ch["message"]["content"] is None, ch
            for c in ch["message"]["tool_calls"]:
                check_call(c)
            n_calls += 1
        else:
            text = ch["message"]["content"] or ""
            assert not text.lstrip().startswith("{"), ch  # such a text would have been a call
            n_text += ch["finish_reason"] in ("stop", "length")
assert n_calls >= 3 and n_text >= 3, ("llama auto + strict: calls, texts", n_calls, n_text)
print(f"  llama auto + strict: {n_calls} calls (valid), {n_text} free texts of 12")

# a template with no tool format refuses tools by name
st, r = post({"model": "fast", "messages": msgs, "tools": tools, "max_tokens": 4})
assert st == 400 and "no tool format" in r["error"]["message"], r
print("  400:", r["error"]["message"][:100])
PY
ok "tool calls: required/named always parse, streamed deltas assemble, round trip renders"
