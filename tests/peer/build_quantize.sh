#!/usr/bin/env bash
# Builds tests/peer/llamacpp_quantize.c (llama.cpp's own quantizer, for reference K-quant files)
# and llamacpp_experts.c (its router's choices) against the prebuilt libraries of the installed
# node-llama-cpp, with the headers taken from the llama.cpp source bundle that package ships.
# Prints the quantizer's path (llamacpp_experts lies next to it); builds once per DIR (again when a source is newer).
#   tests/peer/build_quantize.sh DIR
set -euo pipefail
peer=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: build_quantize.sh DIR}
lq=$dir/llamacpp_quantize
if [ ! -x "$lq" ] || [ ! -x "$dir/llamacpp_experts" ] || [ "$peer/llamacpp_experts.c" -nt "$dir/llamacpp_experts" ] ||
   [ "$peer/llamacpp_quantize.c" -nt "$lq" ]; then
  [ -d "$peer/node_modules/node-llama-cpp" ] || { echo "node-llama-cpp is not installed (run scripts/setup)" >&2; exit 1; }
  bins=$peer/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
  src=$dir/llama-src
  rm -rf "$src"; mkdir -p "$dir"
  git clone -q --no-checkout "$peer/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$src"
  git -C "$src" checkout -q HEAD -- include ggml/include
  for tool in llamacpp_quantize llamacpp_experts; do
    gcc -O2 -std=c11 -DPEER_BINS="\"$bins\"" -I"$src/include" -I"$src/ggml/include" \
      "$peer/$tool.c" -o "$dir/$tool" \
      -L"$bins" -l:"$(cd "$bins" && ls libllama.v*.so | head -1)" \
      -l:"$(cd "$bins" && ls libggml.v*.so | head -1)" -l:libggml-base.so -Wl,-rpath,"$bins"
  done
fi
echo "$lq"
