#!/usr/bin/env bash
# Promise (chaos): while 3 waves of 24 concurrent streams run, workers are killed (-9), frozen
# (SIGSTOP past the router's dead_after, then resumed) and replaced at random every ~0.4 s; every
# stream still completes with exactly the text of an undisturbed run, no client sees an error,
# and the cluster serves normally afterwards. Seeded (CHAOS_SEED) so a failure can be replayed.
. "$(dirname "$0")/lib.sh"
SEED=${CHAOS_SEED:-$RANDOM}
RANDOM=$SEED
echo "chaos seed $SEED"
start_router
next=0
spawn() { next=$((next + 1)); start_worker "c$next" precise 1 60; LIVE+=("c$next"); }
LIVE=()
for _ in 1 2 3 4; do spawn; done
for w in "${LIVE[@]}"; do wait_worker "$w"; done

N=24
body() { echo "{\"model\":\"demo\",\"prompt\":\"chaos prompt $1\",\"max_tokens\":150,\"seed\":3${2:-}}"; }
for i in $(seq $N); do
  post /v1/completions "$(body "$i")" | json_get 'd["choices"][0]["text"]' >"$T_DIR/ref.$i"
done

chaos() { # until the streams of the wave are done: one random act every ~0.4 s
  local acts=0
  while pgrep -f "chaos prompt" >/dev/null 2>&1 && [ $acts -lt 40 ]; do
    sleep 0.$((3 + RANDOM % 3))
    local k w rest=()
    k=$((RANDOM % ${#LIVE[@]}))
    w=${LIVE[$k]}
    case $((RANDOM % 3)) in
      0) kill -9 "${W_PID[$w]}" 2>/dev/null || true
         for x in "${LIVE[@]}"; do [ "$x" = "$w" ] || rest+=("$x"); done
         LIVE=("${rest[@]}"); spawn; echo "kill -9 $w" ;;
      1) kill -STOP "${W_PID[$w]}"; sleep 1.3; kill -CONT "${W_PID[$w]}"; echo "freeze $w 1.3 s" ;;
      2) spawn; echo "add ${LIVE[-1]}" ;;
    esac
    acts=$((acts + 1))
  done >>"$T_DIR/chaos.log"
}

for wave in 1 2 3; do
  pids=()
  for i in $(seq $N); do
    curl -sN --max-time 120 "$BASE/v1/completions" -d "$(body "$i" ',"stream":true')" >"$T_DIR/w$wave.$i" &
    pids+=($!)
  done
  chaos
  for p in "${pids[@]}"; do wait "$p" || fail "wave $wave: a curl failed (seed $SEED)"; done
  for i in $(seq $N); do
    got=$(sse_text "$T_DIR/w$wave.$i"); want=$(cat "$T_DIR/ref.$i")
    [ "$got" = "$want" ] || fail "wave $wave stream $i differs (seed $SEED; $(wc -l <"$T_DIR/chaos.log") acts):\n got  '$got'\n want '$want'"
  done
done
acts=$(wc -l <"$T_DIR/chaos.log")
[ "$acts" -ge 6 ] || fail "only $acts chaos acts happened: the waves were too short to test anything"
still_serves "chaos"
fo=$(curl -s "$BASE/metrics" | sed -n 's/^sol_failovers_total{pool="precise"} //p' | head -1)
ok "3 waves x $N streams identical to the undisturbed run through $acts acts ($(grep -c kill "$T_DIR/chaos.log") kills, $(grep -c freeze "$T_DIR/chaos.log") freezes; ${fo:-0} failovers; seed $SEED)"
