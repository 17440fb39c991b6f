#!/usr/bin/env bash
# Promise: the router's status page (/ui, also /) renders in a real browser (headless Chromium)
# and names every live worker with its pool and state, filled from /admin/workers and /metrics;
# it loads nothing from elsewhere; with API keys configured it shows no worker until given a key.
# SOL_SCREENSHOT=FILE also saves a screenshot of the page (docs/status-page.png is one).
. "$(dirname "$0")/../integration/lib.sh"
CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROME" ]; then
  skip_test "chromium is not installed (run scripts/setup)"
fi
browse() { # browse URL [flags]: the DOM after 8 s of virtual time (the page polls every 2 s)
  local url=$1; shift
  timeout 60 "$CHROME" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --user-data-dir="$T_DIR/chrome" --virtual-time-budget=8000 "$@" "$url" 2>>"$T_DIR/chrome.log"
}

start_router
start_worker fast-w1 fast 5 400
start_worker fast-w2 fast 5 400
start_worker precise-w1 precise 5 400
for w in fast-w1 fast-w2 precise-w1; do wait_worker $w; done
for i in 1 2 3; do post /v1/completions '{"model":"fast","prompt":"hello","max_tokens":8}' >/dev/null; done

browse "$BASE/ui" --dump-dom >"$T_DIR/dom.html"
for w in fast-w1 fast-w2 precise-w1; do
  grep -q "data-worker=\"$w\"" "$T_DIR/dom.html" || fail "the page does not name worker $w: $(head -c 600 "$T_DIR/dom.html")"
done
python3 - "$T_DIR/dom.html" <<'PYEOF' || fail "page content"
import re, sys
d = open(sys.argv[1]).read()
rows = re.findall(r'<tr data-worker="([^"]+)"><td>[^<]*</td><td class="l">([^<]+)</td><td class="l"><span class="state (\w+)"', d)
assert sorted(rows) == [("fast-w1", "fast", "ready"), ("fast-w2", "fast", "ready"), ("precise-w1", "precise", "ready")], rows
live = re.search(r'id="c_live">([^<]*)<', d).group(1)
assert live == "3 / 3", live
assert "updated <span id=\"updated\">never" not in d, "never updated"
assert not re.search(r'<(script|link|img)[^>]+(src|href)="?https?:', d), "external resource"
PYEOF
[ -z "${SOL_SCREENSHOT:-}" ] ||
  browse "$BASE/" --screenshot="$SOL_SCREENSHOT" --window-size=1280,860 --hide-scrollbars >/dev/null
ok "status page names all 3 live workers with pool and state"

# With API keys: the page's data needs one; without it the page asks and shows no worker.
kill "$ROUTER_PID"; wait "$ROUTER_PID" 2>/dev/null || true
echo "sk-page-test" >"$T_DIR/keys"
HTTP_PORT=$(free_port); BASE="http://127.0.0.1:$HTTP_PORT"
start_router --set router.http.api_keys_file="$T_DIR/keys"
browse "$BASE/ui" --dump-dom >"$T_DIR/dom-keys.html"
grep -q "needs an API key" "$T_DIR/dom-keys.html" || fail "keyed router: the page did not ask for a key"
! grep -q '<tr data-worker="[^$]' "$T_DIR/dom-keys.html" || fail "keyed router: workers shown without a key"
ok "with API keys the page shows no worker data until given a key"
