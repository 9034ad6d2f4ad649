"""The ctypes view of include/tokenloom.h: the library lookup, the C structures and the
function signatures. Everything here mirrors the header field by field, in order; the test
tests/python/test_layout.py compiles a C program that prints every offset and checks them
against these classes, so a change to the header that is not made here fails the tests.

Structures the library writes into (configs, requests, stats, model info) carry a reserved
tail, so a field appended to the C struct later cannot make the library write past the
Python-owned buffer before this file is updated.
"""

import ctypes
import ctypes.util
import os

_RESERVED = 256  # TL_ABI_SLACK: zeroed bytes after each struct, for a newer library's fields


def _candidates():
    env = os.environ.get("TOKENLOOM_LIB")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libtokenloom.so")
    # From the source tree: <checkout>/python/tokenloom -> <checkout>/build/libtokenloom.so
    yield os.path.join(here, "..", "..", "build", "libtokenloom.so")
    found = ctypes.util.find_library("tokenloom")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError(
        "tokenloom: cannot load libtokenloom.so; build it with `make shlib` or set "
        "TOKENLOOM_LIB to its path. Tried: " + "; ".join(tried)
    )


lib = _load()

c_int32_p = ctypes.POINTER(ctypes.c_int32)


class ModelParams(ctypes.Structure):
    _fields_ = [("tokenizer_path", ctypes.c_char_p), ("_reserved", ctypes.c_char * _RESERVED)]


class ModelInfo(ctypes.Structure):
    _fields_ = [
        ("arch", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("path", ctypes.c_char_p),
        ("n_params", ctypes.c_int64),
        ("n_vocab", ctypes.c_int32),
        ("n_ctx_train", ctypes.c_int32),
        ("n_embd", ctypes.c_int32),
        ("n_layer", ctypes.c_int32),
        ("n_head", ctypes.c_int32),
        ("n_head_kv", ctypes.c_int32),
        ("n_ff", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("weight_type", ctypes.c_char_p),
        ("chat_template", ctypes.c_char_p),
        ("bos", ctypes.c_int32),
        ("eos", ctypes.c_int32),
        ("eot", ctypes.c_int32),
        ("_reserved", ctypes.c_char * _RESERVED),
    ]


class EngineConfig(ctypes.Structure):
    _fields_ = [
        ("max_batch_size", ctypes.c_int32),
        ("max_tokens_per_step", ctypes.c_int32),
        ("max_seq_len", ctypes.c_int32),
        ("kv_block_size", ctypes.c_int32),
        ("kv_blocks", ctypes.c_int64),
        ("kv_bytes", ctypes.c_int64),
        ("kv_type", ctypes.c_int),
        ("prefix_caching", ctypes.c_bool),
        ("n_threads", ctypes.c_int32),
        ("max_waiting", ctypes.c_int32),
        ("max_prefill_tokens_decoding", ctypes.c_int32),
        ("prefill_backlog_tokens", ctypes.c_int32),
        ("prefill_tokens_per_decode", ctypes.c_int32),
        ("device", ctypes.c_char_p),
        ("_reserved", ctypes.c_char * _RESERVED),
    ]


class Sampling(ctypes.Structure):
    _fields_ = [
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int32),
        ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float),
        ("repetition_penalty", ctypes.c_float),
        ("presence_penalty", ctypes.c_float),
        ("frequency_penalty", ctypes.c_float),
        ("seed", ctypes.c_uint64),
        ("n_logprobs", ctypes.c_int32),
        ("logit_bias", ctypes.c_void_p),  # const struct tl_logit_bias *
        ("n_logit_bias", ctypes.c_int32),
    ]


class TokenLogprob(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int32), ("logprob", ctypes.c_float)]


class Event(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("request_id", ctypes.c_uint64),
        ("text", ctypes.c_void_p),
        ("text_len", ctypes.c_size_t),
        ("token", ctypes.c_int32),
        ("logprob", ctypes.c_float),
        ("top", ctypes.POINTER(TokenLogprob)),
        ("n_top", ctypes.c_int32),
        ("finish", ctypes.c_int),
        ("n_prompt_tokens", ctypes.c_int64),
        ("n_cached_tokens", ctypes.c_int64),
        ("n_generated", ctypes.c_int64),
        ("n_preempted", ctypes.c_int64),
        ("queue_us", ctypes.c_int64),
        ("ttft_us", ctypes.c_int64),
        ("total_us", ctypes.c_int64),
        ("error", ctypes.c_char_p),
        ("prompt_pos", ctypes.c_int64),
    ]


EVENT_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(Event))


class Request(ctypes.Structure):
    _fields_ = [
        ("prompt", ctypes.c_char_p),
        ("prompt_len", ctypes.c_size_t),
        ("prompt_tokens", c_int32_p),
        ("n_prompt_tokens", ctypes.c_int64),
        ("add_special", ctypes.c_bool),
        ("parse_special", ctypes.c_bool),
        ("sampling", Sampling),
        ("max_tokens", ctypes.c_int32),
        ("stop_tokens", c_int32_p),
        ("n_stop_tokens", ctypes.c_int32),
        ("stop", ctypes.POINTER(ctypes.c_char_p)),
        ("n_stop", ctypes.c_int32),
        ("ignore_eos", ctypes.c_bool),
        ("priority", ctypes.c_int32),
        ("timeout_ms", ctypes.c_int64),
        ("prompt_logprobs", ctypes.c_bool),
        ("render_special", ctypes.c_bool),
        ("grammar", ctypes.c_void_p),  # tl_grammar *, NULL = unconstrained
        ("on_event", EVENT_FN),
        ("user", ctypes.c_void_p),
        ("_reserved", ctypes.c_char * _RESERVED),
    ]


STEP_HIST_BUCKETS = 12


class EngineStats(ctypes.Structure):
    _fields_ = [
        ("n_running", ctypes.c_int64),
        ("n_waiting", ctypes.c_int64),
        ("kv_blocks_total", ctypes.c_int64),
        ("kv_blocks_free", ctypes.c_int64),
        ("kv_blocks_used", ctypes.c_int64),
        ("kv_blocks_cached", ctypes.c_int64),
        ("kv_block_size", ctypes.c_int64),
        ("prompt_tokens_total", ctypes.c_int64),
        ("generation_tokens_total", ctypes.c_int64),
        ("steps_total", ctypes.c_int64),
        ("preemptions_total", ctypes.c_int64),
        ("prefix_queries_total", ctypes.c_int64),
        ("prefix_hits_total", ctypes.c_int64),
        ("finished_total", ctypes.c_int64 * 6),
        ("step_hist_le", ctypes.c_int64 * STEP_HIST_BUCKETS),
        ("step_hist_count", ctypes.c_int64 * STEP_HIST_BUCKETS),
        ("step_tokens_sum", ctypes.c_int64),
        ("step_us_total", ctypes.c_int64),
        ("forward_us_total", ctypes.c_int64),
        ("int8_ops_total", ctypes.c_double),
        ("flops_total", ctypes.c_double),
        ("weight_bytes_total", ctypes.c_double),
        ("kv_bytes_total", ctypes.c_double),
        ("seqs_hist_count", ctypes.c_int64 * STEP_HIST_BUCKETS),
        ("seqs_sum", ctypes.c_int64),
        ("decode_hist_count", ctypes.c_int64 * STEP_HIST_BUCKETS),
        ("decode_tokens_sum", ctypes.c_int64),
        ("prefill_hist_count", ctypes.c_int64 * STEP_HIST_BUCKETS),
        ("prefill_tokens_sum", ctypes.c_int64),
        ("gpu_submits_total", ctypes.c_int64),
        ("gpu_waits_total", ctypes.c_int64),
        ("gpu_dispatches_total", ctypes.c_int64),
        ("gpu_upload_bytes_total", ctypes.c_int64),
        ("gpu_download_bytes_total", ctypes.c_int64),
        ("gpu_busy_ns_total", ctypes.c_int64),
        ("gpu_phase_ns_total", ctypes.c_int64 * 4),
        ("gpu_weight_bytes", ctypes.c_int64),
        ("gpu_kv_bytes", ctypes.c_int64),
        ("_reserved", ctypes.c_char * _RESERVED),
    ]


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


c_status = ctypes.c_int
tl_status_str = _fn("tl_status_str", ctypes.c_char_p, c_status)
tl_last_error = _fn("tl_last_error", ctypes.c_char_p)
tl_model_load = _fn(
    "tl_model_load",
    c_status,
    ctypes.c_char_p,
    ctypes.POINTER(ModelParams),
    ctypes.POINTER(ctypes.c_void_p),
)
tl_model_destroy = _fn("tl_model_destroy", None, ctypes.c_void_p)
tl_model_get_info = _fn("tl_model_get_info", None, ctypes.c_void_p, ctypes.POINTER(ModelInfo))
tl_model_tokenize = _fn(
    "tl_model_tokenize",
    c_status,
    ctypes.c_void_p,
    ctypes.c_char_p,
    ctypes.c_size_t,
    ctypes.c_bool,
    ctypes.c_bool,
    ctypes.POINTER(c_int32_p),
    ctypes.POINTER(ctypes.c_int64),
)
# Returns a malloc'd string: declared as void* so that it can be freed after copying.
tl_model_detokenize = _fn(
    "tl_model_detokenize", ctypes.c_void_p, ctypes.c_void_p, c_int32_p, ctypes.c_int64, ctypes.c_bool
)
tl_engine_config_default = _fn("tl_engine_config_default", None, ctypes.POINTER(EngineConfig))
tl_engine_create = _fn(
    "tl_engine_create",
    c_status,
    ctypes.c_void_p,
    ctypes.POINTER(EngineConfig),
    ctypes.POINTER(ctypes.c_void_p),
)
tl_engine_destroy = _fn("tl_engine_destroy", None, ctypes.c_void_p)
tl_request_default = _fn("tl_request_default", None, ctypes.POINTER(Request))
tl_engine_submit = _fn(
    "tl_engine_submit",
    c_status,
    ctypes.c_void_p,
    ctypes.POINTER(Request),
    ctypes.POINTER(ctypes.c_uint64),
)
tl_engine_cancel = _fn("tl_engine_cancel", c_status, ctypes.c_void_p, ctypes.c_uint64)
tl_engine_step = _fn(
    "tl_engine_step", c_status, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)
)
tl_engine_get_stats = _fn(
    "tl_engine_get_stats", None, ctypes.c_void_p, ctypes.POINTER(EngineStats)
)
tl_finish_reason_str = _fn("tl_finish_reason_str", ctypes.c_char_p, ctypes.c_int)

libc = ctypes.CDLL(None)
libc_free = getattr(libc, "free")
libc_free.restype = None
libc_free.argtypes = [ctypes.c_void_p]
