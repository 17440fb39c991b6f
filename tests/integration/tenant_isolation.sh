# Promise: tenants never share prefix-cache blocks. The same long prompt under another
# cache_salt (or none) is computed from scratch: its usage reports no cached tokens (block
# accounting) and it takes cold-cache time, while a repeat under the first salt is served from
# the cache (cached tokens = the prompt's full blocks) and is fast.
. "$(dirname "$0")/lib.sh"

# About a millisecond per token (as cluster_real.sh): a 1,000-token prefill takes a while.
mkmodel "$T_DIR/m.gguf" --preset tiny --dim 256 --ffn 768 --layers 4 --ctx 2048 --seed 9
printf 'router:\n  routing: {pools: [precise], default_pool: precise}\n' >"$T_DIR/router.yaml"
start_router --config "$T_DIR/router.yaml"
start_cpu_worker w precise "$T_DIR/m.gguf"
wait_ready 300
wait_worker w

python3 - "$BASE" <<'PY' || fail "tenant isolation: see above"
import json, sys, time, urllib.request
base = sys.argv[1]
prompt = " ".join(f"clause{i} of the shared system prompt" for i in range(50))

def ask(salt):
    body = {"model": "precise", "prompt": prompt, "max_tokens": 1, "temperature": 0}
    if salt is not None:
        body["cache_salt"] = salt
    req = urllib.request.Request(base + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t = time.time()
    with urllib.request.urlopen(req, timeout=120) as r:
        out = json.loads(r.read())
    u = out["usage"]
    return time.time() - t, u.get("prompt_tokens_details", {}).get("cached_tokens", 0), u["prompt_tokens"]

cold, c0, n = ask("tenant-a")
warm, c1, _ = ask("tenant-a")
other, c2, _ = ask("tenant-b")
none, c3, _ = ask(None)
again_b, c4, _ = ask("tenant-b")
print(f"  {n}-token prompt: tenant-a cold {cold*1000:.0f} ms ({c0} cached), repeat {warm*1000:.0f} ms "
      f"({c1} cached); tenant-b {other*1000:.0f} ms ({c2} cached); no salt {none*1000:.0f} ms "
      f"({c3} cached); tenant-b repeat {again_b*1000:.0f} ms ({c4} cached)")
assert c0 == 0 and c2 == 0 and c3 == 0, "a tenant got another tenant's blocks"
assert c1 >= n // 16 * 16 - 16 and c4 == c1, "a tenant's own repeat missed its cache"
assert warm < 0.6 * cold, "the warm repeat was not faster: the cache did not serve it"
assert other > 1.5 * warm and none > 1.5 * warm, "another tenant ran at warm-cache speed"
PY
ok "different cache_salt: no shared blocks (0 cached tokens) and cold-cache time; the same salt hits"
