#!/usr/bin/env bash
# Promise (chaos): while waves of concurrent streams run, workers are killed (-9), frozen (SIGSTOP
# past the router's dead_after, then resumed) and added at random every ~0.4 s; every stream still
# completes with exactly the text of an undisturbed run, no client sees an error, and the cluster
# serves normally afterwards. First with sim workers (3 waves of 24 streams), then with real CPU
# engines on the demo model (3 waves of 16 greedy streams), after which every live engine's KV
# blocks are free again and the one worker spared from the chaos has not grown (RSS within
# 48 MiB of its figure after the undisturbed run); the router's RSS is back within 10% after the
# sim waves (not under ASan, whose quarantine keeps freed memory), and the router itself is killed mid-wave and restarted once (streams it cut end
# without [DONE] and their retries are whole). Seeded (CHAOS_SEED) so a failure can be replayed.
# ctest-timeout: 1200
# (5 min 7 s under ASan+UBSan with both cores busy elsewhere, 2 min 39 s plain: at ctest's former
# 600 s a loaded sanitizer run could be killed, and a killed test printed no reason)
. "$(dirname "$0")/lib.sh"
SEED=${CHAOS_SEED:-$RANDOM}
RANDOM=$SEED
echo "chaos seed $SEED"
start_router
next=0
KIND=sim; POOL=precise; N=24; TOKENS=150; WAVES=3; SPARE=""; GAP=3 # acts every 0.GAP to 0.(GAP+2) s
spawn() {
  next=$((next + 1))
  if [ $KIND = sim ]; then start_worker "c$next" $POOL 1 60
  else start_cpu_worker "c$next" $POOL "$SOL_SOURCE/models/demo/demo-target-f16.gguf" --set worker.kv.num_blocks=256; fi
  LIVE+=("c$next")
}
body() { echo "{\"model\":\"$POOL\",\"prompt\":\"chaos prompt $1\",\"max_tokens\":$TOKENS,\"temperature\":0,\"seed\":3${2:-}}"; }
references() {
  for w in "${LIVE[@]}"; do wait_worker "$w"; done
  for i in $(seq $N); do
    post /v1/completions "$(body "$i")" | json_get 'd["choices"][0]["text"]' >"$T_DIR/ref.$KIND.$i"
    [ "$(status)" = 200 ] || fail "$KIND reference $i: $(status)"
  done
}

chaos() { # until the streams of the wave are done: one random act every ~0.4 s
  local acts=0 nap=1
  # At most 3 acts a wave: a request fails over at most 3 times, within the router's 4 attempts
  # (beyond them it is failed with a 503 by design). The first act comes 0.1 s into the wave:
  # a CPU wave lasts only a few seconds, and a random first gap (with draws of the spared
  # worker) let whole waves pass undisturbed (3 acts in 3 waves, twice in a row).
  while pgrep -f "chaos prompt" >/dev/null 2>&1 && [ $acts -lt 3 ]; do
    sleep 0.$nap
    nap=$((GAP + RANDOM % 3))
    local w x rest=() pick=()
    for x in "${LIVE[@]}"; do [ "$x" = "$SPARE" ] || pick+=("$x"); done
    w=${pick[$((RANDOM % ${#pick[@]}))]}
    local act=$((RANDOM % 3))
    [ $act = 2 ] && [ ${#LIVE[@]} -ge 6 ] && act=0 # at most 6 workers: an add becomes a kill
    case $act in
      0) kill -9 "${W_PID[$w]}" 2>/dev/null || true
         for x in "${LIVE[@]}"; do [ "$x" = "$w" ] || rest+=("$x"); done
         LIVE=("${rest[@]}"); spawn; echo "wave $wave: kill -9 $w" ;;
      1) kill -STOP "${W_PID[$w]}"; sleep 1.3; kill -CONT "${W_PID[$w]}"; echo "wave $wave: freeze $w 1.3 s" ;;
      2) spawn; echo "wave $wave: add ${LIVE[-1]}" ;;
    esac
    acts=$((acts + 1))
  done >>"$T_DIR/chaos.log"
}

waves() {
  : >"$T_DIR/chaos.log"
  for wave in $(seq $WAVES); do
    pids=()
    for i in $(seq $N); do
      curl -sN --max-time 300 "$BASE/v1/completions" -d "$(body "$i" ',"stream":true')" >"$T_DIR/w$wave.$i" &
      pids+=($!)
    done
    chaos
    for p in "${pids[@]}"; do wait "$p" || fail "$KIND wave $wave: a curl failed (seed $SEED)"; done
    for i in $(seq $N); do
      got=$(sse_text "$T_DIR/w$wave.$i"); want=$(cat "$T_DIR/ref.$KIND.$i")
      [ "$got" = "$want" ] || fail "$KIND wave $wave stream $i differs (seed $SEED; $(wc -l <"$T_DIR/chaos.log") acts):\n got  '$got'\n want '$want'"
    done
  done
  acts=$(wc -l <"$T_DIR/chaos.log")
  for wave in $(seq $WAVES); do # every wave disturbed while its streams ran
    grep -q "^wave $wave:" "$T_DIR/chaos.log" ||
      fail "$KIND: wave $wave ended before any chaos act (too short to test anything): $(tr '\n' ';' <"$T_DIR/chaos.log")"
  done
  fo=$(curl -s "$BASE/metrics" | sed -n "s/^sol_failovers_total{pool=\"$POOL\"} //p" | sed -n 1p)
  summary="$WAVES waves x $N streams identical to the undisturbed run through $acts acts ($(grep -c kill "$T_DIR/chaos.log") kills, $(grep -c freeze "$T_DIR/chaos.log") freezes; ${fo:-0} failovers; seed $SEED)"
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# A request whose every attempt dies: its worker is killed 4 times in a row. The 4th death fails
# it with a 503 in the stream (the router's 4 attempts), and the router, which freed the request
# while still walking the dead worker's requests, keeps serving (a use-after-free ASan caught).
start_worker x1 precise 1 20
wait_worker x1
curl -sN --max-time 120 "$BASE/v1/completions" -d '{"model":"precise","prompt":"doomed","max_tokens":400,"stream":true}' >"$T_DIR/doomed.sse" &
doomed=$!
for k in 1 2 3 4; do
  for _ in $(seq 100); do [ "$(workers_field "x$k" inflight)" = 1 ] && break; sleep 0.05; done
  [ "$(workers_field "x$k" inflight)" = 1 ] || fail "attempt $k never reached worker x$k"
  start_worker "x$((k + 1))" precise 1 20 # the next one first: an empty pool fails at once
  wait_worker "x$((k + 1))"
  kill -9 "${W_PID[x$k]}"
done
wait $doomed || fail "the doomed stream's curl failed"
grep -q "failed on every worker" "$T_DIR/doomed.sse" || fail "no 503 after 4 attempts: $(tail -c 300 "$T_DIR/doomed.sse")"
still_serves "a request out of attempts"
kill -9 "${W_PID[x5]}"
ok "a request whose 4 workers all die ends with a 503 in its stream; the router keeps serving"

LIVE=()
for _ in 1 2 3 4; do spawn; done
references
router_rss0=$(rss_kib "$ROUTER_PID")
waves
still_serves "chaos"
sleep 1 # the last streams' buffers are released
router_rss1=$(rss_kib "$ROUTER_PID")
if grep -q "^SOL_SANITIZE:BOOL=ON" "$SOL_BUILD/CMakeCache.txt" 2>/dev/null; then
  rss_note="router RSS $router_rss0 -> $router_rss1 KiB, not checked under ASan (its quarantine keeps freed memory)"
else
  [ "$router_rss1" -le $((router_rss0 * 11 / 10 + 4096)) ] ||
    fail "sim: the router grew from $router_rss0 to $router_rss1 KiB through the chaos"
  rss_note="router RSS $router_rss0 -> $router_rss1 KiB"
fi
ok "sim workers: $summary; $rss_note"

# The router itself dies mid-wave (kill -9) and is started again on the same ports: each stream
# either completed with its reference text or ended without [DONE] (its client sees the drop);
# retried once the workers have rejoined, every one equals its reference, and no worker is left
# running a request of the dead router.
pids=()
for i in $(seq $N); do
  curl -sN --max-time 300 "$BASE/v1/completions" -d "$(body "$i" ',"stream":true')" >"$T_DIR/r.$i" &
  pids+=($!)
done
sleep 1
kill -9 "$ROUTER_PID"
for p in "${pids[@]}"; do wait "$p" || true; done # a dropped stream is curl's error 18 or 56
start_router
for w in "${LIVE[@]}"; do wait_worker "$w"; done
cut=0
for i in $(seq $N); do
  if grep -q "data: \[DONE\]" "$T_DIR/r.$i"; then
    [ "$(sse_text "$T_DIR/r.$i")" = "$(cat "$T_DIR/ref.sim.$i")" ] || fail "router restart: stream $i completed with another text"
    continue
  fi
  cut=$((cut + 1))
  got=$(post /v1/completions "$(body "$i")" | json_get 'd["choices"][0]["text"]')
  [ "$(status)" = 200 ] && [ "$got" = "$(cat "$T_DIR/ref.sim.$i")" ] || fail "router restart: the retry of stream $i: $(status) '$got'"
done
[ "$cut" -gt 0 ] || fail "router restart: no stream was in flight when the router died"
for _ in $(seq 100); do
  busy=$(curl -s "$BASE/admin/workers" | json_get 'sum(w["running"] + w["waiting"] for w in d["workers"])')
  [ "$busy" = 0 ] && break
  sleep 0.1
done
[ "$busy" = 0 ] || fail "router restart: workers still run requests of the dead router"
ok "router killed mid-wave and restarted: $cut of $N streams cut without [DONE], every retry equals the undisturbed run, no worker left running an orphan"

# Real engines: the sim workers go, CPU workers on the demo model take the fast pool.
for w in "${LIVE[@]}"; do kill -9 "${W_PID[$w]}" 2>/dev/null || true; done
KIND=cpu; POOL=fast; N=16; TOKENS=200; WAVES=3; GAP=1; LIVE=()
for _ in 1 2 3; do spawn; done
SPARE=${LIVE[0]}
references
rss0=$(rss_kib "${W_PID[$SPARE]}")
waves
for _ in $(seq 100); do # every live engine back to an empty KV pool once its streams are done
  busy=$(curl -s "$BASE/admin/workers" | python3 -c '
import json, sys
ws = [w for w in json.load(sys.stdin)["workers"] if w["pool"] == "fast" and w["state"] == "ready"]
print(sum(1 for w in ws if w["kv_usage"] > 0 or w["running"] or w["waiting"]) if ws else "none")')
  [ "$busy" = 0 ] && break
  sleep 0.1
done
[ "$busy" = 0 ] || fail "cpu: KV blocks still held after the waves ($busy workers): $(curl -s "$BASE/admin/workers")"
rss1=$(rss_kib "${W_PID[$SPARE]}")
[ $((rss1 - rss0)) -le 49152 ] || fail "cpu: the spared worker grew from $rss0 to $rss1 KiB"
post /v1/completions '{"model":"fast","prompt":"still alive?","max_tokens":2}' >/dev/null
[ "$(status)" = 200 ] || fail "cpu: the cluster stopped serving after the chaos"
ok "cpu workers: $summary; KV pools empty again, spared worker RSS $rss0 -> $rss1 KiB"
