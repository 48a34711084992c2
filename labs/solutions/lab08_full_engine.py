"""Reference solutions for lab 08 (the full engine). The test suite runs the
checks in `pagedkit.exercises.lab08` against these."""

import torch


def top_p_filter(logits, top_p):
    """Keep the smallest set of most likely tokens whose mass reaches top_p."""
    sorted_logits, order = torch.sort(logits, descending=True)
    probs = sorted_logits.softmax(-1)
    mass_before = probs.cumsum(-1) - probs
    out = logits.clone()
    out[order[mass_before >= top_p]] = float("-inf")
    return out


def pack_step(scheduled, block_size):
    """Positions, slot mapping, cu_seqlens and context lengths of one packed step."""
    positions, slots, cu_seqlens, context_lens = [], [], [0], []
    for table, start, num_tokens in scheduled:
        for pos in range(start, start + num_tokens):
            positions.append(pos)
            slots.append(table[pos // block_size] * block_size + pos % block_size)
        cu_seqlens.append(cu_seqlens[-1] + num_tokens)
        context_lens.append(start + num_tokens)
    return positions, slots, cu_seqlens, context_lens
