"""Reference solutions for lab 06 (when memory runs out).

The test suite runs every check of `pagedkit.exercises.lab06` against
these, so they stay in step with the checks. Try the exercises first.
"""


def tokens_to_recompute(num_tokens, block_size, cached_blocks):
    """Tokens the re-admission prefill computes; the last token is never a cache hit."""
    reusable = min(cached_blocks, (num_tokens - 1) // block_size)
    return num_tokens - reusable * block_size


def preemption_mode(tables, recompute_tokens, free_cpu_blocks, block_bytes, link_bytes_per_s,
                    prefill_tokens_per_s):
    """Swap only if the group fits in CPU memory and moving it out and back is cheaper."""
    blocks = len({b for table in tables for b in table})   # shared blocks travel once
    if blocks > free_cpu_blocks:
        return "recompute"
    swap_s = 2 * blocks * block_bytes / link_bytes_per_s   # out now, back in later
    recompute_s = sum(recompute_tokens) / prefill_tokens_per_s   # counted for us, sharing included
    return "swap" if swap_s < recompute_s else "recompute"


def choose_victims(running, free_blocks):
    """pagedkit's rule: serve the oldest first; preempt the newest until it fits."""
    queue = list(running)
    victims, served = [], 0
    while queue:
        request_id, needed, _ = queue.pop(0)
        while needed > free_blocks and queue:
            victim, _, held = queue.pop()            # the newest still running
            victims.append(victim)
            free_blocks += held
        if needed <= free_blocks:
            free_blocks -= needed
            served += 1
        elif served:                                 # older requests hold the memory
            victims.append(request_id)
        else:
            raise ValueError(f"{request_id} does not fit even alone")
    return victims
