#!/usr/bin/env bash
# tests/gpu/cuda_image.sh BUNDLE: builds the GPU image (deploy/docker/images.sh --cuda BUNDLE: the
# local Debian base + the GPU bundle + the CUDA 13 runtime libraries) with a real `docker build`
# and proves, without a GPU, what a GPU node would need of it:
#   - every binary and libsol-cuda.so resolve all their libraries inside the image (the module's
#     cudart, cuBLASLt and NCCL from the image's /opt/sol/lib/cuda);
#   - sol-generate runs a model there on --backend cpu and --backend cuda-emu with the same ids;
#   - --backend cuda says in one line (exit 2) that there is no driver, and with a stand-in driver
#     library mounted (SOL_CUDA_LIB_PATH) it gets past every library the image carries: what is
#     left is the driver, which the NVIDIA container toolkit injects on a GPU node.
# Needs a Docker engine (scripts/docker-engine start). Run by .ci/run after tests/gpu/bundle.sh.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: tests/gpu/cuda_image.sh BUNDLE" >&2; exit 2; }
cd "$(dirname "$0")/../.."
fail() { echo "FAIL [cuda_image]: $*" >&2; exit 1; }
log=$(mktemp)
deploy/docker/images.sh --cuda "$1" >"$log" 2>&1 || fail "the image did not build: $(tail -5 "$log")"
grep "^images: sol-cuda" "$log"; rm -f "$log"
run() { docker run --rm --network none "$@"; }
for f in /opt/sol/bin/sol-worker /opt/sol/bin/sol-generate /opt/sol/lib/sol/libsol-cuda.so; do
  out=$(run sol-cuda:latest sh -c "LD_LIBRARY_PATH=/opt/sol/lib/cuda ldd $f")
  ! grep -q "not found" <<<"$out" || fail "$f: $(grep 'not found' <<<"$out")"
  grep -q "libcudart\|sol-worker\|sol-generate" <<<"$f $out" || fail "$f: no CUDA runtime in $out"
done
echo "ok: the binaries and libsol-cuda.so resolve every library in the image (cudart, cuBLASLt, NCCL from /opt/sol/lib/cuda)"
gen='sol-mkmodel -o /tmp/t.gguf --preset tiny --type q8_0 --seed 7 >/dev/null 2>&1 && sol-generate -m /tmp/t.gguf --prompt-tokens 5,9,13,2 -n 8 --temp 0 --tokens'
cpu=$(run sol-cuda:latest sh -c "$gen --backend cpu 2>/dev/null")
emu=$(run sol-cuda:latest sh -c "$gen --backend cuda-emu 2>/dev/null")
[ "$(wc -l <<<"$cpu")" = 8 ] && [ "$cpu" = "$emu" ] || fail "cpu and cuda-emu ids: $(echo $cpu) / $(echo $emu)"
echo "ok: sol-generate in the image: cpu and cuda-emu give the same 8 ids ($(echo $cpu))"
rc=0
err=$(run sol-cuda:latest sh -c "$gen --backend cuda 2>&1 >/dev/null") || rc=$?
[ "$rc" = 2 ] && grep -q "no NVIDIA driver" <<<"$err" || fail "--backend cuda without a driver: rc $rc: $err"
echo "ok: $err"
fake=$(mktemp -d) && chmod 755 "$fake" # the image runs as uid 10001
trap 'rm -rf "$fake"' EXIT
echo 'int sol_fake_driver;' >"$fake/f.c"
cc -shared -fPIC -o "$fake/libcuda.so.1" "$fake/f.c"
rc=0
err=$(run -v "$fake:/fake:ro" -e SOL_CUDA_LIB_PATH=/fake:/opt/sol/lib/cuda sol-cuda:latest \
  sh -c "$gen --backend cuda 2>&1 >/dev/null") || rc=$?
[ "$rc" != 0 ] || fail "a stand-in driver ran the model"
! grep -q "was not found\|does not load" <<<"$err" || fail "a library the image should carry: $err"
echo "ok: with a stand-in driver every library the image carries loads; it stops at the driver: $err"
echo "cuda_image: ok"
