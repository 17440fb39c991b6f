#!/usr/bin/env bash
# Promise: no include points from a lower room to a higher one (docs/architecture.md, "Rooms"),
# in the worker and in the router; no source lies loose beside a process's main.c.
# CMake already refuses such an include (each room sees only the folders of the rooms it links);
# this test keeps the table itself honest, so a room cannot climb by growing a link in CMake.
set -euo pipefail
cd "${SOL_SOURCE:?}"
python3 - <<'PY'
import os, re, sys
# room -> rooms it may include from (besides itself); common and proto are below everything.
allowed = {
    "common": set(),
    "router/grammar": {"common"},
    "router/route": {"common"},
    "router/api": {"router/grammar", "common"},
    "router/http": {"router/api", "router/route", "router/grammar", "common"},
    "router/broker": {"router/http", "router/api", "router/route", "router/grammar", "common"},
    "router/setup": {"router/broker", "router/http", "router/api", "router/route",
                     "router/grammar", "common"},
    "worker/gguf": {"common"},
    "worker/backend/comm": {"common"},
    "worker/backend": {"worker/gguf", "common", "worker/backend/cpu", "worker/backend/cuda",
                       "worker/backend/comm"},
    "worker/backend/cpu": {"worker/backend", "worker/backend/comm", "worker/gguf", "common"},
    "worker/backend/cuda": {"worker/backend", "worker/backend/comm", "worker/gguf", "common"},
    "worker/kv": {"common"},
    "worker/sample": {"common"},
    "worker/text": {"worker/gguf", "common"},
    "worker/model": {"worker/backend", "worker/backend/comm", "worker/gguf", "common"},
    "worker/speculate": {"worker/model", "worker/kv", "worker/sample", "worker/backend",
                    "worker/backend/comm", "worker/gguf", "common"},
    "worker/engine": {"worker/speculate", "worker/model", "worker/kv", "worker/sample", "worker/text",
                      "worker/backend", "worker/backend/comm", "worker/gguf", "common"},
    "worker/node": {"worker/engine", "worker/speculate", "worker/model", "worker/kv", "worker/sample",
                    "worker/text", "worker/backend", "worker/backend/comm", "worker/gguf",
                    "common"},
}
# The registry (backend/registry.c) and its loader of the CUDA module (cuda_loader.c) are the only
# files of the backend room that may see cpu/, cuda/.
registry_only = {"worker/backend/cpu", "worker/backend/cuda"}
registry_files = {"registry.c", "cuda_loader.c"}
home = {}
for room in allowed:
    for f in os.listdir(room):
        if f.endswith(".h"):
            home[f] = room
bad = []
for top in ("worker", "router"):
    loose = [f for f in os.listdir(top) if os.path.isfile(os.path.join(top, f))
             and f.endswith((".c", ".h")) and f != "main.c"]
    if loose:
        bad.append(f"files directly in {top}/ besides main.c: {loose}")
for room, ok in allowed.items():
    for f in sorted(os.listdir(room)):
        if not f.endswith((".c", ".h", ".cu")):
            continue
        path = os.path.join(room, f)
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m or m.group(1) not in home:
                continue  # system, generated (sol.pb-c.h, *.inc) or test-local headers
            to = home[m.group(1)]
            if to == room:
                continue
            if to not in ok or (to in registry_only and room == "worker/backend"
                                and f not in registry_files):
                bad.append(f"{path}:{n}: {room} includes {m.group(1)} from {to}")
for top in ("worker", "router"):
    for room in [d for d, _, _ in os.walk(top) if d != top]:
        if room not in allowed:
            bad.append(f"{room}: a folder the table does not know (add it to the rooms)")
# main.c of each process sees the top room only (and what it exposes)
for top, room in (("router", "router/setup"), ("worker", "worker/node")):
    for n, line in enumerate(open(os.path.join(top, "main.c"), encoding="utf-8"), 1):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if m and m.group(1) in home and home[m.group(1)] not in allowed[room] | {room}:
            bad.append(f"{top}/main.c:{n}: includes {m.group(1)} from {home[m.group(1)]}")
if bad:
    print("\n".join(bad))
    sys.exit(1)
print(f"layering: {len(allowed)} rooms, every include points down")
PY
