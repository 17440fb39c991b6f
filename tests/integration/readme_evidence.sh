#!/usr/bin/env bash
# Promise: every row of the README's status table names what checks it ("checked by"), and every
# ctest name or script named there exists (a renamed or deleted test cannot leave a claim
# pointing at nothing). ctest names: unit/ROOM/NAME, integration/NAME, e2e/NAME, fuzz/NAME; a
# trailing * matches a family (integration/cluster_*).
set -euo pipefail
S=${SOL_SOURCE:?}; B=${SOL_BUILD:?}
fail() { echo "FAIL [readme_evidence]: $*" >&2; exit 1; }
ctest --test-dir "$B" -N | sed -n 's/^ *Test *#[0-9]*: //p' >"$B/ctest-names.txt"
[ "$(wc -l <"$B/ctest-names.txt")" -gt 50 ] || fail "ctest lists too few tests: the scan is broken"
python3 - "$S/README.md" "$B/ctest-names.txt" "$S" <<'PY' || fail "see above"
import fnmatch, os, re, sys
readme, names, src = open(sys.argv[1]).read().split("\n"), open(sys.argv[2]).read().split(), sys.argv[3]
head = [i for i, l in enumerate(readme) if l.startswith("| part | state |")]
assert head, "no status table"
rows, bad = 0, []
for l in readme[head[0] + 2:]:
    if not l.startswith("| "):
        break
    cells = [c.strip() for c in l.strip("|").split(" | ")]
    rows += 1
    if len(cells) < 4 or not cells[3]:
        bad.append(f"row '{cells[0][:40]}' names nothing that checks it")
        continue
    for ref in re.findall(r"`([^`]+)`", cells[3]):
        if re.match(r"^(unit|integration|e2e|fuzz)/", ref):
            if not fnmatch.filter(names, ref):
                bad.append(f"'{ref}' is no ctest test")
        elif "/" in ref or ref.startswith("."):
            path = ref.split()[0]
            if not os.path.exists(os.path.join(src, path)):
                bad.append(f"'{path}' does not exist")
for b in bad:
    print("  " + b)
assert not bad
print(f"ok   [readme_evidence]: {rows} rows, each with tests or commands that exist")
PY
