"""How to pick each next token, per request (shaped like vLLM's SamplingParams)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ._validation import check_bool, check_int

#: Seeds a torch.Generator takes: 0 <= seed < 2**64.
MAX_SEED = 2**64 - 1


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings for one request; checked when built, so a bad value
    never reaches the engine.

    * ``temperature == 0`` is greedy decoding (argmax).
    * ``n > 1`` returns n samples; they share the prompt's KV blocks (paper §4.4,
      parallel sampling) and fork only when they diverge.
    * ``use_beam_search`` keeps ``beam_width`` (default ``n``) beams that fork
      and free blocks by reference count with copy-on-write (paper §4.4), and
      returns the ``n`` best.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: no limit
    max_tokens: int = 16
    min_tokens: int = 0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    ignore_eos: bool = False
    use_beam_search: bool = False
    beam_width: int | None = None
    length_penalty: float = 1.0

    def __post_init__(self) -> None:
        check_int("n", self.n, minimum=1)
        check_int("max_tokens", self.max_tokens, minimum=1)
        check_int("min_tokens", self.min_tokens, minimum=0, maximum=self.max_tokens)
        if not _is_number(self.temperature) or not self.temperature >= 0:
            raise ValueError(f"temperature must be a number >= 0, got {self.temperature!r}")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not _is_number(self.length_penalty) or math.isnan(self.length_penalty):
            raise ValueError(f"length_penalty must be a number, got {self.length_penalty!r}")
        check_int("top_k", self.top_k)
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k must be -1 (no limit) or >= 1, got {self.top_k}")
        if self.seed is not None:
            check_int("seed", self.seed, minimum=0, maximum=MAX_SEED)
        check_bool("ignore_eos", self.ignore_eos)
        check_bool("use_beam_search", self.use_beam_search)
        if isinstance(self.stop_token_ids, (str, bytes)) or not hasattr(
                self.stop_token_ids, "__iter__"):
            raise TypeError(f"stop_token_ids must be a list of token ids, got "
                            f"{self.stop_token_ids!r}")
        object.__setattr__(self, "stop_token_ids", tuple(
            check_int(f"stop_token_ids[{i}]", t, minimum=0)
            for i, t in enumerate(self.stop_token_ids)))
        if self.use_beam_search:
            width = self.n if self.beam_width is None else check_int(
                "beam_width", self.beam_width, minimum=1)
            if width < self.n:
                raise ValueError(f"beam_width ({width}) must be >= n ({self.n}): "
                                 "beam search returns the n best of its beams")
            if self.temperature != 0:
                raise ValueError("beam search is deterministic: use temperature=0, "
                                 f"got {self.temperature}")
            object.__setattr__(self, "beam_width", width)
        elif self.beam_width is not None:
            raise ValueError("beam_width only applies with use_beam_search=True")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def num_sequences(self) -> int:
        """How many sequences the request runs at once after its prompt."""
        return self.beam_width if self.use_beam_search else self.n


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
