import pytest

from pagedkit.sim import OPT_13B, OPT_66B, OPT_175B, LatencyModel
from pagedkit.sim.latency import PRESETS
from pagedkit.sim.paper import TABLE1_KV_SLOTS


@pytest.mark.parametrize("preset, tolerance", [(OPT_13B, 0.01), (OPT_66B, 0.02),
                                               (OPT_175B, 0.01)], ids=lambda p: str(p)[:20])
def test_presets_reproduce_table1_slots(preset, tolerance):
    assert preset.kv_slots == pytest.approx(TABLE1_KV_SLOTS[preset.name], rel=tolerance)


def test_opt13b_numbers():
    assert OPT_13B.kv_bytes_per_token == 2 * 40 * 5120 * 2 == 819_200
    assert OPT_13B.kv_slots == 15_728


def test_a_step_reads_the_weights_at_least_once():
    m = LatencyModel()
    floor = m.overhead + 26e9 / (1.555e12 * m.mem_efficiency)
    assert m.step_time(1, 0) == pytest.approx(floor)
    # more context costs more memory traffic; enough tokens make it compute-bound
    assert m.step_time(1, 10_000) > m.step_time(1, 1_000) > floor
    big = m.step_time(4096, 0)
    assert big == pytest.approx(m.overhead + 2 * 13e9 * 4096 / (312e12 * m.flop_efficiency))


def test_paged_reads_are_slower_and_tiny_blocks_slowest():
    m = LatencyModel()
    assert m.attention_efficiency(None) == 1.0
    assert m.attention_efficiency(16) == pytest.approx(0.8)  # the paper's ~20-26% (Fig. 18a)
    times = [m.step_time(30, 15_000, b) for b in (1, 4, 16, 256)]
    assert times == sorted(times, reverse=True)
    assert m.step_time(30, 15_000, None) < times[-1]


@pytest.mark.parametrize("preset", list(PRESETS.values()), ids=list(PRESETS))
@pytest.mark.parametrize("block_size", [None, 1, 16])
def test_a_step_is_the_slower_of_its_memory_and_compute_sides(preset, block_size):
    """Labs 01 and 09 print each side alone (memory_time, compute_time); a step
    takes the slower of the two, after the fixed overhead."""
    model = LatencyModel(preset)
    for tokens, context in ((1, 0), (1, 200), (7, 3500), (256, 256), (512, 256_000)):
        memory, compute = model.memory_time(context, block_size), model.compute_time(tokens)
        assert memory > 0 and compute > 0
        assert model.step_time(tokens, context, block_size) == model.overhead + max(memory,
                                                                                     compute)
    assert model.memory_time(200, block_size) > model.memory_time(0, block_size)
    assert model.compute_time(2) == 2 * model.compute_time(1)


@pytest.mark.parametrize("name", ["mem_efficiency", "flop_efficiency"])
@pytest.mark.parametrize("value", [0, -0.5, 1.0001, 2, float("nan"), -float("inf")])
def test_efficiencies_outside_zero_one_are_refused(name, value):
    with pytest.raises(ValueError, match=name):
        LatencyModel(**{name: value})


@pytest.mark.parametrize("name, side", [("mem_efficiency", "memory_time"),
                                        ("flop_efficiency", "compute_time")])
def test_infinite_efficiency_leaves_that_roof_out_as_the_doc_says(name, side):
    """newcomer26 finding 4: math.inf is accepted on purpose (lab 01's roofline
    without that roof) and makes that side's time 0; docs/simulator.md says so."""
    import math
    from pathlib import Path
    model = LatencyModel(**{name: math.inf})
    args = (1000,) if side == "compute_time" else (1000, 16)
    assert getattr(model, side)(*args) == 0.0
    assert getattr(LatencyModel(), side)(*args) > 0
    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "simulator.md")
                   .read_text().split())
    assert f"`{name}=math.inf` makes `{side}` 0" in doc
