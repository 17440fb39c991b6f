# Promise: deploy/docker-compose.yaml runs as written in a real Docker engine. The images are built
# by `docker build` (deploy/docker/images.sh: the Debian base by debootstrap, imported); the CPU
# stack comes up with the secrets of deploy/secrets.sh and the demo models; every healthcheck turns
# healthy; the official openai client is served through the published port with the API key (401
# without); a worker container with an unknown CURVE key is refused; --scale worker-fast=3 gives
# three fast workers, all of which serve; `docker kill` of the worker serving a greedy stream leaves
# the stream identical; `docker-compose restart` of each worker service under greedy, seeded and
# grammar-constrained streams moves them (worker.drain = migrate) with every text unchanged and
# each worker out within 5 s of its SIGTERM; key rotation as documented works on the running stack
# (the new key admitted, the retired one refused); `down -v` leaves no container or volume.
# ctest-timeout: 900
# ctest-run-serial
. "$(dirname "$0")/lib.sh"

SRC=$SOL_SOURCE
command -v docker-compose >/dev/null || skip_test "no docker-compose (scripts/setup installs it)"
if ! docker info >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null || skip_test "no Docker engine, and none can be started here (root and docker.io: scripts/setup)"
    SOL_DOCKERD_STATE=$T_DIR/dockerd.pid "$SRC/scripts/docker-engine" start >/dev/null ||
        fail "could not start a Docker engine"
    STARTED_ENGINE=1
fi
t0=$SECONDS
"$SRC/deploy/docker/images.sh" >"$T_DIR/images.log" 2>&1 || fail "images: $(tail -5 "$T_DIR/images.log")"
echo "     $(grep '^images: sol:latest' "$T_DIR/images.log") ($((SECONDS - t0)) s with the base)"

P=solct$$
SEC=$T_DIR/secrets
export SOL_SECRETS=$SEC SOL_HTTP_PORT
SOL_HTTP_PORT=$(free_port)
BASE=http://127.0.0.1:$SOL_HTTP_PORT
DC=(docker-compose -p "$P" -f "$SRC/deploy/docker-compose.yaml")
T_ON_EXIT='docker rm -f "$P-rogue" >/dev/null 2>&1; "${DC[@]}" logs --no-color >"$T_DIR/compose.log" 2>&1; "${DC[@]}" down -v --remove-orphans -t 2 >/dev/null 2>&1; [ -n "${STARTED_ENGINE:-}" ] && SOL_DOCKERD_STATE=$T_DIR/dockerd.pid "$SRC/scripts/docker-engine" stop >/dev/null'
"$SRC/deploy/secrets.sh" "$SEC" >/dev/null || fail "deploy/secrets.sh"
KEY=$(head -1 "$SEC/api-keys")
AUTH=(-H "Authorization: Bearer $KEY")

"${DC[@]}" up -d >"$T_DIR/up.log" 2>&1 || fail "compose up: $(tail -5 "$T_DIR/up.log")"
ok "docker-compose up -d: models written by the one-shot service (as uid 10001 into a fresh volume)"
cid() { "${DC[@]}" ps -q "$1"; }
wait_healthy() { # SERVICE...: every container of each turns healthy
    local s c
    for s in "$@"; do
        for c in $(cid "$s"); do
            for _ in $(seq 120); do
                [ "$(docker inspect -f '{{.State.Health.Status}}' "$c")" = healthy ] && continue 2
                sleep 1
            done
            fail "$s ($c) never turned healthy: $(docker inspect -f '{{json .State.Health}}' "$c" | cut -c 1-400)"
        done
    done
}
wait_healthy router worker-fast worker-precise
ok "router, worker-fast and worker-precise healthy"

[ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/v1/models")" = 401 ] || fail "the router serves without the API key"
(cd "$SRC/tests/e2e" && timeout 120 node openai_deploy.mjs "$BASE" "$KEY") >"$T_DIR/openai.log" 2>&1 ||
    fail "openai client: $(cat "$T_DIR/openai.log")"
ok "official openai client through the published port: $(grep -c '^ok' "$T_DIR/openai.log") checks, 401 without the key"

fields() { # FIELD: "id value" per worker
    curl -s "$BASE/admin/workers" "${AUTH[@]}" | python3 -c '
import json, sys
for w in json.load(sys.stdin)["workers"]:
    print(w["id"], w["pool"], w.get(sys.argv[1], ""))' "$1"
}
n_workers() { fields pool | awk -v p="$1" '$2 == p' | wc -l; }
refused() { "${DC[@]}" logs --no-color router 2>/dev/null | grep -c "refused a worker connection" || true; }

# --- a worker with an unknown CURVE key is refused ---------------------------------------------
rogue() { # KEYFILE: a worker container on the stack's network with that key pair
    docker rm -f "$P-rogue" >/dev/null 2>&1 || true
    mkdir -p "$T_DIR/rogue" && cp "$1" "$T_DIR/rogue/w.key" && cp "$SEC/router.pub" "$T_DIR/rogue/"
    docker run -d --name "$P-rogue" --user root --network "${P}_default" -v "${P}_models:/models:ro" \
        -v "$T_DIR/rogue:/k:ro" sol:latest sol-worker --router tcp://router:5555 --pool fast \
        --id rogue --model /models/demo-q4_0.gguf --curve-secret-key /k/w.key \
        --curve-server-key /k/router.pub >/dev/null
}
before=$(refused)
"$SOL_BUILD/tools/sol-keygen" -d "$T_DIR" stranger >/dev/null
rogue "$T_DIR/stranger.key"
for _ in $(seq 100); do [ "$(refused)" -gt "$before" ] && break; sleep 0.2; done
[ "$(refused)" -gt "$before" ] || fail "the router logged no refusal of the unknown key"
grep -q '^rogue ' <<<"$(fields pool)" && fail "a worker with an unknown key registered"
docker rm -f "$P-rogue" >/dev/null
ok "a worker container with an unknown CURVE key: refused, never registered"

# --- scale the fast pool to three ---------------------------------------------------------------
"${DC[@]}" up -d --scale worker-fast=3 >>"$T_DIR/up.log" 2>&1 || fail "scale: $(tail -5 "$T_DIR/up.log")"
for _ in $(seq 150); do [ "$(n_workers fast)" = 3 ] && break; sleep 0.2; done
[ "$(n_workers fast)" = 3 ] || fail "$(n_workers fast) fast workers after --scale worker-fast=3"
pids=()
for i in $(seq 9); do
    curl -s "${AUTH[@]}" "$BASE/v1/completions" -o "$T_DIR/bal.$i" \
        -d "{\"model\":\"fast\",\"prompt\":\"spread $i\",\"max_tokens\":60,\"logit_bias\":{\"2\":-100}}" &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
idle=$(fields served | awk '$2 == "fast" && $3 == 0' | wc -l)
[ "$idle" = 0 ] || fail "$idle fast workers served nothing of 9 concurrent requests: $(fields served)"
ok "--scale worker-fast=3: three fast workers, each served ($(fields served | awk '$2 == "fast" {printf "%s ", $3}'))"

# --- docker kill of the worker holding a greedy stream -----------------------------------------
KBODY='{"model":"fast","prompt":"killed mid-stream","max_tokens":1500,"temperature":0,"logit_bias":{"2":-100}'
curl -s "${AUTH[@]}" "$BASE/v1/completions" -d "$KBODY}" | json_get 'd["choices"][0]["text"]' >"$T_DIR/kill.ref"
curl -sN "${AUTH[@]}" "$BASE/v1/completions" -d "$KBODY,\"stream\":true}" >"$T_DIR/kill.sse" &
cpid=$!
victim=""
for _ in $(seq 200); do
    victim=$(fields inflight | awk '$2 == "fast" && $3 > 0 {print $1; exit}')
    [ -n "$victim" ] && [ "$(grep -c '^data: {' "$T_DIR/kill.sse")" -ge 3 ] && break
    sleep 0.05
done
[ -n "$victim" ] || fail "no fast worker held the stream"
grep -q '^data: \[DONE\]' "$T_DIR/kill.sse" && fail "the stream ended before the kill (make it longer)"
docker kill "${victim%%-*}" >/dev/null || fail "docker kill ${victim%%-*} (worker $victim)"
wait "$cpid" || fail "the stream's curl failed"
[ "$(sse_text "$T_DIR/kill.sse")" = "$(cat "$T_DIR/kill.ref")" ] || fail "the stream differs after docker kill"
ok "docker kill of $victim mid-stream: the stream completed identically elsewhere"
# docker kill is a stop by hand, which restart policies leave alone: start it again, then crash
# another worker from outside (its process SIGKILLed, as an OOM kill would): the policy restarts it.
docker start "${victim%%-*}" >/dev/null
wait_fast3() { for _ in $(seq 150); do [ "$(n_workers fast)" = 3 ] && return 0; sleep 0.2; done; return 1; }
wait_fast3 || fail "the killed worker, started again, did not rejoin: $(n_workers fast) fast"
# the first of the service's containers: sed reads all of ps's lines (head would exit after one,
# and under pipefail the SIGPIPE that ps may then take fails the script: rc 141, seen in CI)
crashed=$(cid worker-fast | sed -n 1p)
kill -9 "$(docker inspect -f '{{.State.Pid}}' "$crashed")"
for _ in $(seq 100); do [ "$(docker inspect -f '{{.RestartCount}}' "$crashed")" -ge 1 ] && break; sleep 0.2; done
[ "$(docker inspect -f '{{.RestartCount}}' "$crashed")" -ge 1 ] || fail "a crashed worker was not restarted (restart policy)"
wait_fast3 || fail "the crashed worker did not rejoin: $(n_workers fast) fast"
ok "restart: unless-stopped brought a crashed worker back (three fast workers again)"

# --- rolling restart of each worker service under streaming load -------------------------------
SCHEMA='{"type":"object","properties":{"words":{"type":"array","minItems":30,"maxItems":30,"items":{"type":"string","minLength":20,"maxLength":30}}},"required":["words"],"additionalProperties":false}'
body() { # I POOL: greedy, seeded or grammar-constrained
    case $1 in
        1) echo "/v1/completions {\"model\":\"$2\",\"prompt\":\"roll greedy\",\"max_tokens\":1200,\"temperature\":0,\"logit_bias\":{\"2\":-100}" ;;
        2) echo "/v1/completions {\"model\":\"$2\",\"prompt\":\"roll seeded\",\"max_tokens\":1200,\"temperature\":1,\"seed\":9,\"logit_bias\":{\"2\":-100}" ;;
        3) echo "/v1/chat/completions {\"model\":\"$2\",\"messages\":[{\"role\":\"user\",\"content\":\"roll\"}],\"max_tokens\":2000,\"temperature\":0.7,\"seed\":4,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"w\",\"schema\":$SCHEMA}}" ;;
    esac
}
streams() { # TAG POOL: the three streams; SPIDS set
    local i b
    SPIDS=()
    for i in 1 2 3; do
        b=$(body "$i" "$2")
        curl -sN "${AUTH[@]}" "$BASE${b%% *}" -d "${b#* },\"stream\":true}" >"$T_DIR/$1.$i" &
        SPIDS+=($!)
    done
}
migrations() { curl -s "$BASE/metrics" "${AUTH[@]}" | awk '/^sol_migrations_total/ {s += $2} END {print s + 0}'; }
for svc in worker-fast worker-precise; do
    pool=${svc#worker-}
    streams "ref-$pool" "$pool"
    for p in "${SPIDS[@]}"; do wait "$p"; done
    for i in 1 2 3; do sse_text "$T_DIR/ref-$pool.$i" >"$T_DIR/want-$pool.$i"; done
    grep -l "^NO-DONE:\|^ERROR:" "$T_DIR/want-$pool".* && fail "$pool reference failed"
    before=$(migrations)
    streams "roll-$pool" "$pool"
    for _ in $(seq 200); do [ "$(cat "$T_DIR/roll-$pool".* | grep -c '^data: {')" -ge 6 ] && break; sleep 0.05; done
    n=$(cid "$svc" | wc -l)
    t1=$SECONDS
    "${DC[@]}" restart -t 10 "$svc" >>"$T_DIR/up.log" 2>&1 || fail "restart $svc"
    secs=$((SECONDS - t1))
    for p in "${SPIDS[@]}"; do wait "$p" || fail "$svc restart: a curl failed"; done
    for i in 1 2 3; do
        [ "$(sse_text "$T_DIR/roll-$pool.$i")" = "$(cat "$T_DIR/want-$pool.$i")" ] ||
            fail "$svc restart: stream $i differs from its undisturbed run"
    done
    moved=$(($(migrations) - before))
    [ "$moved" -ge 1 ] || fail "$svc restart moved no stream"
    # each container's log: SIGTERM to exit well within 5 s (docker would SIGKILL at 10)
    for c in $(cid "$svc"); do
        docker logs "$c" 2>&1 | python3 -c '
import sys, datetime
t = lambda l: datetime.datetime.fromisoformat(l.split()[0].rstrip("Z"))
lines = sys.stdin.read().splitlines()
sig = [l for l in lines if "signal 15: draining" in l]
out = [l for l in lines if "exiting with status 0" in l]
assert sig and out, "no SIGTERM drain in the log"
d = (t(out[-1]) - t(sig[-1])).total_seconds()
assert 0 <= d < 5, f"{d:.1f} s from SIGTERM to exit"
print(f"{d:.2f}")' >>"$T_DIR/exit-times" || fail "$svc ($c): $(docker logs "$c" 2>&1 | tail -3)"
    done
    wait_healthy "$svc"
    ok "docker-compose restart $svc ($n containers, $secs s): $moved streams moved, texts unchanged; SIGTERM to exit $(tail -n "$n" "$T_DIR/exit-times" | tr '\n' ' ')s"
done

# --- key rotation on the running stack ----------------------------------------------------------
cp "$SEC/worker-fast.key" "$T_DIR/old-fast.key"
old_ids=$(fields pool | awk '$2 == "fast" {print $1}' | sort)
"$SRC/deploy/secrets.sh" --rotate worker-fast "$SEC" >/dev/null || fail "secrets.sh --rotate"
"${DC[@]}" up -d --force-recreate --no-deps --scale worker-fast=3 worker-fast >>"$T_DIR/up.log" 2>&1 ||
    fail "recreate: $(tail -5 "$T_DIR/up.log")"
for _ in $(seq 150); do
    new_ids=$(fields pool | awk '$2 == "fast" {print $1}' | sort)
    [ "$(comm -12 <(echo "$old_ids") <(echo "$new_ids") | wc -l)" = 0 ] && [ "$(echo "$new_ids" | wc -l)" = 3 ] && break
    sleep 0.2
done
[ "$(echo "$new_ids" | wc -l)" = 3 ] || fail "after rotation: fast workers '$new_ids'"
"$SRC/deploy/secrets.sh" --retire worker-fast "$SEC" >/dev/null
before=$(refused)
rogue "$T_DIR/old-fast.key"
for _ in $(seq 100); do [ "$(refused)" -gt "$before" ] && break; sleep 0.2; done
[ "$(refused)" -gt "$before" ] || fail "the retired key was not refused"
docker rm -f "$P-rogue" >/dev/null
post /v1/completions '{"model":"fast","prompt":"after rotation","max_tokens":4}' >/dev/null
[ "$(status)" = 200 ] || fail "the fast pool does not serve after rotation: $(status)"
ok "key rotation: three fast workers recreated with the new key serve; the retired key is refused"

# --- down leaves nothing ---------------------------------------------------------------------------
"${DC[@]}" logs --no-color >"$T_DIR/compose.log" 2>&1 || true
"${DC[@]}" down -v -t 10 >>"$T_DIR/up.log" 2>&1 || fail "down"
T_ON_EXIT='[ -n "${STARTED_ENGINE:-}" ] && SOL_DOCKERD_STATE=$T_DIR/dockerd.pid "$SRC/scripts/docker-engine" stop >/dev/null'
left=$(docker ps -aq --filter "label=com.docker.compose.project=$P"; docker volume ls -q --filter "label=com.docker.compose.project=$P")
[ -z "$left" ] || fail "down -v left: $left"
ok "docker-compose down -v: no container, network or volume of the stack left"
