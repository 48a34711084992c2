"""Scripted scheduler events for driving a KVCacheManager by hand in the tests."""

from pagedkit.memory import KVCacheManager
from pagedkit.scheduler import Admit, Finish, Preempt, SchedulerEventKind, Step


def emit(kv: KVCacheManager, kind: SchedulerEventKind, seq=None, value=None, step=None) -> None:
    """A scheduler event of `kind`: `value` is the request (admit), the mode
    (preempt) or the reason (finish)."""
    event = {SchedulerEventKind.ADMIT: lambda: Admit(seq, value),
             SchedulerEventKind.PREEMPT: lambda: Preempt(seq, None, value),
             SchedulerEventKind.FINISH: lambda: Finish(seq, None, value),
             SchedulerEventKind.STEP: lambda: Step(step)}[kind]()
    kv.events.emit(event)


def admit(kv: KVCacheManager, seq, request, tokens) -> None:
    """What the scheduler does to start a request: room for its prompt, then ADMIT."""
    assert kv.allocate_slots(seq, tokens) is not None
    emit(kv, SchedulerEventKind.ADMIT, seq, request)


def step(kv: KVCacheManager, number: int) -> None:
    emit(kv, SchedulerEventKind.STEP, step=number)


def tiny_llama():
    """A one-layer random Llama with grouped KV heads: a real transformers
    model for engine tests that need no trained weights."""
    import pytest

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(config).eval()
