# Promise: the deploy files are valid as what they claim to be. Every object of deploy/k8s/*.yaml
# validates against its schema (the Kubernetes API's, KEDA's ScaledObject, the Prometheus
# operator's ServiceMonitor: tests/e2e/k8s_validate.mjs with the kubernetes-models packages), and
# both Dockerfiles pass a linter (dockerfilelint), and the Compose file passes Compose's own
# `config` (Debian's docker-compose). The check can fail: a Deployment with a string
# replica count is refused. The Kustomize base (deploy/k8s) and overlays (deploy/kustomize/cpu,
# gpu) render with `kubectl kustomize` to objects that validate the same way: the cpu overlay asks
# for no GPU and runs no CUDA backend, the gpu overlay gives every worker a GPU and the CUDA backend;
# a worker on a GPU (and only one) selects GPU nodes and tolerates their taint.
. "$(dirname "$0")/lib.sh"

E=$SOL_SOURCE/tests/e2e
[ -d "$E/node_modules/kubernetes-models" ] && [ -x "$E/node_modules/.bin/dockerfilelint" ] ||
    fail "the validators are not installed: run scripts/setup"
to_json() { # YAML files → one JSON array of objects, Kustomizations left out
python3 - "$@" <<'PY'
import json, sys, yaml
docs = [d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d]
print(json.dumps([d for d in docs if d.get("kind") != "Kustomization"]))
PY
}
to_json "$SOL_SOURCE"/deploy/k8s/*.yaml >"$T_DIR/objs.json"
(cd "$E" && node k8s_validate.mjs <"$T_DIR/objs.json") || fail "a Kubernetes object does not validate"
echo '[{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{"replicas":"two","selector":{},"template":{}}}]' \
    >"$T_DIR/bad.json"
if (cd "$E" && node k8s_validate.mjs <"$T_DIR/bad.json" >/dev/null 2>&1); then
    fail "the validator accepted a string replica count"
fi
ok "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$T_DIR/objs.json") Kubernetes objects validate against their schemas"
# Rollouts: routers wait in preStop for their endpoint's removal to spread, inside their grace
# period; workers drain by migration, well inside theirs.
python3 - "$T_DIR/objs.json" <<'PY' || fail "rollout settings"
import json, sys
deps = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in json.load(open(sys.argv[1]))
        if d["kind"] == "Deployment"}
r = deps["sol-router"]
stop = r["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
assert stop[0] == "sleep" and 5 <= int(stop[1]) < r["terminationGracePeriodSeconds"] - 10, stop
for name, spec in deps.items():
    if name.startswith("sol-worker"):
        assert spec["terminationGracePeriodSeconds"] >= 10, name
print(f"     router preStop: sleep {stop[1]} s of a {r['terminationGracePeriodSeconds']} s grace period")
PY
grep -q "drain: migrate" "$SOL_SOURCE/deploy/k8s/sol.yaml" || fail "the workers' ConfigMap does not say drain: migrate"
for f in "$SOL_SOURCE"/deploy/docker/Dockerfile*; do
    "$E/node_modules/.bin/dockerfilelint" "$f" >"$T_DIR/lint.txt" 2>&1 ||
        fail "$(basename "$f"): $(cat "$T_DIR/lint.txt")"
done
ok "the Dockerfiles pass dockerfilelint"

# Compose's own validation (docker-compose 1.29, Debian's: the Compose Specification), both
# profiles; it can fail: a misspelt key is refused.
if command -v docker-compose >/dev/null 2>&1; then
    for prof in "" "--profile gpu"; do
        # shellcheck disable=SC2086
        docker-compose -f "$SOL_SOURCE/deploy/docker-compose.yaml" $prof config -q \
            2>"$T_DIR/dc.err" || fail "docker-compose config ${prof}: $(cat "$T_DIR/dc.err")"
    done
    sed 's/^    command: \["sol-router"/    comand: ["sol-router"/' \
        "$SOL_SOURCE/deploy/docker-compose.yaml" >"$T_DIR/bad-compose.yaml"
    if docker-compose -f "$T_DIR/bad-compose.yaml" config -q 2>/dev/null; then
        fail "docker-compose accepted a misspelt key"
    fi
    ok "docker-compose config accepts deploy/docker-compose.yaml (default and gpu profiles) and refuses a misspelt key"
else
    skip_test "docker-compose is not installed (run scripts/setup): the Compose file was not" \
        "validated by Compose, nor the Kustomize overlays rendered"
fi

command -v kubectl >/dev/null 2>&1 ||
    skip_test "kubectl is not installed (run scripts/setup): the Kustomize overlays were not rendered"
for d in k8s kustomize/cpu kustomize/gpu; do
    kubectl kustomize "$SOL_SOURCE/deploy/$d" >"$T_DIR/kz.yaml" 2>"$T_DIR/kz.err" ||
        fail "kubectl kustomize deploy/$d: $(cat "$T_DIR/kz.err")"
    to_json "$T_DIR/kz.yaml" >"$T_DIR/kz.json"
    (cd "$E" && node k8s_validate.mjs <"$T_DIR/kz.json" >/dev/null) || fail "deploy/$d: an object does not validate"
    python3 - "$d" "$T_DIR/kz.json" <<'PY' || fail "deploy/$d: wrong GPU placement"
import json, sys
name, objs = sys.argv[1], json.load(open(sys.argv[2]))
workers = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].startswith("sol-worker-")]
assert len(workers) == 2, [o["metadata"]["name"] for o in workers]
for w in workers:
    c = w["spec"]["template"]["spec"]["containers"][0]
    gpu = "nvidia.com/gpu" in json.dumps(c.get("resources", {}))
    cuda = "--backend" in c["command"] and c["command"][c["command"].index("--backend") + 1] == "cuda"
    want = {"kustomize/cpu": False, "kustomize/gpu": True}.get(name)
    if want is not None:
        assert gpu == want and cuda == want and ("cuda" in c["image"]) == want, (w["metadata"]["name"], gpu, cuda, c["image"])
    assert gpu == cuda, (w["metadata"]["name"], "a GPU without the CUDA backend or the reverse")
    spec = w["spec"]["template"]["spec"]
    placed = spec.get("nodeSelector", {}).get("nvidia.com/gpu.present") == "true" and any(
        t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", []))
    assert placed == gpu, (w["metadata"]["name"], "GPU node selector and toleration", placed, gpu)
PY
done
ok "the Kustomize base and the cpu and gpu overlays render and validate"
