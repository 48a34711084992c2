"""Reference solutions of lab 02 (checked by tests/labs/test_exercises.py)."""


def reservation_size(policy: str, prompt_len: int, output_len: int, max_len: int) -> int:
    if policy == "max":
        return max_len
    if policy == "pow2":  # the prompt is known; only the output is rounded up
        output_slots = 1 << (output_len - 1).bit_length() if output_len else 0  # 2**k >= it
        return min(prompt_len + output_slots, max_len)
    return prompt_len + output_len  # oracle


def first_fit(regions, capacity: int, size: int):
    cursor = 0  # first slot not known to be taken
    for start, length in sorted(regions):
        if start - cursor >= size:
            return cursor
        cursor = max(cursor, start + length)
    return cursor if capacity - cursor >= size else None


def waste_breakdown(reservations, capacity: int, next_size: int) -> dict:
    used = sum(r.used for r in reservations)
    need = sum(r.need for r in reservations)
    reserved = sum(r.size for r in reservations)
    holes, cursor = [], 0
    for r in sorted(reservations, key=lambda r: r.start):
        holes.append(r.start - cursor)
        cursor = r.start + r.size
    holes.append(capacity - cursor)
    free = capacity - reserved
    return {
        "token_states": used,
        "reservation": need - used,  # reserved for tokens still to come
        "internal_fragmentation": reserved - need,  # reserved, never to be used
        # free slots are external fragmentation only if the waiting request fits in no hole
        "external_fragmentation": free if next_size > max(holes) else 0,
    }
