"""Builds a Debian-based Dockerfile of deploy/docker without Docker: each stage's base is made with
debootstrap (debian:bookworm and -slim: a minbase bookworm), then the stage's own instructions run
in a chroot as Docker would run them (RUN through /bin/sh -c in WORKDIR with ENV, COPY . of the
build context (the repository's folder less what .dockerignore excludes, as Docker sends it),
COPY --from another stage, USER); then the final stage runs as a container would: its ENTRYPOINT
+ CMD (exec form) as its USER must exit 0, a router started with its defaults must listen on
exactly the EXPOSEd ports, a router and sim workers answer a request, and its HEALTHCHECK passes.
For machines without a Docker engine (this project's CI and development machines): it proves the
Dockerfile's steps, not Docker's layering. Needs root, debootstrap and network to a Debian mirror.
Usage: python3 deploy/docker/chroot_build.py [DOCKERFILE (deploy/docker/Dockerfile)] [WORKDIR]"""
import json, os, re, shlex, shutil, subprocess, sys, tempfile, time, urllib.request

src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
dockerfile = sys.argv[1] if len(sys.argv) > 1 else f"{src}/deploy/docker/Dockerfile"
work = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="sol-chroot-")
keep = len(sys.argv) > 2  # a WORKDIR given is kept; a temporary one is removed after success
BASES = {"debian:bookworm": "bookworm", "debian:bookworm-slim": "bookworm"}
if os.geteuid() != 0:
    sys.exit("chroot_build.py: needs root (debootstrap, chroot, mounts)")


def instructions(path):
    """(KEYWORD, argument text) per instruction, continuation lines joined, comments dropped."""
    out, cur = [], ""
    for line in open(path):
        s = line.rstrip("\n")
        if not cur and (not s.strip() or s.lstrip().startswith("#")):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        kw, _, arg = cur.strip().partition(" ")
        out.append((kw.upper(), arg.strip()))
        cur = ""
    return out


def stages(instrs):
    st = []
    for kw, arg in instrs:
        if kw == "FROM":
            w = arg.split()
            st.append({"base": w[0], "name": w[2] if len(w) > 2 else str(len(st)), "steps": []})
        else:
            st[-1]["steps"].append((kw, arg))
    return st


def dockerignore_rules(context):
    """.dockerignore as (negated, compiled pattern) in file order: Docker's syntax (a leading /
    and ./ dropped, * and ? within one path element, ** across elements, ! to re-include; a
    pattern that matches a folder excludes everything below it; the last matching rule wins)."""
    rules = []
    path = f"{context}/.dockerignore"
    for line in open(path) if os.path.exists(path) else []:
        pat = line.strip()
        if not pat or pat.startswith("#"):
            continue
        neg = pat.startswith("!")
        pat = pat[1:].strip() if neg else pat
        pat = os.path.normpath(pat.lstrip("/"))  # also drops a leading ./ and a trailing /
        rx = ""
        i = 0
        while i < len(pat):
            if pat.startswith("**/", i):
                rx, i = rx + "(?:.*/)?", i + 3
            elif pat.startswith("**", i):
                rx, i = rx + ".*", i + 2
            elif pat[i] == "*":
                rx, i = rx + "[^/]*", i + 1
            elif pat[i] == "?":
                rx, i = rx + "[^/]", i + 1
            else:
                rx, i = rx + re.escape(pat[i]), i + 1
        rules.append((neg, re.compile(rx + "(?:/.*)?$")))  # a folder's match covers its contents
    return rules


def ignored(rules, rel):
    out = False
    for neg, rx in rules:
        if rx.match(rel):
            out = not neg
    return out


def copy_context(context, dest):
    """COPY . DEST: every file of the build context that .dockerignore does not exclude."""
    rules, n = dockerignore_rules(context), 0
    for d, dirs, files in os.walk(context):
        rel_d = os.path.relpath(d, context)
        for name in list(dirs):
            rel = os.path.normpath(f"{rel_d}/{name}")
            # a folder is skipped whole only when no ! rule could re-include something below it
            if ignored(rules, rel) and not any(neg for neg, _ in rules):
                dirs.remove(name)
        for name in files:
            rel = os.path.normpath(f"{rel_d}/{name}")
            if ignored(rules, rel):
                continue
            os.makedirs(os.path.dirname(f"{dest}/{rel}"), exist_ok=True)
            shutil.copy2(f"{context}/{rel}", f"{dest}/{rel}", follow_symlinks=False)
            n += 1
    print(f"  COPY . : {n} files of the build context (.dockerignore applied)", flush=True)


def sh(cmd, **kw):
    print(f"  $ {cmd if isinstance(cmd, str) else ' '.join(cmd)}"[:160], flush=True)
    return subprocess.run(cmd, check=True, **kw)


def mounts(root, on):
    for d in ("proc", "sys", "dev"):
        target = f"{root}/{d}"
        if on:
            os.makedirs(target, exist_ok=True)
            sh(["mount", "--rbind", f"/{d}", target])
        else:
            subprocess.run(["umount", "-R", target], check=False)
    if on:
        shutil.copyfile("/etc/resolv.conf", f"{root}/etc/resolv.conf")


def in_root(root, cmd, env, workdir, user=None):
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    inner = f"cd {shlex.quote(workdir)} && exec env {envs} /bin/sh -c {shlex.quote(cmd)}"
    spec = ["--userspec", f"{user}:{user}"] if user else []
    return ["chroot", *spec, root, "/bin/sh", "-c", inner]


def build_stage(stage, roots):
    if stage["base"] not in BASES:
        sys.exit(f"base {stage['base']}: only Debian bases can be reproduced without Docker")
    # every stage starts from a fresh base, as FROM does; debootstrap runs once per suite
    suite, root = BASES[stage["base"]], f"{work}/{stage['name']}"
    base = f"{work}/base-{suite}.tar"
    if not os.path.exists(base):
        tmp = f"{work}/base-{suite}"
        shutil.rmtree(tmp, ignore_errors=True)
        sh(["debootstrap", "--variant=minbase", suite, tmp, "http://deb.debian.org/debian"],
           stdout=subprocess.DEVNULL)
        sh(["tar", "-C", tmp, "-cf", base, "."])
        shutil.rmtree(tmp)
    busy = [m.split()[1] for m in open("/proc/mounts") if m.split()[1].startswith(root + "/")]
    if busy:  # never delete through a bind mount of the host's /dev, /proc or /sys
        sys.exit(f"{root}: still mounted ({', '.join(busy)}); unmount first")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    sh(["tar", "-C", root, "-xf", base])
    roots[stage["name"]] = root
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "HOME": "/root", "DEBIAN_FRONTEND": "noninteractive"}
    workdir, user = "/", None
    mounts(root, True)
    try:
        for kw, arg in stage["steps"]:
            if kw == "RUN":
                sh(in_root(root, arg, env, workdir))
            elif kw == "WORKDIR":
                workdir = arg
                os.makedirs(root + workdir, exist_ok=True)
            elif kw == "ENV":
                k, _, v = arg.partition("=")
                env[k] = v.replace("$PATH", env["PATH"])
            elif kw == "COPY" and arg.startswith("--from="):
                frm, a, b = arg.split()
                sh(["cp", "-a", roots[frm[7:]] + a, root + b])
            elif kw == "COPY" and arg == ". .":
                copy_context(src, root + workdir)
            elif kw == "USER":
                user = arg
            elif kw in ("EXPOSE", "ENTRYPOINT", "CMD", "HEALTHCHECK"):
                pass  # runtime metadata: checked below for the final stage
            else:
                sys.exit(f"{kw} {arg}: not reproduced by this script")
    finally:
        mounts(root, False)
    return root, env, user


def exec_form(steps, kw):
    """An ENTRYPOINT or CMD in exec form (a JSON array of strings), [] when absent."""
    args = [a for k, a in steps if k == kw]
    if not args:
        return []
    try:
        v = json.loads(args[-1])
    except ValueError:
        sys.exit(f"{kw} {args[-1]}: not in exec form (a JSON array): a shell form would run "
                 f"under /bin/sh -c, which neither forwards signals nor is what the docs say")
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        sys.exit(f"{kw} {args[-1]}: want a JSON array of strings")
    return v


def listening_ports(pid):
    """The TCP ports process `pid` listens on (its socket inodes in /proc/net/tcp{,6})."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            t = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if t.startswith("socket:["):
            inodes.add(t[8:-1])
    ports = set()
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in list(open(f))[1:]:
            w = line.split()
            if w[3] == "0A" and w[9] in inodes:  # 0A: LISTEN
                ports.add(int(w[1].rsplit(":", 1)[1], 16))
    return ports


def check_runtime_metadata(root, env, user, steps):
    """ENTRYPOINT + CMD run as the container's default command; EXPOSE names the ports a router
    with its default settings listens on, no more and no fewer."""
    cmd = exec_form(steps, "ENTRYPOINT") + exec_form(steps, "CMD")
    if not cmd:
        sys.exit("the final stage has neither ENTRYPOINT nor CMD: the container has no command")
    sh(in_root(root, "exec " + " ".join(shlex.quote(c) for c in cmd) + " >/dev/null", env, "/",
               user))
    print(f"  the default command {cmd} exits 0 as {user or 'root'}")
    exposed = {int(p.split("/")[0]) for k, a in steps if k == "EXPOSE" for p in a.split()}
    p = subprocess.Popen(in_root(root, "exec sol-router", env, "/", user))
    try:
        for _ in range(100):
            got = listening_ports(p.pid) if p.poll() is None else None
            if got is None or (got and got >= exposed):
                break
            time.sleep(0.1)
        time.sleep(0.3)  # both sockets bound: nothing more is opened after startup
        got = listening_ports(p.pid) if p.poll() is None else None
    finally:
        p.terminate()
        p.wait(timeout=10)
    if got != exposed:
        sys.exit(f"EXPOSE {sorted(exposed)}, but a router with its defaults listens on "
                 f"{sorted(got) if got is not None else 'nothing (it exited)'}")
    print(f"  EXPOSE {sorted(exposed)}: the ports a router with its defaults listens on")


def check_final(root, env, user, steps):
    """The final stage as a container would run: its default command, its EXPOSEd ports, the
    binaries as USER, a router and a sim worker answer a request, the HEALTHCHECK command passes
    for the router."""
    mounts(root, True)
    procs = []
    try:
        for b in ("sol-router", "sol-worker", "sol-keygen"):
            sh(in_root(root, f"{b} --help >/dev/null", env, "/", user))
        check_runtime_metadata(root, env, user, steps)
        procs.append(subprocess.Popen(in_root(root, "exec sol-router --listen 127.0.0.1:8080 --bind "
                                              "tcp://127.0.0.1:5555", env, "/", user)))
        for pool in ("fast", "precise"):  # /ready wants a worker in every pool
            procs.append(subprocess.Popen(in_root(
                root, f"exec sol-worker --backend sim --pool {pool} --router "
                f"tcp://127.0.0.1:5555 --health-file /tmp/sol-health-{pool}", env, "/", user)))
        for _ in range(100):
            try:
                urllib.request.urlopen("http://127.0.0.1:8080/ready", timeout=1)
                break
            except Exception:
                time.sleep(0.2)
        else:
            sys.exit("the router in the image never became ready")
        body = json.dumps({"model": "precise", "prompt": "hi", "max_tokens": 3}).encode()
        req = urllib.request.Request("http://127.0.0.1:8080/v1/completions", body,
                                     {"Content-Type": "application/json"})
        out = json.loads(urllib.request.urlopen(req, timeout=10).read())
        print(f"  a completion through the image's binaries: {out['usage']}")
        hc = [a for k, a in steps if k == "HEALTHCHECK"]
        if hc:
            cmd = hc[0][hc[0].index("CMD ") + 4:]
            sh(in_root(root, cmd, env, "/", user))  # PID 1 here is not sol-worker: the router test
            print("  HEALTHCHECK passes for the router")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=10)
        mounts(root, False)


st = stages(instructions(dockerfile))
roots = {}
for stage in st:
    print(f"stage {stage['name']} from {stage['base']}", flush=True)
    last = build_stage(stage, roots)
check_final(*last, st[-1]["steps"])
print(f"{os.path.relpath(dockerfile, src)}: every stage built in a chroot; the image's binaries "
      f"serve a request as {last[2] or 'root'}" + (f" (roots in {work})" if keep else ""))
if not keep and not [m for m in open("/proc/mounts") if m.split()[1].startswith(work + "/")]:
    shutil.rmtree(work)
