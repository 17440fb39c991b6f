#!/usr/bin/env bash
# Promise: Sol's tokenizer gives llama.cpp's ids, id for id, on real vocabularies (LLaMA SPM,
# LLaMA-3 BPE, Qwen2, GPT-2; Phi-3 and MPT on the pairs only) for every line of tests/data/tokenizer_corpus.txt (with and without
# parsing special tokens) and for llama.cpp's own .inp/.out tokenizer test pairs; and that decoding
# gives every corpus line back.
# The vocab files come from the llama.cpp source bundle inside node-llama-cpp (tests/peer), are
# extracted at test time into $SOL_BUILD/peer-data/ and never committed.
set -euo pipefail
SOL_SOURCE=${SOL_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}
SOL_BUILD=${SOL_BUILD:-$SOL_SOURCE/build}
PEER=$SOL_SOURCE/tests/peer
NLC=$PEER/node_modules/node-llama-cpp
BUNDLE=$NLC/llama/gitRelease.bundle
TOOL=$SOL_BUILD/tools/sol-tokenize
CORPUS=$SOL_SOURCE/tests/data/tokenizer_corpus.txt

. "$SOL_SOURCE/tests/skip.sh"
if [ ! -f "$BUNDLE" ] || ! command -v node >/dev/null 2>&1; then
    skip_test "node-llama-cpp is not installed in tests/peer (run scripts/setup)"
fi
[ -x "$TOOL" ] || { echo "FAIL: $TOOL not built"; exit 1; }

DATA=$SOL_BUILD/peer-data
VOCABS="llama-spm llama-bpe qwen2 gpt-2" # corpus vs llama.cpp, and .inp/.out pairs
EXTRA="phi-3 mpt"                        # .inp/.out pairs only (no node run needed)
. "$SOL_SOURCE/tests/peer/vocab.sh"
# shellcheck disable=SC2086
peer_vocab $VOCABS $EXTRA || { echo "FAIL: cannot extract the vocab files from the bundle"; exit 1; }

fail=0
work=$(mktemp -d)
for v in $VOCABS; do
    m=$DATA/ggml-vocab-$v.gguf
    mkdir -p "$work/ref"
    (cd "$PEER" && node tokenize.mjs --model "$m" --escapes --both "$work/ref" <"$CORPUS") 2>"$work/ref.err" || {
        echo "FAIL: llama.cpp peer failed on $v"; cat "$work/ref.err"; fail=1; continue; }
    for mode in plain special; do
        flag=""
        [ "$mode" = special ] && flag=--special
        ref=$work/ref/$mode
        "$TOOL" -m "$m" --no-bos --escapes $flag <"$CORPUS" >"$work/sol"
        if [ "$(wc -l <"$ref")" -ne "$(wc -l <"$CORPUS")" ]; then
            echo "FAIL: $v/$mode: peer printed $(wc -l <"$ref") lines for $(wc -l <"$CORPUS") inputs"
            fail=1
        elif cmp -s "$ref" "$work/sol"; then
            echo "ok   $v/$mode: $(wc -l <"$CORPUS") corpus lines identical"
        else
            echo "FAIL: $v/$mode differs from llama.cpp (line: corpus / llama.cpp / sol):"
            diff <(cat -n "$ref") <(cat -n "$work/sol") >"$work/diff" || true
            grep -m5 '^<' "$work/diff" | while read -r _ n _; do
                echo "  $n: $(sed -n "${n}p" "$CORPUS")"
                echo "     llama.cpp: $(sed -n "${n}p" "$ref")"
                echo "     sol:       $(sed -n "${n}p" "$work/sol")"
            done
            fail=1
        fi
    done
    if "$TOOL" -m "$m" --vocab-test "$m.inp" "$m.out" >"$work/vt" 2>&1; then
        echo "ok   $v/vocab-test: $(tail -1 "$work/vt" | sed 's/.*: //')"
    else
        echo "FAIL: $v/vocab-test"; tail -20 "$work/vt"; fail=1
    fi
done
# Sol's own promise on top: decode(encode(line)) == line, with and without BOS.
for v in $VOCABS $EXTRA; do
    m=$DATA/ggml-vocab-$v.gguf
    if "$TOOL" -m "$m" --escapes --roundtrip <"$CORPUS" 2>"$work/rt" &&
        "$TOOL" -m "$m" --escapes --no-bos --roundtrip <"$CORPUS" 2>>"$work/rt"; then
        echo "ok   $v/roundtrip"
    else
        echo "FAIL: $v/roundtrip"; head -5 "$work/rt"; fail=1
    fi
done
for v in $EXTRA; do
    m=$DATA/ggml-vocab-$v.gguf
    if "$TOOL" -m "$m" --vocab-test "$m.inp" "$m.out" >"$work/vt" 2>&1; then
        echo "ok   $v/vocab-test: $(tail -1 "$work/vt" | sed 's/.*: //')"
    else
        echo "FAIL: $v/vocab-test"; tail -20 "$work/vt"; fail=1
    fi
done
rm -rf "$work"
exit $fail
