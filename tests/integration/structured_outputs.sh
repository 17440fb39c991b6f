# Promise: with a random-weight model (which never writes JSON by itself) at temperature 1, every
# response_format json_schema output that ends with finish_reason "stop" parses and satisfies its
# schema (nested objects, arrays, enums, $ref), json_object outputs are objects, guided_regex
# outputs match, guided_choice returns a choice, GBNF grammars hold, and every output cut by
# max_tokens ("length") is a valid prefix of such an output (json_prefix.py, a parser independent
# of Sol's matcher, for the JSON cases); the same inside a batch of
# 16 concurrent mixed requests on a worker that speculates (drafts verified against the grammar),
# on both endpoints;
# bad constraints are 400s naming the field; logit_bias steers the draw and an id outside the
# vocabulary is a 400; unknown request fields are refused.
. "$(dirname "$0")/lib.sh"

M=$T_DIR/m.gguf
mkmodel "$M" --seed 21
mkmodel "$T_DIR/draft.gguf" --draft-of "$M" --layers 1
start_router
start_worker wf fast 1 1000
start_cpu_worker w precise "$M" --draft-model "$T_DIR/draft.gguf"
wait_ready
wait_worker w

python3 - "$BASE" "$(dirname "$0")" <<'PY' || fail "structured outputs: see above"
import itertools, json, re, sys, threading, urllib.request
sys.path.insert(0, sys.argv[2])
import json_prefix, oai_post
base = sys.argv[1]

def post(path, body):
    return oai_post.post(base, path, body)

person = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 10},
    "age": {"type": "integer"},
    "role": {"enum": ["admin", "user", "guest"]},
    "pets": {"type": "array", "items": {"$ref": "#/$defs/pet"}, "maxItems": 2}},
    "required": ["name", "age", "role"], "additionalProperties": False,
    "$defs": {"pet": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]},
              "legs": {"type": "integer"}}, "required": ["kind"]}}}

def check_person(v):
    assert isinstance(v, dict) and set(v) <= {"name", "age", "role", "pets"}, v
    assert isinstance(v["name"], str) and len(v["name"]) <= 10, v
    assert isinstance(v["age"], int) and v["role"] in ("admin", "user", "guest"), v
    for p in v.get("pets", []):
        assert p["kind"] in ("cat", "dog") and set(p) <= {"kind", "legs"}, p
        assert isinstance(p.get("legs", 0), int), p

def completion(kind, seed, extra, max_tokens=160):
    body = {"model": "precise", "max_tokens": max_tokens, "temperature": 1, "seed": seed}
    body.update(extra)
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": "Describe a person as JSON."}]
        st, r = post("/v1/chat/completions", body)
        c = r["choices"][0] if st == 200 else None
        return st, r, (c["message"]["content"] if c else None), (c["finish_reason"] if c else None)
    body["prompt"] = "A person as JSON:"
    st, r = post("/v1/completions", body)
    c = r["choices"][0] if st == 200 else None
    return st, r, (c["text"] if c else None), (c["finish_reason"] if c else None)

schema_fmt = {"response_format": {"type": "json_schema",
              "json_schema": {"name": "person", "schema": person, "strict": True}}}
stops = {}
def run(name, kind, seed, extra, check, max_tokens=160):
    st, r, text, fin = completion(kind, seed, extra, max_tokens)
    assert st == 200, (name, st, r)
    stops.setdefault(name, [0, 0, 0])[0] += 1
    assert fin in ("stop", "length"), (name, fin)
    stops[name][1 if fin == "stop" else 2] += 1
    try:
        check(text, fin == "stop")
    except (AssertionError, ValueError) as e:
        raise AssertionError(f"{name} seed {seed} ({fin}): {e!r}: {text!r}")

def must(ok, t):
    if not ok:
        raise AssertionError(t)

# the finite languages are checked against every string they hold (a prefix must start one)
REGEX_LANG = [f"{a}, {n}!" for a in ("yes", "no") for k in (2, 3)
              for n in ("".join(d) for d in itertools.product("0123456789", repeat=k))]
CHOICES = ["red", "green", "blue"]
def in_lang(lang, t, complete):
    must(t in lang if complete else any(s.startswith(t) for s in lang), t)
def check_grammar(t, complete):
    if complete:
        must(re.fullmatch(r"\[[a-c]{1,3}(,[a-c]{1,3})*\]", t), t)
    else:  # a prefix: "[", then items of 1-3 letters separated by commas, maybe the "]" (a cut
        # can fall right at the end)
        must(re.fullmatch(r"(\[([a-c]{1,3}(,[a-c]{1,3})*(,|\])?)?)?", t), t)
def check_schema(t, complete):
    json_prefix.check(t, person, complete)
    if complete:
        check_person(json.loads(t))

cases = [
    ("json_schema", schema_fmt, check_schema),
    ("json_object", {"response_format": {"type": "json_object"}},
     lambda t, complete: json_prefix.check(t, {"type": "object"}, complete)),
    ("guided_regex", {"guided_regex": "(yes|no), [0-9]{2,3}!"},
     lambda t, complete: in_lang(REGEX_LANG, t, complete)),
    ("guided_choice", {"guided_choice": CHOICES},
     lambda t, complete: in_lang(CHOICES, t, complete)),
    ("grammar", {"grammar": 'root ::= "[" [a-c]{1,3} ("," [a-c]{1,3})* "]"'}, check_grammar),
    ("guided_json", {"guided_json": person}, check_schema),
]
for name, extra, check in cases:
    for seed in range(1, 51 if name == "json_schema" else 11):
        run(name, "chat" if seed % 2 else "completion", seed, extra, check)
    for seed in range(1, 5):  # max_tokens 5: mostly cut, each must be a valid prefix
        run(name + "-short", "chat" if seed % 2 else "completion", seed, extra, check, 5)
assert sum(v[2] for k, v in stops.items() if k.endswith("-short")) >= 12, stops
# Constrained requests speculate too: their drafts were verified against the grammar's masks.
import time
time.sleep(0.6)  # a heartbeat carries the counters
m = urllib.request.urlopen(base + "/metrics").read().decode()
steps = sum(float(l.split()[-1]) for l in m.splitlines()
            if l.startswith("sol_worker_spec_verify_steps_total{"))
assert steps > 0, "no verify step ran for the constrained requests"
print(f"  constrained requests alone: {steps:.0f} speculative verify steps")
# 16 concurrent mixed requests (constrained and not)
errors = []
def one(i):
    try:
        name, extra, check = cases[i % len(cases)]
        if i % 4 == 3:
            st, r = post("/v1/completions", {"model": "precise", "prompt": "plain", "max_tokens": 30,
                                             "temperature": 0})
            assert st == 200, r
        else:
            run(name + "-batch", "chat" if i % 2 else "completion", 100 + i, extra, check)
    except Exception as e:
        errors.append(repr(e))
ts = [threading.Thread(target=one, args=(i,)) for i in range(16)]
[t.start() for t in ts]
[t.join() for t in ts]
assert not errors, errors
for name, (n, ok, cut) in sorted(stops.items()):
    print(f"  {name}: {ok} of {n} ended with stop, all valid; {cut} cut by max_tokens, valid prefixes")
assert stops["json_schema"][1] >= 25, stops["json_schema"]

def bad(body, needle, path="/v1/chat/completions"):
    body.setdefault("messages", [{"role": "user", "content": "x"}])
    st, r = post(path, body)
    assert st == 400 and needle in r["error"]["message"], (st, r)
    print("  400:", r["error"]["message"][:110])
bad({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
     {"type": "string", "format": "color"}}}}, "schema.format: unsupported format")
bad({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
     {"type": "array", "contains": {"type": "integer"}}}}}, "schema.contains: unsupported")
bad({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "cannot be combined")
bad({"grammar": "root ::= undefined-rule"}, "never defined")
bad({"guided_regex": "a(?=b)"}, "lookaround")
bad({"response_format": {"type": "xml"}}, "response_format.type")
bad({"guided_choice": []}, "guided_choice")
bad({"logit_bias": {"999999": 5}}, "outside the vocabulary")
bad({"frobnicate": 1}, "Unrecognized request argument supplied: frobnicate")
# logit_bias: +100 on the byte token "A" (id 3 + 65 in the synthetic vocabulary) wins every draw
st, r = post("/v1/completions", {"model": "precise", "prompt": "x", "max_tokens": 5,
                                 "temperature": 1, "seed": 3, "logit_bias": {"68": 100}})
assert st == 200 and r["choices"][0]["text"] == "AAAAA", r
print("  logit_bias {68: 100}:", r["choices"][0]["text"])
PY
ok "structured outputs: every output that stopped is valid, every cut one a valid prefix (random weights, temperature 1)"
