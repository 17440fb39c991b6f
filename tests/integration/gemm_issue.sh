# Promise: bench/gpu_model.py's MMA_ISSUE (the F16 tile GEMM's instructions and HMMAs per stage,
# per weight type and tile, from which the model takes its batch and prefill efficiencies) is
# what bench/gemm_issue.py counts in k_mma.cu's sm_90 SASS today, so a kernel change that moves
# the counts fails here until the model is recounted; and the check fails on a model whose count
# is one instruction off.
set -euo pipefail
S=${SOL_SOURCE:?}
. "$S/tests/skip.sh"
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
  skip_test "no nvcc (the CUDA toolkit is not installed)"
export PATH=$PATH:/usr/local/cuda/bin
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
rc=0; python3 "$S/bench/gemm_issue.py" --check >"$work/out" 2>&1 || rc=$?
[ $rc -eq 2 ] && skip_test "$(tail -1 "$work/out")"
cat "$work/out"
[ $rc -eq 0 ] || { echo "FAIL: MMA_ISSUE is not the SASS's count (rc $rc)"; exit 1; }
echo "ok   MMA_ISSUE matches the SASS"
# one count off by one instruction: the check must fail and name it
sed -E '0,/"Q4_K": \(\(([0-9]+),/s//"Q4_K": ((\1 + 1,/' "$S/bench/gpu_model.py" >"$work/gpu_model.py"
cmp -s "$S/bench/gpu_model.py" "$work/gpu_model.py" && { echo "FAIL: the probe edit changed nothing"; exit 1; }
rc=0; python3 "$S/bench/gemm_issue.py" --check --model "$work/gpu_model.py" >"$work/bad" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "Q4_K 64x64/64: the SASS counts" "$work/bad" ||
  { cat "$work/bad"; echo "FAIL: a model one instruction off passed (rc $rc)"; exit 1; }
echo "ok   a model one instruction off fails the check"
