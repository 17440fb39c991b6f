"""benchlib: what the Python benchmark scripts in bench/ share (imported, not run): a free
loopback port for the processes they start."""
import json, socket


def port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def _sol_bench():
    """tools/sol-bench as a module: its verdict on a response is the one rule every Python load
    tool here counts by."""
    import importlib.machinery, importlib.util, os
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools",
                        "sol-bench")
    loader = importlib.machinery.SourceFileLoader("sol_bench", path)
    spec = importlib.util.spec_from_loader("sol_bench", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


_sb = _sol_bench()
VERDICTS = _sb.VERDICTS


def judge_sse(status, body, max_tokens):
    """The verdict ("served", "refused", "errored", "lost" or "cut") on one streamed response
    read whole: its HTTP status and de-chunked body (bytes)."""
    if status != 200:
        return _sb.refusal_or_error(status, body)
    done, error, finish, usage, chunks = False, None, None, None, 0
    for line in body.split(b"\n"):
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        event = line[5:].strip().decode(errors="replace")
        if event == "[DONE]":
            done = True
            break
        try:
            d = json.loads(event)
        except ValueError:
            return "cut"  # a torn event: the stream broke mid-write
        if "error" in d:
            error = d["error"]
            continue
        usage = d.get("usage") or usage
        for c in d.get("choices") or []:
            finish = c.get("finish_reason") or finish
            if c.get("text") or (c.get("delta") or {}).get("content"):
                chunks += 1
    return _sb.judge(done, error, finish, usage, chunks, max_tokens)[0]
