"""Scale simulation (issue 15): routers + N `--backend sim` workers in two pools + S concurrent
streams on 127.0.0.1, with worker churn (leave = SIGTERM drain, die = kill -9, join = a new
worker) at a rate per minute. Reports router CPU per 1,000 tokens/s, latency added over a
stream's ideal duration (p50/p99), max/min share of work per worker that lived through the run,
failovers, streams not served whole (must be 0; counted by bench_router: served only with
[DONE], no error event and every token) and how long a joining worker takes to get load.
Usage: scale.py BUILD ROUTERS WORKERS STREAMS SECONDS CHURN_PER_MIN"""
import json, os, random, signal, socket, subprocess, sys, tempfile, threading, time, urllib.request
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import port  # noqa: E402

build, n_routers, n_workers, n_streams, seconds, churn = (sys.argv[1], *map(int, sys.argv[2:7]))
TTFT_MS, TPS, TOKENS = 20, 50, 100  # each stream: 100 tokens at 50 tokens/s = 2.02 s ideal
IDEAL = TTFT_MS / 1000 + TOKENS / TPS
work = tempfile.mkdtemp(prefix="sol-scale-")
procs, rng = [], random.Random(7)


def spawn(cmd, log):
    p = subprocess.Popen(cmd, stdout=open(f"{work}/{log}", "w"), stderr=subprocess.STDOUT)
    procs.append(p)
    return p


def get(http, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{http}{path}", timeout=10) as r:
        return json.loads(r.read())


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


routers = []
for i in range(n_routers):
    http, zmq = port(), port()
    p = spawn([f"{build}/router/sol-router", "--listen", f"127.0.0.1:{http}", "--bind",
               f"tcp://127.0.0.1:{zmq}", "--log-level", "warn",
               "--set", "router.http.max_connections=8192",
               # every client is 127.0.0.1 here: the per-client cap would refuse most of them
               "--set", "router.http.max_connections_per_client=8192",
               "--set", "router.workers.max_queue_per_pool=100000",
               "--set", "router.workers.heartbeat_ms=500", "--set",
               "router.workers.dead_after_ms=3000"], f"router{i}.log")
    routers.append({"http": http, "zmq": zmq, "proc": p})
time.sleep(0.5)
workers, next_id = {}, [0]


def add_worker(pool=None):
    wid = f"w{next_id[0]}"
    pool = pool or ("fast" if next_id[0] % 2 else "precise")
    next_id[0] += 1
    cmd = [f"{build}/worker/sol-worker", "--backend", "sim", "--pool", pool, "--id", wid,
           "--log-level", "warn", "--set", "worker.heartbeat_ms=1000",
           "--set", f"worker.sim.ttft_ms={TTFT_MS}", "--set", f"worker.sim.tokens_per_s={TPS}",
           "--set", "worker.scheduler.max_num_seqs=128"]
    for r in routers:
        cmd += ["--router", f"tcp://127.0.0.1:{r['zmq']}"]
    workers[wid] = {"proc": spawn(cmd, f"{wid}.log"), "born": time.time()}
    return wid


for _ in range(n_workers):
    add_worker()


def listed(http):
    return {w["id"]: w for w in get(http, "/admin/workers")["workers"]}


t0 = time.time()
while time.time() - t0 < 60:
    if all(len(listed(r["http"])) >= n_workers for r in routers):
        break
    time.sleep(0.5)
print(f"{n_routers} router(s), {n_workers} sim workers registered in {time.time() - t0:.1f} s")

# load: bench_router stream mode per router, streams split evenly
per = n_streams // n_routers
loads = []
for i, r in enumerate(routers):
    reqs = int(per * seconds / (IDEAL + 0.1))
    cmd = [f"{build}/bench/bench_router", "--port", str(r["http"]), "--mode", "stream",
           "--model", "fast" if i % 2 else "precise", "--conns", str(per), "--max-tokens",
           str(TOKENS), "--requests", str(max(reqs, per)), "--time-limit", str(seconds + 30),
           "--read-timeout", "60"]
    loads.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
cpu0 = [cpu_s(r["proc"].pid) for r in routers]
t_load = time.time()

events, join_times = [], []
stop = threading.Event()


def churn_loop():
    if churn <= 0:
        return
    gap = 60.0 / churn
    while not stop.wait(gap):
        kind = rng.choice(["leave", "die", "join"])
        alive = [w for w, v in workers.items() if v["proc"].poll() is None]
        if kind == "join" or len(alive) < n_workers // 2:
            # into a loaded pool (router i loads pool i % 2), to time when it gets work
            wid = add_worker("precise" if n_routers == 1 or rng.random() < 0.5 else "fast")
            t = time.time()
            got = None
            while time.time() - t < 20 and not stop.is_set():
                try:
                    ws = listed(routers[0]["http"])
                    if wid in ws and ws[wid]["inflight"] > 0:
                        got = time.time() - t
                        break
                except Exception:
                    pass
                time.sleep(0.05)
            join_times.append(got)
            events.append(("join", wid))
        else:
            wid = rng.choice(alive)
            workers[wid]["proc"].send_signal(signal.SIGTERM if kind == "leave" else signal.SIGKILL)
            workers[wid]["gone"] = time.time()
            events.append((kind, wid))


th = threading.Thread(target=churn_loop)
th.start()
outs = [l.communicate()[0] for l in loads]
stop.set()
th.join()
wall = time.time() - t_load
cpu = sum(cpu_s(r["proc"].pid) - c for r, c in zip(routers, cpu0))
stats = {}
for o in outs:
    for kv in o.split():
        if "=" in kv:
            k, v = kv.split("=", 1)
            stats.setdefault(k, []).append(v.rstrip("ms").rstrip("s"))
tokens = sum(float(v) for v in stats.get("tokens/s", ["0"])) * 1.0  # served streams' tokens
verdicts = {k: sum(int(v) for v in stats.get(k, ["0"]))
            for k in ("served", "refused", "errored", "lost", "cut", "connect_failures")}
errors = sum(verdicts[k] for k in ("refused", "errored", "lost", "cut", "connect_failures"))
p50 = max(float(v) for v in stats["p50"]) / 1000
p99 = max(float(v) for v in stats["p99"]) / 1000
failovers, shares = 0, []
for r in routers:
    with urllib.request.urlopen(f"http://127.0.0.1:{r['http']}/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("sol_failovers_total{"):
                failovers += int(float(line.split()[-1]))
    for wid, w in listed(r["http"]).items():
        v = workers.get(wid)
        if v and v["born"] < t_load and "gone" not in v and w["pool"] == ("fast" if routers.index(r) % 2 else "precise"):
            shares.append(w["served"])
for o in outs:  # why the first stream of each load was not served, when one was not
    for line in o.splitlines():
        if line.startswith("bench_router: first not served"):
            print(line)
jt = [t for t in join_times if t is not None]
print(f"load: {n_streams} concurrent streams of {TOKENS} tokens ({TPS} tokens/s each, ideal "
      f"{IDEAL:.2f} s), {wall:.0f} s, churn {churn}/min: "
      + ", ".join(f"{k} {sum(1 for e in events if e[0] == k)}" for k in ("leave", "die", "join")))
print(f"tokens/s through the router(s): {tokens:.0f}; router CPU {cpu:.1f} s over {wall:.0f} s "
      f"= {1000 * cpu / wall / max(tokens, 1):.3f} CPU-s per second per 1,000 tokens/s")
print(f"stream duration p50 {p50:.3f} s, p99 {p99:.3f} s: added over ideal p50 "
      f"{(p50 - IDEAL) * 1000:.0f} ms, p99 {(p99 - IDEAL) * 1000:.0f} ms")
if shares:
    print(f"share per surviving worker of the loaded pool: max/min {max(shares)}/{min(shares)} = "
          f"{max(shares) / max(min(shares), 1):.2f}")
print(f"streams: served {verdicts['served']}, not served {errors} (refused "
      f"{verdicts['refused']}, errored {verdicts['errored']}, lost {verdicts['lost']}, cut "
      f"{verdicts['cut']}, clients that could not connect {verdicts['connect_failures']}); "
      f"served = [DONE], no error event, every token")
print(f"failovers {failovers}; a joining worker got load "
      f"after {', '.join(f'{t:.2f}' for t in jt) or '-'} s" + (f" ({len(join_times) - len(jt)} never)" if len(jt) < len(join_times) else ""))
for p in procs:
    if p.poll() is None:
        p.kill()
sys.exit(1 if errors else 0)
