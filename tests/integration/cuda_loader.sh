#!/usr/bin/env bash
# Promise: the CUDA backend is a module loaded at run time (worker/backend/cuda_loader.c): no Sol
# binary links a CUDA library, and --backend cuda on a machine without the driver or a library
# says in one line what it looked for and where, exit 2. The libraries are found in
# SOL_CUDA_LIB_PATH, the toolkit's folder and a Python environment's nvidia/*/lib (the layout of
# NVIDIA's pip wheels, as on the GPU machine). The toolkit folder is hidden with a mount
# namespace to show the wheel search; a fake libcuda.so.1 stands in for a driver without a GPU.
set -euo pipefail
source "$(dirname "$0")/../skip.sh"
B=${SOL_BUILD:?}
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for bin in worker/sol-worker tools/sol-generate bench/bench_decode; do
  need=$(readelf -d "$B/$bin" | grep NEEDED || true)
  if grep -Eq 'libcuda|libcudart|libcublas|libnccl' <<<"$need"; then
    fail "$bin links a CUDA library: $need"
  fi
done
echo "ok: no binary links a CUDA library"

[ -f "$B/lib/libsol-cuda.so" ] || skip_test "this build has no CUDA module (configured without nvcc and NCCL)"
if grep -q 'libcuda\.so\.1 ' <<<"$(ldconfig -p)" || [ -e /usr/local/nvidia/lib64/libcuda.so.1 ]; then
  skip_test "this machine has an NVIDIA driver: tests/gpu/run.sh checks the GPU path"
fi

"$B/tools/sol-mkmodel" -o "$work/t.gguf" --preset tiny --type f32 --seed 5 >/dev/null 2>&1
gen() { "$B/tools/sol-generate" -m "$work/t.gguf" --prompt-tokens 5,9,13,2 -n 4 --temp 0 --tokens "$@"; }
expect() { # exit status, pattern, command...: one line on stderr matching pattern
  local want=$1 pat=$2
  shift 2
  set +e
  "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  set -e
  [ "$rc" -eq "$want" ] || fail "$* exited $rc, not $want: $(cat "$work/err")"
  [ "$(wc -l <"$work/err")" -eq 1 ] || fail "$*: not one line: $(cat "$work/err")"
  grep -Eq "$pat" "$work/err" || fail "$*: unclear message: $(cat "$work/err")"
  echo "ok: $(cat "$work/err")"
}

# CPU still runs: no CUDA library is touched unless cuda is asked for.
[ "$(gen --backend cpu 2>/dev/null | wc -l)" -eq 4 ] || fail "--backend cpu did not generate"
expect 2 "backend cuda: no NVIDIA driver: the driver's library \(libcuda\.so\.1\) was not found" \
  gen --backend cuda
expect 2 "worker\.backend: backend cuda: no NVIDIA driver" \
  "$B/worker/sol-worker" --backend cuda --model "$work/t.gguf" --pool p --router tcp://127.0.0.1:1

# A driver library that answers like a machine without a GPU: the runtime's own reason.
mkdir -p "$work/driver"
echo 'int sol_fake_driver;' >"$work/driver/f.c"
cc -shared -fPIC -o "$work/driver/libcuda.so.1" "$work/driver/f.c"
export SOL_CUDA_LIB_PATH=$work/driver
expect 2 "backend cuda: no CUDA device: the driver returned [0-9]+, cuda" gen --backend cuda
expect 2 "another build of Sol \(entry missing" env SOL_CUDA_MODULE="$work/driver/libcuda.so.1" \
  "$B/tools/sol-generate" -m "$work/t.gguf" --backend cuda -n 1 --prompt-tokens 1
expect 2 "libsol-cuda\.so was not found \(looked in SOL_CUDA_MODULE=$work/nothing\)" \
  env SOL_CUDA_MODULE="$work/nothing" "$B/tools/sol-generate" -m "$work/t.gguf" --backend cuda \
  -n 1 --prompt-tokens 1

# The wheel layout: the toolkit hidden, the libraries only in a venv's nvidia/*/lib.
unshare -m true 2>/dev/null || skip_test "no mount namespace here (unshare -m): the wheel search is not shown"
tk=$(readlink -f /usr/local/cuda/lib64)
venv=$work/venv
wheel=$venv/lib/python3.12/site-packages/nvidia/cu13/lib
mkdir -p "$venv/bin" "$wheel"
printf '#!/bin/sh\n' >"$venv/bin/python3"
chmod +x "$venv/bin/python3"
# Inside the namespace the toolkit's folder shows at the wheel's place (a bind mount: no copy of
# its 700 MB), then a tmpfs hides it at its own.
hide="mount --bind '$tk' '$wheel' && mount -t tmpfs none '$tk'"
expect 2 "the CUDA runtime \(libcudart\.so\.13\) was not found: looked in SOL_CUDA_LIB_PATH \($work/driver\)" \
  unshare -m sh -c "$hide && exec \"\$0\" \"\$@\"" "$B/tools/sol-generate" -m "$work/t.gguf" \
  --backend cuda -n 1 --prompt-tokens 1
expect 2 "backend cuda: no CUDA device: the driver returned" \
  unshare -m sh -c "$hide && PATH=$venv/bin:\$PATH exec \"\$0\" \"\$@\"" "$B/tools/sol-generate" \
  -m "$work/t.gguf" --backend cuda -n 1 --prompt-tokens 1
echo "cuda_loader: ok"
