#!/usr/bin/env python3
"""Copies a GGUF file with tokenizer.chat_template set to the text of a Jinja file (added, or
replacing the existing value). Independent of tokenloom's own GGUF code: it reads the header
(GGUF v2/v3: key/value pairs, tensor infos), writes the new header and copies the tensor data
section unchanged, re-aligned. Used by the end-to-end chat template test to make model copies in a
temporary folder.

    gguf_set_template.py IN.gguf TEMPLATE.jinja OUT.gguf
"""
import struct
import sys

KEY = "tokenizer.chat_template"
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # type -> bytes


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, n):
        b = self.d[self.p:self.p + n]
        if len(b) != n:
            raise ValueError("truncated GGUF")
        self.p += n
        return b

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self):
        return self.take(self.u64())

    def value(self, t):  # raw bytes of a value of type t
        start = self.p
        if t in FIXED:
            self.take(FIXED[t])
        elif t == 8:
            self.string()
        elif t == 9:
            et, n = self.u32(), self.u64()
            for _ in range(n):
                self.value(et)
        else:
            raise ValueError("unknown GGUF value type %d" % t)
        return self.d[start:self.p]


def gguf_string(b):
    return struct.pack("<Q", len(b)) + b


def main():
    copy_with_template(*sys.argv[1:4])


def copy_with_template(src, tmpl, dst):
    data = open(src, "rb").read()
    r = Reader(data)
    if r.take(4) != b"GGUF":
        raise SystemExit("not a GGUF file")
    version, n_tensors, n_kv = r.u32(), r.u64(), r.u64()
    kvs, alignment = [], 32
    for _ in range(n_kv):
        key = r.string()
        t = r.u32()
        raw = r.value(t)
        if key == b"general.alignment":
            alignment = struct.unpack("<I", raw)[0]
        if key != KEY.encode():
            kvs.append(gguf_string(key) + struct.pack("<I", t) + raw)
    info_start = r.p
    for _ in range(n_tensors):
        r.string()
        n_dims = r.u32()
        r.take(8 * n_dims + 4 + 8)
    infos = data[info_start:r.p]
    data_start = (r.p + alignment - 1) // alignment * alignment
    text = open(tmpl, "rb").read()
    kvs.append(gguf_string(KEY.encode()) + struct.pack("<I", 8) + gguf_string(text))
    head = b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * ((-len(head)) % alignment)
    with open(dst, "wb") as f:
        f.write(head)
        f.write(data[data_start:])


if __name__ == "__main__":
    main()
