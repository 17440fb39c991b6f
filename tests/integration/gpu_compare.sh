#!/usr/bin/env bash
# Promise: the comparisons of a GPU run (tests/gpu/compare.py, which run.sh uses where the GPU
# machine has no node) pass what agrees and fail what does not: ids with a required leading
# match, logits against a relative-L2 limit (NaN fails), ncu's CSV summed per kernel family.
# Also that the GPU scripts parse (bash -n), since no GPU runs them here.
set -euo pipefail
S=${SOL_SOURCE:?}
C="python3 $S/tests/gpu/compare.py"
fail() { echo "FAIL: $*" >&2; exit 1; }
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
for f in run.sh bundle.sh bare_root.sh; do bash -n "$S/tests/gpu/$f" || fail "$f does not parse"; done
printf '1\n2\n3\n' >"$w/a"; printf '1\n2\n4\n' >"$w/b"
$C ids "$w/a" "$w/a" >/dev/null || fail "equal ids refused"
$C ids "$w/a" "$w/b" --need 2 >/dev/null || fail "2 leading ids of 2 needed refused"
if $C ids "$w/a" "$w/b" >/dev/null; then fail "ids that differ at 3 passed"; fi
echo '[1.0, 2.0, 3.0]' >"$w/x.json"; echo '[1.0, 2.0, 3.001]' >"$w/y.json"
echo '[1.0, NaN, 3.0]' >"$w/n.json"; echo '[1.0, 2.0]' >"$w/s.json"
$C logits "$w/y.json" "$w/x.json" --limit 1e-3 >/dev/null || fail "logits 2.7e-4 apart refused at 1e-3"
if $C logits "$w/y.json" "$w/x.json" --limit 1e-5 >/dev/null; then fail "logits 2.7e-4 apart passed 1e-5"; fi
if $C logits "$w/n.json" "$w/x.json" --limit 1 >/dev/null; then fail "NaN logits passed"; fi
if $C logits "$w/s.json" "$w/x.json" --limit 1 >/dev/null 2>&1; then fail "different vocabularies passed"; fi
cat >"$w/k.csv" <<'CSV'
==PROF== Connected to process 1
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","b","h","void k_gemv_q<4>(const void *, int)","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","s","gpu__time_duration.sum","usecond","12.50"
"1","1","b","h","k_rmsnorm(const float *, float *)","1","7","(128, 1, 1)","(8, 1, 1)","0","9.0","s","gpu__time_duration.sum","nsecond","2,500"
"2","1","b","h","k_attention_split(...)","1","7","(128, 1, 1)","(8, 1, 1)","0","9.0","s","gpu__time_duration.sum","usecond","10.00"
CSV
out=$($C kernels "$w/k.csv") || fail "kernels: $out"
grep -Eq '^GEMV .* 1 +12\.5 +50\.0%$' <<<"$out" || fail "GEMV row: $out"
grep -Eq '^norms, rope, elementwise, embedding +1 +2\.5 +10\.0%$' <<<"$out" || fail "norm row: $out"
grep -Eq '^all +3 +25\.0$' <<<"$out" || fail "total: $out"
rc=0; $C logits "$w/nothing.json" "$w/x.json" --limit 1 2>"$w/err" || rc=$?
[ "$rc" = 2 ] && grep -q "^compare.py: .*nothing.json" "$w/err" || fail "a missing file: rc $rc, $(cat "$w/err")"
echo 'no rows' >"$w/e.csv"
if $C kernels "$w/e.csv" >/dev/null; then fail "an empty ncu output passed"; fi
echo "gpu_compare: ok"
