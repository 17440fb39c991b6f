/* kernels_emu: the CUDA kernel sources compiled as host C++ against cuda_emu.h, with their
 * launchers named sol_emu_* (SOL_CUDA_EMU), for the cuda-emu backend (backend_cuda_emu.c). */
#define SOL_CUDA_EMU 1
#include "k_argmax.cu"
#include "k_attention.cu"
#include "k_convert.cu"
#include "k_elementwise.cu"
#include "k_embed.cu"
#include "k_flash.cu"
#include "k_gemv.cu"
#include "k_kv.cu"
#include "k_mma.cu"
#include "k_mmq.cu"
#include "k_moe.cu"
#include "k_norm.cu"
#include "k_rope.cu"
