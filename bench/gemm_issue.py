#!/usr/bin/env python3
"""gemm_issue.py: the issue-slot counts behind bench/gpu_model.py's tensor-core GEMM efficiencies.

  bench/gemm_issue.py [--arch 90] [--kernels k_mma]

For each kernel family and weight type, compiles its source (worker/backend/cuda/k_mma.cu) for
sm_ARCH with the weight type fixed at the kernel's entry (a copy of the file,
its weight view copied and `w.type = SOL_CUDA_<T>;` set (ANCHOR), so the other types' code drops out),
disassembles it with cuobjdump (scripts/cuda-tools; its branches carry absolute targets) and
finds the kernel's main loop: the largest backward branch whose body holds tensor-core MMAs (an
inner loop in it would be counted its family's trip count times). Static counts: the few
branches inside a loop are counted on both sides.

An SM sub-partition issues one warp instruction a clock; at the dense peak an m16n8k16 F16 HMMA
and an m16n8k32 s8 IMMA each take 4 clocks, an m16n8k16 s8 IMMA 2. So clocks / instructions is
the share of the peak an issue-bound warp reaches (of the F16 peak for k_mma_gemm, of the int8
peak for k_mmq's kernels): the figures gpu_model.py's MMA_ISSUE and mmq*_eff hold.

  --check [--model FILE]: compare the k_mma counts with MMA_ISSUE in bench/gpu_model.py (or FILE)
  and exit 1 naming each that differs, so the model's figures stay the kernel's
  (tests/integration/gemm_issue.sh). Exit 2 when nvcc or cuobjdump is missing."""
import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
import sass_check  # noqa: E402

CUDA = os.path.join(ROOT, "worker", "backend", "cuda")
# family: (source, [(kernel symbol part, label)], weight types, inner-loop trip count). The int8
# kernels (k_mmq.cu) are not listed: their inner loops run per kernel (k_mmq_kq's 8 sub-blocks,
# k_mmq_gemm's blocks a stage) and their mins' MMAs are not useful work, which this count does not
# tell apart yet; gpu_model.py's mmq*_eff were counted by hand (2026-12-06, before common/half.h's
# one-instruction conversions).
FAMILIES = {
    "k_mma": ("k_mma.cu", [("k_mma_gemmILi64ELi64E", "64x64/64"), ("k_mma_gemmILi64ELi32E",
                                                                 "64x64/32"),
                           ("k_mma_gemmILi128ELi32E", "128x128")],
              ["Q4_0", "Q5_0", "Q5_1", "Q8_0", "MXFP4", "Q4_K", "Q5_K", "Q6_K"], 1),
}
# the kernel's line that names its weight view: a copy with the type fixed replaces it
ANCHOR = "const sol_cuda_wt &w = mm.w;"
CLOCKS = {"HMMA.16816": 4, "IMMA.16832": 4, "IMMA.16816": 2}
LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)(.*?);")


def find_cuobjdump():
    for c in (shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump",
              os.path.join(os.path.expanduser("~"), ".cache", "sol", "cuda-tools", "bin",
                           "cuobjdump")):
        if c and os.access(c, os.X_OK):
            return c
    return None


def functions(listing):
    """{symbol: [(address, opcode, operands)]} from cuobjdump -sass. Instructions are taken from
    their encodings (two 64-bit words each, 16 bytes), since cuobjdump 11.8 prints no text for
    a few sm_90 instructions (about 2% of k_mma_gemm's): those count, with opcode "?"."""
    out, cur, words = {}, None, 0
    for line in listing.split("\n"):
        m = re.match(r"\s+Function : (\S+)", line)
        if m:
            cur, words = out.setdefault(m.group(1), []), 0
            continue
        if cur is None:
            continue
        for _ in re.findall(r"/\* 0x[0-9a-f]{16} \*/", line):
            if words % 2 == 0:
                t = LINE.search(line)
                cur.append((16 * (words // 2), t.group(2) if t else "?", t.group(3) if t else ""))
            words += 1
    return out


def loops(ins):
    """(start index, end index) of every backward branch."""
    at = {a: i for i, (a, _, _) in enumerate(ins)}  # addresses are 16 bytes apart
    res = []
    for j, (a, op, rest) in enumerate(ins):
        m = re.search(r"0x([0-9a-f]+)", rest)
        if op == "BRA" and m and int(m.group(1), 16) <= a and int(m.group(1), 16) in at:
            res.append((at[int(m.group(1), 16)], j))
    return res


def clocks_of(body):
    return sum(CLOCKS.get(".".join(op.split(".")[:2]), 0) for _, op, _ in body)


def count(ins, trip):
    """(instructions, MMA clocks, MMAs) per iteration of the main loop."""
    mma = [lp for lp in loops(ins) if clocks_of(ins[lp[0]:lp[1] + 1])]
    if not mma:
        raise RuntimeError("no loop with tensor-core MMAs")
    outer = max(mma, key=lambda lp: lp[1] - lp[0])
    inner = [lp for lp in mma if lp != outer and outer[0] <= lp[0] and lp[1] <= outer[1]]
    body = ins[outer[0]:outer[1] + 1]
    n, c = len(body), clocks_of(body)
    k = sum("MMA" in op for _, op, _ in body)
    for lp in inner[:1]:  # one inner loop, run `trip` times in all
        ib = ins[lp[0]:lp[1] + 1]
        n += (trip - 1) * len(ib)
        c += (trip - 1) * clocks_of(ib)
        k += (trip - 1) * sum("MMA" in op for _, op, _ in ib)
    return n, c, k


def listing_for(src, ty, arch, cuobjdump, tmp):
    text = open(os.path.join(CUDA, src)).read()
    fixed = text.replace(ANCHOR, f"sol_cuda_wt w = mm.w;\n    w.type = SOL_CUDA_{ty};")
    if fixed == text:
        raise RuntimeError(f"{src}: no line `{ANCHOR}` to fix the type at")
    path = os.path.join(tmp, "fixed.cu")
    open(path, "w").write(fixed)
    inc = [f"-I{os.path.join(ROOT, d)}" for d in ("worker/backend/cuda", "worker/backend",
                                                  "common")]
    cubin = os.path.join(tmp, "k.cubin")
    subprocess.run(["nvcc", "-std=c++17", f"-arch=sm_{arch}", "-cubin", "-O3", *inc, "-o", cubin,
                    path], check=True)
    img = sass_check.as_abi7(bytearray(open(cubin, "rb").read()), arch)
    open(cubin, "wb").write(img)
    return subprocess.run([cuobjdump, "-sass", cubin], check=True, capture_output=True,
                          text=True).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--kernels", default="k_mma")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--model", default=os.path.join(ROOT, "bench", "gpu_model.py"))
    o = ap.parse_args()
    unknown = [f for f in o.kernels.split(",") if f not in FAMILIES]
    if unknown:
        print(f"gemm_issue: --kernels {','.join(unknown)}: known: {', '.join(FAMILIES)}",
              file=sys.stderr)
        return 2
    cuobjdump = find_cuobjdump()
    if not cuobjdump or not shutil.which("nvcc"):
        print("gemm_issue: needs nvcc and cuobjdump (scripts/cuda-tools)", file=sys.stderr)
        return 2
    print(f"main loop per iteration, sm_{o.arch}: instructions, MMAs, MMA clocks at the peak, "
          f"clocks / instructions")
    counted = {}
    with tempfile.TemporaryDirectory() as tmp:
        for fam in o.kernels.split(","):
            src, kerns, types, trip = FAMILIES[fam]
            for ty in types:
                fns = functions(listing_for(src, ty, o.arch, cuobjdump, tmp))
                for part, label in kerns:
                    sym = next((s for s in fns if part in s), None)
                    if sym is None:
                        continue
                    try:
                        n, c, k = count(fns[sym], trip)
                    except RuntimeError:
                        continue  # this type never reaches the kernel's MMAs (another kernel's)
                    print(f"{label:12} {ty:6} {n:6d} instr {k:4d} MMA {c:5d} clocks  {c / n:5.2f}")
                    counted[(ty, label)] = (n, k)
    return check(counted, o.model) if o.check else 0


def check(counted, model):
    """1 when a count differs from the model's MMA_ISSUE (its columns: FAMILIES' k_mma labels)."""
    spec = importlib.util.spec_from_file_location("gpu_model_checked", model)
    gm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gm)
    labels = [label for _, label in FAMILIES["k_mma"][1]]
    bad = 0
    for ty in FAMILIES["k_mma"][2]:
        for col, label in enumerate(labels):
            want = tuple(gm.MMA_ISSUE.get(ty, ((None, None),) * len(labels))[col])
            got = counted.get((ty, label))
            if got != want:
                print(f"gemm_issue: {ty} {label}: the SASS counts {got}, {model}'s MMA_ISSUE "
                      f"says {want}", file=sys.stderr)
                bad = 1
    print("check: " + ("MMA_ISSUE differs from the SASS" if bad else "MMA_ISSUE is the SASS's"))
    return bad


if __name__ == "__main__":
    sys.exit(main())
