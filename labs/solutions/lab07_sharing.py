"""Reference solutions for lab 07 (sharing). The test suite runs the checks
in `pagedkit.exercises.lab07` against these, so they cannot drift apart."""

from pagedkit.memory import ROOT_HASH, hash_block


def chain_hashes(token_ids, block_size):
    """Names of the full blocks of `token_ids`, each chained to its parent's."""
    hashes = []
    parent = ROOT_HASH
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(parent, token_ids[start:start + block_size])
        hashes.append(parent)
    return hashes


def copy_on_write(ref_counts, free_blocks, table):
    """Make the table's last block safe to write into; returns (src, dst) or None."""
    last = table[-1]
    if ref_counts[last] == 1:
        return None
    if not free_blocks:
        raise MemoryError(f"block {last} is shared and no block is free to copy it into")
    new = free_blocks.pop(0)
    ref_counts[new] = 1
    ref_counts[last] -= 1
    table[-1] = new
    return (last, new)


def sharing_blocks(prompt_len, output_lens, block_size):
    """(blocks if every sample held its own copy, blocks with sharing)."""
    def blocks(tokens):
        return -(-tokens // block_size)

    alone = sum(blocks(prompt_len + o) for o in output_lens)
    full = prompt_len // block_size  # shared by all, never written again
    partial = prompt_len % block_size != 0
    writers = [o for o in output_lens if o > 0]
    shared = full + sum(blocks(prompt_len + o) - full for o in writers)
    if partial and len(writers) < len(output_lens):
        shared += 1  # the original partial block, still read by samples that have not written
    return alone, shared
