#!/usr/bin/env python3
"""multiturn.py: replays a multi-turn chat trace against a Sol router and reports time to first
token per turn, and the prompt tokens the workers computed against those they reused.

The trace (deterministic per --seed): one shared system prompt of about --system-words words, then
--conversations conversations of --turns turns; each turn sends the whole history (system prompt,
every earlier user message and the assistant's actual reply) plus a new user message of about
--user-words words, streams the reply (--max-tokens, greedy) and keeps it for the next turn.
--concurrency conversations are in flight at once (closed loop: a client starts its next
conversation when one ends); between two turns its user thinks for an exponentially distributed
time of mean --think-ms (0: none; drawn per conversation from --seed, so runs repeat). Every request carries --salt as cache_salt, so runs with different
salts never reuse each other's KV on the same workers.

Prints one JSON object: per-turn TTFT lists (seconds), prompt tokens and cached tokens (the
usage's prompt_tokens_details.cached_tokens), and the wall time. A stream counts only when it
ended with [DONE] after a finish_reason; anything else is an error and the run exits 1.

usage: bench/multiturn.py --port PORT [--model fast] [--salt S] [--seed N] [--conversations 12]
         [--turns 4] [--concurrency 6] [--system-words 1000] [--user-words 300] [--max-tokens 32]
         [--think-ms 500]

Why these defaults: with as many conversations in flight as workers and no think time, the
worker a conversation's last turn just left is always the least loaded one, so least_loaded is
sticky by accident; 6 in flight over 3 workers with users who pause makes the load, not the
history, decide where least_loaded sends a turn, as in real chat traffic. User messages of ~300
words (pasted text) make a conversation's own history worth keeping.
"""
import argparse
import http.client
import json
import random
import sys
import threading
import time

WORDS = ("the of and to in is was that for on as with by at from his her they which one all "
         "were when there been has more will would their what about into than them these some "
         "time could other only very after first also made like over such new even most through "
         "where much before right too under while last never same another great small world "
         "house water light story river number people country city garden winter morning "
         "question answer letter window mountain evening stone bread horse child friend").split()


def text(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def stream_chat(port, body):
    """POSTs a streaming chat request; returns (ttft_s, reply, usage). Raises on anything but a
    clean stream: HTTP 200, a finish_reason, then [DONE]."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", json.dumps(body),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    ttft, reply, usage, finished, done = None, [], None, False, False
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            done = True
            break
        ev = json.loads(data)
        if "error" in ev:
            raise RuntimeError(f"stream error: {ev['error']}")
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices", []):
            piece = (ch.get("delta") or {}).get("content") or ""
            if piece and ttft is None:
                ttft = time.perf_counter() - t0
            reply.append(piece)
            finished = finished or bool(ch.get("finish_reason"))
    c.close()
    if not (done and finished and usage):
        raise RuntimeError("the stream did not end cleanly (no finish_reason, usage or [DONE])")
    if ttft is None:
        ttft = time.perf_counter() - t0  # an empty reply: the whole request
    return ttft, "".join(reply), usage


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", default="fast")
    ap.add_argument("--salt", default="")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--conversations", type=int, default=12)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=6)
    ap.add_argument("--system-words", type=int, default=1000)
    ap.add_argument("--user-words", type=int, default=300)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--think-ms", type=float, default=500.0)
    o = ap.parse_args()
    for k in ("conversations", "turns", "concurrency", "max_tokens"):
        if getattr(o, k) < 1:
            ap.error(f"--{k.replace('_', '-')} must be at least 1")
    if o.think_ms < 0:
        ap.error("--think-ms must be at least 0")
    rng = random.Random(o.seed)
    system = text(rng, o.system_words)
    users = [[text(rng, o.user_words) for _ in range(o.turns)] for _ in range(o.conversations)]
    think = [[rng.expovariate(1000.0 / o.think_ms) if o.think_ms else 0.0
              for _ in range(o.turns)] for _ in range(o.conversations)]
    ttft = [[] for _ in range(o.turns)]
    prompt = [0] * o.turns
    cached = [0] * o.turns
    errors, lock, next_conv = [], threading.Lock(), [0]

    def client():
        while True:
            with lock:
                if next_conv[0] >= o.conversations or errors:
                    return
                ci = next_conv[0]
                next_conv[0] += 1
            msgs = [{"role": "system", "content": system}]
            for t in range(o.turns):
                if t:
                    time.sleep(think[ci][t])
                msgs.append({"role": "user", "content": users[ci][t]})
                body = {"model": o.model, "messages": msgs, "max_tokens": o.max_tokens,
                        "temperature": 0, "stream": True, "cache_salt": o.salt,
                        "stream_options": {"include_usage": True}}
                try:
                    s, reply, usage = stream_chat(o.port, body)
                except Exception as e:  # noqa: BLE001 - reported, and the run fails
                    with lock:
                        errors.append(f"conversation {ci} turn {t}: {e}")
                    return
                with lock:
                    ttft[t].append(s)
                    prompt[t] += usage.get("prompt_tokens", 0)
                    cached[t] += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                msgs.append({"role": "assistant", "content": reply})

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(o.concurrency)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # assistant messages sent back: turn t re-sends the t replies before it
    sent = o.conversations * o.turns * (o.turns - 1) // 2
    out = {"ttft": ttft, "prompt_tokens": prompt, "cached_tokens": cached,
           "assistant_messages": sent, "wall_s": time.perf_counter() - t0, "errors": errors}
    print(json.dumps(out))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
