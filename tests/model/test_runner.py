"""`pack_step` and `ModelRunner` on hand-built step plans.

Every expected value below is worked out by hand from the block tables the
test builds (block ``b`` holds slots ``4b .. 4b + 3``), not read back from the
code under test: token ids, positions, ``slot_mapping``, ``cu_seqlens``,
block tables padded with 0, context lengths, decodes first, and the rows
whose logits are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from pagedkit.memory import KVCacheManager
from pagedkit.model.runner import ModelRunner, pack_step

BS = 4


@dataclass
class Seq:
    seq_id: str
    token_ids: list[int]


@dataclass
class Part:
    """One sequence's share of the step (the shape `ScheduledTokens` names)."""

    seq: Seq
    start: int
    num_tokens: int

    @property
    def computes_last_token(self) -> bool:
        return self.start + self.num_tokens == len(self.seq.token_ids)


@dataclass
class Plan:
    scheduled: list[Part]
    block_copies: list[tuple[int, int]] = field(default_factory=list)
    swap_out: list[tuple[int, int]] = field(default_factory=list)
    swap_in: list[tuple[int, int]] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


def tokens(first: int, n: int) -> list[int]:
    return list(range(first, first + n))


def decoding_pair() -> tuple[KVCacheManager, Seq, Seq]:
    """A (6 tokens) and B (5 tokens), blocks interleaved: A = [0, 2], B = [1, 3]."""
    kv = KVCacheManager(num_blocks=16, block_size=BS)
    a, b = Seq("A", tokens(100, 6)), Seq("B", tokens(200, 5))
    kv.allocate_slots("A", a.token_ids[:4])  # block 0
    kv.allocate_slots("B", b.token_ids[:4])  # block 1
    kv.allocate_slots("A", a.token_ids[4:])  # block 2
    kv.allocate_slots("B", b.token_ids[4:])  # block 3
    return kv, a, b


def packed(plan: Plan, kv: KVCacheManager) -> dict:
    ids, positions, meta, logits = pack_step(plan, kv)
    return {"ids": ids.tolist(), "positions": positions.tolist(),
            "slots": meta.slot_mapping.tolist(), "tables": meta.block_tables.tolist(),
            "context_lens": meta.context_lens.tolist(), "cu_seqlens": meta.cu_seqlens_q.tolist(),
            "num_decodes": meta.num_decodes, "logits": logits.tolist()}


def test_decodes():
    kv, a, b = decoding_pair()
    got = packed(Plan([Part(a, 5, 1), Part(b, 4, 1)]), kv)
    assert got == {"ids": [105, 204], "positions": [5, 4],
                   "slots": [2 * BS + 1, 3 * BS + 0],  # A's token 5: block 2, offset 1
                   "tables": [[0, 2], [1, 3]], "context_lens": [6, 5], "cu_seqlens": [0, 1, 2],
                   "num_decodes": 2, "logits": [0, 1]}


def test_prefill():
    kv = KVCacheManager(num_blocks=16, block_size=BS)
    kv.allocate_slots("X", tokens(0, 3))  # block 0 taken by someone else
    c = Seq("C", tokens(300, 7))
    kv.allocate_slots("C", c.token_ids)  # blocks 1, 2
    got = packed(Plan([Part(c, 0, 7)]), kv)
    assert got == {"ids": c.token_ids, "positions": list(range(7)),
                   "slots": [4, 5, 6, 7, 8, 9, 10], "tables": [[1, 2]], "context_lens": [7],
                   "cu_seqlens": [0, 7], "num_decodes": 0, "logits": [6]}


def test_chunked_prefill_over_a_cached_prefix():
    """Q shares P's two full blocks through the prefix cache and computes only
    its next 3 tokens (of 5): positions and context start after the prefix,
    and a chunk that does not reach the last token keeps no logits."""
    kv = KVCacheManager(num_blocks=16, block_size=BS, enable_prefix_caching=True)
    shared = tokens(400, 8)
    kv.allocate_slots("P", [*shared, 1])  # blocks 0, 1 full (named), 2
    q = Seq("Q", shared + tokens(500, 5))
    cached = kv.cached_prefix("Q", q.token_ids)
    assert cached == [0, 1]
    kv.allocate_slots("Q", q.token_ids[8:11], cached)  # block 3
    got = packed(Plan([Part(q, 8, 3)]), kv)
    assert got == {"ids": [500, 501, 502], "positions": [8, 9, 10], "slots": [12, 13, 14],
                   "tables": [[0, 1, 3]], "context_lens": [11], "cu_seqlens": [0, 3],
                   "num_decodes": 0, "logits": []}
    # the chunk that finishes the prompt samples
    kv.allocate_slots("Q", q.token_ids[11:])
    got = packed(Plan([Part(q, 11, 2)]), kv)
    assert (got["positions"], got["slots"], got["context_lens"], got["logits"]) == \
        ([11, 12], [15, 4 * BS], [13], [1])
    assert got["tables"] == [[0, 1, 3, 4]]


def test_decodes_then_a_prefill_tables_padded_with_zero():
    kv, a, b = decoding_pair()
    c = Seq("C", tokens(300, 10))
    kv.allocate_slots("C", c.token_ids)  # blocks 4, 5, 6
    got = packed(Plan([Part(a, 5, 1), Part(b, 4, 1), Part(c, 0, 10)]), kv)
    assert got == {"ids": [105, 204, *c.token_ids], "positions": [5, 4, *list(range(10))],
                   "slots": [9, 12, *list(range(16, 26))],
                   "tables": [[0, 2, 0], [1, 3, 0], [4, 5, 6]], "context_lens": [6, 5, 10],
                   "cu_seqlens": [0, 1, 2, 12], "num_decodes": 2, "logits": [0, 1, 11]}


def test_blocks_released_before_a_window_pack_as_block_zero():
    """A block a sliding window released (`NULL_BLOCK` in the table) packs as
    `KERNEL_NULL_BLOCK` (0), a valid id the kernels never read, as the padding
    does; the live entries and the slots are as before. Each sequence alone
    and both, with and without a longer third table to pad to."""
    from pagedkit.memory.block_table import KERNEL_NULL_BLOCK, NULL_BLOCK

    assert (KERNEL_NULL_BLOCK, NULL_BLOCK) == (0, -1)
    for released in ("A", "B", "AB"):
        for padded in (False, True):
            kv, a, b = decoding_pair()  # A = [0, 2], B = [1, 3]
            parts = [Part(a, 5, 1), Part(b, 4, 1)]
            if padded:
                c = Seq("C", tokens(300, 10))
                kv.allocate_slots("C", c.token_ids)  # blocks 4, 5, 6
                parts.append(Part(c, 0, 10))
            for seq, length in (("A", 6), ("B", 5)):
                if seq in released:  # keys before position 4 are never read again
                    assert kv.release_outside_window(seq, length - 1, 1) == [[0, 1][seq == "B"]]
                    assert kv.block_ids(seq)[0] == NULL_BLOCK
            got = packed(Plan(parts), kv)
            tables = [[0, 2], [0 if "B" in released else 1, 3]]
            if padded:
                tables = [[*row, 0] for row in tables] + [[4, 5, 6]]
            assert got["tables"] == tables, (released, padded)
            assert got["slots"][:2] == [9, 12]


def test_a_prefill_before_a_decode_counts_no_decodes():
    """Decodes must come first: the prefix of one-token parts is what the
    kernels take as decodes, so a prefill first leaves none."""
    kv, a, _ = decoding_pair()
    c = Seq("C", tokens(300, 2))
    kv.allocate_slots("C", c.token_ids)
    assert packed(Plan([Part(c, 0, 2), Part(a, 5, 1)]), kv)["num_decodes"] == 0


def test_a_sequence_without_a_table_is_an_error_naming_it():
    kv, a, _ = decoding_pair()
    with pytest.raises(KeyError, match="'Z'"):
        pack_step(Plan([Part(a, 5, 1), Part(Seq("Z", [1]), 0, 1)]), kv)


def test_a_swapped_out_sequence_is_an_error_naming_it():
    """Its table points into the CPU pool: packing those ids as GPU blocks would
    read someone else's K/V, so the step is refused before anything is packed."""
    kv = KVCacheManager(num_blocks=16, block_size=BS, num_swap_blocks=4)
    a, b = Seq("A", tokens(100, 6)), Seq("B", tokens(200, 5))
    kv.allocate_slots("A", a.token_ids)
    kv.allocate_slots("B", b.token_ids)
    kv.swap_out(["B"])
    with pytest.raises(KeyError, match=r"'B' has no GPU block table \(swapped out\)"):
        pack_step(Plan([Part(a, 5, 1), Part(b, 4, 1)]), kv)


# ---------------------------------------------------------------- ModelRunner
@pytest.fixture(scope="module")
def runner():
    from pagedkit.models import load_tiny

    model, _ = load_tiny()
    r = ModelRunner(model, block_size=BS, device=torch.device("cpu"), dtype=torch.float32)
    r.allocate_cache(num_blocks=8, num_swap_blocks=4)
    return r


def fill(caches, block: int, value: float) -> None:
    for k, v in caches:
        k[block] = value
        v[block] = -value


def block_values(caches, block: int) -> set[float]:
    return {float(x) for k, v in caches for x in torch.cat([k[block].flatten(),
                                                             -v[block].flatten()]).unique()}


def test_runner_moves_blocks_before_the_forward(runner):
    """Copy-on-write copies, swap-out and swap-in happen in one `execute`, on
    every layer's K and V; an empty step runs no forward and returns None."""
    kv = KVCacheManager(num_blocks=8, block_size=BS)
    fill(runner.kv_caches, 1, 1.0)
    fill(runner.kv_caches, 2, 2.0)
    fill(runner.swap_caches, 3, 3.0)
    plan = Plan([], block_copies=[(1, 5)], swap_out=[(2, 0)], swap_in=[(3, 6)])
    assert runner.execute(plan, kv) is None
    assert block_values(runner.kv_caches, 5) == {1.0}
    assert block_values(runner.swap_caches, 0) == {2.0}
    assert block_values(runner.kv_caches, 6) == {3.0}


def test_runner_returns_logits_of_the_sampling_rows(runner):
    """One prefill and its decode through the paged cache give the logits of
    the model's own forward over the whole sequence (float32, eager)."""
    kv = KVCacheManager(num_blocks=8, block_size=BS)
    s = Seq("S", tokens(10, 7))
    kv.allocate_slots("S", s.token_ids[:6])
    first = runner.execute(Plan([Part(Seq("S", s.token_ids[:6]), 0, 6)]), kv)
    kv.allocate_slots("S", s.token_ids[6:])
    second = runner.execute(Plan([Part(s, 6, 1)]), kv)
    with torch.inference_mode():
        runner.model.set_attn_implementation("eager")
        try:
            ref = runner.model(input_ids=torch.tensor([s.token_ids])).logits[0].float()
        finally:
            from pagedkit.model.attention import register
            runner.model.set_attn_implementation(register())
    assert first.shape == (1, ref.shape[-1]) and second.shape == (1, ref.shape[-1])
    torch.testing.assert_close(first[0], ref[5], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(second[0], ref[6], rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------ threads per step
def test_step_macs_is_the_largest_matrix_multiply_of_a_layer():
    from pagedkit.model import threads
    from pagedkit.models import load_tiny

    cfg = load_tiny()[0].config  # hidden 256, MLP 768
    assert threads.step_macs(cfg, 10) == 10 * cfg.hidden_size * cfg.intermediate_size


def test_intra_op_threads_restores_the_count_even_when_the_block_raises():
    from pagedkit.model.threads import intra_op_threads

    before = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="inside"), intra_op_threads(before + 1):
        assert torch.get_num_threads() == before + 1
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before


def test_a_cpu_step_runs_on_the_thread_count_the_chooser_picks(runner, monkeypatch):
    """The forward runs inside the process's thread chooser (threads.CHOOSER,
    tested on its own in test_threads.py): asked with the step's work and the
    model, it runs on the count the chooser picks, and the user's count is
    back after the step."""
    from contextlib import contextmanager

    from pagedkit.model import threads

    asked = []

    class PicksTwo:
        @contextmanager
        def step(self, macs, key=None):
            asked.append((macs, key))
            with threads.intra_op_threads(2):
                yield 2

    monkeypatch.setattr(threads, "CHOOSER", PicksTwo())
    seen = []
    hook = runner.model.register_forward_pre_hook(
        lambda *_: seen.append(torch.get_num_threads()))
    previous = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        kv = KVCacheManager(num_blocks=8, block_size=BS)
        s = Seq("T", tokens(3, 5))
        kv.allocate_slots("T", s.token_ids)
        assert runner.execute(Plan([Part(s, 0, 5)]), kv).shape[0] == 1
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(previous)
        hook.remove()
    assert seen == [2]
    assert asked == [(threads.step_macs(runner.model.config, 5), id(runner.model))]
