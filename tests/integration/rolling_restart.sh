# Promise: a rolling restart of every worker of both pools loses and duplicates nothing. Real CPU
# workers (worker.drain = migrate, the default) serve greedy, seeded and grammar-constrained
# streams in both pools; each worker in turn gets SIGTERM while it holds streams, hands them back,
# and exits within 5 s; the router moves each, token-exactly, to another worker of the pool (a
# replacement has joined), and every stream's text equals its undisturbed run. An admin drain
# (POST /admin/workers/ID/drain) moves the streams the same way and leaves the worker idle and
# alive. worker.drain = finish keeps the old way: the streams end on the draining worker.
. "$(dirname "$0")/lib.sh"

# About a millisecond a token (as cluster_real.sh), so streams outlast the restarts.
SHAPE=(--preset tiny --dim 256 --ffn 768 --layers 4 --ctx 4096 --seed 5)
mkmodel "$T_DIR/precise.gguf" "${SHAPE[@]}" --type f16
mkmodel "$T_DIR/fast.gguf" "${SHAPE[@]}" --type q4_0
start_router --set router.workers.dead_after_ms=10000
declare -A MODEL=([fast]="$T_DIR/fast.gguf" [precise]="$T_DIR/precise.gguf")
start_cpu_worker f1 fast "${MODEL[fast]}"
start_cpu_worker f2 fast "${MODEL[fast]}"
start_cpu_worker p1 precise "${MODEL[precise]}"
start_cpu_worker p2 precise "${MODEL[precise]}"
wait_ready 300
for w in f1 f2 p1 p2; do wait_worker "$w"; done

schema() {
    echo "{\"type\":\"object\",\"properties\":{\"lines\":{\"type\":\"array\",\"minItems\":$LINES,\"maxItems\":$LINES,\"items\":{\"type\":\"string\",\"minLength\":50,\"maxLength\":60}}},\"required\":[\"lines\"],\"additionalProperties\":false}"
}
# body I: stream I of a round: per pool, greedy, seeded (temperature 1) and grammar-constrained.
# The text streams never draw EOS (token 2 of the synthetic vocabulary: logit_bias -100), so each
# runs its LEN tokens and is still under way when its worker is told to drain (a stream of this
# model takes about a second; the sanitized build runs the engine some 25 times slower, so its
# streams are shorter and still last longer).
LEN=3000 LINES=40
[ "${SOL_SANITIZED:-}" = 1 ] && LEN=600 LINES=8
KINDS=(greedy seeded grammar)
body() {
    local i=$1 pool kind
    pool=$([ "$i" -le 3 ] && echo fast || echo precise)
    kind=${KINDS[$(((i - 1) % 3))]}
    case $kind in
        greedy) echo "{\"model\":\"$pool\",\"prompt\":\"rolling greedy $i\",\"max_tokens\":$LEN,\"temperature\":0,\"logit_bias\":{\"2\":-100}${2:-}}" ;;
        seeded) echo "{\"model\":\"$pool\",\"prompt\":\"rolling seeded $i\",\"max_tokens\":$LEN,\"logit_bias\":{\"2\":-100},\"temperature\":1,\"seed\":$((40 + i))${2:-}}" ;;
        grammar) echo "{\"model\":\"$pool\",\"messages\":[{\"role\":\"user\",\"content\":\"rolling $i\"}],\"max_tokens\":$((LEN * 13 / 10)),\"temperature\":0.8,\"seed\":$i,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":$(schema)}}${2:-}}" ;;
    esac
}
N=6
path_of() { [ $((($1 - 1) % 3)) = 2 ] && echo /v1/chat/completions || echo /v1/completions; }
start_round() { # TAG: the N streams at once; PIDS set
    PIDS=()
    for i in $(seq $N); do
        curl -sN "$BASE$(path_of "$i")" -d "$(body "$i" ',"stream":true')" >"$T_DIR/$1.$i" &
        PIDS+=($!)
    done
}
check_round() { # TAG
    for p in "${PIDS[@]}"; do wait "$p" || fail "$1: a curl failed"; done
    for i in $(seq $N); do
        got=$(sse_text "$T_DIR/$1.$i")
        [ "$got" = "$(cat "$T_DIR/want.$i")" ] ||
            fail "$1: stream $i ($(body "$i" | head -c 60)...) differs from its undisturbed run:\n got  '${got:0:300}'\n want '$(head -c 300 "$T_DIR/want.$i")'"
    done
}
held() { workers_field "$1" inflight; }
# wait_held ID: until a heartbeat ID sent after this call says it runs a request. The router's
# inflight count and every stream's first chunk (a chat stream's first is the router's own) can
# come before the request reaches the worker; a SIGTERM then finds nothing to hand back and the
# request, refused by the draining worker, moves without one (found in a fresh-clone run). The
# previous round's streams ended before this one began, so such a heartbeat is about this round.
wait_held() {
    local t0 run ago
    t0=$(date +%s%3N)
    for _ in $(seq 400); do
        read -r run ago < <(curl -s "$BASE/admin/workers" | python3 -c '
import json, sys
for w in json.load(sys.stdin)["workers"]:
    if w["id"] == sys.argv[1]:
        print(w["running"], w["last_heartbeat_ms_ago"]); break' "$1")
        [ "${run:-0}" -gt 0 ] && [ $(($(date +%s%3N) - ${ago:-0})) -gt "$t0" ] && return 0
        sleep 0.05
    done
    fail "$1 never reported a running request in a heartbeat"
}

start_round ref # the undisturbed runs (the CPU backend's sums do not depend on the batch)
for p in "${PIDS[@]}"; do wait "$p" || fail "reference: a curl failed"; done
for i in $(seq $N); do
    sse_text "$T_DIR/ref.$i" >"$T_DIR/want.$i"
    grep -q "^NO-DONE:\|^ERROR:" "$T_DIR/want.$i" && fail "reference $i: $(head -c 300 "$T_DIR/want.$i")"
done
python3 -c 'import json,sys; print("     grammar reference:", len(json.loads(open(sys.argv[1]).read())["lines"]), "lines")' \
    "$T_DIR/want.3" || fail "the grammar stream's reference is not JSON: $(head -c 300 "$T_DIR/want.3")"
migrations() {
    curl -s "$BASE/metrics" | awk '/^sol_migrations_total/ {s += $2} END {print s + 0}'
}
# running PID: the process runs (an exited child stays a zombie until waited for: not running).
running() { [ -n "$(ps -o stat= -p "$1" 2>/dev/null | grep -v Z)" ]; }
# exits_within ID SECONDS: the process of ID is gone within SECONDS (its exit status 0).
exits_within() {
    local t0=$SECONDS pid=${W_PID[$1]}
    while running "$pid"; do
        [ $((SECONDS - t0)) -lt "$2" ] || { kill -9 "$pid"; fail "$1 still running ${2} s after SIGTERM: $(tail -3 "$T_DIR/worker-$1.log")"; }
        sleep 0.05
    done
    wait "$pid" || fail "$1 exited $? after its drain"
}

# --- a rolling restart: each worker replaced in turn while it holds streams ---------------------
for victim in f1 f2 p1 p2; do
    pool=$([ "${victim:0:1}" = f ] && echo fast || echo precise)
    before=$(migrations)
    start_round "roll-$victim"
    wait_inflight "$victim" "roll-$victim" "$N"
    wait_held "$victim"
    n_held=$(held "$victim")
    t0=$(date +%s%N)
    kill -TERM "${W_PID[$victim]}"
    # the replacement joins while the victim drains, as a rolling update's surge does
    new="${victim}r"
    start_cpu_worker "$new" "$pool" "${MODEL[$pool]}"
    exits_within "$victim" 5
    ms=$((($(date +%s%N) - t0) / 1000000))
    grep -q "handed [0-9]* running requests back" "$T_DIR/worker-$victim.log" ||
        fail "$victim's log shows no hand-back: $(tail -5 "$T_DIR/worker-$victim.log")"
    wait_worker "$new"
    check_round "roll-$victim"
    moved=$(($(migrations) - before))
    [ "$moved" -ge "$n_held" ] || fail "$victim held $n_held streams, the router moved $moved"
    ok "$victim: SIGTERM with $n_held streams held, exited in $ms ms, $moved moved; every text as undisturbed"
done
grep -q "migrates (its worker is draining" "$T_DIR/router.log" || fail "the router log names no migration"

# --- an admin drain moves the streams and leaves the worker idle ---------------------------------
victim=f1r
before=$(migrations)
start_round admin
wait_inflight "$victim" admin "$N"
wait_held "$victim"
curl -s -X POST "$BASE/admin/workers/$victim/drain" >"$T_DIR/drain.json"
grep -q '"draining":true' "$T_DIR/drain.json" || fail "admin drain: $(cat "$T_DIR/drain.json")"
check_round admin
[ "$(($(migrations) - before))" -ge 1 ] || fail "admin drain moved nothing"
running "${W_PID[$victim]}" || fail "$victim exited after an admin drain; it should idle"
[ "$(workers_field "$victim" state)" = draining ] || fail "$victim is $(workers_field "$victim" state), not draining"
[ "$(held "$victim")" = 0 ] || fail "$victim still holds $(held "$victim") requests after its drain"
grep -q "idle (taking no work)" "$T_DIR/worker-$victim.log" || fail "$victim's log does not say it idles"
kill -TERM "${W_PID[$victim]}"
exits_within "$victim" 5
ok "admin drain: the streams moved, $victim idles (draining, alive) until SIGTERM"

# --- worker.drain = finish: the streams end where they are ------------------------------------
start_cpu_worker f9 fast "${MODEL[fast]}" --drain finish
wait_worker f9
before=$(migrations)
start_round finish
wait_inflight f9 finish "$N"
kill -TERM "${W_PID[f9]}"
check_round finish
wait "${W_PID[f9]}" || fail "f9 exited $? after its drain"
[ "$(migrations)" = "$before" ] || fail "worker.drain=finish moved streams"
grep -q "they run to their end" "$T_DIR/worker-f9.log" || fail "f9's log does not say finish"
ok "worker.drain=finish: the streams finished on the draining worker, nothing moved"
