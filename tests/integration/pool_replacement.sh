# Promise: when the only worker of a pool dies mid-stream, a replacement that joins within
# router.workers.dead_after_ms of the failover takes the streams over, and each finishes with
# exactly the text of an undisturbed run (a rolling restart of a one-worker pool loses nothing).
# The grace counts from the failover, not from when the request first arrived: a stream older
# than dead_after_ms used to get a 503 at once.
. "$(dirname "$0")/lib.sh"

start_router --set router.workers.dead_after_ms=2000
start_worker p1 precise 1 60
start_worker f1 fast 1 2000
wait_ready
wait_worker p1

N=4
body() { echo "{\"model\":\"precise\",\"prompt\":\"replacement prompt $1\",\"max_tokens\":300,\"seed\":5${2:-}}"; }
refs=()
for i in $(seq $N); do # the undisturbed texts, side by side
    curl -s "$BASE/v1/completions" -d "$(body "$i")" >"$T_DIR/ref.json.$i" &
    refs+=($!)
done
for p in "${refs[@]}"; do wait "$p"; done
for i in $(seq $N); do json_get 'd["choices"][0]["text"]' <"$T_DIR/ref.json.$i" >"$T_DIR/ref.$i"; done
pids=()
for i in $(seq $N); do
    curl -sN "$BASE/v1/completions" -d "$(body "$i" ',"stream":true')" >"$T_DIR/s.$i" &
    pids+=($!)
done
for _ in $(seq 200); do
    [ "$(cat "$T_DIR"/s.* 2>/dev/null | grep -c '^data: {')" -ge "$N" ] && break
    sleep 0.02
done
sleep 2.5 # every stream older than dead_after_ms (2 s), with 2.5 s of tokens still to come
kill -9 "${W_PID[p1]}"
# the router sees the connection go at once and fails the streams over into an empty pool; the
# replacement joins only then
for _ in $(seq 100); do grep -q "worker p1 .* is dead" "$T_DIR/router.log" && break; sleep 0.05; done
grep -q "worker p1 .* is dead" "$T_DIR/router.log" || fail "the router never declared p1 dead"
start_worker p2 precise 1 60
for p in "${pids[@]}"; do wait "$p" || fail "a curl failed"; done
for i in $(seq $N); do
    got=$(sse_text "$T_DIR/s.$i")
    want=$(cat "$T_DIR/ref.$i")
    [ "$got" = "$want" ] || fail "stream $i differs:\n got  '$got'\n want '$want'\n$(tail -3 "$T_DIR/s.$i")"
done
[ "$(workers_field p2 served)" -ge "$N" ] || fail "the replacement p2 served $(workers_field p2 served)"
ok "the pool's only worker killed; its replacement took $N streams over, text identical"
