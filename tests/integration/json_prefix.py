"""json_prefix: whether a text is a JSON value satisfying a schema (complete=True), or a prefix of
one (complete=False: an output cut by max_tokens must still be on a valid path). A small
recursive-descent parser independent of Sol's grammar matcher; it knows the schema keywords the
structured-output tests use: type object/array/string/integer/number/boolean/null, properties,
required, additionalProperties, enum, maxLength, maxItems, items, $ref to #/$defs. Imported by
structured_outputs.sh."""
import json


class Truncated(Exception):
    """The text ended inside a value: fine for a prefix."""


class P:
    def __init__(self, text, root):
        self.t, self.i, self.root = text, 0, root

    def peek(self):
        if self.i >= len(self.t):
            raise Truncated
        return self.t[self.i]

    def ws(self):
        while self.i < len(self.t) and self.t[self.i] in " \t\n\r":
            self.i += 1

    def take(self, ch):
        if self.peek() != ch:
            raise AssertionError(f"want {ch!r} at {self.i}: {self.t!r}")
        self.i += 1

    def closes(self, close):
        """After a member: True at the container's closing bracket, False after a comma."""
        self.ws()
        c = self.peek()
        self.i += 1
        if c == close:
            return True
        assert c == ",", f"want , or {close} at {self.i - 1}: {self.t!r}"
        return False

    def resolve(self, s):
        while s and "$ref" in s:
            s = self.root["$defs"][s["$ref"].split("/")[-1]]
        return s or {}

    def string(self, allowed=None, max_len=None):
        """A string; `allowed`: the values it may take (its prefix must start one of them)."""
        self.take('"')
        out = ""
        while True:
            c = self.peek()
            self.i += 1
            if c == '"':
                break
            if c == "\\":
                e = self.peek()
                if e == "u":
                    h = self.t[self.i + 1:self.i + 5]
                    if len(h) < 4:
                        raise Truncated
                    c, self.i = chr(int(h, 16)), self.i + 5
                else:
                    c = json.loads(f'"\\{e}"')
                    self.i += 1
            out += c
            if allowed is not None and not any(a.startswith(out) for a in allowed):
                raise AssertionError(f"{out!r} starts none of {allowed}")
            if max_len is not None and len(out) > max_len:
                raise AssertionError(f"{out!r} longer than {max_len}")
        if allowed is not None and out not in allowed:
            raise AssertionError(f"{out!r} not one of {allowed}")
        return out

    def number(self, integer):
        j = self.i
        while self.i < len(self.t) and self.t[self.i] in "+-0123456789.eE":
            self.i += 1
        num = self.t[j:self.i]
        if integer and any(c in num for c in ".eE+"):
            raise AssertionError(f"{num} is not an integer")
        if self.i == len(self.t):
            raise Truncated  # digits may still follow
        json.loads(num)  # ValueError on a malformed number

    def value(self, s):
        s = self.resolve(s)
        self.ws()
        c = self.peek()
        ty = s.get("type")
        if "enum" in s:
            if not all(isinstance(e, str) for e in s["enum"]):
                raise AssertionError("only string enums are checked here")
            return self.string(allowed=s["enum"])
        if c == "{":
            assert ty in (None, "object"), (ty, self.t)
            return self.obj(s)
        if c == "[":
            assert ty in (None, "array"), (ty, self.t)
            return self.arr(s)
        if c == '"':
            assert ty in (None, "string"), (ty, self.t)
            return self.string(max_len=s.get("maxLength"))
        if c in "-0123456789":
            assert ty in (None, "integer", "number"), (ty, self.t)
            return self.number(ty == "integer")
        for lit, t in (("true", "boolean"), ("false", "boolean"), ("null", "null")):
            if lit.startswith(self.t[self.i:self.i + len(lit)]) and c == lit[0]:
                assert ty in (None, t), (ty, self.t)
                if len(self.t) - self.i < len(lit):
                    raise Truncated
                self.i += len(lit)
                return
        raise AssertionError(f"no value at {self.i}: {self.t!r}")

    def obj(self, s):
        props = s.get("properties", {})
        closed = s.get("additionalProperties", True) is False
        self.take("{")
        seen = set()
        self.ws()
        if self.peek() == "}":
            self.i += 1
        else:
            while True:
                self.ws()
                key = self.string(allowed=sorted(props) if closed else None)
                assert key not in seen, f"duplicate key {key}"
                seen.add(key)
                self.ws()
                self.take(":")
                self.value(props.get(key, {}))
                if self.closes("}"):
                    break
        missing = set(s.get("required", [])) - seen
        assert not missing, f"missing required {missing}: {self.t!r}"

    def arr(self, s):
        self.take("[")
        n = 0
        self.ws()
        if self.peek() == "]":
            self.i += 1
            return
        while True:
            n += 1
            assert n <= s.get("maxItems", n), f"more than {s['maxItems']} items"
            self.value(s.get("items", {}))
            if self.closes("]"):
                return


def check(text, schema, complete):
    """Raises AssertionError unless `text` is a valid instance (complete) or a valid prefix."""
    p = P(text, schema)
    try:
        p.value(schema)
        p.ws()
        assert p.i == len(text), f"trailing text at {p.i}: {text!r}"
    except Truncated:
        assert not complete, f"truncated: {text!r}"
