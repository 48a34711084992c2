"""Lab 01 exercises: what a KV cache costs and what it saves (paper §2.2, §3).

* `cached_kv_reads` — the cache saves recomputing K/V, not reading them: the
  token positions whose K/V the decode steps read, a count that grows with
  every step (what makes decoding's memory traffic grow with the context).
* `max_batch` — how many full-length sequences fit beside the weights: the
  size formula turned into the number that caps a server's batch.
* `kv_bytes_per_token` — the size formula read off a real transformers
  config, where grouped-query attention and an explicit ``head_dim`` hide.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

from ..i18n import N_, _
from . import Case, CheckResult, check_function, fresh, in_stub_order, is_count, same_items
from ._count_notes import never_a_count, one_count

__all__ = ["CHECKS", "check_cached_kv_reads", "check_kv_bytes_per_token", "check_max_batch"]

GIB = 2**30


@in_stub_order
def check_cached_kv_reads(fn: Callable[[int, int], int]) -> CheckResult:
    """`cached_kv_reads(prompt_len, new_tokens)`: token positions whose K/V the
    decode steps read (per layer and KV head) while a cached generation writes
    `new_tokens` tokens after a prompt; the prefill pass is not counted."""
    steps = (_("The prefill pass yields the first new token; only the new_tokens - 1 later "
             "tokens are fed back, one decode step each"))
    grows = (_("The step that feeds the token at position p attends over positions 0..p, its "
             "own included: every step reads one position more than the last"))
    cases = [
        Case((5, 1), 0, _("one new token comes from the prefill alone: no decode step. {steps}")
                         .format(steps=steps)),
        Case((5, 2), 6, _("one decode step feeds the first new token (position 5) and reads "
                        "positions 0..5: 6")),
        Case((5, 3), 13, _("two decode steps read 6, then 7 positions. {grows}")
                          .format(grows=grows)),
        Case((10, 100), 5_940, _("99 decode steps reading 11, 12, ..., 109 positions. {grows}")
                                .format(grows=grows)),
        Case((157, 128), 28_067, _("lab 01's run: 127 decode steps, the first reads 158 "
                                   "positions. {steps}").format(steps=steps)),
        Case((1, 4), 9, _("a 1-token prompt: 3 decode steps read 2, 3 and 4 positions")),
        Case((3, 0), 0, _("generating nothing runs nothing")),
    ]
    return check_function("cached_kv_reads", fn, cases, diagnose=_reads_mistake)


def _reads_mistake(fn: Callable, case: Case, got: Any) -> str:
    """`one_count`'s note, else a product of the prompt and the steps: every
    step reading the prompt alone, as if the context did not grow."""
    note = one_count(fn, case, got)
    if note:
        return note
    prompt_len, new_tokens = case.args
    steps = new_tokens - 1
    if not is_count(got):  # (an odd answer has its own verdict)
        return ""
    try:  # one more call tells a product from a constant or another slip
        product = any(same_items(fn(10, 100), n) for n in (1_000, 990))
    except Exception:  # (its error is the case's to say, if any: this only explains)
        return ""
    if product and got in (prompt_len * new_tokens, prompt_len * steps):
        return (_("{got} = {prompt_len} x {n}: every step reads the prompt's {prompt_len} "
                  "positions alone. The context grows: the step that feeds the token at "
                  "position p reads positions 0..p, one more than the step before, and the "
                  "first new token comes from the prefill, not a decode step")
                .format(got=got, prompt_len=prompt_len,
                        n=new_tokens if got == prompt_len * new_tokens else steps))
    return ""


@in_stub_order
def check_max_batch(fn: Callable[[int, int, int, int, int], int]) -> CheckResult:
    """`max_batch(gpu_bytes, num_params, param_bytes, kv_bytes_per_token, seq_len)`:
    how many sequences of `seq_len` tokens have room for their whole KV cache in
    what the weights leave of the GPU's memory. Text, a bool or a number with a
    fraction gets the note for its kind (`never_a_count`) in place of the case's
    hint: 10.1 is not "10.1 sequences, nearly right" but a fraction of a sequence,
    which does not fit (issue #26)."""
    weights = _("the weights come first: num_params x param_bytes bytes, the rest holds K/V")
    floor = _("A sequence whose cache does not fit whole does not fit: round down")
    cases = [
        Case((40 * GIB, 13 * 10**9, 2, 819_200, 2048), 10,
             _("OPT-13B on a 40 GiB GPU: {weights}; 16.9e9 bytes / (2048 x 800 KiB) = 10.1, "
               "so 10. {floor}").format(weights=weights, floor=floor)),
        Case((40 * GIB, 13 * 10**9, 2, 819_200, 500), 41,
             _("the same GPU, sequences of 500 tokens: 41.4, so 41. {floor}").format(floor=floor)),
        Case((80 * GIB, 13 * 10**9, 2, 819_200, 2048), 35,
             _("twice the GPU memory, but the weights stay 26 GB: 35.7, so 35 sequences, not "
               "2 x 10. {floor}").format(floor=floor)),
        Case((24 * GIB, 8 * 10**9, 2, 131_072, 8192), 9,
             _("Llama-3-8B (GQA, 128 KiB a token) at 8K context on 24 GiB: 9.1. {floor}")
              .format(floor=floor)),
        Case((24 * GIB, 8 * 10**9, 1, 131_072, 8192), 16,
             _("the same with 1-byte (int8) weights: the weights take half, and only the "
               "weights: the KV cache keeps its own dtype. 16.5, so 16")),
        Case((16 * GIB, 13 * 10**9, 2, 819_200, 2048), 0,
             _("26 GB of weights do not fit in 16 GiB: no sequence fits (not a negative number)")),
        Case((1000, 100, 2, 10, 40), 2, _("{weights}: 800 bytes left, 400 per sequence")
                                         .format(weights=weights)),
        Case((1000, 100, 2, 10, 41), 1, _("410 bytes a sequence: 800 / 410 = 1.95. {floor}")
                                         .format(floor=floor)),
    ]
    fraction = _("a fraction of a sequence does not fit: a sequence's cache fits whole or not "
                 "at all, so round down: divide with `//`, which keeps an int")
    return check_function("max_batch", fn, cases,
                          diagnose=lambda _fn, _case, got: never_a_count(got, fraction))


class _Config:
    """A transformers config with a one-line repr, so a failing case reads
    ``kv_bytes_per_token(OPTConfig<OPT-13B>, 2)`` instead of a page of JSON.
    Attribute reads (and so ``getattr``/``hasattr``) go to the real config."""

    def __init__(self, config: Any, name: str) -> None:
        self._config, self._name = config, name

    def __getattr__(self, attr: str) -> Any:
        if attr == "_config":  # not set yet (a copy being made): no config to ask
            raise AttributeError(attr)
        return getattr(self._config, attr)

    def __repr__(self) -> str:
        return f"{type(self._config).__name__}<{self._name}>"


def _configs() -> list[tuple[str, Any, int, int, str]]:
    """(name, config, dtype_bytes, expected bytes per token, hint), built offline from
    the published sizes of each model (no hub access needed)."""
    from transformers import AutoConfig, GPT2Config, LlamaConfig, OPTConfig, Qwen2Config

    from ..models import TINY_DIR

    no_kv = (_("this config has no `num_key_value_heads`: every attention head keeps its own "
             "K and V (use getattr(config, 'num_key_value_heads', None) and fall back)"))
    return [
        ("tiny", AutoConfig.from_pretrained(TINY_DIR), 4, 4096,
         _("the tiny model: 4 layers, 2 KV heads (4 query heads share them), head_dim 64")),
        ("OPT-13B",
         OPTConfig(num_hidden_layers=40, num_attention_heads=40, hidden_size=5120),
         2, 819_200, _("OPT-13B, the paper's 800 KiB per token; {no_kv}").format(no_kv=no_kv)),
        ("Llama-3-8B",
         LlamaConfig(num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                     hidden_size=4096),
         2, 131_072, _("Llama-3-8B uses grouped-query attention: count `num_key_value_heads` "
                     "(8), not `num_attention_heads` (32)")),
        ("Qwen2.5-0.5B",
         Qwen2Config(num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                     hidden_size=896),
         2, 12_288, _("Qwen2.5-0.5B: no `head_dim` in its config, so head_dim = hidden_size "
                    "// num_attention_heads = 64")),
        ("Qwen3-0.6B-like",
         LlamaConfig(num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                     hidden_size=1024, head_dim=128),
         2, 114_688, _("a config whose `head_dim` (128) is NOT hidden_size // heads (64): "
                     "when a config states head_dim, use it")),
        ("GPT-2", GPT2Config(n_layer=12, n_head=12, n_embd=768), 2, 36_864,
         _("GPT-2 names its sizes n_layer/n_head/n_embd, but transformers maps the standard "
           "names onto them; {no_kv}").format(no_kv=no_kv)),
    ]


@in_stub_order
def check_kv_bytes_per_token(fn: Callable[[Any, int], int]) -> CheckResult:
    """`kv_bytes_per_token(config, dtype_bytes)` from a transformers config."""
    cases = [Case((_Config(config, name), dtype_bytes), expected, hint)
             for name, config, dtype_bytes, expected, hint in _configs()]
    return check_function("kv_bytes_per_token", fn, cases, diagnose=lambda fn, case, got:
                          one_count(fn, case, got) or _scale_mistake(fn, cases))


#: Answers off by one factor on every case, and what that factor means (newcomer 39
#: left out the 2 and counted bits, and was told the tiny model's sizes again).
_SCALES = {
    Fraction(1, 2): N_("every answer is half the bytes: a token keeps a key AND a value in "
                       "each layer, so multiply by 2"),
    Fraction(8): N_("every answer is 8 times the bytes: that counts bits; dtype_bytes is "
                    "already in bytes"),
    Fraction(4): N_("every answer is 4 times the bytes, as bits (x 8) with the key-and-value "
                    "2 left out are: dtype_bytes is already in bytes, and a token keeps a key "
                    "AND a value"),
}


def _scale_mistake(fn: Callable, cases: list[Case]) -> str:
    """`_SCALES`' hint where `fn` is off by that one factor on every case
    (fresh arguments each call); '' otherwise, or where it raises."""
    try:
        ratios = {Fraction(fn(*fresh(case.args))) / case.expected for case in cases}
    except Exception:  # (its error, or an answer that is no number, is a case's to say)
        return ""
    (ratio,) = ratios if len(ratios) == 1 else (None,)
    return _(_SCALES[ratio]) if ratio in _SCALES else ""


CHECKS = {
    "cached_kv_reads": check_cached_kv_reads,
    "max_batch": check_max_batch,
    "kv_bytes_per_token": check_kv_bytes_per_token,
}
