#!/usr/bin/env bash
# Promise (issue 28): a test that cannot run is reported as Skipped, never as Passed, and fails
# under CI. Every script test is registered with SKIP_RETURN_CODE 77; skip_test exits 77 outside
# CI and 1 under CI=true; and ctest itself names a test that exits 77 as Skipped.
set -euo pipefail
S=${SOL_SOURCE:?}
B=${SOL_BUILD:?}
fail() { echo "FAIL [skips_visible]: $*" >&2; exit 1; }
ctest --test-dir "$B" --show-only=json-v1 >"$B/ctest-tests.json"
python3 - "$B/ctest-tests.json" <<'PY' || fail "a script test without SKIP_RETURN_CODE 77"
import json, sys
tests = json.load(open(sys.argv[1]))["tests"]
scripts = [t for t in tests if t["name"].split("/")[0] in ("integration", "e2e")]
assert len(scripts) > 40, len(scripts)
for t in scripts:
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    assert str(props.get("SKIP_RETURN_CODE")) == "77", (t["name"], props.get("SKIP_RETURN_CODE"))
print(f"ok   [skips_visible]: {len(scripts)} script tests skip with 77")
PY
rc=0; (unset CI; . "$S/tests/skip.sh"; skip_test "probe") >/dev/null || rc=$?
[ "$rc" = 77 ] || fail "skip_test outside CI exited $rc (want 77)"
rc=0; (export CI=true; . "$S/tests/skip.sh"; skip_test "probe") 2>/dev/null || rc=$?
[ "$rc" = 1 ] || fail "skip_test under CI=true exited $rc (want 1)"
echo "ok   [skips_visible]: skip_test exits 77, and 1 under CI=true"
# ctest's own report of a 77 (a throwaway project with one such test)
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
printf 'cmake_minimum_required(VERSION 3.16)\nproject(p NONE)\nenable_testing()\n%s\n%s\n' \
    'add_test(NAME s COMMAND sh -c "exit 77")' \
    'set_tests_properties(s PROPERTIES SKIP_RETURN_CODE 77)' >"$w/CMakeLists.txt"
cmake -S "$w" -B "$w/b" >/dev/null
out=$(ctest --test-dir "$w/b" 2>&1 || true)
grep -q '\*\*\*Skipped' <<<"$out" || fail "ctest did not report the 77 as Skipped: $out"
echo "ok   [skips_visible]: ctest lists an exit 77 as Skipped"
