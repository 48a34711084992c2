"""Plausible wrong answers to every exercise — what a learner would really
write: an off-by-one, a formula copied without the twist, the rule half
applied. `test_wrong_answers.py` holds each check to rejecting all of them, so
a check that goes soft (a case dropped, a comparison loosened) fails a test.

Each entry maps ``(lab, exercise)`` to functions named after their mistake.
"""

from __future__ import annotations

import heapq
import importlib.util
import tempfile
from collections import deque
from pathlib import Path

import torch

from pagedkit.memory import ROOT_HASH, hash_block

SOLUTIONS = Path(__file__).resolve().parents[2] / "labs" / "solutions"
#: where the wrong Triton kernels' module files live (Triton and the checks read
#: a kernel's source from its file): one folder, removed when the process ends
KERNEL_FILES = tempfile.TemporaryDirectory(prefix="wrong_answers_")


def _solution(stem: str):
    spec = importlib.util.spec_from_file_location(f"wrong_{stem}", SOLUTIONS / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ceil(a, b):
    return -(-a // b)


# ---------------------------------------------------------------- lab 00
def blocks_floor(n, bs):
    return n // bs


def blocks_plus_one(n, bs):
    return n // bs + 1


def blocks_round(n, bs):
    return round(n / bs)


def blocks_float_ceil(n, bs):
    return float(-(-n // bs))                 # right numbers, but 2.0 blocks is not a count


# ---------------------------------------------------------------- lab 01
def reads_no_growth(p, n):
    return (n - 1) * p if n else 0            # every step reads just the prompt


def reads_every_new_token(p, n):
    return sum(p + t for t in range(n))       # counts a decode step for the first token too


def reads_without_own_token(p, n):
    return sum(p + j - 1 for j in range(1, n))  # the new token does not attend to itself


def reads_with_prefill(p, n):
    return p * (p + 1) // 2 + sum(p + j for j in range(1, n))  # counts the prefill pass


def batch_ignoring_weights(gpu, params, pbytes, kv, seq):
    return gpu // (seq * kv)


def batch_params_as_bytes(gpu, params, pbytes, kv, seq):
    return max(0, (gpu - params) // (seq * kv))


def batch_rounded_up(gpu, params, pbytes, kv, seq):
    return max(0, _ceil(gpu - params * pbytes, seq * kv))


def batch_may_go_negative(gpu, params, pbytes, kv, seq):
    return (gpu - params * pbytes) // (seq * kv)


def kv_query_heads(config, dtype_bytes):
    heads = config.num_attention_heads
    return 2 * config.num_hidden_layers * heads * (config.hidden_size // heads) * dtype_bytes


def kv_head_dim_from_hidden(config, dtype_bytes):
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    return 2 * config.num_hidden_layers * kv * (config.hidden_size // heads) * dtype_bytes


def kv_without_the_two(config, dtype_bytes):
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return config.num_hidden_layers * kv * head_dim * dtype_bytes


# ---------------------------------------------------------------- lab 02
def reserve_pow2_of_everything(policy, p, o, max_len):
    if policy == "max":
        return max_len
    if policy == "pow2":
        return min(1 << (p + o - 1).bit_length(), max_len)
    return p + o


def reserve_without_cap(policy, p, o, max_len):
    if policy == "max":
        return max_len
    if policy == "pow2":
        return p + (1 << (o - 1).bit_length() if o else 0)
    return p + o


def reserve_pow2_of_zero_is_one(policy, p, o, max_len):
    if policy == "max":
        return max_len
    if policy == "pow2":
        return min(p + (1 << max(o - 1, 0).bit_length()), max_len)
    return p + o


def fit_unsorted(regions, capacity, size):
    cursor = 0
    for start, length in regions:               # forgets to sort by start
        if start - cursor >= size:
            return cursor
        cursor = max(cursor, start + length)
    return cursor if capacity - cursor >= size else None


def fit_strictly_larger(regions, capacity, size):
    cursor = 0
    for start, length in sorted(regions):
        if start - cursor > size:
            return cursor
        cursor = start + length
    return cursor if capacity - cursor > size else None


def fit_only_at_the_end(regions, capacity, size):
    end = max((s + n for s, n in regions), default=0)
    return end if capacity - end >= size else None


def fit_best(regions, capacity, size):
    holes, cursor = [], 0
    for start, length in sorted(regions):
        holes.append((start - cursor, cursor))
        cursor = start + length
    holes.append((capacity - cursor, cursor))
    fitting = [(h, s) for h, s in holes if h >= size]
    return min(fitting)[1] if fitting else None


def _parts(reservations, capacity):
    used = sum(r.used for r in reservations)
    need = sum(r.need for r in reservations)
    reserved = sum(r.size for r in reservations)
    return used, need, reserved, capacity - reserved


def waste_every_free_slot(reservations, capacity, next_size):
    used, need, reserved, free = _parts(reservations, capacity)
    return {"token_states": used, "reservation": need - used,
            "internal_fragmentation": reserved - need, "external_fragmentation": free}


def waste_total_free_decides(reservations, capacity, next_size):
    used, need, reserved, free = _parts(reservations, capacity)
    return {"token_states": used, "reservation": need - used,
            "internal_fragmentation": reserved - need,
            "external_fragmentation": free if next_size > free else 0}


def waste_internal_is_size_minus_used(reservations, capacity, next_size):
    right = _solution("lab02_contiguous_waste").waste_breakdown(reservations, capacity, next_size)
    used, _need, reserved, _free = _parts(reservations, capacity)
    return {**right, "reservation": 0, "internal_fragmentation": reserved - used}


# ---------------------------------------------------------------- lab 03
def token_at_slot_index(table, bs, num_tokens, slot):
    return slot if slot < num_tokens else None   # the slot is not the position


def token_at_ignoring_the_tail(table, bs, num_tokens, slot):
    block, offset = divmod(slot, bs)
    return table.index(block) * bs + offset if block in table else None


def token_at_physical_block(table, bs, num_tokens, slot):
    block, offset = divmod(slot, bs)           # uses the physical block as the logical one
    position = block * bs + offset
    return position if block in table and position < num_tokens else None


def token_at_offset_only(table, bs, num_tokens, slot):
    block, offset = divmod(slot, bs)
    return offset if block in table and table.index(block) * bs + offset < num_tokens else None


def needed_for_new_tokens_only(n, new, bs):
    return _ceil(new, bs)


def needed_total(n, new, bs):
    return _ceil(n + new, bs)


def needed_floor(n, new, bs):
    return (n + new) // bs - n // bs


def append_from_the_back(table, n, new, bs, free):
    if _ceil(n + new, bs) - _ceil(n, bs) > len(free):
        return None
    slots = []
    for pos in range(n, n + new):
        if pos % bs == 0:
            table.append(free.pop())
        slots.append(table[pos // bs] * bs + pos % bs)
    return slots


def append_not_all_or_nothing(table, n, new, bs, free):
    slots = []
    for pos in range(n, n + new):
        if pos % bs == 0:
            if not free:
                return None                     # gives up after taking blocks
            table.append(free.pop(0))
        slots.append(table[pos // bs] * bs + pos % bs)
    return slots


def append_checks_room_without_the_tail(table, n, k, bs, free):
    if _ceil(k, bs) > len(free):                # forgets the last block's free slots here
        return None
    for _ in range(_ceil(n + k, bs) - len(table)):
        table.append(free.pop(0))
    return [table[p // bs] * bs + p % bs for p in range(n, n + k)]


def append_new_block_every_call(table, n, new, bs, free):
    if not new:
        return []
    if _ceil(new, bs) > len(free):
        return None
    start = len(table)
    for _ in range(_ceil(new, bs)):
        table.append(free.pop(0))
    return [table[start + i // bs] * bs + i % bs for i in range(new)]


# ---------------------------------------------------------------- lab 04
def gather_ignoring_the_table(cache, table, n):
    return cache.flatten(0, 1)[:n]


def gather_every_table_entry(cache, table, n):
    return cache[table.long()].flatten(0, 1)[:n]  # reads the padding


def gather_whole_blocks(cache, table, n):
    return cache[table[:_ceil(n, cache.shape[1])].long()].flatten(0, 1)  # keeps the tail


def _gather(cache, table, n):
    return cache[table[:_ceil(n, cache.shape[1])].long()].flatten(0, 1)[:n]


def _attend(query, k, v, scale):
    scores = torch.einsum("hd,thd->ht", query, k) * scale
    return torch.einsum("ht,thd->hd", torch.softmax(scores, dim=-1), v)


def attention_tiled_heads(query, k_cache, v_cache, table, n):
    k, v = _gather(k_cache, table, n), _gather(v_cache, table, n)
    group = query.shape[0] // k.shape[1]
    return _attend(query, k.repeat(1, group, 1), v.repeat(1, group, 1), query.shape[-1] ** -0.5)


def attention_unscaled(query, k_cache, v_cache, table, n):
    k, v = _gather(k_cache, table, n), _gather(v_cache, table, n)
    group = query.shape[0] // k.shape[1]
    return _attend(query, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), 1.0)


def attention_over_whole_blocks(query, k_cache, v_cache, table, n):
    blocks = table[:_ceil(n, k_cache.shape[1])].long()
    k, v = k_cache[blocks].flatten(0, 1), v_cache[blocks].flatten(0, 1)  # tail slots too
    group = query.shape[0] // k.shape[1]
    return _attend(query, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                   query.shape[-1] ** -0.5)


def online_the_kernel_lines(m, s, acc, scores, v):
    new_max = torch.maximum(torch.as_tensor(m), scores.max())
    alpha = torch.exp(m - new_max)            # NaN when both are -inf
    p = torch.exp(scores - new_max)
    return new_max, s * alpha + p.sum(), acc * alpha + p @ v


def online_acc_not_rescaled(m, s, acc, scores, v):
    new_max = torch.maximum(torch.as_tensor(m), scores.max())
    safe = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    p = torch.exp(scores - safe)
    return new_max, s * torch.exp(m - safe) + p.sum(), acc + p @ v


def online_alpha_inverted(m, s, acc, scores, v):
    new_max = torch.maximum(torch.as_tensor(m), scores.max())
    safe = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(safe), torch.as_tensor(m))
    alpha = torch.exp(safe - m_safe)
    p = torch.exp(scores - safe)
    return new_max, s * alpha + p.sum(), acc * alpha + p @ v


def online_no_max(m, s, acc, scores, v):
    p = torch.exp(scores)                     # overflows on huge scores
    return torch.maximum(torch.as_tensor(m), scores.max()), s + p.sum(), acc + p @ v


def merge_average(oa, la, ob, lb):
    return (oa + ob) / 2, torch.maximum(la, lb)


def merge_unstable(oa, la, ob, lb):
    wa, wb = torch.exp(la), torch.exp(lb)     # exp(1000) = inf
    return (wa * oa + wb * ob) / (wa + wb), torch.log(wa + wb)


def merge_lse_is_max(oa, la, ob, lb):
    lse = torch.logaddexp(la, lb)
    if torch.isinf(lse):
        return torch.zeros_like(oa), lse
    return torch.exp(la - lse) * oa + torch.exp(lb - lse) * ob, torch.maximum(la, lb)


def merge_no_empty_guard(oa, la, ob, lb):
    lse = torch.logaddexp(la, lb)             # -inf - -inf = NaN when both are empty
    return torch.exp(la - lse) * oa + torch.exp(lb - lse) * ob, lse


# ---------------------------------------------------------------- lab 05
def finish_round_robin_seats(lens, seats, policy):
    if policy == "static":
        return _solution("lab05_continuous_batching").finish_steps(lens, seats, policy)
    free_at = [0] * seats
    out = []
    for i, n in enumerate(lens):                # request i always takes seat i % seats
        free_at[i % seats] += n
        out.append(free_at[i % seats])
    return out


def finish_one_step_late(lens, seats, policy):
    if policy == "static":
        return _solution("lab05_continuous_batching").finish_steps(lens, seats, policy)
    free_at, out = [0] * min(seats, len(lens)), []
    for i, n in enumerate(lens):
        start = heapq.heappop(free_at) + (1 if i >= seats else 0)  # waits a step for the seat
        out.append(start + n)
        heapq.heappush(free_at, start + n)
    return out


def finish_static_waits_for_shortest(lens, seats, policy):
    if policy == "continuous":
        return _solution("lab05_continuous_batching").finish_steps(lens, seats, policy)
    out, start = [], 0
    for b in range(0, len(lens), seats):
        batch = lens[b:b + seats]
        out += [start + n for n in batch]
        start += min(batch)
    return out


def finish_shortest_first(lens, seats, policy):
    if policy == "static":
        return _solution("lab05_continuous_batching").finish_steps(lens, seats, policy)
    free_at, out = [0] * min(seats, len(lens)), {}
    for i in sorted(range(len(lens)), key=lambda i: lens[i]):
        start = heapq.heappop(free_at)
        out[i] = start + lens[i]
        heapq.heappush(free_at, out[i])
    return [out[i] for i in range(len(lens))]


def admit_skipping_the_head(waiting, tokens, seats, blocks, bs, chunked=False):
    admitted = []
    for rid, n in waiting:
        take = min(n, tokens) if chunked else n
        need = _ceil(take, bs)
        if take <= 0 or seats <= 0 or take > tokens or need > blocks:
            continue                            # lets later requests overtake
        admitted.append((rid, take))
        tokens, seats, blocks = tokens - take, seats - 1, blocks - need
    return admitted


def admit_chunk_shrunk_to_blocks(waiting, tokens, seats, blocks, bs, chunked=False):
    admitted = []
    for rid, n in waiting:
        if tokens <= 0 or seats <= 0:
            break
        take = min(n, tokens, blocks * bs) if chunked else n
        need = _ceil(take, bs)
        if take <= 0 or take > tokens or need > blocks:
            break
        admitted.append((rid, take))
        tokens, seats, blocks = tokens - take, seats - 1, blocks - need
    return admitted


def admit_blocks_rounded_down(waiting, tokens, seats, blocks, bs, chunked=False):
    admitted = []
    for rid, n in waiting:
        if tokens <= 0 or seats <= 0:
            break
        take = min(n, tokens) if chunked else n
        need = take // bs
        if take > tokens or need > blocks:
            break
        admitted.append((rid, take))
        tokens, seats, blocks = tokens - take, seats - 1, blocks - need
    return admitted


def admit_blocks_not_spent(waiting, tokens, seats, blocks, bs, chunked=False):
    admitted = []
    for rid, n in waiting:
        if tokens <= 0 or seats <= 0:
            break
        take = min(n, tokens) if chunked else n
        if take > tokens or _ceil(take, bs) > blocks:
            break
        admitted.append((rid, take))
        tokens, seats = tokens - take, seats - 1
    return admitted


def admit_blocks_for_the_whole_prompt(waiting, tokens, seats, blocks, bs, chunked=False):
    admitted = []
    for rid, n in waiting:
        if tokens <= 0 or seats <= 0:
            break
        take = min(n, tokens) if chunked else n
        need = _ceil(n, bs)                     # blocks for the whole prompt, not the chunk
        if take > tokens or need > blocks:
            break
        admitted.append((rid, take))
        tokens, seats, blocks = tokens - take, seats - 1, blocks - need
    return admitted


def admit_empty_chunks(waiting, tokens, seats, blocks, bs, chunked=False):
    admitted = []
    for rid, n in waiting:
        if seats <= 0:
            break
        take = min(n, tokens) if chunked else n
        need = _ceil(take, bs)
        if take > tokens or need > blocks:
            break
        admitted.append((rid, take))            # a 0-token "chunk" once the budget is spent
        tokens, seats, blocks = tokens - take, seats - 1, blocks - need
    return admitted


def admit_chunked_ignores_seats(waiting, tokens, seats, blocks, bs, chunked=False):
    admitted = []
    for rid, n in waiting:
        if tokens <= 0 or (seats <= 0 and not chunked):  # the chunked branch forgot the seats
            break
        take = min(n, tokens) if chunked else n
        need = _ceil(take, bs)
        if take > tokens or need > blocks:
            break
        admitted.append((rid, take))
        tokens, seats, blocks = tokens - take, seats - 1, blocks - need
    return admitted


# ---------------------------------------------------------------- lab 06
def recompute_no_last_token_rule(n, bs, cached):
    return n - min(cached, n // bs) * bs


def recompute_uncapped(n, bs, cached):
    return max(n - cached * bs, 0)


def recompute_returns_saved(n, bs, cached):
    return min(cached, (n - 1) // bs) * bs


def recompute_skips_the_last_token(n, bs, cached):
    return n - 1 - min(cached, (n - 1) // bs) * bs


def mode_counts_shared_blocks_twice(tables, tokens, cpu, block_bytes, link, prefill):
    blocks = sum(len(t) for t in tables)
    if blocks > cpu:
        return "recompute"
    return "swap" if 2 * blocks * block_bytes / link < sum(tokens) / prefill else "recompute"


def mode_one_way(tables, tokens, cpu, block_bytes, link, prefill):
    blocks = len({b for t in tables for b in t})
    if blocks > cpu:
        return "recompute"
    return "swap" if blocks * block_bytes / link < sum(tokens) / prefill else "recompute"


def mode_swap_on_a_tie(tables, tokens, cpu, block_bytes, link, prefill):
    blocks = len({b for t in tables for b in t})
    if blocks > cpu:
        return "recompute"
    return "swap" if 2 * blocks * block_bytes / link <= sum(tokens) / prefill else "recompute"


def mode_ignores_cpu_room(tables, tokens, cpu, block_bytes, link, prefill):
    blocks = len({b for t in tables for b in t})
    return "swap" if 2 * blocks * block_bytes / link < sum(tokens) / prefill else "recompute"


def mode_recomputes_one_sequence(tables, tokens, cpu, block_bytes, link, prefill):
    blocks = len({b for t in tables for b in t})
    if blocks > cpu:
        return "recompute"
    return "swap" if 2 * blocks * block_bytes / link < max(tokens) / prefill else "recompute"


def victims_biggest_first(running, free):
    queue, victims = list(running), []
    while sum(n for _, n, _ in queue) > free and queue:
        victim = max(queue, key=lambda r: r[2])
        queue.remove(victim)
        victims.append(victim[0])
        free += victim[2]
    return victims


def victims_oldest_first(running, free):
    queue, victims = list(running), []
    while sum(n for _, n, _ in queue) > free and queue:
        victim = queue.pop(0)
        victims.append(victim[0])
        free += victim[2]
    return victims


def victims_never_itself(running, free):
    queue, victims = list(running), []
    while queue:
        _rid, needed, _ = queue.pop(0)
        while needed > free and queue:
            victim, _, held = queue.pop()
            victims.append(victim)
            free += held
        free -= min(needed, free)               # serves it anyway
    return victims


def victims_never_taking(running, free):    # newcomer 40: the served never take their blocks
    victims, served, waiting = [], 0, deque(running)
    while waiting:
        rid, needed, _ = waiting.popleft()
        while waiting and needed > free:
            victim, _, held = waiting.pop()
            victims += [victim]
            free += held
        if needed <= free:
            served += 1                         # free -= needed is missing
            continue
        if not served:
            raise ValueError(f"{rid} does not fit even alone")
        victims += [rid]
    return victims


def victims_by_total_need(running, free):
    queue, victims = list(running), []
    need = sum(n for _, n, _ in running)
    while need > free and queue:                # weighs all needs at once
        rid, _n, held = queue.pop()
        victims.append(rid)
        free += held
    return victims


def victims_preempt_on_exact_fit(running, free):
    queue, victims, served = list(running), [], 0
    while queue:
        rid, needed, _ = queue.pop(0)
        while needed >= free and queue:         # >=: preempts when exactly enough is free
            victim, _, held = queue.pop()
            victims.append(victim)
            free += held
        if needed <= free:
            free -= needed
            served += 1
        elif served:
            victims.append(rid)
    return victims


# ---------------------------------------------------------------- lab 07
def hashes_all_from_root(tokens, bs):
    return [hash_block(ROOT_HASH, tokens[i:i + bs]) for i in range(0, len(tokens) - bs + 1, bs)]


def hashes_with_the_partial_block(tokens, bs):
    out, parent = [], ROOT_HASH
    for i in range(0, len(tokens), bs):
        parent = hash_block(parent, tokens[i:i + bs])
        out.append(parent)
    return out


def hashes_of_whole_prefix(tokens, bs):
    return [hash_block(ROOT_HASH, tokens[:i + bs]) for i in range(0, len(tokens) - bs + 1, bs)]


def hashes_one_block_short(tokens, bs):
    out, parent = [], ROOT_HASH
    for i in range(0, len(tokens) - bs, bs):
        parent = hash_block(parent, tokens[i:i + bs])
        out.append(parent)
    return out


def cow_takes_the_last_free_block(refs, free, table):
    last = table[-1]
    if refs[last] == 1:
        return None
    if not free:
        raise MemoryError("no free block")
    new = free.pop()
    refs[new], refs[last], table[-1] = 1, refs[last] - 1, new
    return (last, new)


def cow_keeps_the_old_reference(refs, free, table):
    last = table[-1]
    if refs[last] == 1:
        return None
    if not free:
        raise MemoryError("no free block")
    new = free.pop(0)
    refs[new], table[-1] = 1, new
    return (last, new)


def cow_sets_the_old_block_to_one(refs, free, table):
    """Right for two sharers only (newcomer 31, N3): the old block's count is set
    to 1, not lowered by 1."""
    got = cow_keeps_the_old_reference(refs, free, table)
    if got is not None:
        refs[got[0]] = 1
    return got


def cow_always_copies(refs, free, table):
    last = table[-1]
    if not free:
        raise MemoryError("no free block")
    new = free.pop(0)
    refs[new], refs[last], table[-1] = 1, refs[last] - 1, new
    return (last, new)


def cow_none_when_out_of_blocks(refs, free, table):
    last = table[-1]
    if refs[last] == 1 or not free:
        return None
    new = free.pop(0)
    refs[new], refs[last], table[-1] = 1, refs[last] - 1, new
    return (last, new)


def cow_changes_then_raises(refs, free, table):
    last = table[-1]
    if refs[last] == 1:
        return None
    refs[last] -= 1                             # touches the pool before checking
    if not free:
        raise MemoryError("no free block")
    new = free.pop(0)
    refs[new], table[-1] = 1, new
    return (last, new)


def sharing_prompt_shared_whole(prompt, outs, bs):
    alone = sum(_ceil(prompt + o, bs) for o in outs)
    return alone, _ceil(prompt, bs) + sum(_ceil(prompt + o, bs) - _ceil(prompt, bs) for o in outs)


def sharing_every_sample_copies(prompt, outs, bs):
    alone = sum(_ceil(prompt + o, bs) for o in outs)
    full = prompt // bs
    return alone, full + sum(_ceil(prompt + o, bs) - full for o in outs)


def sharing_forgets_idle_samples(prompt, outs, bs):
    alone = sum(_ceil(prompt + o, bs) for o in outs)
    full = prompt // bs
    return alone, full + sum(_ceil(prompt + o, bs) - full for o in outs if o > 0)


# ---------------------------------------------------------------- lab 08
def top_p_drops_the_crossing_token(logits, top_p):
    values, order = torch.sort(logits, descending=True)
    mass = values.softmax(-1).cumsum(-1)
    out = logits.clone()
    out[order[mass > top_p]] = float("-inf")
    return out


def top_p_unsorted(logits, top_p):
    probs = logits.softmax(-1)
    out = logits.clone()
    out[(probs.cumsum(-1) - probs) >= top_p] = float("-inf")
    return out


def top_p_in_place(logits, top_p):
    values, order = torch.sort(logits, descending=True)
    probs = values.softmax(-1)
    logits[order[(probs.cumsum(-1) - probs) >= top_p]] = float("-inf")
    return logits


def top_p_strictly_above(logits, top_p):
    values, order = torch.sort(logits, descending=True)
    probs = values.softmax(-1)
    out = logits.clone()
    out[order[(probs.cumsum(-1) - probs) > top_p]] = float("-inf")
    return out


def pack_positions_from_zero(scheduled, bs):
    right = _solution("lab08_full_engine").pack_step(scheduled, bs)
    return [p for _, _, n in scheduled for p in range(n)], *right[1:]


def pack_without_leading_zero(scheduled, bs):
    positions, slots, cu, ctx = _solution("lab08_full_engine").pack_step(scheduled, bs)
    return positions, slots, cu[1:], ctx


def pack_context_is_new_tokens(scheduled, bs):
    positions, slots, cu, _ = _solution("lab08_full_engine").pack_step(scheduled, bs)
    return positions, slots, cu, [n for _, _, n in scheduled]


def pack_slot_without_block_size(scheduled, bs):
    positions, _, cu, ctx = _solution("lab08_full_engine").pack_step(scheduled, bs)
    slots = [t[p // bs] + p % bs for t, s, n in scheduled for p in range(s, s + n)]
    return positions, slots, cu, ctx


# ---------------------------------------------------------------- lab 09
def fit_partial_blocks_count(mem, layers, heads, dim, dtype, bs):
    return mem // (2 * layers * heads * dim * dtype)


def fit_without_the_two(mem, layers, heads, dim, dtype, bs):
    return mem // (layers * heads * dim * dtype * bs) * bs


def fit_blocks_rounded_up(mem, layers, heads, dim, dtype, bs):
    return _ceil(mem, 2 * layers * heads * dim * dtype * bs) * bs


def _tokens(a, k):
    return sum(a ** i for i in range(k + 1))


def _argmax(rates, largest=False):
    best = max(rates)
    ks = [k for k, r in enumerate(rates) if r >= best * (1 - 1e-12)]
    return ks[-1] if largest else ks[0]


def drafts_free(a, c, kmax):
    return _argmax([_tokens(a, k) for k in range(kmax + 1)])


def drafts_linear_acceptance(a, c, kmax):
    return _argmax([(1 + k * a) / (1 + k * c) for k in range(kmax + 1)])


def drafts_without_own_token(a, c, kmax):
    return _argmax([(_tokens(a, k) - 1) / (1 + k * c) for k in range(kmax + 1)])


def drafts_largest_on_a_tie(a, c, kmax):
    return _argmax([_tokens(a, k) / (1 + k * c) for k in range(kmax + 1)], largest=True)


def drafts_closed_form_divides_by_zero(a, c, kmax):
    return _argmax([(1 - a ** (k + 1)) / (1 - a) / (1 + k * c) for k in range(kmax + 1)])


WRONG = {
    ("lab00", "blocks_for"): [blocks_floor, blocks_plus_one, blocks_round, blocks_float_ceil],
    ("lab01", "cached_kv_reads"): [reads_no_growth, reads_every_new_token,
                                   reads_without_own_token, reads_with_prefill],
    ("lab01", "max_batch"): [batch_ignoring_weights, batch_params_as_bytes, batch_rounded_up,
                             batch_may_go_negative],
    ("lab01", "kv_bytes_per_token"): [kv_query_heads, kv_head_dim_from_hidden,
                                      kv_without_the_two],
    ("lab02", "reservation_size"): [reserve_pow2_of_everything, reserve_without_cap,
                                    reserve_pow2_of_zero_is_one],
    ("lab02", "first_fit"): [fit_unsorted, fit_strictly_larger, fit_only_at_the_end, fit_best],
    ("lab02", "waste_breakdown"): [waste_every_free_slot, waste_total_free_decides,
                                   waste_internal_is_size_minus_used],
    ("lab03", "token_at"): [token_at_slot_index, token_at_ignoring_the_tail,
                            token_at_physical_block, token_at_offset_only],
    ("lab03", "blocks_needed"): [needed_for_new_tokens_only, needed_total, needed_floor],
    ("lab03", "append_slots"): [append_from_the_back, append_not_all_or_nothing,
                                append_new_block_every_call,
                                append_checks_room_without_the_tail],
    ("lab04", "gather_kv"): [gather_ignoring_the_table, gather_every_table_entry,
                             gather_whole_blocks],
    ("lab04", "paged_decode_attention"): [attention_tiled_heads, attention_unscaled,
                                          attention_over_whole_blocks],
    ("lab04", "online_softmax_update"): [online_the_kernel_lines, online_acc_not_rescaled,
                                         online_alpha_inverted, online_no_max],
    ("lab04", "merge_states"): [merge_average, merge_unstable, merge_lse_is_max,
                                merge_no_empty_guard],
    ("lab05", "finish_steps"): [finish_round_robin_seats, finish_one_step_late,
                                finish_static_waits_for_shortest, finish_shortest_first],
    ("lab05", "admit"): [admit_skipping_the_head, admit_chunk_shrunk_to_blocks,
                         admit_blocks_rounded_down, admit_blocks_not_spent, admit_empty_chunks,
                         admit_blocks_for_the_whole_prompt, admit_chunked_ignores_seats],
    ("lab06", "tokens_to_recompute"): [recompute_no_last_token_rule, recompute_uncapped,
                                       recompute_returns_saved, recompute_skips_the_last_token],
    ("lab06", "preemption_mode"): [mode_counts_shared_blocks_twice, mode_one_way,
                                   mode_swap_on_a_tie, mode_ignores_cpu_room,
                                   mode_recomputes_one_sequence],
    ("lab06", "choose_victims"): [victims_biggest_first, victims_oldest_first,
                                  victims_never_itself, victims_by_total_need,
                                  victims_preempt_on_exact_fit],
    ("lab07", "chain_hashes"): [hashes_all_from_root, hashes_with_the_partial_block,
                                hashes_of_whole_prefix, hashes_one_block_short],
    ("lab07", "copy_on_write"): [cow_takes_the_last_free_block, cow_keeps_the_old_reference,
                                 cow_always_copies, cow_none_when_out_of_blocks,
                                 cow_changes_then_raises],
    ("lab07", "sharing_blocks"): [sharing_prompt_shared_whole, sharing_every_sample_copies,
                                  sharing_forgets_idle_samples],
    ("lab08", "top_p_filter"): [top_p_drops_the_crossing_token, top_p_unsorted, top_p_in_place,
                                top_p_strictly_above],
    ("lab08", "pack_step"): [pack_positions_from_zero, pack_without_leading_zero,
                             pack_context_is_new_tokens, pack_slot_without_block_size],
    ("lab09", "tokens_that_fit"): [fit_partial_blocks_count, fit_without_the_two,
                                   fit_blocks_rounded_up],
    ("lab09", "best_num_drafts"): [drafts_free, drafts_linear_acceptance,
                                   drafts_without_own_token, drafts_largest_on_a_tie,
                                   drafts_closed_form_divides_by_zero],
}


# --------------------------------------------- lab 04, the Triton kernel exercise
_LOOKUP = ("            block = tl.load(block_table_ptr + n // BLOCK_SIZE, mask=n_mask, "
           "other=0).to(tl.int64)\n"
           "            row = block * stride_block + (n % BLOCK_SIZE) * stride_token + "
           "head * stride_head\n")


def _kernel_variant(name: str, lookup: str):
    """The reference kernel with its two block-table lines replaced by `lookup`,
    written to a module file (Triton reads a kernel's source from its file)."""
    import inspect
    import sys
    import textwrap

    source = textwrap.dedent(inspect.getsource(_solution("lab04_paged_attention").paged_kernel.fn))
    right, wrong = textwrap.indent(textwrap.dedent(_LOOKUP), " " * 8), \
        textwrap.indent(textwrap.dedent(lookup), " " * 8)
    assert right in source, source
    source = source.replace(right, wrong).replace("def paged_kernel(", f"def {name}(")
    path = Path(KERNEL_FILES.name) / f"{name}.py"
    assert not path.exists(), f"two wrong kernels named {name}"
    path.write_text("import triton\nimport triton.language as tl\n\n\n" + source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def _wrong_kernels():
    if importlib.util.find_spec("triton") is None:  # pragma: no cover - no Triton, no exercise
        return []
    return [
        _kernel_variant("kernel_logical_block_as_physical", (
            "            block = (n // BLOCK_SIZE).to(tl.int64)\n"
            "            row = block * stride_block + (n % BLOCK_SIZE) * stride_token + "
            "head * stride_head\n")),
        _kernel_variant("kernel_ignores_the_block_stride", (
            "            block = tl.load(block_table_ptr + n // BLOCK_SIZE, mask=n_mask, "
            "other=0).to(tl.int64)\n"
            "            row = (block * BLOCK_SIZE + n % BLOCK_SIZE) * stride_token + "
            "head * stride_head\n")),
        _kernel_variant("kernel_unmasked_table_load", (  # lanes past the context read past
            "            block = tl.load(block_table_ptr + n // BLOCK_SIZE).to(tl.int64)\n"
            "            row = block * stride_block + (n % BLOCK_SIZE) * stride_token + "
            "head * stride_head\n")),                       # the table: the check's faults
        _kernel_variant("kernel_one_block_per_tile", (
            "            block = tl.load(block_table_ptr + tile_start // BLOCK_SIZE).to(tl.int64)\n"
            "            row = block * stride_block + (n % BLOCK_SIZE) * stride_token + "
            "head * stride_head\n")),
    ]


WRONG[("lab04", "paged_kernel")] = _wrong_kernels()


# ------------------------------------------ more wrong answers (#27): boundaries once missed
def admit_seats_checked_after(waiting, tokens, seats, blocks, bs, chunked=False):
    admitted = []
    for rid, n in waiting:
        if tokens <= 0:
            break
        take = min(n, tokens) if chunked else n
        need = _ceil(take, bs)
        if take > tokens or need > blocks:
            break
        admitted.append((rid, take))
        tokens, seats, blocks = tokens - take, seats - 1, blocks - need
        if seats == 0:                          # checked after admitting: 0 seats admits one
            break
    return admitted


def victims_one_per_request(running, free):
    queue, victims, served = list(running), [], 0
    while queue:
        rid, needed, _ = queue.pop(0)
        if needed > free and queue:             # if, not while: one victim, enough or not
            victim, _, held = queue.pop()
            victims.append(victim)
            free += held
        if needed <= free:
            free -= needed
            served += 1
        elif served:
            victims.append(rid)
    return victims


def victims_only_those_that_need(running, free):
    queue, victims, served = list(running), [], 0
    while queue:
        rid, needed, _ = queue.pop(0)
        while needed > free and queue:          # spares the newest if it needs nothing now
            victim = ([r for r in queue if r[1] > 0] or queue)[-1]
            queue.remove(victim)
            victims.append(victim[0])
            free += victim[2]
        if needed <= free:
            free -= needed
            served += 1
        elif served:
            victims.append(rid)
    return victims


def fit_blocks_rounded(mem, layers, heads, dim, dtype, bs):
    return round(mem / (2 * layers * heads * dim * dtype * bs)) * bs  # to the nearest block


WRONG[("lab05", "admit")].append(admit_seats_checked_after)
WRONG[("lab06", "choose_victims")] += [victims_one_per_request, victims_only_those_that_need]
WRONG[("lab09", "tokens_that_fit")].append(fit_blocks_rounded)


def _more_wrong_kernels():
    if importlib.util.find_spec("triton") is None:  # pragma: no cover - no Triton, no exercise
        return []
    return [
        _kernel_variant("kernel_block_ids_in_32_bits", (  # block * stride_block wraps past 2^31
            "            block = tl.load(block_table_ptr + n // BLOCK_SIZE, mask=n_mask, "
            "other=0)\n"
            "            row = block * stride_block + (n % BLOCK_SIZE) * stride_token + "
            "head * stride_head\n")),
        _kernel_variant("kernel_heads_head_dim_apart", (  # true only while heads are packed
            "            block = tl.load(block_table_ptr + n // BLOCK_SIZE, mask=n_mask, "
            "other=0).to(tl.int64)\n"
            "            row = block * stride_block + (n % BLOCK_SIZE) * stride_token + "
            "head * HEAD_DIM\n")),
    ]


WRONG[("lab04", "paged_kernel")] += _more_wrong_kernels()


# ---------------------------------------------- lab 04c, the Triton puzzles (#28)
def _puzzle_variant(kernel: str, name: str, *edits: tuple[str, str]):
    """The reference puzzle kernel `kernel` with each ``(old, new)`` line edit
    made, as a kernel of its own in a module file (Triton reads its source)."""
    import inspect
    import sys
    import textwrap

    solutions = _solution("lab04c_triton_puzzles")
    source = textwrap.dedent(inspect.getsource(getattr(solutions, kernel).fn))
    for old, new in edits:
        assert old in source, (kernel, old)
        source = source.replace(old, new)
    source = source.replace(f"def {kernel}(", f"def {name}(")
    path = Path(KERNEL_FILES.name) / f"{name}.py"
    assert not path.exists(), f"two wrong kernels named {name}"
    path.write_text("import triton\nimport triton.language as tl\n\n\n" + source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def _wrong_puzzles():
    if importlib.util.find_spec("triton") is None:  # pragma: no cover - no Triton, no puzzles
        return {}
    v = _puzzle_variant
    return {
        "store_kv_kernel": [
            v("store_kv_kernel", "store_sizes_for_strides",
              ("dst = block * stride_block + offset * stride_token + head * stride_head + d",
               "dst = ((block * BLOCK_SIZE + offset) * tl.num_programs(1) + head) * HEAD_DIM "
               "+ d")),
            v("store_kv_kernel", "store_block_and_offset_swapped",
              ("block = slot // BLOCK_SIZE", "block = slot % BLOCK_SIZE"),
              ("offset = slot % BLOCK_SIZE", "offset = slot // BLOCK_SIZE")),
            v("store_kv_kernel", "store_value_from_key",
              ("tl.store(v_cache_ptr + dst, tl.load(value_ptr + src))",
               "tl.store(v_cache_ptr + dst, tl.load(key_ptr + src))")),
            v("store_kv_kernel", "store_ignores_the_block_stride",  # newcomer 8: passed once
              ("dst = block * stride_block + offset * stride_token + head * stride_head + d",
               "dst = slot * stride_token + head * stride_head + d")),
            v("store_kv_kernel", "store_without_the_slot_guard",   # slot -1 writes before
              ("    if slot >= 0:\n", "    if True:\n")),           # the cache (newcomer 8)
        ],
        "gather_kernel": [
            v("gather_kernel", "gather_unmasked_table_load",
              ("tl.load(block_table_ptr + n // BLOCK_SIZE, mask=mask, other=0)",
               "tl.load(block_table_ptr + n // BLOCK_SIZE)")),
            v("gather_kernel", "gather_stores_every_lane",
              ("tl.store(out_ptr + dst, x, mask=mask[:, None])", "tl.store(out_ptr + dst, x)")),
            v("gather_kernel", "gather_logical_block_as_physical",
              ("block = tl.load(block_table_ptr + n // BLOCK_SIZE, mask=mask, other=0)"
               ".to(tl.int64)", "block = (n // BLOCK_SIZE).to(tl.int64)")),
            v("gather_kernel", "gather_ignores_the_block_stride",
              ("row = block * stride_block + (n % BLOCK_SIZE) * stride_token",
               "row = (block * BLOCK_SIZE + n % BLOCK_SIZE) * stride_token")),
            v("gather_kernel", "gather_out_heads_head_dim_apart",
              ("head * stride_out_head + d[None, :]", "head * HEAD_DIM + d[None, :]")),
            v("gather_kernel", "gather_block_ids_in_32_bits",    # newcomer 14: passed once
              ("mask=mask, other=0).to(tl.int64)", "mask=mask, other=0)")),
            v("gather_kernel", "gather_block_ids_unsigned_32_bits",
              ("mask=mask, other=0).to(tl.int64)", "mask=mask, other=0).to(tl.uint32)")),
        ],
        "decode_kernel": [
            v("decode_kernel", "decode_acc_not_rescaled",
              ("acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)",
               "acc = acc + tl.sum(p[:, None] * v.to(tl.float32), 0)")),
            v("decode_kernel", "decode_kv_head_is_query_head",
              ("kv_head = head // GROUP", "kv_head = head")),
            v("decode_kernel", "decode_lse_without_the_max",
              ("tl.store(lse_ptr + head + tl.arange(0, 1), row_max + tl.log(row_sum))",
               "tl.store(lse_ptr + head + tl.arange(0, 1), tl.log(row_sum))")),
            v("decode_kernel", "decode_ignores_the_block_stride",
              ("row = block * stride_block + (n % BLOCK_SIZE) * stride_token",
               "row = (block * BLOCK_SIZE + n % BLOCK_SIZE) * stride_token")),
            v("decode_kernel", "decode_unmasked_table_load",
              ("tl.load(block_table_ptr + n // BLOCK_SIZE, mask=mask, other=0)",
               "tl.load(block_table_ptr + n // BLOCK_SIZE)")),
            v("decode_kernel", "decode_block_ids_in_32_bits",    # newcomer 14: passed once
              ("mask=mask, other=0).to(tl.int64)", "mask=mask, other=0)")),
            v("decode_kernel", "decode_alpha_inverted",          # exp(new - old): grows
              ("alpha = tl.exp(row_max - new_max)", "alpha = tl.exp(new_max - row_max)")),
            v("decode_kernel", "decode_sum_not_rescaled",        # acc rescaled, row_sum not
              ("row_sum = row_sum * alpha + tl.sum(p, 0)", "row_sum = row_sum + tl.sum(p, 0)")),
        ],
        "merge_kernel": [
            v("merge_kernel", "merge_without_the_max",
              ("w = tl.exp(lse - safe)", "w = tl.exp(lse)")),
            v("merge_kernel", "merge_no_empty_guard",
              ("safe = tl.where(top == float(\"-inf\"), 0.0, top)", "safe = top")),
            v("merge_kernel", "merge_average",
              ("w = tl.exp(lse - safe)", "w = tl.where(lse > float(\"-inf\"), 1.0, 0.0)")),
            v("merge_kernel", "merge_not_normalized",   # the weights' sum taken as 1
              ("merged = tl.sum(w[:, None] * parts, 0) / tl.where(total > 0, total, 1.0)",
               "merged = tl.sum(w[:, None] * parts, 0)")),
            v("merge_kernel", "merge_weights_without_the_max",   # the lse subtracts it, out not
              ("merged = tl.sum(w[:, None] * parts, 0) / tl.where(total > 0, total, 1.0)",
               "merged = tl.sum(tl.exp(lse)[:, None] * parts, 0) / tl.sum(tl.exp(lse), 0)")),
            v("merge_kernel", "merge_exp_without_any_max",  # right until exp(900) is inf
              ("w = tl.exp(lse - safe)", "w = tl.exp(lse)"),
              ("tl.full([1], safe, tl.float32) + tl.log(", "tl.log(")),
            v("merge_kernel", "merge_unmasked_loads",    # splits past num_splits read past
              (", mask=mask, other=float(\"-inf\"))", ")"),  # the end of the inputs
              (",\n                    mask=mask[:, None], other=0.0)", ")")),
        ],
    }


for _kernel_name, _kernels in _wrong_puzzles().items():
    WRONG[("lab04c", _kernel_name)] = _kernels


#: Lab 04c's `serve` (#28): the wrong kernels that serving LLM("tiny") through
#: them must stop, naming the kernel, by `serve`'s keyword (newcomer 14: of all
#: four puzzles; a decode kernel without the rescaling and a store kernel
#: without the slot guard once served right). Not those serving cannot tell
#: from the right kernel (their puzzles' checks stop them): merge_no_empty_guard
#: differs only where every split of a row is empty, and a decode attention
#: always has a key; the engine's tensors are not padded, so a size used for a
#: stride is right there; serving merges NUM_SPLITS splits, a power of two, so
#: no lane runs past them; the tiny model's cache is far from 2^31 elements,
#: so block offsets in 32 bits are right there.
NOT_SERVED = {"merge_no_empty_guard", "merge_unmasked_loads",
              "gather_ignores_the_block_stride", "gather_out_heads_head_dim_apart",
              "decode_ignores_the_block_stride", "store_sizes_for_strides",
              "store_ignores_the_block_stride",
              "gather_block_ids_in_32_bits", "gather_block_ids_unsigned_32_bits",
              "decode_block_ids_in_32_bits"}
WRONG_SERVED: dict[str, list] = {
    name: [k for k in WRONG.get(("lab04c", name), []) if k.__name__ not in NOT_SERVED]
    for name in ("store_kv_kernel", "gather_kernel", "decode_kernel", "merge_kernel")}

#: What a check's message must say of a wrong answer, beyond failing: the
#: case, and the cause. Lab 04c's stride mistakes (a size used where a stride
#: belongs) and memory faults (a load past the data without a mask, a padding
#: token's slot -1 written), one of each per puzzle that has them (newcomer 8).
_STRIDE = "a size is used where a stride belongs"
MESSAGES: dict[str, tuple[str, ...]] = {
    "store_sizes_for_strides": ("on 5 new tokens", _STRIDE),
    "store_ignores_the_block_stride": ("on 5 new tokens", _STRIDE),
    "gather_ignores_the_block_stride": ("on 5 tokens", _STRIDE),
    "gather_out_heads_head_dim_apart": ("on 5 tokens", _STRIDE),
    "decode_ignores_the_block_stride": ("on 5 tokens", _STRIDE),
    "store_without_the_slot_guard": ("on 5 new tokens", "wrote outside",
                                     "slot is -1: wrap the stores in `if slot >= 0:`"),
    "gather_unmasked_table_load": ("on 5 tokens", "process died", "mask=n < num_tokens"),
    "decode_unmasked_table_load": ("on 5 tokens", "process died", "mask=n < context_len"),
    "merge_unmasked_loads": ("on 3 splits", "process died", "mask=s < num_splits"),
    # newcomer 14: 32-bit block offsets passed gather and decode; a NaN blamed a read
    "gather_block_ids_in_32_bits": ("blocks start past 2^32 elements: is off by",
                                    "Cast the block ids to tl.int64"),
    "gather_block_ids_unsigned_32_bits": ("blocks start past 2^32 elements: is off by",
                                          "Cast the block ids to tl.int64"),
    "decode_block_ids_in_32_bits": ("blocks start past 2^32 elements: is off by",
                                    "Cast the block ids to tl.int64"),
    "decode_kv_head_is_query_head": ("4 query heads over 2 KV heads", "returned NaN",
                                     "a KV head past the cache's (query head h reads KV "
                                     "head h // GROUP)"),
    "decode_alpha_inverted": ("returned NaN", "or its online softmax made one"),
    "merge_exp_without_any_max": ("scores around 900: returned NaN: exp(lse) overflows",),
    # answers that raise (the one rule, exercises.raised): lab 04's hint for an
    # IndexError on any case; else the case's hint where the error is the case's alone
    "gather_every_table_entry": ("raised IndexError", "Hint: the table is padded past the "
                                 "sequence's last block"),
    "drafts_closed_form_divides_by_zero": ("(1.0, 0.1, 6) raised ZeroDivisionError",
                                           "Hint: every draft accepted: E = k + 1 (mind a "
                                           "division by zero)"),
    "victims_zero_need_not_served": ("raised ValueError: B does not fit even alone",
                                     "Hint: A takes 0, 0 left; B needs 1, 0 free"),
    "cow_refuses_a_sole_owner_when_the_pool_is_full": (
        "raised MemoryError: no free block", "Hint: the last block (2) has ref count 1: this "
        "sequence is its sole owner, so it writes in place"),
}


# ------------------------- boundary states the checks once skipped (#27, round 2)
# Each passed the check of its day and is stopped by the walk over boundary
# states (pagedkit.exercises._boundaries): a full or empty pool, a sole owner,
# a block exactly filled, several seats freeing in one step, a tie.
def finish_refills_one_seat_a_step(lens, seats, policy):
    if policy == "static":
        return _solution("lab05_continuous_batching").finish_steps(lens, seats, policy)
    left, out = list(lens), [0] * len(lens)
    queue, seated = list(range(len(lens))), []
    seated, queue = queue[:seats], queue[seats:]
    step = 0
    while queue or seated:
        if queue and len(seated) < seats:       # if, not while: one free seat filled a step
            seated.append(queue.pop(0))
        step += 1
        for i in seated:
            left[i] -= 1
            if left[i] == 0:
                out[i] = step
        seated = [i for i in seated if left[i]]
    return out


def admit_chunked_passes_a_blocked_head(waiting, tokens, seats, blocks, bs, chunked=False):
    admitted = []
    for rid, n in waiting:
        if tokens <= 0 or seats <= 0:
            break
        take = min(n, tokens) if chunked else n
        need = _ceil(take, bs)
        if take > tokens:
            break
        if need > blocks:
            if chunked:
                continue                        # a chunk that does not fit lets the next try
            break
        admitted.append((rid, take))
        tokens, seats, blocks = tokens - take, seats - 1, blocks - need
    return admitted


def cow_refuses_a_sole_owner_when_the_pool_is_full(refs, free, table):
    if not free:                                # checks the pool before the ref count
        raise MemoryError("no free block")
    last = table[-1]
    if refs[last] == 1:
        return None
    new = free.pop(0)
    refs[new], refs[last], table[-1] = 1, refs[last] - 1, new
    return (last, new)


def sharing_keeps_a_partial_block_that_is_not_there(prompt_len, output_lens, bs):
    alone = sum(_ceil(prompt_len + o, bs) for o in output_lens)
    full = prompt_len // bs
    writers = [o for o in output_lens if o]
    shared = full + sum(_ceil(prompt_len + o, bs) - full for o in writers)
    if len(writers) < len(output_lens):         # forgets: only if the prompt ends mid-block
        shared += 1
    return alone, shared


def fit_tokens_rounded_then_blocks(mem, layers, heads, dim, dtype, bs):
    tokens = round(mem / (2 * layers * heads * dim * dtype))  # to the nearest token first
    return tokens // bs * bs


def fit_float_division(mem, layers, heads, dim, dtype, bs):
    return int(mem / (2 * layers * heads * dim * dtype * bs)) * bs  # rounds past 2^53


def drafts_all_when_always_accepted(a, c, kmax):
    if a == 1:                                  # every draft accepted: draft as many as allowed
        return kmax
    return _argmax([_tokens(a, k) / (1 + k * c) for k in range(kmax + 1)])


def drafts_all_when_free(a, c, kmax):
    if c == 0:                                  # free drafts: as many as allowed, even if useless
        return kmax
    return _argmax([_tokens(a, k) / (1 + k * c) for k in range(kmax + 1)])


def mode_shares_only_what_all_share(tables, tokens, cpu, block_bytes, link, prefill):
    common = set.intersection(*map(set, tables))  # blocks every sequence holds count once
    blocks = sum(len(t) for t in tables) - (len(tables) - 1) * len(common)
    if blocks > cpu:
        return "recompute"
    return "swap" if 2 * blocks * block_bytes / link < sum(tokens) / prefill else "recompute"


def victims_zero_need_not_served(running, free):
    queue, victims, served = list(running), [], 0
    while queue:
        rid, needed, _ = queue.pop(0)
        if needed == 0:
            continue                            # needs nothing: not counted as served
        while needed > free and queue:
            victim, _, held = queue.pop()
            victims.append(victim)
            free += held
        if needed <= free:
            free -= needed
            served += 1
        elif served:
            victims.append(rid)
        else:
            raise ValueError(f"{rid} does not fit even alone")
    return victims


def attention_softmax_without_the_max(query, k_cache, v_cache, table, n):
    k, v = _gather(k_cache, table, n), _gather(v_cache, table, n)
    group = query.shape[0] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = torch.einsum("hd,thd->ht", query, k) * query.shape[-1] ** -0.5
    weights = torch.exp(scores)                 # overflows to inf once a score passes ~88
    weights = weights / weights.sum(-1, keepdim=True)
    return torch.einsum("ht,thd->hd", weights, v)


def attention_scale_written_in(query, k_cache, v_cache, table, n):
    k, v = _gather(k_cache, table, n), _gather(v_cache, table, n)
    group = query.shape[0] // k.shape[1]
    return _attend(query, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                   8 ** -0.5)                   # the lab's head_dim, written in


def _unsigned_kernels():
    if importlib.util.find_spec("triton") is None:  # pragma: no cover - no Triton, no exercise
        return []
    return [
        _kernel_variant("kernel_block_ids_unsigned_32_bits", (  # fits 2^31, wraps past 2^32
            "            block = tl.load(block_table_ptr + n // BLOCK_SIZE, mask=n_mask, "
            "other=0).to(tl.uint32)\n"
            "            row = block * stride_block + (n % BLOCK_SIZE) * stride_token + "
            "head * stride_head\n")),
    ]


WRONG[("lab04", "paged_kernel")] += _unsigned_kernels()
WRONG[("lab04", "paged_decode_attention")] += [attention_softmax_without_the_max,
                                               attention_scale_written_in]
WRONG[("lab05", "finish_steps")].append(finish_refills_one_seat_a_step)
WRONG[("lab05", "admit")].append(admit_chunked_passes_a_blocked_head)
WRONG[("lab06", "preemption_mode")].append(mode_shares_only_what_all_share)
WRONG[("lab06", "choose_victims")] += [victims_zero_need_not_served, victims_never_taking]
WRONG[("lab07", "copy_on_write")] += [cow_refuses_a_sole_owner_when_the_pool_is_full,
                                      cow_sets_the_old_block_to_one]
WRONG[("lab07", "sharing_blocks")].append(sharing_keeps_a_partial_block_that_is_not_there)
WRONG[("lab09", "tokens_that_fit")] += [fit_tokens_rounded_then_blocks, fit_float_division]
WRONG[("lab09", "best_num_drafts")] += [drafts_all_when_always_accepted, drafts_all_when_free]
