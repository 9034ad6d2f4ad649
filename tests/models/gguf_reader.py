"""A small GGUF reader for the reference forward passes: metadata (every value type of GGUF v2/v3)
and tensors as NumPy arrays, written from the GGUF specification (ggml's docs/gguf.md), sharing no
code with tokenloom's reader. Tensors of F32, F16 and BF16 are returned as float64 arrays shaped
like a PyTorch weight: a GGUF tensor with ne = [n_in, n_out] is stored row-major as n_out rows of
n_in values, i.e. the (out_features, in_features) matrix of nn.Linear."""
import struct

import numpy as np

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}
_F32, _F16, _BF16 = 0, 1, 30


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
        for _ in range(n_kv):
            key = self._string()
            self.kv[key] = self._value(self._scalar("<I"))
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
        elif ttype == _BF16:
            a = (np.frombuffer(self.buf, np.uint16, n, off).astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{name}: tensor type {ttype} not handled by the reference")
        return a.astype(np.float64).reshape(shape)
