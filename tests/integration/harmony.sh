# Promise: a gpt-oss model served with the harmony chat template answers chat requests as vLLM
# does for gpt-oss - the analysis channel as message.reasoning_content, the final channel as
# content (no harmony markers left in either), streamed as reasoning_content deltas then content
# deltas that add up to the same text; tool_choice "required" gives a call on the commentary
# channel (name from its recipient, arguments valid JSON against the function's parameters) with
# finish_reason tool_calls; the tool result round trip renders, with the call's reasoning handed
# back as the assistant message's reasoning_content. The model has harmony's control
# tokens; random weights, so guided_grammar makes it speak harmony (the markers are control
# tokens the worker shows as text only because the router asks for them).
. "$(dirname "$0")/lib.sh"

M=$T_DIR/oss.gguf
mkmodel "$M" --arch gpt-oss --dim 64 --heads 4 --kv-heads 2 --ffn 64 --experts 4 \
    --experts-used 2 --sliding-window 8 --vocab 512 --ctx 1024 --layers 2 --seed 9 \
    --control-token '<|start|>' --control-token '<|message|>' --control-token '<|channel|>' \
    --control-token '<|end|>' --control-token '<|return|>' --control-token '<|call|>' \
    --control-token '<|constrain|>'
start_router
start_worker wp precise 1 1000
start_cpu_worker oss fast "$M" --chat-template harmony
wait_ready
wait_worker oss

python3 - "$BASE" "$(dirname "$0")" <<'PY' || fail "harmony: see above"
import json, sys
sys.path.insert(0, sys.argv[2])
import oai_post
base = sys.argv[1]

def post(body, stream=False):
    return oai_post.post(base, "/v1/chat/completions", dict(body, model="fast"), stream)

grammar = ('root ::= "<|channel|>analysis<|message|>" w "<|end|><|start|>assistant'
           '<|channel|>final<|message|>" w\nw ::= [a-z] [a-z] [a-z]? [a-z]? " " [a-z] [a-z]?\n')
msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
st, r = post({"messages": msgs, "max_tokens": 200, "temperature": 0, "guided_grammar": grammar})
assert st == 200, (st, r)
m = r["choices"][0]["message"]
why, text = m.get("reasoning_content"), m["content"]
assert why and text, m
for s in (why, text):
    assert "<|" not in s and 4 <= len(s) <= 8 and " " in s, m
assert r["choices"][0]["finish_reason"] == "stop", r
# the prompt is harmony's: a system message with the channels and a developer message
assert r["usage"]["prompt_tokens"] > 60, r["usage"]

st, ev = post({"messages": msgs, "max_tokens": 200, "temperature": 0, "guided_grammar": grammar,
               "stream": True}, stream=True)
assert st == 200, (st, ev)
deltas = [e["choices"][0]["delta"] for e in ev if e.get("choices")]
r_parts = [d["reasoning_content"] for d in deltas if "reasoning_content" in d]
c_parts = [d["content"] for d in deltas if d.get("content")]
assert "".join(r_parts) == why and "".join(c_parts) == text, (deltas, why, text)
first_content = next(i for i, d in enumerate(deltas) if d.get("content"))
last_reasoning = max(i for i, d in enumerate(deltas) if "reasoning_content" in d)
assert last_reasoning < first_content, deltas

tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
          "parameters": {"type": "object", "properties": {
              "city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}},
              "required": ["city", "unit"], "additionalProperties": False}}}]
st, r = post({"messages": msgs, "tools": tools, "tool_choice": "required", "max_tokens": 300,
              "temperature": 1, "seed": 4})
assert st == 200, (st, r)
c = r["choices"][0]
assert c["finish_reason"] == "tool_calls", c
call = c["message"]["tool_calls"][0]
assert call["function"]["name"] == "get_weather", call
args = json.loads(call["function"]["arguments"])
assert set(args) == {"city", "unit"} and args["unit"] in ("c", "f"), args
assert not c["message"]["content"], c

# the round trip: the call and its result go back into a harmony prompt
back = msgs + [{"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": call["id"], "content": "{\"t\": 3}"}]
st, r2 = post({"messages": back, "tools": tools, "max_tokens": 4, "temperature": 0})
assert st == 200, (st, r2)
assert r2["usage"]["prompt_tokens"] > r["usage"]["prompt_tokens"], (r2["usage"], r["usage"])
# the reasoning handed back with the call (this tool loop's analysis) goes into the prompt too
back[2]["reasoning_content"] = "need the weather first"
st, r3 = post({"messages": back, "tools": tools, "max_tokens": 4, "temperature": 0})
assert st == 200, (st, r3)
assert r3["usage"]["prompt_tokens"] > r2["usage"]["prompt_tokens"], (r3["usage"], r2["usage"])
print("harmony: reasoning %r, content %r, call %s(%s)" % (why, text, call["function"]["name"],
                                                         call["function"]["arguments"]))
PY
ok "harmony: reasoning_content and content apart (whole and streamed), a required call, its round trip"
