#!/usr/bin/env bash
# Promise: deploy/grafana/sol.json is a well-formed Grafana dashboard (unique panel ids, a data
# source on every query, no overlapping panels) and every metric its queries name is one the
# router's /metrics exports (checked against a running router and worker), so no panel is empty
# for want of a series; the token counters behind its throughput panels count a request's usage.
. "$(dirname "$0")/lib.sh"
DASH=$SOL_SOURCE/deploy/grafana/sol.json
names=$(python3 - "$DASH" <<'PYEOF'
import json, re, sys
d = json.load(open(sys.argv[1]))
ids, names, cells = set(), set(), set()
for p in d["panels"]:
    assert p["id"] not in ids, f"duplicate panel id {p['id']}"
    ids.add(p["id"])
    g = p["gridPos"]
    for x in range(g["x"], g["x"] + g["w"]):
        for y in range(g["y"], g["y"] + g["h"]):
            assert (x, y) not in cells, f"panel {p['id']} ({p['title']}) overlaps another at {x},{y}"
            cells.add((x, y))
    if p["type"] == "row":
        continue
    assert p.get("datasource") and p["targets"], f"panel {p['title']}: no data source or query"
    for t in p["targets"]:
        assert t.get("datasource") and t["expr"].strip(), f"panel {p['title']}: empty query"
        for m in re.findall(r"\b(sol_[a-z0-9_]+|vllm:[a-z0-9_:]+)", t["expr"]):
            names.add(re.sub(r"_(bucket|sum|count)$", "", m))
for v in d["templating"]["list"]:
    for m in re.findall(r"\b(sol_[a-z0-9_]+|vllm:[a-z0-9_:]+)", json.dumps(v.get("query", ""))):
        names.add(m)
print("\n".join(sorted(names)))
PYEOF
) || fail "dashboard check failed"
[ "$(wc -l <<<"$names")" -ge 20 ] || fail "expected the dashboard to query 20+ metrics, found: $names"

start_router
start_worker w1 fast 5 2000
wait_worker w1
post /v1/completions '{"model":"fast","prompt":"hello","max_tokens":5}' >/dev/null
[ "$(status)" = 200 ] || fail "completion: $(status) $(cat "$T_DIR/body")"
curl -s "$BASE/metrics" >"$T_DIR/metrics"
missing=""
for n in $names; do
  grep -q "^# TYPE $n " "$T_DIR/metrics" || missing+=" $n"
done
[ -z "$missing" ] || fail "the dashboard queries metrics /metrics does not export:$missing"
grep -q '^sol_generation_tokens_total{pool="fast"} 5$' "$T_DIR/metrics" ||
  fail "sol_generation_tokens_total: $(grep generation_tokens "$T_DIR/metrics")"
grep -q '^sol_prompt_tokens_total{pool="fast"} [1-9]' "$T_DIR/metrics" ||
  fail "sol_prompt_tokens_total: $(grep prompt_tokens "$T_DIR/metrics")"
ok "$(wc -l <<<"$names") metrics queried, all exported; token counters count usage"
