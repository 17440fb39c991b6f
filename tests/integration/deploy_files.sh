# Promise: the deploy files start as they are written. Every command of deploy/docker-compose.yaml
# (models, router, both workers, with its Compose secrets made by deploy/secrets.sh: CURVE keys
# and an API key, which the router then requires) and every container command of
# deploy/k8s/sol.yaml (its ConfigMap as the config, CURVE secrets made as its comments say) is run
# here with only addresses and mounts mapped (tests/integration/deploy_run.py), and a chat request
# goes through every pool; both files parse, and no deploy file accepts plain ZMTP beyond
# loopback (allow_insecure / allow_public appear nowhere).
. "$(dirname "$0")/lib.sh"

D=$SOL_SOURCE/deploy
if grep -rn "allow_insecure\|allow_public" "$D" --include=*.yaml; then
    fail "a deploy file turns CURVE off"
fi
mkdir -p "$T_DIR/compose" "$T_DIR/k8s"
python3 "$(dirname "$0")/deploy_run.py" compose "$D/docker-compose.yaml" "$T_DIR/compose" \
    "$SOL_BUILD" "$HTTP_PORT" "$ZMQ_PORT" || fail "docker-compose.yaml: see above"
ok "docker-compose.yaml: secrets, models, router and workers started as written; both pools answer with the API key, 401 without"
HTTP_PORT=$(free_port)
ZMQ_PORT=$(free_port)
python3 "$(dirname "$0")/deploy_run.py" k8s "$D/k8s/sol.yaml" "$T_DIR/k8s" "$SOL_BUILD" \
    "$HTTP_PORT" "$ZMQ_PORT" || fail "k8s/sol.yaml: see above"
ok "k8s/sol.yaml: router and worker commands started as written with its ConfigMap; both pools answer"
