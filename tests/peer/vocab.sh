# Sourced: peer_vocab NAME... extracts llama.cpp's models/ggml-vocab-NAME.gguf (with its .inp/.out
# pairs) from the llama.cpp source bundle inside node-llama-cpp (tests/peer) into
# $SOL_BUILD/peer-data, once; test data made at test time, never committed. Returns 1 when the
# bundle is missing (the caller skips).
peer_vocab() {
    local nlc=$SOL_SOURCE/tests/peer/node_modules/node-llama-cpp data=$SOL_BUILD/peer-data v ext
    local bundle=$nlc/llama/gitRelease.bundle missing=()
    for v in "$@"; do [ -f "$data/ggml-vocab-$v.gguf" ] || missing+=("$v"); done
    [ ${#missing[@]} = 0 ] && return 0
    [ -f "$bundle" ] || return 1
    echo "extracting vocab files (${missing[*]}) from $bundle"
    local tmp
    tmp=$(mktemp -d)
    git clone -q --no-checkout "$bundle" "$tmp/src" || { rm -rf "$tmp"; return 1; }
    mkdir -p "$data"
    local rev
    rev=$(git -C "$tmp/src" rev-parse HEAD)
    for v in "${missing[@]}"; do
        for ext in "" .inp .out; do
            git -C "$tmp/src" show "$rev:models/ggml-vocab-$v.gguf$ext" >"$data/ggml-vocab-$v.gguf$ext.part" &&
                mv "$data/ggml-vocab-$v.gguf$ext.part" "$data/ggml-vocab-$v.gguf$ext"
        done
    done
    rm -rf "$tmp"
    for v in "$@"; do [ -f "$data/ggml-vocab-$v.gguf" ] || return 1; done
}
