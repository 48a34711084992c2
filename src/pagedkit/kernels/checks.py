"""Argument checks shared by the torch references and the Triton kernels.

A Triton kernel trusts its arguments: a block table one column too short or
a block id past the end of the cache reads someone else's memory and returns
plausible garbage (or crashes the CUDA context). So every entry point checks
its arguments here first and raises an error naming the shapes and values.

Two kinds of check:

* *structure* (shapes, dtypes, devices, contiguity) reads only tensor
  metadata and is free;
* *values* (context lengths against the block table, block ids against the
  cache) must look at the data: one small reduction and one host sync.

Every entry point takes ``check=False`` to skip both: its caller vouches
for the arguments. The benchmark does, to time a kernel alone, and so does
every layer of a step, whose shared metadata `check_step` checks once, at
the step's start (each layer's own tensors were checked when the model was
loaded, by `pagedkit.model.support`'s probe), unless whoever built it
vouches for it too: the engine's `pagedkit.model.runner.pack_step` does.
"""

from __future__ import annotations

import math

import torch

CACHE_LAYOUT = "[num_blocks, block_size, num_kv_heads, head_dim]"


def _shape(t: torch.Tensor) -> list[int]:
    return list(t.shape)


def check_cache_pair(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    """Both caches are contiguous ``[num_blocks, block_size, num_kv_heads,
    head_dim]`` tensors of one shape, dtype and device."""
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if cache.dim() != 4:
            raise ValueError(f"{name} must be {CACHE_LAYOUT}, got shape {_shape(cache)}")
        if not cache.is_contiguous():
            raise ValueError(
                f"{name} must be contiguous (slot addresses are computed from its shape); got "
                f"shape {_shape(cache)} with strides {list(cache.stride())}. Allocate the cache "
                "with torch.empty/zeros instead of slicing or transposing a larger tensor")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache shape {_shape(v_cache)} differs from k_cache shape "
                         f"{_shape(k_cache)}")
    if v_cache.dtype != k_cache.dtype:
        raise TypeError(f"v_cache dtype {v_cache.dtype} differs from k_cache dtype {k_cache.dtype}")
    if v_cache.device != k_cache.device:
        raise ValueError(f"v_cache is on {v_cache.device} but k_cache is on {k_cache.device}")


def check_index_tensor(name: str, t: torch.Tensor, shape: tuple[int | None, ...],
                       device: torch.device, meaning: str) -> None:
    """An integer tensor of the given shape (None = any length) on `device`."""
    if t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must be an int32 or int64 tensor, got {t.dtype}")
    if t.dim() != len(shape) or any(want is not None and want != got
                                    for want, got in zip(shape, t.shape, strict=True)):
        want = "[" + ", ".join("*" if w is None else str(w) for w in shape) + "]"
        raise ValueError(f"{name} must have shape {want} ({meaning}), got {_shape(t)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but the cache is on {device}")


def check_tokens(name: str, x: torch.Tensor, k_cache: torch.Tensor, *, gqa: bool) -> None:
    """`x` is [tokens, heads, head_dim] matching the cache's head_dim, dtype and device.

    With ``gqa`` the head count may be any multiple of the cache's KV heads
    (grouped-query attention); otherwise it must equal it.
    """
    num_kv_heads, head_dim = k_cache.shape[2], k_cache.shape[3]
    layout = f"[num_tokens, {'num_q_heads' if gqa else 'num_kv_heads'}, head_dim]"
    if x.dim() != 3:
        raise ValueError(f"{name} must be {layout}, got shape {_shape(x)}")
    if x.shape[2] != head_dim:
        raise ValueError(f"{name} head_dim {x.shape[2]} (shape {_shape(x)}) differs from the "
                         f"cache's head_dim {head_dim} (k_cache shape {_shape(k_cache)})")
    heads = x.shape[1]
    if gqa and (heads < num_kv_heads or heads % num_kv_heads):
        raise ValueError(
            f"{name} has {heads} heads (shape {_shape(x)}), which is not a multiple of the "
            f"cache's {num_kv_heads} KV heads (k_cache shape {_shape(k_cache)}): grouped-query "
            "attention needs every KV head to serve the same number of query heads")
    if not gqa and heads != num_kv_heads:
        raise ValueError(f"{name} has {heads} heads (shape {_shape(x)}) but the cache has "
                         f"{num_kv_heads} KV heads (k_cache shape {_shape(k_cache)})")
    if x.dtype != k_cache.dtype:
        raise TypeError(f"{name} dtype {x.dtype} differs from the cache dtype {k_cache.dtype}")
    if x.device != k_cache.device:
        raise ValueError(f"{name} is on {x.device} but the cache is on {k_cache.device}")


def check_options(query: torch.Tensor, sliding_window: int | None, softcap: float | None,
                  sinks: torch.Tensor | None) -> None:
    """The attention options every implementation takes (see `reference.attention`)."""
    if sliding_window is not None and (isinstance(sliding_window, bool)
                                       or not isinstance(sliding_window, int)
                                       or sliding_window < 1):
        raise ValueError(f"sliding_window must be None or an integer >= 1 (the keys a query "
                         f"sees, its own included), got {sliding_window!r}")
    if softcap is not None and (isinstance(softcap, bool) or not isinstance(softcap, (int, float))
                                or not math.isfinite(softcap) or softcap <= 0):
        raise ValueError(f"softcap must be None or a finite number > 0, got {softcap!r}")
    if sinks is not None:
        if not isinstance(sinks, torch.Tensor) or not sinks.is_floating_point():
            what = sinks.dtype if isinstance(sinks, torch.Tensor) else type(sinks).__name__
            raise TypeError(f"sinks must be None or a floating-point tensor, got {what}")
        if sinks.dim() != 1 or sinks.shape[0] != query.shape[1]:
            raise ValueError(f"sinks must have shape [{query.shape[1]}] (one logit per query "
                             f"head of query shape {_shape(query)}), got {_shape(sinks)}")
        if sinks.device != query.device:
            raise ValueError(f"sinks is on {sinks.device} but query is on {query.device}")


# --------------------------------------------------------------------- entry points
def check_store_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                   v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    check_cache_pair(k_cache, v_cache)
    check_tokens("key", key, k_cache, gqa=False)
    check_tokens("value", value, k_cache, gqa=False)
    if value.shape != key.shape:
        raise ValueError(f"value shape {_shape(value)} differs from key shape {_shape(key)}")
    check_index_tensor("slot_mapping", slot_mapping, (key.shape[0],), k_cache.device,
                       "one physical slot per new token")
    check_slots(slot_mapping, k_cache)


def check_slots(slot_mapping: torch.Tensor, k_cache: torch.Tensor) -> None:
    """No slot past the cache's last (a negative one skips its token)."""
    num_slots = k_cache.shape[0] * k_cache.shape[1]
    top = int(slot_mapping.max()) if slot_mapping.numel() else -1
    if top >= num_slots:
        i = int(slot_mapping.argmax())
        raise ValueError(f"slot_mapping[{i}] = {top} is past the cache's last slot "
                         f"{num_slots - 1} (k_cache shape {_shape(k_cache)} holds "
                         f"{num_slots} slots)")


def check_decode(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 block_tables: torch.Tensor, context_lens: torch.Tensor,
                 num_splits: int | None, *, sliding_window: int | None = None,
                 softcap: float | None = None, sinks: torch.Tensor | None = None) -> None:
    check_cache_pair(k_cache, v_cache)
    check_tokens("query", query, k_cache, gqa=True)
    check_options(query, sliding_window, softcap, sinks)
    num_seqs = query.shape[0]
    check_index_tensor("block_tables", block_tables, (num_seqs, None), k_cache.device,
                       "one row of physical block ids per sequence")
    check_index_tensor("context_lens", context_lens, (num_seqs,), k_cache.device,
                       "cached tokens per sequence")
    if num_splits is not None and (isinstance(num_splits, bool) or not isinstance(num_splits, int)
                                   or num_splits < 1):
        raise ValueError(f"num_splits must be None or an integer >= 1, got {num_splits!r}")
    if num_seqs:
        check_blocks_cover(block_tables, context_lens, k_cache, minimum=1,
                           sliding_window=sliding_window)


def check_prefill(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                  context_lens: torch.Tensor, *, sliding_window: int | None = None,
                  softcap: float | None = None, sinks: torch.Tensor | None = None) -> None:
    check_cache_pair(k_cache, v_cache)
    check_tokens("query", query, k_cache, gqa=True)
    check_options(query, sliding_window, softcap, sinks)
    check_index_tensor("context_lens", context_lens, (None,), k_cache.device,
                       "cached tokens per sequence, this chunk included")
    num_seqs = context_lens.shape[0]
    check_index_tensor("cu_seqlens_q", cu_seqlens_q, (num_seqs + 1,), k_cache.device,
                       f"0, then the running total of query tokens of the {num_seqs} sequences "
                       "in context_lens")
    check_index_tensor("block_tables", block_tables, (num_seqs, None), k_cache.device,
                       "one row of physical block ids per sequence")
    q_lens = check_query_starts(cu_seqlens_q, context_lens, query.shape[0])
    if num_seqs:
        check_blocks_cover(block_tables, context_lens, k_cache, minimum=0,
                           sliding_window=sliding_window, q_lens=q_lens)


def check_query_starts(cu_seqlens_q: torch.Tensor, context_lens: torch.Tensor,
                       num_tokens: int) -> torch.Tensor:
    """`cu_seqlens_q` runs from 0 to the `num_tokens` query rows without going
    back, and no chunk is longer than its context; returns the chunk lengths."""
    cu = cu_seqlens_q.long()
    q_lens = cu[1:] - cu[:-1]
    first, last = (int(v) for v in cu[[0, -1]].tolist())
    if first != 0 or last != num_tokens:
        raise ValueError(f"cu_seqlens_q must start at 0 and end at the {num_tokens} query "
                         f"tokens (the query's rows), got {cu_seqlens_q.tolist()}")
    if bool((q_lens < 0).any()):
        s = int((q_lens < 0).nonzero()[0])
        raise ValueError(f"cu_seqlens_q must not decrease, but cu_seqlens_q[{s + 1}] = "
                         f"{int(cu[s + 1])} < cu_seqlens_q[{s}] = {int(cu[s])}")
    short = q_lens > context_lens.long()
    if bool(short.any()):
        s = int(short.nonzero()[0])
        raise ValueError(
            f"sequence {s} has {int(q_lens[s])} query tokens but context_lens[{s}] = "
            f"{int(context_lens[s])}: context_lens counts the cached tokens including this chunk, "
            "so it is at least the chunk's length")
    return q_lens


def check_step(slot_mapping: torch.Tensor, block_tables: torch.Tensor,
               context_lens: torch.Tensor, cu_seqlens_q: torch.Tensor, num_decodes: int,
               k_cache: torch.Tensor) -> None:
    """The metadata a step's layers share, checked once for all of them
    (`pagedkit.model.attention.forward_context`), against a cache of the
    step (every layer's has the same blocks): the index tensors' structure,
    then their values. Decodes read no query boundaries: those are checked
    for the prompt chunks only."""
    device = k_cache.device
    check_index_tensor("context_lens", context_lens, (None,), device,
                       "cached tokens per sequence, this step's included")
    num_seqs = context_lens.shape[0]
    check_index_tensor("slot_mapping", slot_mapping, (None,), device,
                       "one physical slot per new token")
    check_index_tensor("cu_seqlens_q", cu_seqlens_q, (num_seqs + 1,), device,
                       "0, then the running total of query tokens per sequence")
    check_index_tensor("block_tables", block_tables, (num_seqs, None), device,
                       "one row of physical block ids per sequence")
    if not num_seqs:
        return
    check_slots(slot_mapping, k_cache)
    if num_decodes < num_seqs:
        check_query_starts(cu_seqlens_q, context_lens, slot_mapping.shape[0])
    check_blocks_cover(block_tables, context_lens, k_cache, minimum=1)


def check_blocks_cover(block_tables: torch.Tensor, context_lens: torch.Tensor,
                       k_cache: torch.Tensor, *, minimum: int, sliding_window: int | None = None,
                       q_lens: torch.Tensor | None = None) -> None:
    """Every sequence's table has enough columns for its context, and every
    block id it uses (only those; the rest are padding) lies in the cache.

    With a `sliding_window`, the blocks wholly before the window of the
    sequence's first query (at ``context_len - q_len``; q_len 1 for decode)
    are not used either: the engine may have returned them to the pool."""
    num_blocks, block_size = k_cache.shape[0], k_cache.shape[1]
    # Column j of a row is unused past the context: j * block_size >= context_len
    # (the same as j >= the blocks it needs, without dividing per row).
    unused = (torch.arange(block_tables.shape[1], device=context_lens.device) * block_size
              >= context_lens[:, None])
    if sliding_window is not None:
        first_query = context_lens.long() - (1 if q_lens is None else q_lens.long())
        first_block = (first_query - sliding_window + 1).clamp(min=0) // block_size
        unused |= torch.arange(block_tables.shape[1], device=unused.device) < first_block[:, None]
    # Two reductions over the used ids and the lengths, one host sync. An
    # unused entry reads as block 0 here; should 0 itself be out of range (a
    # cache of no blocks), the error path below looks at the used ids only.
    ids = block_tables.masked_fill(unused, 0)
    ranges = [*torch.aminmax(context_lens), *(torch.aminmax(ids) if ids.numel() else (0, 0))]
    low_ctx, high_ctx, low_id, high_id = (int(v) for v in ranges)
    most_needed = -(-high_ctx // block_size)
    if low_ctx < minimum:
        s = int(context_lens.argmin())
        raise ValueError(f"context_lens[{s}] = {low_ctx}; every sequence needs at least "
                         f"{minimum} cached token(s)")
    if most_needed > block_tables.shape[1]:
        s = int(((context_lens.long() + block_size - 1) // block_size).argmax())
        raise ValueError(
            f"context_lens[{s}] = {int(context_lens[s])} needs {most_needed} blocks of "
            f"{block_size} tokens "
            f"but block_tables has only {block_tables.shape[1]} columns (shape "
            f"{_shape(block_tables)})")
    if low_id < 0 or high_id >= num_blocks:
        bad = ~unused & ((block_tables < 0) | (block_tables >= num_blocks))
        if bool(bad.any()):
            s, j = (int(v) for v in bad.nonzero()[0])
            needed = -(-int(context_lens[s]) // block_size)
            raise ValueError(
                f"block_tables[{s}, {j}] = {int(block_tables[s, j])} is not a block of the "
                f"cache, which has {num_blocks} blocks (k_cache shape {_shape(k_cache)}); "
                f"sequence {s} uses its first {needed} entries")


def check_copy_blocks(cache: torch.Tensor, block_pairs: torch.Tensor) -> None:
    if cache.dim() < 2:
        raise ValueError(f"cache must be [num_blocks, ...], got shape {_shape(cache)}")
    if not cache.is_contiguous():
        raise ValueError(f"cache must be contiguous, got shape {_shape(cache)} with strides "
                         f"{list(cache.stride())}")
    check_index_tensor("block_pairs", block_pairs, (None, 2), cache.device,
                       "one (src, dst) pair of block ids per row")
    if block_pairs.shape[0] == 0:
        return
    num_blocks = cache.shape[0]
    pairs = block_pairs.long()
    low, high = pairs.min().item(), pairs.max().item()
    if low < 0 or high >= num_blocks:
        i, c = (int(v) for v in ((pairs < 0) | (pairs >= num_blocks)).nonzero()[0])
        raise ValueError(f"block_pairs[{i}] = {pairs[i].tolist()}: block {int(pairs[i, c])} is "
                         f"outside the cache's {num_blocks} blocks (shape {_shape(cache)})")
    src, dst = pairs[:, 0], pairs[:, 1]
    if dst.unique().numel() != dst.numel():
        raise ValueError(f"block_pairs writes a destination block twice: {pairs.tolist()}")
    clash = torch.isin(dst, src) & (src != dst)
    if bool(clash.any()):
        i = int(clash.nonzero()[0])
        raise ValueError(
            f"block {int(dst[i])} is both a destination (block_pairs[{i}]) and a source: the "
            "copies run in parallel, so the result would depend on their order")
