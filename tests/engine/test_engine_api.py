"""The engine's contract: step outputs, events, aborts, and clear errors for
bad input that leave the engine exactly as it was."""

import dataclasses
import re
import warnings

import pytest

from pagedkit import LLM, KVCacheTooSmallWarning, LLMEngine, SamplingParams
from pagedkit.memory import EventLog
from pagedkit.scheduler import SchedulerEventKind

GREEDY = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)


@pytest.fixture
def engine(reference):
    build, _, _ = reference("llama")
    return LLMEngine(build(), block_size=4, num_blocks=32, max_num_batched_tokens=64)


def snapshot(engine):
    return (engine.memory_stats(), dict(engine.groups), list(engine.scheduler.waiting))


@pytest.mark.parametrize("prompt, params, error, message", [
    ([], None, ValueError, "the prompt is empty"),
    # past the model's 256 positions, in a cache of 128: the limit in force and how to
    # serve up to the model's (newcomer 36: it advised 255, which the cache refused)
    (list(range(60)) * 5, None, ValueError,
     r"300 tokens, so the request needs 301 positions \(300 of the prompt \+ 1 generated\), but "
     r"max_model_len is 128 here: left unset, it was lowered from the model's 256 to the 128 "
     r"the KV cache holds \(num_blocks=32 x block_size=4\); shorten the prompt to 127 tokens "
     r"or fewer \(up to 255 with num_blocks=64 or more\)"),
    (list(range(50)) * 4, None, ValueError,
     r"200 tokens, so the request needs 201 slots \(200 of the prompt \+ 1 generated\), but the "
     r"whole KV cache holds 128 \(num_blocks=32 x block_size=4\); max_model_len, left "
     r"unset, was lowered from the model's 256 to the 128 the cache holds; give the engine "
     r"num_blocks=51 or more, or shorten the prompt to 127 tokens or fewer"),
    (list(range(64)) * 2, None, ValueError,
     r"128 tokens, so the request needs 129 slots \(128 of the prompt \+ 1 generated\), but "
     r"the whole KV cache holds 128"),
    (list(range(70)), None, ValueError, "70 tokens but max_num_batched_tokens is 64"),
    ([1, 2, 300], None, ValueError, r"token id 300 is outside the vocabulary \[0, 96\)"),
    ("hello", None, ValueError, "no tokenizer"),
    ([1, 2], "greedy", TypeError, r"params must be a SamplingParams, got 'greedy' \(str\)"),
    ([1, 2], SamplingParams(stop_token_ids=[500]), ValueError,
     r"stop token id 500 is outside the vocabulary \[0, 96\)"),
])
def test_bad_requests_are_refused_and_change_nothing(engine, prompt, params, error, message):
    before = snapshot(engine)
    with pytest.raises(error, match=message):
        engine.add_request("x", prompt, SamplingParams() if params is None else params)
    assert snapshot(engine) == before


def test_duplicate_request_id(engine):
    engine.add_request("a", [1, 2, 3], GREEDY)
    before = snapshot(engine)
    with pytest.raises(ValueError, match="request id 'a' is already in the engine"):
        engine.add_request("a", [4], GREEDY)
    assert snapshot(engine) == before


@pytest.mark.parametrize("kwargs, message", [
    ({"n": 0}, "n must be >= 1, got 0"),
    ({"temperature": -0.5}, "temperature must be a finite number >= 0, got -0.5"),
    ({"top_p": 0.0}, r"top_p must be in \(0, 1\], got 0.0"),
    ({"top_p": 1.5}, r"top_p must be in \(0, 1\], got 1.5"),
    ({"top_k": -3}, "top_k must be 0 or -1 .* got -3"),
    ({"max_tokens": 0}, "max_tokens must be >= 1, got 0"),
    ({"min_tokens": 9, "max_tokens": 4}, "min_tokens=9 is more than max_tokens=4"),
    ({"use_beam_search": True, "n": 3, "beam_width": 2, "temperature": 0},
     r"beam_width \(2\) must be >= n \(3\)"),
    ({"use_beam_search": True, "temperature": 1.0}, "use temperature=0"),
    ({"beam_width": 2}, "only applies with use_beam_search"),
])
def test_bad_sampling_params(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_generate_validates_every_prompt_before_queueing_any(engine):
    llm = LLM.__new__(LLM)
    llm.llm_engine, llm._next_id = engine, 0
    with pytest.raises(ValueError, match="the prompt is empty"):
        llm.generate([[1, 2], []], GREEDY, use_tqdm=False)
    assert not engine.has_unfinished_requests()
    with pytest.raises(ValueError, match="got 1 sampling params for 2 prompts"):
        llm.generate([[1], [2]], [GREEDY], use_tqdm=False)


def test_unknown_model_name_offline():
    with pytest.raises(OSError, match="could not load model name 'no-such-org/no-such-model'"):
        LLM("no-such-org/no-such-model")


def test_step_output_and_events(engine):
    log = EventLog(engine.events)
    engine.add_request("a", [5, 6, 7, 8, 9], GREEDY)
    engine.add_request("b", [1, 2], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))
    first = engine.step()
    assert [(s.request_id, s.num_tokens, s.is_prefill) for s in first.scheduled] == [
        ("a", 5, True), ("b", 2, True)]
    assert len(first.new_tokens) == 2 and first.num_batched_tokens == 7
    assert first.memory["used_blocks"] == 3
    second = engine.step()
    assert all(not s.is_prefill and s.num_tokens == 1 for s in second.scheduled)
    assert [o.request_id for o in second.finished] == ["b"]
    out = second.finished[0]
    assert out.finished and out.outputs[0].finish_reason == "length"
    assert len(out.outputs[0].token_ids) == 2
    m = out.metrics
    assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.finish_time
    kinds = log.kinds()
    assert kinds.count("admit") == 2 and kinds.count("step") == 2
    assert [e.step for e in log if e.kind is SchedulerEventKind.STEP] == [0, 1]
    assert any(e.kind is SchedulerEventKind.FINISH and e.reason == "length" for e in log)


def test_abort_frees_memory_wherever_the_request_is(engine):
    engine.add_request("a", list(range(10)), GREEDY)
    engine.add_request("b", list(range(12)), GREEDY)
    engine.step()
    engine.add_request("c", [1], GREEDY)  # still waiting
    assert engine.abort_request("a") and engine.abort_request("c")
    assert not engine.abort_request("zzz")
    while engine.has_unfinished_requests():
        engine.step()
    assert engine.memory_stats()["used_blocks"] == 0


def test_stop_tokens_and_min_tokens(reference, make_prompts):
    build, prompt_list, expected = reference("llama")
    llm = LLM(build(), block_size=8, num_blocks=64)
    target = expected[2]
    stop = target[3]
    first = target.index(stop)
    out = llm.generate(prompt_list[2], SamplingParams(temperature=0, max_tokens=12,
                                                      stop_token_ids=[stop]), use_tqdm=False)[0]
    assert out.outputs[0].token_ids == target[:first + 1]
    assert out.outputs[0].finish_reason == "stop"
    # min_tokens masks the stop token until enough tokens exist
    out = llm.generate(prompt_list[2], SamplingParams(temperature=0, max_tokens=12, min_tokens=6,
                                                      stop_token_ids=[stop]), use_tqdm=False)[0]
    assert len(out.outputs[0].token_ids) >= 6 and stop not in out.outputs[0].token_ids[:6]


def test_group_that_outgrows_the_whole_cache_ends_with_length(reference):
    build, _, _ = reference("llama")
    llm = LLM(build(), block_size=4, num_blocks=4)  # 16 slots: max_model_len is 16
    out = llm.generate([list(range(10))], SamplingParams(temperature=0, max_tokens=30,
                                                         ignore_eos=True), use_tqdm=False)[0]
    assert out.outputs[0].finish_reason == "length"
    assert 10 + len(out.outputs[0].token_ids) == 16 == llm.llm_engine.max_model_len
    # two samples write their own tails: the group outgrows the cache before max_model_len
    with pytest.warns(KVCacheTooSmallWarning, match="the n=2 samples outgrew"):
        out = llm.generate([list(range(10))], SamplingParams(n=2, temperature=1.0, seed=0,
                                                             max_tokens=30, ignore_eos=True),
                           use_tqdm=False)[0]
    assert [c.finish_reason for c in out.outputs] == ["length", "length"]
    assert all(10 + len(c.token_ids) < 16 for c in out.outputs)
    assert llm.llm_engine.memory_stats()["used_blocks"] == 0


def test_a_one_token_last_prompt_chunk_is_prefill(reference):
    build, _, _ = reference("llama")
    engine = LLMEngine(build(), block_size=4, num_blocks=32, enable_chunked_prefill=True,
                       max_num_batched_tokens=4)
    engine.add_request("a", list(range(5)), GREEDY)  # chunks of 4 and 1
    first, second, third = engine.step(), engine.step(), engine.step()
    assert [(s.num_tokens, s.is_prefill) for s in first.scheduled] == [(4, True)]
    assert [(s.num_tokens, s.is_prefill) for s in second.scheduled] == [(1, True)]
    assert [(s.num_tokens, s.is_prefill) for s in third.scheduled] == [(1, False)]


def test_recomputation_longer_than_the_budget_is_spread_over_steps(reference):
    """Only the prompt is checked against the token budget: a preempted request
    must recompute prompt + output, which may not fit one step."""
    build, _, _ = reference("llama")
    engine = LLMEngine(build(), block_size=4, num_blocks=16, max_num_batched_tokens=16,
                       enable_prefix_caching=False)
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    engine.add_request("old", list(range(20, 30)), params)
    engine.add_request("new", list(range(5, 15)), params)
    done, preempted = {}, 0
    while engine.has_unfinished_requests():
        step = engine.step()
        preempted += len(step.preempted)
        assert step.num_batched_tokens <= 16
        done.update({o.request_id: o for o in step.finished})
    assert preempted > 0
    assert all(len(o.outputs[0].token_ids) == 40 for o in done.values())


def test_beam_search_respects_min_tokens(reference, make_prompts):
    build, _, _ = reference("llama")
    llm = LLM(build(), block_size=4, num_blocks=64)
    prompt = make_prompts(lengths=(6,))[0]
    free = llm.generate(prompt, SamplingParams(use_beam_search=True, beam_width=2,
                                               temperature=0, max_tokens=6, ignore_eos=True),
                        use_tqdm=False)[0].outputs[0].token_ids
    stop = free[0]  # the best first token, made a stop token that is not allowed yet
    out = llm.generate(prompt, SamplingParams(use_beam_search=True, beam_width=2,
                                              temperature=0, max_tokens=6, min_tokens=3,
                                              stop_token_ids=[stop]), use_tqdm=False)[0]
    assert stop not in out.outputs[0].token_ids[:3]


def test_an_aborted_request_is_reported_with_its_reason(engine):
    engine.add_request("a", list(range(10)), GREEDY)
    engine.step()
    assert engine.abort_request("a")
    # finished at once, as vLLM counts it; its output is still reported by the next step
    assert not engine.has_unfinished_requests() and engine.get_num_unfinished_requests() == 0
    out = engine.step().finished
    assert [(o.request_id, o.outputs[0].finish_reason) for o in out] == [("a", "abort")]
    assert not engine.has_unfinished_requests()


def test_swapped_groups_come_back_oldest_first(reference):
    build, _, _ = reference("llama")
    engine = LLMEngine(build(), block_size=4, num_blocks=12, preemption_mode="swap",
                       enable_prefix_caching=False)
    for i, rid in enumerate("ABC"):
        engine.add_request(rid, list(range(10 + i, 22 + i)),
                           SamplingParams(temperature=0, max_tokens=30, ignore_eos=True),
                           arrival_time=float(i))
    while engine.has_unfinished_requests():
        engine.step()
        arrivals = [g.metrics.arrival_time for g in engine.scheduler.swapped]
        assert arrivals == sorted(arrivals)
        running = [g.metrics.arrival_time for g in engine.scheduler.running]
        assert running == sorted(running)
    assert engine.memory_stats()["num_preemptions"] > 0


def test_a_step_that_fails_midway_can_be_retried(reference, monkeypatch):
    build, prompt_list, expected = reference("llama")
    engine = LLMEngine(build(), block_size=4, num_blocks=64)
    engine.add_request("a", prompt_list[3], SamplingParams(temperature=0, max_tokens=12,
                                                           ignore_eos=True))
    engine.step()
    real = engine.runner.execute

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(engine.runner, "execute", interrupted)
    with pytest.raises(KeyboardInterrupt):
        engine.step()
    monkeypatch.setattr(engine.runner, "execute", real)
    done = []
    while engine.has_unfinished_requests():
        done += engine.step().finished
    assert done[0].outputs[0].token_ids == expected[3]


@pytest.mark.parametrize("kwargs, message", [
    ({"max_model_len": 1000}, r"max_model_len=1000 is longer than the model's limit of 256 "
                              r"positions \(max_position_embeddings in its config\); give "
                              "max_model_len=256 or less, or leave it unset"),
    *[({"max_model_len": v}, rf"max_model_len must be >= 2 \(a prompt token and a generated "
                             rf"one\), or -1 \(the longest the model and the cache take\), got {v}")
      for v in (1, 0, -2, -3, -1000)],
    ({"max_model_len": 200, "num_blocks": 12, "block_size": 16},
     "max_model_len=200 needs 13 KV blocks of 16 tokens for one sequence, but the cache has 12: "
     "the largest max_model_len that fits is 192"),
    ({"prefix_caching_hash_algo": "md5"}, "prefix_caching_hash_algo must be one of"),
    ({"kv_cache_memory": 0}, "kv_cache_memory must be >= 1, got 0"),
    ({"gpu_memory_utilization": 90}, r"gpu_memory_utilization must be in \(0, 1\], got 90"),
    ({"preemption_mode": "swap", "swap_space": 0}, "needs swap_space > 0"),
    ({"preemption_mode": "evict"}, "preemption_mode must be one of"),
])
def test_bad_engine_arguments(reference, kwargs, message):
    build, _, _ = reference("llama")
    with pytest.raises(ValueError, match=message):
        LLMEngine(build(), **kwargs)


def test_stop_token_ids_are_checked():
    with pytest.raises(TypeError, match="stop_token_ids must be a list of token ids, got 5"):
        SamplingParams(stop_token_ids=5)
    with pytest.raises(ValueError, match=r"stop_token_ids\[1\] must be >= 0, got -1"):
        SamplingParams(stop_token_ids=[3, -1])
    with pytest.raises(ValueError, match="temperature must be a finite number >= 0, got nan"):
        SamplingParams(temperature=float("nan"))
    with pytest.raises(TypeError, match=r"temperature must be a number, got True \(bool\)"):
        SamplingParams(temperature=True)


def test_add_requests_is_all_or_none(engine):
    before = snapshot(engine)
    with pytest.raises(ValueError, match="the prompt is empty"):
        engine.add_requests([("a", [1, 2], GREEDY), ("b", [], GREEDY)])
    with pytest.raises(ValueError, match="request ids repeat within one call"):
        engine.add_requests([("a", [1, 2], GREEDY), ("a", [3], GREEDY)])
    assert snapshot(engine) == before
    engine.add_requests([("a", [1, 2], GREEDY), ("b", [3], GREEDY)])
    assert set(engine.groups) == {"a", "b"}


def test_request_metrics_order_the_life_of_a_request():
    """RequestMetrics (public API): arrival <= first scheduled <= first token
    <= finish, and the two derived times follow from them."""
    out = LLM("tiny").generate("Once upon a time", SamplingParams(max_tokens=3))[0]
    m = out.metrics
    assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.finish_time
    assert m.time_to_first_token == m.first_token_time - m.arrival_time >= 0
    assert m.latency == m.finish_time - m.arrival_time >= m.time_to_first_token


@pytest.mark.parametrize("num_blocks, block_size, requested, expected", [
    (32, 4, None, 128), (32, 4, -1, 128), (32, 4, 100, 100), (32, 4, 128, 128),
    (100, 4, None, 256), (100, 4, -1, 256), (12, 16, 192, 192), (1, 1, None, 1)])
def test_max_model_len_is_what_the_cache_holds(reference, num_blocks, block_size, requested,
                                               expected):
    """Unset or -1: the model's limit (256), or the longest sequence the cache
    holds if that is less (vLLM's -1); asked for explicitly, it must fit."""
    build, _, _ = reference("llama")
    engine = LLMEngine(build(), num_blocks=num_blocks, block_size=block_size,
                       max_model_len=requested)
    assert engine.max_model_len == expected


def test_a_sequence_stops_at_the_fitted_max_model_len(reference):
    build, _, _ = reference("llama")
    llm = LLM(build(), num_blocks=8, block_size=4)  # holds 32 tokens
    out = llm.generate([list(range(1, 11))], SamplingParams(max_tokens=100, ignore_eos=True),
                       use_tqdm=False)[0]
    assert len(out.outputs[0].token_ids) == 22 and out.outputs[0].finish_reason == "length"


def test_an_overlong_text_prompt_gets_pagedkits_error_alone():
    """transformers' tokenizer warns that a text longer than its model's
    length "will result in indexing errors"; pagedkit checks the length
    itself, so its own error is the only thing said."""
    import logging

    from transformers.utils import logging as hf_logging

    llm = LLM("tiny")
    tokenizer = llm.get_tokenizer()
    tokenizer.deprecation_warnings.clear()  # it warns once per tokenizer
    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logger = hf_logging.get_logger("transformers.tokenization_utils_base")
    logger.addHandler(handler)
    try:
        limit = llm.llm_engine.max_model_len
        with pytest.raises(ValueError, match=f"max_model_len is {limit}"):
            llm.generate("hello " * (limit + 10), use_tqdm=False)
    finally:
        logger.removeHandler(handler)
    assert not [m for m in said if "indexing errors" in m]


def test_no_prompts_give_no_outputs():
    """vLLM's LLM.generate([]) returns [] (it raised an internal zip / range error: a
    newcomer's finding). vLLM 0.32's beam_search([]) raises "You must pass at least one
    prompt" (run, newcomer42): pagedkit refuses it too (tests/test_bad_input.py)."""
    from pagedkit import BeamSearchParams

    llm = LLM("tiny", num_blocks=16)
    assert llm.generate([], use_tqdm=False) == []
    assert llm.generate([], [], use_tqdm=False) == []
    with pytest.raises(ValueError, match="beam_search\\(\\) got no prompts"):
        llm.beam_search([], BeamSearchParams(beam_width=2, max_tokens=2))
    assert not llm.llm_engine.has_unfinished_requests()


@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("num_blocks", [2, 7, 16, 64])
def test_a_max_model_len_the_cache_lowered_is_said_where_it_matters(reference, num_blocks,
                                                                  block_size):
    """Second newcomer: left unset, max_model_len silently became what the
    cache holds. The engine's repr says so, and so does the error of every
    prompt the lowered limit refuses (from what, to what, by which cache, and
    the num_blocks that takes the prompt); an explicit max_model_len that fits
    is never called lowered."""
    build, _, _ = reference("llama")  # max_position_embeddings 256
    capacity = num_blocks * block_size
    engine = LLMEngine(build(), num_blocks=num_blocks, block_size=block_size)
    lowered = capacity < 256
    assert engine.max_model_len == min(capacity, 256)
    assert (f"max_model_len={min(capacity, 256)} (lowered from the model's 256 to what the "
            "cache holds)" in repr(engine)) == lowered
    explicit = LLMEngine(build(), num_blocks=num_blocks, block_size=block_size,
                         max_model_len=min(capacity, 256))
    assert "lowered" not in repr(explicit)
    for n in sorted({capacity - 1, capacity, capacity + 5, 255}):
        if n < 1 or n >= 256:
            continue
        for e, unset in ((engine, True), (explicit, False)):
            if n + 1 <= capacity:
                e.add_request(f"fits {n}", [1] * n, GREEDY)
                continue
            with pytest.raises(ValueError) as refused:
                e.add_request("x", [1] * n, GREEDY)
            message = str(refused.value)
            said = (f"max_model_len, left unset, was lowered from the model's 256 to the "
                    f"{capacity} the cache holds")
            if unset:
                assert said in message and f"(num_blocks={num_blocks} x block_size=" \
                    f"{block_size})" in message, message
            else:
                assert f"max_model_len is {capacity}" in message and "lowered" not in message
            if unset:  # the advice takes the prompt
                more = int(message.split("num_blocks=")[-1].split()[0])
                LLMEngine(build(), num_blocks=more, block_size=block_size).add_request(
                    "x", [1] * n, GREEDY)


@pytest.mark.parametrize("max_model_len", range(2, 8))
def test_the_smallest_max_model_lens_build_and_serve(reference, max_model_len):
    """max_model_len=2 and 3 failed inside the support probe (an empty first
    step: 'context_lens[0] = 0'), an error naming nothing the caller gave."""
    build, _, _ = reference("llama")
    llm = LLM(build(), block_size=4, num_blocks=8, max_model_len=max_model_len)
    out = llm.generate([[1]], SamplingParams(temperature=0, max_tokens=50, ignore_eos=True),
                       use_tqdm=False)[0]
    assert len(out.outputs[0].token_ids) == max_model_len - 1
    assert out.outputs[0].finish_reason == "length"


@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("num_blocks", [3, 5, 8])
@pytest.mark.parametrize("n", [1, 2])
def test_a_request_ended_by_a_lowered_max_model_len_says_so(reference, num_blocks, block_size,
                                                           n):
    """A sequence cut at a max_model_len the cache lowered (left unset),
    short of its max_tokens, warns once per request, naming the cache and
    the num_blocks that serves it whole; that advice, and the lower
    max_tokens it names, each serve it silently, with the first tokens the
    same. An explicit max_model_len ends it as vLLM's does: no warning."""
    build, _, _ = reference("llama")  # max_position_embeddings 256
    capacity = num_blocks * block_size
    for prompt_len in sorted({1, capacity // 2, capacity - 2} - {0}):
        for max_tokens in (1, 3, capacity):
            if prompt_len + 1 > capacity or (n > 1 and prompt_len // block_size + n > num_blocks):
                continue  # refused at add time (tested elsewhere)
            params = SamplingParams(n=n, temperature=0 if n == 1 else 1.0, seed=7,
                                    max_tokens=max_tokens, ignore_eos=True)
            prompt = {"prompt_token_ids": [3 + i % 90 for i in range(prompt_len)]}

            def run(params=params, prompt=prompt, **kwargs):
                llm = LLM(build(), block_size=block_size, **kwargs)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    out = llm.generate(prompt, params, use_tqdm=False)[0]
                said = [str(w.message) for w in caught
                        if w.category is KVCacheTooSmallWarning and "which the KV cache set"
                        in str(w.message)]
                return [c.token_ids for c in out.outputs], said

            got, said = run(num_blocks=num_blocks)
            cut = prompt_len + max_tokens > capacity
            assert len(said) == cut if n == 1 else len(said) <= cut, (prompt_len, max_tokens)
            if n == 1:
                assert [len(t) for t in got] == [min(max_tokens, capacity - prompt_len)]
            if not said:
                assert not cut or n > 1  # an n>1 group may outgrow the cache first instead
                continue
            message = said[0]
            assert message.startswith("generate(): ended with finish_reason='length' after ")
            assert f"(num_blocks={num_blocks} x block_size={block_size})" in message
            more = int(re.search(r"num_blocks=(\d+) or more", message)[1])
            whole, again = run(num_blocks=more)
            assert not again and all(len(t) == max_tokens for t in whole)
            if n == 1:
                assert whole[0][:len(got[0])] == got[0]
            fewer = int(re.search(r"lower max_tokens to (\d+)", message)[1])
            _, again = run(params=dataclasses.replace(params, max_tokens=fewer),
                           num_blocks=num_blocks)
            assert not again
            _, again = run(num_blocks=num_blocks, max_model_len=capacity)
            assert not again


@pytest.mark.parametrize("clock", ["time.time", "future", "monotonic", "zero", "unset"])
def test_arrival_time_is_on_the_engines_clock_and_not_later_than_now(reference, clock):
    """Fifth newcomer: vLLM's arrival_time is time.time(); pagedkit's clock is
    time.monotonic(), so a time.time() gave a time to first token of -1.8e9 s
    and jumped the queue. A time later than now on pagedkit's clock is
    refused, naming both clocks, and leaves the engine as it was; one on it
    gives a time to first token >= 0."""
    import time

    build, _, _ = reference("llama")
    engine = LLMEngine(build(), num_blocks=32, block_size=4)
    given = {"time.time": time.time(), "future": time.monotonic() + 60,
             "monotonic": time.monotonic(), "zero": 0.0, "unset": None}[clock]
    if clock in ("time.time", "future"):
        with pytest.raises(ValueError, match=r"arrival_time=.* is later than now on pagedkit's "
                                             r"clock .*time\.monotonic\(\).*not vLLM's time\.time"):
            engine.add_request("r", [1, 2, 3], GREEDY, arrival_time=given)
        assert not engine.has_unfinished_requests()
        return
    engine.add_request("r", [1, 2, 3], GREEDY, arrival_time=given)
    while engine.has_unfinished_requests():
        finished = engine.step().finished
    assert finished[0].metrics.time_to_first_token >= 0
