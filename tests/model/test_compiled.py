"""A compiled forward (pagedkit.model.compiled): the switch, the fallbacks, and
the engine's tokens unchanged under torch.compile.

Compiling is slow (tens of seconds per graph on a 2-core machine), so one
compiled engine serves the whole module (`compiled_llm`); the tests that
need no compiled graph build engines whose compiling is never reached.
The tests that compile are marked ``compile`` (``-m 'not compile'`` skips them).
"""

from __future__ import annotations

import re
import warnings

import pytest
import torch

from pagedkit import LLM, SamplingParams
from pagedkit.model import compiled
from pagedkit.model.compiled import ENV_VAR, CompiledForward

pytestmark = pytest.mark.skipif(compiled.compile_unavailable() is not None,
                                reason=f"no compiler here: {compiled.compile_unavailable()}")

#: Prompts of different lengths and outputs of different lengths: the steps are a
#: prefill of all three, decodes of three, of two, and of one (each its own graph)
PROMPTS = [[5, 6, 7], list(range(10, 40)), [100] * 5 + [7, 8]]
MAX_TOKENS = [4, 9, 6]


@pytest.fixture(scope="module")
def compiled_llm():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_VAR, "on")
        return LLM("tiny", num_blocks=64)


@pytest.fixture
def mode(env_switch):
    return env_switch(ENV_VAR)


def greedy(max_tokens: list[int] = MAX_TOKENS) -> list[SamplingParams]:
    return [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in max_tokens]


def tokens(llm: LLM, params) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, params, use_tqdm=False)]


@pytest.mark.compile
def test_compiled_engine_gives_transformers_tokens(compiled_llm):
    from pagedkit.models import load_tiny

    model, _ = load_tiny()
    with torch.inference_mode():
        expected = [model.generate(torch.tensor([p]), max_new_tokens=n, min_new_tokens=n,
                                   do_sample=False, pad_token_id=0)[0, len(p):].tolist()
                    for p, n in zip(PROMPTS, MAX_TOKENS, strict=True)]
    assert tokens(compiled_llm, greedy()) == expected
    forward = compiled_llm.llm_engine.runner.forward
    assert isinstance(forward, CompiledForward) and forward.reason is None
    assert forward.graphs >= 1 and forward.compile_seconds > 0


@pytest.mark.compile
def test_compiled_engine_gives_the_uncompiled_engines_tokens(compiled_llm, mode):
    mode("off")
    plain = LLM("tiny", num_blocks=64)
    assert plain.llm_engine.runner.forward is plain.llm_engine.runner.model
    sampled = [SamplingParams(temperature=0.8, top_p=0.9, seed=s, max_tokens=n, ignore_eos=True)
               for s, n in enumerate(MAX_TOKENS)]
    assert tokens(compiled_llm, greedy()) == tokens(plain, greedy())
    assert tokens(compiled_llm, sampled) == tokens(plain, sampled)
    assert compiled_llm.llm_engine.runner.forward.reason is None


@pytest.mark.compile
def test_chunked_prefill_and_prefix_hits_compiled_give_the_eager_tokens(compiled_llm, mode):
    """Steps that mix prompt chunks, cached prefixes and decodes (the graphs the
    module's engine compiled serve this engine too: the same model structure).
    A prompt chunk that samples nothing leaves the last layer's output unused:
    the op's effect keeps its K/V store in the graph (without it, the next
    request reading that cached prefix got other tokens)."""
    prompts = [list(range(10, 40)), [*range(10, 34), 7, 8], [5, 6, 7]]
    options = dict(num_blocks=64, block_size=4, enable_chunked_prefill=True,
                   max_num_batched_tokens=16, enable_prefix_caching=True)
    mode("on")
    llm = LLM("tiny", **options)
    mode("off")
    plain = LLM("tiny", **options)
    for engine in (llm, plain):  # the second call hits the first one's cached prefixes
        engine.generate(prompts[:1], greedy([2]), use_tqdm=False)
    got, want = ([o.outputs[0].token_ids for o in engine.generate(prompts, greedy(),
                                                                  use_tqdm=False)]
                 for engine in (llm, plain))
    assert got == want
    assert isinstance(llm.llm_engine.runner.forward, CompiledForward)
    assert llm.llm_engine.runner.forward.reason is None


@pytest.mark.compile
def test_the_model_still_generates_outside_a_step(compiled_llm):
    """The compiled forward is the step's; the model a learner holds runs eagerly."""
    model = compiled_llm.llm_engine.runner.model
    with torch.inference_mode():
        out = model.generate(torch.tensor([PROMPTS[0]]), max_new_tokens=3, do_sample=False,
                             pad_token_id=0)
    assert out.shape == (1, len(PROMPTS[0]) + 3)


def test_auto_and_off_leave_the_step_calling_the_model(mode):
    """`auto` (the default) does not compile: the tiny model's step is the
    textbook's (`python -m pagedkit bench calls` counts it)."""
    for value in (None, "off"):
        mode(value)
        runner = LLM("tiny", num_blocks=8).llm_engine.runner
        assert runner.forward is runner.model and runner.compiled is None
        assert runner.model.config._attn_implementation == "pagedkit"
        report = runner.model.pagedkit_compile
        assert report.mode == (value or "auto") and report.reason
        assert "compiled forward: no" in str(report)


def test_a_bad_switch_value_is_an_error_naming_it(mode):
    """... and refused before the caller's model is touched: a 512-wide model,
    whose layers prepacking would replace, comes back with plain ones."""
    from transformers import LlamaConfig, LlamaForCausalLM

    mode("yes")
    with pytest.raises(ValueError, match=rf"{ENV_VAR}='yes' is not one of auto, on, off"):
        LLM("tiny", num_blocks=8)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=256, hidden_size=512, intermediate_size=512, num_hidden_layers=1,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256)).eval()
    layers = {name: type(m) for name, m in model.named_modules()}
    with pytest.raises(ValueError, match=ENV_VAR):
        LLM(model, num_blocks=8)
    assert {name: type(m) for name, m in model.named_modules()} == layers


def test_without_a_compiler_on_warns_and_runs_uncompiled(mode, monkeypatch):
    import torch._inductor.cpp_builder as builder

    def missing():
        raise RuntimeError("no working C++ compiler found")

    monkeypatch.setattr(builder, "get_cpp_compiler", missing)
    mode("on")
    with pytest.warns(UserWarning, match=re.escape("no C++ compiler for inductor")):
        llm = LLM("tiny", num_blocks=64)
    runner = llm.llm_engine.runner
    assert runner.forward is runner.model
    assert "no C++ compiler" in runner.model.pagedkit_compile.reason
    mode("off")
    assert tokens(llm, greedy()) == tokens(LLM("tiny", num_blocks=64), greedy())


def test_a_torch_that_cannot_mark_the_op_effectful_does_not_compile(mode, monkeypatch):
    monkeypatch.setattr(compiled, "_EFFECT_PROBLEM", "this torch cannot mark the op")
    mode("on")
    with pytest.warns(UserWarning, match="this torch cannot mark the op"):
        runner = LLM("tiny", num_blocks=8).llm_engine.runner
    assert runner.forward is runner.model


def test_a_failed_compile_falls_back_for_good_with_the_reason_kept(mode):
    """The step that failed to compile reruns eagerly, and so does every later one."""
    from torch._inductor.exc import InvalidCxxCompiler

    mode("on")
    llm = LLM("tiny", num_blocks=64)
    forward = llm.llm_engine.runner.forward
    calls = []

    def fails(**inputs):
        calls.append(1)
        raise InvalidCxxCompiler()

    forward.compiled = fails
    with pytest.warns(UserWarning, match="compiling failed .InvalidCxxCompiler"):
        got = tokens(llm, greedy())
    assert len(calls) == 1 and forward.reason.startswith("compiling failed")
    mode("off")
    assert got == tokens(LLM("tiny", num_blocks=64), greedy())


def test_an_error_of_the_step_itself_is_not_taken_for_a_failed_compile(mode):
    mode("on")
    llm = LLM("tiny", num_blocks=64)
    forward = llm.llm_engine.runner.forward

    def wrong(**inputs):
        raise ValueError("a learner's kernel returned the wrong shape")

    forward.compiled = wrong
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="wrong shape"):
            llm.generate(PROMPTS[:1], greedy([2]), use_tqdm=False)
    assert forward.reason is None


def test_a_prepacked_model_is_compiled_with_plain_linears(mode):
    """A `PackedLinear`'s checks of its weight would break the graph."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from pagedkit.model.accel import PackedLinear

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=256, hidden_size=512, intermediate_size=512, num_hidden_layers=1,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256)).eval()
    mode("on")
    llm = LLM(model, num_blocks=8)
    served = llm.llm_engine.runner.model
    assert not any(isinstance(m, PackedLinear) for m in served.modules())
    assert "compiled forward" in served.pagedkit_prepack.reason
    assert isinstance(llm.llm_engine.runner.forward, CompiledForward)


def test_the_op_refuses_to_run_outside_a_step():
    q = torch.zeros(1, 4, 2, 8)
    kv = torch.zeros(1, 2, 2, 8)
    with pytest.raises(RuntimeError, match="inside an engine step only"):
        compiled.paged_attention_op(q, kv, kv, "LlamaAttention", 0, None, None, None, None)
