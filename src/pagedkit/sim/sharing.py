"""Decoding scenarios where sequences of one request share KV blocks (paper §4.4).

* `ParallelSampling(n)`: one prompt, `n` independent samples. The prompt's
  blocks are shared; each sample copies the partly filled last block on its
  first write (copy-on-write) and grows its own blocks from there.
* `BeamSearch(width)`: every step keeps the `width` best candidates. A
  candidate extends one of the current beams, so a beam picked by several
  candidates is forked, one picked by none is freed, and beams share all
  the blocks of their common history.
* `SharedPrefix(length)`: every prompt starts with the same few-shot prefix
  (a system prompt, examples); the prefix cache hands its full blocks to
  each new request instead of computing and storing them again.

The trace still says how long each output is; a scenario only says how the
request's sequences relate. Which beams the candidates extend depends on
the model's probabilities, which a trace does not have: `choose_parents`
draws them uniformly at random, a neutral model under which beams share
their history up to a few steps back (real beams often agree for longer,
which would share more).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .._validation import check_int
from ..i18n import N_, _

#: Each kind of sharing's name with its size (n, width or prefix length) in
#: ``{size}``, in English (marked N_): a scenario's `label`, the data's name, and
#: through `said` the name in the language of the moment.
LABELS = {"parallel": N_("parallel sampling n={size}"), "beam": N_("beam search width={size}"),
          "prefix": N_("shared prefix {size} tokens")}
#: The decoding of a request without sharing (`experiments.Scenario`).
ONE_SAMPLE = N_("one sample")


@dataclass(frozen=True)
class ParallelSampling:
    n: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", check_int("ParallelSampling n", self.n, minimum=1))

    @property
    def label(self) -> str:
        return LABELS["parallel"].format(size=self.n)


@dataclass(frozen=True)
class BeamSearch:
    width: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "width", check_int("BeamSearch width", self.width, minimum=1))

    @property
    def label(self) -> str:
        return LABELS["beam"].format(size=self.width)


@dataclass(frozen=True)
class SharedPrefix:
    length: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "length", check_int("SharedPrefix length", self.length, minimum=1))

    @property
    def label(self) -> str:
        return LABELS["prefix"].format(size=self.length)


Sharing = ParallelSampling | BeamSearch | SharedPrefix


def said(label: str) -> str:
    """A sharing's `label` (or `ONE_SAMPLE`), English, in the language of the
    moment: ``parallel sampling n=2`` is 并行采样 n=2 in Chinese. Any other text
    is a name of the caller's and comes back as it is."""
    if label == ONE_SAMPLE:
        return _(ONE_SAMPLE)
    for template in LABELS.values():
        head, _field, tail = template.partition("{size}")
        size = label.removeprefix(head).removesuffix(tail)
        if label.startswith(head) and label.endswith(tail) and size.isdigit():
            return _(template).format(size=size)
    return label


def num_sequences(sharing: Sharing | None) -> int:
    """How many sequences one request runs."""
    if isinstance(sharing, ParallelSampling):
        return sharing.n
    if isinstance(sharing, BeamSearch):
        return sharing.width
    return 1


def group_past_max_num_seqs(sharing: Sharing | None, max_num_seqs: int) -> str | None:
    """What is wrong when a request's sequences (`sharing`'s n or width) are
    more than an iteration's `max_num_seqs`: they run together as one group,
    so no iteration could hold them; None when they fit (the engine's rule)."""
    width = num_sequences(sharing)
    if width <= check_int("max_num_seqs", max_num_seqs, minimum=1):
        return None
    option = "n" if isinstance(sharing, ParallelSampling) else "width"
    return (f"{sharing.label}: a request's {width} sequences run together as one group "
            f"(sharing the prompt's blocks), so they need {width} sequence slots in the same "
            f"iteration, but max_num_seqs is {max_num_seqs}; lower {option} to {max_num_seqs} "
            f"or less, or give max_num_seqs={width} or more")


def sample_output_lens(first: int, n: int, pool: list[int], room: int,
                       rng: random.Random) -> list[int]:
    """Output lengths of `n` parallel samples: the trace's own for the first,
    and for the others lengths drawn from the trace's outputs (`pool`), since
    each sample stops at its own end-of-sequence; none exceeds `room`."""
    return [first] + [min(rng.choice(pool), room) for _ in range(n - 1)]


def choose_parents(width: int, rng: random.Random) -> list[int]:
    """For each of the next step's `width` beams, which current beam it extends."""
    return [rng.randrange(width) for _ in range(width)]
