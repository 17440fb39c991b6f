# compare.sh: helpers the llama.cpp peer tests share (source it after setting S = the source
# tree): require_peer (skip_test without node-llama-cpp), relL2 A.json B.json (relative
# L2 of two logit arrays, "len" when they differ in length), within X LIMIT, same_prefix A B (how
# many leading lines two id files share).
peer=$S/tests/peer
. "$S/tests/skip.sh"
require_peer() {
  [ -d "$peer/node_modules/node-llama-cpp" ] && return 0
  skip_test "node-llama-cpp is not installed in tests/peer (run scripts/setup)"
}
relL2() {
  node -e '
    const fs = require("fs");
    const a = JSON.parse(fs.readFileSync(process.argv[1])), b = JSON.parse(fs.readFileSync(process.argv[2]));
    if (a.length !== b.length) { console.log("len"); process.exit(0); }
    let d = 0, n = 0;
    for (let i = 0; i < a.length; i++) { d += (a[i] - b[i]) ** 2; n += b[i] ** 2; }
    console.log(Math.sqrt(d / n).toExponential(3));' "$1" "$2"
}
within() { [ "$1" != len ] && node -e "process.exit(+process.argv[1] <= +process.argv[2] ? 0 : 1)" "$1" "$2"; }
same_prefix() { paste -d' ' "$1" "$2" | awk '$1 != $2 {print NR - 1; f = 1; exit} END {if (!f) print NR}'; }
# With B (build dir), P (prompt ids) and N (tokens) set: sol_both_modes M.gguf PREFIX writes
# Sol's greedy ids and last-prompt logits in both modes (PREFIX.exact.*, PREFIX.llamacpp.*);
# peer_job M.gguf PREFIX prints the llamacpp_ref.mjs job (and a comma) for PREFIX.ref.*;
# verdict COND LINE prints "ok   LINE" or "FAIL LINE" and counts into pass / fail.
sol_both_modes() {
  local mode
  for mode in exact llamacpp; do
    SOL_CPU_ATTN=$mode "$B/tools/sol-generate" -m "$1" --prompt-tokens "$P" -n "$N" --temp 0 \
      --tokens --threads 2 --logits "$2.$mode.json" >"$2.$mode.ids" 2>"$2.err" || { cat "$2.err"; exit 1; }
  done
}
peer_job() { printf '{"model":"%s","tokens":[%s],"n":%s,"out":"%s.ref.ids","logits":"%s.ref.json"},' "$1" "$P" "$N" "$2" "$2"; }
verdict() {
  if [ "$1" = 1 ]; then echo "ok   $2"; pass=$((pass + 1)); else echo "FAIL $2"; fail=$((fail + 1)); fi
}
# peer_workdir sets work to a scratch folder (PEER_WORK keeps one for inspection, else it goes
# at exit); peer_run_jobs JOBS runs llama.cpp on peer_job's objects (a trailing comma allowed).
peer_workdir() {
  work=${PEER_WORK:-$(mktemp -d)}
  [ -n "${PEER_WORK:-}" ] || trap 'rm -rf "$work"' EXIT
  mkdir -p "$work"
}
peer_run_jobs() {
  echo "[${1%,}]" >"$work/jobs.json"
  node "$peer/llamacpp_ref.mjs" "$work/jobs.json"
}
