"""tokenloom.Model: a loaded GGUF model (or llama2.c checkpoint) with its tokenizer. The model is
immutable once loaded and may be shared by several engines; it must outlive them (an Engine
keeps a reference to its Model, so this holds unless close() is called by hand)."""

import ctypes
import os

from . import _lib
from .errors import InvalidArgumentError, TokenloomError, raise_for


class Model:
    """Model(path, tokenizer=None): loads the file; raises ModelFileError when it cannot."""

    def __init__(self, path, tokenizer=None):
        self._handle = None
        path = os.fspath(path)
        if not isinstance(path, str) or not path:
            raise InvalidArgumentError(-1, "Model: path must be a non-empty string")
        params = _lib.ModelParams(tokenizer.encode() if tokenizer else None)
        handle = ctypes.c_void_p()
        st = _lib.tl_model_load(path.encode(), ctypes.byref(params), ctypes.byref(handle))
        raise_for(st)
        self._handle = handle
        self._engines = 0  # open engines over this model (close() refuses while any is)
        self.path = path
        info = _lib.ModelInfo()
        _lib.tl_model_get_info(self._handle, ctypes.byref(info))

        def s(b):
            return b.decode("utf-8", "replace") if b is not None else None

        self.info = {
            "arch": s(info.arch),
            "name": s(info.name),
            "path": s(info.path),
            "n_params": info.n_params,
            "n_vocab": info.n_vocab,
            "n_ctx_train": info.n_ctx_train,
            "n_embd": info.n_embd,
            "n_layer": info.n_layer,
            "n_head": info.n_head,
            "n_head_kv": info.n_head_kv,
            "n_ff": info.n_ff,
            "head_dim": info.head_dim,
            "weight_type": s(info.weight_type),
            "chat_template": s(info.chat_template),
            "bos": info.bos,
            "eos": info.eos,
            "eot": info.eot,
        }

    @property
    def handle(self):
        if not self._handle:
            raise InvalidArgumentError(-1, "Model: the model was closed")
        return self._handle

    def tokenize(self, text, add_special=True, parse_special=False):
        """The token ids of text (a str or UTF-8 bytes), with BOS etc. when add_special."""
        if isinstance(text, str):
            data = text.encode("utf-8")
        elif isinstance(text, (bytes, bytearray)):
            data = bytes(text)
        else:
            raise InvalidArgumentError(-1, "tokenize: text must be str or bytes")
        ids = _lib.c_int32_p()
        n = ctypes.c_int64()
        raise_for(
            _lib.tl_model_tokenize(
                self.handle, data, len(data), bool(add_special), bool(parse_special),
                ctypes.byref(ids), ctypes.byref(n),
            )
        )
        try:
            return [ids[i] for i in range(n.value)]
        finally:
            _lib.libc_free(ids)

    def detokenize(self, ids, render_special=False):
        """The text of a list of token ids; InvalidArgumentError for an id outside the vocab."""
        ids = list(ids)
        for t in ids:
            if not isinstance(t, int) or isinstance(t, bool):
                raise InvalidArgumentError(-1, "detokenize: ids must be integers")
            if not 0 <= t < self.info["n_vocab"]:
                raise InvalidArgumentError(
                    -1, "detokenize: token id %d is not in [0, %d)" % (t, self.info["n_vocab"])
                )
        arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        p = _lib.tl_model_detokenize(self.handle, arr, len(ids), bool(render_special))
        if not p:
            raise_for(-2 if not _lib.tl_last_error() else -1)
        try:
            return ctypes.string_at(p).decode("utf-8", "replace")
        finally:
            _lib.libc_free(p)

    def close(self):
        """Frees the model now. Engines created over it must be closed first."""
        if self._handle and self._engines:
            raise TokenloomError(-9, "Model.close: %d engine(s) still use this model" % self._engines)
        if self._handle:
            _lib.tl_model_destroy(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "tokenloom.Model(%r, arch=%r, n_params=%d)" % (
            self.path, self.info["arch"], self.info["n_params"],
        )
