#!/usr/bin/env bash
# tests/gpu/bundle.sh DIR: builds, here, what a GPU lease runs (docs/gpu-run.md) and writes it to
# DIR as one self-contained folder: nothing on the GPU machine needs a compiler or a package.
#   DIR/bin/         sol-generate, sol-worker, sol-mkmodel, sol-quantize, bench_decode and the op
#                    tests (test_cuda_backend, test_backend_ops), RPATH $ORIGIN/../lib
#   DIR/lib/         every non-CUDA shared library they use except glibc (libzmq, libstdc++, ...)
#   DIR/lib/sol/     libsol-cuda.so: the CUDA backend for sm_80 and sm_90, loaded at run time; the
#                    CUDA libraries come from the GPU machine (its driver, PyTorch's wheels)
#   DIR/lib/glibc/   this machine's glibc and its loader, used only where the host's glibc is
#                    older than the binaries need (run.sh's run_bin; tests/gpu/bare_root.sh tries it)
#   DIR/scripts/     run.sh and compare.py, copies of tests/gpu/, and bench/gpu_model.py
#   DIR/MANIFEST     commit, build flags, each file's size
# Release build with CUDA in $SOL_BUNDLE_BUILD (default build-bundle). At most 48 MiB: the bundle
# travels with the device tool's 64 MiB carry. Exit 1 when anything cannot be bundled.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 1 ] || { echo "usage: tests/gpu/bundle.sh DIR" >&2; exit 2; }
OUT=$1
B=${SOL_BUNDLE_BUILD:-build-bundle}
LIMIT_MIB=48
BINS=(worker/sol-worker tools/sol-generate tools/sol-mkmodel tools/sol-quantize
  bench/bench_decode tests/test_cuda_backend tests/test_backend_ops)

mkdir -p "$B"
echo "bundle: configuring $B (Release, CUDA sm_80 + sm_90)"
# DT_RPATH (not RUNPATH): it also applies to the libraries' own dependencies (libzmq's).
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSOL_CUDA=ON \
  '-DCMAKE_BUILD_RPATH=$ORIGIN/../lib;$ORIGIN/..' \
  -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags \
  -DCMAKE_MODULE_LINKER_FLAGS=-Wl,--disable-new-dtags >"$B/bundle-configure.log" 2>&1 ||
  { tail -20 "$B/bundle-configure.log"; exit 1; }
targets=()
for b in "${BINS[@]}"; do targets+=(--target "$(basename "$b")"); done
echo "bundle: building ${#BINS[@]} binaries and libsol-cuda.so (a few minutes on 2 cores)"
cmake --build "$B" -j "$(nproc)" "${targets[@]}" --target sol_cuda >"$B/bundle-build.log" 2>&1 ||
  { tail -30 "$B/bundle-build.log"; exit 1; }

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib/sol" "$OUT/lib/glibc" "$OUT/scripts"
for b in "${BINS[@]}"; do cp "$B/$b" "$OUT/bin/"; done
cp "$B/lib/libsol-cuda.so" "$OUT/lib/sol/"
strip --strip-debug "$OUT"/bin/* "$OUT/lib/sol/libsol-cuda.so"
cp tests/gpu/run.sh tests/gpu/compare.py bench/gpu_model.py "$OUT/scripts/"

# Libraries: CUDA's are the GPU machine's; glibc's go to lib/glibc; the rest beside the binaries.
is_cuda() { [[ $1 =~ ^lib(cuda|cudart|cublas|cublasLt|nccl)\.so ]]; }
is_glibc() { [[ $1 =~ ^(ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libresolv|libutil|libmvec)\.so ]]; }
missing=0
for f in "$OUT"/bin/* "$OUT/lib/sol/libsol-cuda.so"; do
  while read -r name _ path _; do
    [ -n "$name" ] || continue
    if is_cuda "$name"; then continue; fi
    if [ "$path" = "not" ] || [ -z "$path" ]; then
      echo "bundle: $(basename "$f") needs $name, which this machine does not have" >&2
      missing=1
      continue
    fi
    # ldd lists the whole closure (libzmq's own dependencies too), the loader included
    if is_glibc "$name"; then dest=$OUT/lib/glibc; else dest=$OUT/lib; fi
    [ -e "$dest/$name" ] || cp -L "$path" "$dest/$name"
  done < <(ldd "$f" | awk '/=>/ {print $1, $2, $3} /ld-linux/ && !/=>/ {n=$1; sub(".*/", "", n); print n, "=>", $1}')
done
[ "$missing" = 0 ] || exit 1
[ -e "$OUT/lib/glibc/ld-linux-x86-64.so.2" ] || { echo "bundle: no glibc loader in the closure" >&2; exit 1; }
strip --strip-unneeded "$OUT"/lib/*.so* 2>/dev/null || true

{
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -1)"
  echo "cmake Release, SOL_CUDA=ON, CUDA architectures 80;90, nvcc $(/usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "glibc needed by the binaries: $(objdump -T "$OUT"/bin/* "$OUT/lib/sol/libsol-cuda.so" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
  (cd "$OUT" && find . -type f ! -name MANIFEST -printf '%s %p\n' | sort -k2)
} >"$OUT/MANIFEST"

size=$(du -sb "$OUT" | cut -f1)
echo "bundle: $OUT, $(find "$OUT" -type f | wc -l) files, $((size / 1048576)) MiB ($size bytes; limit $LIMIT_MIB MiB)"
[ "$size" -le $((LIMIT_MIB * 1048576)) ] || { echo "bundle: over $LIMIT_MIB MiB" >&2; exit 1; }
