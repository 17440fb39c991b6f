#!/usr/bin/env bash
# Promise: a reply that comes back in the next turn's messages reaches the worker as the token ids
# it was generated as (router.routing.reply_tokens_mib, on by default), so that turn's prompt
# matches the KV blocks the generation left cached through the whole reply: its cached_tokens are
# every full block of the previous prompt and reply; whole and streamed replies alike; a reply the
# client edited, or sent under another cache_salt (tenant), is re-tokenized (not quoted); with
# --reply-tokens-mib 0 nothing is quoted, and the same turn (re-tokenized) finds fewer tokens cached.
. "$(dirname "$0")/lib.sh"

M="$T_DIR/m.gguf"
# a vocabulary of 8,000 pieces: this seed's replies do not re-tokenize to the ids generated
mkmodel "$M" --preset tiny --vocab 8000 --ctx 2048 --seed 3
start_router
# chatml: the reply sits in the next turn exactly where it was generated (the llama2 template this
# synthetic model carries writes a space between [/INST] and the reply that generation never saw)
start_cpu_worker q1 precise "$M" --set worker.kv.block_size=16 --chat-template chatml
wait_worker q1

conversation() { # NAME EXPECT_QUOTED: turn one, then turn two quoting the reply (both ways)
    python3 - "$BASE" "$(dirname "$0")" "$1" "$2" <<'PY'
import json, re, sys, urllib.request
sys.path.insert(0, sys.argv[2])
import oai_post
base, name, expect = sys.argv[1], sys.argv[3], sys.argv[4] == "1"

def quoted():
    text = urllib.request.urlopen(base + "/metrics").read().decode()
    m = re.search(r'^sol_quoted_replies_total\{pool="precise"\} (\d+)', text, re.M)
    return int(m.group(1)) if m else 0

# no byte tokens (ids 3..258 of this vocabulary) in the reply: alone they are not UTF-8 and the
# client sees U+FFFD, which its ids do not spell (a trained model rarely writes them)
bias = {str(i): -100 for i in range(3, 259)}
def chat(msgs, stream=False, salt="t1"):
    body = {"model": "precise", "messages": msgs, "max_tokens": 24, "temperature": 0,
            "logit_bias": bias, "stream": stream, "cache_salt": salt}
    if stream:
        body["stream_options"] = {"include_usage": True}
    st, r = oai_post.post(base, "/v1/chat/completions", body, stream)
    assert st == 200, (st, r)
    if not stream:
        return r["choices"][0]["message"]["content"], r["usage"]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in r if e["choices"])
    return text, [e for e in r if e.get("usage")][-1]["usage"]

for stream in (False, True):
    sys_msg = {"role": "system", "content": f"Conversation {name} {stream}: answer with care."}
    user = {"role": "user", "content": "Tell me about the harbour and the ships in it."}
    reply, u1 = chat([sys_msg, user], stream)
    assert u1["completion_tokens"] == 24, u1
    before = quoted()
    msgs = [sys_msg, user, {"role": "assistant", "content": reply},
            {"role": "user", "content": "And after that?"}]
    _, u2 = chat(msgs, stream)
    cached = u2["prompt_tokens_details"]["cached_tokens"]
    full = (u1["prompt_tokens"] + 23) // 16 * 16  # all but the last reply id was computed
    got = quoted() - before
    if expect:
        assert got == 1, f"{got} replies quoted, expected 1"
        assert cached == full, f"stream={stream}: {cached} cached tokens, expected {full} " \
            f"(turn one: {u1['prompt_tokens']} prompt + 24 reply)"
        # an edited reply is the client's text, not the model's: tokenized, not quoted
        msgs[2] = {"role": "assistant", "content": reply + " Indeed."}
        chat(msgs, stream)
        assert quoted() - before == 1, "an edited reply was quoted"
        # another tenant (cache_salt) sending the same reply gets no ids: its prompt's length
        # must not tell it what the first tenant was answered
        msgs[2] = {"role": "assistant", "content": reply}
        chat(msgs, stream, salt="t2")
        assert quoted() - before == 1, "a reply was quoted to another cache_salt"
    else:
        assert got == 0 and quoted() == 0, f"{quoted()} replies quoted with the store off"
        # the control: re-tokenized, this reply's ids differ, and the cache stops inside it
        assert cached < full, f"stream={stream}: {cached} cached tokens without quoting"
    print(f"{name} stream={stream}: cached {cached} of {u2['prompt_tokens']} (full blocks of "
          f"turn one: {full}), quoted {got}")
PY
}

conversation a 1 || fail "quoting the reply's ids: see above"
ok "a reply sent back is quoted as its ids; the next turn's cache covers it (whole and streamed)"

# The worker's own account (/admin/workers quotes_used, quotes_declined): the two quotes above were
# used. A reply cut by a stop string streamed fewer bytes than its ids spell: the router still
# sends them, the worker declines them and tokenizes the text.
python3 - "$BASE" "$(dirname "$0")" <<'PY' || fail "a stop string's reply: see above"
import json, sys, time, urllib.request
sys.path.insert(0, sys.argv[2])
import oai_post
base = sys.argv[1]

def quotes():
    w = json.load(urllib.request.urlopen(base + "/admin/workers"))["workers"][0]
    return w["quotes_used"], w["quotes_declined"]

def settle(want):  # the counters come with heartbeats (every 200 ms here)
    for _ in range(50):
        if quotes() == want:
            return
        time.sleep(0.1)
    raise AssertionError(f"quotes_used, quotes_declined = {quotes()}, expected {want}")

settle((2, 0))
bias = {str(i): -100 for i in range(3, 259)}
msgs = [{"role": "system", "content": "A stop string cuts this reply."},
        {"role": "user", "content": "Say something about the sea."}]
def chat(m, **kw):
    st, r = oai_post.post(base, "/v1/chat/completions", dict(
        {"model": "precise", "messages": m, "max_tokens": 24, "temperature": 0,
         "logit_bias": bias, "cache_salt": "t1"}, **kw))
    assert st == 200, (st, r)
    return r["choices"][0]["message"]["content"]
whole = chat(msgs)
cut = chat(msgs, stop=[whole[8:12]])
assert cut == whole[:8], (cut, whole)
chat(msgs + [{"role": "assistant", "content": cut}, {"role": "user", "content": "More?"}])
settle((2, 1))
print("quotes used 2, declined 1 (the stop string's reply)")
PY
ok "the worker counts the quotes it used and declined (a reply cut by a stop string is declined)"

kill "$ROUTER_PID"
wait "$ROUTER_PID" 2>/dev/null || true
start_router --reply-tokens-mib 0
wait_worker q1
conversation b 0 || fail "--reply-tokens-mib 0: see above"
ok "--reply-tokens-mib 0: no reply is quoted"
