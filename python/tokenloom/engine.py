"""tokenloom.Engine: the continuous-batching engine over a Model, driven from Python.

Requests are added with add_request() and advanced by step(), which runs one engine step (one
batched forward pass over every running sequence plus prompt chunks) and returns the events it
produced: token text deltas and finished requests. run() steps until nothing is pending;
generate() is the one-call convenience over a list of prompts.

Threads: the engine delivers events on the thread that calls step(), through one ctypes
callback owned by the Engine, which copies each event into a Python object. Use an Engine from
one thread (cancel() is the exception: the C call is thread-safe).
"""

import ctypes
from dataclasses import dataclass, field
from typing import List, Optional

from . import _lib
from .errors import InvalidArgumentError, TokenloomError, raise_for

_KV_TYPES = {"f32": 0, "f16": 1, "q8_0": 2}
_FINISH = {0: None, 1: "stop", 2: "length", 3: "cancelled", 4: "deadline", 5: "error"}
_CONFIG_KEYS = (
    "max_tokens_per_step", "max_seq_len", "kv_block_size", "kv_blocks", "kv_bytes", "kv_type",
    "prefix_caching", "n_threads", "max_waiting", "max_prefill_tokens_decoding",
    "prefill_backlog_tokens", "prefill_tokens_per_decode", "device",
)


@dataclass
class Event:
    """One engine event. type is "token" (a generated token; text is the new text, possibly ""
    while a stop string or a partial character is held back) or "done" (the request ended;
    finish_reason and the counts are set, text holds any final text)."""

    type: str
    request_id: int
    text: str = ""
    token: Optional[int] = None
    logprob: Optional[float] = None
    finish_reason: Optional[str] = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    error: Optional[str] = None
    preempted: int = 0  # "done": times the request was preempted and recomputed


@dataclass
class Completion:
    """A finished request as run() reports it: the whole text and the generated token ids."""

    request_id: int
    text: str
    token_ids: List[int] = field(default_factory=list)
    finish_reason: Optional[str] = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: Optional[str] = None


def _check_int(name, v, lo, hi):
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InvalidArgumentError(-1, "%s must be an integer in [%d, %d], not %r" % (name, lo, hi, v))
    return v


def _check_float(name, v, lo, hi):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise InvalidArgumentError(-1, "%s must be a number in [%g, %g], not %r" % (name, lo, hi, v))
    return float(v)


class Engine:
    """Engine(model, max_batch_size=64, **engine_config): engine_config keys are the fields of
    struct tl_engine_config (max_tokens_per_step, max_seq_len, kv_block_size, kv_blocks,
    kv_bytes, kv_type "f16"/"f32"/"q8_0", prefix_caching, n_threads, max_waiting,
    max_prefill_tokens_decoding, prefill_backlog_tokens, prefill_tokens_per_decode, device
    "cpu"/"vulkan"/"vulkan:N": where the steps run)."""

    def __init__(self, model, max_batch_size=None, **engine_config):
        self._handle = None
        self._model = model
        unknown = set(engine_config) - set(_CONFIG_KEYS)
        if unknown:
            raise InvalidArgumentError(-1, "Engine: unknown option(s) %s" % ", ".join(sorted(unknown)))
        cfg = _lib.EngineConfig()
        _lib.tl_engine_config_default(ctypes.byref(cfg))
        if max_batch_size is not None:
            cfg.max_batch_size = _check_int("max_batch_size", max_batch_size, 1, 1 << 16)
        for key, value in engine_config.items():
            if key == "kv_type":
                if value not in _KV_TYPES:
                    raise InvalidArgumentError(-1, "kv_type must be one of f16, f32, q8_0, not %r" % (value,))
                value = _KV_TYPES[value]
            elif key == "prefix_caching":
                value = bool(value)
            elif key == "device":
                if not isinstance(value, str):
                    raise InvalidArgumentError(-1, "device must be a string (cpu, vulkan, vulkan:N), not %r" % (value,))
                value = value.encode()
            else:
                value = _check_int(key, value, 0, (1 << 62))
            setattr(cfg, key, value)
        handle = ctypes.c_void_p()
        raise_for(_lib.tl_engine_create(model.handle, ctypes.byref(cfg), ctypes.byref(handle)))
        self._handle = handle
        model._engines += 1
        self._events = []  # filled by the callback during a step
        self._live = {}  # request id -> ([text parts], [token ids]) of requests not yet done
        self._finished = {}  # request id -> Completion, until run() returns it
        self._callback = _lib.EVENT_FN(self._on_event)  # kept alive as long as the engine

    # ---- events ---------------------------------------------------------------------------

    def _on_event(self, user, ev_p):
        # Runs inside tl_engine_step: copy everything, raise nothing into C.
        try:
            ev = ev_p.contents
            text = ctypes.string_at(ev.text, ev.text_len).decode("utf-8", "replace") if ev.text_len else ""
            rid = ev.request_id
            if ev.type == 1:
                self._events.append(Event("token", rid, text, token=ev.token, logprob=ev.logprob))
            elif ev.type == 2:
                err = ev.error.decode("utf-8", "replace") if ev.error else None
                self._events.append(Event(
                    "done", rid, text, finish_reason=_FINISH.get(ev.finish, "error"),
                    prompt_tokens=ev.n_prompt_tokens, cached_tokens=ev.n_cached_tokens,
                    preempted=ev.n_preempted,
                    completion_tokens=ev.n_generated, error=err,
                ))
        except BaseException as e:  # pragma: no cover - would be a binding bug
            self._events.append(Event("done", 0, "", finish_reason="error", error=repr(e)))

    @property
    def handle(self):
        if not self._handle:
            raise InvalidArgumentError(-1, "Engine: the engine was closed")
        return self._handle

    # ---- requests ---------------------------------------------------------------------------

    def add_request(self, prompt, max_tokens=16, temperature=1.0, top_p=1.0, top_k=0, seed=0,
                    stop=None, priority=0, timeout=None, min_p=0.0, repetition_penalty=1.0,
                    presence_penalty=0.0, frequency_penalty=0.0, ignore_eos=False,
                    add_special=True, parse_special=False):
        """Submits a request; prompt is a str or a list of token ids. timeout is in seconds.
        Returns the request id. Raises InvalidArgumentError for a bad argument, TooLongError
        when the prompt plus max_tokens can never fit, QueueFullError when the queue is full."""
        r = _lib.Request()
        _lib.tl_request_default(ctypes.byref(r))
        keep = []  # buffers that must live until tl_engine_submit returns (it copies them)
        if isinstance(prompt, str):
            data = prompt.encode("utf-8")
            r.prompt = data
            r.prompt_len = len(data)
            keep.append(data)
        elif isinstance(prompt, (list, tuple)) and prompt:
            for t in prompt:
                if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < 2**31:
                    raise InvalidArgumentError(-1, "add_request: token ids must be non-negative integers")
            arr = (ctypes.c_int32 * len(prompt))(*prompt)
            r.prompt_tokens = ctypes.cast(arr, _lib.c_int32_p)
            r.n_prompt_tokens = len(prompt)
            keep.append(arr)
        else:
            raise InvalidArgumentError(-1, "add_request: prompt must be a str or a non-empty list of token ids")
        r.max_tokens = _check_int("max_tokens", max_tokens, 1, 2**31 - 1)
        s = r.sampling
        s.temperature = _check_float("temperature", temperature, 0.0, 1e6)
        s.top_p = _check_float("top_p", top_p, 1e-9, 1.0)
        s.top_k = _check_int("top_k", top_k, 0, 2**31 - 1)
        s.min_p = _check_float("min_p", min_p, 0.0, 1.0)
        s.repetition_penalty = _check_float("repetition_penalty", repetition_penalty, 1e-6, 1e6)
        s.presence_penalty = _check_float("presence_penalty", presence_penalty, -2.0, 2.0)
        s.frequency_penalty = _check_float("frequency_penalty", frequency_penalty, -2.0, 2.0)
        s.seed = _check_int("seed", seed, 0, 2**64 - 1)
        if stop is not None:
            stops = [stop] if isinstance(stop, str) else list(stop)
            if not all(isinstance(x, str) and x for x in stops):
                raise InvalidArgumentError(-1, "add_request: stop must be a non-empty string or a list of them")
            enc = [x.encode("utf-8") for x in stops]
            arr = (ctypes.c_char_p * max(len(enc), 1))(*enc)
            r.stop = arr
            r.n_stop = len(enc)
            keep.extend([enc, arr])
        r.priority = _check_int("priority", priority, -(2**31), 2**31 - 1)
        if timeout is not None:
            r.timeout_ms = max(1, int(_check_float("timeout", timeout, 0.0, 1e9) * 1000))
        r.ignore_eos = bool(ignore_eos)
        r.add_special = bool(add_special)
        r.parse_special = bool(parse_special)
        r.on_event = self._callback
        rid = ctypes.c_uint64()
        raise_for(_lib.tl_engine_submit(self.handle, ctypes.byref(r), ctypes.byref(rid)))
        self._live[rid.value] = ([], [])
        return rid.value

    def cancel(self, request_id):
        """Cancels a request; it ends at the next step with finish_reason "cancelled" and its KV
        blocks are freed. NotFoundError when it already finished."""
        raise_for(_lib.tl_engine_cancel(self.handle, _check_int("request_id", request_id, 0, 2**64 - 1)))

    def step(self):
        """Runs one engine step and returns its events (a list of Event, in order). The text and
        token ids of each request are also kept, for run() to return."""
        self._events = []
        pending = ctypes.c_int64()
        raise_for(_lib.tl_engine_step(self.handle, ctypes.byref(pending)))
        events, self._events = self._events, []
        for ev in events:
            parts = self._live.get(ev.request_id)
            if parts is None:
                continue
            if ev.text:
                parts[0].append(ev.text)
            if ev.type == "token":
                parts[1].append(ev.token)
            else:
                del self._live[ev.request_id]
                self._finished[ev.request_id] = Completion(
                    ev.request_id, "".join(parts[0]), parts[1], ev.finish_reason,
                    ev.prompt_tokens, ev.completion_tokens, ev.error,
                )
        return events

    @property
    def pending(self):
        """Requests added and not yet finished."""
        return len(self._live)

    def run(self):
        """Steps until every request has finished; returns {request id: Completion} for every
        request that finished since the last run() (also those finished by step() calls)."""
        while self._live:
            self.step()
        done, self._finished = self._finished, {}
        return done

    def generate(self, prompts, max_tokens=16, **sampling):
        """Adds every prompt (a str or a list of str / token-id lists), runs the engine until
        they are done and returns their texts in order (a str for a single str prompt).
        Takes add_request's keyword arguments. Requests still pending from add_request calls are
        run along; their results are not returned here."""
        single = isinstance(prompts, str)
        batch = [prompts] if single else list(prompts)
        if self._live:
            raise TokenloomError(-9, "generate: %d request(s) from add_request are still pending; call run() first" % len(self._live))
        ids = []
        try:
            for p in batch:
                ids.append(self.add_request(p, max_tokens=max_tokens, **sampling))
        except BaseException:
            for rid in ids:
                _lib.tl_engine_cancel(self.handle, rid)
            self.run()
            raise
        done = self.run()
        texts = [done[rid].text for rid in ids]
        return texts[0] if single else texts

    def stats(self):
        """The engine's counters (struct tl_engine_stats) as a dict."""
        st = _lib.EngineStats()
        _lib.tl_engine_get_stats(self.handle, ctypes.byref(st))
        out = {name: getattr(st, name) for name, _ in _lib.EngineStats._fields_
               if not name.startswith("_") and not name.endswith("hist_count")
               and name != "step_hist_le"}
        out["finished_total"] = {_FINISH[i] or "none": st.finished_total[i] for i in range(6)}
        return out

    def close(self):
        """Destroys the engine; pending requests get no further events."""
        if self._handle:
            _lib.tl_engine_destroy(self._handle)
            self._handle = None
            self._model._engines -= 1
            self._live.clear()
            self._finished.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
