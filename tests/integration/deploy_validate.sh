# Promise: the deploy files are valid as what they claim to be. Every object of deploy/k8s/*.yaml
# validates against its schema (the Kubernetes API's, KEDA's ScaledObject, the Prometheus
# operator's ServiceMonitor: tests/e2e/k8s_validate.mjs with the kubernetes-models packages), and
# both Dockerfiles pass a linter (dockerfilelint). The check can fail: a Deployment with a string
# replica count is refused.
. "$(dirname "$0")/lib.sh"

E=$SOL_SOURCE/tests/e2e
[ -d "$E/node_modules/kubernetes-models" ] && [ -x "$E/node_modules/.bin/dockerfilelint" ] ||
    fail "the validators are not installed: run scripts/setup"
python3 - "$SOL_SOURCE"/deploy/k8s/*.yaml >"$T_DIR/objs.json" <<'PY'
import json, sys, yaml
print(json.dumps([d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d]))
PY
(cd "$E" && node k8s_validate.mjs <"$T_DIR/objs.json") || fail "a Kubernetes object does not validate"
echo '[{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{"replicas":"two","selector":{},"template":{}}}]' \
    >"$T_DIR/bad.json"
if (cd "$E" && node k8s_validate.mjs <"$T_DIR/bad.json" >/dev/null 2>&1); then
    fail "the validator accepted a string replica count"
fi
ok "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$T_DIR/objs.json") Kubernetes objects validate against their schemas"
for f in "$SOL_SOURCE"/deploy/docker/Dockerfile*; do
    "$E/node_modules/.bin/dockerfilelint" "$f" >"$T_DIR/lint.txt" 2>&1 ||
        fail "$(basename "$f"): $(cat "$T_DIR/lint.txt")"
done
ok "the Dockerfiles pass dockerfilelint"
