"""Sharing KV blocks between the sequences of one request (paper §4.4):
beam search equals transformers' own, and parallel samples share the prompt."""

import dataclasses
import re

import pytest
import torch

from pagedkit import LLM, SamplingParams
from pagedkit._validation import plural
from pagedkit.memory import EventLog
from pagedkit.scheduler import SchedulerEventKind


def transformers_beams(model, prompt, num_beams, max_new_tokens):
    with torch.inference_mode():
        ids = model.generate(torch.tensor([prompt]), num_beams=num_beams, do_sample=False,
                             max_new_tokens=max_new_tokens, eos_token_id=None, pad_token_id=0,
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    return ids[0, len(prompt):].tolist()


@pytest.mark.parametrize("num_beams", [2, 4])
def test_beam_search_matches_transformers(reference, make_prompts, num_beams):
    build, _, _ = reference("llama")
    model = build()
    prompt_list = make_prompts(seed=3, lengths=(5, 12, 30))
    expected = [transformers_beams(model, p, num_beams, 10) for p in prompt_list]
    llm = LLM(model, block_size=4, num_blocks=200)
    params = SamplingParams(use_beam_search=True, beam_width=num_beams, temperature=0,
                            max_tokens=10, ignore_eos=True)
    outs = llm.generate(prompt_list, params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == expected
    assert llm.llm_engine.memory_stats()["used_blocks"] == 0


def test_beams_fork_share_and_copy_on_write(reference, make_prompts):
    build, _, _ = reference("llama")
    llm = LLM(build(), block_size=4, num_blocks=64)
    engine = llm.llm_engine
    log = EventLog(engine.events)
    engine.add_request("b", make_prompts(lengths=(10,))[0],
                       SamplingParams(use_beam_search=True, beam_width=3, n=2, temperature=0,
                                      max_tokens=8, ignore_eos=True))
    while engine.has_unfinished_requests():
        step = engine.step()
    kinds = log.kinds()
    assert "fork" in kinds and "cow" in kinds
    assert any(e.kind is SchedulerEventKind.FINISH and e.reason == "pruned" for e in log)
    out = step.finished[0]
    assert len(out.outputs) == 2  # n best of 3 beams
    assert out.outputs[0].cumulative_logprob >= out.outputs[1].cumulative_logprob
    assert engine.memory_stats()["used_blocks"] == 0


def test_parallel_samples_share_the_prompt_blocks(reference, make_prompts):
    build, _, _ = reference("llama")
    llm = LLM(build(), block_size=4, num_blocks=64)
    engine = llm.llm_engine
    prompt = make_prompts(lengths=(18,))[0]  # 4 full blocks + 2 tokens
    engine.add_request("p", prompt, SamplingParams(n=4, temperature=1.0, seed=1, max_tokens=6,
                                                    ignore_eos=True))
    engine.step()  # the prompt, once; then four samples fork from it
    group = engine.groups["p"]
    assert len(group.seqs) == 4
    tables = [engine.kv.block_ids(s.seq_id) for s in group.seqs]
    assert all(t == tables[0] for t in tables)
    assert [engine.kv.allocator.ref_count(b) for b in tables[0]] == [4] * 5
    engine.step()  # each sample writes its own token: the shared half-full block is copied
    tables = [engine.kv.block_ids(s.seq_id) for s in group.seqs]
    assert len({t[-1] for t in tables}) == 4
    assert [engine.kv.allocator.ref_count(b) for b in tables[0][:4]] == [4] * 4


def test_seeded_sampling_is_reproducible_and_preemption_proof(reference, make_prompts):
    build, _, _ = reference("llama")
    prompt_list = make_prompts(seed=5)
    params = [SamplingParams(n=2, temperature=0.8, top_p=0.9, top_k=20, seed=s, max_tokens=10,
                             ignore_eos=True) for s in range(len(prompt_list))]

    def run(**engine_args):
        outs = LLM(build(), block_size=4, **engine_args).generate(prompt_list, params,
                                                                   use_tqdm=False)
        return [[c.token_ids for c in o.outputs] for o in outs]

    roomy = run(num_blocks=200)
    assert roomy == run(num_blocks=200)
    assert roomy == run(num_blocks=18)  # preempted and recomputed: same draws
    other = [SamplingParams(n=2, temperature=0.8, seed=s + 100, max_tokens=10, ignore_eos=True)
             for s in range(len(prompt_list))]
    outs = LLM(build(), block_size=4, num_blocks=200).generate(prompt_list, other, use_tqdm=False)
    assert [[c.token_ids for c in o.outputs] for o in outs] != roomy


def test_unseeded_requests_follow_the_engine_seed(reference, make_prompts):
    build, _, _ = reference("llama")
    prompt_list = make_prompts(seed=6)
    params = SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True)

    def run(seed):
        llm = LLM(build(), block_size=8, num_blocks=64, seed=seed)
        return [o.outputs[0].token_ids for o in llm.generate(prompt_list, params, use_tqdm=False)]

    assert run(0) == run(0)
    assert run(0) != run(123)


@pytest.mark.parametrize("num_beams", [2, 4])
def test_beam_search_matches_transformers_on_the_tiny_model(num_beams):
    from pagedkit.models import load_tiny

    model, tokenizer = load_tiny()
    prompt_list = [tokenizer(t)["input_ids"] for t in
                   ("Once upon a time", "The little robot looked at the sky and")]
    expected = [transformers_beams(model, p, num_beams, 12) for p in prompt_list]
    llm = LLM(model, tokenizer, block_size=8, num_blocks=64)
    params = SamplingParams(use_beam_search=True, beam_width=num_beams, temperature=0,
                            max_tokens=12, ignore_eos=True)
    outs = llm.generate(prompt_list, params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == expected
    assert outs[0].outputs[0].text == tokenizer.decode(expected[0], skip_special_tokens=True)


def test_reset_prefix_cache_makes_the_next_call_cold():
    """The prefix cache serves a repeated prompt; after `reset_prefix_cache`
    it serves nothing, and the tokens stay the same."""
    llm = LLM("tiny", enable_prefix_caching=True, block_size=4)
    prompt = "Once upon a time there was a little"
    params = SamplingParams(max_tokens=6, temperature=0.0)
    first = llm.generate(prompt, params)[0]
    warm = llm.generate(prompt, params)[0]
    assert warm.num_cached_tokens > 0
    assert llm.reset_prefix_cache() is True
    cold = llm.generate(prompt, params)[0]
    assert cold.num_cached_tokens == 0
    assert first.outputs[0].token_ids == warm.outputs[0].token_ids == cold.outputs[0].token_ids
    off = LLM("tiny", enable_prefix_caching=False, block_size=4)
    off.generate(prompt, params)
    assert off.reset_prefix_cache() is True  # nothing was named: trivially cold


def test_reset_prefix_cache_is_refused_while_requests_hold_blocks():
    """vLLM's rule: a running request's blocks stay named, so a reset then
    would not give a cold cache; it is refused and changes nothing."""
    llm = LLM("tiny", enable_prefix_caching=True, block_size=4)
    engine = llm.llm_engine
    prompt = "Once upon a time there was a little"
    llm.generate(prompt, SamplingParams(max_tokens=4, temperature=0.0), use_tqdm=False)
    engine.add_request("r", prompt, SamplingParams(max_tokens=4, temperature=0.0))
    engine.step()  # the prompt is in blocks (two of them cache hits)
    before = engine.memory_stats()
    assert llm.reset_prefix_cache() is False
    assert engine.memory_stats() == before
    with pytest.raises(NotImplementedError, match="reset_running_requests=True"):
        llm.reset_prefix_cache(reset_running_requests=True)
    while engine.has_unfinished_requests():
        engine.step()
    assert llm.reset_prefix_cache() is True and engine.memory_stats()["cached_blocks"] == 0


@pytest.mark.parametrize("prompt_len", [5, 8])  # ends mid-block; ends on a block boundary
@pytest.mark.parametrize("kind", ["n", "beam_width"])
def test_a_group_whose_sequences_cannot_all_get_a_block_is_refused(prompt_len, kind):
    """n samples (or beams) share the prompt's full blocks and each needs a
    block of its own for its second token: ``prompt_len // block_size + n``
    blocks. The largest n the cache holds is served exactly as in a roomy
    cache; one more is refused at add time, naming n, the blocks and what to
    do, with nothing queued (newcomer finding: it was served as n one-token
    completions ending with "length", silently)."""
    from pagedkit.models import load_tiny

    model, tokenizer = load_tiny()
    prompt = list(range(3, 3 + prompt_len))
    num_blocks, block_size = 6, 4
    largest = num_blocks - prompt_len // block_size

    def params(width):
        if kind == "n":
            return SamplingParams(n=width, temperature=1.0, seed=7, max_tokens=3,
                                  ignore_eos=True)
        return SamplingParams(use_beam_search=True, beam_width=width, temperature=0,
                              max_tokens=3, ignore_eos=True)

    small = LLM(model, tokenizer, block_size=block_size, num_blocks=num_blocks)
    roomy = LLM(model, tokenizer, block_size=block_size, num_blocks=64)
    got = small.generate(prompt, params(largest), use_tqdm=False)[0]
    want = roomy.generate(prompt, params(largest), use_tqdm=False)[0]
    assert [c.token_ids for c in got.outputs] == [c.token_ids for c in want.outputs]
    assert all(len(c.token_ids) == 3 for c in got.outputs)
    need = prompt_len // block_size + largest + 1
    with pytest.raises(ValueError, match=(
            rf"generate\(\): {kind}={largest + 1} sequences share "
            rf"{plural(prompt_len // block_size, 'full block')} of the prompt .* {need} blocks, "
            rf"but "
            rf"the whole KV cache has {num_blocks}; lower {kind} to {largest}"
            rf"{' or less' * (largest > 1)}, or give "
            rf"the engine num_blocks={need} or more")):
        small.generate(prompt, params(largest + 1), use_tqdm=False)
    assert not small.llm_engine.has_unfinished_requests()
    assert small.llm_engine.memory_stats()["used_blocks"] == 0
    # one token each needs no block of its own: served
    one = small.generate(prompt, dataclasses.replace(params(largest + 1), max_tokens=1),
                         use_tqdm=False)[0]
    assert all(len(c.token_ids) == 1 for c in one.outputs)


@pytest.mark.parametrize("prompt_len", [9, 12, 20, 34])
def test_with_a_sliding_window_the_refusal_counts_only_the_blocks_it_keeps(prompt_len,
                                                                          monkeypatch):
    """Every n from 1 to 9 on a 9-block cache, a model whose every layer slides
    (window 6, blocks of 4): a request is refused exactly when, served anyway (the
    check bypassed), some sequence cannot get past its first token. The window
    frees the prompt's blocks it has left before the second token needs room."""
    from transformers import MistralConfig, MistralForCausalLM

    from pagedkit.engine.llm_engine import LLMEngine

    torch.manual_seed(0)
    model = MistralForCausalLM(MistralConfig(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        sliding_window=6)).eval()
    prompt = list(range(3, 3 + prompt_len))
    verdicts = {}
    for n in range(2, 10):
        params = SamplingParams(n=n, temperature=1.0, seed=3, max_tokens=4, ignore_eos=True)
        llm = LLM(model, block_size=4, num_blocks=9)
        try:
            llm.generate([prompt], params, use_tqdm=False)
            refused = False
        except ValueError as error:
            assert re.search(r"full blocks? of the prompt", str(error))  # 1 full block
            refused = True
        with monkeypatch.context() as m:
            m.setattr(LLMEngine, "_check_sequences_fit", lambda *args: None)
            out = LLM(model, block_size=4, num_blocks=9).generate([prompt], params,
                                                                  use_tqdm=False)[0]
        stuck = any(len(c.token_ids) < 2 for c in out.outputs)
        verdicts[n] = (refused, stuck)
    assert all(refused == stuck for refused, stuck in verdicts.values()), verdicts
    assert any(refused for refused, _ in verdicts.values())  # the boundary is inside 2..9
