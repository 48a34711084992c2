"""The recorder: turns the event stream into frames, one per scheduler step.

It listens to one `EventBus` — the engine's, the simulator's, or a bare
`KVCacheManager`'s — and folds every event into its own picture of the pool:
who owns each block, how full it is, which blocks are shared, cached or
swapped out, and each sequence's page table. At every ``STEP`` event it cuts
a `Frame`. It only listens: nothing it does reaches back into the engine.

Two things are not on the bus and are inferred instead:

* the CPU-side owners of a swapped-out block: a sequence whose GPU blocks were
  all copied out in the swap that is under way, and which then frees them,
  moved to CPU memory (`KVCacheManager.swap_out` moves whole sequences). The
  CPU pool itself emits nothing, so a swapped-out sequence leaves it at its
  ``FINISH`` event (the scheduler's abort), or when it is swapped back in;
* the waiting queue: requests that arrived but were never admitted make no
  event, so ``waiting`` counts requests preempted for recompute — unless the
  `Step` event carries the scheduler's own counts (``running``, ``waiting``,
  ``swapped``), which are then taken as they are.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any

from .._validation import check_int
from ..memory import BlockAllocator, Event, EventBus, EventKind
from ..scheduler.events import Admit, Finish, Preempt, SchedulerEventKind, Step
from .frames import (
    CACHED,
    EMPTY_BLOCK,
    RUNNING,
    SWAPPED,
    USED,
    WAITING,
    BlockState,
    Frame,
    MemoryCounts,
    RequestCounts,
    SwappedBlock,
)

FrameListener = Callable[[Frame], None]

# The scheduler's busiest state of a request's sequences names the request's queue.
_QUEUE_RANK = {RUNNING: 0, SWAPPED: 1, WAITING: 2}


class Recorder:
    """Record a pool of `num_blocks` blocks of `block_size` slots from `events`.

    >>> from pagedkit.memory import KVCacheManager
    >>> kv = KVCacheManager(num_blocks=8, block_size=4)
    >>> rec = Recorder(kv.events, num_blocks=8, block_size=4)
    >>> _ = kv.allocate_slots("A", [1, 2, 3, 4, 5]); rec.cut()
    >>> rec[-1].tables["A"], rec[-1].memory.used
    ((0, 1), 2)
    """

    def __init__(self, events: EventBus, num_blocks: int, block_size: int) -> None:
        self.num_blocks = check_int("num_blocks", num_blocks, minimum=1)
        self.block_size = check_int("block_size", block_size, minimum=1)
        self.frames: list[Frame] = []
        #: Requests (or sequences without one) in the order first seen holding
        #: blocks at a cut: what keeps a request's color stable.
        self.first_seen: dict[Hashable, int] = {}
        #: One more than the highest CPU swap block ever used (sizes the swap area).
        self.cpu_blocks_seen = 0
        self._blocks: list[BlockState] = [EMPTY_BLOCK] * self.num_blocks
        self._used = self._cached = self._shared = self._tokens = 0
        # Page tables are tuples, replaced on change, so a cut copies only the dict.
        self._tables: dict[Hashable, tuple[int, ...]] = {}
        self._swapped_tables: dict[Hashable, tuple[int, ...]] = {}
        self._swapped: dict[int, SwappedBlock] = {}
        self._request_of: dict[Hashable, Hashable] = {}
        self._status: dict[Hashable, str] = {}
        self._swap_out_run: dict[int, int] = {}  # GPU -> CPU copies of the swap under way
        self._run_freers: set[Hashable] = set()  # sequences that freed during that swap
        self._swap_in_run: set[int] = set()  # GPU blocks filled by swap-ins this step
        self._copies: list[tuple[int, int]] = []
        self._preempted: set[Hashable] = set()  # requests preempted in this step
        self._kinds: Counter[EventKind | SchedulerEventKind] = Counter()
        self._queue_override: RequestCounts | None = None  # from a Step event's counts
        self._listeners: list[FrameListener] = []
        self._handlers = {
            EventKind.ALLOCATE: self._allocate, EventKind.APPEND: self._append,
            EventKind.FREE: self._free, EventKind.FORK: self._fork, EventKind.COW: self._cow,
            EventKind.CACHE_HIT: self._cache_hit, EventKind.EVICT: self._evict,
            EventKind.SWAP_OUT: self._swap_out, EventKind.SWAP_IN: self._swap_in,
            SchedulerEventKind.ADMIT: self._admit, SchedulerEventKind.PREEMPT: self._preempt,
            SchedulerEventKind.FINISH: self._finish, SchedulerEventKind.STEP: self._step,
        }
        self._unsubscribe: Callable[[], None] | None = events.subscribe(self.on_event)
        self.cut()

    @classmethod
    def attach(cls, source: Any) -> Recorder:
        """Record whatever `source` is: an `LLM`, an `LLMEngine`, a simulator or a
        `KVCacheManager` — anything with an ``events`` bus and a block pool.

        Blocks already in use are taken from the pool (reading only); their
        owners are unknown to a recorder that was not listening when they
        were allocated, so attach before the first request when you can.
        """
        source = getattr(source, "llm_engine", source)
        events = getattr(source, "events", None)
        pool = _find_pool(source)
        if not isinstance(events, EventBus) or pool is None:
            raise TypeError(
                f"cannot record {type(source).__name__}: expected an object with an `events` "
                "EventBus and a block pool (`.kv.allocator`, `.memory.kv.allocator` or "
                "`.allocator`), such as LLM, LLMEngine, KVCacheManager or a paged "
                "pagedkit.sim Simulator (Simulator(trace, 'paged'))")
        rec = cls(events, pool.num_blocks, pool.block_size)
        if pool.num_free_blocks != pool.num_blocks or pool.num_cached_blocks:
            rec._seed(pool)
        return rec

    # ---------------------------------------------------------------- reading
    def __len__(self) -> int:
        return len(self.frames)

    def __getitem__(self, index: int) -> Frame:
        return self.frames[index]

    def __iter__(self):
        return iter(self.frames)

    def __repr__(self) -> str:
        return (f"Recorder({self.num_blocks} blocks of {self.block_size} tokens, "
                f"{len(self.frames)} frames)")

    @property
    def listening(self) -> bool:
        """Still attached to its bus (more frames may come)?"""
        return self._unsubscribe is not None

    def on_frame(self, listener: FrameListener) -> Callable[[], None]:
        """Call `listener(frame)` after every new frame; returns an unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def close(self) -> None:
        """Stop listening. The frames recorded so far stay."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- cutting
    def cut(self, step: int | None = None) -> Frame:
        """Snapshot the pool as a new frame. ``STEP`` events do this; call it
        yourself when driving a `KVCacheManager` by hand."""
        present = {*self._tables, *self._swapped_tables, *self._status}
        for seq in (*self._tables, *self._swapped_tables):
            self._seen(self._request_of.get(seq, seq))
        frame = Frame(
            index=len(self.frames),
            step=step,
            block_size=self.block_size,
            blocks=tuple(self._blocks),
            memory=MemoryCounts(used=self._used, cached=self._cached,
                                free=self.num_blocks - self._used - self._cached,
                                shared=self._shared, tokens=self._tokens,
                                swapped=len(self._swapped)),
            requests=self._request_counts(),
            tables=dict(self._tables),
            swapped_tables=dict(self._swapped_tables),
            swapped=dict(self._swapped),
            request_of={s: self._request_of[s] for s in present if s in self._request_of},
            seq_status=dict(self._status),
            copies=tuple(self._copies),
            preemptions=len(self._preempted),
            event_counts={kind.value: n for kind, n in self._kinds.items()},
        )
        self.frames.append(frame)
        self._copies, self._preempted, self._kinds = [], set(), Counter()
        self._swap_in_run.clear()
        self._queue_override = None
        for listener in list(self._listeners):
            listener(frame)
        return frame

    def _request_counts(self) -> RequestCounts:
        if self._queue_override is not None:
            return self._queue_override
        queue: dict[Hashable, str] = {}
        for seq, status in self._status.items():
            request = self._request_of.get(seq, seq)
            if status in _QUEUE_RANK and _QUEUE_RANK[status] < _QUEUE_RANK.get(
                    queue.get(request, ""), 9):
                queue[request] = status
        counts = Counter(queue.values())
        return RequestCounts(running=counts[RUNNING], waiting=counts[WAITING],
                             swapped=counts[SWAPPED])

    # ---------------------------------------------------------------- folding
    def on_event(self, event: Event | Admit | Preempt | Finish | Step) -> None:
        """Fold one event into the picture (the bus calls this)."""
        kind = event.kind
        self._kinds[kind] += 1
        if self._swap_out_run and kind is not EventKind.FREE and kind is not EventKind.SWAP_OUT:
            self._swap_out_run.clear()
            self._run_freers.clear()
        self._handlers[kind](event)

    def _set(self, block: int, state: BlockState) -> None:
        """Replace a block's record, keeping the pool totals in step."""
        old = self._blocks[block]
        self._used += (state.status == USED) - (old.status == USED)
        self._cached += (state.status == CACHED) - (old.status == CACHED)
        self._shared += state.is_shared - old.is_shared
        self._tokens += ((state.num_tokens if state.status == USED else 0)
                         - (old.num_tokens if old.status == USED else 0))
        self._blocks[block] = state

    def _seen(self, key: Hashable) -> None:
        if key not in self.first_seen:
            self.first_seen[key] = len(self.first_seen)

    def _take(self, seq: Hashable | None, block: int) -> None:
        """`seq`'s page table grows by `block`."""
        if seq is not None:
            self._tables[seq] = (*self._tables.get(seq, ()), block)

    def _allocate(self, e: Event) -> None:
        owners = () if e.seq is None else (e.seq,)
        self._set(e.block, BlockState(USED, owners, 1, 0))
        self._take(e.seq, e.block)

    def _append(self, e: Event) -> None:
        b = self._blocks[e.block]
        self._set(e.block, BlockState(b.status, b.owners, b.ref_count, e.num_tokens))

    def _fork(self, e: Event) -> None:
        b = self._blocks[e.block]
        if e.block in self._swap_in_run and e.seq in self._swapped_tables:
            self._back_from_cpu(e.seq)  # a group member sharing a block that came back
        elif b.owners and e.seq is not None and e.seq not in self._request_of:
            parent = b.owners[0]  # a new sample of the same request: same color, same queue
            if parent in self._request_of:
                self._request_of[e.seq] = self._request_of[parent]
            if parent in self._status:
                self._status.setdefault(e.seq, self._status[parent])
        self._set(e.block, BlockState(USED, _plus(b.owners, e.seq), e.ref_count, b.num_tokens))
        self._take(e.seq, e.block)

    def _cache_hit(self, e: Event) -> None:
        b = self._blocks[e.block]
        self._set(e.block, BlockState(USED, _plus(b.owners, e.seq), e.ref_count, e.num_tokens))
        self._take(e.seq, e.block)

    def _free(self, e: Event) -> None:
        b = self._blocks[e.block]
        table = self._tables.get(e.seq)
        if self._swap_out_run and table is not None and e.seq not in self._run_freers:
            # A sequence's first free in a swap decides: all its blocks copied out
            # means it moved (its frees run last-first, so later ones see less).
            self._run_freers.add(e.seq)
            if all(x in self._swap_out_run for x in table):
                self._to_cpu(e.seq, table)
        if e.ref_count:
            self._set(e.block, BlockState(USED, _minus(b.owners, e.seq), e.ref_count,
                                          b.num_tokens))
        elif e.cached:
            self._set(e.block, BlockState(CACHED, (), 0, b.num_tokens))
        else:
            self._set(e.block, EMPTY_BLOCK)
        if table is not None:
            table = _without_last(table, e.block)
            if table:
                self._tables[e.seq] = table
            else:
                del self._tables[e.seq]

    def _cow(self, e: Event) -> None:
        src = self._blocks[e.src]
        self._set(e.src, BlockState(src.status, _minus(src.owners, e.seq), e.ref_count,
                                    src.num_tokens))
        new = self._blocks[e.block]
        self._set(e.block, BlockState(USED, new.owners, new.ref_count, e.num_tokens))
        table = self._tables.get(e.seq)
        if table is not None and table[-1] == e.block and e.src in table:
            table = table[:-1]  # the allocation just before this event appended it
            at = len(table) - 1 - table[::-1].index(e.src)
            self._tables[e.seq] = (*table[:at], e.block, *table[at + 1:])
        self._copies.append((e.src, e.block))

    def _evict(self, e: Event) -> None:
        if self._blocks[e.block].status == CACHED:
            self._set(e.block, EMPTY_BLOCK)

    def _swap_out(self, e: Event) -> None:
        gpu, cpu = e.src, e.block
        self._swap_out_run[gpu] = cpu
        self.cpu_blocks_seen = max(self.cpu_blocks_seen, cpu + 1)
        self._swapped[cpu] = SwappedBlock((), self._blocks[gpu].num_tokens, gpu)

    def _to_cpu(self, seq: Hashable, table: tuple[int, ...]) -> None:
        cpu_blocks = tuple(self._swap_out_run[b] for b in table)
        self._swapped_tables[seq] = cpu_blocks
        for cpu in dict.fromkeys(cpu_blocks):
            s = self._swapped[cpu]
            self._swapped[cpu] = SwappedBlock(_plus(s.owners, seq), s.num_tokens, s.from_block)
        self._status[seq] = SWAPPED

    def _swap_in(self, e: Event) -> None:
        self._swap_in_run.add(e.block)
        if e.seq in self._swapped_tables:
            self._back_from_cpu(e.seq)

    def _back_from_cpu(self, seq: Hashable) -> None:
        for cpu in dict.fromkeys(self._swapped_tables.pop(seq)):
            s = self._swapped[cpu]
            owners = _minus(s.owners, seq)
            if owners:
                self._swapped[cpu] = SwappedBlock(owners, s.num_tokens, s.from_block)
            else:
                del self._swapped[cpu]
        self._status[seq] = RUNNING

    def _admit(self, e: Admit) -> None:
        if e.request_id is not None:
            self._request_of[e.seq] = e.request_id
        self._status[e.seq] = RUNNING

    def _preempt(self, e: Preempt) -> None:
        self._status[e.seq] = SWAPPED if e.mode == "swap" else WAITING
        # one decision per request: the sequences of a group are preempted together
        self._preempted.add(self._request_of.get(e.seq, e.seq))

    def _finish(self, e: Finish) -> None:
        self._status.pop(e.seq, None)
        if e.seq in self._swapped_tables:  # aborted while swapped out: its CPU blocks go
            self._back_from_cpu(e.seq)
            self._status.pop(e.seq, None)

    def _step(self, e: Step) -> None:
        known = e.running is not None and e.waiting is not None and e.swapped is not None
        self._queue_override = RequestCounts(running=e.running, waiting=e.waiting,
                                             swapped=e.swapped) if known else None
        self.cut(e.step)

    def _seed(self, pool: BlockAllocator) -> None:
        """Take over blocks that were in use before we listened (owners unknown)."""
        for block in range(pool.num_blocks):
            ref = pool.ref_count(block)
            if ref:
                self._set(block, BlockState(USED, (), ref, pool.num_tokens(block)))
            elif pool.block_hash(block) is not None:
                self._set(block, BlockState(CACHED, (), 0, pool.num_tokens(block)))
        self.frames.clear()
        self.cut()


def _find_pool(source: Any) -> BlockAllocator | None:
    for path in (("kv", "allocator"), ("memory", "kv", "allocator"), ("allocator",)):
        obj = source
        for name in path:
            obj = getattr(obj, name, None)
        if isinstance(obj, BlockAllocator):
            return obj
    return None


def _plus(owners: tuple, seq: Hashable | None) -> tuple:
    return owners if seq is None else (*owners, seq)


def _minus(owners: tuple, seq: Hashable | None) -> tuple:
    if seq not in owners:
        return owners
    i = owners.index(seq)
    return owners[:i] + owners[i + 1:]


def _without_last(table: tuple[int, ...], block: int) -> tuple[int, ...]:
    """`table` less the last occurrence of `block` (frees run last-first: usually the end)."""
    if table[-1] == block:
        return table[:-1]
    at = len(table) - 1 - table[::-1].index(block)
    return table[:at] + table[at + 1:]
