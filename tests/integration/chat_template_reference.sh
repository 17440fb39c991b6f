#!/usr/bin/env bash
# Promise: Sol's chat templates render what the models' own Jinja templates render. The templates
# are the real ones (Qwen2.5, Qwen3, Llama 3.1/3.2/3.3, Gemma 2; taken at test time from the
# llama.cpp source bundle inside node-llama-cpp, never committed), evaluated by a Jinja engine
# (@huggingface/jinja, tests/peer/render_template.mjs); Sol detects each family from the template
# source and renders the same messages (sol-tokenize --render-chat). The texts must be equal,
# byte for byte, with and without a system message, with multi-turn history and with contents
# that carry surrounding whitespace (some families trim it).
set -euo pipefail
B=${SOL_BUILD:?}; S=${SOL_SOURCE:?}
. "$S/tests/peer/compare.sh"
require_peer
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$peer/build_quantize.sh" "$B/peer" >/dev/null # also unpacks the llama.cpp source bundle
src=$B/peer/llama-src

# template file : family Sol must detect : message sets to use (all | nosys)
cases=(
  "Qwen-Qwen2.5-7B-Instruct:qwen2.5:all"
  "Qwen-Qwen3-0.6B:chatml:all"
  "meta-llama-Llama-3.1-8B-Instruct:llama3.1:all"
  "meta-llama-Llama-3.2-3B-Instruct:llama3.2:all"
  "meta-llama-Llama-3.3-70B-Instruct:llama3.1:all"
  "google-gemma-2-2b-it:gemma:nosys"
)
cat >"$work/user.json" <<'J'
[{"role": "user", "content": "Hello, who are you?"}]
J
cat >"$work/space.json" <<'J'
[{"role": "user", "content": "  two lines\nof text \n"}]
J
cat >"$work/multi.json" <<'J'
[{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."},
 {"role": "user", "content": "And 3+3?"}]
J
cat >"$work/system.json" <<'J'
[{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": "Sky colour?"}]
J
cat >"$work/system_multi.json" <<'J'
[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
 {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]
J
pass=0; fail=0
for c in "${cases[@]}"; do
  IFS=: read -r tmpl family sets <<<"$c"
  git -C "$src" show "HEAD:models/templates/$tmpl.jinja" >"$work/$tmpl.jinja"
  msgs=(user space multi); [ "$sets" = all ] && msgs+=(system system_multi)
  for m in "${msgs[@]}"; do
    for gen in "" --no-gen-prompt; do
      node "$peer/render_template.mjs" "$work/$tmpl.jinja" "$work/$m.json" $gen >"$work/ref" 2>"$work/err" ||
        { echo "FAIL $tmpl $m: the reference renderer failed: $(cat "$work/err")"; fail=$((fail + 1)); continue; }
      "$B/tools/sol-tokenize" --render-chat "$work/$m.json" --template-file "$work/$tmpl.jinja" $gen \
        >"$work/sol" 2>"$work/err" || { echo "FAIL $tmpl $m: $(cat "$work/err")"; fail=$((fail + 1)); continue; }
      if cmp -s "$work/ref" "$work/sol"; then
        pass=$((pass + 1))
      else
        echo "FAIL $tmpl ($family) $m ${gen:-gen-prompt}:"; echo "--- jinja"; cat "$work/ref"; echo; echo "--- sol"; cat "$work/sol"; echo
        fail=$((fail + 1))
      fi
    done
  done
  # the detected family is the expected one
  printf '[{"role":"user","content":"x"}]' >"$work/x.json"
  "$B/tools/sol-tokenize" --render-chat "$work/x.json" --template "$family" >"$work/byname"
  "$B/tools/sol-tokenize" --render-chat "$work/x.json" --template-file "$work/$tmpl.jinja" >"$work/bydetect"
  cmp -s "$work/byname" "$work/bydetect" || { echo "FAIL $tmpl: not detected as $family"; fail=$((fail + 1)); }
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
