# oai_post: the one HTTP helper of the Python parts of the integration tests: POST a JSON body to
# the router and return (status, JSON body) - or, streamed, (status, list of SSE JSON events).
import json
import urllib.error
import urllib.request


def post(base, path, body, stream=False, timeout=120):
    req = urllib.request.Request(base + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            if not stream:
                return r.status, json.load(r)
            lines = r.read().decode().split("\n")
            return r.status, [json.loads(l[6:]) for l in lines
                              if l.startswith("data: ") and l != "data: [DONE]"]
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
