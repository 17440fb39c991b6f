#!/usr/bin/env python3
"""compare.py: the comparisons of a GPU run (tests/gpu/run.sh) in Python 3 alone, since the GPU
machine has no node: greedy ids and logits of one backend against another.

  compare.py ids A.ids B.ids [--need N]          same leading ids (one per line); exit 1 below N
  compare.py logits A.json B.json --limit X      relative L2 distance of two logit vectors
                                                 (sol-generate --logits); exit 1 above X
  compare.py kernels NCU.csv                     GPU time per kernel family from ncu --csv
                                                 --metrics gpu__time_duration.sum
Each prints one line: what was compared, the figure, the limit and ok/FAIL.
"""
import argparse
import csv
import json
import math
import re
import sys


def read_ids(path):
    with open(path) as f:
        return [line.strip() for line in f if line.strip()]


def same_prefix(a, b):
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def rel_l2(a, b):
    if len(a) != len(b):
        raise ValueError(f"{len(a)} and {len(b)} values: not the same vocabulary")
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    if not all(math.isfinite(x) for x in a + b):
        return math.inf
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


# Kernel families, first match wins: Sol's kernels by name, cuBLASLt's and NCCL's by theirs.
FAMILIES = [
    ("GEMV (incl. activation quantization)", re.compile(r"k_gemv|k_quantize")),
    ("attention", re.compile(r"k_attention")),
    ("norms, rope, elementwise, embedding", re.compile(r"k_rmsnorm|k_rope|k_add|k_scale|k_silu|k_gelu|k_embed")),
    ("KV cache writes", re.compile(r"k_kv")),
    ("conversions for the GEMM", re.compile(r"k_to_half|k_dequant")),
    ("cuBLASLt GEMM", re.compile(r"gemm|xmma|cutlass|sm\d+_|Kernel", re.I)),
    ("NCCL", re.compile(r"nccl", re.I)),
]
UNITS = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}


def kernels(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(line for line in f if line.startswith('"'))]
    if not rows:
        print("FAIL no ncu rows in " + path)
        return 1
    head, rows = rows[0], rows[1:]
    name_i, unit_i, val_i = (head.index(k) for k in ("Kernel Name", "Metric Unit", "Metric Value"))
    fam = {}
    for r in rows:
        us = float(r[val_i].replace(",", "")) * UNITS.get(r[unit_i], 1.0)
        label = next((f for f, rx in FAMILIES if rx.search(r[name_i])), "other: " + r[name_i][:40])
        n, t = fam.get(label, (0, 0.0))
        fam[label] = (n + 1, t + us)
    total = sum(t for _, t in fam.values())
    print(f"{'family':44s} {'launches':>8s} {'GPU us':>10s} {'share':>6s}")
    for label, (n, t) in sorted(fam.items(), key=lambda kv: -kv[1][1]):
        print(f"{label:44s} {n:8d} {t:10.1f} {100 * t / total:5.1f}%")
    print(f"{'all':44s} {len(rows):8d} {total:10.1f}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=["ids", "logits", "kernels"])
    ap.add_argument("a")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--need", type=int, help="ids: the leading ids that must agree (default all)")
    ap.add_argument("--limit", type=float, help="logits: the largest relative L2 distance")
    ap.add_argument("--name", default="", help="a label for the line printed")
    o = ap.parse_args()
    label = (o.name + ": ") if o.name else ""
    if o.kind == "kernels":
        return kernels(o.a)
    if o.b is None:
        ap.error(o.kind + " compares two files")
    if o.kind == "ids":
        a, b = read_ids(o.a), read_ids(o.b)
        n = same_prefix(a, b)
        need = o.need if o.need is not None else max(len(a), len(b))
        good = n >= need and len(a) > 0
        print(f"{'ok  ' if good else 'FAIL'} {label}{n}/{len(b)} ids equal (need {need})")
        return 0 if good else 1
    if o.limit is None:
        ap.error("logits needs --limit")
    with open(o.a) as f:
        a = json.load(f)
    with open(o.b) as f:
        b = json.load(f)
    d = rel_l2(a, b)
    good = d <= o.limit
    print(f"{'ok  ' if good else 'FAIL'} {label}logits {d:.3g} apart (relative L2, limit {o.limit:g})")
    return 0 if good else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ValueError) as e:  # a missing file, not JSON, not numbers: one line, exit 2
        print(f"compare.py: {e}", file=sys.stderr)
        sys.exit(2)
