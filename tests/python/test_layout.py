"""The ctypes structures of python/tokenloom/_lib.py against the C compiler's layout of
include/tokenloom.h: the same fields in the same order at the same offsets, and every structure
the library writes into at least as large in Python as in C (tests/python/layout.c prints the C side).

And the ABI rule of docs/ARCHITECTURE.md ("public structs grow only at the end"): against the
layout of every release recorded in tests/python/abi_<version>.txt (layout.c's output when that
release was made), every recorded field keeps its offset, a struct never shrinks, a field added
since lies past the recorded end, the frozen structs (embedded or used as array elements) keep
their size, and the growth fits the slack an older caller reserves (TL_ABI_SLACK, which the
binding's _lib._RESERVED equals)."""

import glob
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


# Structs the caller allocates or the library hands out, which may gain fields at the end.
GROWABLE = ("tl_model_params", "tl_model_info", "tl_engine_config", "tl_request",
            "tl_engine_stats", "tl_event")
# tl_sampling is embedded in tl_request, tl_token_logprob and tl_logit_bias are array elements: a
# field added to one would move what follows, so their layout is frozen.
FROZEN = ("tl_sampling", "tl_token_logprob", "tl_logit_bias")
# Structs the binding allocates (tl_event is the library's): an older binding's copy is the
# recorded size plus _RESERVED bytes, so a newer library may grow them by that much at most.
BINDING_ALLOCATED = tuple(s for s in GROWABLE if s != "tl_event")

RECORDS = sorted(glob.glob(os.path.join(ROOT, "tests/python/abi_*.txt")))


def read_record(path):
    with open(path) as fh:
        return {k: int(v) for k, v in (line.split() for line in fh if line.strip())}


def test_abi_records_exist():
    # the release this header declares has its layout recorded (TL_VERSION_* in tokenloom.h)
    with open(os.path.join(ROOT, "include/tokenloom.h")) as fh:
        h = fh.read()
    ver = ".".join(h.split("#define TL_VERSION_%s " % p, 1)[1].split()[0]
                   for p in ("MAJOR", "MINOR", "PATCH"))
    names = [os.path.basename(r) for r in RECORDS]
    assert "abi_%s.txt" % ver in names, "no layout record for release %s: %s" % (ver, names)


@pytest.mark.parametrize("record", [os.path.basename(r) for r in RECORDS])
@pytest.mark.parametrize("cname", GROWABLE + FROZEN)
def test_struct_grows_only_at_the_end(c_layout, record, cname):
    old = read_record(os.path.join(ROOT, "tests/python", record))
    assert cname in old and cname in c_layout, "%s missing from %s or layout.c" % (cname, record)
    old_size, new_size = old[cname], c_layout[cname]
    prefix = cname + "."
    for k, off in old.items():
        if k.startswith(prefix):
            assert k in c_layout, "%s: field %s removed or renamed since %s" % (cname, k, record)
            assert c_layout[k] == off, "%s moved from %d to %d since %s" % (k, off, c_layout[k],
                                                                           record)
    for k, off in c_layout.items():
        if k.startswith(prefix) and k not in old:
            assert off >= old_size, "%s added at %d, inside the %d bytes of %s" % (
                k, off, old_size, record)
    assert new_size >= old_size, "%s shrank since %s" % (cname, record)
    if cname in FROZEN:
        assert new_size == old_size, "%s is frozen (embedded or an array element)" % cname
    if cname in BINDING_ALLOCATED:
        slack = c_layout["TL_ABI_SLACK"]
        assert new_size - old_size <= slack, (
            "%s grew %d bytes since %s, past the TL_ABI_SLACK (%d) an older caller reserves"
            % (cname, new_size - old_size, record, slack))


def test_binding_slack_is_the_headers(c_layout):
    assert _lib._RESERVED == c_layout["TL_ABI_SLACK"]


@pytest.mark.parametrize("cname", BINDING_ALLOCATED)
def test_binding_reserves_slack_at_the_end(cname):
    cls = STRUCTS[cname]
    last_name, last_type = cls._fields_[-1]
    assert last_name == "_reserved" and ctypes_sizeof(last_type) == _lib._RESERVED, (
        "%s must end with _RESERVED bytes of slack for a newer library's fields" % cname)
