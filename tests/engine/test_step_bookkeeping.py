"""The engine's bookkeeping around the forward pass, where it takes shortcuts.

`ModelRunner.execute` keeps `step_macs` by token count (reading a
transformers config takes tens of microseconds) and hands a step in which
every row samples (decodes only) ``logits_to_keep=0`` instead of the row
indices, so the model keeps every row without gathering them. Both must be
exactly what they stand for: the thread chooser sees the figure `step_macs`
computes for that step, and the logits are bitwise those of the gathered rows.
"""

import torch

from pagedkit import LLMEngine, SamplingParams
from pagedkit.model import runner as runner_module
from pagedkit.model.attention import forward_context
from pagedkit.model.threads import step_macs

from .conftest import build, prompts


def engine_with_requests(**engine_args):
    engine = LLMEngine(build("llama"), block_size=4, num_blocks=96, **engine_args)
    for i, prompt in enumerate(prompts()):
        engine.add_request(f"r{i}", prompt, SamplingParams(temperature=0, max_tokens=6 + i,
                                                           ignore_eos=True))
    return engine


def spy_logits_to_keep(engine):
    """Record the ``logits_to_keep`` of every forward of `engine`'s model;
    returns the record and the model's own forward."""
    model = engine.runner.model
    keeps = []
    forward = model.forward

    def spy(*args, **kwargs):
        keeps.append(kwargs["logits_to_keep"])
        return forward(*args, **kwargs)

    model.forward = spy
    return keeps, forward


def test_the_thread_chooser_gets_step_macs_of_every_step(monkeypatch):
    seen = []
    real = runner_module.step_threads

    def spy(macs, **kwargs):
        seen.append(macs)
        return real(macs, **kwargs)

    monkeypatch.setattr(runner_module, "step_threads", spy)
    # chunked prefill with a small budget: steps of many different sizes, some repeated
    engine = engine_with_requests(enable_chunked_prefill=True, max_num_batched_tokens=13)
    sizes = []
    while engine.has_unfinished_requests():
        sizes.append(engine.step().num_batched_tokens)
    config = engine.runner.model.config
    assert len(set(sizes)) >= 5 and len(set(sizes)) < len(sizes)  # the memo is hit and missed
    assert seen == [step_macs(config, n) for n in sizes]


def test_a_decode_only_step_keeps_every_row_and_gets_the_gathered_logits():
    engine = engine_with_requests()
    engine.step()  # every prompt at once
    plan = engine.scheduler.schedule()
    assert plan.scheduled and all(s.num_tokens == 1 for s in plan.scheduled)
    keeps, forward = spy_logits_to_keep(engine)
    logits = engine.runner.execute(plan, engine.kv)
    assert keeps == [0]
    # the same step with the row indices (its K/V are written again to the same slots)
    ids, positions, meta, rows = runner_module.pack_step(plan, engine.kv, engine.runner.device,
                                                         engine.runner.kv_caches)
    assert rows.tolist() == list(range(len(plan.scheduled)))
    with torch.inference_mode(), forward_context(meta):
        gathered = forward(input_ids=ids[None], position_ids=positions[None], use_cache=False,
                           logits_to_keep=rows).logits[0].float()
    assert torch.equal(logits, gathered)


def test_a_step_with_a_prompt_chunk_that_does_not_sample_gathers_its_rows():
    engine = engine_with_requests(enable_chunked_prefill=True, max_num_batched_tokens=16)
    keeps, _ = spy_logits_to_keep(engine)
    out = engine.step()
    assert sum(s.is_prefill for s in out.scheduled) and isinstance(keeps[0], torch.Tensor)
    assert keeps[0].numel() == len(out.new_tokens) < out.num_batched_tokens
