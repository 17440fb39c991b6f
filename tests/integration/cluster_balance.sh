# Promise: with the default configuration (prefix affinity on), 64 concurrent streams of distinct
# prompts over 4 sim workers of one pool all complete and each worker serves its fair share (within
# ±25% of 16), while a repeated prompt sent one at a time sticks to one worker.
. "$(dirname "$0")/lib.sh"

start_router
for i in 1 2 3 4; do start_worker "b$i" precise 1 25; done
start_worker wf fast 1 2000
wait_ready
for i in 1 2 3 4; do wait_worker "b$i"; done

burst /v1/chat/completions s 64 40 '{"model":"precise","stream":true,"max_tokens":40,"messages":[{"role":"user","content":"balance request %i of many"}]}'
sleep 0.2
total=0
shares=""
for i in 1 2 3 4; do
    n=$(workers_field "b$i" served)
    total=$((total + n))
    [ "$n" -ge 12 ] && [ "$n" -le 20 ] || fail "worker b$i served $n of 64 (expected 12..20)"
    shares="$shares b$i=$n"
done
[ "$total" = 64 ] || fail "served counts add up to $total, not 64"
ok "64 concurrent streams complete; shares:$shares"

# --- affinity: the same prefix, one request at a time, lands on one worker ----------------------
for i in 1 2 3 4; do before[$i]=$(workers_field "b$i" served); done
for i in $(seq 8); do
    post /v1/completions '{"model":"precise","prompt":"You are a helpful assistant. Same system prompt.","max_tokens":1}' >/dev/null
    [ "$(status)" = 200 ] || fail "affinity request: $(status)"
done
max=0
for i in 1 2 3 4; do
    n=$(($(workers_field "b$i" served) - before[i]))
    [ "$n" -gt "$max" ] && max=$n
done
[ "$max" = 8 ] || fail "affinity: the 8 same-prefix requests were spread (max per worker $max)"
ok "prefix affinity keeps a repeated prompt on one worker"
