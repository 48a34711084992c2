"""Reference solutions of lab 04c's Triton puzzles (checked by
tests/labs/test_puzzles.py in Triton's interpreter). Try the puzzles first."""

import triton
import triton.language as tl


@triton.jit
def store_kv_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
                    stride_in_token, stride_in_head, stride_block, stride_token, stride_head,
                    BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Puzzle 1. One program per (new token, KV head): copy its K and V vectors
    into slot slot_mapping[token] of the paged caches; a negative slot skips it."""
    token = tl.program_id(0)
    head = tl.program_id(1)
    d = tl.arange(0, HEAD_DIM)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot >= 0:
        block = slot // BLOCK_SIZE
        offset = slot % BLOCK_SIZE
        src = token * stride_in_token + head * stride_in_head + d
        dst = block * stride_block + offset * stride_token + head * stride_head + d
        tl.store(k_cache_ptr + dst, tl.load(key_ptr + src))
        tl.store(v_cache_ptr + dst, tl.load(value_ptr + src))


@triton.jit
def gather_kernel(cache_ptr, block_table_ptr, out_ptr, num_tokens,
                  stride_block, stride_token, stride_head, stride_out_token, stride_out_head,
                  BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Puzzle 2. One program per (tile of BLOCK_N tokens, KV head): copy the
    sequence's tokens of the tile, found through the block table, into the
    contiguous out[num_tokens, heads, HEAD_DIM]; lanes past num_tokens do nothing."""
    tile = tl.program_id(0)
    head = tl.program_id(1)
    n = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    d = tl.arange(0, HEAD_DIM)
    mask = n < num_tokens
    block = tl.load(block_table_ptr + n // BLOCK_SIZE, mask=mask, other=0).to(tl.int64)
    row = block * stride_block + (n % BLOCK_SIZE) * stride_token + head * stride_head
    x = tl.load(cache_ptr + row[:, None] + d[None, :], mask=mask[:, None], other=0.0)
    dst = n[:, None] * stride_out_token + head * stride_out_head + d[None, :]
    tl.store(out_ptr + dst, x, mask=mask[:, None])


@triton.jit
def decode_kernel(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, out_ptr, lse_ptr,
                  context_len, scale, stride_block, stride_token, stride_head,
                  GROUP: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
                  HEAD_DIM: tl.constexpr):
    """Puzzle 3. One program per query head: softmax(q . k * scale) @ v over
    the sequence's context_len cached tokens, tile by tile with an online
    softmax; writes the head's output and its log-sum-exp (lse) of the scaled
    scores. Query head h reads KV head h // GROUP."""
    head = tl.program_id(0)
    kv_head = head // GROUP
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + head * HEAD_DIM + d).to(tl.float32)
    row_max = tl.full([1], float("-inf"), tl.float32)
    row_sum = tl.zeros([1], tl.float32)
    acc = tl.zeros([HEAD_DIM], tl.float32)
    for start in range(0, context_len, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        mask = n < context_len
        block = tl.load(block_table_ptr + n // BLOCK_SIZE, mask=mask, other=0).to(tl.int64)
        row = block * stride_block + (n % BLOCK_SIZE) * stride_token + kv_head * stride_head
        k = tl.load(k_cache_ptr + row[:, None] + d[None, :], mask=mask[:, None], other=0.0)
        v = tl.load(v_cache_ptr + row[:, None] + d[None, :], mask=mask[:, None], other=0.0)
        scores = tl.sum(q[None, :] * k.to(tl.float32), 1) * scale
        scores = tl.where(mask, scores, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, 0))
        alpha = tl.exp(row_max - new_max)
        p = tl.exp(scores - new_max)
        row_sum = row_sum * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
        row_max = new_max
    tl.store(out_ptr + head * HEAD_DIM + d, acc / row_sum)
    tl.store(lse_ptr + head + tl.arange(0, 1), row_max + tl.log(row_sum))


@triton.jit
def merge_kernel(part_out_ptr, part_lse_ptr, out_ptr, lse_ptr, num_splits,
                 MAX_SPLITS: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Puzzle 4. One program per head: merge num_splits partial results
    part_out[head, s, :] (each normalized over its own keys) with their
    log-sum-exps part_lse[head, s] into the attention over all keys, and its
    lse. An empty split has lse -inf and contributes nothing; if every split
    is empty, the output is zeros and the lse -inf."""
    head = tl.program_id(0)
    s = tl.arange(0, MAX_SPLITS)
    d = tl.arange(0, HEAD_DIM)
    mask = s < num_splits
    lse = tl.load(part_lse_ptr + head * num_splits + s, mask=mask, other=float("-inf"))
    top = tl.max(lse, 0)
    safe = tl.where(top == float("-inf"), 0.0, top)
    w = tl.exp(lse - safe)                               # 0 for empty splits
    total = tl.sum(w, 0)
    parts = tl.load(part_out_ptr + (head * num_splits + s[:, None]) * HEAD_DIM + d[None, :],
                    mask=mask[:, None], other=0.0)
    merged = tl.sum(w[:, None] * parts, 0) / tl.where(total > 0, total, 1.0)
    tl.store(out_ptr + head * HEAD_DIM + d, merged)
    tl.store(lse_ptr + head + tl.arange(0, 1), tl.full([1], safe, tl.float32) + tl.log(
        tl.full([1], total, tl.float32)))
