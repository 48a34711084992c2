"""A plugged-in piece that fails part-way through a step (#28): the engine it
was plugged into is never left serving on half a step's state. The step
raises the piece's `TrackError`; from then on the engine refuses every step
and request with `BrokenEngineError`, naming the piece and what to do — inside
`plugged()` and after it — while an engine whose pieces never failed serves on.
One piece at a time, each failing at its own seam."""

import pytest

from pagedkit import LLM, SamplingParams
from pagedkit.exercises import track

PROMPTS = [[5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 11], [20, 21, 22]]
PARAMS = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
#: top_p_filter is asked only for rows that sample under a top-p cut.
SAMPLED = SamplingParams(temperature=1.0, top_p=0.9, seed=3, max_tokens=6, ignore_eos=True)
#: Prefix caching on (chain_hashes is asked), blocks of 4 (prompts end mid-block:
#: copy_on_write is asked at each decode), a pool small enough to fill.
ENGINE = {"num_blocks": 8, "block_size": 4, "enable_prefix_caching": True}


def failing_at(seam):
    """A piece that raises when the engine first asks it, noting the call."""
    calls = []

    def piece(*args):
        calls.append(args)
        raise RuntimeError(f"{seam} fails here")
    piece.calls = calls
    return piece


def generate(llm, params=PARAMS):
    outs = llm.generate(PROMPTS, params, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs]


@pytest.fixture(scope="module")
def expected():
    return generate(LLM("tiny", **ENGINE))


@pytest.mark.parametrize("seam", track.PIECES)
def test_a_piece_failing_mid_step_leaves_the_engine_refusing_not_wrong(seam, expected):
    llm = LLM("tiny", **ENGINE)
    piece = failing_at(seam)
    params = SAMPLED if seam == "top_p_filter" else PARAMS
    with track.plugged(llm, track.Pieces(**{seam: piece})):
        with pytest.raises(track.TrackError, match=f"your {seam} ") as raised:
            generate(llm, params)
        assert raised.value.piece == seam and piece.calls, "the seam was never reached"
        with pytest.raises(track.BrokenEngineError, match=f"in your {seam} .*new engine"):
            generate(llm)
    for again in (lambda: generate(llm), lambda: llm.llm_engine.step(),
                  lambda: track.plug_in(llm, track.Pieces())):
        with pytest.raises(track.BrokenEngineError, match=f"part-way through a step, in your "
                                                          f"{seam} "):
            again()
    assert generate(LLM("tiny", **ENGINE)) == expected   # a new engine serves as before


def test_an_engine_whose_pieces_never_failed_serves_on(expected):
    llm = LLM("tiny", **ENGINE)
    reference = track.Pieces(admit=None)
    with track.plugged(llm, reference):
        assert generate(llm) == expected
    assert generate(llm) == expected
    assert "_track_broken" not in vars(llm.llm_engine)


def test_an_interrupt_inside_a_piece_leaves_the_engine_refusing():
    """The notebook's stop button (KeyboardInterrupt) while a learner's piece
    runs stops the step part-way too: the engine refuses to serve on."""
    llm = LLM("tiny", **ENGINE)

    def interrupted(*args):
        raise KeyboardInterrupt
    with track.plugged(llm, track.Pieces(admit=interrupted)), pytest.raises(KeyboardInterrupt):
        generate(llm)
    with pytest.raises(track.BrokenEngineError, match="KeyboardInterrupt"):
        generate(llm)
