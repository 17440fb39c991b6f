/* emu_kernels.cu: the emulation test's kernels compiled by nvcc for sm_80/sm_90, so the same source
 * is proven to build on both sides (CUDA builds only). */
#include "emu_kernels.cuh"
