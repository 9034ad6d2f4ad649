"""The ctypes structures of python/tokenloom/_lib.py against the C compiler's layout of
include/tokenloom.h: the same fields in the same order at the same offsets, and every structure
the library writes into at least as large in Python as in C (tests/python/layout.c prints the C side)."""

import os
import shutil
import subprocess

import pytest

from conftest import ROOT

from tokenloom import _lib

STRUCTS = {
    "tl_model_params": _lib.ModelParams,
    "tl_model_info": _lib.ModelInfo,
    "tl_engine_config": _lib.EngineConfig,
    "tl_sampling": _lib.Sampling,
    "tl_token_logprob": _lib.TokenLogprob,
    "tl_event": _lib.Event,
    "tl_request": _lib.Request,
    "tl_engine_stats": _lib.EngineStats,
}


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc, "no C compiler to check the layout with"
    exe = str(tmp_path_factory.mktemp("layout") / "layout")
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"),
                    os.path.join(ROOT, "tests/python/layout.c"), "-o", exe], check=True)
    out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


@pytest.mark.parametrize("cname", sorted(STRUCTS))
def test_struct_layout_matches_header(c_layout, cname):
    cls = STRUCTS[cname]
    fields = [f for f, _ in cls._fields_ if not f.startswith("_")]
    c_fields = sorted((k.split(".", 1)[1] for k in c_layout if k.startswith(cname + ".")),
                      key=lambda f: c_layout[cname + "." + f])
    assert fields == c_fields, "fields of struct %s differ from the header" % cname
    for f in fields:
        assert getattr(cls, f).offset == c_layout[cname + "." + f], "%s.%s offset" % (cname, f)
    if cname == "tl_sampling":  # embedded in tl_request: must match exactly
        assert ctypes_sizeof(cls) == c_layout[cname]
    elif cname not in ("tl_event", "tl_token_logprob"):  # the library writes these: slack
        assert ctypes_sizeof(cls) >= c_layout[cname]


def ctypes_sizeof(cls):
    import ctypes

    return ctypes.sizeof(cls)
