"""Reference solutions for lab 05 (continuous batching).

The test suite runs every check of `pagedkit.exercises.lab05` against
these, so they stay in step with the checks. Try the exercises first.
"""

import heapq


def finish_steps(output_lens, max_num_seqs, policy):
    """Steps run when each request produced its last token; all arrive at step 0."""
    finish = []
    if policy == "static":
        start = 0
        for b in range(0, len(output_lens), max_num_seqs):
            batch = output_lens[b:b + max_num_seqs]
            finish += [start + n for n in batch]
            start += max(batch)                 # the batch's longest request sets the pace
    elif policy == "continuous":
        free_at = [0] * min(max_num_seqs, len(output_lens))   # when each seat frees up
        for n in output_lens:                   # oldest first: take the seat that frees first
            start = heapq.heappop(free_at)
            finish.append(start + n)
            heapq.heappush(free_at, start + n)
    else:
        raise ValueError(f"policy must be 'static' or 'continuous', got {policy!r}")
    return finish


def admit(waiting, tokens_left, seats_left, free_blocks, block_size, chunked=False):
    """FCFS admission under a token budget, a seat cap and the free blocks."""
    admitted = []
    for request_id, prompt_len in waiting:
        if tokens_left <= 0 or seats_left <= 0:
            break
        take = min(prompt_len, tokens_left) if chunked else prompt_len
        blocks = -(-take // block_size)
        if take > tokens_left or blocks > free_blocks:
            break                               # the head waits, and so does everyone behind it
        admitted.append((request_id, take))
        tokens_left -= take
        seats_left -= 1
        free_blocks -= blocks
    return admitted
