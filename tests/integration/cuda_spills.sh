# Promise: every CUDA kernel source (worker/backend/cuda/k_*.cu) compiles with nvcc for sm_80 and
# sm_90, and ptxas reports no register spills in any of them (spills in decode kernels turn
# bandwidth-bound loops into local-memory traffic). Needs nvcc (CUDA builds; CI has it).
set -euo pipefail
S=${SOL_SOURCE:?}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
. "$S/tests/skip.sh"
[ -x "$NVCC" ] || skip_test "no nvcc at $NVCC (the CUDA toolkit is not installed)"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail=0; n=0
for src in "$S"/worker/backend/cuda/k_*.cu; do
  for arch in sm_80 sm_90; do
    if ! "$NVCC" -std=c++17 -arch="$arch" -Xptxas -v -I"$S/worker/backend/cuda" -I"$S/worker/backend" -I"$S/common" \
        -c "$src" -o "$work/k.o" >"$work/log" 2>&1; then
      echo "FAIL $(basename "$src") $arch: does not compile"; tail -5 "$work/log"; fail=1; continue
    fi
    kernels=$(grep -c "Compiling entry function" "$work/log" || true)
    spills=$(grep -E "[1-9][0-9]* bytes spill (stores|loads)" "$work/log" || true)
    n=$((n + kernels))
    if [ -n "$spills" ]; then
      echo "FAIL $(basename "$src") $arch: register spills"; echo "$spills"; fail=1
    else
      echo "ok   $(basename "$src") $arch: $kernels kernels, no spills"
    fi
  done
done
[ "$n" -gt 0 ] || { echo "FAIL: no kernel compiled"; exit 1; }
exit $fail
