#!/usr/bin/env python3
"""gpu_model.py: a performance model of Sol's CUDA decode (or prefill) step — issue 30, item 6.

A MODEL OF A DESIGN, NOT A MEASUREMENT. No GPU has run Sol's kernels yet. For a model shape (a
GGUF file's header, or the 8b/1b/70b presets), a batch, a context and a GPU, it lists the kernels
one step launches (the table STEP in the source), each kernel's bytes, FLOPs and launches, and
predicts its time from the bandwidth/compute roofline plus a per-launch cost and a wave (tail) term.

  time(kernel) = max(bytes / (copy_bw * eff * wave), flops / peak) + prologue
                 + launches * launch_us
  wave         = min(1, blocks / (waves * SMs))         (waves = 2: PARAMS["waves"])
  prologue     = a GEMV block's own norm/quantize of x: max(L2 bytes / L2 bw, instructions /
                 issue rate), added (lean design; the fused design's o GEMV)
  lean-q       no prologue: its norm blocks add their row re-read from L2 (the SM's share of
               the L2 bandwidth) and its GEMVs take max(.., L2 bytes / L2 bw) as a floor

copy_bw is the device-to-device copy bandwidth (spec HBM * copy_frac, or --copy-bw when one was
measured); eff is the kernel kind's share of it. Every efficiency and cost is a named entry of
PARAMS with its source or assumption, settable with --param NAME=VALUE.

Four launch structures (--design; all in the one table STEP). The default (and --check's) is
whichever predicts best: the design with the largest smallest margin over issue 30's targets
(8b, h200, batch 1, context 512, the parameters in force); with the parameters as given, lean-q.
  lean-q    lean with the activations quantized ONCE per matrix group: the decode step as built
            (2026-12-07) below 16 tokens for greedy rows of a model without per-head q/k norms
            (past 16 it charges the designed MMQ; --param built_tc=1: today's batch kernels) (today's
            matmul_gemv: one quantize launch per group sharing an input, then one GEMV launch per
            group reading the int8 activations (gemv_run_many: q/k/v, gate/up, K-quant types
            mixed); rope + the KV write in the q/k/v GEMV's store (qkv_rope_kv); the greedy token
            on the device (argmax_rows); PDL on sm_90: every kernel opens with the
            grid-dependency wait (sol_cuda_kernel.h; SASS-checked); the multi-block norm).
            Per layer: rmsnorm+quantize (multi-block, single phase: each block of normq_slice
            elements recomputes its row's sum of squares from L2, then normalises and quantizes
            its slice; x written once as Q8), the q/k/v GEMV (rope + KV write epilogue), attention
            (+combine) with lean's splits, quantize, the o GEMV (+residual), rmsnorm+quantize,
            the gate/up GEMV (SiLU*mul), quantize, the down GEMV (+residual): 9 launches, 10 with
            a split; float weights take no quantize (the norm writes f32). The GEMV blocks read
            the Q8 x from L2, along with the weights (overlapped: charged only where L2
            bandwidth, not HBM, would bound the kernel). PDL on sm_90 as lean. That is
            --param next_input=0; as built since 2026-12-07 (next_input, the default) the
            attention merge writes o's Q8_K too, the gate/up GEMV quantizes the gated product, and
            at one token the o and down GEMVs' last block norms and quantizes x for the next
            group: 5 launches per layer (164 a step at 8b), each tail charged serially on one SM.
  lean      (designed, not built; x normalised/quantized in every GEMV block) 5 launches
            per layer, 6 with a split: the q/k/v GEMV computes RMSNorm and the Q8 quantization of x
            in its prologue (every block re-reads x from L2) and rope + the KV write in its
            epilogue; attention (+combine) with splits from the context and the SM count only;
            the o GEMV quantizes its input in its prologue and adds the residual in its epilogue;
            the gate/up GEMV (rows interleaved) norms+quantizes x and applies SiLU*mul; the down
            GEMV quantizes its input and adds the residual; the head GEMV norms+quantizes x.
            On sm_90 (h200, h100) kernels launch with programmatic dependent launch (PDL): the
            per-node cost is launch_pdl_us instead of launch_graph_us.
  fused     issue 30's design: per layer rmsnorm+quantize, one q/k/v GEMV, rope+KV write,
            attention (+combine when split), o GEMV+residual, rmsnorm+quantize, gate/up
            GEMV+SiLU*mul, quantize, down GEMV+residual; then norm+quantize, head, device sampler.
  unfused   (--unfused is an alias) today's launch structure (before issue 30): a quantize per
            matrix, separate rope (q, k), kv_write, silu_mul and add launches, the logits
            downloaded for the host's sampler, the step's graph re-captured every step. Steps
            of more than 16 tokens take the kernels built today: per matrix x rounded to F16
            (k_to_half), then k_mma_gemm for quantized weights (64x64 or 128x128 tiles
            dequantized to F16 in shared memory, mma.sync; path "mmaq", at its issue share of
            the F16 peak counted from the SASS per type, MMA_ISSUE) or cuBLASLt
            for F16/BF16 weights in place (tc_eff), and k_flash_attention (tensor cores, fa_eff)
            over F16 caches at head_dim 64/128 (CUDA cores otherwise). All designs use the same
            kernel efficiencies, so unfused is an UPPER BOUND for today's code, whose GEMVs load
            bytes one at a time (docs/backend.md's PTX table; the issue estimates 4-6% of the
            roofline in Q4_0, 15-25% in F16).
  Prefill  (--prefill T) also prints issue 30's prefill goal (>= 50% of the tensor-core peak at
            2,048 tokens, 8B): the step's FLOPs / time / F16 tensor peak for the design, and for
            the kernels built today (the unfused structure's paths), with a plain verdict.

Usage: bench/gpu_model.py [--shape 8b|1b|70b --quant q4_k_m|q4_0|q8_0|f16 | --gguf FILE]
         [--batch N] [--context C] [--gpu h200|h100|a100|l40s] [--kv f16|f32] [--prefill T]
         [--copy-bw GB/s] [--l2-bw GB/s]
         [--design lean-q|lean|fused|unfused] [--unfused] [--eager] [--kernels] [--batch-sweep]
         [--check] [--json] [--param K=V]
Exit status: 0 ok; 1 --check below the design target; 2 bad input (one line on stderr).
Pure Python 3 standard library.
"""
import argparse
import json
import math
import os
import struct
import sys

PROG = "gpu_model.py"


class ModelError(Exception):
    """Bad input: reported as one line, exit 2."""


# ---------------------------------------------------------------------------------------------
# GPUs: spec sheet figures (dense, no sparsity). dp4a = CUDA-core int8 (the GEMV's __dp4a):
# SMs x boost clock x 64 IMAD-pipe lanes x 4 multiply-adds (8 ops), assumed at the IMAD rate;
# fp32 = CUDA-core FP32 FMA peak. These two bound the GEMV's arithmetic at batch 8-16 only.
# sm: compute capability x 10 (PDL needs sm_90; the L40S is sm_89). l2_gbs: L2 -> SM read
# bandwidth for data that hits in L2, used only for the prologues' re-reads of x (lean design, and
# the fused o GEMV's per-block quantize): an ASSUMPTION, no vendor figure (H100/H200: "~10 TB/s"
# per the lean design's brief; A100 and L40S: half of it, a guess); --l2-bw replaces it.
# l2_mb: L2 capacity (spec sheets): whether a matrix re-read by k_mma_gemm's token tiles, or a
# layer's K/V re-read by k_flash_attention's tiles, comes back from L2 (fits) or from HBM.
GPUS = {
    "h200": dict(name="H200 SXM", hbm_gbs=4800.0, sms=132, fp16_tflops=989.0, int8_tops=1979.0,
                 fp32_tflops=66.9, dp4a_tops=133.8, sm=90, l2_gbs=10000.0, l2_mb=50.0),
    "h100": dict(name="H100 SXM", hbm_gbs=3350.0, sms=132, fp16_tflops=989.0, int8_tops=1979.0,
                 fp32_tflops=66.9, dp4a_tops=133.8, sm=90, l2_gbs=10000.0, l2_mb=50.0),
    "a100": dict(name="A100 80GB SXM", hbm_gbs=2000.0, sms=108, fp16_tflops=312.0,
                 int8_tops=624.0, fp32_tflops=19.5, dp4a_tops=78.0, sm=80, l2_gbs=5000.0,
                 l2_mb=40.0),
    "l40s": dict(name="L40S", hbm_gbs=864.0, sms=142, fp16_tflops=362.0, int8_tops=733.0,
                 fp32_tflops=91.6, dp4a_tops=183.0, sm=89, l2_gbs=5000.0, l2_mb=96.0),
}
DESIGNS = ("lean-q", "lean", "fused", "unfused")  # the default: best_design()
LEAN = ("lean", "lean-q")  # designs with lean's epilogues, splits and PDL

# ---------------------------------------------------------------------------------------------
# Parameters: (value, source or assumption). None of these has been measured on Sol's kernels.
PARAMS = {
    # Bandwidth. The roofline is taken against the COPY bandwidth; reports give % of both.
    "copy_frac": (0.91, "measured device-to-device copy / spec HBM: 0.90-0.92 on HBM3/HBM3e "
                        "parts (nvbandwidth, BabelStream-class figures); assumption until "
                        "tests/gpu/run.sh measures it (then pass --copy-bw)"),
    "gemv_eff": (0.90, "quantized/F16 GEMV streaming with 128-bit aligned loads, share of the "
                       "copy bandwidth; assumption to be measured on the first lease "
                       "(llama.cpp's mmvq reports 60-80% on large matrices)"),
    "attn_eff": (0.80, "decode attention's K/V stream (16-token pages, vector loads), share of "
                       "copy bandwidth; assumption"),
    "small_eff": (0.80, "norms, quantize, rope, elementwise, embedding, sampler: share of copy "
                        "bandwidth when enough blocks run; assumption (their bytes are tiny: the "
                        "launch cost and the wave term dominate)"),
    "waves": (2.0, "blocks per SM needed to saturate HBM: a kernel of B blocks reaches "
                   "min(1, B / (waves * SMs)) of its bandwidth; assumption"),
    # Compute.
    "tc_eff": (0.60, "int8 (MMQ-style mma.sync) and F16 (cuBLASLt) tensor-core share of peak at "
                     "these shapes; issue 30's brief"),
    "fa_eff": (0.45, "FlashAttention-2-style prefill attention (mma.sync, no wgmma), share of the "
                     "F16 tensor peak; FA2 on Hopper reports ~35-50%; today's k_flash_attention "
                     "(4 warps x 16 rows, chunks of 32 positions, no cp.async) is charged the "
                     "same: assumption, to be measured"),
    "mma_eff": (1.0, "k_mma_gemm's HMMA rate as a share of its issue-bound rate: its share of the "
                     "F16 peak is min(1, mma_eff x MMA_ISSUE's count for the weight type and "
                     "tile). 1 = issue-bound, the int8 kernels' convention (their *_eff are "
                     "counted the same way); below 1 if latency or mma.sync's own rate on "
                     "Hopper (wgmma's peak is not mma.sync's) bind first: to be measured"),
    "gemv_alu_eff": (0.50, "GEMV arithmetic's share of the CUDA-core peak (dp4a for quantized, "
                           "FP32 FMA for F16) with the unpacking amortised over up to 16 tokens; "
                           "assumption; matters only at batch 8-16"),
    # The int8 GEMMs' shares of the int8 peak: derived from their sm_90 SASS, not tuned. An SM
    # sub-partition finishes an m16n8k32 s8 (4096 MACs) every 4 clocks at the 1979 TOP/s peak
    # (1024 MACs a clock; m16n8k16: 2), and issues one warp instruction a clock; the kernels are
    # issue-bound, so the share is (useful tensor clocks) / (instructions a warp issues) per
    # stage, the load phase included (its unpacking of quants, scales and addresses). Counted
    # 2026-12-06 with nvdisasm on the build's module; to be measured (SOL_CUDA_GEMM=f16 runs the
    # F16 tiles instead, for the comparison).
    "built_tc": (0.0, "lean-q only: 1 = batches of more than 16 tokens on today's batch kernels "
                       "(k_mma_gemm's F16 tiles, or k_mmq.cu with gemm_int8=1) instead of the "
                       "designed MMQ at tc_eff: lean-q as built at every batch"),
    "gemm_int8": (0.0, "1: today's batches of quantized weights on the int8 kernels (k_mmq.cu, "
                        "SOL_CUDA_GEMM=int8) instead of the F16 tiles (k_mma_gemm, the backend's "
                        "default while this model predicts them faster)"),
    "mmq_eff": (0.16, "k_mmq_gemm (Q4_0/Q5_x/Q8_0/MXFP4 at n > 16; 64x64 tiles, 4 warps, two "
                      "32-blocks a stage double-buffered in registers): ~19 instructions a warp "
                      "issues per IMMA in the inner loop (the GEMV's float step for each of a "
                      "lane's 4 sums: I2FP, FMUL d * dx, FFMA; 5 LDS; the loop) and ~100 a stage "
                      "for q_load, the activations and the shared stores: ~400 per 16 IMMA (64 "
                      "clocks) = 0.16. llama.cpp's MMQ takes the same float step per 32-block"),
    "mmqk_eff": (0.13, "k_mmq_kq<kq45> (Q4_K/Q5_K; 64x64 tiles, 8 warps of 32 x 16, a super-block a "
                       "stage, single-buffered): a warp issues 66 instructions per sub-block "
                       "(8 IMMA: 4 dots, 4 of the mins' integer) and 434 more per super-block "
                       "(unpacking, scales, the float terms): 962 issue slots for 32 useful "
                       "IMMA (128 clocks) = 0.13"),
    "mmq6_eff": (0.11, "k_mmq_kq<q6k> (Q6_K; as k_mmq_kq<kq45>, m16n8k16 per 16 columns): 66 instructions "
                       "per 32 columns (8 IMMA k16) and 635 more per super-block (six-bit "
                       "unpacking, the offset, scales): 1163 issue slots for 64 IMMA k16 (128 "
                       "clocks) = 0.11"),
    "rope_fold": (1.0, "lean and lean-q: 1 = rope and the KV write in the q/k/v GEMV's epilogue "
                        "(built 2026-12-07: qkv_rope_kv, gemv_run_epi; models with q/k norms "
                        "keep k_rope_kv); 0 = their own launch (k_rope_kv), as before"),
    "mma_tile": (64.0, "weight rows = tokens of an int8 GEMM's tile (MMQ_BM = MMQ_BN = 64 in "
                       "k_mmq.cu): sets how often a matrix (ceil(n / tile)) and x (ceil(M / tile)) "
                       "are re-read; other values are what-ifs. k_mma_gemm's tiles: "
                       "mma_tile_of (below)"),
    "attn_alu_eff": (0.50, "decode attention, and prefill attention where k_flash_attention "
                           "does not apply (F32 cache, head_dim not 64/128: k_attention on CUDA "
                           "cores), share of the FP32 peak; assumption"),
    # Launch costs.
    "launch_graph_us": (1.0, "per kernel node inside a CUDA graph on Hopper (node-to-node gap: "
                             "drain + next grid start); assumption, to be measured"),
    # Programmatic dependent launch (NVIDIA CUDA Programming Guide, 4.5 "Programmatic Dependent
    # Launch and Synchronization": from compute capability 9.0 a dependent secondary kernel may
    # launch before the primary kernel in the same stream finishes, its preamble overlapping the
    # primary's tail, gated by cudaGridDependencySynchronize(); the launch attribute is
    # cudaLaunchAttributeProgrammaticStreamSerialization, and graphs carry it as programmatic
    # edges (cudaGraphKernelNodePortProgrammatic). The guide gives NO latency figure; llama.cpp's
    # draft PR #22522 reports PDL and graphs as additive, on cc >= 9.0 only, not Ada.)
    "launch_pdl_us": (0.3, "lean designs (lean, lean-q) on sm_90 (h200, h100), per kernel "
                           "node inside a CUDA graph with programmatic dependent launch: the next grid is scheduled "
                           "and runs its preamble while the previous one drains (built: "
                           "SOL_LAUNCH's attribute, sol_grid_dependency() first in every "
                           "kernel); the figure is NOT documented by NVIDIA: an assumption to "
                           "be measured on the first lease (tests/gpu/run.sh times "
                           "SOL_CUDA_PDL=0 beside it)"),
    "launch_eager_us": (3.0, "per eager launch (--eager, --enforce-eager; prefill steps are "
                             "eager in both designs); assumption"),
    "host_us": (4.0, "per step on the host: cudaGraphLaunch, the one staged H2D input copy, the "
                     "D2H of the sampled ids, the synchronize's wake-up; assumption"),
    "recapture_us": (1.5, "today (--unfused) each decode step is re-captured and updated "
                          "(cudaGraphExecUpdate) before launch: host time per node, during which "
                          "the GPU idles; assumption"),
    "pcie_gbs": (25.0, "today (--unfused): the logits' D2H download for the host sampler, "
                       "GB/s; assumption"),
    "pcie_lat_us": (5.0, "today (--unfused): latency of that download + synchronize; assumption"),
    # Design constants (of the code or of issue 30's design).
    "crossover": (16.0, "batch at and above which matmuls take the int8 tensor-core (MMQ) path "
                        "(design: 'above a measured crossover')"),
    "gemv_tokens": (16.0, "tokens one GEMV launch serves (acc[16] today; design 1..16)"),
    "gemv_warps": (4.0, "warps (= rows) per GEMV block (k_gemv.cu GEMV_WARPS)"),
    "split_min": (256.0, "positions per attention split (SOL_CUDA_ATT_SPLIT_MIN)"),
    "split_max": (32.0, "most attention splits (SOL_CUDA_ATT_MAX_SPLITS)"),
    "lean_split_len": (64.0, "lean design: positions per attention split; splits = min(split_max, "
                             "max(1, ceil(context / lean_split_len)), ceil(waves * SMs / heads)): "
                             "from the token's context and the SM count only, never the batch"),
    "prologue_ops": (4.0, "lean design: instructions per element of x per prologue step in a GEMV "
                          "block (norm: load, square-add, scale by rms and gamma; quantize: "
                          "max-abs, scale, round/convert, pack): 4 each, at gemv_alu_eff of the "
                          "CUDA-core issue rate; the prologue costs max(this, its L2 reads); "
                          "assumption"),
    "prologue_share": (1.0, "lean design: GEMV blocks sharing one prologue (a thread-block "
                            "cluster exchanging the normalized, quantized x through distributed "
                            "shared memory); 1 = every block re-reads all of x from L2 (the "
                            "design as committed); > 1 divides those re-reads (not designed)"),
    "normq_slice": (256.0, "lean-q: elements of a row per rmsnorm+quantize (or quantize) block "
                           "(one Q8_K block, 8 Q8_0 blocks; 16 blocks per token at d 4096); each "
                           "norm block re-reads its whole row from L2 for the sum of squares "
                           "(charged per block at its SM's share of the L2 bandwidth, and "
                           "prologue_ops per element at its SM's issue rate); design choice"),
    "norm_blocks": (1.0, "blocks per token row of rmsnorm(+quantize): 1 = today's k_rmsnorm grid "
                         "(the design does not say); N > 1: each block reduces the whole row "
                         "(re-read from L2, counted as traffic) and normalises 1/N of it"),
    "tail_tokens": (1.0, "lean-q with next_input: tokens up to which a matmul_add takes the norm "
                         "tail (SOL_CUDA_NORM_TAIL_MAX_TOKENS, cuda_kernels.h): the tail is one "
                         "block's work, so at 2 tokens the launch it replaces is faster"),
    "split_k": (1.0, "built_tc: 1 = as built (2026-12-07): a k_mma_gemm launch of up to 64 tokens "
                     "whose tiles make fewer than 2 blocks an SM splits K (mma_splits, k_mma.cu: "
                     "enough splits for 2 x SMs blocks, each >= 8 stages of 32 columns); every "
                     "split block writes its 64 x 64 f32 partial tile, the last of a tile reads "
                     "them all back (L2 traffic) and sums them, a serial tail at one SM's share "
                     "of the L2 bandwidth; 0 = none (SOL_CUDA_SPLIT_K=0)"),
    "next_input": (1.0, "lean-q: 1 = as built (next_input, 2026-12-07): in a decode step (at most "
                        "tail_tokens tokens) the RMSNorm of x and its quantization for the next group "
                        "are made by the last block of the GEMV that adds to x (o for gate/up, "
                        "the previous down for q/k/v and the head; layer 0's q/k/v norm stays a "
                        "launch), charged serially at one SM's share of the L2 bandwidth (the "
                        "sum's read, the quantize's re-read, gamma, the activations; xn for "
                        "float weights only); the attention merge writes the o projection's "
                        "Q8_K as well as Q8_0 (256 / head_dim heads a block); the gate/up GEMV "
                        "quantizes act(gate) * up for the down projection, each block of rows "
                        "by the warp that completes it (the last one's work charged at the "
                        "kernel's end; at most 16 tokens); 0 = their own launches, as before"),
    "sampler_chunk": (4096.0, "design: logits per sampler block (partial argmax/top-k per block, "
                              "the last block to finish merges them: one launch)"),
}

TARGETS = {"q4_k_m": 0.80, "q4_0": 0.80, "f16": 0.85}  # issue 30: batch-1 decode, 8B, copy bw
PREFILL_GOAL = 0.50  # issue 30: prefill >= 50% of the tensor-core peak at 2,048 tokens, 8B

# ---------------------------------------------------------------------------------------------
# ggml tensor types: id -> (name, elements per block, bytes per block).
GGML = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
}
TYPE = {v[0]: (k, v[1], v[2]) for k, v in GGML.items()}
FLOAT_TYPES = {"F32", "F16", "BF16", "F64"}
# Sol's quantized activations (k_gemv.cu split_scratch): Q8_0 blocks = 32 int8 + float scale +
# int32 sum (40 bytes per 32); Q8_K = 256 int8 + float scale + 16 int16 sums (292 per 256).
ACT_BYTES = {"q8_0": 40 / 32, "q8_k": 292 / 256, "f32": 4.0}


def act_format(tname):
    if tname in FLOAT_TYPES:
        return "f32"
    return "q8_k" if TYPE[tname][1] == 256 else "q8_0"


def row_bytes(tname, cols, what):
    _, be, bb = TYPE[tname]
    if cols % be:
        raise ModelError(f"{what}: rows of {cols} elements are not whole {tname} blocks of {be}")
    return cols // be * bb


# ---------------------------------------------------------------------------------------------
# Shapes. A shape: dims plus, per layer, each matrix's (type, rows, cols, bytes); the presets and
# --gguf build the same structure, so bytes per weight always come from the types.
PRESETS = {  # layers, dim, ffn, heads, kv_heads, head_dim, vocab, tied embeddings
    "8b": dict(label="Llama-3-8B", layers=32, dim=4096, ffn=14336, heads=32, kv_heads=8,
               head_dim=128, vocab=128256, tied=False),
    "1b": dict(label="Llama-3.2-1B", layers=16, dim=2048, ffn=8192, heads=32, kv_heads=8,
               head_dim=64, vocab=128256, tied=True),
    "70b": dict(label="Llama-3-70B", layers=80, dim=8192, ffn=28672, heads=64, kv_heads=8,
                head_dim=128, vocab=128256, tied=False),
}
QUANTS = ("q4_k_m", "q4_0", "q8_0", "f16")
LAYER_MATS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def more_bits(i, n):
    """llama.cpp's use_more_bits (Sol's worker/gguf/quantize.c more_bits_layer)."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def preset_type(quant, name, layer, n_layers, tied, cols):
    """The type sol-quantize gives a matrix (worker/gguf/quantize.c quant_choose)."""
    if quant == "f16":
        t = "F16"
    elif quant == "q8_0":
        t = "Q8_0"
    elif quant == "q4_0":  # sol-quantize's default mix: token_embd and output stay Q8_0
        t = "Q8_0" if name in ("token_embd", "output") else "Q4_0"
    else:  # q4_k_m: llama.cpp's mix
        if name == "output" or (tied and name == "token_embd"):
            t = "Q6_K"
        elif name in ("attn_v", "ffn_down") and more_bits(layer, n_layers):
            t = "Q6_K"
        else:
            t = "Q4_K"
    if cols % TYPE[t][1]:
        t = "Q8_0" if cols % 32 == 0 else "F16"
    return t


def gemv_kernel(tname):
    """The GEMV kernel of k_gemv.cu a weight type takes (one launch holds matrices of one)."""
    if tname in ("Q4_K", "Q5_K", "Q6_K"):
        return "kq"  # k_gemv_kq: Q6_K's body or Q4_K/Q5_K's, chosen per block
    return "float" if tname in FLOAT_TYPES else "q"


def gemv_launches(mats):
    """Launches of gemv_run_many for a list: runs of one kernel, at most three matrices each
    (Q4_K_M's q/k in Q4_K and a Q6_K v: one, k_gemv_kq takes both)."""
    n, prev, run = 0, None, 0
    for m in mats:
        k = gemv_kernel(m["type"])
        if k != prev or run == 3:
            n, run = n + 1, 0
        prev, run = k, run + 1
    return n


def mat(tname, rows, cols, what):
    return dict(type=tname, rows=rows, cols=cols, bytes=rows * row_bytes(tname, cols, what))


def build_preset(key, quant, over):
    p = dict(PRESETS[key])
    for k, v in over.items():
        if v is not None:
            p[k] = v
    if over.get("head_dim") is None and (over.get("dim") or over.get("heads")):
        p["head_dim"] = p["dim"] // p["heads"]
    L, d, f, h, kvh, hd, V = (p[k] for k in ("layers", "dim", "ffn", "heads", "kv_heads",
                                            "head_dim", "vocab"))
    if h % kvh:
        raise ModelError(f"--heads {h} is not a multiple of --kv-heads {kvh}")
    q_dim, kv_dim = h * hd, kvh * hd
    dims = dict(attn_q=(q_dim, d), attn_k=(kv_dim, d), attn_v=(kv_dim, d),
                attn_output=(d, q_dim), ffn_gate=(f, d), ffn_up=(f, d), ffn_down=(d, f))
    layers = []
    for i in range(L):
        layers.append({m: mat(preset_type(quant, m, i, L, p["tied"], dims[m][1]), dims[m][0],
                              dims[m][1], f"blk.{i}.{m}") for m in LAYER_MATS})
    embd = mat(preset_type(quant, "token_embd", 0, L, p["tied"], d), V, d, "token_embd")
    out = embd if p["tied"] else mat(preset_type(quant, "output", 0, L, False, d), V, d, "output")
    over_s = "".join(f", {k} {v}" for k, v in over.items() if v is not None)
    return dict(source=f"--shape {key} ({p['label']}{over_s}) --quant {quant}", arch="llama",
                layers=layers, dim=d, ffn=f, heads=h, kv_heads=kvh, head_dim=hd, vocab=V,
                token_embd=embd, output=out, tied=p["tied"], norm_bytes=(2 * L + 1) * d * 4,
                notes=[])


# ---------------------------------------------------------------------------------------------
# GGUF header reader (v2/v3): metadata and tensor infos; the data itself is never read.
class _Reader:
    def __init__(self, f, path, size):
        self.f, self.path, self.size = f, path, size

    def read(self, n):
        pos = self.f.tell()
        b = self.f.read(n)
        if len(b) != n:
            raise ModelError(f"{self.path}: truncated GGUF header at byte {pos} "
                             f"(needs {n} bytes, file is {self.size})")
        return b

    def u32(self):
        return struct.unpack("<I", self.read(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.read(8))[0]

    def string(self, limit=1 << 24):
        n = self.u64()
        if n > limit or self.f.tell() + n > self.size:
            raise ModelError(f"{self.path}: bad string length {n} at byte {self.f.tell() - 8}")
        return self.read(n).decode("utf-8", "replace")


_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}


def _value(r, vt, depth=0):
    if vt in _SCALAR:
        fmt = _SCALAR[vt]
        return struct.unpack(fmt, r.read(struct.calcsize(fmt)))[0]
    if vt == 8:
        return r.string()
    if vt == 9 and depth == 0:
        et, n = r.u32(), r.u64()
        if n > 1 << 31:
            raise ModelError(f"{r.path}: array of {n} elements")
        if et in _SCALAR:  # numeric arrays: keep small ones (per-layer head counts), skip others
            sz = struct.calcsize(_SCALAR[et])
            if r.f.tell() + n * sz > r.size:
                raise ModelError(f"{r.path}: truncated GGUF array at byte {r.f.tell()}")
            if n <= 4096:
                return list(struct.unpack(f"<{n}{_SCALAR[et][1]}", r.read(n * sz)))
            r.f.seek(n * sz, 1)
            return _Array(n)
        if et == 8:
            for _ in range(n):
                ln = r.u64()
                if r.f.tell() + ln > r.size:
                    raise ModelError(f"{r.path}: truncated GGUF string array at byte {r.f.tell()}")
                r.f.seek(ln, 1)
            return _Array(n)
        raise ModelError(f"{r.path}: array of value type {et} not supported")
    raise ModelError(f"{r.path}: unknown GGUF value type {vt}")


class _Array:
    def __init__(self, n):
        self.n = n


def read_gguf(path):
    try:
        size = os.path.getsize(path)
        f = open(path, "rb")
    except OSError as e:
        raise ModelError(f"{path}: cannot read: {e.strerror}") from None
    with f:
        r = _Reader(f, path, size)
        magic = f.read(4)
        if magic != b"GGUF":
            raise ModelError(f"{path}: not a GGUF file (magic {magic!r})")
        ver = r.u32()
        if ver not in (2, 3):
            raise ModelError(f"{path}: GGUF version {ver} (2 and 3 are read)")
        n_tensors, n_kv = r.u64(), r.u64()
        if n_tensors > 1 << 20 or n_kv > 1 << 20:
            raise ModelError(f"{path}: {n_tensors} tensors, {n_kv} keys: not a sane header")
        kv = {}
        for _ in range(n_kv):
            key = r.string(1 << 16)
            kv[key] = _value(r, r.u32())
        tensors = {}
        for _ in range(n_tensors):
            name = r.string(1 << 16)
            nd = r.u32()
            if not 1 <= nd <= 4:
                raise ModelError(f"{path}: tensor {name}: {nd} dimensions")
            ne = [r.u64() for _ in range(nd)]
            t = r.u32()
            off = r.u64()
            if t not in GGML:
                raise ModelError(f"{path}: tensor {name}: unknown ggml type {t}")
            tname, be, bb = GGML[t]
            if ne[0] % be:
                raise ModelError(f"{path}: tensor {name}: {ne[0]} columns are not whole "
                                 f"{tname} blocks")
            nbytes = ne[0] // be * bb * math.prod(ne[1:])
            tensors[name] = dict(type=tname, ne=ne, offset=off, bytes=nbytes)
        align = kv.get("general.alignment", 32)
        if not isinstance(align, int) or align <= 0:
            raise ModelError(f"{path}: general.alignment {align!r}")
        data = (f.tell() + align - 1) // align * align
    for name, t in tensors.items():
        end = data + t["offset"] + t["bytes"]
        if end > size:
            raise ModelError(f"{path}: truncated: tensor {name} ends at byte {end}, "
                             f"the file has {size}")
    return kv, tensors, data, size


def shape_from_gguf(path):
    kv, tens, data_start, size = read_gguf(path)
    arch = kv.get("general.architecture")
    if not isinstance(arch, str):
        raise ModelError(f"{path}: no general.architecture key")

    def key(k, default=None):
        v = kv.get(f"{arch}.{k}", default)
        if v is None:
            raise ModelError(f"{path}: key {arch}.{k} missing")
        if isinstance(v, list):  # per-layer figures (some archs): the largest
            v = max(v)
        if not isinstance(v, int) or v <= 0:
            raise ModelError(f"{path}: key {arch}.{k} = {v!r} is not a positive integer")
        return v

    L, d, heads = key("block_count"), key("embedding_length"), key("attention.head_count")
    kvh = key("attention.head_count_kv", heads)
    hd = key("attention.key_length", d // heads)
    if any(n.endswith("_exps.weight") for n in tens):
        raise ModelError(f"{path}: mixture-of-experts tensors (*_exps): not modelled")

    def m(name, what=None):
        t = tens.get(name)
        if t is None:
            return None
        ne = t["ne"]
        if len(ne) != 2:
            raise ModelError(f"{path}: tensor {name} has {len(ne)} dimensions, a matrix has 2")
        return dict(type=t["type"], rows=ne[1], cols=ne[0], bytes=t["bytes"])

    layers = []
    ffn = None
    for i in range(L):
        lw = {}
        qkv = m(f"blk.{i}.attn_qkv.weight")
        for name in LAYER_MATS:
            w = m(f"blk.{i}.{name}.weight")
            if w is None and qkv is not None and name in ("attn_q", "attn_k", "attn_v"):
                part = {"attn_q": heads * hd, "attn_k": kvh * hd, "attn_v": kvh * hd}[name]
                w = dict(type=qkv["type"], rows=part, cols=qkv["cols"],
                         bytes=qkv["bytes"] * part // qkv["rows"])
            if w is None:
                raise ModelError(f"{path}: tensor blk.{i}.{name}.weight missing")
            lw[name] = w
        ffn = lw["ffn_gate"]["rows"]
        layers.append(lw)
    embd = m("token_embd.weight")
    if embd is None:
        raise ModelError(f"{path}: tensor token_embd.weight missing")
    out = m("output.weight")
    tied = out is None
    if tied:
        out = embd
    vocab = embd["rows"]
    toks = kv.get("tokenizer.ggml.tokens")
    notes = []
    if isinstance(toks, _Array) and toks.n != vocab:
        notes.append(f"tokenizer has {toks.n} tokens, token_embd {vocab} rows: using {vocab}")
    if arch not in ("llama", "mistral"):
        notes.append(f"architecture {arch}: its extras (biases, q/k norms, post-norms, sliding "
                     "windows, GELU) are not modelled; the llama step is")
    norm_bytes = sum(t["bytes"] for n, t in tens.items() if len(t["ne"]) == 1)
    weights_file = sum(t["bytes"] for t in tens.values())
    return dict(source=f"--gguf {path}", arch=arch, layers=layers, dim=d, ffn=ffn, heads=heads,
                kv_heads=kvh, head_dim=hd, vocab=vocab, token_embd=embd, output=out, tied=tied,
                norm_bytes=norm_bytes, notes=notes, file_bytes=size, file_tensor_bytes=weights_file)


def file_weight_bytes(sh):
    if "file_tensor_bytes" in sh:
        return sh["file_tensor_bytes"]
    w = sum(m["bytes"] for lw in sh["layers"] for m in lw.values())
    w += sh["token_embd"]["bytes"] + (0 if sh["tied"] else sh["output"]["bytes"])
    return w + sh["norm_bytes"]


# ---------------------------------------------------------------------------------------------
# THE STEP: every kernel launch of a step, in order. Everything (the family table, --kernels,
# launches, bytes, FLOPs, times, the JSON) is derived from this one list.
#   fam: the family row it is summed into; kernel: its name (today's k_* or the design's);
#   scope: start (once), layer (per layer), end (once); mode: the designs it belongs to (lean,
#   fused: issue 30's design, unfused: today); op + args: what it costs (see Model.op_*);
#   today: what exists. args unfold: a lean row that launches only when the matmuls run on the
#   tensor-core path (batch >= crossover, prefill), where the prologues are not folded.
QKV, GU = ("attn_q", "attn_k", "attn_v"), ("ffn_gate", "ffn_up")
F, U, L, LQ, B = ("fused",), ("unfused",), ("lean",), ("lean-q",), DESIGNS
STEP = [
    dict(fam="embedding", kernel="k_embed", scope="start", mode=B, op="embed",
         today="exists (k_embed)"),
    # --- issue 30's design: 9 launches per layer, +1 combine when the context is split
    dict(fam="rmsnorm", kernel="rmsnorm_quantize(attn)", scope="layer", mode=F, op="norm",
         args=dict(quant_for=QKV), today="design (k_rmsnorm + k_quantize_* fused)"),
    dict(fam="q/k/v projection", kernel="gemv_qkv", scope="layer", mode=F, op="matmul",
         args=dict(mats=QKV, inp="q"), today="design (one launch, activations quantized once)"),
    dict(fam="rope + KV write", kernel="rope_kv_write", scope="layer", mode=F, op="rope_kv",
         today="exists (k_rope_kv: rope x2 + the KV write in one launch, rope_kv_write)"),
    dict(fam="attention", kernel="paged_attention", scope="layer", mode=F, op="attention",
         args=dict(splits="design"), today="exists (k_paged_attention: vector K/V loads, "
         "GQA-shared loads, splits from the SM count)"),
    dict(fam="attention combine", kernel="attention_combine", scope="layer", mode=F,
         op="combine", args=dict(splits="design"),
         today="exists, in the attention launch (att_split_end), not as a launch"),
    dict(fam="o projection", kernel="gemv_o_residual", scope="layer", mode=F, op="matmul",
         args=dict(mats=("attn_output",), inp="f32", residual=True),
         today="partly (GEMV + add fused: matmul_add; design: quantizes its f32 input per "
         "block)"),
    dict(fam="rmsnorm", kernel="rmsnorm_quantize(ffn)", scope="layer", mode=F, op="norm",
         args=dict(quant_for=GU), today="design"),
    dict(fam="gate/up projection", kernel="gemv_gate_up_silu", scope="layer", mode=F,
         op="matmul", args=dict(mats=GU, inp="q", silu=True),
         today="design (one launch, SiLU*mul epilogue)"),
    dict(fam="quantize", kernel="quantize(silu)", scope="layer", mode=F, op="quant",
         args=dict(quant_for=("ffn_down",)), today="exists (k_quantize_q8_0/q8_k)"),
    dict(fam="down projection", kernel="gemv_down_residual", scope="layer", mode=F, op="matmul",
         args=dict(mats=("ffn_down",), inp="q", residual=True),
         today="exists (GEMV + add fused: matmul_add)"),
    dict(fam="rmsnorm", kernel="rmsnorm_quantize(final)", scope="end", mode=F, op="norm",
         args=dict(quant_for=("output",), rows="logits"), today="design"),
    dict(fam="output head", kernel="gemv_head", scope="end", mode=F, op="matmul",
         args=dict(mats=("output",), inp="q", rows="logits"), today="exists (k_gemv_*)"),
    dict(fam="sampler", kernel="sample_argmax_topk", scope="end", mode=F, op="sampler",
         today="design (today the host samples downloaded logits)"),
    dict(fam="host (per step)", kernel="graph launch + I/O", scope="end", mode=F, op="host",
         today="exists (graphs replayed: keyed by token count, a dry step compares "
         "every launch with the record)"),
    # --- the lean design: 5 launches per layer, +1 combine when the context is split
    dict(fam="rmsnorm", kernel="rmsnorm_quantize(attn) tc", scope="layer", mode=L, op="norm",
         args=dict(quant_for=QKV, unfold=True), today="design (tensor-core path only)"),
    dict(fam="q/k/v projection", kernel="gemv_qkv_norm_rope_kv", scope="layer", mode=L,
         op="matmul", args=dict(mats=QKV, inp="q", prologue="norm", rope_kv=True),
         today="design (prologue: rmsnorm + Q8 of x from L2; epilogue: rope, KV write)"),
    dict(fam="rope + KV write", kernel="rope_kv_write tc", scope="layer", mode=L, op="rope_kv",
         args=dict(unfold=True), today="design (tensor-core path only)"),
    dict(fam="attention", kernel="paged_attention", scope="layer", mode=L, op="attention",
         args=dict(splits="lean"), today="exists (k_paged_attention); design: vector K/V loads, "
         "GQA-shared loads, splits from the context and the SM count"),
    dict(fam="attention combine", kernel="attention_combine", scope="layer", mode=L,
         op="combine", args=dict(splits="lean"),
         today="exists, in the attention launch (att_split_end: the last split merges)"),
    dict(fam="o projection", kernel="gemv_o_quant_residual", scope="layer", mode=L, op="matmul",
         args=dict(mats=("attn_output",), inp="f32", prologue="quant", residual=True),
         today="design (prologue: Q8 of the attention output; epilogue: residual add)"),
    dict(fam="rmsnorm", kernel="rmsnorm_quantize(ffn) tc", scope="layer", mode=L, op="norm",
         args=dict(quant_for=GU, unfold=True), today="design (tensor-core path only)"),
    dict(fam="gate/up projection", kernel="gemv_gate_up_norm_silu", scope="layer", mode=L,
         op="matmul", args=dict(mats=GU, inp="q", prologue="norm", silu=True),
         today="design (gate/up rows interleaved; prologue: rmsnorm + Q8; epilogue: SiLU*mul)"),
    dict(fam="quantize", kernel="quantize(silu) tc", scope="layer", mode=L, op="quant",
         args=dict(quant_for=("ffn_down",), unfold=True), today="design (tensor-core path only)"),
    dict(fam="down projection", kernel="gemv_down_quant_residual", scope="layer", mode=L,
         op="matmul", args=dict(mats=("ffn_down",), inp="f32", prologue="quant", residual=True),
         today="design (prologue: Q8 of SiLU*mul's output; epilogue: residual add)"),
    dict(fam="rmsnorm", kernel="rmsnorm_quantize(final) tc", scope="end", mode=L, op="norm",
         args=dict(quant_for=("output",), rows="logits", unfold=True),
         today="design (tensor-core path only)"),
    dict(fam="output head", kernel="gemv_head_norm", scope="end", mode=L, op="matmul",
         args=dict(mats=("output",), inp="q", prologue="norm", rows="logits"),
         today="design (prologue: rmsnorm + Q8 of x)"),
    dict(fam="sampler", kernel="sample_argmax_topk", scope="end", mode=L, op="sampler",
         today="design (today the host samples downloaded logits)"),
    dict(fam="host (per step)", kernel="graph launch + I/O", scope="end", mode=L, op="host",
         today="exists (graphs replayed: keyed by token count, a dry step compares "
         "every launch with the record)"),
    # --- lean-q: 9 launches per layer (7 with float weights), +1 combine when split; one
    # rmsnorm+quantize or quantize launch per matrix group (q/k/v, o, gate/up, down, head)
    dict(fam="norm+quantize", kernel="rmsnorm_quantize(attn)", scope="layer", mode=LQ,
         op="normq", args=dict(quant_for=QKV, norm=True),
         today="exists (k_rmsnorm_quantize: a block per 256 elements of a row, each re-reading "
         "the row for its sum; norm_matmul_many, q/k/v biases in the GEMV store)"),
    dict(fam="q/k/v projection", kernel="gemv_qkv_rope_kv", scope="layer", mode=LQ,
         op="matmul", args=dict(mats=QKV, inp="q", rope_kv=True),
         today="exists (gemv_run_epi: q/k/v in one launch on the shared Q8 x, a Q6_K v "
         "included: k_gemv_kq; rope and the KV write in the store, a pair's rows in one block: "
         "qkv_rope_kv; with q/k norms (Qwen3) k_rope_kv, one launch more)"),
    dict(fam="rope + KV write", kernel="rope_kv_write tc", scope="layer", mode=LQ, op="rope_kv",
         args=dict(unfold=True), today="design (tensor-core path only)"),
    dict(fam="attention", kernel="paged_attention", scope="layer", mode=LQ, op="attention",
         args=dict(splits="lean"), today="exists (k_paged_attention: vector K/V loads, GQA-shared loads, splits from "
         "the SM count and the context)"),
    dict(fam="attention combine", kernel="attention_combine", scope="layer", mode=LQ,
         op="combine", args=dict(splits="lean"),
         today="exists, in the attention launch (att_split_end: the last split merges)"),
    dict(fam="norm+quantize", kernel="quantize(attn out)", scope="layer", mode=LQ, op="normq",
         args=dict(quant_for=("attn_output",), norm=False),
         today="exists (k_quantize_*: 256 elements a block), none when split: the combine "
         "writes the o GEMV's Q8_0 (Q8_0-activation weights)"),
    dict(fam="o projection", kernel="gemv_o_residual", scope="layer", mode=LQ, op="matmul",
         args=dict(mats=("attn_output",), inp="q", residual=True),
         today="exists (k_gemv_* on Q8 x, residual add in the store: matmul_add)"),
    dict(fam="norm+quantize", kernel="rmsnorm_quantize(ffn)", scope="layer", mode=LQ,
         op="normq", args=dict(quant_for=GU, norm=True),
         today="exists (k_rmsnorm_quantize for gate/up, 256 elements a block: "
         "norm_matmul_many)"),
    dict(fam="gate/up projection", kernel="gemv_gate_up_silu", scope="layer", mode=LQ,
         op="matmul", args=dict(mats=GU, inp="q", silu=True),
         today="exists (gemv_run_many: one launch on the shared Q8 x; SiLU*mul made by the down's quantize "
         "instead: glu_matmul_add; design: the SiLU*mul epilogue, rows interleaved)"),
    dict(fam="norm+quantize", kernel="quantize(silu)", scope="layer", mode=LQ, op="normq",
         args=dict(quant_for=("ffn_down",), norm=False),
         today="exists (k_quantize_* reading act(gate) * up, 256 elements a block: "
         "glu_matmul_add)"),
    dict(fam="down projection", kernel="gemv_down_residual", scope="layer", mode=LQ,
         op="matmul", args=dict(mats=("ffn_down",), inp="q", residual=True),
         today="exists (k_gemv_* on Q8 x, residual add in the store: matmul_add)"),
    dict(fam="norm+quantize", kernel="rmsnorm_quantize(final)", scope="end", mode=LQ,
         op="normq", args=dict(quant_for=("output",), norm=True, rows="logits"),
         today="exists (k_rmsnorm_quantize: the head's norm_matmul_many; a decode step's rows "
         "read in place, no gather)"),
    dict(fam="output head", kernel="gemv_head", scope="end", mode=LQ, op="matmul",
         args=dict(mats=("output",), inp="q", rows="logits"), today="exists (k_gemv_* on Q8 x)"),
    dict(fam="sampler", kernel="sample_argmax_topk", scope="end", mode=LQ, op="sampler",
         today="exists for greedy rows (k_argmax: argmax_rows, 8 bytes a row to the host: "
         "model_batch.argmax_ids); sampling at a temperature downloads the logits"),
    dict(fam="host (per step)", kernel="graph launch + I/O", scope="end", mode=LQ, op="host",
         today="exists (graphs replayed: keyed by token count, a dry step compares "
         "every launch with the record)"),
    # --- today (before issue 30): ~23 launches per layer, +1 combine when split
    dict(fam="rmsnorm", kernel="k_rmsnorm(attn)", scope="layer", mode=U, op="norm",
         args=dict(quant_for=()), today="exists"),
    dict(fam="quantize", kernel="k_quantize(q)", scope="layer", mode=U, op="quant",
         args=dict(quant_for=("attn_q",)), today="exists"),
    dict(fam="q/k/v projection", kernel="k_gemv(q)", scope="layer", mode=U, op="matmul",
         args=dict(mats=("attn_q",), inp="q"), today="exists"),
    dict(fam="quantize", kernel="k_quantize(k)", scope="layer", mode=U, op="quant",
         args=dict(quant_for=("attn_k",)), today="exists"),
    dict(fam="q/k/v projection", kernel="k_gemv(k)", scope="layer", mode=U, op="matmul",
         args=dict(mats=("attn_k",), inp="q"), today="exists"),
    dict(fam="quantize", kernel="k_quantize(v)", scope="layer", mode=U, op="quant",
         args=dict(quant_for=("attn_v",)), today="exists"),
    dict(fam="q/k/v projection", kernel="k_gemv(v)", scope="layer", mode=U, op="matmul",
         args=dict(mats=("attn_v",), inp="q"), today="exists"),
    dict(fam="rope + KV write", kernel="k_rope(q)", scope="layer", mode=U, op="rope",
         args=dict(which="q"), today="exists"),
    dict(fam="rope + KV write", kernel="k_rope(k)", scope="layer", mode=U, op="rope",
         args=dict(which="k"), today="exists"),
    dict(fam="rope + KV write", kernel="k_kv_write", scope="layer", mode=U, op="kv_write",
         today="exists"),
    dict(fam="attention", kernel="k_paged_attention", scope="layer", mode=U, op="attention",
         args=dict(splits="today"), today="exists"),
    dict(fam="attention combine", kernel="k_attention_combine (before issue 30)", scope="layer",
         mode=U,
         op="combine", args=dict(splits="today"), today="exists"),
    dict(fam="quantize", kernel="k_quantize(attn out)", scope="layer", mode=U, op="quant",
         args=dict(quant_for=("attn_output",)), today="exists"),
    dict(fam="o projection", kernel="k_gemv(o)", scope="layer", mode=U, op="matmul",
         args=dict(mats=("attn_output",), inp="q"), today="exists"),
    dict(fam="residual add", kernel="k_add(attn)", scope="layer", mode=U, op="add",
         today="exists"),
    dict(fam="rmsnorm", kernel="k_rmsnorm(ffn)", scope="layer", mode=U, op="norm",
         args=dict(quant_for=()), today="exists"),
    dict(fam="quantize", kernel="k_quantize(gate)", scope="layer", mode=U, op="quant",
         args=dict(quant_for=("ffn_gate",)), today="exists"),
    dict(fam="gate/up projection", kernel="k_gemv(gate)", scope="layer", mode=U, op="matmul",
         args=dict(mats=("ffn_gate",), inp="q"), today="exists"),
    dict(fam="quantize", kernel="k_quantize(up)", scope="layer", mode=U, op="quant",
         args=dict(quant_for=("ffn_up",)), today="exists"),
    dict(fam="gate/up projection", kernel="k_gemv(up)", scope="layer", mode=U, op="matmul",
         args=dict(mats=("ffn_up",), inp="q"), today="exists"),
    dict(fam="SiLU*mul", kernel="k_silu_mul", scope="layer", mode=U, op="silu_mul",
         today="exists"),
    dict(fam="quantize", kernel="k_quantize(silu)", scope="layer", mode=U, op="quant",
         args=dict(quant_for=("ffn_down",)), today="exists"),
    dict(fam="down projection", kernel="k_gemv(down)", scope="layer", mode=U, op="matmul",
         args=dict(mats=("ffn_down",), inp="q"), today="exists"),
    dict(fam="residual add", kernel="k_add(ffn)", scope="layer", mode=U, op="add",
         today="exists"),
    dict(fam="get_rows", kernel="k_get_rows(logit rows)", scope="end", mode=U, op="get_rows",
         today="exists"),
    dict(fam="rmsnorm", kernel="k_rmsnorm(final)", scope="end", mode=U, op="norm",
         args=dict(quant_for=(), rows="logits"), today="exists"),
    dict(fam="quantize", kernel="k_quantize(head)", scope="end", mode=U, op="quant",
         args=dict(quant_for=("output",), rows="logits"), today="exists"),
    dict(fam="output head", kernel="k_gemv(head)", scope="end", mode=U, op="matmul",
         args=dict(mats=("output",), inp="q", rows="logits"), today="exists"),
    dict(fam="logits to host", kernel="D2H logits + host sampler", scope="end", mode=U,
         op="logits_d2h", today="exists"),
    dict(fam="host (per step)", kernel="re-capture + update + launch", scope="end", mode=U,
         op="host", today="exists (re-captured every step)"),
]


# k_mma_gemm's stage loop per weight type, counted from its sm_90 SASS by bench/gemm_issue.py
# (2026-12-07, CUDA 13; the loop from its back edge's target, cuobjdump): (instructions, HMMA
# m16n8k16) a warp issues per stage, for the 64-token tile with 64-column stages (n <= 64, K a
# multiple of 64: each thread dequantizes a whole 32-block, its scales decoded once), with
# 32-column stages (K not a multiple of 64), and the 128-token tile (32-column stages). An SM
# sub-partition issues one instruction a clock and an HMMA takes 4 clocks at the dense F16 peak:
# the share is 4 x HMMA / instructions. Before 2026-12-06 (64 x 64 tiles, F16 rounding by bit
# manipulation, no double buffer, 32-bit fragment loads) the loop was 597-795 instructions per 16
# HMMA: 0.08-0.11, not the 0.35 then assumed; before 2026-12-07's byte permutes and whole-block
# stages the 64-token tile was 134-231 per 16 (Q4_K 191: 0.34).
MMA_ISSUE = {
    "Q4_0": ((231, 32), (141, 16), (161, 32)),
    "Q5_0": ((388, 32), (235, 16), (253, 32)),
    "Q5_1": ((337, 32), (208, 16), (236, 32)),
    "Q8_0": ((228, 32), (135, 16), (155, 32)),
    "MXFP4": ((351, 32), (194, 16), (212, 32)),
    "Q4_K": ((259, 32), (165, 16), (185, 32)),
    "Q5_K": ((285, 32), (182, 16), (202, 32)),
    "Q6_K": ((295, 32), (187, 16), (207, 32)),
}
MMA_SMALL = 64  # k_mma.cu: 64 x 64 tiles (4 warps) up to 64 tokens, 128 x 128 (8 warps) past it


def mma_tile_of(n):
    """k_mma_gemm's square tile (weight rows = tokens) at n tokens."""
    return MMA_SMALL if n <= MMA_SMALL else 2 * MMA_SMALL


MMA_SPLIT_WAVES, MMA_SPLIT_MIN_COLS, MMA_MAX_SPLITS = 2, 256, 16  # k_mma.cu's split-K


def mma_splits(tiles, K, n, sms):
    """k_mma.cu's mma_splits: the split count of a launch of `tiles` row tiles (all its
    matrices) of K columns at n tokens on sms SMs (stages of mma_bk's 64 or 32 columns)."""
    bk = 64 if n <= MMA_SMALL and K % 64 == 0 else 32
    target, stages, least = MMA_SPLIT_WAVES * sms, K // bk, MMA_SPLIT_MIN_COLS // bk
    if n > MMA_SMALL or tiles >= target or stages < 2 * least:
        return 1
    s = min(math.ceil(target / tiles), stages // least, MMA_MAX_SPLITS)
    per = math.ceil(stages / s)
    return math.ceil(stages / per)


def mma_config(n, K):
    """MMA_ISSUE's column for n tokens and K columns (k_mma.cu's mma_side and mma_bk)."""
    return 2 if n > MMA_SMALL else 0 if K % 64 == 0 else 1


def mma_share(tname, n, scale, K=4096):
    """k_mma_gemm's share of the F16 peak for a weight type at n tokens and K columns
    (MMA_ISSUE; a type not counted takes the slowest count)."""
    c = mma_config(n, K)
    ins, h = MMA_ISSUE.get(tname, max(MMA_ISSUE.values(), key=lambda v: v[c][0] / v[c][1]))[c]
    return min(1.0, scale * 4.0 * h / ins)


class Model:
    """One step: shape + batch + context + GPU + mode -> per-kernel parts and totals."""

    def __init__(self, sh, gpu, params, batch=1, context=512, kv="f16", prefill=0,
                 design="lean", eager=False, copy_gbs=None, l2_gbs=None):
        self.sh, self.g, self.p = sh, GPUS[gpu], params
        self.gpu_key = gpu
        self.batch, self.context, self.prefill = batch, context, prefill
        self.design = design
        self.fused = design != "unfused"  # lean keeps every fusion of the fused design
        self.lean = design in LEAN  # lean's epilogues, splits and PDL (lean and lean-q)
        self.leanq = design == "lean-q"  # x quantized once per group, no GEMV prologue
        # batches past the GEMV on the designed MMQ (tc_eff), or on today's kernels (built_tc)
        self.designed_tc = self.fused and not (self.leanq and self.p["built_tc"])
        self.eager = eager
        self.l2_bw = (l2_gbs or self.g["l2_gbs"]) * 1e9
        self.kv_eb = 2 if kv == "f16" else 4
        self.kv = kv
        self.spec_bw = self.g["hbm_gbs"] * 1e9
        self.copy_bw = copy_gbs * 1e9 if copy_gbs else self.spec_bw * params["copy_frac"]
        self.copy_measured = bool(copy_gbs)
        # tokens in the step; rows that reach the head (decode: all; prefill: last per sequence)
        self.n = batch * prefill if prefill else batch
        self.n_logits = batch
        # prefill steps run eager in both designs (graphs are per decode batch bucket)
        self.graph = not (eager or prefill)
        # PDL: lean designs, inside the decode graph, on sm_90 only (not A100, not L40S)
        self.pdl = self.lean and self.graph and self.g["sm"] >= 90
        self.launch_key = ("launch_pdl_us" if self.pdl else
                           "launch_graph_us" if self.graph else "launch_eager_us")
        self.launch_us = params[self.launch_key]
        self.q_dim = sh["heads"] * sh["head_dim"]
        self.kv_dim = sh["kv_heads"] * sh["head_dim"]

    # -- helpers
    def part(self, bytes_=0.0, flops=0.0, peak=None, eff=None, blocks=1e9, launches=1,
             fixed_us=0.0, what="", pro_s=0.0, l2_bytes=0.0, l2_floor_s=0.0, rr_s=0.0,
             today=None):
        p, sms = self.p, self.g["sms"]
        eff = p["small_eff"] if eff is None else eff
        wave = min(1.0, blocks / (p["waves"] * sms))
        t_mem = bytes_ / (self.copy_bw * eff * wave) if bytes_ else 0.0
        t_cmp = flops / peak if flops and peak else 0.0
        t_launch = launches * self.launch_us * 1e-6
        # pro_s: a GEMV prologue (x re-read from L2, normalised/quantized per block) runs before
        # the block's weight stream; the grid is about one resident wave, so every block's
        # prologue falls at the kernel's start: added, not overlapped (conservative)
        # l2_floor_s (lean-q GEMVs): everything the kernel moves through L2, its Q8 x re-reads
        # included, at the L2 bandwidth: a floor, overlapped with the HBM stream.
        # rr_s (lean-q norm): a block's re-read of its row from L2 before it can normalise: added
        t = max(t_mem, t_cmp, l2_floor_s) + pro_s + rr_s + t_launch + fixed_us * 1e-6
        bound = "compute" if t_cmp > t_mem else ("memory" if wave >= 1 else "memory (tail)")
        if l2_floor_s > max(t_mem, t_cmp):
            bound = "L2"
        if t_launch + fixed_us * 1e-6 > max(t_mem, t_cmp):
            bound = "launch" if launches else "host"
        return dict(bytes=bytes_, flops=flops, launches=launches, t=t, t_launch=t_launch,
                    bound=bound, wave=wave, what=what, pro_s=pro_s, l2_bytes=l2_bytes, rr_s=rr_s,
                    today=today)

    def folds(self, n):
        """lean: the norm/quantize/rope prologues and epilogues are folded into GEMVs (decode
        below the crossover); on the tensor-core path the fused design's launches remain.
        lean-q: the same, but norm and quantize stay launches (op_normq)"""
        return self.lean and n < self.p["crossover"]

    def rows_of(self, args):
        return self.n_logits if (args or {}).get("rows") == "logits" else self.n

    def formats(self, lw, names):
        fm = set()
        for nm in names:
            m = self.sh["output"] if nm == "output" else lw[nm]
            fm.add(act_format(m["type"]))
        fm.discard("f32")
        return fm

    def int8_built(self, tname):
        """whether today's batch GEMM of this weight type is int8: every quantized type under
        SOL_CUDA_GEMM=int8 (k_mmq.cu's mmq_act; --param gemm_int8=1), none by default"""
        return bool(self.p["gemm_int8"]) and tname not in FLOAT_TYPES

    def tc_path(self, n, mats):
        """The matmul path for n tokens: gemv; mmq (int8 tensor cores as the designs have them:
        tc_eff of the int8 peak); tc16 (F16 tensor cores: cuBLASLt on F16/BF16 weights in place);
        mmaq (built: k_mma_gemm, Q6_K weight tiles dequantized to F16 in shared memory,
        mma.sync); mmqb (built: the other quantized types, int8_built: x quantized once per
        matrix as the GEMV's, k_mmq_gemm (Q8_0 activations) or k_mmq_kq<kq45> (Q4_K/Q5_K, Q8_K) on
        int8 mma.sync at mmq_eff / mmqk_eff of the int8 peak).
        The fused designs switch at the crossover; the code today (unfused) above 16 tokens."""
        quant = any(m["type"] not in FLOAT_TYPES for m in mats)
        f32 = all(m["type"] == "F32" for m in mats)
        if self.designed_tc:
            if n >= self.p["crossover"] and not f32:
                return "mmq" if quant else "tc16"
            return "gemv"
        if n > 16 and not f32:
            if quant and all(self.int8_built(m["type"]) for m in mats
                             if m["type"] not in FLOAT_TYPES):
                return "mmqb"  # built: gemv_quantize + k_mmq_gemm / k_mmq_kq<kq45> (int8 mma.sync)
            return "mmaq" if quant else "tc16"  # built_gemm still picks per matrix
        return "gemv"

    def flash_tile(self):
        """Tokens per tile of today's k_flash_attention (tensor cores), 0 where the step does not
        take it: more than 16 tokens, an F16 cache, head_dim 64 or 128, a GQA group of at most 64
        query heads (a block's 64 query rows = tokens x the group). Batch-invariant runs keep
        k_attention (not modelled: --batch-invariant is not an option here)."""
        sh = self.sh
        group = sh["heads"] // sh["kv_heads"]
        if self.n <= 16 or self.kv != "f16" or sh["head_dim"] not in (64, 128) or group > 64:
            return 0
        return 64 // group

    def flash(self):
        """k_flash_attention runs this step's attention: prefill in every design (it is the
        built FA2-style kernel); decode batches over 16 tokens in today's structure only (the
        designs keep their batch-invariant split decode attention)"""
        return bool(self.flash_tile()) and (bool(self.prefill) or not self.fused)

    def splits(self, how):
        ctx, p = self.context, self.p
        if self.prefill or self.flash():  # k_flash_attention: no context split
            return 1
        if how == "today":
            if ctx <= p["split_min"]:
                return 1
            return int(min(p["split_max"], math.ceil(ctx / p["split_min"])))
        if how == "lean":  # batch-invariant: the token's context and the SM count only
            return int(max(1, min(p["split_max"], max(1, math.ceil(ctx / p["lean_split_len"])),
                                  math.ceil(p["waves"] * self.g["sms"] / self.sh["heads"]))))
        cap = int(min(p["split_max"], max(1, ctx // p["split_min"])))
        need = math.ceil(p["waves"] * self.g["sms"] / (self.sh["heads"] * self.n))
        return max(1, min(cap, need))

    # -- ops: each returns a list of parts (empty: no launch in this configuration)
    def op_embed(self, row, lw):
        e = self.sh["token_embd"]
        rb = e["bytes"] / e["rows"]
        return [self.part(self.n * (rb + self.sh["dim"] * 4), blocks=self.n)]

    def op_norm(self, row, lw):
        a, d = row.get("args", {}), self.sh["dim"]
        n = self.rows_of(a)
        if a.get("unfold") and self.folds(n):
            return []
        fm = self.formats(lw, a["quant_for"]) if self.fused else set()
        out = sum(n * d * ACT_BYTES[f] for f in fm) if fm else n * d * 4
        if self.fused and n >= self.p["crossover"] and not fm:
            out = n * d * 2  # F16 weights on tensor cores: the norm writes F16
        nb = max(1, int(self.p["norm_blocks"]))
        return [self.part(nb * n * d * 4 + d * 4 + out, blocks=n * nb)]

    def op_quant(self, row, lw):
        a = row["args"]
        n = self.rows_of(a)
        if a.get("unfold") and self.folds(n):
            return []
        fm = self.formats(lw, a["quant_for"])
        if not fm:
            return []  # float weights: the GEMV reads f32 activations, no quantize launch
        names = a["quant_for"]
        m0 = self.sh["output"] if names[0] == "output" else lw[names[0]]
        if self.tc_path(n, [m0]) in ("mmaq", "tc16", "mmqb"):
            return []  # today's tensor-core paths round (k_to_half) or quantize x in the matmul row
        K = m0["cols"]
        out = sum(n * K * ACT_BYTES[f] for f in fm)
        blocks = math.ceil(n * K / (256 if "q8_k" in fm else 32) / 8)  # QUANT_WARPS = 8
        return [self.part(n * K * 4 + out, blocks=blocks)]

    def attq_folded(self, lw):
        """lean-q as built: with a split, the attention's merge also writes its output as the o
        projection's activations, so the o GEMV reads them and no quantize launch runs: Q8_0
        (Q4_0, Q5_x, Q8_0 weights: an epilogue per 32-element block of a head's row), or with
        next_input Q8_K (K-quants, named by next_input: the warp merging the last head of a
        256-element block quantizes it; 256 / head_dim heads a block), head_dim a multiple of
        32, a GEMV step (at most 16 tokens)."""
        sh = self.sh
        fm = self.formats(lw, ("attn_output",))
        k_ok = (self.p["next_input"] and 256 % sh["head_dim"] == 0
                and sh["heads"] * sh["head_dim"] % 256 == 0)
        return (self.leanq and self.n <= 16 and not self.prefill and sh["head_dim"] % 32 == 0
                and self.splits("lean") > 1 and (fm == {"q8_0"} or (fm == {"q8_k"} and k_ok)))

    def norm_tail(self, names, lw):
        """lean-q as built (next_input): a decode step's RMSNorm and quantization of x for the q/k/v,
        gate/up or head group are made in the last block of the GEMV that adds to x
        (gemv_run_tail, told by next_input), not by a launch: at most tail_tokens tokens; layer
        0's q/k/v norm follows the embedding (a launch)."""
        if not (self.leanq and self.p["next_input"] and self.n <= self.p["tail_tokens"]
                and not self.prefill):
            return False
        return not (names == QKV and lw is self.sh["layers"][0])

    def glu_folded(self, lw):
        """lean-q as built (next_input): a decode step's gate/up GEMV quantizes act(gate) * up
        for the down projection (gemv_run_glu), no quantize launch: a quantized down, the FFN
        width a multiple of its activation block."""
        fm = self.formats(lw, ("ffn_down",))
        blk = 256 if fm == {"q8_k"} else 32 if fm == {"q8_0"} else 0
        return bool(self.leanq and self.p["next_input"] and self.n <= 16 and not self.prefill
                    and blk and lw["ffn_down"]["cols"] % blk == 0)

    def glu_part(self, n, K, fm):
        """The gated product's blocks made by the gate/up GEMV: every block's warp re-reads its
        gate and up rows from L2 and writes the activations, spread over the launch, but the
        last block's (one warp, at the end) is serial: charged at one SM's L2 share. No launch."""
        blk = 256 if fm == {"q8_k"} else 32
        byt = n * blk * (8 + ACT_BYTES[next(iter(fm))])
        t_us = byt / (self.l2_bw / self.g["sms"]) * 1e6
        pt = self.part(launches=0, fixed_us=t_us, what="by the gate/up GEMV's warps",
                       l2_bytes=n * K * 8.0)
        pt["bound"] = "L2 (one warp)"
        pt["tail"] = True
        return pt

    def tail_part(self, n, K, fm):
        """The norm tail's work, serial at the end of its GEMV: one block (one SM) reads the n
        rows twice (the sum of squares, then the quantize) and gamma, writes the activations (or
        for float weights xn), at one SM's share of the L2 bandwidth. No launch."""
        out = sum(n * K * ACT_BYTES[f] for f in fm) if fm else n * K * 4.0
        byt = 2 * n * K * 4 + K * 4 + out
        t_us = byt / (self.l2_bw / self.g["sms"]) * 1e6
        pt = self.part(launches=0, fixed_us=t_us, what="in the last block of the GEMV before")
        pt["bound"] = "L2 (one block)"
        pt["tail"] = True
        return pt

    def op_normq(self, row, lw):
        """lean-q: rmsnorm+quantize (norm) or quantize, one launch per matrix group, every
        activation kind the group's weights take written by it; blocks of normq_slice elements
        of a row. A norm block first sums the squares of its whole row (re-read from L2: x was
        just written by the previous kernel; single phase, no grid-wide sync), then normalises
        and quantizes its slice. Float weights: the norm writes f32 (F16 on tensor cores), and
        no quantize launches."""
        a, p = row["args"], self.p
        n = self.rows_of(a)
        names = a["quant_for"]
        m0 = self.sh["output"] if names[0] == "output" else lw[names[0]]
        K = m0["cols"]
        fm = self.formats(lw, names)
        if not a["norm"] and not fm:
            return []
        if names == ("attn_output",) and self.attq_folded(lw):
            return []  # the attention's merge wrote them (op_attention)
        if a["norm"] and self.norm_tail(names, lw):
            return [self.tail_part(n, K, fm)]
        if names == ("ffn_down",) and self.glu_folded(lw):
            return [self.glu_part(n, K, fm)]
        if self.gemm_folds(n, names, lw):
            return []  # made where the batch GEMM's x is converted (built_gemm)
        if fm:
            out = sum(n * K * ACT_BYTES[f] for f in fm)
        elif self.tc_path(n, [m0]) == "tc16":
            out = n * K * 2
        else:
            out = n * K * 4
        # several blocks per row only to fill the GPU: min(K / slice, waves x SMs / rows); one
        # per row from ~264 rows up (prefill). Each still sums its whole row in the same order,
        # so a row's result does not depend on the batch
        per_row = max(1, min(math.ceil(K / p["normq_slice"]),
                             math.ceil(p["waves"] * self.g["sms"] / n)))
        blocks = n * per_row
        byt = n * K * 4 + (K * 4 if a["norm"] else 0) + out
        rr_s, l2 = 0.0, 0.0
        if a["norm"] and per_row > 1:
            sms = self.g["sms"]
            l2 = n * (per_row - 1) * K * 4  # re-reads beyond the row's first read
            issue = self.g["fp32_tflops"] * 1e12 / 2 * p["gemv_alu_eff"] / sms  # per SM
            per_block = max(K * 4 / (self.l2_bw / sms), K * p["prologue_ops"] / issue)
            rr_s = max(1.0, blocks / sms) * per_block  # one block per SM at a time, or all SMs
        return [self.part(byt, blocks=blocks, what=f"{per_row} blocks/row", rr_s=rr_s,
                          l2_bytes=l2)]

    def gemm_folds(self, n, names, lw):
        """lean-q with today's batch kernels (built_tc) past 16 tokens: a group's norm, gated
        product or quantize happens where its GEMM converts x (k_to_half_norm, k_to_half_glu,
        the glu quantize, or k_to_half / gemv_quantize themselves), no launch of its own; on the
        int8 path the RMSNorm keeps its launch (rmsnorm, then the quantize)."""
        if not (self.leanq and self.p["built_tc"]) or names[0] == "output":
            return False
        path = self.tc_path(n, [lw[x] for x in names])
        if path not in ("mmaq", "mmqb", "tc16"):
            return False
        return path != "mmqb" or names in (("ffn_down",), ("attn_output",))

    def op_matmul(self, row, lw):
        a = row["args"]
        p, g = self.p, self.g
        n = self.rows_of(a)
        mats = [self.sh["output"] if nm == "output" else lw[nm] for nm in a["mats"]]
        K = mats[0]["cols"]
        M = sum(m["rows"] for m in mats)
        W = sum(m["bytes"] for m in mats)
        quant = any(m["type"] not in FLOAT_TYPES for m in mats)
        flops = 2.0 * n * M * K
        m_out = M // 2 if a.get("silu") else M
        out = n * m_out * 4 + (2 * n * m_out * 4 if a.get("residual") else 0)
        path = self.tc_path(n, mats)
        fm = self.formats(lw, a["mats"]) if quant else set()
        if not quant or a.get("inp") == "f32":
            x_in = n * K * 4
        else:
            x_in = sum(n * K * ACT_BYTES[f] for f in fm)
        if path == "gemv":
            groups = math.ceil(n / p["gemv_tokens"])
            peak = (g["dp4a_tops"] if quant else g["fp32_tflops"]) * 1e12 * p["gemv_alu_eff"]
            pro = a.get("prologue") if self.folds(n) else None
            l2_floor, l2 = 0.0, 0.0
            if pro or (self.leanq and self.folds(n)):
                # lean: rows per block from M and the SM count (about waves x SMs blocks, so the
                # per-block prologue is paid ~264 times on an H200, not M / 4 times); never from
                # the batch. Rows stay in pairs (rope) and gate/up interleaved.
                w = p["gemv_warps"]
                rpb = max(w, math.floor(M / (p["waves"] * g["sms"]) / w) * w)
                blocks = math.ceil(M / rpb)
                if pro:
                    x_in = n * K * 4 + (K * 4 if pro == "norm" else 0)  # x f32 (+ gamma) once
                else:  # lean-q: every block reads the group's Q8 x (f32 for float weights)
                    l2 = blocks * x_in
                if a.get("rope_kv"):  # epilogue: rotated q (f32), K and V into the cache
                    out = n * (self.q_dim * 4 + 2 * self.kv_dim * self.kv_eb) + n * 8
            else:
                blocks = math.ceil(M / p["gemv_warps"])
                if quant and a.get("inp") == "f32":
                    pro = "quant"  # the fused o GEMV quantizes its f32 input in every block
            if l2:  # lean-q, as built: one launch per run of one kernel (gemv_run_many)
                l2_floor = (W * groups + out + l2) / self.l2_bw
                return [self.part(W * groups + x_in + out, flops, peak, p["gemv_eff"], blocks,
                                  launches=groups * gemv_launches(mats), what="gemv",
                                  l2_bytes=l2, l2_floor_s=l2_floor)]
            pro_s, l2 = self.prologue(pro, blocks, n, K, quant, fm)
            return [self.part(W * groups + x_in + out, flops, peak, p["gemv_eff"], blocks,
                              launches=groups, what="gemv", pro_s=pro_s, l2_bytes=l2)]
        if self.designed_tc:  # path mmq or tc16: the designs' tensor-core path
            # split-K / stream-K tiles (as llama.cpp's MMQ) assumed to fill the SMs: no wave loss
            peak = (g["int8_tops"] if path == "mmq" else g["fp16_tflops"]) * 1e12 * p["tc_eff"]
            x16 = x_in if path == "mmq" else n * K * 2
            today = ("design (int8 MMQ); today at n > 16: k_to_half + k_mma_gemm, F16 mma.sync"
                     if path == "mmq" else "exists (cuBLASLt on the F16/BF16 weights in place; "
                     "today x rounded by k_to_half per matrix)")
            return [self.part(W + x16 + out, flops, peak, p["gemv_eff"], launches=1, what=path,
                              today=today)]
        return self.built_gemm(mats, n, K, path, a)

    def built_gemm(self, mats, n, K, path, a):
        """Today's matmul of n > 16 tokens, per matrix (matmul_gemm): x rounded to F16 once
        (k_to_half: f32 read, F16 written), then
          mmaq: k_mma_gemm, a block of 128 threads per 64 weight rows x 64 tokens up to 64
                tokens, of 256 per 128 x 128 past them; per 32 columns it dequantizes its weight
                tile to F16 in shared
                memory and copies the tokens' F16 x, the next stage's loads in registers over the
                MMAs (one barrier a stage), 4 or 8 warps x mma.sync m16n8k16 (f32 accumulators),
                y written (added to in the store for matmul_add). No split-K: each matrix is read
                once per token tile, x once per row tile. HBM: the matrix once when it fits
                in L2 (l2_mb; the re-reads of later token tiles hit there), else every time; x
                once; y. Everything the blocks read and write goes through L2: a floor at the L2
                bandwidth. Compute: the padded tiles at mma_share (MMA_ISSUE: counted from the
                SASS per weight type and tile) of the F16 peak, scaled by the wave term when
                the grid is smaller than waves x SMs blocks; FLOPs reported: 2 n M K.
          tc16: cuBLASLt on the F16/BF16 weights in place (tc_eff of the F16 peak)."""
        p, g = self.p, self.g
        parts = []
        peak16 = g["fp16_tflops"] * 1e12
        l2cap = g["l2_mb"] * 1e6
        prev = None
        # the down projection's x is act(gate) * up, made where it is converted: both read
        glu_in = self.leanq and self.p["built_tc"] and a.get("mats") == ("ffn_down",)
        group = []  # k_mma_gemm matrices of one launch, not yet charged

        def flush():
            """One k_mma_gemm launch of the group: its tiles' padded FLOPs at their types'
            shares of the F16 peak, scaled by the launch's wave term; HBM: each matrix once
            (or per token tile past L2), x once, y; the L2 floor as before."""
            if not group:
                return
            blocks = sum(q["blocks"] for q in group)
            s = (mma_splits(sum(q["tm"] for q in group), K, n, g["sms"])
                 if self.leanq and p["built_tc"] and p["split_k"] else 1)
            blocks *= s
            wave = min(1.0, blocks / (p["waves"] * g["sms"]))
            flops = sum(q["flops"] for q in group)
            t_cmp = sum(q["busy"] for q in group) / (peak16 * wave)
            l2 = sum(q["l2"] for q in group)
            tail_us, split = 0.0, ""
            if s > 1:
                # every block's partial tile written, the last block of a tile reads all s
                tile_b = mma_tile_of(n) ** 2 * 4
                l2 += 2 * blocks * tile_b
                tail_us = s * tile_b / (self.l2_bw / g["sms"]) * 1e6
                split = f", split-K {s}"
            effs = "/".join(f"{q['eff']:.2f}" for q in group)
            parts.append(self.part(sum(q["hbm"] for q in group) + n * K * 2, flops,
                                   flops / t_cmp, p["gemv_eff"], blocks, what="mmaq" + split,
                                   l2_bytes=l2, l2_floor_s=l2 / self.l2_bw, fixed_us=tail_us,
                                   today=f"exists (k_to_half + k_mma_gemm: {mma_tile_of(n)}-side "
                                         f"tiles dequantized to F16 in shared memory, mma.sync, "
                                         f"{effs} of the F16 peak by its SASS; q/k/v and gate/up "
                                         f"one launch: mma_gemm_many)"))
            group.clear()

        for m in mats:
            Mi, Wi = m["rows"], m["bytes"]
            flops = 2.0 * n * Mi * K
            y = n * Mi * 4 + (2 * n * Mi * 4 if a.get("residual") else 0)
            # x converted once per run of one input kind (matmul_many: q/k/v, gate/up share it)
            kind = (("q8", act_format(m["type"])) if self.int8_built(m["type"]) and path != "tc16"
                    else ("half", m["type"] == "BF16"))
            convert, prev = kind != prev, kind
            if (path == "tc16" or not self.int8_built(m["type"])) and convert:
                parts.append(self.part(n * K * (8 if glu_in else 4) + n * K * 2,
                                       blocks=math.ceil(n * K / 256),
                                       what="to_half", today="exists (k_to_half, once per run "
                                       "of one half kind in a matmul_many)"))
            if path == "tc16" or self.int8_built(m["type"]):
                flush()
            if path == "tc16":
                parts.append(self.part(Wi + n * K * 2 + y, flops, peak16 * p["tc_eff"],
                                       p["gemv_eff"], what="cuBLASLt",
                                       today="exists (k_to_half + cuBLASLt, F16/BF16 weights "
                                             "in place)"))
                continue
            if self.int8_built(m["type"]):
                parts.extend(self.built_mmq(m, n, K, y, flops, convert, glu_in))
                continue
            bt = mma_tile_of(n)
            tn, tm = math.ceil(n / bt), math.ceil(Mi / bt)
            eff = mma_share(m["type"], n, p["mma_eff"], K)
            w_hbm = Wi if Wi <= l2cap else Wi * tn
            g_ = dict(flops=flops, blocks=tn * tm, tm=tm, busy=2.0 * (tn * bt) * (tm * bt) * K / eff,
                      hbm=w_hbm + y, l2=Wi * tn + n * K * 2 * tm + y, eff=eff)
            # a run of up to three (q/k/v, gate/up) is one launch (mma_gemm_many) up to 64
            # tokens: its tiles share the wave; built_tc only (the unfused structure launches
            # one per matrix), and past 64 tokens one per matrix (the 128-row tile takes no set)
            if group and len(group) < 3 and self.leanq and p["built_tc"] and n <= MMA_SMALL:
                group.append(g_)
            else:
                flush()
                group.append(g_)
        flush()
        return parts

    def built_mmq(self, m, n, K, y, flops, convert=True, glu_in=False):
        """Today's int8 GEMM of one matrix (matmul_mmq): x quantized to Q8_0 (gemv_quantize: f32
        read, 34 bytes per 32 written), then k_mmq_gemm: a block of 128 threads per 64 weight rows
        x 64 tokens, two 32-blocks a stage (register-staged double buffer, one barrier a stage),
        4 warps x mma.sync m16n8k32 s8 (exact int32 per block), then the GEMV's float step per
        block on CUDA cores. The matrix is read once per token tile (ceil(n/64)) and x once per
        row tile (ceil(M/64)), through L2 as k_mma_gemm's (the same floor); compute: the padded
        tiles at mmq_eff of the int8 peak (issue-bound: see PARAMS), scaled by the wave term."""
        p, g = self.p, self.g
        Mi, Wi = m["rows"], m["bytes"]
        act = act_format(m["type"])
        xq = n * K * ACT_BYTES[act]
        eff = (p["mmq6_eff"] if m["type"] == "Q6_K" else p["mmqk_eff"] if act == "q8_k"
               else p["mmq_eff"])
        tile = max(1, int(p["mma_tile"]))
        tn, tm = math.ceil(n / tile), math.ceil(Mi / tile)
        blocks = tn * tm
        wave = min(1.0, blocks / (p["waves"] * g["sms"]))
        padded = 2.0 * (tn * tile) * (tm * tile) * K
        peak = g["int8_tops"] * 1e12 * eff * wave * flops / padded
        w_hbm = Wi if Wi <= g["l2_mb"] * 1e6 else Wi * tn
        l2 = Wi * tn + xq * tm + y
        kern = ("k_mmq_kq<q6k>" if m["type"] == "Q6_K" else "k_mmq_kq<kq45>" if act == "q8_k"
                else "k_mmq_gemm")
        quant = [self.part(n * K * (8 if glu_in else 4) + xq, blocks=math.ceil(n * K / 32 / 8),
                           what="quantize",
                           today="exists (gemv_quantize, once per run of one activation kind "
                                 "in a matmul_many)")] if convert else []
        return quant + [
                self.part(w_hbm + xq + y, flops, peak, p["gemv_eff"], blocks, what="mmqb",
                          l2_bytes=l2, l2_floor_s=l2 / self.l2_bw,
                          today=f"exists (gemv_quantize + {kern}: 64x64 tiles, int8 "
                                "mma.sync, the GEMV's float steps)")]

    def prologue(self, pro, blocks, n, K, quant, fm):
        """A GEMV prologue's time and L2 bytes: every block (or cluster of prologue_share blocks)
        reads all of x (its rows span all K columns), f32 from L2, instead of the Q8 activation
        blocks a separate quantize launch would have written (their per-block L2 reads are not
        counted in any design, so only the difference is), plus gamma (f32) for the norm."""
        if not pro or (pro == "quant" and not quant):
            return 0.0, 0.0
        p = self.p
        base = sum(ACT_BYTES[f] for f in fm) if quant else 4.0
        per_block = n * K * (4.0 - base) + (K * 4 if pro == "norm" else 0)
        steps = (1 if pro == "norm" else 0) + (1 if quant else 0)
        share = max(1.0, p["prologue_share"])
        l2 = blocks * per_block / share
        ops = blocks * n * K * p["prologue_ops"] * steps / share
        issue = self.g["fp32_tflops"] * 1e12 / 2 * p["gemv_alu_eff"]  # instructions/s
        return max(l2 / self.l2_bw, ops / issue), l2

    def op_rope_kv(self, row, lw):
        if row.get("args", {}).get("unfold") and self.folds(self.n) and self.p["rope_fold"]:
            return []
        n, q, kv = self.n, self.q_dim, self.kv_dim
        byt = n * (q + 2 * kv) * 4 + n * q * 4 + n * 2 * kv * self.kv_eb + n * 4
        blocks = math.ceil(n * (q + kv) / 2 / 256)
        return [self.part(byt, blocks=blocks)]

    def op_rope(self, row, lw):
        w = self.q_dim if row["args"]["which"] == "q" else self.kv_dim
        return [self.part(2 * self.n * w * 4 + self.n * 4, blocks=math.ceil(self.n * w / 2 / 256))]

    def op_kv_write(self, row, lw):
        kv = self.kv_dim
        return [self.part(self.n * 2 * kv * 4 + self.n * 2 * kv * self.kv_eb, blocks=self.n)]

    def attn_bytes_flops(self):
        sh, n, eb = self.sh, self.n, self.kv_eb
        hd, heads = sh["head_dim"], sh["heads"]
        if self.prefill:
            T, b = self.prefill, self.batch
            # K/V of each sequence read once per layer (query tiles share them through L2)
            kv_bytes = b * T * self.kv_dim * 2 * eb
            flops = b * 4.0 * hd * heads * T * (T + 1) / 2  # causal
            tables = b * math.ceil(T / 16) * 4
        else:
            kv_bytes = n * self.context * self.kv_dim * 2 * eb
            flops = 4.0 * self.context * hd * heads * n
            tables = n * math.ceil(self.context / 16) * 4
        return kv_bytes + tables, flops

    def op_attention(self, row, lw):
        p, g, sh = self.p, self.g, self.sh
        s = self.splits(row["args"]["splits"])
        kvb, flops = self.attn_bytes_flops()
        q_io = 2 * self.n * self.q_dim * 4
        if s > 1:
            q_io = self.n * self.q_dim * 4 + self.n * sh["heads"] * s * (sh["head_dim"] + 2) * 4
        if self.flash():
            return [self.flash_part(q_io)]
        today = None
        if self.prefill and self.fused:
            peak = g["fp16_tflops"] * 1e12 * p["fa_eff"]  # tensor-core FA2-style tiles
            blocks = self.batch * sh["heads"] * math.ceil(self.prefill / 64)
            today = ("design (tensor-core prefill for this cache/head shape); today k_attention "
                     "on CUDA cores, 4 tokens per tile")
        else:
            peak = g["fp32_tflops"] * 1e12 * p["attn_alu_eff"]
            tile = 4 if self.prefill else 1  # k_attention: 4 tokens of one sequence per tile
            blocks = sh["heads"] * math.ceil(self.n / tile) * s
            if self.n > 16 and not self.fused:
                today = "exists (k_attention: CUDA cores, the cache or head shape k_flash lacks)"
        tail, what = 0.0, f"splits {s}"
        if s > 1 and self.lean:
            # built (att_split_end): the last split warp of each (token, head) merges it after
            # the kernel's body, a tail nothing else in the launch hides; costed as the combine
            # kernel was (its bytes, one warp per pair: the same wave term), less its launch
            merge = self.part(self.combine_bytes(s, lw), blocks=self.n * sh["heads"], launches=0)
            tail, what = merge["t"] * 1e6, f"splits {s}, merged by the last split"
        return [self.part(kvb + q_io, flops, peak, p["attn_eff"], blocks, what=what,
                          fixed_us=tail, today=today)]

    def flash_part(self, q_io):
        """Today's k_flash_attention: a block per (tile of flash_tile() consecutive tokens of one
        sequence, KV head), 64 query rows (the tile's tokens x the group's query heads), 4 warps x
        16 rows; per chunk of 32 positions K and V rows to shared memory, S = QK^T and O += PV
        with mma.sync m16n8k16; no context split. Every tile reads its whole window of K/V for
        its KV head: HBM once per layer when the step's K/V of a layer fits in L2 (l2_mb), the
        other tiles' re-reads from L2 (a floor at the L2 bandwidth); else once per wave of
        waves x SMs co-resident blocks (they walk the same positions together). Compute:
        the 64 rows of a block over its window rounded up to 32 positions (a decode token of its
        own sequence fills group of the 64 rows), at fa_eff of the F16 peak x the wave term;
        FLOPs reported: 4 x context x head_dim per token and query head (causal)."""
        p, g, sh, eb = self.p, self.g, self.sh, self.kv_eb
        hd, kvh = sh["head_dim"], sh["kv_heads"]
        tt = self.flash_tile()
        pos_b = self.kv_dim * 2 * eb  # K and V of one position, all KV heads
        if self.prefill:
            T, b = self.prefill, self.batch
            tiles = math.ceil(T / tt)
            if getattr(self, "_win", None) is None:  # the tiles' windows, exact and rounded to 32
                self._win = (sum(min(T, (i + 1) * tt) for i in range(tiles)),
                             sum(math.ceil(min(T, (i + 1) * tt) / 32) * 32 for i in range(tiles)))
            win, win32 = self._win
            reads, once = b * win * pos_b, b * T * pos_b
            blocks = b * tiles * kvh
            padded = 4.0 * hd * 64 * kvh * b * win32
            tables = b * tiles * math.ceil(T / 16) * 4
        else:  # decode tokens of distinct sequences: one token per tile
            ctx = self.context
            reads = once = self.n * ctx * pos_b
            blocks = self.n * kvh
            padded = 4.0 * hd * 64 * blocks * math.ceil(ctx / 32) * 32
            tables = self.n * math.ceil(ctx / 16) * 4
        _, flops = self.attn_bytes_flops()
        # co-resident tiles (about waves x SMs blocks) walk the same positions together and share
        # them through L2: a K/V that does not fit in L2 is read once per such wave of tiles
        hbm = once if once <= g["l2_mb"] * 1e6 else min(
            reads, once * math.ceil(blocks / (p["waves"] * g["sms"])))
        wave = min(1.0, blocks / (p["waves"] * g["sms"]))
        peak = g["fp16_tflops"] * 1e12 * p["fa_eff"] * wave * flops / padded
        return self.part(hbm + tables + q_io, flops, peak, p["attn_eff"], blocks,
                         what=f"k_flash, {tt if self.prefill else 1} tokens/tile",
                         l2_bytes=reads,
                         l2_floor_s=(reads + q_io) / self.l2_bw,
                         today="exists (k_flash_attention: FA2 loop over the paged F16 cache, "
                               "mma.sync, 64 query rows per block, no context split)")

    def combine_bytes(self, s, lw):
        """The merge's traffic: every split's state re-read, the output (and the o projection's
        Q8_0 of it, attq_folded) written."""
        sh = self.sh
        byt = self.n * sh["heads"] * s * (sh["head_dim"] + 2) * 4 + self.n * self.q_dim * 4
        if self.attq_folded(lw):
            byt += self.n * self.q_dim * ACT_BYTES["q8_0"]
        return byt

    def op_combine(self, row, lw):
        s = self.splits(row["args"]["splits"])
        if s <= 1 or self.lean:  # lean designs: merged in the attention launch (op_attention)
            return []
        sh = self.sh
        byt = self.combine_bytes(s, lw)
        # lean: one block (head_dim threads) per token and head; fused/today: 4 heads per block
        per = 1 if self.lean else 4
        return [self.part(byt, blocks=math.ceil(self.n * sh["heads"] / per))]

    def op_add(self, row, lw):
        d = self.sh["dim"]
        return [self.part(3 * self.n * d * 4, blocks=math.ceil(self.n * d / 256))]

    def op_silu_mul(self, row, lw):
        f = self.sh["ffn"]
        return [self.part(3 * self.n * f * 4, blocks=math.ceil(self.n * f / 256))]

    def op_get_rows(self, row, lw):
        return [self.part(2 * self.n_logits * self.sh["dim"] * 4, blocks=self.n_logits)]

    def op_sampler(self, row, lw):
        V = self.sh["vocab"]
        blocks = self.n_logits * math.ceil(V / self.p["sampler_chunk"])
        return [self.part(self.n_logits * V * 4 + self.n_logits * 8, blocks=blocks)]

    def op_logits_d2h(self, row, lw):
        byt = self.n_logits * self.sh["vocab"] * 4
        us = self.p["pcie_lat_us"] + byt / (self.p["pcie_gbs"] * 1e9) * 1e6
        return [self.part(0, launches=0, fixed_us=us, what="PCIe")]

    def op_host(self, row, lw, nodes=0):
        us = self.p["host_us"]
        if not self.fused and not self.eager and not self.prefill:
            us += nodes * self.p["recapture_us"]
        return [self.part(0, launches=0, fixed_us=us)]

    # -- the step
    def run(self):
        rows = [r for r in STEP if self.design in r["mode"]]
        out = []
        for r in rows:
            if r["op"] == "host":
                continue
            scope_layers = self.sh["layers"] if r["scope"] == "layer" else [self.sh["layers"][0]]
            acc = dict(bytes=0.0, flops=0.0, launches=0, t=0.0, t_launch=0.0, pro_s=0.0,
                       l2_bytes=0.0, rr_s=0.0, bounds={}, what=set())
            for lw in scope_layers:
                for pt in getattr(self, "op_" + r["op"])(r, lw):
                    for k in ("bytes", "flops", "launches", "t", "t_launch", "pro_s", "l2_bytes",
                              "rr_s"):
                        acc[k] += pt[k]
                    acc["bounds"][pt["bound"]] = acc["bounds"].get(pt["bound"], 0) + pt["t"]
                    if pt["what"]:
                        acc["what"].add(pt["what"])
                    if pt.get("today"):
                        acc["today"] = pt["today"]
            if acc["launches"] or acc["t"]:
                out.append((r, acc))
        nodes = sum(a["launches"] for _, a in out)
        host = [r for r in rows if r["op"] == "host"][0]
        pt = self.op_host(host, None, nodes)[0]
        out.append((host, dict(bytes=0.0, flops=0.0, launches=0, t=pt["t"], t_launch=0.0,
                               pro_s=0.0, l2_bytes=0.0, rr_s=0.0, bounds={"host": pt["t"]},
                               what=set())))
        return self.summarise(out)

    def summarise(self, out):
        total_t = sum(a["t"] for _, a in out)
        total_b = sum(a["bytes"] for _, a in out)
        total_f = sum(a["flops"] for _, a in out)
        nodes = sum(a["launches"] for _, a in out)
        launch_t = sum(a["t_launch"] for _, a in out)
        pro_t = sum(a["pro_s"] for _, a in out)
        l2_b = sum(a["l2_bytes"] for _, a in out)
        nq = [(r, a) for r, a in out if r["op"] == "normq"]
        gv = [(r, a) for r, a in out if r["op"] == "matmul"]
        host_t = sum(a["t"] for r, a in out if r["op"] == "host")
        fams, order = {}, []
        for r, a in out:
            f = fams.get(r["fam"])
            if f is None:
                f = fams[r["fam"]] = dict(family=r["fam"], launches=0, bytes=0.0, flops=0.0,
                                          t=0.0, bounds={}, what=set())
                order.append(r["fam"])
            for k in ("launches", "bytes", "flops", "t"):
                f[k] += a[k]
            for b, t in a["bounds"].items():
                f["bounds"][b] = f["bounds"].get(b, 0) + t
            f["what"] |= a["what"]
        sh = self.sh
        weights_step = self.weights_read()
        roof = total_b / self.copy_bw
        res = dict(
            families=[dict(fams[k], bound=max(fams[k]["bounds"], key=fams[k]["bounds"].get),
                           share=fams[k]["t"] / total_t) for k in order],
            kernels=[dict(kernel=r["kernel"], family=r["fam"], today=a.get("today", r["today"]),
                          launches=a["launches"], bytes=a["bytes"], flops=a["flops"], t=a["t"])
                     for r, a in out],
            step_s=total_t, bytes=total_b, flops=total_f, nodes=nodes, launch_s=launch_t,
            host_s=host_t, tokens=self.n, tok_s=self.n / total_t,
            weights_step=weights_step, weights_file=file_weight_bytes(sh),
            roofline_s=roof, roof_copy=roof / total_t,
            roof_spec=total_b / self.spec_bw / total_t,
            launch_share=launch_t / total_t, overhead=(launch_t + host_t) / total_t,
            prologue_s=pro_t, prologue_l2_bytes=l2_b if pro_t else 0.0,
            prologue_share=pro_t / total_t,
            normq_launches=sum(a["launches"] for _, a in nq),
            normq_s=sum(a["t"] for _, a in nq), normq_rr_s=sum(a["rr_s"] for _, a in nq),
            normq_l2_bytes=sum(a["l2_bytes"] for _, a in nq),
            gemv_x_l2_bytes=sum(a["l2_bytes"] for _, a in gv) if self.leanq else 0.0,
            mma_l2_bytes=sum(a["l2_bytes"] for _, a in gv if a["what"] & {"mmaq", "mmqb"}),
            int8_built=any("mmqb" in a["what"] for _, a in gv),
            **self.quant_groups(),
            design=self.design, pdl=self.pdl, launch_us=self.launch_us)
        if self.prefill:
            # the designs' quantized matmuls are int8 MMQ; today's (unfused) F16 mma.sync
            int8 = self.quantized() and self.fused
            tc = self.g["int8_tops"] if int8 else self.g["fp16_tflops"]
            res["tc_kind"] = "int8" if int8 else "F16"
            res["tflops"] = total_f / total_t / 1e12
            res["tc_peak_tflops"] = tc
            res["tc_share"] = res["tflops"] / tc
            res["fp16_share"] = res["tflops"] / self.g["fp16_tflops"]
            # issue 30's prefill goal, for the code built today: lean-q's launches with today's
            # batch kernels (built_tc: k_to_half(_norm/_glu) + k_mma_gemm / cuBLASLt or the int8
            # GEMMs, k_flash_attention); before 2026-12-07 the unfused structure was used here,
            # which charges passes the code no longer makes
            asbuilt = self.leanq and self.p["built_tc"]
            built = res if asbuilt else self.variant("lean-q", built_tc=1.0).run()
            res["built_step_s"] = built["step_s"]
            res["built_mma_l2_bytes"] = built["mma_l2_bytes"]
            res["built_tflops"] = built["tflops"]
            res["built_fp16_share"] = built["fp16_share"]
            # the int8 GEMM is held to the int8 peak, the peak of the units it runs on
            res["built_int8"] = built["int8_built"]
            bpeak = self.g["int8_tops"] if built["int8_built"] else self.g["fp16_tflops"]
            res["built_tc_share"] = built["tflops"] / bpeak
            res["prefill_goal"] = PREFILL_GOAL
            res["built_reaches_goal"] = res["built_tc_share"] >= PREFILL_GOAL
        return res

    def variant(self, design=None, **params):
        """The same step under another design and/or parameters"""
        return Model(self.sh, self.gpu_key, dict(self.p, **params), self.batch, self.context,
                     self.kv, self.prefill, design or self.design, self.eager,
                     self.copy_bw / 1e9 if self.copy_measured else None, self.l2_bw / 1e9)

    def quant_groups(self):
        """Per step: matmul launches of quantized matrix groups (q/k/v, o, gate/up, down, head:
        one launch each at batch 1), the launches that quantize activations for a group
        (lean-q's normq with a Q8 output, or the split attention whose merge writes the o
        projection's Q8_0 or Q8_K: attq_folded; lean: none, the GEMV prologues do it), and the
        GEMV tails that do it inside another launch (next_input: norms, gated products)"""
        groups = quants = tails = 0
        for r in STEP:
            if self.design in r["mode"] and r["op"] == "attention":
                quants += sum(pt["launches"] for lw in self.sh["layers"] if self.attq_folded(lw)
                              for pt in self.op_attention(r, lw))
            if self.design not in r["mode"] or r["op"] not in ("matmul", "normq", "quant", "norm"):
                continue
            layers = self.sh["layers"] if r["scope"] == "layer" else [self.sh["layers"][0]]
            for lw in layers:
                a = r["args"]
                names = a["mats"] if r["op"] == "matmul" else a["quant_for"]
                if not self.formats(lw, names):
                    continue
                parts = getattr(self, "op_" + r["op"])(r, lw)
                k = sum(pt["launches"] for pt in parts)
                if r["op"] == "matmul":
                    groups += k
                else:
                    quants += k
                    tails += sum(1 for pt in parts if pt.get("tail"))
        return dict(quant_groups=groups, quant_launches=quants, quant_tails=tails)

    def quantized(self):
        return any(m["type"] not in FLOAT_TYPES for m in self.sh["layers"][0].values())

    def weights_read(self):
        """Weight bytes one step reads (the matmuls' weights once, the embedding rows)."""
        sh = self.sh
        w = sum(m["bytes"] for lw in sh["layers"] for m in lw.values()) + sh["output"]["bytes"]
        e = sh["token_embd"]
        return w + self.n * e["bytes"] / e["rows"]


# ---------------------------------------------------------------------------------------------
# Output.
def describe(m, sh):
    g = m.g
    s = sh["source"]
    dims = (f"{sh['arch']}, {len(sh['layers'])} layers, d {sh['dim']}, ffn {sh['ffn']}, "
            f"{sh['heads']}/{sh['kv_heads']} heads, head_dim {sh['head_dim']}, "
            f"vocab {sh['vocab']}{', tied head' if sh['tied'] else ''}")
    copy = (f"{m.copy_bw / 1e9:.0f} GB/s " +
            ("(measured, --copy-bw)" if m.copy_measured else
             f"= {m.p['copy_frac']:.2f} x spec (assumed)"))
    what = (f"prefill of {m.prefill} tokens x {m.batch} sequence(s)" if m.prefill else
            f"decode, batch {m.batch}, context {m.context}")
    struct_ = {"unfused": "unfused (today's launch structure, before issue 30)",
               "lean-q": "lean-q (lean, x quantized once per group: as built)",
               "fused": "fused (issue 30's design, not built)",
               "lean": "lean (GEMV prologues: designed, not built)"}[m.design]
    launch = (f"eager, {m.launch_us:.1f} us per launch" if not m.graph else
              f"CUDA graph{' + PDL' if m.pdl else ''}, {m.launch_us:.1f} us per node")
    lines = [
        "Sol GPU performance model: predictions of designs, NOT measurements",
        f"model: {s}",
        f"       {dims}",
        f"gpu:   {g['name']}: spec HBM {g['hbm_gbs']:.0f} GB/s, copy {copy}, {g['sms']} SMs, "
        f"{g['fp16_tflops']:.0f} F16 / {g['int8_tops']:.0f} int8 dense tensor TFLOP/s, "
        f"L2 {m.l2_bw / 1e9:.0f} GB/s (assumed), sm_{g['sm']}",
        f"step:  {what}, KV {m.kv}, {struct_}, {launch}",
    ]
    for n in sh["notes"]:
        lines.append(f"note:  {n}")
    return lines


def fmt_table(m, res):
    lines = [f"{'kernel family':<22} {'launches':>8} {'MB/step':>10} {'GFLOP':>9} "
             f"{'pred us':>9} {'share':>6}  bound"]
    for f in res["families"]:
        extra = ""
        if f["what"] - {"gemv"}:
            extra = " [" + ", ".join(sorted(f["what"])) + "]"
        lines.append(f"{f['family']:<22} {f['launches']:>8d} {f['bytes'] / 1e6:>10.2f} "
                     f"{f['flops'] / 1e9:>9.3f} {f['t'] * 1e6:>9.1f} {100 * f['share']:>5.1f}%"
                     f"  {f['bound']}{extra}")
    lines.append(f"{'total':<22} {res['nodes']:>8d} {res['bytes'] / 1e6:>10.2f} "
                 f"{res['flops'] / 1e9:>9.3f} {res['step_s'] * 1e6:>9.1f} {100.0:>5.1f}%")
    return lines


def fmt_totals(m, res):
    st = res["step_s"]
    L = [f"predicted step: {st * 1e3:.3f} ms = {res['tok_s']:.0f} tokens/s "
         f"({res['tokens']} token{'s' if res['tokens'] != 1 else ''} per step)",
         f"weights: {res['weights_step'] / 1e6:.1f} MB read per step "
         f"({res['weights_file'] / 1e6:.1f} MB of tensors in the file)",
         f"roofline: {res['bytes'] / 1e6:.1f} MB per step / copy bandwidth = "
         f"{res['roofline_s'] * 1e3:.3f} ms; achieved {100 * res['roof_copy']:.1f}% of the copy "
         f"roofline, {100 * res['roof_spec']:.1f}% of spec HBM",
         f"{'graph' if m.graph else 'launch'} overhead: "
         f"{res['nodes']} launches x {m.launch_us:.1f} us = {res['launch_s'] * 1e6:.1f} us = "
         f"{100 * res['launch_share']:.1f}% of the step; with the host's "
         f"{res['host_s'] * 1e6:.1f} us per step: {100 * res['overhead']:.1f}%"]
    if res["prologue_s"]:
        L.append(f"GEMV prologues (x re-read from L2 by every block, normalised/quantized there): "
                 f"{res['prologue_l2_bytes'] / 1e6:.1f} MB of L2 reads, "
                 f"{res['prologue_s'] * 1e6:.1f} us = {100 * res['prologue_share']:.1f}% of the "
                 f"step (included in the GEMV rows)")
    if res["normq_launches"] and m.leanq:
        L.append(f"norm/quantize launches (x written once per group as "
                 f"{'Q8' if res['quant_launches'] else 'f32'}): {res['normq_launches']}, "
                 f"{res['normq_s'] * 1e6:.1f} us = {100 * res['normq_s'] / st:.1f}% of the step "
                 f"(row re-reads from L2: {res['normq_rr_s'] * 1e6:.1f} us); "
                 f"{res['quant_launches']} quantize launches and {res['quant_tails']} GEMV "
                 f"tails for {res['quant_groups']} quantized matrix groups; GEMV blocks read x "
                 f"from L2: "
                 f"{res['gemv_x_l2_bytes'] / 1e6:.1f} MB, overlapped with the weight stream")
    if m.prefill:
        L.append(f"compute: {res['flops'] / 1e12:.2f} TFLOP per step, {res['tflops']:.0f} TFLOP/s "
                 f"= {100 * res['tc_share']:.1f}% of the {res['tc_peak_tflops']:.0f} TFLOP/s "
                 f"{res['tc_kind']} tensor peak "
                 f"({100 * res['fp16_share']:.1f}% of the F16 peak)")
        L += fmt_prefill_goal(m, res)
    return L


def fmt_prefill_goal(m, res):
    """Issue 30's prefill goal (>= 50% of the tensor-core peak at 2,048 tokens on the 8B shape)
    for the kernels built today: the step's FLOPs / time / F16 tensor peak, the verdict, and
    what would reach it (each alone, bisection; exploration, the defaults are not changed)."""
    goal, f16 = res["prefill_goal"], m.g["fp16_tflops"]
    quant = m.quantized()
    L = [f"issue 30's prefill goal: >= {100 * goal:.0f}% of the tensor-core peak (set at 2,048 "
         f"tokens on the 8B shape); model predictions, not measurements"]
    int8 = res["built_int8"]
    kinds = sorted({m_["type"] for lw in m.sh["layers"] for m_ in lw.values()} & set(MMA_ISSUE))
    mm = ("k_to_half + k_mma_gemm (F16 mma.sync, by its SASS " +
          ", ".join(f"{t} {mma_share(t, m.n, m.p['mma_eff']):.2f}" for t in kinds) +
          " of the F16 peak)" if quant else
          f"k_to_half + cuBLASLt (tc_eff {m.p['tc_eff']:.2f})")
    if int8:
        kq = any(m_["type"] in ("Q4_K", "Q5_K") for lw in m.sh["layers"] for m_ in lw.values())
        q6 = any(m_["type"] == "Q6_K" for lw in m.sh["layers"] for m_ in lw.values())
        mm = ("gemv_quantize + " + (f"k_mmq_kq<kq45> (int8 mma.sync, mmqk_eff {m.p['mmqk_eff']:.2f})"
                                   if kq else
                                   f"k_mmq_gemm (int8 mma.sync, mmq_eff {m.p['mmq_eff']:.2f})") +
              (f"; Q6_K: k_mmq_kq<q6k> (mmq6_eff {m.p['mmq6_eff']:.2f})" if q6 else ""))
    if m.n <= 16:
        mm = "GEMVs (16 tokens or fewer: no tensor cores)"
    at = (f"k_flash_attention (fa_eff {m.p['fa_eff']:.2f})" if m.flash_tile() else
          "k_attention on CUDA cores")
    verdict = "reaches" if res["built_reaches_goal"] else "does NOT reach"
    share = (f"{100 * res['built_tc_share']:.1f}% of the {m.g['int8_tops']:.0f} TOP/s int8 "
             f"tensor peak ({100 * res['built_fp16_share']:.1f}% of the {f16:.0f} TFLOP/s F16 "
             f"peak)" if int8 else
             f"{100 * res['built_fp16_share']:.1f}% of the {f16:.0f} TFLOP/s F16 tensor peak")
    L.append(f"built today ({mm}, {at}; lean-q's launches, today's batch kernels): "
             f"{res['flops'] / 1e12:.2f} "
             f"TFLOP in {res['built_step_s'] * 1e3:.3f} ms = {res['built_tflops']:.0f} TFLOP/s "
             f"= {share}: {verdict} {100 * goal:.0f}%")
    if res["built_reaches_goal"]:
        return L
    if m.n <= 16:
        L.append("  (16 tokens or fewer run on the GEMVs; the goal is set at 2,048 tokens)")
        return L
    key = "mmq_eff" if int8 else "mma_eff" if quant else "tc_eff"

    def share(v, **more):
        keys = ("mmq_eff", "mmqk_eff", "mmq6_eff") if int8 else (key,)  # int8: every GEMM at v
        r = m.variant("lean-q", built_tc=1.0, **{k: v for k in keys}, **more).run()
        return r["built_tc_share"] if int8 else r["fp16_share"]

    # mma_eff scales k_mma_gemm's counted issue shares (each capped at the peak): at 6 every
    # counted share (the least is 0.28) is at the peak
    top = 6.0 if key == "mma_eff" else 1.0

    def need(**more):
        """the least value of key (from its current value) that reaches the goal, or None"""
        if share(top, **more) < goal:
            return None
        lo, hi = m.p[key], top
        for _ in range(30):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if share(mid, **more) >= goal else (mid, hi)
        return hi

    if not quant:
        v = need()
        L.append("  would take: " + (f"cuBLASLt at >= {v:.2f} of the F16 peak (now "
                                     f"{m.p[key]:.2f})" if v is not None else
                                     f"more than cuBLASLt alone ({100 * share(1.0):.1f}% at "
                                     f"1.00 of the F16 peak)") + "; or wgmma (not modelled)")
        return L
    tile = int(m.p["mma_tile"])
    v = need()
    if int8:
        L.append("  would take: " + (
            f"the GEMMs at >= {v:.2f} of their peak (now {m.p[key]:.2f}: fewer instructions "
            f"per IMMA, i.e. larger warp tiles and the float steps amortized)" if v is not None
            else f"more than the GEMMs' efficiency ({100 * share(1.0):.1f}% at 1.00 of the "
                 f"int8 peak: their {tile} x {tile} tiles move "
                 f"{res['built_mma_l2_bytes'] / 1e9:.1f} GB per step through L2; the step's "
                 f"other passes)") + "; or wgmma (not modelled)")
        return L
    if v is not None:
        L.append(f"  would take: k_mma_gemm at >= {v:.2f} x its issue-bound rate (mma_eff, "
                 f"now {m.p[key]:.2f}): fewer instructions per HMMA (the dequantization is "
                 f"most of them; larger warp tiles), if mma.sync itself runs at the dense peak "
                 f"(wgmma's; not modelled)")
    else:
        L.append(f"  not k_mma_gemm's efficiency alone: {100 * share(top):.1f}% at 1.00 of the "
                 f"F16 peak: its {mma_tile_of(m.n)}-row tiles move "
                 f"{res['built_mma_l2_bytes'] / 1e9:.1f} GB per step through L2 (x re-read once "
                 f"per {mma_tile_of(m.n)} rows), at "
                 f"{m.l2_bw / 1e9:.0f} GB/s")
    d = m.design if m.fused else "lean-q"
    mmq = res if m.fused else m.variant(d).run()
    L.append(f"  or int8 tensor cores (MMQ, designed: {d}'s path at tc_eff "
             f"{m.p['tc_eff']:.2f}: {100 * mmq['tc_share']:.1f}% of the "
             f"{m.g['int8_tops']:.0f} TFLOP/s int8 peak, "
             f"{'reaching' if mmq['tc_share'] >= goal else 'below'} {100 * goal:.0f}%"
             f"{'' if mmq['tc_share'] >= goal else ' too'}), "
             f"or wgmma (not modelled)")
    return L


def fmt_kernels(res):
    L = [f"{'kernel':<30} {'family':<20} {'launches':>8} {'MB/step':>10} {'GFLOP':>9} "
         f"{'pred us':>9}  in the code today"]
    for k in res["kernels"]:
        L.append(f"{k['kernel']:<30} {k['family']:<20} {k['launches']:>8d} "
                 f"{k['bytes'] / 1e6:>10.2f} {k['flops'] / 1e9:>9.3f} {k['t'] * 1e6:>9.1f}  "
                 f"{k['today']}")
    return L


def jsonable(res):
    def fix(o):
        if isinstance(o, set):
            return sorted(o)
        if isinstance(o, dict):
            return {k: fix(v) for k, v in o.items()}
        if isinstance(o, list):
            return [fix(v) for v in o]
        return o
    return fix(res)


# ---------------------------------------------------------------------------------------------
def what_it_takes(build, target, params, dim, design="fused"):
    """For a configuration below target: design changes applied one after another (the small
    kernels' tails first), then the per-node launch cost that would reach the target, or, where
    none would, the GEMV efficiency needed at zero launch cost (bisection). Exploration, not the
    default: the defaults stay what the design says today."""
    def frac(p):
        return build(p).run()["roof_copy"]

    def solve(p, key, lo, hi, rising):
        """the key's value where frac crosses target (frac rising or falling with it)"""
        for _ in range(40):
            mid = (lo + hi) / 2
            p[key] = mid
            ok = frac(p) >= target
            if rising:
                lo, hi = (lo, mid) if ok else (mid, hi)
            else:
                lo, hi = (mid, hi) if ok else (lo, mid)
        return hi if rising else lo

    p = dict(params)
    out = []
    if design in LEAN:  # each change ALONE, from the design as committed
        if design == "lean":
            out.append(f"alone: x shared by 8-block clusters (DSMEM), prologue L2 reads / 8: "
                       f"{100 * frac(dict(p, prologue_share=8.0)):.1f}%")
        else:
            out.append(f"alone: norm/quantize blocks of 128 elements (normq_slice, now "
                       f"{p['normq_slice']:.0f}; Q8_0 activations only, a Q8_K scale spans "
                       f"256): {100 * frac(dict(p, normq_slice=128.0)):.1f}%")
        key = build(p).launch_key
        if frac(dict(p, **{key: 0.0})) >= target:
            need = solve(dict(p), key, 0.0, p[key], rising=False)
            out.append(f"alone: <= {need:.2f} us per graph node ({key}, now {p[key]:.2f})")
        else:
            out.append(f"alone: 0 us per graph node: {100 * frac(dict(p, **{key: 0.0})):.1f}%")
        if frac(dict(p, gemv_eff=1.0)) >= target:
            need = solve(dict(p), "gemv_eff", p["gemv_eff"], 1.0, rising=True)
            out.append(f"alone: GEMV at >= {need:.3f} of the copy bandwidth "
                       f"(now {p['gemv_eff']:.2f})")
        else:
            out.append(f"alone: GEMV at 1.00 of the copy bandwidth: "
                       f"{100 * frac(dict(p, gemv_eff=1.0)):.1f}%")
        return out
    changes = ((f"rmsnorm over {max(1, dim // 256)} blocks per token",
                {"norm_blocks": float(max(1, dim // 256))}),
               ("attention splits of >= 64 positions", {"split_min": 64.0}))
    for label, change in changes:
        p.update(change)
        out.append(f"+ {label}: {100 * frac(p):.1f}%")
        if frac(p) >= target:
            return out
    key = build(p).launch_key
    p0 = dict(p, **{key: 0.0})
    if frac(p0) >= target:
        need = solve(dict(p), key, 0.0, p[key], rising=False)
        out.append(f"+ <= {need:.2f} us per graph node ({key}, now {p[key]:.2f}): reaches "
                   f"{100 * target:.0f}%")
        return out
    out.append(f"+ 0 us per graph node: {100 * frac(p0):.1f}%")
    p1 = dict(p0, gemv_eff=1.0)
    if frac(p1) < target:
        out.append(f"not reachable even with GEMV at 1.00 of the copy bandwidth "
                   f"({100 * frac(p1):.1f}%)")
    else:
        need = solve(dict(p0), "gemv_eff", p["gemv_eff"], 1.0, rising=True)
        out.append(f"+ GEMV at >= {need:.3f} of the copy bandwidth (now {p['gemv_eff']:.2f}): "
                   f"reaches {100 * target:.0f}%")
    return out


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ModelError(message)


def positive_int(name, lo=1, hi=1 << 20):
    def conv(s):
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {s!r} is not an integer") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{name} {v} is outside {lo}..{hi}")
        return v
    return conv


def positive_float(name):
    def conv(s):
        try:
            v = float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {s!r} is not a number") from None
        if not (v > 0 and math.isfinite(v)):
            raise argparse.ArgumentTypeError(f"{name} {s} must be > 0")
        return v
    return conv


def parse(argv):
    ap = Parser(prog=PROG, description="\n\n".join(__doc__.split("\n\n")[:2]),
                formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="Parameters (--param NAME=VALUE):\n" + "\n".join(
                    f"  {k} = {v[0]:g}: {v[1]}" for k, v in PARAMS.items()))
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--gguf", metavar="FILE", help="read the shape and tensor types from a GGUF")
    src.add_argument("--shape", default=None, help="preset: 8b (default), 1b, 70b")
    ap.add_argument("--quant", default="q4_k_m",
                    help="with --shape: q4_k_m (default), q4_0, q8_0, f16 (sol-quantize's mixes)")
    for k, h in (("layers", "layers"), ("dim", "model width"), ("ffn", "FFN width"),
                 ("heads", "query heads"), ("kv-heads", "KV heads"), ("head-dim", "head size"),
                 ("vocab", "vocabulary")):
        ap.add_argument(f"--{k}", type=positive_int(f"--{k}"), help=f"override the preset's {h}")
    ap.add_argument("--batch", type=positive_int("--batch", 1, 4096), default=1,
                    help="sequences decoding in the step (default 1)")
    ap.add_argument("--context", type=positive_int("--context", 1, 1 << 20), default=512,
                    help="positions each decode token attends to (default 512)")
    ap.add_argument("--gpu", default="h200", help="h200 (default), h100, a100, l40s")
    ap.add_argument("--kv", default="f16", help="KV cache element: f16 (default) or f32")
    ap.add_argument("--copy-bw", type=positive_float("--copy-bw"), metavar="GB/s",
                    help="a measured copy bandwidth (replaces spec x copy_frac)")
    ap.add_argument("--prefill", type=positive_int("--prefill", 1, 1 << 20), metavar="T",
                    help="model a prefill of T tokens (per sequence) instead of a decode step")
    ap.add_argument("--design", default=None,
                    help="lean-q (x quantized once per group: as built), lean (GEMV "
                         "prologues, designed), fused (issue 30's design), unfused (today's "
                         "launch structure); default: the one that predicts best at 8b/h200/"
                         "batch 1/context 512")
    ap.add_argument("--unfused", action="store_true", help="alias of --design unfused")
    ap.add_argument("--l2-bw", type=positive_float("--l2-bw"), metavar="GB/s",
                    help="L2 read bandwidth for the GEMV prologues (replaces the GPU's assumed "
                         "figure)")
    ap.add_argument("--eager", action="store_true", help="no CUDA graph: eager launch cost")
    ap.add_argument("--kernels", action="store_true", help="also list every kernel of the step")
    ap.add_argument("--batch-sweep", action="store_true", help="decode at batch 1, 8, 16, 32, 64")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless 8b/h200 batch-1 decode of the design (default: the best "
                         "one) reaches issue 30's targets (q4_k_m, q4_0 >= 80%%, f16 >= 85%% of "
                         "the copy roofline)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                    help="override a parameter (listed below)")
    a = ap.parse_args(argv)
    if a.shape is not None and a.shape not in PRESETS:
        raise ModelError(f"unknown --shape {a.shape!r} (known: {', '.join(PRESETS)})")
    if a.quant not in QUANTS:
        raise ModelError(f"unknown --quant {a.quant!r} (known: {', '.join(QUANTS)})")
    if a.gpu not in GPUS:
        raise ModelError(f"unknown --gpu {a.gpu!r} (known: {', '.join(GPUS)})")
    if a.kv not in ("f16", "f32"):
        raise ModelError(f"unknown --kv {a.kv!r} (known: f16, f32)")
    if a.design is not None and a.design not in DESIGNS:
        raise ModelError(f"unknown --design {a.design!r} (known: {', '.join(DESIGNS)})")
    if a.unfused and a.design not in (None, "unfused"):
        raise ModelError(f"--unfused is --design unfused: not with --design {a.design}")
    if a.unfused:
        a.design = "unfused"
    params = {k: v[0] for k, v in PARAMS.items()}
    for s in a.param:
        k, eq, v = s.partition("=")
        if not eq or k not in PARAMS:
            raise ModelError(f"--param {s!r}: expected NAME=VALUE with NAME one of "
                             f"{', '.join(PARAMS)}")
        try:
            params[k] = float(v)
        except ValueError:
            raise ModelError(f"--param {s!r}: {v!r} is not a number") from None
        if not (params[k] >= 0 and math.isfinite(params[k])):
            raise ModelError(f"--param {s!r}: must be a finite number >= 0")
    for k in ("copy_frac", "gemv_eff", "attn_eff", "small_eff", "waves", "tc_eff", "fa_eff",
              "gemv_alu_eff", "attn_alu_eff", "pcie_gbs", "gemv_tokens", "gemv_warps",
              "split_min", "split_max", "sampler_chunk", "mma_eff", "mma_tile", "norm_blocks",
              "lean_split_len", "prologue_share"):
        if params[k] <= 0:
            raise ModelError(f"--param {k} must be > 0")
    if params["rope_fold"] not in (0.0, 1.0):
        raise ModelError(f"--param rope_fold={params['rope_fold']:g}: 1 (as built: the q/k/v "
                         "GEMV's epilogue) or 0 (a k_rope_kv launch per layer)")
    if params["built_tc"] not in (0.0, 1.0):
        raise ModelError(f"--param built_tc={params['built_tc']:g}: 0 (lean-q's designed MMQ "
                         "past 16 tokens) or 1 (today's batch kernels)")
    if params["built_tc"] and (a.design or "lean-q") != "lean-q":
        raise ModelError("--param built_tc applies to --design lean-q only (the other designs "
                         "keep their own batch path)")
    if a.prefill and (a.batch_sweep or a.check):
        raise ModelError("--prefill models one prefill step: not with --batch-sweep or --check")
    if a.check and (a.gguf or a.batch_sweep):
        raise ModelError("--check models its own configurations: not with --gguf/--batch-sweep")
    over = dict(layers=a.layers, dim=a.dim, ffn=a.ffn, heads=a.heads, kv_heads=a.kv_heads,
                head_dim=a.head_dim, vocab=a.vocab)
    if a.gguf and any(v is not None for v in over.values()):
        raise ModelError("--gguf takes the shape from the file: no --layers/--dim/... overrides")
    return a, params, over


def main(argv):
    a, params, over = parse(argv)
    if a.design is None:
        a.design = best_design(params, a.kv, a.eager, a.copy_bw, a.l2_bw)
    if a.check:
        return check(a, params)
    sh = shape_from_gguf(a.gguf) if a.gguf else build_preset(a.shape or "8b", a.quant, over)

    def build(p, batch=a.batch):
        return Model(sh, a.gpu, p, batch, a.context, a.kv, a.prefill or 0, a.design,
                     a.eager, a.copy_bw, a.l2_bw)

    if a.batch_sweep:
        rows = []
        for b in (1, 8, 16, 32, 64):
            mm = build(params, b)
            r = mm.run()
            path = mm.tc_path(b, list(sh["layers"][0].values()))
            rows.append(dict(batch=b, step_s=r["step_s"], tok_s=r["tok_s"],
                             roof_copy=r["roof_copy"], path=path, nodes=r["nodes"]))
        ratio = rows[-1]["tok_s"] / rows[0]["tok_s"]
        if a.json:
            print(json.dumps(dict(sweep=rows, ratio_64_1=ratio), indent=1))
            return 0
        print("\n".join(describe(build(params), sh)[:4]))
        print(f"{'batch':>5} {'step ms':>9} {'tokens/s':>10} {'x batch 1':>9} "
              f"{'% copy roofline':>15} {'launches':>8}  matmul path")
        for r in rows:
            print(f"{r['batch']:>5} {r['step_s'] * 1e3:>9.3f} {r['tok_s']:>10.0f} "
                  f"{r['tok_s'] / rows[0]['tok_s']:>9.1f} {100 * r['roof_copy']:>14.1f}% "
                  f"{r['nodes']:>8}  {r['path']}")
        print(f"batch 64 / batch 1 throughput: {ratio:.1f}x (issue 30's goal: >= 20x)")
        return 0
    m = build(params)
    res = m.run()
    if a.json:
        doc = dict(inputs=dict(source=sh["source"], gpu=a.gpu, batch=a.batch, context=a.context,
                               kv=a.kv, prefill=a.prefill, design=a.design,
                               fused=a.design != "unfused", eager=a.eager,
                               copy_gbs=m.copy_bw / 1e9, spec_gbs=m.spec_bw / 1e9,
                               l2_gbs=m.l2_bw / 1e9),
                   shape={k: sh[k] for k in ("arch", "dim", "ffn", "heads", "kv_heads",
                                             "head_dim", "vocab", "tied")} |
                   {"layers": len(sh["layers"])},
                   params=params, **jsonable(res))
        print(json.dumps(doc, indent=1))
        return 0
    print("\n".join(describe(m, sh)))
    print()
    print("\n".join(fmt_table(m, res)))
    print()
    print("\n".join(fmt_totals(m, res)))
    if a.kernels:
        print()
        print("\n".join(fmt_kernels(res)))
    return 0


def design_table(params, context=512, kv="f16", eager=False, copy_bw=None, l2_bw=None):
    """Every design at issue 30's check configuration: {design: {quant: result}}"""
    sh = {q: build_preset("8b", q, {}) for q in TARGETS}
    return {d: {q: Model(sh[q], "h200", params, 1, context, kv, 0, d, eager, copy_bw,
                         l2_bw).run() for q in TARGETS} for d in DESIGNS}


def best_of(table):
    """the design with the largest smallest margin over the targets (ties: DESIGNS order)"""
    return max(DESIGNS, key=lambda d: (min(table[d][q]["roof_copy"] - t
                                           for q, t in TARGETS.items()), -DESIGNS.index(d)))


def best_design(params, kv="f16", eager=False, copy_bw=None, l2_bw=None):
    """The default design: the best at 8b, h200, batch 1, context 512 (the parameters,
    --kv, --eager, --copy-bw and --l2-bw in force)"""
    return best_of(design_table(params, 512, kv, eager, copy_bw, l2_bw))


def check(a, params):
    """Issue 30's design target, batch-1 decode on the 8b shape on an H200."""
    ok = True
    what = {"unfused": "unfused (today)", "fused": "fused (issue 30's design)",
            "lean": "lean (GEMV prologues; designed, not built)",
            "lean-q": "lean-q (x quantized once per group; as built)"}[a.design]
    print("issue 30 target: batch-1 decode, 8b shape (Llama-3-8B), H200, context "
          f"{a.context}, {what} — model predictions, not measurements")
    table = design_table(params, a.context, a.kv, a.eager, a.copy_bw, a.l2_bw)
    print("designs (" + " / ".join(TARGETS) + " % of copy; launches): " + "; ".join(
        f"{d} " + " / ".join(f"{100 * r[q]['roof_copy']:.1f}" for q in TARGETS) +
        f" ({r['q4_k_m']['nodes']})" for d, r in table.items()) +
        f"; best: {best_of(table)}")
    for q, target in TARGETS.items():
        sh = build_preset("8b", q, {})

        def build(p, sh=sh):
            return Model(sh, "h200", p, 1, a.context, a.kv, 0, a.design, a.eager,
                         a.copy_bw, a.l2_bw)

        r = build(params).run()
        good = r["roof_copy"] >= target
        ok &= good
        print(f"{q:<7} {100 * r['roof_copy']:5.1f}% of the copy roofline "
              f"({100 * r['roof_spec']:.1f}% of spec), step {r['step_s'] * 1e3:.3f} ms, "
              f"{r['nodes']} launches: target {100 * target:.0f}%: {'ok' if good else 'BELOW'}")
        if not good:
            for s in what_it_takes(build, target, params, sh["dim"], a.design):
                print(f"        {s}")
    print("check: " + ("ok" if ok else "FAIL: the design as modelled misses the target"))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ModelError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:
        sys.exit(0)
