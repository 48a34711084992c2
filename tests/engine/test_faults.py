"""Faults during `LLM.generate`: nothing it queued may outlive the call.

A learner who presses "interrupt" (KeyboardInterrupt) or whose `on_step`
callback raises must get back an engine with no request in flight and no
block held, whose next call computes exactly what a fresh engine computes,
in both preemption modes and whichever step the fault hits."""

import pytest

from pagedkit import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
ENGINE = {"block_size": 4, "num_blocks": 14}  # small enough that requests get preempted


class Boom(RuntimeError):
    pass


def make_llm(reference, mode):
    build, prompt_list, expected = reference("llama")
    return LLM(build(), preemption_mode=mode, **ENGINE), prompt_list, expected


def assert_empty(engine):
    """No request in flight, no block held anywhere, nothing left to report."""
    assert not engine.has_unfinished_requests()
    assert engine.groups == {}
    assert not engine.scheduler.running and not engine.scheduler.waiting
    assert not engine.scheduler.swapped
    stats = engine.memory_stats()
    assert stats["used_blocks"] == 0 and stats["swapped_blocks"] == 0
    assert stats["tokens_stored"] == 0


def tokens(outputs):
    return [[c.token_ids for c in o.outputs] for o in outputs]


@pytest.fixture(scope="module")
def fresh_outputs():
    """What a fresh engine computes, per preemption mode (and whether it preempted)."""
    cache = {}

    def get(reference, mode):
        if mode not in cache:
            llm, prompt_list, expected = make_llm(reference, mode)
            outputs = llm.generate(prompt_list, GREEDY, use_tqdm=False)
            assert [o[0] for o in tokens(outputs)] == expected  # the reference holds
            preemptions = llm.llm_engine.memory_stats()["num_preemptions"]
            cache[mode] = (tokens(outputs), preemptions)
        return cache[mode]

    return get


@pytest.mark.parametrize("mode", ["recompute", "swap"])
@pytest.mark.parametrize("error", [Boom, KeyboardInterrupt])
@pytest.mark.parametrize("where", ["forward", "on_step"])
@pytest.mark.parametrize("at_step", [0, 3, 9])
def test_a_failed_generate_leaves_nothing_behind(reference, fresh_outputs, monkeypatch,
                                                 mode, error, where, at_step):
    fresh, preemptions = fresh_outputs(reference, mode)
    assert preemptions > 0  # the fault can hit a preempted (or swapped) request
    llm, prompt_list, _ = make_llm(reference, mode)
    engine = llm.llm_engine
    real = engine.runner.execute
    calls = []

    def faulty_forward(*args, **kwargs):
        calls.append(1)
        if len(calls) == at_step + 1:
            raise error("injected")
        return real(*args, **kwargs)

    def faulty_callback(step):
        calls.append(1)
        if len(calls) == at_step + 1:
            raise error("injected")

    if where == "forward":
        monkeypatch.setattr(engine.runner, "execute", faulty_forward)
        on_step = None
    else:
        on_step = faulty_callback
    with pytest.raises(error, match="injected") as info:
        llm.generate(prompt_list, GREEDY, use_tqdm=False, on_step=on_step)
    assert len(calls) == at_step + 1
    assert_empty(engine)
    notes = getattr(info.value, "__notes__", [])
    assert any("aborted and their KV blocks freed" in n for n in notes)
    monkeypatch.setattr(engine.runner, "execute", real)
    assert tokens(llm.generate(prompt_list, GREEDY, use_tqdm=False)) == fresh
    assert_empty(engine)


def test_a_failed_generate_aborts_only_its_own_requests(reference, monkeypatch):
    """A request queued by hand is not generate's to end: it finishes correctly."""
    llm, prompt_list, expected = make_llm(reference, "recompute")
    engine = llm.llm_engine
    engine.add_request("mine", prompt_list[4], GREEDY)
    real = engine.runner.execute
    calls = []

    def faulty_forward(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(engine.runner, "execute", faulty_forward)
    with pytest.raises(KeyboardInterrupt):
        llm.generate(prompt_list[:3], GREEDY, use_tqdm=False)
    assert list(engine.groups) == ["mine"]
    monkeypatch.setattr(engine.runner, "execute", real)
    done = []
    while engine.has_unfinished_requests():
        done += engine.step().finished
    assert [o.request_id for o in done] == ["mine"]  # no ghost of the failed call reported
    assert done[0].outputs[0].token_ids == expected[4]
    assert_empty(engine)


def test_generate_after_a_refused_batch_is_clean(reference):
    """A batch refused at add_requests (one bad prompt) queues nothing at all."""
    llm, prompt_list, expected = make_llm(reference, "recompute")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.generate([prompt_list[0], [1, 2, 10_000]], GREEDY, use_tqdm=False)
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*64 - 1\]"):
        llm.generate(prompt_list[:2], SamplingParams(seed=2**64), use_tqdm=False)
    assert_empty(llm.llm_engine)
    assert [o.outputs[0].token_ids for o in llm.generate(prompt_list, GREEDY, use_tqdm=False)
            ] == expected


@pytest.mark.parametrize("mode", ["recompute", "swap"])
@pytest.mark.parametrize("good_steps", [0, 1])
def test_aborting_by_hand_after_a_failed_step_forgets_uncomputed_blocks(
        reference, fresh_outputs, monkeypatch, mode, good_steps):
    """Stepping by hand: a step fails after scheduling (its new full blocks are
    already named in the prefix cache); aborting the requests then must not
    leave those names behind, or the next run would hit K/V never written."""
    fresh, _ = fresh_outputs(reference, mode)
    llm, prompt_list, _ = make_llm(reference, mode)
    engine = llm.llm_engine
    for i, p in enumerate(prompt_list):
        engine.add_request(f"r{i}", p, GREEDY)
    for _ in range(good_steps):
        engine.step()
    real = engine.runner.execute
    monkeypatch.setattr(engine.runner, "execute", lambda *a, **k: (_ for _ in ()).throw(Boom()))
    with pytest.raises(Boom):
        engine.step()
    monkeypatch.setattr(engine.runner, "execute", real)
    for i in range(len(prompt_list)):
        assert engine.abort_request(f"r{i}")
    finished = engine.step().finished
    assert sorted(o.request_id for o in finished) == [f"r{i}" for i in range(len(prompt_list))]
    assert {o.outputs[0].finish_reason for o in finished} == {"abort"}
    assert_empty(engine)
    assert tokens(llm.generate(prompt_list, GREEDY, use_tqdm=False)) == fresh
