# Promise: the CUDA module's decode kernels, as built for sm_90, read global memory in words of
# 32 bits or wider inside their loops, keep no local memory (no stack frame, no spills) and stay
# within their register budgets, and the batch GEMM multiplies on tensor cores (HMMA in its SASS):
# Every kernel opens with the programmatic-dependent-launch wait (ACQBULK before any global
# access, branch or exit) and releases its dependents (PREEXIT), as sol_cuda_kernel.h requires.
# tests/gpu/sass_check.py on the SASS (nvdisasm, from
# scripts/cuda-tools). The checker itself is shown to fail on a probe kernel that breaks each rule.
set -euo pipefail
S=${SOL_SOURCE:?} B=${SOL_BUILD:?}
. "$S/tests/skip.sh"
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
[ -x "$NVCC" ] || skip_test "no nvcc at $NVCC (the CUDA toolkit is not installed)"
mod="$B/lib/libsol-cuda.so"
[ -f "$mod" ] || skip_test "this build has no CUDA module ($mod)"
nvd=${SOL_NVDISASM:-${SOL_CACHE:-$HOME/.cache/sol}/cuda-tools/bin/nvdisasm}
[ -x "$nvd" ] || skip_test "no nvdisasm at $nvd (scripts/setup fetches it: scripts/cuda-tools)"
export SOL_NVDISASM=$nvd
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

# The checker fails a kernel that reads bytes in a loop and keeps an array in local memory.
cat > "$work/probe.cu" <<'CU'
__global__ void k_mma_probe(const float *a, const float *b, float *y, int k) {
    float s = 0.0f; /* a GEMM on CUDA cores: the tensor-core rule must catch it */
    for (int i = 0; i < k; i++) s += a[i * 32 + threadIdx.x] * b[i];
    y[threadIdx.x] = s;
}
__global__ void k_gemv_probe(const unsigned char *w, int n, int pick, float *y) {
    float acc[64]; /* indexed by loaded data: only local memory can hold it */
    for (int i = 0; i < 64; i++) acc[i] = 0.0f;
    for (int i = threadIdx.x; i < n; i += 32) acc[w[i] & 63] += 1.0f;
    y[threadIdx.x] = acc[pick & 63];
}
/* PDL: a wait after an early return (a grid whose threads all return never waits), and none */
__global__ void k_pdl_late(float *x, const float *y, int n) {
    int i = threadIdx.x;
    if (i >= n) return;
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    x[i] = y[i] * 2.0f;
}
__global__ void k_pdl_none(float *x, const float *y) { x[threadIdx.x] = y[threadIdx.x]; }
__global__ void k_pdl_ok(float *x, const float *y, int n) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    int i = threadIdx.x;
    if (i < n) x[i] = y[i] * 2.0f;
}
CU
"$NVCC" -arch=sm_90 -cubin -o "$work/probe.cubin" "$work/probe.cu"
set +e
python3 "$S/tests/gpu/sass_check.py" --module "$work/probe.cubin" > "$work/probe.out" 2>&1
rc=$?
set -e
cat "$work/probe.out"
[ "$rc" = 1 ] || { echo "FAIL: the probe kernel passed the check (exit $rc)"; exit 1; }
grep -q "k_gemv_probe .*FAIL: [0-9]* 8/16-bit global loads in a loop; [0-9]* local-memory" \
  "$work/probe.out" || { echo "FAIL: the probe's verdict does not name both rules"; exit 1; }
grep -q "k_mma_probe .*FAIL: no tensor-core instruction" "$work/probe.out" ||
  { echo "FAIL: a GEMM kernel without HMMA passed the tensor-core rule"; exit 1; }
grep -q "k_pdl_late .*FAIL: PDL: .*EXIT. before the wait" "$work/probe.out" ||
  { echo "FAIL: a kernel that can exit before its PDL wait passed"; exit 1; }
grep -q "k_pdl_none .*FAIL: PDL: .*LDG.* before the wait" "$work/probe.out" ||
  { echo "FAIL: a kernel without the PDL wait passed"; exit 1; }
grep -q "k_pdl_ok .* wait  -$" "$work/probe.out" ||
  { echo "FAIL: a kernel that opens with the PDL wait was refused"; exit 1; }
python3 "$S/tests/gpu/sass_check.py" --module "$work/missing.so" > "$work/err.out" 2>&1 && {
  echo "FAIL: a missing module was accepted"; exit 1; }
grep -q "missing.so: no such file" "$work/err.out" || { cat "$work/err.out"; exit 1; }

# The module itself.
python3 "$S/tests/gpu/sass_check.py" --module "$mod" | tee "$work/module.out"
for k in k_gemv_q k_gemv_kq k_paged_attention k_rmsnorm k_rope k_quantize_q8_0 k_mma_gemm k_mmq_gemm k_flash_attention; do
  grep -q "^$k" "$work/module.out" || { echo "FAIL: kernel $k missing from the report"; exit 1; }
done
echo "ok: sass check"
