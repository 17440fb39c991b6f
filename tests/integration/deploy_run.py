"""Starts the commands of a deploy file as they are written, on this machine.

compose: the secrets made by deploy/secrets.sh as the file's comments say, then every service's
`command` of deploy/docker-compose.yaml, one-shot services first (in depends_on order), then the
long-running ones, each service's secrets where Compose mounts them; k8s: the ConfigMap's sol.yaml and every
container command of deploy/k8s/sol.yaml, with the keys and models its comments say to make.
Only addresses and mount points are mapped (a service name or the 0.0.0.0 listen address to
127.0.0.1 and free ports, a volume mount to a folder here; a GPU worker's `--backend cuda` to the
CUDA emulation); the binaries come from the build folder. Then a chat request must go through
every pool. Usage: deploy_run.py compose|k8s FILE WORKDIR BUILD HTTP_PORT ZMQ_PORT"""
import json, os, shutil, subprocess, sys, time, urllib.error, urllib.request
import yaml

mode, path, work, build, http_port, zmq_port = sys.argv[1:7]
env = dict(os.environ)
env["PATH"] = ":".join([f"{build}/router", f"{build}/worker", f"{build}/tools", env["PATH"]])
procs = []
api_key = None  # the compose file's clients need one (its api_keys secret)


def mapped(arg, mounts):
    for a, b in (("tcp://router:5555", f"tcp://127.0.0.1:{zmq_port}"),
                 ("tcp://sol-router-workers.sol.svc:5555",
                  f"tcp://sol-router-workers.sol.svc:{zmq_port}"),
                 ("tcp://0.0.0.0:5555", f"tcp://0.0.0.0:{zmq_port}"),
                 ("0.0.0.0:8080", f"127.0.0.1:{http_port}")):
        arg = arg.replace(a, b)
    for mount, here in sorted(mounts.items(), key=lambda m: -len(m[0])):
        arg = arg.replace(mount, here)
    return arg


def run(name, cmd, mounts, background):
    cmd = [mapped(a, mounts) for a in cmd]
    if mode == "k8s" and "--backend" in cmd:
        i = cmd.index("--backend")
        if cmd[i + 1] == "cuda":
            cmd[i + 1] = "cuda-emu"  # no GPU here: the same kernels on the CPU
    log = open(f"{work}/{name}.log", "w")
    print(f"  {name}: {' '.join(cmd)[:160]}")
    if background:
        procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
        return
    rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc:
        sys.exit(f"{name} exited {rc}: {open(f'{work}/{name}.log').read()[-600:]}")


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.read()


def wait_ready(seconds=120):
    end = time.time() + seconds
    while time.time() < end:
        try:
            if get(f"http://127.0.0.1:{http_port}/ready")[0] == 200:
                return
        except Exception:
            pass
        for p in procs:
            if p.poll() is not None:
                sys.exit(f"a process exited early ({p.args[0]}, rc {p.returncode}); see {work}")
        time.sleep(0.2)
    sys.exit(f"the router never became ready; logs in {work}")


def chat(pool):
    body = json.dumps({"model": pool, "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 3}).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(f"http://127.0.0.1:{http_port}/v1/chat/completions", body,
                                 headers)
    with urllib.request.urlopen(req, timeout=60) as r:
        out = json.loads(r.read())
    assert out["choices"][0]["message"]["content"] is not None, out
    print(f"  chat through pool {pool}: {out['usage']}")


def gpu_service(name, cmd, mounts):
    """A GPU worker (profile gpu) runs as written up to the GPU: its flags, keys and model path
    are read, then it must stop with a clear error (no NVIDIA driver or device here; the
    small models it serves are too big for the CUDA emulation in a test)."""
    cmd = [mapped(a, mounts) for a in cmd]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr
    if out.returncode == 0 or "backend cuda" not in text:
        sys.exit(f"{name}: expected a clear 'backend cuda' error without a GPU, got rc "
                 f"{out.returncode}: {text[-400:]}")
    print(f"  {name}: needs a GPU; without one it stops as it should: {text.strip().splitlines()[-1][-90:]}")


def secrets_of(name, s, made):
    """The service's secrets as Compose mounts them (short syntax: /run/secrets/NAME; long: its
    target, absolute or under /run/secrets), in a folder of its own standing for /run/secrets."""
    run_dir = f"{work}/run-{name}"
    for sec in s.get("secrets", []):
        src, target = (sec, sec) if isinstance(sec, str) else (sec["source"], sec.get("target"))
        target = target or src
        rel = target[len("/run/secrets/"):] if target.startswith("/run/secrets/") else target
        if rel.startswith("/"):
            sys.exit(f"{name}: secret target {target} outside /run/secrets is not mapped here")
        os.makedirs(os.path.dirname(f"{run_dir}/{rel}"), exist_ok=True)
        shutil.copyfile(made[src], f"{run_dir}/{rel}")
    return {"/run/secrets": run_dir}


def host_path(src, sec_dir):
    """A bind source of the Compose file: only its secrets folder (SOL_SECRETS) is one."""
    for prefix in ("${SOL_SECRETS:-./secrets}", "./secrets", sec_dir):
        if src.startswith(prefix):
            return sec_dir + src[len(prefix):]
    sys.exit(f"bind source {src}: not under the secrets folder, not mapped here")


def compose():
    global api_key
    doc = yaml.safe_load(open(path))
    sec_dir = f"{work}/secrets"
    subprocess.run([os.path.join(os.path.dirname(path), "secrets.sh"), sec_dir], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    # the file's ${SOL_SECRETS:-./secrets}/X is what deploy/secrets.sh writes; here, into sec_dir
    made = {k: host_path(v["file"], sec_dir) for k, v in doc.get("secrets", {}).items()}
    for k, f in made.items():
        if not os.path.exists(f):
            sys.exit(f"secret {k}: deploy/secrets.sh did not write {f}")
    if "api_keys" in made:
        api_key = open(made["api_keys"]).read().split()[0]
    vols = {v: f"{work}/vol-{v}" for v in doc.get("volumes", {})}
    for d in vols.values():
        os.makedirs(d, exist_ok=True)
    services = doc["services"]
    order, done = [], set()
    while len(order) < len(services):
        for name, s in services.items():
            deps = s.get("depends_on", {})
            if name not in done and all(d in done for d in deps):
                order.append(name), done.add(name)
    one_shot = {d for s in services.values()
                for d, c in (s.get("depends_on") or {}).items()
                if isinstance(c, dict) and c.get("condition") == "service_completed_successfully"}
    for name in order:
        s = services[name]
        mounts = secrets_of(name, s, made)
        mounts["/tmp/sol-health"] = f"{work}/{name}.health"  # each container has its own /tmp
        for v in s.get("volumes", []):
            src, dst = v.replace("${SOL_SECRETS:-./secrets}", sec_dir).split(":")[:2]
            mounts[dst] = vols[src] if src in vols else host_path(src, sec_dir)
        cmd = [c.replace("$$", "$") for c in s["command"]]
        if "--backend" in cmd and cmd[cmd.index("--backend") + 1] == "cuda":
            gpu_service(name, cmd, mounts)
            continue
        run(name, cmd, mounts, background=name not in one_shot)
    wait_ready()
    if api_key:  # the key is required, not just accepted
        try:
            get(f"http://127.0.0.1:{http_port}/v1/models")
            sys.exit("the router answered without the API key of the api_keys secret")
        except urllib.error.HTTPError as e:
            assert e.code == 401, e.code
        print("  without the API key: 401")
    pools = list(dict.fromkeys(s["command"][s["command"].index("--pool") + 1]
                               for s in services.values() if "--pool" in s.get("command", [])))
    for pool in pools:
        chat(pool)
    for name, s in services.items():  # the workers' health files, which their healthchecks read
        if "--health-file" in s.get("command", []) and "--backend" not in s["command"]:
            if not open(f"{work}/{name}.health").read().startswith("healthy "):
                sys.exit(f"{name}: its health file says no")
            print(f"  {name}: health file renewed ({open(f'{work}/{name}.health').read().strip()})")


def k8s():
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    curve, models, etc = f"{work}/curve", f"{work}/models", f"{work}/etc"
    for d in (curve, models, etc):
        os.makedirs(d, exist_ok=True)
    mounts = {"/etc/sol-curve": curve, "/etc/sol": etc, "/models": models,
              "/tmp/sol-health": f"{work}/worker.health"}
    # the keys and secrets the manifest's comments say to make (both secrets in one folder here)
    subprocess.run(["sol-keygen", "-d", curve, "router", "worker-fast", "worker-precise"], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    # the headless Service's name answers with this machine (one router replica runs here)
    open(f"{work}/names", "w").write("sol-router-workers.sol.svc 127.0.0.1\n")
    env["SOL_TEST_RESOLVE_FILE"] = f"{work}/names"
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    open(f"{etc}/sol.yaml", "w").write(mapped(cm["data"]["sol.yaml"], mounts))
    deps = [d for d in docs if d["kind"] == "Deployment"]
    wanted = set()
    for d in deps:
        for c in d["spec"]["template"]["spec"]["containers"]:
            wanted |= {a for a in c["command"] if a.startswith("/models/")}
    for m in sorted(wanted):  # tiny synthetic stand-ins for the PVC's models
        out = mapped(m, mounts)
        if "draft" in m:
            continue
        typ = "q4_0" if "q4_0" in m else "f16"
        subprocess.run(["sol-mkmodel", "-o", out, "--type", typ, "--seed", "1", "--vocab", "600"],
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for m in sorted(wanted):
        if "draft" in m:
            target = mapped(m.replace("draft", "model"), mounts)
            subprocess.run(["sol-mkmodel", "--draft-of", target, "-o", mapped(m, mounts),
                            "--layers", "1"], env=env, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    deps.sort(key=lambda d: d["metadata"]["name"] != "sol-router")
    pools = []
    for d in deps:
        for c in d["spec"]["template"]["spec"]["containers"]:
            run(d["metadata"]["name"], c["command"], mounts, background=True)
            if "--pool" in c["command"]:
                pools.append(c["command"][c["command"].index("--pool") + 1])
        if d["metadata"]["name"] == "sol-router":
            time.sleep(0.5)
    wait_ready()
    for pool in pools:
        chat(pool)
    if "health_file" in cm["data"]["sol.yaml"]:  # what the workers' liveness probes read
        text = open(f"{work}/worker.health").read()
        assert text.startswith("healthy "), text
        print(f"  the workers' health file: {text.strip()}")


try:
    compose() if mode == "compose" else k8s()
finally:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
