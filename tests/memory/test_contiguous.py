import pytest

from pagedkit.memory import ContiguousAllocator


@pytest.mark.parametrize("policy, prompt, output, reserved", [
    ("max", 10, 10, 64), ("max", 1, 0, 64),
    # pow2 knows the prompt and rounds only the output up (paper §6.1: 25 -> 32)
    ("pow2", 10, 25, 10 + 32), ("pow2", 4, 16, 4 + 16), ("pow2", 4, 17, 4 + 32),
    ("pow2", 3, 1, 3 + 1), ("pow2", 5, 0, 5), ("pow2", 20, 20, 20 + 32),
    ("oracle", 10, 10, 20), ("oracle", 7, 0, 7),
])
def test_reservation_policies(policy, prompt, output, reserved):
    mem = ContiguousAllocator(128, policy, max_seq_len=64)
    assert mem.reservation_size(prompt, output) == reserved
    assert mem.allocate("A", prompt, output).size == reserved


def test_pow2_never_exceeds_max_len():
    mem = ContiguousAllocator(4096, "pow2", max_seq_len=2000)
    assert mem.reservation_size(500, 1025) == 2000  # 500 + 2048, capped
    assert mem.reservation_size(161, 338) == 161 + 512


def test_reservation_size_rejects_what_can_never_run():
    mem = ContiguousAllocator(128, "pow2", max_seq_len=64)
    with pytest.raises(ValueError, match=r"needs 70 tokens \(prompt 60 \+ output 10\)"):
        mem.reservation_size(60, 10)
    with pytest.raises(ValueError, match="prompt_len"):
        mem.reservation_size(0, 10)


def test_first_fit_and_hole_merging():
    mem = ContiguousAllocator(100, "oracle", max_seq_len=100)
    a = mem.allocate("A", 10, 10)
    b = mem.allocate("B", 20, 10)
    c = mem.allocate("C", 5, 5)
    assert (a.start, b.start, c.start) == (0, 20, 50)
    mem.free("B")
    assert mem.holes() == [(20, 30), (60, 40)]
    d = mem.allocate("D", 10, 0)
    assert d.start == 20  # first hole that fits
    mem.free("A")
    mem.free("D")
    assert mem.holes() == [(0, 50), (60, 40)]
    assert [r.request for r in mem.regions()] == ["C"]


def test_waste_breakdown():
    mem = ContiguousAllocator(100, "pow2", max_seq_len=64)
    mem.allocate("A", prompt_len=10, output_len=10)  # reserves 10 + 16 = 26
    mem.append("A", 4)
    s = mem.stats()
    assert (s.token_states, s.reservation, s.internal_fragmentation, s.free) == (14, 6, 6, 74)
    assert s.token_states + s.reservation + s.internal_fragmentation + s.free == 100
    assert s.external_fragmentation(next_request_size=64) == 0
    mem.allocate("B", 32, 0)  # 32 at [26, 58)
    mem.allocate("C", 32, 0)  # 32 at [58, 90)
    s = mem.stats()
    assert s.largest_hole == 10
    assert s.external_fragmentation(next_request_size=16) == 10


def test_external_fragmentation_strands_free_space():
    mem = ContiguousAllocator(40, "oracle", max_seq_len=40)
    for name in "ABCD":
        mem.allocate(name, 10, 0)
    mem.free("A")
    mem.free("C")
    s = mem.stats()
    assert s.free == 20 and s.largest_hole == 10
    assert mem.allocate("E", 15, 0) is None  # 20 free slots, no 15-slot hole
    assert s.external_fragmentation(15) == 20


def test_errors_name_values():
    mem = ContiguousAllocator(100, "max", max_seq_len=64)
    with pytest.raises(ValueError, match=r"needs 70 tokens .* max_seq_len is 64"):
        mem.allocate("A", 60, 10)
    with pytest.raises(ValueError,
                       match="policy must be one of 'max', 'pow2', 'oracle'; got 'lru'"):
        ContiguousAllocator(100, "lru")
    with pytest.raises(ValueError, match="can never fit in a capacity of 32"):
        ContiguousAllocator(32, "max", max_seq_len=64).allocate("A", 1, 1)
    mem.allocate("A", 10, 2)
    with pytest.raises(ValueError, match="would hold 13 tokens but declared it needs 12"):
        mem.append("A", 3)
    with pytest.raises(KeyError, match="holds no reservation"):
        mem.free("Z")


def test_stats_running_totals_match_the_regions():
    """stats() keeps running totals (it is asked every simulated iteration);
    they must always equal a recount over the live regions and holes."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    ops = st.lists(st.tuples(st.sampled_from(["alloc", "append", "free"]),
                             st.integers(0, 5), st.integers(1, 30), st.integers(0, 30)),
                   max_size=40)

    @settings(max_examples=80, deadline=None)
    @given(ops=ops, policy=st.sampled_from(["max", "pow2", "oracle"]))
    def check(ops, policy):
        mem = ContiguousAllocator(200, policy, max_seq_len=64)
        for op, name, a, b in ops:
            if op == "alloc" and name not in mem and a + b <= 64:
                mem.allocate(name, a, b)
            elif op == "append" and name in mem:
                region = mem.region(name)
                mem.append(name, min(a, region.need - region.used))
            elif op == "free" and name in mem:
                mem.free(name)
            s, regions = mem.stats(), mem.regions()
            assert s.token_states == sum(r.used for r in regions)
            assert s.reservation == sum(r.need - r.used for r in regions)
            assert s.internal_fragmentation == sum(r.size - r.need for r in regions)
            assert s.free == sum(size for _, size in mem.holes()) == 200 - sum(
                r.size for r in regions)
            assert s.largest_hole == max((size for _, size in mem.holes()), default=0)

    check()
