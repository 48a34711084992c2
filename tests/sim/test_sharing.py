from collections import Counter

import numpy as np
import pytest

from pagedkit.memory import EventBus, EventLog
from pagedkit.sim import (
    BeamSearch,
    ManagerSpec,
    ParallelSampling,
    SharedPrefix,
    Simulator,
    Trace,
    TraceRequest,
    simulate,
    synthetic_trace,
)
from pagedkit.sim.sharing import choose_parents

PAGED4 = ManagerSpec("paged", 4)


def one(prompt_len, output_len, arrival=0.0, rid=0):
    return TraceRequest(rid, arrival, prompt_len, output_len)


def test_parallel_samples_share_the_prompt_and_copy_its_last_block():
    # 6-token prompt in blocks of 4: one full block shared, the partial one copied on write
    log = EventLog(bus := EventBus())
    sim = Simulator(Trace("t", (one(6, 3),)), PAGED4, sharing=ParallelSampling(2), events=bus)
    first = sim.step()  # the prompt, once for both samples: both share its 2 blocks
    assert first.usage.used_blocks == 2 and first.usage.blocks_alone == 4
    assert Counter(log.kinds())["cow"] == 0 and Counter(log.kinds())["admit"] == 2
    assert first.num_tokens == 6
    second = sim.step()  # each writes its first token (as in the engine): one copy
    assert second.usage.used_blocks == 3 and Counter(log.kinds())["cow"] == 1
    sim.run()
    assert sim.memory.kv.stats().used_blocks == 0


def test_beam_search_forks_and_frees_beams_every_step():
    log = EventLog(bus := EventBus())
    trace = synthetic_trace("alpaca", rate=5, num_requests=10, seed=0)
    sim = Simulator(trace, PAGED4, sharing=BeamSearch(3), events=bus, seed=1)
    r = sim.run()
    kinds = Counter(log.kinds())
    assert kinds["fork"] > 0 and kinds["cow"] > 0
    pruned = sum(1 for e in log if e.kind.value == "finish" and e.reason == "pruned")
    stopped = sum(1 for e in log if e.kind.value == "finish" and e.reason == "stop")
    assert pruned > 0 and stopped == 3 * len(trace)  # every request ends with its 3 beams
    assert 0 < r.sharing_saving() < 1
    assert sim.memory.kv.stats().used_blocks == 0


def test_choose_parents_is_uniform_and_seeded():
    import random
    rng = random.Random(0)
    counts = Counter(p for _ in range(3000) for p in choose_parents(4, rng))
    assert set(counts) == {0, 1, 2, 3}
    assert max(counts.values()) / min(counts.values()) < 1.15


def test_shared_prefix_is_computed_once_then_hit_in_the_cache():
    trace = Trace("t", (one(5, 3), one(5, 3, arrival=10.0, rid=1)))
    log = EventLog(bus := EventBus())
    sim = Simulator(trace, PAGED4, sharing=SharedPrefix(8), events=bus)
    records = []
    while (record := sim.step()) is not None:
        records.append(record)
    assert records[0].num_tokens == 13  # 8 prefix + 5 own tokens
    second = next(r for r in records if r.admitted == (1,))
    assert second.num_tokens == 5  # both prefix blocks come from the cache
    assert Counter(log.kinds())["cache_hit"] == 2


def test_sharing_needs_paged_memory():
    with pytest.raises(ValueError, match="only the paged manager can do; got Orca \\(Pow2\\)"):
        Simulator(Trace("t", (one(4, 4),)), "pow2", sharing=ParallelSampling(2))
    with pytest.raises(ValueError, match="ParallelSampling n must be >= 1, got 0"):
        ParallelSampling(0)


def test_saving_counts_blocks_against_holding_alone():
    trace = synthetic_trace("alpaca", rate=10, num_requests=40, seed=3)
    plain = simulate(trace, "paged")
    assert plain.sharing_saving() == 0.0
    assert simulate(trace, "paged", sharing=ParallelSampling(1)).sharing_saving() == 0.0
    assert simulate(trace, "paged", sharing=ParallelSampling(4)).sharing_saving() > 0.0


def test_beams_are_reshuffled_once_per_iteration_even_when_someone_is_preempted(monkeypatch):
    """Each iteration chooses every beam group's parents once (§4.4): a group
    that waits while a newer one is preempted for its room must not draw again."""
    calls = []
    reshuffle = Simulator._reshuffle_beams

    def counted(self, group):
        calls.append((self.step_count, group.request_id))
        reshuffle(self, group)

    monkeypatch.setattr(Simulator, "_reshuffle_beams", counted)
    trace = Trace("t", tuple(one(6, 20, rid=i) for i in range(4)))
    sim = Simulator(trace, PAGED4, capacity_slots=96, watermark=0, sharing=BeamSearch(3),
                    seed=3)
    r = sim.run()
    assert r.num_preemptions > 0 and len(r.finished) == 4
    assert max(Counter(calls).values()) == 1


@pytest.mark.parametrize("option, field", [(ParallelSampling, "n"), (BeamSearch, "width"),
                                           (SharedPrefix, "length")])
@pytest.mark.parametrize("value, error", [(1.5, TypeError), (2.0, TypeError), ("2", TypeError),
                                          (True, TypeError), (None, TypeError),
                                          (0, ValueError), (-1, ValueError)])
def test_a_sharing_option_refuses_a_bad_count_when_built(option, field, value, error):
    with pytest.raises(error, match=rf"{option.__name__} {field} must be .*got {value!r}"):
        option(value)


@pytest.mark.parametrize("option", [ParallelSampling, BeamSearch, SharedPrefix])
def test_a_sharing_option_takes_a_numpy_int_as_an_int(option):
    (value,) = vars(option(np.int64(3))).values()
    assert value == 3 and type(value) is int
