# Promise: n > 1 returns n choices (index 0..n-1), sample i being exactly the single request with
# seed + i; streamed, the chunks carry each choice's index and assemble to the same texts, with
# usage counting the prompt once and every choice's tokens, logprobs per choice; n above 16 is
# a 400. The samples share one prefill: they all go to one worker (of two), which computes the
# long prompt once and serves the others from its prefix cache (the pool's prefix-cache counters
# show it), and each sample still equals its single request.
. "$(dirname "$0")/lib.sh"

M=$T_DIR/m.gguf
mkmodel "$M" --seed 37
start_router
start_worker wf fast 1 1000
start_cpu_worker w precise "$M"
start_cpu_worker w2 precise "$M"
wait_ready
wait_worker w
wait_worker w2

python3 - "$BASE" "$(dirname "$0")" <<'PY' || fail "n > 1: see above"
import json, sys
sys.path.insert(0, sys.argv[2])
import oai_post
base = sys.argv[1]

def post(path, body, stream=False):
    return oai_post.post(base, path, body, stream)

for path, key in (("/v1/completions", "prompt"), ("/v1/chat/completions", "messages")):
    def body(n, seed, **kw):
        b = {"model": "precise", "max_tokens": 12, "temperature": 1, "seed": seed, "n": n}
        b[key] = "three samples" if key == "prompt" else [{"role": "user", "content": "three samples"}]
        b.update(kw)
        return b
    text = (lambda c: c["text"]) if key == "prompt" else (lambda c: c["message"]["content"])
    st, r = post(path, body(3, 40))
    assert st == 200 and [c["index"] for c in r["choices"]] == [0, 1, 2], r
    singles = []
    for i in range(3):
        st1, r1 = post(path, body(1, 40 + i))
        singles.append(text(r1["choices"][0]))
        assert text(r["choices"][i]) == singles[i], (i, r["choices"][i], singles[i])
        assert r["choices"][i]["finish_reason"] == r1["choices"][0]["finish_reason"]
    assert r["usage"]["completion_tokens"] == 3 * 12, r["usage"]
    assert r["usage"]["prompt_tokens"] == r1["usage"]["prompt_tokens"], r["usage"]
    assert len(set(singles)) > 1, singles
    st, ev = post(path, body(3, 40, stream=True, stream_options={"include_usage": True}),
                  stream=True)
    assert st == 200
    got, fins, usage = ["", "", ""], {}, None
    for e in ev:
        if e.get("usage"):
            usage = e["usage"]
        for c in e["choices"]:
            got[c["index"]] += c["text"] if key == "prompt" else (c["delta"].get("content") or "")
            if c["finish_reason"]:
                fins[c["index"]] = c["finish_reason"]
    assert got == singles and sorted(fins) == [0, 1, 2], (got, singles, fins)
    assert usage and usage["completion_tokens"] == 36, usage
    print(f"  {path}: n=3 equals seeds 40, 41, 42 one by one; streamed the same")
# logprobs per choice: each choice's equal the single request's
st, r = post("/v1/completions", {"model": "precise", "prompt": "x y", "max_tokens": 4, "n": 2,
                                 "seed": 7, "temperature": 1, "logprobs": 2})
assert st == 200, r
for i in range(2):
    st1, r1 = post("/v1/completions", {"model": "precise", "prompt": "x y", "max_tokens": 4,
                                       "seed": 7 + i, "temperature": 1, "logprobs": 2})
    assert r["choices"][i]["logprobs"] == r1["choices"][0]["logprobs"], (i, r, r1)
print("  n=2 with logprobs: each choice's logprobs equal its single request's")
# one prefill for n samples of a long prompt: on one worker, the prompt computed once
import urllib.request
def counters():
    m = urllib.request.urlopen(base + "/metrics").read().decode()
    get = lambda name: sum(float(l.split()[-1]) for l in m.splitlines()
                           if l.startswith(name + "{") and 'pool="precise"' in l)
    return get("vllm:prefix_cache_hits_total"), get("vllm:prefix_cache_queries_total")
def served():
    w = json.loads(urllib.request.urlopen(base + "/admin/workers").read())["workers"]
    return {x["id"]: x["served"] for x in w if x["pool"] == "precise"}
long = " ".join(f"w{i}" for i in range(60))
h0, q0 = counters()
s0 = served()
st, r = post("/v1/completions", {"model": "precise", "prompt": long, "max_tokens": 4, "n": 4,
                                 "seed": 11, "temperature": 1})
assert st == 200 and len(r["choices"]) == 4, r
h1, q1 = counters()
s1 = served()
gained = sorted(s1[k] - s0.get(k, 0) for k in s1)
assert gained[-1] == 4 and sum(gained) == 4, (s0, s1)  # all four on one worker
p = r["usage"]["prompt_tokens"]
assert q1 - q0 == 4 * p and h1 - h0 >= 3 * (p // 16 * 16 - 16), (h1 - h0, q1 - q0, p)
for i in range(4):
    st1, r1 = post("/v1/completions", {"model": "precise", "prompt": long, "max_tokens": 4,
                                       "seed": 11 + i, "temperature": 1})
    assert r1["choices"][0]["text"] == r["choices"][i]["text"], (i, r, r1)
print(f"  n=4 of a {p}-token prompt: one worker, {int(h1 - h0)} of {int(q1 - q0)} prompt tokens "
      "from the prefix cache; each sample equals its single request")
st, r = post("/v1/completions", {"model": "precise", "prompt": "x", "max_tokens": 2, "n": 17})
assert st == 400 and r["error"]["param"] == "n", r
print("  400 for n = 17")
PY
ok "n > 1: choices equal their single-seed requests, streamed by index, usage summed"
