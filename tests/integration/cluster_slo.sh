#!/usr/bin/env bash
# Promise: latency targets end to end (docs/api.md, "Latency targets"). Malformed X-Sol-*-Ms
# headers are a 400 naming the header; a pool's router.slo default applies to a request that
# sends no header, and a header (0: none) overrides it. Once the router has measured the worker's
# prefill rate, a request whose prompt alone cannot be prefilled within its X-Sol-TTFT-Ms is a 503
# (slo_unattainable) at once; with the worker full (max_num_seqs 2) and two more long streams
# queued - issue 35's case - a request that needs its first token within 100 ms is a 429
# (slo_not_met_now, Retry-After) at once instead of waiting seconds; a request still queued past
# X-Sol-Deadline-Ms leaves the queue with 429 deadline_exceeded and never runs; a stream running
# past it is stopped with 504; /metrics counts refusals and misses.
. "$(dirname "$0")/lib.sh"
LIB_SERVED_MODEL=none

M="$T_DIR/m.gguf"
mkmodel "$M" --preset small --layers 2 --type q8_0 --ctx 4096 --seed 3 # ~75 tokens/s: streams last
start_router --routing-policy cache_aware --set 'router.slo=[{pool: precise, ttft_ms: 1}]'
start_cpu_worker k1 precise "$M" --set worker.scheduler.max_num_seqs=2
wait_worker k1
NONE=(-H 'X-Sol-TTFT-Ms: 0') # overrides the pool's 1 ms default

for h in 'X-Sol-TTFT-Ms: soon' 'X-Sol-TPOT-Ms: -5' 'X-Sol-Deadline-Ms: 99999999999' 'X-Sol-TTFT-Ms: 1.5'; do
    post /v1/completions '{"model":"precise","prompt":"hi","max_tokens":2}' -H "$h" >/dev/null
    [ "$(status)" = 400 ] || fail "header '$h': status $(status)"
    grep -q "${h%%:*}" "$T_DIR/body" || fail "the 400 for '$h' does not name the header: $(cat "$T_DIR/body")"
done
post /v1/embeddings '{"model":"precise","input":"hi"}' -H 'X-Sol-TPOT-Ms: 50' >/dev/null
[ "$(status)" = 400 ] || fail "an embedding took X-Sol-TPOT-Ms: $(status)"
ok "malformed latency headers, and X-Sol-TPOT-Ms on an embedding, are 400s naming the header"

# The prefill rate: prompts of 2,000 characters (the synthetic vocabulary: a token each), distinct
# so that none is served from the prefix cache.
long_prompt() { python3 -c "import random,sys; r=random.Random(int(sys.argv[1])); print(''.join(r.choice('abcdefghij ') for _ in range(2000)))" "$1"; }
for i in 1 2 3 4 5 6; do
    post /v1/completions "{\"model\":\"precise\",\"prompt\":\"$(long_prompt "$i")\",\"max_tokens\":1}" "${NONE[@]}" >/dev/null
    [ "$(status)" = 200 ] || fail "warm-up $i: $(status) $(cat "$T_DIR/body")"
    rate=$(workers_field k1 prefill_bytes_per_s)
    [ "${rate%.*}" -gt 0 ] && break
done
[ "${rate%.*}" -gt 0 ] || fail "the router never measured k1's prefill rate"

post /v1/completions "{\"model\":\"precise\",\"prompt\":\"$(long_prompt 50)\",\"max_tokens\":1}" >/dev/null
[ "$(status)" = 503 ] || fail "the pool's 1 ms default: status $(status) $(cat "$T_DIR/body")"
[ "$(json_get 'd["error"]["code"]' <"$T_DIR/body")" = slo_unattainable ] || fail "code: $(cat "$T_DIR/body")"
grep -q "X-Sol-TTFT-Ms" "$T_DIR/body" || fail "the 503 does not name the target: $(cat "$T_DIR/body")"
post /v1/completions "{\"model\":\"precise\",\"prompt\":\"$(long_prompt 51)\",\"max_tokens\":1}" -H 'X-Sol-TTFT-Ms: 2' >/dev/null
[ "$(status)" = 503 ] || fail "a 2 ms target on a 2,000-token prompt: status $(status)"
post /v1/completions "{\"model\":\"precise\",\"prompt\":\"$(long_prompt 52)\",\"max_tokens\":1}" "${NONE[@]}" >/dev/null
[ "$(status)" = 200 ] || fail "X-Sol-TTFT-Ms: 0 did not override the default: $(status)"
ok "a prompt no worker can prefill within its target is a 503 at once (k1 measured at $rate bytes/s); the pool default applies, a header overrides it"

# issue 35's case: the worker full with two long streams, two more queued behind them
longs=()
for i in 1 2 3 4; do
    curl -sN "$BASE/v1/completions" "${NONE[@]}" -H 'Content-Type: application/json' \
        -d "{\"model\":\"precise\",\"prompt\":\"story $i\",\"max_tokens\":3000,\"temperature\":0,\"logit_bias\":{\"2\":-100},\"stream\":true}" \
        >"$T_DIR/long.$i" &
    longs+=($!)
done
for _ in $(seq 100); do
    [ "$(workers_field k1 running)" = 2 ] && [ "$(workers_field k1 tokens_per_s | cut -d. -f1)" -gt 0 ] && break
    sleep 0.05
done
[ "$(workers_field k1 running)" = 2 ] || fail "k1 is not full: running $(workers_field k1 running)"
t0=$(date +%s%N)
post /v1/completions '{"model":"precise","prompt":"quick one","max_tokens":4}' -H 'X-Sol-TTFT-Ms: 100' >/dev/null
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$(status)" = 429 ] || fail "a 100 ms target behind a full worker: status $(status) after $ms ms: $(cat "$T_DIR/body")"
[ "$(json_get 'd["error"]["code"]' <"$T_DIR/body")" = slo_not_met_now ] || fail "code: $(cat "$T_DIR/body")"
[ -n "$(header Retry-After)" ] || fail "the 429 has no Retry-After"
# at once, not at the deadline: the code says the admission refused it (a request that had
# queued until its first token was due would end with ttft_deadline_exceeded)
ok "with the worker full and streams queued, a 100 ms target is refused at once ($ms ms, 429, Retry-After $(header Retry-After) s)"

post /v1/completions '{"model":"precise","prompt":"in time?","max_tokens":4}' "${NONE[@]}" -H 'X-Sol-Deadline-Ms: 300' >/dev/null
[ "$(status)" = 429 ] || fail "a request queued past its deadline: status $(status) $(cat "$T_DIR/body")"
[ "$(json_get 'd["error"]["code"]' <"$T_DIR/body")" = deadline_exceeded ] || fail "code: $(cat "$T_DIR/body")"
grep -q "never ran" "$T_DIR/body" || fail "the message does not say it never ran: $(cat "$T_DIR/body")"
ok "a request still queued past X-Sol-Deadline-Ms leaves the queue with 429 deadline_exceeded"
kill "${longs[@]}" 2>/dev/null || true # the clients leave: the router cancels their streams
wait "${longs[@]}" 2>/dev/null || true
for _ in $(seq 50); do [ "$(workers_field k1 running)" = 0 ] && break; sleep 0.1; done

curl -sN "$BASE/v1/completions" "${NONE[@]}" -H 'X-Sol-Deadline-Ms: 400' -H 'Content-Type: application/json' \
    -d '{"model":"precise","prompt":"a long one","max_tokens":3000,"temperature":0,"logit_bias":{"2":-100},"stream":true}' \
    >"$T_DIR/stopped" || true
grep -q '"deadline_exceeded"' "$T_DIR/stopped" || fail "a stream past its deadline was not stopped with deadline_exceeded: $(tail -c 400 "$T_DIR/stopped")"
grep -q '"text"' "$T_DIR/stopped" || fail "the stopped stream had streamed nothing before"
sleep 0.5
[ "$(workers_field k1 running)" = 0 ] || fail "k1 still runs the stopped stream"
ok "a stream running past X-Sol-Deadline-Ms is stopped on the worker and ends with deadline_exceeded"

curl -s "$BASE/metrics" >"$T_DIR/metrics"
grep -q '^sol_slo_refused_total{pool="precise"} [3-9]' "$T_DIR/metrics" || fail "sol_slo_refused_total: $(grep sol_slo "$T_DIR/metrics")"
grep -q '^sol_slo_deadline_missed_total{pool="precise"} [2-9]' "$T_DIR/metrics" || fail "sol_slo_deadline_missed_total: $(grep sol_slo "$T_DIR/metrics")"
ok "/metrics counts the refusals and the missed deadlines"
