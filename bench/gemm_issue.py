#!/usr/bin/env python3
"""gemm_issue.py: the issue-slot count behind bench/gpu_model.py's k_mma_gemm efficiencies.

  bench/gemm_issue.py [--arch 90] [--types Q4_0,Q4_K,...]

For each weight type, compiles worker/backend/cuda/k_mma.cu for sm_ARCH with the weight type
fixed at the kernel's entry (a copy of the file, `w.type = SOL_CUDA_<T>;` after
sol_grid_dependency(), so the other types' dequantization drops out), disassembles it (nvdisasm,
as tests/gpu/sass_check.py finds it) and counts, per tile width (k_mma_gemm<64>, <128>), the
instructions of the stage loop (from the prefetch's guard to the barrier's branch) and its HMMAs.
(The loop's head label is not in nvdisasm's listing, so the loop is taken from the first
barrier's branch, past the preheader, to the stage barrier's branch.) An SM sub-partition issues
one warp instruction a clock and finishes an m16n8k16 F16 HMMA every
4 clocks at the dense F16 peak, so 4 x HMMAs / instructions is the share of the peak a warp
can reach when issue-bound (the int8 kernels' shares were counted the same way). A static count
of the loop: the few branches inside it (the K-quants' scale unpacking) are counted on both
sides. Needs nvcc and nvdisasm (scripts/cuda-tools); prints a table. Exit 2 when they are
missing."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
import sass_check  # noqa: E402

SRC = os.path.join(ROOT, "worker", "backend", "cuda", "k_mma.cu")
TYPES = ["Q4_0", "Q5_0", "Q5_1", "Q8_0", "MXFP4", "Q4_K", "Q5_K", "Q6_K"]


def stage_loop(listing, kernel):
    """(instructions, HMMAs) of the stage loop of the kernel whose symbol contains `kernel`."""
    lines = listing.split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith(".text.") and kernel in l)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(".text.")),
               len(lines))
    ins = [l for l in lines[start:end] if re.search(r"/\*[0-9a-f]{4}\*/", l)]
    bars = [i for i, l in enumerate(ins) if "BAR.SYNC" in l]
    if len(bars) < 2:
        raise RuntimeError(f"{kernel}: expected the prologue's and the loop's barriers")
    # the loop starts after the first barrier's branch and the preheader: at the stage guard
    # (ISETP + BRA) when it is a branch, else after the preheader's moves and constant loads
    start = bars[0] + 2
    head = next((i for i in range(start, min(start + 12, bars[1]))
                 if "ISETP.GE" in ins[i] and "BRA" in ins[i + 1]), None)
    if head is None:
        head = start
        while re.search(r"\*/\s+(ULDC|UMOV|IMAD\.MOV|MOV|CS2R)\b", ins[head]):
            head += 1
    body = ins[head:bars[1] + 2]
    return len(body), sum("HMMA" in b for b in body)


def count(ty, arch, nvdisasm, tmp):
    src = open(SRC).read()
    fixed = src.replace("    sol_grid_dependency();\n",
                        f"    sol_grid_dependency();\n    w.type = SOL_CUDA_{ty};\n")
    if fixed == src:
        raise RuntimeError("k_mma.cu: no sol_grid_dependency() line to fix the type after")
    path = os.path.join(tmp, "k_mma_fixed.cu")
    open(path, "w").write(fixed)
    inc = [f"-I{os.path.join(ROOT, d)}" for d in ("worker/backend/cuda", "worker/backend",
                                                  "common")]
    cubin = os.path.join(tmp, "k.cubin")
    subprocess.run(["nvcc", "-std=c++17", f"-arch=sm_{arch}", "-cubin", "-O3", *inc, "-o", cubin,
                    path], check=True)
    img = sass_check.as_abi7(bytearray(open(cubin, "rb").read()), arch)
    open(cubin, "wb").write(img)
    listing = subprocess.run([nvdisasm, "-c", cubin], check=True, capture_output=True,
                             text=True).stdout
    return {bn: stage_loop(listing, f"k_mma_gemmILi{bn}E") for bn in (64, 128)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--types", default=",".join(TYPES))
    o = ap.parse_args()
    nvdisasm = sass_check.find_nvdisasm(None)
    if not nvdisasm or not subprocess.run(["which", "nvcc"], capture_output=True).returncode == 0:
        print("gemm_issue: needs nvcc and nvdisasm (scripts/cuda-tools)", file=sys.stderr)
        return 2
    print(f"k_mma_gemm stage loop, sm_{o.arch}: instructions / HMMA / 4 x HMMA per instruction")
    print(f"{'type':6} {'<64> instr':>10} {'HMMA':>5} {'share':>6}   {'<128> instr':>11} "
          f"{'HMMA':>5} {'share':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for ty in o.types.split(","):
            c = count(ty, o.arch, nvdisasm, tmp)
            (i64, h64), (i128, h128) = c[64], c[128]
            print(f"{ty:6} {i64:10d} {h64:5d} {4 * h64 / i64:6.2f}   {i128:11d} {h128:5d} "
                  f"{4 * h128 / i128:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
