"""Reference solutions of lab 03 (checked by tests/labs/test_exercises.py)."""


def slot_of(block_table: list[int], block_size: int, position: int) -> int:
    logical, offset = divmod(position, block_size)
    return block_table[logical] * block_size + offset


def token_at(block_table: list[int], block_size: int, num_tokens: int, slot: int) -> int | None:
    block, offset = divmod(slot, block_size)
    if block not in block_table:
        return None                          # another sequence's block, or a free one
    position = block_table.index(block) * block_size + offset   # its index is the logical block
    return position if position < num_tokens else None          # the tail holds no token yet


def blocks_needed(num_tokens: int, num_new_tokens: int, block_size: int) -> int:
    def blocks(n: int) -> int:
        return -(-n // block_size)

    return blocks(num_tokens + num_new_tokens) - blocks(num_tokens)


def append_slots(block_table: list[int], num_tokens: int, num_new_tokens: int,
                 block_size: int, free_blocks: list[int]) -> list[int] | None:
    if blocks_needed(num_tokens, num_new_tokens, block_size) > len(free_blocks):
        return None  # all or nothing: nothing has changed yet
    slots = []
    for position in range(num_tokens, num_tokens + num_new_tokens):
        if position % block_size == 0:  # the first token of a new block
            block_table.append(free_blocks.pop(0))
        slots.append(slot_of(block_table, block_size, position))
    return slots
