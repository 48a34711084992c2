"""Where a view of a finished recording opens, and what its text says about it
(newcomers 38-39, stop 47's leftovers).

* A view of a finished recording (a closed recorder, a replay) opened on step
  0, an empty pool, while a view looked at after a live run opens on its
  busiest step. Both now follow one rule: from the last step, or the busiest
  where the last holds nothing.
* The text forms (repr, summary, text) said "step 23/24" but not why the view
  opened there; only the figure's title said so. They now say it while the
  view shows that step.
* ``summary(-1)`` was an IndexError; a step index counts from the end when
  negative, as a list's does.
* ``PageTable(..., seq=...)`` of a sequence no step ever held said "holds no
  blocks", as for one that gave its blocks back; it now says no recorded step
  holds it and names the sequences that do.

Every view, every step index from -len to len, replays with every policy. And
a replay's `Comparison` shows as one line, not every frame (newcomer 40).
"""

from __future__ import annotations

import pytest

from pagedkit.memory import KVCacheManager
from pagedkit.sim import TraceRequest
from pagedkit.viz import BlockMap, ContiguousVsPaged, PageTable, Timeline, replay

TRACE = [TraceRequest("A", 0, 4, 12), TraceRequest("B", 0, 2, 6), TraceRequest("C", 1, 6, 10),
         TraceRequest("D", 2, 3, 5)]
OPENED = "(the busiest; the view opened here)"


def _comparison(policy="pow2"):
    return replay(TRACE, num_blocks=16, block_size=4, policy=policy, max_seq_len=32)


def _views(comparison):
    rec = comparison.recorder
    return [BlockMap(rec), PageTable(rec), Timeline(rec), ContiguousVsPaged(comparison)]


def _busiest(frames):
    used = [f.memory.used for f in frames]
    return max(range(len(used)), key=lambda i: (used[i], i))


@pytest.mark.parametrize("policy", ["max", "pow2", "oracle"])
def test_a_finished_recording_opens_on_its_busiest_step_and_says_so(policy):
    comparison = _comparison(policy)
    busiest = _busiest(comparison.paged)
    assert 0 < busiest < len(comparison) - 1
    for view in _views(comparison):
        assert view.index == busiest, type(view).__name__
        assert OPENED in repr(view) and OPENED in view.summary() and OPENED in view.text()
        assert OPENED in view.summary(busiest)
        for i in range(len(comparison)):
            if i != busiest:
                assert OPENED not in view.summary(i), (type(view).__name__, i)
        view.index = busiest - 1  # moved away: the text says it of that step only (as the title)
        assert OPENED not in repr(view) and OPENED in view.summary(busiest)


def test_a_finished_recording_that_ends_holding_blocks_opens_on_its_last_step():
    kv = KVCacheManager(num_blocks=16, block_size=4)
    view = BlockMap(kv)
    for k, seq in enumerate("ABC"):
        kv.allocate_slots(seq, list(range(3 + 4 * k)))
        view.recorder.cut()
    view.recorder.close()
    fresh = BlockMap(view.recorder)
    assert fresh.index == fresh.player.last == 3
    assert OPENED not in repr(fresh)


@pytest.mark.parametrize("make", [0, 1, 2, 3])
def test_a_negative_step_index_counts_from_the_end(make):
    comparison = _comparison()
    n = len(comparison)
    view = _views(comparison)[make]
    for k in range(1, n + 1):
        assert view.summary(-k) == view.summary(n - k)
        assert view.text(-k) == view.text(n - k)
    view.index = -1
    assert view.index == n - 1
    view.index = -n
    assert view.index == 0
    for bad in (-n - 1, n):
        with pytest.raises(IndexError, match=rf"step index {bad} is outside the recording "
                                             rf"\[0, {n - 1}\] \(or \[-{n}, -1\] from the end\)"):
            view.summary(bad)
        with pytest.raises(IndexError):
            view.index = bad
        assert view.index == 0  # unchanged


def test_a_page_table_of_a_sequence_never_recorded_names_those_that_were():
    rec = _comparison().recorder
    seen = list(dict.fromkeys(s for f in rec.frames for s in f.sequences))
    for seq in ("nope", "0", 99, None.__class__):
        text = PageTable(rec, seq=seq).describe()
        assert text == (f"sequence {seq!r} holds blocks at no recorded step; the sequences "
                        f"that do: {', '.join(map(repr, seen))}"), text
    # one that held blocks, but not at the step shown
    first_done = next(s for s in seen if s not in rec.frames[-1].sequences)
    view = PageTable(rec, seq=first_done)
    assert view.describe(len(rec) - 1) == f"sequence {first_done!r} holds no blocks"


@pytest.mark.parametrize("requests", [1, 2, 4])
def test_a_comparison_shows_as_one_line(requests):
    """Newcomer 40: a replay's repr printed every frame (124 KB for three requests)."""
    comparison = replay(TRACE[:requests], num_blocks=16, block_size=4, max_seq_len=32)
    plural = "" if requests == 1 else "s"
    assert repr(comparison) == (f"Comparison(pow2 vs paged, {len(comparison)} frames, 64 slots "
                                f"in blocks of 4, {requests} request{plural}: "
                                "ContiguousVsPaged(comparison) draws them)")


def test_a_dashboard_has_the_views_text_and_summary_at_any_step():
    """Newcomer 42: `Dashboard.text(3)` was an AttributeError."""
    from pagedkit.viz import Dashboard

    rec = _comparison().recorder
    dash = Dashboard(rec)
    n = len(rec)
    for i in [*range(n), *range(-n, 0)]:
        assert dash.text(i) == "\n".join(v.text(i) for v in dash.views)
        assert dash.summary(i) == (f"{dash.block_map.summary(i)}; "
                                   f"{dash.page_table.describe(i)}")
    assert repr(dash) == f"Dashboard({dash.summary()})" and str(dash) == dash.text()


@pytest.mark.parametrize("given", [TRACE, TRACE[0], None, "trace"])
def test_contiguous_vs_paged_of_anything_but_a_replay_says_to_replay(given):
    with pytest.raises(TypeError, match=r"ContiguousVsPaged takes a replay's Comparison, got "
                                        rf"{type(given).__name__}: pass replay\(trace, "):
        ContiguousVsPaged(given)


@pytest.mark.parametrize(("given", "said"), [
    ({"num_block": 16, "block_size": 4}, "unexpected keyword argument 'num_block' (did you mean "
                                          "'num_blocks'?)"),
    ({"num_blocks": 16, "blocksize": 4}, "unexpected keyword argument 'blocksize' (did you mean "
                                         "'block_size'?)"),
    ({"block_size": 4}, "replay() needs num_blocks="),
    ({"num_blocks": 16}, "replay() needs block_size=")])
def test_replay_names_a_misspelled_or_missing_size(given, said):
    with pytest.raises(TypeError) as caught:
        replay(TRACE, **given)
    assert said in str(caught.value)
