"""A step samples all its sequences together (greedy rows by one argmax over
the step's logits, the others row by row): every request still gets exactly
the tokens it gets alone, against independent references — transformers'
greedy `generate` (with ``min_new_tokens`` for ``min_tokens``), and a
one-sequence-at-a-time loop over the full forward with the sampler's rule."""

import torch

from pagedkit import LLM, SamplingParams
from pagedkit.model.sampler import sample
from tests.engine.conftest import VOCAB

MAX_TOKENS = 10


def hf_greedy_stopping(model, prompt, stop_ids, min_tokens, max_tokens):
    """transformers' greedy generate, stopping at `stop_ids` once `min_tokens` are out."""
    with torch.inference_mode():
        ids = model.generate(torch.tensor([prompt]), max_new_tokens=max_tokens,
                             min_new_tokens=min_tokens, do_sample=False,
                             eos_token_id=list(stop_ids), pad_token_id=0,
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    out = ids[0, len(prompt):].tolist()
    stop = next((i for i, t in enumerate(out) if t in stop_ids), None)
    return out if stop is None else out[:stop + 1]


def reference_samples(model, prompt, params):
    """One request alone, one sequence at a time, the whole sequence through
    the model at every token (no KV cache at all), each row sampled by
    `sample` from the request's own generator: the engine's rule, unbatched."""
    generator = torch.Generator().manual_seed(params.seed)
    stop_ids = set(params.stop_token_ids)  # these tests ignore eos
    seqs, done = [list(prompt)], [False]
    while not all(done):
        for i in range(len(seqs)):
            if done[i]:
                continue
            with torch.no_grad():
                logits = model(torch.tensor([seqs[i]])).logits[0, -1].float()
            if len(seqs[i]) - len(prompt) < params.min_tokens and stop_ids:
                logits[sorted(stop_ids)] = float("-inf")
            count = params.n if len(seqs) < params.n else 1
            tokens = sample(logits, params, count, generator)
            for token in tokens[1:]:  # the first token forks the request into n samples
                seqs.append(seqs[i] + [token])
                done.append(False)
            seqs[i].append(tokens[0])
        for i, seq in enumerate(seqs):
            out = seq[len(prompt):]
            if (out and out[-1] in stop_ids and len(out) >= params.min_tokens) \
                    or len(out) >= params.max_tokens:
                done[i] = True
    return [s[len(prompt):] for s in seqs]


def mixed_batch(make_prompts):
    """Greedy, greedy held off its stop tokens by min_tokens, seeded samples
    (n = 1 and 3, one with min_tokens and a stop token), an unseeded sample
    and a beam search, all in one batch."""
    prompt_list = make_prompts(seed=21, lengths=(3, 9, 14, 17, 6, 25, 11, 30))
    # most tokens stop: until min_tokens only the mask keeps a sequence going
    stop = tuple(t for t in range(VOCAB) if t % 8)
    params = [
        SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True),
        SamplingParams(temperature=0, max_tokens=MAX_TOKENS, min_tokens=4, stop_token_ids=stop,
                       ignore_eos=True),
        SamplingParams(temperature=0.8, top_k=30, seed=3, max_tokens=MAX_TOKENS,
                       ignore_eos=True),
        SamplingParams(temperature=1.2, top_p=0.9, n=3, seed=4, max_tokens=MAX_TOKENS,
                       ignore_eos=True),
        SamplingParams(temperature=1.0, seed=5, max_tokens=MAX_TOKENS, min_tokens=3,
                       stop_token_ids=stop, ignore_eos=True),
        SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS, ignore_eos=True),
        SamplingParams(temperature=0, max_tokens=MAX_TOKENS, min_tokens=2,
                       stop_token_ids=(5, 17, 40, 63), ignore_eos=True),
        SamplingParams(use_beam_search=True, beam_width=3, temperature=0, max_tokens=6,
                       ignore_eos=True),
    ]
    return prompt_list, params


def test_greedy_rows_of_a_mixed_batch_match_transformers(reference, make_prompts):
    build, _, _ = reference("llama")
    prompt_list, params = mixed_batch(make_prompts)
    model = build()
    outs = LLM(build(), block_size=4, num_blocks=256).generate(prompt_list, params,
                                                               use_tqdm=False)
    checked = 0
    for prompt, p, out in zip(prompt_list, params, outs, strict=True):
        if p.greedy and not p.use_beam_search:
            stop_ids = set(p.stop_token_ids)
            expected = hf_greedy_stopping(model, prompt, stop_ids, p.min_tokens, p.max_tokens)
            assert out.outputs[0].token_ids == expected
            checked += 1
    assert checked == 3
    # the stop tokens bite: held off for min_tokens, the request stops right after
    c = outs[1].outputs[0]
    assert c.finish_reason == "stop" and len(c.token_ids) == 5
    assert all(t % 8 == 0 for t in c.token_ids[:4]) and c.token_ids[4] % 8


def test_seeded_rows_of_a_mixed_batch_draw_what_they_draw_alone(reference, make_prompts):
    build, _, _ = reference("llama")
    prompt_list, params = mixed_batch(make_prompts)
    model = build()
    for engine_args in ({"num_blocks": 256}, {"num_blocks": 24}):  # roomy, and preempting
        llm = LLM(build(), block_size=4, **engine_args)
        outs = llm.generate(prompt_list, params, use_tqdm=False)
        seeded = [(prompt, p, out) for prompt, p, out in zip(prompt_list, params, outs,
                                                               strict=True)
                  if p.seed is not None]
        assert len(seeded) == 3
        for prompt, p, out in seeded:
            assert [c.token_ids for c in out.outputs] == reference_samples(model, prompt, p)
        # the seeded request held off its many stop tokens stops soon after min_tokens
        c = outs[4].outputs[0]
        assert c.finish_reason == "stop" and 3 < len(c.token_ids) < MAX_TOKENS
        assert all(t % 8 == 0 for t in c.token_ids[:3])
    assert llm.llm_engine.scheduler.num_preemptions > 0  # the small cache did preempt
