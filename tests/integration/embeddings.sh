# Promise: POST /v1/embeddings returns, for each input (a string or a list), the last token's
# final hidden state L2-normalized (model dim floats), the same vector alone or in a list
# (batch-invariant), as floats or base64 float32, with usage counting every input's tokens;
# dimensions, token arrays, empty inputs and unknown fields are 400s naming them. A model whose
# GGUF says pooling_type 1 is mean-pooled (the same weights give another, still normalized and
# batch-invariant vector); a bad worker.embedding_pooling is refused naming the key.
. "$(dirname "$0")/lib.sh"

M=$T_DIR/m.gguf
mkmodel "$M" --seed 41
mkmodel "$T_DIR/mean.gguf" --seed 41 --pooling-type 1
if "$WORKER_BIN" --backend cpu --model "$M" --embedding-pooling median --router tcp://127.0.0.1:1 \
    >"$T_DIR/bad.log" 2>&1; then fail "--embedding-pooling median was accepted"; fi
grep -q "worker.embedding_pooling" "$T_DIR/bad.log" || fail "no key named: $(cat "$T_DIR/bad.log")"
start_router
start_cpu_worker wf fast "$T_DIR/mean.gguf"
start_cpu_worker w precise "$M"
wait_ready
wait_worker w
wait_worker wf
grep -q "mean pooling (the model's pooling_type)" "$T_DIR/worker-wf.log" || fail "wf does not pool by mean"

python3 - "$BASE" "$(dirname "$0")" <<'PY' || fail "embeddings: see above"
import base64, json, math, struct, sys
sys.path.insert(0, sys.argv[2])
import oai_post
base = sys.argv[1]

def post(body, path="/v1/embeddings"):
    return oai_post.post(base, path, body)

st, one = post({"model": "precise", "input": "the quick brown fox"})
assert st == 200 and one["object"] == "list" and one["data"][0]["object"] == "embedding", one
v = one["data"][0]["embedding"]
assert len(v) == 64 and abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5, (len(v), v[:4])
st, many = post({"model": "precise", "input": ["a cat", "the quick brown fox", "a cat"]})
assert st == 200 and [d["index"] for d in many["data"]] == [0, 1, 2], many
vs = [d["embedding"] for d in many["data"]]
assert vs[1] == v, "the same input gave another vector inside a list"
assert vs[0] == vs[2] and vs[0] != vs[1]
st, c1 = post({"model": "precise", "prompt": "a cat", "max_tokens": 1}, "/v1/completions")
st, c2 = post({"model": "precise", "prompt": "the quick brown fox", "max_tokens": 1},
              "/v1/completions")
want = 2 * c1["usage"]["prompt_tokens"] + c2["usage"]["prompt_tokens"]
assert many["usage"] == {"prompt_tokens": want, "total_tokens": want}, (many["usage"], want)
st, b64 = post({"model": "precise", "input": "the quick brown fox", "encoding_format": "base64"})
raw = base64.b64decode(b64["data"][0]["embedding"])
assert list(struct.unpack("<64f", raw)) == [struct.unpack("<f", struct.pack("<f", x))[0] for x in v]
print(f"  dim {len(v)}, |v| = 1, batch-invariant, usage {many['usage']}, base64 = floats")
for body, needle in (({"input": "x", "dimensions": 8}, "dimensions"),
                     ({"input": [[1, 2, 3]]}, "token-id arrays"),
                     ({"input": ""}, "non-empty"),
                     ({"input": "x", "frobnicate": 1}, "Unrecognized request argument"),
                     ({"model": "precise"}, "'input' is required")):
    st, r = post(body)
    assert st == 400 and needle in r["error"]["message"], (body, st, r)
print("  400 for dimensions, token arrays, empty input, unknown fields, no input")
st, m1 = post({"model": "fast", "input": "the quick brown fox"})
st, m3 = post({"model": "fast", "input": ["a cat", "the quick brown fox"]})
mv = m1["data"][0]["embedding"]
assert st == 200 and abs(math.sqrt(sum(x * x for x in mv)) - 1) < 1e-5, mv[:4]
assert mv != v and m3["data"][1]["embedding"] == mv, "mean pooling: same as last, or not batch-invariant"
print("  mean-pooled (the GGUF's pooling_type): normalized, unlike last, batch-invariant")
PY
ok "embeddings: normalized last-token vectors, batch-invariant, float and base64, usage"
