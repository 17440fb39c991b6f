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
# The llama.cpp CPU builds the tests hold Sol to. llama.cpp's loader takes the best of its 14 x86
# builds for the host, and their float orders differ by register width (docs/backend.md, "The
# llama.cpp-compatible mode"); Sol's compatible mode reproduces the AVX2 builds on its avx2 ISA
# and the AVX-512 ones on avx512. So the tests pin llama.cpp (SOL_PEER_CPU, llamacpp_ref.mjs) and
# Sol (SOL_CPU_ISA) together: haswell / avx2 on every host (CI's hosts all run AVX2), and where the
# host runs both llama.cpp's skylakex build and Sol's avx512 path, skylakex / avx512 for every
# other model (peer_next), so one run checks both orders in the time of one.
peer_builds=(haswell)
if awk '/^flags/ {f = " " $0 " "; exit}
        END {exit !(f ~ / avx512f / && f ~ / avx512cd / && f ~ / avx512bw / && f ~ / avx512dq / &&
                    f ~ / avx512vl / && f ~ / avx512_vnni /)}' /proc/cpuinfo; then
  peer_builds+=(skylakex)
fi
peer_at=0
# peer_next: the next model's llama.cpp build (pb) and the Sol ISA that reproduces it (pisa).
peer_next() {
  pb=${peer_builds[peer_at % ${#peer_builds[@]}]}
  peer_at=$((peer_at + 1))
  case $pb in haswell) pisa=avx2 ;; *) pisa=avx512 ;; esac
}
peer_next
# peer_bins BUILD: the library folder of llama.cpp pinned to BUILD (made by llamacpp_ref.mjs,
# which every test runs first), for the C peers (llamacpp_experts: SOL_PEER_BINS).
peer_bins() { echo "$peer/.pin/$1/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"; }
# With B (build dir), P (prompt ids) and N (tokens) set: sol_both_modes M.gguf PREFIX writes
# Sol's greedy ids and last-prompt logits in both modes (PREFIX.exact.*, PREFIX.llamacpp.*) on
# the current model's ISA (peer_next); peer_job M.gguf PREFIX prints the llamacpp_ref.mjs job
# (and a comma) for PREFIX.ref.* on its build;
# verdict COND LINE prints "ok   LINE" or "FAIL LINE" and counts into pass / fail.
sol_both_modes() {
  local mode
  echo "$pisa" >"$2.isa" # for later runs of the same model on the same ISA
  for mode in exact llamacpp; do
    SOL_CPU_ISA=$pisa SOL_CPU_ATTN=$mode "$B/tools/sol-generate" -m "$1" --prompt-tokens "$P" \
      -n "$N" --temp 0 --tokens --threads 2 --logits "$2.$mode.json" >"$2.$mode.ids" 2>"$2.err" ||
      { cat "$2.err"; exit 1; }
  done
}
peer_job() {
  printf '{"cpu":"%s","model":"%s","tokens":[%s],"n":%s,"out":"%s.ref.ids","logits":"%s.ref.json"},' \
    "$pb" "$1" "$P" "$N" "$2" "$2"
}
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
# Jobs name their build ("cpu"; none: haswell); one llama.cpp process per build.
peer_run_jobs() {
  local b
  echo "[${1%,}]" >"$work/jobs.json"
  for b in "${peer_builds[@]}"; do
    SOL_PEER_CPU=$b node "$peer/llamacpp_ref.mjs" "$work/jobs.json"
  done
}
