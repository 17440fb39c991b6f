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
