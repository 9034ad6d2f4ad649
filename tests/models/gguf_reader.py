"""A small GGUF reader for the reference forward passes: metadata (every value type of GGUF v2/v3)
and tensors as NumPy arrays, written from the GGUF specification (ggml's docs/gguf.md), sharing no
code with tokenloom's reader. Tensors (F32, F16, BF16, Q8_0 dequantized) are returned as float64
arrays shaped like a PyTorch weight: a GGUF tensor with ne = [n_in, n_out] is stored row-major as
n_out rows of n_in values, i.e. the (out_features, in_features) matrix of nn.Linear."""
import struct

import numpy as np

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}
_F32, _F16, _Q8_0, _BF16 = 0, 1, 8, 30


class GGUF:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.off = 0
        if self._take(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        version = self._scalar("<I")
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version}")
        n_tensors, n_kv = self._scalar("<Q"), self._scalar("<Q")
        self.kv = {}
        self.raw_kv = {}  # key -> (type, raw value bytes), for write_gguf
        for _ in range(n_kv):
            key = self._string()
            vtype = self._scalar("<I")
            start = self.off
            self.kv[key] = self._value(vtype)
            self.raw_kv[key] = (vtype, self.buf[start:self.off])
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._scalar("<I")
            ne = [self._scalar("<Q") for _ in range(n_dims)]
            ttype, offset = self._scalar("<I"), self._scalar("<Q")
            infos.append((name, ne, ttype, offset))
        align = self.kv.get("general.alignment", 32)
        data = (self.off + align - 1) // align * align
        self.tensors = {name: (ne, ttype, data + offset) for name, ne, ttype, offset in infos}

    def _take(self, n):
        b = self.buf[self.off:self.off + n]
        if len(b) != n:
            raise ValueError("truncated GGUF")
        self.off += n
        return b

    def _scalar(self, fmt):
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0]

    def _string(self):
        return self._take(self._scalar("<Q")).decode("utf-8")

    def _value(self, vtype):
        if vtype in _SCALARS:
            return self._scalar(_SCALARS[vtype])
        if vtype == 8:
            return self._string()
        if vtype == 9:
            etype, n = self._scalar("<I"), self._scalar("<Q")
            return [self._value(etype) for _ in range(n)]
        raise ValueError(f"unknown GGUF value type {vtype}")

    def has(self, name):
        return name in self.tensors

    def tensor(self, name):
        """float64 array, shape reversed from ne (row-major)."""
        ne, ttype, off = self.tensors[name]
        n = int(np.prod(ne))
        shape = tuple(reversed(ne))
        if ttype == _F32:
            a = np.frombuffer(self.buf, np.float32, n, off)
        elif ttype == _F16:
            a = np.frombuffer(self.buf, np.float16, n, off)
        elif ttype == _Q8_0:  # blocks of 32: an f16 scale d, then 32 int8 q; value = d * q
            blocks = np.frombuffer(self.buf, np.uint8, n // 32 * 34, off).reshape(-1, 34)
            d = blocks[:, :2].copy().view(np.float16).astype(np.float64)
            a = (d * blocks[:, 2:].copy().view(np.int8).astype(np.float64)).reshape(-1)
        elif ttype == _BF16:
            bits = np.frombuffer(self.buf, np.uint16, n, off).astype(np.uint32) << 16
            a = bits.view(np.float32)
        else:
            raise ValueError(f"{name}: tensor type {ttype} not handled by the reference")
        return a.astype(np.float64).reshape(shape)


_TYPE_BYTES = {_F32: 4, _F16: 2, _BF16: 2}


def write_gguf(path, src, drop_keys=(), set_keys=None, drop_tensors=(), reshape=None,
               rename=None, add_zeros=None):
    """Writes a copy of the GGUF `src` (a GGUF object) with edits, for the bad-file tests:
    drop_keys, set_keys {key: ("u32" | "f32" | "bool" | "str", value)}, drop_tensors,
    reshape {name: new ne} (the data is cut or zero-padded to the new size) and rename
    {old name: new name}, add_zeros {name: ne} (new F32 tensors of zeros). Tensors must be F32,
    F16 or BF16."""
    set_keys = set_keys or {}
    reshape = reshape or {}
    rename = rename or {}
    enc = {"u32": (4, "<I"), "f32": (6, "<f"), "bool": (7, "<?")}
    kvs = [(k, v) for k, v in src.raw_kv.items() if k not in drop_keys and k not in set_keys]
    for k, (kind, v) in set_keys.items():
        if kind == "str":
            b = v.encode()
            kvs.append((k, (8, struct.pack("<Q", len(b)) + b)))
        else:
            vtype, fmt = enc[kind]
            kvs.append((k, (vtype, struct.pack(fmt, v))))
    tensors = []
    for name, (ne, ttype, off) in src.tensors.items():
        if name in drop_tensors:
            continue
        nbytes = int(np.prod(ne)) * _TYPE_BYTES[ttype]
        data = src.buf[off:off + nbytes]
        if name in reshape:
            ne = reshape[name]
            want = int(np.prod(ne)) * _TYPE_BYTES[ttype]
            data = data[:want] + bytes(max(0, want - len(data)))
        tensors.append((rename.get(name, name), ne, ttype, data))
    for name, ne in (add_zeros or {}).items():
        tensors.append((name, ne, _F32, bytes(4 * int(np.prod(ne)))))
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for k, (vtype, raw) in kvs:
        kb = k.encode()
        out += struct.pack("<Q", len(kb)) + kb + struct.pack("<I", vtype) + raw
    offset = 0
    for name, ne, ttype, data in tensors:
        nb = name.encode()
        out += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne))
        out += b"".join(struct.pack("<Q", x) for x in ne) + struct.pack("<IQ", ttype, offset)
        offset += (len(data) + 31) // 32 * 32
    out += bytes((-len(out)) % 32)
    for _, _, _, data in tensors:
        out += data + bytes((-len(data)) % 32)
    with open(path, "wb") as f:
        f.write(out)
