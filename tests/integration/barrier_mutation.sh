#!/usr/bin/env bash
# Promise: every barrier of the CUDA kernels (each __syncthreads() / __syncwarp() in
# worker/backend/cuda/*.cu and *.cuh) is needed by some test: removed one at a time (the
# emulation's SOL_EMU_DROP_BARRIER=file:line, no rebuild), the cuda-emu tests fail for each.
# A barrier whose removal no test notices is either unnecessary (remove it, say why) or needs a
# test shape that depends on it. The run counts only if the tests pass with no barrier dropped,
# and a removal only if the emulation reports that it skipped that very barrier (so a stale line
# number or a typo cannot pass as a killed mutation).
# The sanitized build runs the emulation several times slower: with 9 barriers the run took
# 409 s in a plain build (full suite at -j2) and 920 s alone under ASan (2026-12-05); the limit
# leaves room for the ASan suite's other tests beside it. Stopping each binary at its first
# failure (CMOCKA_TEST_ABORT below) brought the plain run to 274 s beside other work (2026-12-06);
# with the int8 GEMMs' 6 barriers (15 in all) 360-390 s; trying each kernel file's barriers on its
# own test first (the table below) brought it to 235 s alone (2026-12-06); 18 barriers and three
# more emulated tests in test_cuda_emu_ops: 254 s alone (2026-12-07), the limit raised with them.
# ctest-timeout: 2700
set -euo pipefail
B=${SOL_BUILD:?}; S=${SOL_SOURCE:?}
. "$S/tests/skip.sh"
T_DIR=$(mktemp -d); trap 'rm -rf "$T_DIR"' EXIT
# The tests in the order they are tried, cheapest first: the emulation's own (its kernels use
# reduce.cuh), the kernels against the CPU backend, the backend against the CPU backend (whole
# models, cuda_emu_model.sh, add nothing today: these kill every barrier in seconds).
tests=("$B/tests/test_cuda_emu" "$B/tests/test_cuda_emu_ops" "$B/tests/test_cuda_backend")
for t in "${tests[@]}"; do
  [ -x "$t" ] || skip_test "$t is not built"
done
export SOL_EMU_SEED=${SOL_EMU_SEED:-1}
# cmocka stops a test binary at its first failed test: a removal needs one failure, and the
# remaining tests of that binary (most of a minute under the emulation) would tell nothing more.
export CMOCKA_TEST_ABORT=1

# Runs the tests (stopping at the first that fails); 0 if they all pass, 1 if one fails, 2 if one
# ran past its limit (a hang or a slow machine is no killed mutation: 900 s a binary, since the
# sanitized suite runs test_cuda_emu_ops several times slower than its ~150 s).
run_tests() {
  local log=$1 t rc
  : >"$log"
  for t in "${tests[@]}"; do
    rc=0; timeout 900 "$t" >>"$log" 2>&1 || rc=$?
    if [ "$rc" = 124 ]; then echo "TIMEOUT: $t ran past 900 s" >>"$log"; return 2; fi
    [ "$rc" = 0 ] || return 1
  done
  return 0
}

# The barriers: file:line of each call (a mention in a comment does not count).
mapfile -t barriers < <(cd "$S/worker/backend/cuda" &&
  grep -nE '__syncthreads\(\)|__syncwarp\(' -- *.cu *.cuh |
  sed -E 's#/\*.*\*/##' | grep -E '__syncthreads\(\)|__syncwarp\(' | cut -d: -f1,2)
[ "${#barriers[@]}" -gt 0 ] || { echo "FAIL: no barrier found in worker/backend/cuda"; exit 1; }
echo "barriers: ${barriers[*]}"

rc=0; run_tests "$T_DIR/none.log" || rc=$?
if [ "$rc" != 0 ]; then
  echo "FAIL: the tests fail with every barrier in place (SOL_EMU_SEED=$SOL_EMU_SEED)"
  tail -20 "$T_DIR/none.log"
  exit 1
fi
echo "ok   with every barrier, the tests pass"

# The kernel tests that a file's barriers should fail, tried alone first, each filter of an entry
# in turn until one fails (test_cuda_emu_ops runs its tests in order, up to 80 s under the
# emulation before the later ones; test_mma_split fails within its first case for each of
# k_mma.cu's barriers, the stages' and the split-K flag's); when they all pass the whole sequence
# still runs, so a table entry can only save time, never pass a barrier.
declare -A first=([k_mmq.cu]=test_mmq_gemm [k_mma.cu]='test_mma_split test_mma_gemm' [k_gemv.cu]='test_gemv_*' [k_argmax.cu]=test_argmax
                  [k_rope.cu]=test_qk_norm_rope
                  [k_flash.cu]=test_flash_attention [k_attention.cu]='test_*attention*')
fail=0
for b in "${barriers[@]}"; do
  log="$T_DIR/drop-${b//[:\/]/_}.log"
  f=${first[${b%%:*}]:-} killed=1 rc=0
  read -ra filters <<<"$f" # split on spaces, never globbed: the filters are cmocka's patterns
  for one in "${filters[@]}"; do
    rc=0; SOL_EMU_DROP_BARRIER=$b SOL_TEST_FILTER=$one timeout 300 \
      "$B/tests/test_cuda_emu_ops" >"$log" 2>&1 || rc=$?
    [ "$rc" != 0 ] && [ "$rc" != 124 ] && break
  done
  if [ -n "$f" ] && [ "$rc" != 0 ] && [ "$rc" != 124 ]; then
    : # its own test failed: the log is checked below like any other
  else
    rc=0; SOL_EMU_DROP_BARRIER=$b run_tests "$log" || rc=$?
    [ "$rc" = 0 ] && killed=0
    [ "$rc" = 2 ] && killed=timeout
  fi
  if [ "$killed" = timeout ]; then
    echo "FAIL $b: removed, and a test ran past its limit ($(grep -m1 TIMEOUT "$log"))"
    fail=1
  elif [ "$killed" = 0 ]; then
    echo "FAIL $b: removed, and every test still passes"
    fail=1
  elif ! grep -q "cuda_emu: SOL_EMU_DROP_BARRIER: dropping the barrier at $b\$" "$log"; then
    echo "FAIL $b: the tests failed but the emulation never reached that barrier:"
    grep -m3 -E 'cuda_emu|FAILED|ERROR' "$log" || tail -3 "$log"
    fail=1
  else
    why=$(grep -m1 -E '^\[  FAILED  \] [a-z_]+$|cuda_emu: [a-z]|ERROR:' "$log" | grep -v DROP || true)
    echo "ok   $b: removed, the tests fail (${why:-no message})"
  fi
done

# The self-check of the mechanism: a place with no barrier is reported, not silently survived.
SOL_EMU_DROP_BARRIER=reduce.cuh:1 "$B/tests/test_cuda_emu" >"$T_DIR/typo.log" 2>&1 || true
if grep -q "SOL_EMU_DROP_BARRIER=reduce.cuh:1: no barrier at that place ran" "$T_DIR/typo.log" &&
  ! grep -q "dropping the barrier" "$T_DIR/typo.log"; then
  echo "ok   a place with no barrier (reduce.cuh:1) is reported as such"
else
  echo "FAIL SOL_EMU_DROP_BARRIER=reduce.cuh:1 was not reported as naming no barrier"
  fail=1
fi
exit $fail
