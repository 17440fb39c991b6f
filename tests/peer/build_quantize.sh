#!/usr/bin/env bash
# Builds tests/peer/llamacpp_quantize.c (llama.cpp's own quantizer, for reference K-quant files)
# against the prebuilt libraries of the installed node-llama-cpp, with the headers taken from the
# llama.cpp source bundle that package ships. Prints the binary's path; builds once per DIR.
#   tests/peer/build_quantize.sh DIR
set -euo pipefail
peer=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: build_quantize.sh DIR}
lq=$dir/llamacpp_quantize
if [ ! -x "$lq" ]; then
  [ -d "$peer/node_modules/node-llama-cpp" ] || { echo "node-llama-cpp is not installed (run scripts/setup)" >&2; exit 1; }
  bins=$peer/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
  src=$dir/llama-src
  rm -rf "$src"; mkdir -p "$dir"
  git clone -q --no-checkout "$peer/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$src"
  git -C "$src" checkout -q HEAD -- include ggml/include
  gcc -O2 -std=c11 -I"$src/include" -I"$src/ggml/include" "$peer/llamacpp_quantize.c" -o "$lq" \
    -L"$bins" -l:"$(cd "$bins" && ls libllama.v*.so | head -1)" \
    -l:"$(cd "$bins" && ls libggml.v*.so | head -1)" -l:libggml-base.so -Wl,-rpath,"$bins"
fi
echo "$lq"
