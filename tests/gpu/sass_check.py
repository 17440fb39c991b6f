#!/usr/bin/env python3
"""sass_check.py: what each CUDA kernel of the built module does with memory, read from its SASS
(the machine code a GPU runs), and a check of the decode kernels' rules, without a GPU.

  tests/gpu/sass_check.py [--module build/lib/libsol-cuda.so] [--arch sm_90] [--markdown]
                          [--nvdisasm PATH]

Per kernel: global loads by width (8/16/32/64/128 bits; LDG and generic LD), loads inside a loop
at 8 or 16 bits, local memory (LDL/STL: a stack frame or spills), registers and static shared
memory, and where its programmatic-dependent-launch wait sits. Exit 1 when a rule of RULES below
is broken (a decode kernel reading 8- or 16-bit words inside a loop, any local memory in a
decode kernel, a tensor-core kernel without an HMMA/IMMA instruction, a kernel over its register
budget) or, from sm_90, when any kernel lacks the PDL wait (griddepcontrol.wait, SASS ACQBULK)
ahead of its first global memory access, branch and exit, or the release of its dependents
(griddepcontrol.launch_dependents, SASS PREEXIT): sol_cuda_kernel.h; 2 when the module or
nvdisasm cannot be read, 0 otherwise.

The cubins are taken from the module's fatbin as built (raw ELF images, EM_CUDA). CUDA 13 writes
ELF ABI version 8, whose e_flags hold the SM in bits 8..15; nvdisasm 11.8 (Debian's, fetched by
scripts/cuda-tools) reads only version 7, whose e_flags hold it in bits 0..7 and 16..23, so the
header is rewritten for it (the code sections are untouched; sm_90's instruction set is the same
in both toolkits). A loop is the span between a backward branch and its target.
"""
import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from ptx_report import demangle  # noqa: E402  (c++filt, one copy for both reports)
EM_CUDA = 190

# One table: kernel name pattern (demangled, from its start), whether it runs in every decode
# step (the bandwidth rules apply), whether it must multiply on tensor cores (HMMA/IMMA
# instructions in its SASS: a kernel that silently fell back to CUDA cores fails), and its
# register budget (ptxas allocates in units of 8; 255
# is the hardware's most per thread, 128 keeps two 4-warp blocks of a GEMV per SM sub-partition).
# The first matching row wins.
RULES = [
    (r"k_gemv", True, False, 128),
    (r"k_quantize", True, False, 64),
    (r"k_paged_attention", True, False, 128),
    (r"k_rmsnorm", True, False, 64),
    (r"k_rope|k_qk_norm_rope", True, False, 64),  # k_rope, k_rope_kv, k_qk_norm_rope_kv
    (r"k_embed", True, False, 64),
    (r"k_kv_write", True, False, 64),
    (r"k_argmax", True, False, 32),  # the greedy token of every decode step
    (r"k_silu_mul|k_gelu_mul|k_add|k_scale", True, False, 32),
    (r"k_mma", False, True, 128),
    (r"k_mmq", False, True, 128),  # int8 MMA (IMMA); 4 blocks an SM (__launch_bounds__)
    (r"k_flash", False, True, 192),
    (r".*", False, False, 255),
]


def rule_for(name):
    for pat, decode, tensor, budget in RULES:
        if re.match(pat, name):
            return decode, tensor, budget
    raise AssertionError("RULES ends with a catch-all")


def find_nvdisasm(given):
    cands = [given, os.environ.get("SOL_NVDISASM"), shutil.which("nvdisasm"),
             "/usr/local/cuda/bin/nvdisasm",
             os.path.join(os.environ.get("SOL_CACHE", os.path.expanduser("~/.cache/sol")),
                          "cuda-tools", "bin", "nvdisasm")]
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    return None


def elf_end(d, at):
    """Bytes of the ELF image starting at `at` (the furthest of its headers and sections)."""
    phoff, shoff = struct.unpack_from("<QQ", d, at + 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", d, at + 54)
    end = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    for i in range(shnum):
        off = at + shoff + i * shentsize
        stype, = struct.unpack_from("<I", d, off + 4)
        soff, ssize = struct.unpack_from("<QQ", d, off + 24)
        if stype != 8:  # SHT_NOBITS has no bytes in the file
            end = max(end, soff + ssize)
    return end


def elf_sm(d, at):
    abi = d[at + 8]
    flags, = struct.unpack_from("<I", d, at + 48)
    return (flags >> 8) & 0xFF if abi >= 8 else flags & 0xFF


def cubins(module, sm):
    """The raw cubin images for one SM in the module's fatbin."""
    d = open(module, "rb").read()
    out, i = [], -1  # a bare cubin starts at 0
    while True:
        i = d.find(b"\x7fELF\x02\x01\x01", i + 1)
        if i < 0:
            return out
        if struct.unpack_from("<H", d, i + 18)[0] == EM_CUDA and elf_sm(d, i) == sm:
            out.append(bytearray(d[i:i + elf_end(d, i)]))


def as_abi7(img, sm):
    if img[8] >= 8:
        img = bytearray(img)
        img[8] = 7
        # EF_CUDA_TEXMODE_UNIFIED | EF_CUDA_64BIT_ADDRESS | sm | EF_CUDA_VIRTUAL_SM(sm)
        struct.pack_into("<I", img, 48, sm | 0x100 | 0x400 | sm << 16)
    return img


def sections(img):
    """{name: (sh_info, size, offset)} of a cubin."""
    shoff, = struct.unpack_from("<Q", img, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", img, 58)
    hdr = [struct.unpack_from("<IIQQQQIIQQ", img, shoff + i * shentsize) for i in range(shnum)]
    stroff = hdr[shstrndx][4]
    out = {}
    for h in hdr:
        name = img[stroff + h[0]:img.index(b"\0", stroff + h[0])].decode()
        out[name] = (h[7], h[5], h[4])
    return out


def kernel_attrs(img, secs):
    """{symbol index: {attribute: value}} from the cubin's .nv.info: EIATTR_REGCOUNT (0x2f) and
    EIATTR_FRAME_SIZE (0x11), each a (symbol, value) pair. ABI 7 kept the registers in the top
    byte of the code section's sh_info instead; both are read."""
    out = {}
    if ".nv.info" not in secs:
        return out
    _, size, off = secs[".nv.info"]
    p = off
    while p + 4 <= off + size:
        fmt, attr, ln = img[p], img[p + 1], struct.unpack_from("<H", img, p + 2)[0]
        if fmt != 4:  # EIFMT_SVAL carries a payload; the others only a 16-bit value
            p += 4
            continue
        if attr in (0x2F, 0x11) and ln == 8:
            sym, val = struct.unpack_from("<II", img, p + 4)
            out.setdefault(sym, {})["regs" if attr == 0x2F else "frame"] = val
        p += 4 + ln
    return out


MMA = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?[HI]MMA\.")
LDG = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?(LDG|LD|LDL|STL)(\.[\w.]+)?\s")
BRA = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?BRA(?:\.\w+)*\s+`\((\.L_x_\d+)\)")
# Global (or generic) memory: loads, stores, atomics, reductions, asynchronous copies; shared
# (LDS/STS) and constant (LDC) accesses are not what the previous kernel writes.
GMEM = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?(LDG|STG|LD|ST|ATOMG|ATOM|RED|REDG|"
                  r"LDGSTS|UTMALDG|UBLKCP)(\.[\w.]+)?\s")
FLOW = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?(BRA|EXIT|BSSY|CALL|RET|JMP)\b")
ACQ = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+ACQBULK\b")
REL = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?PREEXIT\b")
LABEL = re.compile(r"^(\.L_x_\d+):")
ADDR = re.compile(r"^\s*/\*([0-9a-f]+)\*/")
FUNC = re.compile(r"^\s*\.text\.(\S+?):\s*$")


def width(mods):
    parts = (mods or "").split(".")
    for p, bits in (("U8", 8), ("S8", 8), ("U16", 16), ("S16", 16), ("64", 64), ("128", 128)):
        if p in parts:
            return bits
    return 32


def analyse(text):
    """{mangled: {widths, narrow_in_loop, local}} from nvdisasm's listing."""
    funcs, cur = {}, None
    for line in text.splitlines():
        m = FUNC.match(line)
        if m:
            cur = funcs.setdefault(m.group(1), {"lines": []})
            continue
        if cur is not None:
            cur["lines"].append(line)
    out = {}
    for name, f in funcs.items():
        labels, pending, branches, loads, mma = {}, [], [], [], 0
        # PDL: the wait must come before anything that touches global memory or leaves the
        # straight line (a branch could skip it, an exit end the grid without it)
        waited, early, released = False, None, False
        for line in f["lines"]:
            if not waited and not early:
                if ACQ.match(line):
                    waited = True
                elif GMEM.match(line) or FLOW.match(line):
                    early = line.split(";")[0].split("*/")[-1].strip()
            released = released or bool(REL.match(line))
            lm = LABEL.match(line)
            if lm:
                pending.append(lm.group(1))
                continue
            am = ADDR.match(line)
            if not am:
                continue
            addr = int(am.group(1), 16)
            for p in pending:
                labels[p] = addr
            pending = []
            bm = BRA.match(line)
            if bm:
                branches.append((addr, bm.group(2)))
            mma += bool(MMA.match(line))
            ld = LDG.match(line)
            if ld:
                loads.append((addr, ld.group(2), width(ld.group(3))))
        loops = [(labels[t], a) for a, t in branches if t in labels and labels[t] <= a]
        w = {8: 0, 16: 0, 32: 0, 64: 0, 128: 0}
        narrow_loop, local = 0, 0
        for addr, op, bits in loads:
            if op in ("LDL", "STL"):
                local += 1
                continue
            w[bits] += 1
            if bits < 32 and any(lo <= addr <= hi for lo, hi in loops):
                narrow_loop += 1
        pdl = "wait" if waited and released else (
            f"`{early}` before the wait" if early else "no wait" if not waited else "no release")
        out[name] = {"widths": w, "narrow_loop": narrow_loop, "local": local, "mma": mma,
                     "pdl": pdl}
    return out


def report(module, sm, nvdisasm):
    imgs = cubins(module, sm)
    if not imgs:
        raise RuntimeError(f"{module}: no sm_{sm} cubin in its fatbin (built for another arch?)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, img in enumerate(imgs):
            path = os.path.join(tmp, f"k{n}.cubin")
            open(path, "wb").write(as_abi7(img, sm))
            r = subprocess.run([nvdisasm, "-c", path], capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(f"{nvdisasm} could not read cubin {n} of {module}: "
                                   f"{r.stderr.strip()[:300]}")
            secs = sections(img)
            attrs = kernel_attrs(img, secs)
            for mangled, a in analyse(r.stdout).items():
                info = secs.get(".text." + mangled, (0, 0, 0))[0]
                smem = secs.get(".nv.shared." + mangled, (0, 0, 0))[1]
                k = attrs.get(info & 0xFFFFFF, {})
                a.update(regs=k.get("regs", info >> 24), frame=k.get("frame", 0), smem=smem,
                         mangled=mangled)
                rows.append(a)
    names = demangle([r["mangled"] for r in rows])
    for r in rows:
        r["name"] = names[r["mangled"]]
        r["decode"], r["tensor"], r["budget"] = rule_for(r["name"])
        tensor = r["tensor"]
        why = []
        if r["decode"] and r["narrow_loop"]:
            why.append(f"{r['narrow_loop']} 8/16-bit global loads in a loop")
        if r["decode"] and (r["local"] or r["frame"]):
            why.append(f"{r['local']} local-memory accesses, a {r['frame']}-byte stack frame")
        if tensor and not r["mma"]:
            why.append("no tensor-core instruction (HMMA/IMMA)")
        if sm >= 90 and r["pdl"] != "wait":
            why.append(f"PDL: {r['pdl']}")
        if r["regs"] > r["budget"]:
            why.append(f"{r['regs']} registers > budget {r['budget']}")
        r["why"] = why
    rows.sort(key=lambda r: r["name"])
    return rows


def print_table(rows, sm, markdown):
    head = ["kernel", "8b", "16b", "32b", "64b", "128b", "narrow in loop", "local", "frame",
            "mma", "regs", "budget", "smem", "pdl", "rule"]
    lines = []
    for r in rows:
        w = r["widths"]
        verdict = "FAIL: " + "; ".join(r["why"]) if r["why"] else ("ok" if r["decode"] or r["tensor"] else "-")
        lines.append([r["name"][:44], w[8], w[16], w[32], w[64], w[128], r["narrow_loop"],
                      r["local"], r["frame"], r["mma"], r["regs"], r["budget"], r["smem"],
                      r["pdl"], verdict])
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" for _ in head) + "|")
        for line in lines:
            print("| " + " | ".join(str(x) for x in line) + " |")
        return
    print(f"SASS global loads by width, sm_{sm} (tests/gpu/sass_check.py; rule: decode kernels "
          "have no 8/16-bit global load in a loop and no local memory; tensor-core kernels have "
          "HMMA/IMMA; registers within budget; every kernel opens with the PDL wait)")
    print(f"{'kernel':44} {'8b':>4} {'16b':>4} {'32b':>4} {'64b':>4} {'128b':>4} {'nloop':>5} "
          f"{'local':>5} {'frame':>5} {'mma':>4} {'regs':>4} {'budg':>4} {'smem':>5} {'pdl':>5}  "
          "rule")
    for x in lines:
        print(f"{x[0]:44} {x[1]:4d} {x[2]:4d} {x[3]:4d} {x[4]:4d} {x[5]:4d} {x[6]:5d} {x[7]:5d} "
              f"{x[8]:5d} {x[9]:4d} {x[10]:4d} {x[11]:4d} {x[12]:5d} {x[13]:>5}  {x[14]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--module", default=os.path.join(ROOT, "build", "lib", "libsol-cuda.so"))
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--nvdisasm")
    ap.add_argument("--markdown", action="store_true")
    o = ap.parse_args()
    m = re.fullmatch(r"sm_(\d+)", o.arch)
    if not m:
        print(f"sass_check: --arch {o.arch}: expected sm_NN", file=sys.stderr)
        return 2
    nvdisasm = find_nvdisasm(o.nvdisasm)
    if not nvdisasm:
        print("sass_check: no nvdisasm (set SOL_NVDISASM, or run scripts/cuda-tools)",
              file=sys.stderr)
        return 2
    if not os.path.isfile(o.module):
        print(f"sass_check: {o.module}: no such file (build with CUDA first)", file=sys.stderr)
        return 2
    try:
        rows = report(o.module, int(m.group(1)), nvdisasm)
    except (RuntimeError, OSError, struct.error, ValueError) as e:
        print(f"sass_check: {e}", file=sys.stderr)
        return 2
    print_table(rows, m.group(1), o.markdown)
    bad = [r for r in rows if r["why"]]
    if not o.markdown:
        print(f"{len(rows)} kernels, {sum(r['decode'] for r in rows)} under the decode rules, "
              f"{len(bad)} failing")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
