"""Soak (issue 16): a router, 3 `--backend sim` workers (pool fast) and 1 CPU worker on the trained
demo model (pool precise) under MINUTES of mixed load, with worker churn: every minute a sim
worker is killed (-9) and a new one joins; every 5 minutes the CPU worker is drained (SIGTERM)
and restarted. The load: streamed completions on fast, greedy chats on precise, clients that
leave mid-stream, malformed requests. Every 30 s it samples the router's RSS and open fds and
every worker's KV use; at the end, with the load stopped, every KV pool must be empty and the
router's RSS and fds back near their level after warm-up. Prints one row per sample and a verdict.
Usage: python3 bench/soak.py [BUILD (build)] [MINUTES (30)] [CLIENTS (6)]"""
import http.client, json, os, random, signal, socket, subprocess, sys, tempfile, threading, time
import urllib.request
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import judge_sse, port  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else "build"
minutes = float(sys.argv[2]) if len(sys.argv) > 2 else 30
clients = int(sys.argv[3]) if len(sys.argv) > 3 else 6
if minutes <= 0 or clients < 1:
    sys.exit("usage: soak.py [BUILD] [MINUTES > 0] [CLIENTS >= 1]")
src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
model = f"{src}/models/demo/demo-target-f16.gguf"
for path in (f"{build}/router/sol-router", f"{build}/worker/sol-worker", model):
    if not os.path.exists(path):
        sys.exit(f"soak.py: {path} not found (build first: cmake --build {build})")
work = tempfile.mkdtemp(prefix="sol-soak-")
rng = random.Random(16)
procs = []


HTTP, ZMQ = port(), f"tcp://127.0.0.1:{port()}"


def spawn(cmd, log):
    p = subprocess.Popen(cmd, stdout=open(f"{work}/{log}", "a"), stderr=subprocess.STDOUT)
    procs.append(p)
    return p


def sim_worker(i):
    return spawn([f"{build}/worker/sol-worker", "--backend", "sim", "--pool", "fast", "--id",
                  f"s{i}", "--router", ZMQ, "--log-level", "warn", "--set",
                  "worker.sim.ttft_ms=20", "--set", "worker.sim.tokens_per_s=200"], f"s{i}.log")


def cpu_worker(i):
    return spawn([f"{build}/worker/sol-worker", "--backend", "cpu", "--threads", "1", "--pool",
                  "precise", "--id", f"c{i}", "--router", ZMQ, "--model", model, "--log-level",
                  "warn", "--set", "worker.kv.num_blocks=512"], f"c{i}.log")


def admin():
    with urllib.request.urlopen(f"http://127.0.0.1:{HTTP}/admin/workers", timeout=10) as r:
        return json.loads(r.read())["workers"]


# Each request is counted once, by sol-bench's rule (benchlib.judge_sse): served (whole: [DONE],
# no error event, every token), refused (429, 503 overloaded: shed before any work), errored
# (another error status, or an error event before any token), lost (an error event after tokens),
# cut (ended with no verdict: closed, reset, silent); then left (clients that left on purpose)
# and bad_ok (a malformed request that was not refused with a 400).
counts = {v: 0 for v in ("served", "refused", "errored", "lost", "cut", "left", "bad_ok")}
per_pool = {p: dict(counts) for p in ("fast", "precise")}
lock, stop = threading.Lock(), threading.Event()


def count(k, pool=None):
    with lock:
        counts[k] += 1
        if pool:
            per_pool[pool][k] += 1


def post(path, body, read_all=True):
    c = http.client.HTTPConnection("127.0.0.1", HTTP, timeout=120)
    c.request("POST", path, body=body if isinstance(body, bytes) else json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return c, r


def one_request(r):
    kind = r.random()
    if kind < 0.5:  # a stream on the sim pool, read to the end: every token, [DONE], no error
        n = r.randint(8, 64)
        c, resp = post("/v1/completions", {"model": "fast", "prompt": "soak", "stream": True,
                                           "stream_options": {"include_usage": True},
                                           "max_tokens": n})
        count(judge_sse(resp.status, resp.read(), n), "fast")
    elif kind < 0.75:  # a greedy chat on the CPU worker
        c, resp = post("/v1/chat/completions", {"model": "precise", "temperature": 0,
                                                "max_tokens": r.randint(4, 24),
                                                "messages": [{"role": "user",
                                                              "content": "In the beginning"}]})
        data = resp.read()
        if resp.status != 200:
            count(judge_sse(resp.status, data, 0), "precise")
        else:
            ch = json.loads(data).get("choices") or [{}]
            count("served" if ch[0].get("finish_reason") in ("stop", "length") else "errored",
                  "precise")
    elif kind < 0.9:  # a client that leaves mid-stream: the request must be cancelled
        c, resp = post("/v1/completions", {"model": r.choice(["fast", "precise"]),
                                           "prompt": "leave", "stream": True, "max_tokens": 400})
        resp.read(r.randint(1, 300))
        count("left")
    else:  # malformed: must be a 400, never served
        c, resp = post("/v1/completions", b'{"prompt": "x", "max_tokens": -3')
        resp.read()
        if resp.status != 400:
            count("bad_ok")
    c.close()


def client(i):
    r = random.Random(1000 + i)
    while not stop.is_set():
        try:
            one_request(r)
        except (OSError, http.client.HTTPException):
            count("cut")  # the connection failed under the request: no verdict came


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])
    return 0


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def main():
    router = spawn([f"{build}/router/sol-router", "--listen", f"127.0.0.1:{HTTP}", "--bind", ZMQ,
                    "--log-level", "warn"], "router.log")
    sims = {i: sim_worker(i) for i in range(3)}
    next_sim, cpu_n = 3, 0
    cpu = cpu_worker(cpu_n)
    for _ in range(300):
        try:
            if len(admin()) == 4:
                break
        except OSError:
            pass
        time.sleep(0.1)
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    t0, samples = time.time(), []
    print(f"soak: {minutes:g} min, {clients} clients; logs in {work}", flush=True)
    print("| min | router RSS KiB | router fds | workers | KV use (max) | served | left | refused | "
          "errored | lost | cut |")
    print("|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    last_churn, last_cpu = t0, t0
    while time.time() - t0 < minutes * 60:
        time.sleep(30)
        now = time.time()
        if now - last_churn >= 60:  # a sim worker dies, a new one joins
            victim = rng.choice(list(sims))
            sims.pop(victim).send_signal(signal.SIGKILL)
            sims[next_sim] = sim_worker(next_sim)
            next_sim += 1
            last_churn = now
        if now - last_cpu >= 300:  # the CPU worker drains and comes back
            cpu.send_signal(signal.SIGTERM)
            cpu.wait(timeout=120)
            cpu_n += 1
            cpu = cpu_worker(cpu_n)
            last_cpu = now
        ws = admin()
        kv = max((w["kv_usage"] for w in ws), default=0)
        s = (round((now - t0) / 60, 1), rss_kib(router.pid), fds(router.pid), len(ws), kv)
        samples.append(s)
        with lock:
            c = dict(counts)
        print(f"| {s[0]} | {s[1]} | {s[2]} | {s[3]} | {s[4]:.3f} | {c['served']} | {c['left']} | "
              f"{c['refused']} | {c['errored']} | {c['lost']} | {c['cut']} |", flush=True)
    stop.set()
    for t in threads:
        t.join(timeout=150)
    time.sleep(3)  # cancellations and heartbeats settle
    ws = admin()
    busy = [w["id"] for w in ws if w["kv_usage"] > 0 or w["running"] or w["waiting"]]
    end = (rss_kib(router.pid), fds(router.pid))
    warm = samples[min(len(samples) - 1, 1)]  # after a minute of load: the warm-up level
    print(f"\nafter the load: router RSS {end[0]} KiB (warm {warm[1]}), fds {end[1]} (warm "
          f"{warm[2]}), workers with KV in use: {busy or 'none'}")
    # a stream that started and broke is the failure this soak is for; requests refused or
    # errored before any token (the precise pool's only worker restarting) are reported beside it
    ok = (not busy and counts["lost"] == 0 and counts["cut"] == 0 and counts["bad_ok"] == 0 and
          end[0] <= warm[1] * 1.10 + 4096 and end[1] <= warm[2] + 8)
    for pool, c in per_pool.items():
        print(f"pool {pool}: " + ", ".join(f"{k} {v}" for k, v in c.items() if k not in
                                            ("left", "bad_ok")))
    print(f"verdict: {'PASS' if ok else 'FAIL'} (lost {counts['lost']}, cut {counts['cut']}, "
          f"malformed served {counts['bad_ok']}; not served before any token: refused "
          f"{counts['refused']}, errored {counts['errored']})")
    return 0 if ok else 1


rc = 1
try:
    rc = main()
finally:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
sys.exit(rc)
