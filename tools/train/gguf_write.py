"""gguf_write: writes a GGUF v3 file (metadata, then aligned tensor data) as llama.cpp reads it."""
import struct

import numpy as np

ALIGN = 32
U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9
TYPES = {np.float32: 0, np.float16: 1}


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(kind, v):
    if kind == U32:
        return struct.pack("<I", v)
    if kind == I32:
        return struct.pack("<i", v)
    if kind == F32:
        return struct.pack("<f", v)
    if kind == BOOL:
        return struct.pack("<?", v)
    if kind == STR:
        return _str(v)
    raise ValueError(kind)


def write(path, kvs, tensors):
    """kvs: [(key, kind, value)] where an array is (key, (ARR, elem_kind), list);
    tensors: [(name, numpy array)] in C order; GGUF's ne is the shape reversed."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for key, kind, v in kvs:
        out += _str(key)
        if isinstance(kind, tuple):
            out += struct.pack("<IIQ", ARR, kind[1], len(v))
            for x in v:
                out += _value(kind[1], x)
        else:
            out += struct.pack("<I", kind) + _value(kind, v)
    offset, blobs = 0, []
    for name, a in tensors:
        a = np.ascontiguousarray(a)
        out += _str(name) + struct.pack("<I", a.ndim)
        out += b"".join(struct.pack("<Q", d) for d in reversed(a.shape))
        out += struct.pack("<IQ", TYPES[a.dtype.type], offset)
        blobs.append(a.tobytes())
        offset += (len(blobs[-1]) + ALIGN - 1) // ALIGN * ALIGN
    out += b"\0" * (-len(out) % ALIGN)
    with open(path, "wb") as f:
        f.write(out)
        for b in blobs:
            f.write(b + b"\0" * (-len(b) % ALIGN))
