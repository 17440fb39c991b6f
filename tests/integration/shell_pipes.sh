#!/usr/bin/env bash
# Promise: no shell script under set -o pipefail pipes a producer into an early-exiting reader
# (grep -q, grep -m, head): the reader may exit before the producer's last write, the producer
# dies of SIGPIPE (141), pipefail fails the line, and the check fails by chance. Bash's own echo
# writes a multi-line value one line per write(), so `echo "$x" | grep -q` is such a race; CI
# failed cluster_tp on it once. Use `grep -q pat <<<"$x"` (a here-string is written whole first).
set -euo pipefail
cd "${SOL_SOURCE:?}"
python3 - <<'PY'
import re, subprocess, sys
early = re.compile(r"\|\s*(grep\s+-[A-Za-z]*[qm]|head\b)")
files = subprocess.run(["git", "ls-files", "*.sh", "scripts/*", ".ci/*", "deploy/*"],
                       capture_output=True, text=True, check=True).stdout.split()
# a script is under pipefail if it says so or sources tests/integration/lib.sh, which does (a
# script that only sourced it escaped this check until compose_stack failed with 141 in CI)
assign = re.compile(r"^\s*(local\s+)?\w+=\$\(")
def offenders(path, text):
    if "pipefail" not in text and not re.search(r"^\.\s.*lib\.sh", text, re.M):
        return []
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        # inside $( ... ) of a message the status is ignored; a line's own pipeline counts, and
        # so does an assignment's $( ... ) (set -e fails on its status)
        if early.search(code) and "fail \"" not in code.split("|", 1)[0] and (
                "$(" not in code or assign.match(code)):
            out.append(f"{path}:{n}: {line.strip()}")
    return out
# the check must be able to fail: it finds the race in a sample
sample = 'set -o pipefail\necho "$out" | grep -q "x" || fail "no x"\n'
assert offenders("sample.sh", sample), "the check does not see a known race"
assert offenders("s.sh", '. "$(dirname "$0")/lib.sh"\nx=$(ps -q | head -1)\n'), "nor one in lib.sh's"
bad = []
for f in files:
    if f == "tests/integration/shell_pipes.sh":  # its own pattern and sample
        continue
    try:
        bad += offenders(f, open(f, encoding="utf-8").read())
    except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
        pass
for b in bad:
    print("FAIL", b)
if bad:
    sys.exit(1)
print(f"ok   [shell_pipes]: {len(files)} scripts, no pipe into an early-exiting reader under pipefail")
PY
