"""How `LLMEngine.step()` streams a request of n samples, however it ends.

vLLM 0.32 streams n > 1 as one RequestOutput per completion (run there: each
step, at the end by stop or by length), and pagedkit's docs say so
(docs/api.md, "vLLM's streaming loop"). A group's end that comes without
sampling (aborted, or outgrown the KV cache) is one output per completion
it ended too, so a loop reading ``out.outputs[0]`` sees every completion end;
the `finished` field keeps the whole request in one output."""

import warnings

import pytest

from pagedkit import LLMEngine, SamplingParams

BLOCK = 4
PROMPT = list(range(5, 15))  # 10 tokens: 2 full blocks
MAX_TOKENS = 8


def engine_for(build, n, end):
    """An engine in which `n` samples of PROMPT end by `end`; for "outgrown",
    one block short of what the group needs (for n = 1, a cache that lowers
    max_model_len under the request's end, so it ends by length there)."""
    full = len(PROMPT) // BLOCK
    own = -(-(len(PROMPT) + MAX_TOKENS - 1 - full * BLOCK) // BLOCK)
    num_blocks = full + n * own - 1 if end == "outgrown" else 64
    return LLMEngine(build(), block_size=BLOCK, num_blocks=num_blocks)


def first_new_token(build, n):
    """A token the (top_k=1, so equal) samples draw at their 3rd step and not before."""
    engine = engine_for(build, n, "length")
    engine.add_request("probe", {"prompt_token_ids": PROMPT}, params_for(n))
    ids = []
    while engine.has_unfinished_requests():
        for out in engine.step():
            ids = list(out.outputs[0].token_ids)
    return next(t for i, t in enumerate(ids) if i >= 2 and t not in ids[:i])


def params_for(n, **kw):
    return SamplingParams(n=n, temperature=1.0, top_k=1, max_tokens=MAX_TOKENS,
                          ignore_eos=True, **kw)


def run(engine, params, abort_after=None):
    """Every step's outputs (the stream) and its `finished` field."""
    engine.add_request("r", {"prompt_token_ids": PROMPT}, params)
    streamed, final, steps = [], [], 0
    if abort_after == 0:  # before the first step: the samples are not forked yet
        assert engine.abort_request("r")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the outgrown group's warning, tested elsewhere
        while engine.has_unfinished_requests() or (abort_after is not None
                                                   and steps <= abort_after and not final):
            step = engine.step()
            steps += 1
            streamed += list(step)
            final += step.finished
            if steps == abort_after:
                assert engine.abort_request("r")
    return streamed, final


@pytest.mark.parametrize("end", ["stop", "length", "outgrown", "abort"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_every_streamed_output_holds_one_completion_and_each_end_is_seen(reference, n, end):
    build, _, _ = reference("llama")
    reason = {"stop": "stop", "length": "length", "outgrown": "length", "abort": "abort"}[end]
    kw = {"stop_token_ids": [first_new_token(build, n)]} if end == "stop" else {}
    streamed, final = run(engine_for(build, n, end), params_for(n, **kw),
                          abort_after=2 if end == "abort" else None)
    check_stream(streamed, final, n, reason)
    if end == "outgrown":  # cut short, as the group outgrew the cache
        assert all(len(c.token_ids) < MAX_TOKENS for c in final[0].outputs)


@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "chunked"])
@pytest.mark.parametrize("abort_after", [0, 1, 2])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_an_abort_before_the_samples_fork_streams_all_n_ends(reference, n, abort_after, chunked):
    """Review 41: aborted before its first step, or mid chunked prefill (4
    tokens a step: the 10-token prompt samples at step 3), a group of n had
    not forked its samples yet, and its abort streamed ONE completion and
    finished with one. Every step count here, forked or not, ends all n."""
    build, _, _ = reference("llama")
    engine = LLMEngine(build(), block_size=BLOCK, num_blocks=64,
                       **({"enable_chunked_prefill": True, "max_num_batched_tokens": 4}
                          if chunked else {}))
    streamed, final = run(engine, params_for(n), abort_after=abort_after)
    check_stream(streamed, final, n, "abort")
    if abort_after == 0 or chunked:  # before any sample: no token
        assert all(c.token_ids == [] for c in final[0].outputs)


def check_stream(streamed, final, n, reason):
    """Each of the n completions seen ending with `reason`, one per output."""
    # streaming: one completion per output, each index's last one ends with the
    # reason, nothing after an index ended, finished with the last output only
    assert all(len(o.outputs) == 1 for o in streamed)
    last = {}
    for o in streamed:
        c = o.outputs[0]
        assert c.index not in last or last[c.index].finish_reason is None, (c.index, streamed)
        last[c.index] = c
    assert sorted(last) == list(range(n))
    assert [c.finish_reason for _, c in sorted(last.items())] == [reason] * n
    assert [o.finished for o in streamed] == [False] * (len(streamed) - 1) + [True]
    # the whole request at once: `finished` (what LLM.generate reads)
    assert len(final) == 1 and final[0].finished
    whole = final[0].outputs
    assert [c.index for c in whole] == list(range(n))
    assert [(c.token_ids, c.finish_reason) for c in whole] == [
        (last[i].token_ids, last[i].finish_reason) for i in range(n)]


def test_an_abort_after_some_samples_stopped_streams_only_those_it_ended(reference):
    """Samples that stopped before are not streamed again by the abort."""
    build, _, _ = reference("llama")
    params = SamplingParams(n=3, temperature=1.0, seed=3, max_tokens=MAX_TOKENS,
                            ignore_eos=True)
    probe, _ = run(engine_for(build, 3, "length"), params)
    tokens = {o.outputs[0].index: o.outputs[0].token_ids for o in probe}
    # a token sample 0 draws first at its 2nd to 4th step, and the others not in their first 4
    stop = next(t for k, t in enumerate(tokens[0][:4]) if k >= 1 and t not in tokens[0][:k]
                and all(t not in tokens[i][:4] for i in (1, 2)))
    streamed, final = run(engine_for(build, 3, "length"),
                          SamplingParams(n=3, temperature=1.0, seed=3, max_tokens=MAX_TOKENS,
                                         ignore_eos=True, stop_token_ids=[stop]),
                          abort_after=4)
    ends = [(o.outputs[0].index, o.outputs[0].finish_reason, o.finished)
            for o in streamed if o.outputs[0].finish_reason]
    stopped = [i for i, r, _ in ends if r == "stop"]
    assert 0 in stopped and len(stopped) < 3, ends
    aborted = [i for i in range(3) if i not in stopped]
    assert ends == [(i, "stop", False) for i in stopped] + [
        (i, "abort", i == aborted[-1]) for i in aborted]
    assert [c.finish_reason for c in final[0].outputs] == [
        "stop" if i in stopped else "abort" for i in range(3)]
