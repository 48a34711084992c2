"""Store K/V: write each new token's key and value into its physical slot.

Before attention runs, the keys and values the model just computed for this
step's tokens go into the paged cache (paper §4.1). Where each goes is
decided on the host, by the block tables: ``slot_mapping[i] = block *
block_size + offset`` for token i (`BlockTable.slot_mapping`). The kernel
itself is a scatter: one program per token copies its ``[num_kv_heads,
head_dim]`` key and value to that slot. A negative slot means "skip" (a
padding token).

Reference: `pagedkit.kernels.reference.store_kv`.
"""

from __future__ import annotations

import torch

from . import checks
from .triton_support import head_dim_at_stride_1, interpreter_on, next_power_of_2, tl, triton

INTERPRETED = interpreter_on()  # fixed now, when the kernels below are decorated


@triton.jit
def _store_kv_kernel(
    key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
    stride_key_token, stride_key_head, stride_value_token, stride_value_head,
    NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)  # int64: slot * row can pass 2**31

    if slot >= 0:  # a negative slot: skip this token
        h = tl.arange(0, BLOCK_H)[:, None]
        d = tl.arange(0, BLOCK_D)[None, :]
        mask = (h < NUM_KV_HEADS) & (d < HEAD_DIM)
        # In the cache a slot is one contiguous row of NUM_KV_HEADS * HEAD_DIM values.
        row = slot * (NUM_KV_HEADS * HEAD_DIM) + h * HEAD_DIM + d
        k = tl.load(key_ptr + token * stride_key_token + h * stride_key_head + d, mask=mask)
        v = tl.load(value_ptr + token * stride_value_token + h * stride_value_head + d, mask=mask)
        tl.store(k_cache_ptr + row, k, mask=mask)
        tl.store(v_cache_ptr + row, v, mask=mask)


def store_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
             v_cache: torch.Tensor, slot_mapping: torch.Tensor, *, check: bool = True) -> None:
    """Triton version of `reference.store_kv` (same arguments).

    ``check=False`` skips the argument checks (`pagedkit.kernels.checks`):
    the caller vouches for them.
    """
    if check:
        checks.check_store_kv(key, value, k_cache, v_cache, slot_mapping)
    key, value = head_dim_at_stride_1(key), head_dim_at_stride_1(value)
    num_tokens, num_kv_heads, head_dim = key.shape
    if num_tokens == 0:
        return
    _store_kv_kernel[(num_tokens,)](
        key, value, k_cache, v_cache, slot_mapping,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        NUM_KV_HEADS=num_kv_heads, HEAD_DIM=head_dim,
        BLOCK_H=next_power_of_2(num_kv_heads), BLOCK_D=next_power_of_2(head_dim),
    )
