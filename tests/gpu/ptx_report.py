#!/usr/bin/env python3
"""ptx_report.py: what each CUDA kernel asks of memory, read from its PTX and ptxas's report,
without a GPU and without cuobjdump (not on this machine): per kernel, global loads by width
(8/16/32/64/128 bits, as written in the PTX), local-memory loads and stores, registers, stack
and spill bytes for one architecture.

  tests/gpu/ptx_report.py [--arch sm_90] [--nvcc PATH]

PTX is the compiler's view before ptxas: a load ptxas later widens or splits is counted as the
PTX writes it, so this is evidence of what the source asks for (byte loads through memcpy from
unsigned char pointers show as ld.global.u8), not a substitute for the SASS that a GPU machine's
cuobjdump gives (tests/gpu/run.sh saves it). A report, not a check: it exits 0 whatever it finds,
and 1 only when a kernel source does not compile.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
CUDA_DIR = os.path.join(ROOT, "worker", "backend", "cuda")
INCLUDES = [CUDA_DIR, os.path.join(ROOT, "worker", "backend"), os.path.join(ROOT, "common"),
            os.path.join(ROOT, "worker", "gguf")]

# Bits of one PTX load: vector count times the element type's width.
TYPE_BITS = {"8": 8, "16": 16, "32": 32, "64": 64, "128": 128}
LOAD = re.compile(r"\bld\.global(?:\.[a-z]+)*?(?:\.v(\d))?\.[bsuf](\d+)\b")
LOCAL = re.compile(r"\b(ld|st)\.local\b")
ENTRY = re.compile(r"^\.(?:visible |weak )?\.?entry\s+(\S+)\(", re.M)
PTXAS = re.compile(r"Compiling entry function '([^']+)'|Function properties for (\S+)|"
                   r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads|"
                   r"Used (\d+) registers")


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                             check=True).stdout.split("\n")
        return {n: re.sub(r"^void |\(.*", "", d) for n, d in zip(names, out)}
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def compile_one(nvcc, src, arch, tmp):
    ptx = os.path.join(tmp, os.path.basename(src) + ".ptx")
    inc = [f"-I{d}" for d in INCLUDES]
    r = subprocess.run([nvcc, "-std=c++17", f"-arch={arch}", "-ptx", *inc, src, "-o", ptx],
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{src}: nvcc -ptx failed:\n{r.stderr[-2000:]}")
    v = subprocess.run([nvcc, "-std=c++17", f"-arch={arch}", "-c", "-Xptxas", "-v", *inc, src,
                        "-o", os.path.join(tmp, "x.o")], capture_output=True, text=True)
    return open(ptx).read(), v.stderr


def per_entry(ptx):
    """{mangled name: its PTX body}"""
    marks = [(m.group(1), m.start()) for m in ENTRY.finditer(ptx)]
    return {name: ptx[start:(marks[i + 1][1] if i + 1 < len(marks) else len(ptx))]
            for i, (name, start) in enumerate(marks)}


def loads(body):
    widths = {8: 0, 16: 0, 32: 0, 64: 0, 128: 0}
    for m in LOAD.finditer(body):
        bits = int(m.group(2)) * int(m.group(1) or 1)
        widths[bits] = widths.get(bits, 0) + 1
    local = sum(1 for _ in LOCAL.finditer(body))
    return widths, local


def resources(ptxas_log):
    """{mangled name: (registers, stack, spill stores, spill loads)} from ptxas -v."""
    res, cur, frame = {}, None, (0, 0, 0)
    for m in PTXAS.finditer(ptxas_log):
        if m.group(1):
            cur = m.group(1)
        elif m.group(3):
            frame = (int(m.group(3)), int(m.group(4)), int(m.group(5)))
        elif m.group(6) and cur:
            res[cur] = (int(m.group(6)),) + frame
            cur, frame = None, (0, 0, 0)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc"))
    o = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for src in sorted(glob.glob(os.path.join(CUDA_DIR, "k_*.cu"))):
            try:
                ptx, log = compile_one(o.nvcc, src, o.arch, tmp)
            except RuntimeError as e:
                print(e, file=sys.stderr)
                return 1
            res = resources(log)
            bodies = per_entry(ptx)
            names = demangle(list(bodies))
            for mangled, body in bodies.items():
                w, local = loads(body)
                regs, stack, sst, sld = res.get(mangled, (0, 0, 0, 0))
                rows.append((os.path.basename(src), names[mangled], w, local, regs, stack, sst + sld))
    print(f"PTX global loads by width and ptxas resources, {o.arch} (tests/gpu/ptx_report.py)")
    print(f"{'file':16} {'kernel':34} {'8b':>5} {'16b':>5} {'32b':>5} {'64b':>5} {'128b':>5} "
          f"{'local':>5} {'regs':>5} {'stack':>5} {'spill':>5}")
    for f, k, w, local, regs, stack, spill in rows:
        print(f"{f:16} {k[:34]:34} {w[8]:5d} {w[16]:5d} {w[32]:5d} {w[64]:5d} {w[128]:5d} "
              f"{local:5d} {regs:5d} {stack:5d} {spill:5d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
