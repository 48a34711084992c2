"""Serve a model only when pagedkit can show it computes what transformers does.

pagedkit runs a transformers model unchanged and takes over one thing: the
attention function, through transformers' attention registry (see
`pagedkit.model.attention`). That is only right if *every* attention
computation of *every* layer comes through that function, once per layer
per step, with the shapes the KV cache is sized for, and if nothing about
the attention — a window, a softcap, sinks, a mask of the model's own —
is lost on the way. A model that computes attention itself (BLOOM,
GPT-Neo), calls the function twice in a layer (DiffLlama), keeps recurrent
state (Mamba, hybrid models), or whose heads differ between keys and values
(multi-head latent attention) would give *different tokens with no error*.

So `check_supported` proves it instead of trusting a list of model names:

1. **the config**: every field that could change attention (by name:
   ``attn``, ``attention``, ``window``, ``softcap``, ``sink``, ``chunk``,
   ``alibi``, ``temperature``) must be one pagedkit understands
   (`UNDERSTOOD_FIELDS`, each with the reason); any other that is set is
   refused — a feature that bites only at long contexts (Llama 4's chunked
   attention and temperature) would slip past any short test;
2. **a probe**: three engine steps on a few tokens (a prefill, a chunk over
   the cached prefix, a decode) through the paged path, recording every
   attention call (`attention.recording`): each layer exactly once per step,
   key/value/query head sizes and KV heads as the cache expects, and each
   call's window equal to the mask transformers itself built for that
   layer, compared position by position up to ``max_model_len`` (capped at
   `MASK_CHECK_POSITIONS`); the paged path itself refuses any keyword it
   does not implement;
3. **the numbers**: the probe's logits equal transformers' own, computed as
   `generate` does (eager attention over its own cache, in the same steps),
   to a tolerance for the dtype.

Anything else raises one `NotImplementedError` naming the architecture, the
feature and what to do instead, before the engine reserves KV memory.
"""

from __future__ import annotations

import inspect
import itertools
import re
from typing import Any

import torch

from .. import ops
from ..i18n.terminal import HelpFormatter
from .attention import (
    ATTENTION_NAME,
    AttentionCall,
    AttentionMetadata,
    forward_context,
    recording,
    register,
)
from .kv_cache import KVCacheSpec

#: Config fields whose names suggest attention, and why each is safe.
UNDERSTOOD_FIELDS: dict[str, str] = {
    "num_attention_heads": "head count; the probe checks the shapes of every call",
    "parallel_attn": "attention and MLP side by side in a block, computed by the model",
    "num_ln_in_parallel_attn": "how many LayerNorms precede the parallel attention and MLP "
                               "(Falcon-40B/180B): a layer norm count, computed by the model",
    "attention_heads": "head count; the probe checks the shapes of every call",
    "decoder_attention_heads": "head count; the probe checks the shapes of every call",
    "num_attention_heads_per_layer": "head counts per layer; the probe checks every call's",
    "attention_softmax_in_fp32": "numerics of the eager path; the paged kernels' softmax is "
                                 "float32",
    "scale_attention_softmax_in_fp32": "numerics of the eager path, as above",
    "sliding_window_pattern": "which layers slide; becomes layer_types, whose windows are "
                              "checked against transformers' mask",
    "attention_bias": "bias of the Q/K/V/O projections, computed by the model",
    "attention_dropout": "dropout: none in eval mode (a call asking for it is refused)",
    "attn_pdrop": "dropout: none in eval mode",
    "attention_probs_dropout_prob": "dropout: none in eval mode",
    "sliding_window": "reaches the attention call as sliding_window=, checked against "
                      "transformers' own mask of every layer",
    "use_sliding_window": "turns sliding_window on (Qwen2): see sliding_window",
    "max_window_layers": "which layers slide (Qwen2): see sliding_window",
    "attn_logit_softcapping": "reaches the attention call as softcap=",
    "final_logit_softcapping": "applied to the output logits by the model itself",
    "attention_multiplier": "the score scale (Granite), passed to the attention call as scaling=",
    "query_pre_attn_scalar": "the score scale (Gemma), passed as scaling=",
    "scale_attn_weights": "the score scale (GPT-2), passed as scaling=",
    "scale_attn_by_inverse_layer_idx": "the score scale (GPT-2), passed as scaling=",
    "reorder_and_upcast_attn": "numerics of GPT-2's eager path only (float32 scores); the "
                               "paged kernels compute scores in float32 too",
}
_ATTENTION_WORDS = re.compile(r"attn|attention|window|softcap|sink|chunk|alibi|temperature")
#: Layer types whose attention the paged kernels compute.
SERVED_LAYER_TYPES = ("full_attention", "sliding_attention")
#: Query positions up to which the probe compares masks (beyond: windows seen, and the last).
MASK_CHECK_POSITIONS = 1 << 14
#: Probe logits against transformers' eager forward: max |diff| / max(1, max |logit|).
PROBE_TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-3, torch.float16: 5e-2,
                   torch.bfloat16: 1e-1}

_INSTEAD = "serve it with transformers' generate (or vLLM), or pick a model pagedkit serves " \
           "(docs/architectures.md)"


def architecture(model: torch.nn.Module) -> str:
    return type(model).__name__


def refuse(model: torch.nn.Module, feature: str) -> NotImplementedError:
    return NotImplementedError(f"pagedkit cannot serve {architecture(model)}: {feature}; "
                               f"{_INSTEAD}")


def check_config(model: torch.nn.Module) -> None:
    """Step 1: an attention shape, and no attention feature in the config that
    pagedkit does not understand (also run by `ModelRunner` before it sizes anything)."""
    config = model.config
    if getattr(config, "is_encoder_decoder", False):
        raise refuse(model, "it is an encoder-decoder; pagedkit serves decoder-only models")
    refuse_decoder_alone(architecture(model), config)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None) or []
    other = sorted(set(layer_types) - set(SERVED_LAYER_TYPES))
    if other:
        raise refuse(model, f"its config has layer types {other} (pagedkit computes "
                            f"{list(SERVED_LAYER_TYPES)} only)")
    try:
        KVCacheSpec.from_config(config, torch.float32)
    except AttributeError as err:
        raise refuse(model, f"its config gives no attention shape ({err}): not an attention "
                            "model") from err
    for name, value in sorted(text.to_dict().items()):
        if _refused(name, value):
            raise refuse(model, f"its config sets {_offending(name, value)}, an attention "
                                "feature pagedkit does not implement")


def decoder_alone(config: Any) -> str | None:
    """Why pagedkit refuses `config` when it is the decoder of an encoder-decoder
    family built alone (BartForCausalLM, MarianForCausalLM, ...: is_encoder_decoder
    is False, but the family's default config is an encoder-decoder), else None.
    Its layers are the family's decoder layers, each with a cross-attention to an
    encoder, and its config still describes that encoder; the config check would
    otherwise name an encoder field (``encoder_attention_heads``) as an attention
    feature, which is not the reason."""
    if getattr(config, "is_encoder_decoder", False):
        return None
    try:
        family_default = type(config)()
    except (TypeError, ValueError):
        return None
    if not getattr(family_default, "is_encoder_decoder", False):
        return None
    fields = [name for name in sorted(config.to_dict())
              if "encoder" in name and name != "is_encoder_decoder"][:3]
    named = f" ({', '.join(fields)})" if fields else ""
    return (f"it is the decoder of the encoder-decoder family {config.model_type!r} built "
            f"alone (is_encoder_decoder = False): its layers keep their cross-attention to an "
            f"encoder and its config still describes the encoder{named}; pagedkit serves "
            f"decoder-only model families")


def refuse_decoder_alone(who: str, config: Any) -> None:
    """Raise NotImplementedError naming `who` (the architecture, and where the
    loader read it) when `config` is an encoder-decoder family's decoder alone
    (`decoder_alone`): the one sentence the loader and `check_config` both say."""
    alone = decoder_alone(config)
    if alone:
        raise NotImplementedError(
            f"pagedkit cannot serve {who}: {alone}; serve it with transformers' generate, "
            "or pick a decoder-only model pagedkit serves (docs/architectures.md)")


def _refused(name: str, value: Any) -> bool:
    """Whether the config field `name` is one pagedkit refuses: set, not private, not
    understood (`UNDERSTOOD_FIELDS`, ``layer_types``), and named like an attention
    feature (`_ATTENTION_WORDS`). The rule for a field and for a sub-config's key."""
    return not (name.startswith("_") or name in UNDERSTOOD_FIELDS or name == "layer_types"
                or not _ATTENTION_WORDS.search(name) or _unset(value))


def _offending(name: str, value: Any) -> str:
    """``name = value`` of a refused field; of a sub-config (MPT's ``attn_config``), the
    first of its own keys that `_refused` refuses (``attn_config['alibi'] = True``),
    not the whole dict; a sub-config with no such key is named by its set keys."""
    if not isinstance(value, dict):
        return f"{name} = {value!r}"
    for key, inner in sorted(value.items()):
        if _refused(key, inner):
            return _offending(f"{name}[{key!r}]", inner)
    return f"{name} (keys {sorted(k for k, v in value.items() if not _unset(v))})"


def position_limit(config: Any) -> tuple[int | None, str]:
    """The longest sequence pagedkit serves exactly, and what sets it: the
    config's ``max_position_embeddings`` (None where it states none), or less
    where the rotary embedding changes per forward.

    transformers' `dynamic_rope_update` rebuilds the rotary frequencies of a
    ``longrope`` model every forward from the *longest* position in it: the
    short factor while it is under ``original_max_position_embeddings``, the
    long factor past it. Its `generate` runs one sequence, so that is the
    sequence's own length; pagedkit packs every sequence of a step into one
    forward, so one long sequence would switch the factor for all the short
    ones beside it, and their tokens would depend on the batch. Up to
    ``original_max_position_embeddings`` every forward uses the short factor,
    as `generate` does for each sequence alone. (``dynamic`` NTK scaling
    rebuilds them the same way, but only past ``max_position_embeddings``,
    which already bounds every sequence: nothing to lower.)"""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    positions = getattr(text, "max_position_embeddings", None)
    for params in _rope_parameters(text):
        if (params.get("rope_type") or params.get("type")) != "longrope":
            continue
        original = params.get("original_max_position_embeddings",
                              getattr(text, "original_max_position_embeddings", None))
        if original is not None and (positions is None or original < positions):
            return original, LONGROPE_LIMIT
    return positions, "max_position_embeddings in its config"


#: Why a longrope model's limit is its original_max_position_embeddings (see `position_limit`).
LONGROPE_LIMIT = ("original_max_position_embeddings of its longrope rotary embedding: "
                  "transformers picks the short or the long factor per forward by the longest "
                  "position in it, and pagedkit packs every sequence of a step into one forward, "
                  "so a longer sequence would switch the factor for the others in its batch")


def _rope_parameters(text: Any) -> list[dict]:
    """The config's rotary parameters: one dict, or one per layer type."""
    params = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None)
    if not isinstance(params, dict):
        return []
    if "rope_type" in params or "type" in params:
        return [params]
    return [v for v in params.values() if isinstance(v, dict)]


def _unset(value: Any) -> bool:
    return value is None or value is False or (isinstance(value, (int, float)) and value == 0) \
        or (isinstance(value, (str, list, tuple, dict)) and not value)


#: the errors `check_kernel_setting` raises: ValueError for a PAGEDKIT_KERNELS that names
#: no backend, RuntimeError for a forced Triton that cannot run on the device
KERNEL_SETTING_ERRORS = (RuntimeError, ValueError)


def check_kernel_setting(device: torch.device | str) -> None:
    """Raise the kernel setting's own error (`KERNEL_SETTING_ERRORS`: one line, naming the
    setting and what to do) where it cannot run on `device`: a bad PAGEDKIT_KERNELS, or
    Triton forced (by it or `ops.set_backend`) where it cannot run. The one check of the
    setting: `check_supported` runs it first (so the engine raises it, not a refusal of
    the model), and ``python -m pagedkit demo`` before it loads a model."""
    ops.backend(device)


def check_supported(model: torch.nn.Module, *, block_size: int, max_model_len: int,
                    spec: KVCacheSpec | None = None) -> list[int | None]:
    """Raise `NotImplementedError` unless `model` is served exactly (see the module
    docstring). The model should already be on its device and dtype.

    Returns each layer's sliding window as the probe saw it reach attention
    (``None``: full attention; a layer whose window changed between the probe's
    steps reads as ``None``), which tells the engine whether blocks that left
    the window may be given back."""
    check_config(model)
    param = next(model.parameters())
    check_kernel_setting(param.device)  # first: the user's setting to fix, not the model
    spec = spec or KVCacheSpec.from_config(model.config, param.dtype)
    register()
    previous = getattr(model.config, "_attn_implementation", None)
    try:
        model.set_attn_implementation(ATTENTION_NAME)
        cuts = _probe_steps(block_size, max_model_len)
        ids, paged_logits, steps = _probe(model, spec, block_size, cuts, param.device)
        for calls in steps:
            _check_calls(model, spec, calls, max_model_len)
        _check_numbers(model, ids, paged_logits, param.dtype, cuts)
        return _layer_windows(spec, steps)
    finally:
        if previous is not None:
            model.set_attn_implementation(previous)


def _layer_windows(spec: KVCacheSpec, steps) -> list[int | None]:
    seen: list[set] = [set() for _ in range(spec.num_layers)]
    for calls, _ in steps:
        for c in calls:
            seen[c.layer_idx].add(c.kwargs.get("sliding_window"))
    return [next(iter(w)) if len(w) == 1 else None for w in seen]


def _rows_kept(start: int, end: int, device: torch.device) -> torch.Tensor:
    """The rows whose logits the probe asks for, as the engine does (a tensor of
    row indices as `logits_to_keep`): the first and the last of each step."""
    return torch.tensor(sorted({0, end - start - 1}), device=device)


def _probe_steps(block_size: int, max_model_len: int) -> list[int]:
    """Step boundaries of the probe: a prefill past a block, a 2-token chunk over
    the cached prefix, a decode: at least 4 tokens, so that no step is empty (a
    max_model_len of 2 or 3 gave the prefill none)."""
    total = max(4, min(block_size + 5, max_model_len))
    return [0, total - 3, total - 1, total]


@torch.inference_mode()
def _probe(model, spec: KVCacheSpec, block_size: int, cuts: list[int],
           device: torch.device) -> tuple[torch.Tensor, torch.Tensor, list[tuple[Any, Any]]]:
    """Three paged steps of one sequence: prefill, a chunk over the cached
    prefix, a decode. Returns the tokens, every position's logits and each
    step's calls (with the masks transformers built)."""
    total = cuts[-1]
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (total,), generator=torch.Generator().manual_seed(0))
    blocks = -(-total // block_size)
    caches = spec.allocate(blocks, block_size, device)
    table = torch.arange(blocks, dtype=torch.int32, device=device)[None]
    logits, steps = [], []
    for start, end in itertools.pairwise(cuts):
        meta = AttentionMetadata(
            slot_mapping=torch.arange(start, end, device=device), block_tables=table,
            context_lens=torch.tensor([end], dtype=torch.int32, device=device),
            cu_seqlens_q=torch.tensor([0, end - start], dtype=torch.int32, device=device),
            num_decodes=int(end - start == 1), kv_caches=caches)
        with recording() as rec, forward_context(meta):
            try:
                out = model(input_ids=ids[None, start:end].to(device),
                            position_ids=torch.arange(start, end, device=device)[None],
                            use_cache=False, logits_to_keep=_rows_kept(start, end, device))
            except NotImplementedError as err:
                raise refuse(model, str(err)) from err
            except Exception as err:
                if not rec.calls:
                    raise refuse(model, "its forward fails without a KV cache of "
                                        f"transformers' own ({type(err).__name__}: {err})") from err
                raise refuse(model, f"its forward through the paged attention fails "
                                    f"({type(err).__name__}: {err})") from err
        logits.append(out.logits[0].float())
        steps.append((rec.calls, rec.mask_functions))
    return ids, torch.cat(logits), steps


def _check_calls(model, spec: KVCacheSpec, recorded, max_model_len: int) -> None:
    """Step 2: once per layer, the cache's shapes, the mask transformers meant."""
    calls, mask_functions = recorded
    if not calls:
        raise refuse(model, "its layers do not call transformers' attention registry (the model "
                            "computes attention itself), so the paged cache would never be used")
    layers = [c.layer_idx for c in calls]
    if None in layers:
        raise refuse(model, f"{calls[layers.index(None)].module} has no layer_idx, so its K/V "
                            "have no cache of their own")
    twice = sorted({i for i in layers if layers.count(i) > 1})
    if twice:
        raise refuse(model, f"layer {twice[0]} calls the attention function "
                            f"{layers.count(twice[0])} times per forward ({calls[0].module}); "
                            "each call would overwrite the cached K/V of the one before")
    missing = sorted(set(range(spec.num_layers)) - set(layers))
    if missing or len(layers) != spec.num_layers:
        raise refuse(model, f"only layers {sorted(layers)} of {spec.num_layers} call the "
                            f"attention function (layers {missing} keep state of another kind: "
                            "recurrent, linear or their own attention)")
    for c in calls:
        _check_shapes(model, spec, c)
        _check_mask(model, c, mask_functions, max_model_len)


def _check_shapes(model, spec: KVCacheSpec, c: AttentionCall) -> None:
    q_heads, q_dim = c.query_shape[1], c.query_shape[-1]
    kv_heads, k_dim, v_dim = c.key_shape[1], c.key_shape[-1], c.value_shape[-1]
    if c.value_shape[:-1] != c.key_shape[:-1] or v_dim != k_dim:
        raise refuse(model, f"layer {c.layer_idx}'s values {list(c.value_shape)} differ in shape "
                            f"from its keys {list(c.key_shape)} (e.g. multi-head latent "
                            "attention); the paged cache stores K and V alike")
    if (kv_heads, k_dim) != (spec.num_kv_heads, spec.head_dim) or q_dim != k_dim:
        raise refuse(model, f"layer {c.layer_idx} attends with {q_heads} query heads of {q_dim} "
                            f"and {kv_heads} KV heads of {k_dim}, but its config says "
                            f"{spec.num_kv_heads} KV heads of {spec.head_dim}, which the cache "
                            "is sized for")
    if q_heads % kv_heads:
        raise refuse(model, f"layer {c.layer_idx} has {q_heads} query heads for {kv_heads} KV "
                            "heads, not a multiple")


def _check_mask(model, c: AttentionCall, mask_functions: dict, max_model_len: int) -> None:
    """The window this call passes must be exactly the mask transformers built."""
    window = c.kwargs.get("sliding_window")
    if c.mask is None:
        intended, what = None, "no mask (plain causal attention)"
    elif isinstance(c.mask, torch.Tensor) and id(c.mask) in mask_functions:
        intended, what = mask_functions[id(c.mask)], "transformers' mask"
    else:
        raise refuse(model, f"{c.module} (layer {c.layer_idx}) attends with a mask it made "
                            "itself (a dynamic or learned mask), which the paged kernels do not "
                            "apply")
    limit = min(max_model_len, MASK_CHECK_POSITIONS)
    rows = set(range(min(64, limit))) | {limit - 1}
    rows |= {p for i in range(limit.bit_length()) for p in (2 ** i - 1, 2 ** i)}
    if window is not None:
        rows |= {window - 1, window, window + 1, 2 * window}
    q = torch.tensor(sorted(p for p in rows if 0 <= p < limit))[:, None]
    k = torch.arange(limit + 1)[None, :]
    ours = k <= q
    if window is not None:
        ours = ours & (k > q - window)
    if intended is None:
        theirs = k <= q
    else:
        zero = torch.zeros((), dtype=torch.long)
        try:
            theirs = intended(zero, zero, q, k).expand_as(ours).bool()
        except Exception as err:
            raise refuse(model, f"layer {c.layer_idx}'s mask function cannot be checked "
                                f"({type(err).__name__}: {err})") from err
    if not torch.equal(ours, theirs):
        i, j = (int(v) for v in (ours != theirs).nonzero()[0])
        p, key = int(q[i, 0]), int(k[0, j])
        raise refuse(model, f"layer {c.layer_idx} ({c.module}): at query position {p}, key {key} "
                            f"is {'visible' if theirs[i, j] else 'hidden'} under {what} but "
                            f"{'visible' if ours[i, j] else 'hidden'} to the paged kernels "
                            f"(sliding_window={window}): an attention pattern pagedkit does not "
                            "implement (e.g. chunked or bidirectional attention)")


@torch.inference_mode()
def _check_numbers(model, ids: torch.Tensor, paged_logits: torch.Tensor,
                   dtype: torch.dtype, cuts: list[int]) -> None:
    """Step 3: the probe's logits are transformers' own, computed as its
    `generate` computes them: eager attention over its own KV cache, in the
    same steps (a model whose cache keeps less than its mask shows, as
    Moshi's keeps a window its mask does not apply, is caught here)."""
    device = next(model.parameters()).device
    try:
        model.set_attn_implementation("eager")
        name = "cache" if "cache" in inspect.signature(model.forward).parameters \
            else "past_key_values"
        cache, logits = None, []
        for start, end in itertools.pairwise(cuts):
            out = model(input_ids=ids[None, start:end].to(device),
                        position_ids=torch.arange(start, end, device=device)[None],
                        use_cache=True, **({name: cache} if cache is not None else {}))
            cache = getattr(out, name, None)  # the name this version reads and writes
            logits.append(out.logits[0, _rows_kept(start, end, device)].float())
        ref = torch.cat(logits)
    except Exception as err:
        raise refuse(model, f"transformers' own eager forward fails, so there is nothing to check "
                            f"the paged one against ({type(err).__name__}: {err})") from err
    finally:
        model.set_attn_implementation(ATTENTION_NAME)
    diff = float((paged_logits - ref).abs().max()) / max(1.0, float(ref.abs().max()))
    if not diff <= PROBE_TOLERANCE.get(dtype, 1e-1):
        raise refuse(model, f"on a probe of {ids.numel()} tokens its logits through the paged "
                            f"cache differ from transformers' own cached forward by {diff:.2g} "
                            f"(relative), more than the {dtype} tolerance "
                            f"{PROBE_TOLERANCE.get(dtype, 1e-1)}: it computes something the "
                            "engine does not reproduce (positions assumed to start at 0, a mask "
                            "or a cache of its own)")


# ------------------------------------------------------------------ the table in the docs
def refusal_feature(message: str) -> str:
    """The feature part of a refusal: what sits between the architecture and the advice."""
    head, _, rest = message.partition(": ")
    rest = rest.removesuffix(f"; {_INSTEAD}")
    return rest if head.startswith("pagedkit cannot serve") else message


def render_docs(results: dict[str, dict], transformers_version: str) -> str:
    """docs/architectures.md from the enumeration test's results (docs/architectures.json),
    which hold the version of transformers they were measured with."""
    counts = {s: sum(r["status"] == s for r in results.values())
              for s in ("served", "refused", "not built", "not decoder-only")}
    lines = [
        "# Architectures: served exactly, or refused",
        "",
        "Generated by `python -m pagedkit.model.support --write-docs` from",
        "`docs/architectures.json`, the results of `tests/model/test_architectures.py`; do not",
        "edit by hand. The test builds every architecture in the installed transformers'",
        "`MODEL_FOR_CAUSAL_LM_MAPPING_NAMES` at a tiny size (random weights, fp32, 2 layers,",
        f"a sliding window of {_TEST_WINDOW} tokens, a softcap of {_TEST_SOFTCAP}, large "
        "sinks where the",
        "architecture has them) and requires transformers' greedy tokens under swap",
        "preemption, recompute preemption, and prefix caching + chunked prefill, or a",
        "`NotImplementedError` at `LLM(...)` naming the architecture "
        "(`pagedkit.model.support`).",
        "",
        f"**Measured with transformers {transformers_version}**: the rows hold for that "
        "version. Another",
        "version has other architectures and may serve or refuse some differently (the test",
        "still requires one or the other for each, but compares with this table only on",
        f"{transformers_version}). On another version, see what yours does: "
        "`python -m pytest",
        "tests/model/test_architectures.py -k falcon` checks one model type (its tiny build),",
        "and `PAGEDKIT_WRITE_ARCHITECTURES=1 python -m pytest tests/model/test_architectures.py`",
        "rewrites this table and `docs/architectures.json` for the installed transformers",
        "(about two minutes on two CPU cores).",
        "",
        "\"Served exactly\" is measured in **float32**: the greedy tokens equal transformers'",
        "`generate`. In bfloat16 and float16 they can differ from `generate`, at any token",
        "(the first too), with no bug on either side: rounding differs between attention",
        "paths, and transformers' own `sdpa` and `eager` attention already give different",
        "greedy tokens in bfloat16 on the same prompt (newcomer 23 measured 13 of 14 tiny",
        "bfloat16 models differing from `generate` on some prompt, 1 of 8 in float16, none in",
        "float32). The support check compares the logits to a tolerance for the dtype",
        "(`PROBE_TOLERANCE`). To check a model token for token, load it with",
        "`dtype=\"float32\"` (or `\"float64\"`) and compare with `generate` in that dtype.",
        "",
        "A served model's positions stop at its config's `max_position_embeddings`, or",
        "earlier where its rotary embedding changes per forward: a `longrope` model (Phi-3",
        "and Phi-3.5 128k configs) is served up to its `original_max_position_embeddings`",
        "(Phi-3-mini-128k: 4096, not 131072), where every sequence of any batch uses the short",
        "factor, as transformers' `generate` does for that sequence alone. transformers picks",
        "the short or the long factor per forward by the longest position in it, and pagedkit",
        "packs every sequence of a step into one forward, so past that one long sequence would",
        "switch the factor for the others (their tokens would depend on the batch); a larger",
        "`max_model_len` is refused with a `ValueError` saying so",
        "(`pagedkit.model.support.position_limit`, `tests/model/test_rope_limit.py`). `dynamic`",
        "NTK scaling changes only past `max_position_embeddings`, the limit already.",
        "",
        f"**{counts['served']} served, {counts['refused']} refused**; "
        f"{counts['not built']} could not be built tiny by the test, "
        f"{counts['not decoder-only']} are encoder-decoders.",
        "",
        "| model type | class | status | why |",
        "|---|---|---|---|",
    ]
    for model_type, r in sorted(results.items()):
        reason = r["reason"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{model_type}` | {r.get('class', '')} | {r['status']} | {reason} |")
    return "\n".join(lines) + "\n"


_TEST_WINDOW, _TEST_SOFTCAP = 6, 0.1  # tests/model/tiny_configs.py


def _main(argv: list[str] | None = None) -> None:
    import argparse
    import json
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m pagedkit.model.support",
                                     description=render_docs.__doc__,
                                     formatter_class=HelpFormatter)
    parser.add_argument("--write-docs", action="store_true",
                        help="write docs/architectures.md from docs/architectures.json")
    parser.add_argument("--docs", default="docs", help="the docs folder (default: docs)")
    args = parser.parse_args(argv)
    docs = Path(args.docs)
    data = json.loads((docs / "architectures.json").read_text())
    text = render_docs(data["results"], data["transformers"])
    if args.write_docs:
        (docs / "architectures.md").write_text(text)
    else:
        print(text, end="")


if __name__ == "__main__":
    _main()
