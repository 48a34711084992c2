"""The baselines PagedAttention replaced: one contiguous KV region per request.

Before paging, serving systems (the paper's Orca baselines, §3 and §6.1)
reserved each request one contiguous chunk of KV memory when it started,
sized for the longest it *might* grow, because its final length is unknown.
The prompt is known at that moment; the output's length is not. The paper's
three reservation policies (§6.1) bracket what such a system can do:

* ``"max"``    reserve the model's maximum sequence length, prompt included
               (Orca (Max));
* ``"pow2"``   reserve the prompt plus the next power of two of the output:
               the output is over-reserved by at most 2x ("if the true output
               length is 25, it reserves 32 positions for outputs"), capped at
               the maximum sequence length (Orca (Pow2));
* ``"oracle"`` reserve exactly prompt + output: an impossible, all-knowing
               system (Orca (Oracle)).

Regions are placed first-fit in one address space of `capacity` token slots.
Three kinds of waste can then be told apart (paper §3, Fig. 3; measured in
Fig. 2):

* **reservation**: slots reserved for tokens the request *will* produce later;
* **internal fragmentation**: reserved slots it will *never* use;
* **external fragmentation**: free slots stranded in holes between regions,
  too small for the request waiting to start.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable
from dataclasses import dataclass

from .._validation import check_choice, check_int
from .errors import BlockStateError
from .kv_cache_manager import _check_seq

POLICIES = ("max", "pow2", "oracle")


@dataclass
class Reservation:
    """One request's contiguous region ``[start, start + size)``."""

    request: Hashable
    start: int
    size: int  # slots reserved
    need: int  # slots the request will hold when finished (prompt + output)
    used: int  # slots holding a token now

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclass(frozen=True)
class ContiguousStats:
    """Where every slot of the address space is, at one moment."""

    capacity: int
    token_states: int  # slots holding a token
    reservation: int  # reserved for tokens still to come
    internal_fragmentation: int  # reserved, never to be used
    free: int  # not reserved by anyone
    largest_hole: int
    num_requests: int

    def external_fragmentation(self, next_request_size: int) -> int:
        """Free slots stranded for the request waiting to start: when it fits
        in no hole, every free slot is unusable to it (even if together they
        would be enough); when it fits, nothing is stranded yet."""
        return self.free if next_request_size > self.largest_hole else 0


class ContiguousAllocator:
    """First-fit contiguous reservations under one of the three policies.

    >>> mem = ContiguousAllocator(capacity=100, policy="pow2", max_seq_len=64)
    >>> r = mem.allocate("A", prompt_len=10, output_len=25)   # needs 35, reserves 10 + 32
    >>> (r.start, r.size, r.need)
    (0, 42, 35)
    """

    def __init__(self, capacity: int, policy: str = "max", max_seq_len: int = 2048) -> None:
        self.capacity = check_int("capacity", capacity, minimum=1)
        self.policy = check_choice("policy", policy, POLICIES)
        self.max_seq_len = check_int("max_seq_len", max_seq_len, minimum=1)
        self._by_start: list[int] = []  # starts of live regions, sorted
        self._regions: dict[int, Reservation] = {}  # start -> region
        self._by_request: dict[Hashable, Reservation] = {}
        # Running totals, the hole list with its largest hole (rebuilt only
        # after allocate/free) and the last `stats()` snapshot (rebuilt only
        # after a change), so `stats()` costs nothing between changes: the
        # simulator asks every iteration.
        self._used = self._need = self._reserved = 0
        self._holes: list[tuple[int, int]] | None = None
        self._largest_hole = 0
        self._stats: ContiguousStats | None = None

    def __contains__(self, request: Hashable) -> bool:
        _check_seq(request, "request", "reservation")
        return request in self._by_request

    def __len__(self) -> int:
        return len(self._by_request)

    def reservation_size(self, prompt_len: int, output_len: int) -> int:
        """Slots this policy reserves for a request whose prompt holds
        `prompt_len` tokens and which will generate `output_len` more (§6.1).

        The prompt is known when the region is reserved; only the output's
        length must be guessed. For a 10-token prompt and a 25-token output,
        with ``max_seq_len=2048``: ``max`` reserves 2048, ``pow2`` reserves
        10 + 32 = 42 (32 positions for the 25 output tokens, as in the paper's
        example), ``oracle`` reserves 10 + 25 = 35. No policy reserves more
        than ``max_seq_len``.
        """
        self._check_need(prompt_len, output_len)
        if self.policy == "max":
            return self.max_seq_len
        if self.policy == "pow2":
            output_slots = 1 << (output_len - 1).bit_length() if output_len else 0
            return min(prompt_len + output_slots, self.max_seq_len)
        return prompt_len + output_len

    def _check_need(self, prompt_len: int, output_len: int,
                    request: Hashable | None = None) -> None:
        check_int("prompt_len", prompt_len, minimum=1)
        check_int("output_len", output_len, minimum=0)
        need = prompt_len + output_len
        if need > self.max_seq_len:
            who = "a request" if request is None else f"request {request!r}"
            raise ValueError(f"{who} needs {need} tokens (prompt {prompt_len} + output "
                             f"{output_len}) but max_seq_len is {self.max_seq_len}")

    def holes(self) -> list[tuple[int, int]]:
        """Free extents as ``(start, size)``, in address order."""
        return list(self._hole_list())

    def _hole_list(self) -> list[tuple[int, int]]:
        """The cached hole list, rebuilt (with the largest hole) after a change."""
        if self._holes is None:
            holes, cursor = [], 0
            for start in self._by_start:
                if start > cursor:
                    holes.append((cursor, start - cursor))
                cursor = self._regions[start].end
            if cursor < self.capacity:
                holes.append((cursor, self.capacity - cursor))
            self._holes = holes
            self._largest_hole = max((size for _, size in holes), default=0)
        return self._holes

    def allocate(self, request: Hashable, prompt_len: int, output_len: int) -> Reservation | None:
        """Reserve a region for a request starting now, or ``None`` if no hole fits.

        The prompt's tokens are stored at once; the output's arrive by `append`."""
        _check_seq(request, "request", "reservation")
        if request in self._by_request:
            raise BlockStateError(f"request {request!r} already holds a reservation")
        self._check_need(prompt_len, output_len, request)
        need = prompt_len + output_len
        size = self.reservation_size(prompt_len, output_len)
        if size > self.capacity:
            raise ValueError(f"a reservation of {size} slots can never fit in a capacity of "
                             f"{self.capacity}")
        holes = self._hole_list()
        if size > self._largest_hole:
            return None
        start = next(s for s, length in holes if length >= size)
        region = Reservation(request, start, size, need, used=prompt_len)
        bisect.insort(self._by_start, start)
        self._regions[start] = region
        self._by_request[request] = region
        self._used += prompt_len
        self._need += need
        self._reserved += size
        self._holes = self._stats = None
        return region

    def append(self, request: Hashable, num_tokens: int = 1) -> None:
        """The request stored `num_tokens` more tokens inside its region."""
        region = self.region(request)
        check_int("num_tokens", num_tokens, minimum=0)
        if region.used + num_tokens > region.need:
            raise BlockStateError(f"cannot append {num_tokens} tokens to request {request!r}: "
                                  f"it would hold {region.used + num_tokens} tokens but declared "
                                  f"it needs {region.need}")
        region.used += num_tokens
        self._used += num_tokens
        self._stats = None

    def free(self, request: Hashable) -> Reservation:
        try:
            region = self._by_request.pop(request, None)
        except TypeError:
            region = None
        if region is None:
            _check_seq(request, "request", "reservation")
            raise KeyError(f"request {request!r} holds no reservation")
        del self._regions[region.start]
        self._by_start.remove(region.start)
        self._used -= region.used
        self._need -= region.need
        self._reserved -= region.size
        self._holes = self._stats = None
        return region

    def region(self, request: Hashable) -> Reservation:
        try:
            return self._by_request[request]
        except (KeyError, TypeError):
            _check_seq(request, "request", "reservation")
            raise KeyError(f"request {request!r} holds no reservation") from None

    def regions(self) -> list[Reservation]:
        """Live regions in address order."""
        return [self._regions[s] for s in self._by_start]

    def stats(self) -> ContiguousStats:
        """Where the slots are: from running totals and the cached largest hole,
        built again only after a change."""
        if self._stats is None:
            self._hole_list()
            self._stats = ContiguousStats(
                capacity=self.capacity,
                token_states=self._used,
                reservation=self._need - self._used,
                internal_fragmentation=self._reserved - self._need,
                free=self.capacity - self._reserved,
                largest_hole=self._largest_hole,
                num_requests=len(self._by_request),
            )
        return self._stats
