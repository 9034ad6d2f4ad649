"""The Python binding against independent oracles: greedy generation on stories260K equals the
reference text and token ids of ../shared/models/PROVENANCE.md (produced by llama2.c and
llama.cpp); requests batched together give the texts they give alone; cancel frees the KV
blocks; bad arguments and a missing file raise exceptions carrying tl_last_error(); 1000
requests leave no request, KV block or memory behind (engine stats, RSS)."""

import os

import pytest

import tokenloom
from conftest import shared


@pytest.fixture
def engine(model):
    e = tokenloom.Engine(model, max_batch_size=16, n_threads=1)
    yield e
    e.close()


def test_model_info(model):
    assert model.info["arch"] == "llama"
    assert model.info["n_vocab"] == 512
    assert model.info["bos"] == 1


def test_tokenize_matches_reference(model, reference):
    assert model.tokenize("Once upon a time") == reference["prompt_ids"]
    assert model.tokenize("Once upon a time", add_special=False) == reference["prompt_ids"][1:]


def test_detokenize_round_trip(model, reference):
    gen = reference["ids"][len(reference["prompt_ids"]):]
    assert model.detokenize(gen) == reference["text"]
    with pytest.raises(tokenloom.InvalidArgumentError):
        model.detokenize([5, 100000])


def test_greedy_generate_equals_reference(engine, reference):
    n_gen = len(reference["ids"]) - len(reference["prompt_ids"])
    text = engine.generate("Once upon a time", max_tokens=n_gen, temperature=0)
    assert text == reference["text"]


def test_greedy_token_ids_equal_reference(engine, reference):
    n_gen = len(reference["ids"]) - len(reference["prompt_ids"])
    rid = engine.add_request("Once upon a time", max_tokens=n_gen, temperature=0)
    done = engine.run()
    c = done[rid]
    assert c.token_ids == reference["ids"][len(reference["prompt_ids"]):]
    assert c.finish_reason == "length"
    assert c.prompt_tokens == len(reference["prompt_ids"])
    assert c.completion_tokens == n_gen


def test_token_id_prompt_equals_text_prompt(engine, reference):
    a = engine.generate("Once upon a time", max_tokens=20, temperature=0)
    b = engine.generate([reference["prompt_ids"]], max_tokens=20, temperature=0)[0]
    assert a == b == reference["text"][: len(a)] and len(a) > 0


PROMPTS = ["Once upon a time", "Lily and Tom", "The dog", "One day", "Tim was", "She saw a",
           "The sun", "A little bird", "Mom said", "They went to", "The cat", "Ben had a",
           "In the park", "Sue liked", "The big tree", "He wanted"]


def test_sixteen_together_equal_one_at_a_time(model):
    kw = dict(max_tokens=40, temperature=0)
    with tokenloom.Engine(model, max_batch_size=1, n_threads=1) as alone:
        one_by_one = [alone.generate(p, **kw) for p in PROMPTS]
    with tokenloom.Engine(model, max_batch_size=16, n_threads=1) as together:
        ids = [together.add_request(p, **kw) for p in PROMPTS]
        texts = {rid: "" for rid in ids}
        max_running = 0
        while together.pending:
            for ev in together.step():
                texts[ev.request_id] += ev.text
            max_running = max(max_running, together.stats()["n_running"])
        batched = [texts[i] for i in ids]
        done = together.run()  # the same texts, kept by step() for run()
        assert [done[i].text for i in ids] == batched
    assert max_running > 1, "the requests never ran together"
    assert batched == one_by_one
    assert len(set(one_by_one)) > 8  # different prompts, different texts


def test_step_events(engine):
    rid = engine.add_request("Once upon a time", max_tokens=5, temperature=0)
    events = []
    while engine.pending:
        events.extend(engine.step())
    assert [e.type for e in events] == ["token"] * 5 + ["done"]
    assert all(e.request_id == rid for e in events)
    assert events[-1].finish_reason == "length" and events[-1].completion_tokens == 5


def test_stop_string(engine, reference):
    text = engine.generate("Once upon a time", max_tokens=50, temperature=0, stop=["named L"])
    assert text == ", there was a little girl "


def test_cancel_frees_kv(engine):
    before = engine.stats()
    rid = engine.add_request("Once upon a time", max_tokens=200, temperature=0, ignore_eos=True)
    engine.step()
    engine.step()
    assert engine.stats()["kv_blocks_used"] > before["kv_blocks_used"]
    engine.cancel(rid)
    done = engine.run()
    assert done[rid].finish_reason == "cancelled"
    assert done[rid].completion_tokens < 200
    after = engine.stats()
    assert after["n_running"] == 0 and after["n_waiting"] == 0
    assert after["kv_blocks_used"] == before["kv_blocks_used"]
    with pytest.raises(tokenloom.NotFoundError):
        engine.cancel(rid)


def test_timeout_ends_request(engine):
    rid = engine.add_request("Once upon a time", max_tokens=100000 // 100, temperature=0,
                             ignore_eos=True, timeout=0.001)
    import time

    time.sleep(0.01)
    done = engine.run()
    assert done[rid].finish_reason == "deadline"


@pytest.mark.parametrize("kwargs,word", [
    (dict(max_tokens=0), "max_tokens"),
    (dict(temperature=-1), "temperature"),
    (dict(top_p=0), "top_p"),
    (dict(top_k=-3), "top_k"),
    (dict(seed=-1), "seed"),
    (dict(stop=[""]), "stop"),
    (dict(priority="high"), "priority"),
    (dict(timeout=-1), "timeout"),
])
def test_bad_arguments_raise(engine, kwargs, word):
    with pytest.raises(tokenloom.InvalidArgumentError, match=word):
        engine.add_request("Once", **kwargs)
    assert engine.pending == 0


def test_bad_prompts_raise(engine):
    for bad in (None, 3, [], ["a"], [-1], [1, 2.5]):
        with pytest.raises(tokenloom.InvalidArgumentError):
            engine.add_request(bad)


def test_library_errors_carry_last_error(engine, model):
    # An out-of-vocabulary token id is refused by the C library itself.
    with pytest.raises(tokenloom.TokenloomError) as e:
        engine.add_request([1, 100000], max_tokens=4)
    assert "100000" in str(e.value) and e.value.status < 0
    # A prompt plus max_tokens that can never fit the context.
    with pytest.raises(tokenloom.TooLongError) as e:
        engine.add_request("Once upon a time", max_tokens=10**7)
    assert str(e.value)
    # A KV type the model's head size cannot use (stories260K has head_dim 8).
    with pytest.raises(tokenloom.TokenloomError, match="q8_0|head_dim|32"):
        tokenloom.Engine(model, kv_type="q8_0")
    with pytest.raises(tokenloom.InvalidArgumentError, match="kv_type"):
        tokenloom.Engine(model, kv_type="fp8")
    with pytest.raises(tokenloom.InvalidArgumentError, match="unknown option"):
        tokenloom.Engine(model, max_batch_sise=4)


def test_missing_model_file(tmp_path):
    missing = str(tmp_path / "no-such-model.gguf")
    with pytest.raises(tokenloom.ModelFileError) as e:
        tokenloom.Model(missing)
    assert "no-such-model.gguf" in str(e.value)
    assert isinstance(e.value, OSError)


def test_not_a_model_file(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 20)
    with pytest.raises(tokenloom.ModelFileError) as e:
        tokenloom.Model(str(bad))
    assert "bad.gguf" in str(e.value)


def test_closed_objects(model_path):
    m = tokenloom.Model(model_path)
    e = tokenloom.Engine(m, max_batch_size=2)
    with pytest.raises(tokenloom.TokenloomError, match="still use"):
        m.close()
    e.close()
    with pytest.raises(tokenloom.InvalidArgumentError, match="closed"):
        e.add_request("x")
    m.close()
    with pytest.raises(tokenloom.InvalidArgumentError, match="closed"):
        m.tokenize("x")


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_no_leak_over_1000_requests(model):
    with tokenloom.Engine(model, max_batch_size=16, n_threads=1) as e:
        total = e.stats()["kv_blocks_total"]
        rss = []
        for round_no in range(10):
            ids = [e.add_request(PROMPTS[i % 16], max_tokens=8, temperature=0.7, seed=i)
                   for i in range(100)]
            for rid in ids[::10]:  # every tenth is cancelled before it runs
                e.cancel(rid)
            done = e.run()
            assert sorted(done) == sorted(ids)
            st = e.stats()
            assert st["n_running"] == 0 and st["n_waiting"] == 0
            assert st["kv_blocks_used"] == 0
            assert st["kv_blocks_free"] + st["kv_blocks_cached"] == total
            rss.append(rss_kib())
        st = e.stats()
        fin = st["finished_total"]
        assert sum(fin.values()) == 1000
        assert fin["cancelled"] == 100
        assert fin["length"] + fin["stop"] == 900
        assert e.pending == 0
        # Memory reaches a plateau: the last 5 rounds (500 requests) grow it by under 4 MiB.
        assert rss[-1] - rss[4] < 4096, rss


def test_vulkan_device_greedy_equals_reference(model, reference):
    """Engine(device="vulkan:0") runs every step on the Vulkan device (lavapipe here; skipped
    without one): greedy token ids equal the reference; an unknown index raises, naming it."""
    dev = os.environ.get("TL_TEST_GPU", "vulkan:0")
    try:
        e = tokenloom.Engine(model, max_batch_size=4, device=dev)
    except tokenloom.TokenloomError as err:
        pytest.skip("no device %s: %s" % (dev, err))
    n_gen = len(reference["ids"]) - len(reference["prompt_ids"])
    with e:
        rid = e.add_request("Once upon a time", max_tokens=n_gen, temperature=0)
        assert e.run()[rid].token_ids == reference["ids"][len(reference["prompt_ids"]):]
    with pytest.raises(tokenloom.TokenloomError, match="vulkan:99: no such device"):
        tokenloom.Engine(model, device="vulkan:99")
    with pytest.raises(tokenloom.InvalidArgumentError):
        tokenloom.Engine(model, device=0)
