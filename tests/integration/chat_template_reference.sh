#!/usr/bin/env bash
# Promise: Sol's chat templates render what the models' own Jinja templates render. The templates
# are the real ones (Qwen2.5, Qwen3, Llama 3.1/3.2/3.3, Gemma 2; taken at test time from the
# llama.cpp source bundle inside node-llama-cpp, never committed), evaluated by a Jinja engine
# (@huggingface/jinja, tests/peer/render_template.mjs); Sol detects each family from the template
# source and renders the same messages (sol-tokenize --render-chat). The texts must be equal,
# byte for byte, with and without a system message, with multi-turn history and with contents
# that carry surrounding whitespace (some families trim it). For Qwen2.5 and Qwen3 also with tools
# (OpenAI tool definitions, assistant tool_calls with object and string arguments, consecutive
# tool results, a system message) and Qwen3's reasoning (<think> in history, the latest answer);
# for Llama 3.1/3.2/3.3 with tools (the functions in the first user turn, one call, an ipython
# result). Mistral v0.3's template is not in the bundle: test_chat_template holds its renders.
set -euo pipefail
B=${SOL_BUILD:?}; S=${SOL_SOURCE:?}
. "$S/tests/peer/compare.sh"
require_peer
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$peer/build_quantize.sh" "$B/peer" >/dev/null # also unpacks the llama.cpp source bundle
src=$B/peer/llama-src

# template file : family Sol must detect : message sets to use (all | nosys)
cases=(
  "Qwen-Qwen2.5-7B-Instruct:qwen2.5:all,tools"
  "Qwen-Qwen3-0.6B:qwen3:all,tools"
  "meta-llama-Llama-3.1-8B-Instruct:llama3.1:all,ltools"
  "meta-llama-Llama-3.2-3B-Instruct:llama3.2:all,ltools"
  "meta-llama-Llama-3.3-70B-Instruct:llama3.1:all,ltools"
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
cat >"$work/tools.json" <<'J'
[{"type": "function", "function": {"name": "get_weather", "description": "The weather \"now\"\nin a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
  "required": ["city"]}}},
 {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"}}}}}]
J
cat >"$work/tool_call.json" <<'J'
[{"role": "user", "content": "Weather in Paris?"},
 {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
 {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "sunny"}]
J
cat >"$work/tool_multi.json" <<'J'
[{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Add 1 and 2, and the weather."},
 {"role": "assistant", "content": "Let me check.", "tool_calls": [
   {"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}},
   {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
 {"role": "tool", "content": "3"}, {"role": "tool", "content": "rain"},
 {"role": "assistant", "content": "3, and rain."}, {"role": "user", "content": "Thanks"}]
J
cat >"$work/think.json" <<'J'
[{"role": "user", "content": "a?"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nA."},
 {"role": "user", "content": "b?"}, {"role": "assistant", "content": "B."}]
J
pass=0; fail=0
for c in "${cases[@]}"; do
  IFS=: read -r tmpl family sets <<<"$c"
  git -C "$src" show "HEAD:models/templates/$tmpl.jinja" >"$work/$tmpl.jinja"
  msgs=(user space multi); [[ "$sets" == all* ]] && msgs+=(system system_multi)
  [[ "$sets" == *,tools ]] && msgs+=(tools:user tools:system tools:tool_call tools:tool_multi tool_call think)
  [[ "$sets" == *,ltools ]] && msgs+=(tools:user tools:system tools:tool_call tool_call)
  for mt in "${msgs[@]}"; do
    m=${mt#tools:}; tools=(); [ "$m" = "$mt" ] || tools=(--tools "$work/tools.json")
    for gen in "" --no-gen-prompt; do
      node "$peer/render_template.mjs" "$work/$tmpl.jinja" "$work/$m.json" $gen "${tools[@]}" >"$work/ref" 2>"$work/err" ||
        { echo "FAIL $tmpl $mt: the reference renderer failed: $(cat "$work/err")"; fail=$((fail + 1)); continue; }
      "$B/tools/sol-tokenize" --render-chat "$work/$m.json" --template-file "$work/$tmpl.jinja" $gen "${tools[@]}" \
        >"$work/sol" 2>"$work/err" || { echo "FAIL $tmpl $mt: $(cat "$work/err")"; fail=$((fail + 1)); continue; }
      if cmp -s "$work/ref" "$work/sol"; then
        pass=$((pass + 1))
      else
        echo "FAIL $tmpl ($family) $mt ${gen:-gen-prompt}:"; echo "--- jinja"; cat "$work/ref"; echo; echo "--- sol"; cat "$work/sol"; echo
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
