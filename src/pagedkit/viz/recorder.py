"""The recorder: one frame per scheduler step, read from the real memory.

When a step ends (the scheduler's ``STEP`` event, or `Recorder.cut` by hand)
the recorder *reads* what it draws, never re-derives it (issue #11):

* the GPU pool from the `KVCacheManager`'s allocator (``ref_count``,
  ``num_tokens``, ``block_hash``; ``stats()`` for the totals);
* every sequence's page table from ``kv.tables()`` and, for swapped-out
  ones, ``kv.swapped_tables()`` into ``kv.swap_pool`` — a block's owners are
  the sequences whose tables hold it;
* the requests' queues (how many run, wait and are swapped out; which
  request each sequence holding memory serves) from the scheduler, when
  there is one: the engine's
  `Scheduler` or a `pagedkit.sim.Simulator`. A bare `KVCacheManager` has no
  queues: its sequences with GPU blocks count as running, those swapped out
  as swapped (or the ``Step`` event's own counts, when it carries them), and
  the `Admit` events name their requests.

Events stay what they are: the log of what happened during the step —
copy-on-write copies, preemptions, the GPU block each CPU block was swapped
out from, how many events of each kind, the most blocks in use at any of them
(the step's peak, which its end can be short of: finished sequences free
theirs before the step ends) — all typed fields, no text to parse.
They also say *where* to look: a step re-reads only the blocks its events
name (every change to a block is announced on the bus) and keeps the
records of the others, so a 4,096-block pool costs what the step touched,
not the whole pool. `tests/viz/test_viz_recorder.py` compares every frame
with a full, independent reading of the manager.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from ..memory import Event, EventBus, EventKind, KVCacheManager
from ..memory.block_table import NULL_BLOCK
from ..scheduler.events import Admit, Finish, Preempt, SchedulerEventKind, Step
from .frames import (
    CACHED,
    EMPTY_BLOCK,
    RUNNING,
    SWAPPED,
    USED,
    BlockState,
    Frame,
    MemoryCounts,
    RequestCounts,
    SwappedBlock,
)

FrameListener = Callable[[Frame], None]


class Recorder:
    """Record the pool of `kv` (a `KVCacheManager`), and the queues of
    `scheduler` if given (anything with ``running``, ``waiting`` and
    ``swapped`` lists of request groups, each with a ``request_id`` and
    ``seqs`` whose items have a ``seq_id``: the engine's `Scheduler`, a
    `pagedkit.sim.Simulator`). `request_name` maps a group's request id to
    the name shown (by default the id itself). With `cut_on_step` false,
    frames are cut only by `cut`.

    >>> from pagedkit.memory import KVCacheManager
    >>> kv = KVCacheManager(num_blocks=8, block_size=4)
    >>> rec = Recorder(kv)
    >>> _ = kv.allocate_slots("A", [1, 2, 3, 4, 5]); _ = rec.cut()
    >>> rec[-1].tables["A"], rec[-1].memory.used
    ((0, 1), 2)
    """

    def __init__(self, kv: KVCacheManager, scheduler: Any = None, *,
                 request_name: Callable[[Hashable], Hashable] | None = None,
                 cut_on_step: bool = True) -> None:
        if isinstance(kv, EventBus):
            raise TypeError("a Recorder reads the pool it draws: give it the KVCacheManager "
                            "(Recorder(kv)), or use Recorder.attach(llm / engine / simulator)")
        if not isinstance(kv, KVCacheManager):
            raise TypeError(f"Recorder needs a pagedkit.memory.KVCacheManager, got "
                            f"{type(kv).__name__}; Recorder.attach(source) finds one in an LLM, "
                            "an LLMEngine or a paged Simulator")
        if scheduler is not None and not all(hasattr(scheduler, q) for q in _QUEUES):
            raise TypeError(f"scheduler {type(scheduler).__name__} has no running / waiting / "
                            "swapped queues to read")
        self.kv, self.scheduler = kv, scheduler
        self.request_name = request_name
        self.cut_on_step = cut_on_step
        pool = self._pool = kv.allocator
        self.num_blocks, self.block_size = pool.num_blocks, pool.block_size
        self.frames: list[Frame] = []
        #: Requests (or sequences without one) in the order first seen holding
        #: blocks at a cut: what keeps a request's color stable.
        self.first_seen: dict[Hashable, int] = {}
        #: sequence -> how many sequences of its request were seen before it (its shade)
        self.shades: dict[Hashable, int] = {}
        self._seen_per_request: dict[Hashable, int] = {}
        #: One more than the highest CPU swap block ever used (sizes the swap area).
        self.cpu_blocks_seen = 0
        # The last reading of every block; the first cut reads them all.
        self._blocks: list[BlockState] = [EMPTY_BLOCK] * self.num_blocks
        self._shared = 0
        self._dirty: set[int] = set(range(self.num_blocks))
        self._filled: set[int] = set()  # written into, nothing else
        # The step's log, from the events.
        self._copies: list[tuple[int, int]] = []
        self._preempted: dict[Hashable, None] = {}  # a set in the order preempted
        self._kinds: Counter[EventKind | SchedulerEventKind] = Counter()
        self._peak = 0  # the most blocks in use at any event since the last cut
        self._step_counts: RequestCounts | None = None
        self._from_gpu: dict[int, int] = {}  # CPU block -> the GPU block it was swapped out from
        self._last_swap: tuple[dict, dict[int, SwappedBlock]] = ({}, {})
        self._admitted: dict[Hashable, Hashable] = {}  # seq -> request, from Admit events
        self._listeners: list[FrameListener] = []
        self._handlers = {
            EventKind.APPEND: self._appended, EventKind.COW: self._cow,
            EventKind.SWAP_OUT: self._swap_out,
            EventKind.SWAP_IN: self._touched, SchedulerEventKind.ADMIT: self._admit,
            SchedulerEventKind.PREEMPT: self._preempt, SchedulerEventKind.FINISH: self._finish,
            SchedulerEventKind.STEP: self._step,
        }
        self._unsubscribe: Callable[[], None] | None = kv.events.subscribe(self.on_event)
        self.cut()

    @classmethod
    def attach(cls, source: Any) -> Recorder:
        """Record whatever `source` is: an `LLM`, an `LLMEngine`, a paged
        `pagedkit.sim.Simulator` or a `KVCacheManager` (anything holding a
        KVCacheManager at ``.kv``, ``.memory_manager`` or ``.memory.kv``; its
        queues are read from ``.scheduler``, or from the source itself)."""
        source = getattr(source, "llm_engine", source)
        kv = source if isinstance(source, KVCacheManager) else _find_kv(source)
        if kv is None:
            raise TypeError(
                f"cannot record {type(source).__name__}: expected an object with a "
                "KVCacheManager (`.kv`, `.memory_manager` or `.memory.kv`) and its `events` "
                "bus, such as LLM, LLMEngine, KVCacheManager or a paged pagedkit.sim "
                "Simulator (Simulator(trace, 'paged'))")
        scheduler = next((s for s in (getattr(source, "scheduler", None), source)
                          if s is not None and s is not kv
                          and all(hasattr(s, q) for q in _QUEUES)), None)
        return cls(kv, scheduler)

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
        """Read the memory (and queues) now as a new frame. ``STEP`` events do
        this; call it yourself when driving a `KVCacheManager` by hand."""
        kv = self.kv
        tables = {seq: tuple(t.blocks) for seq, t in kv.tables().items() if t.blocks}
        swapped_tables = {seq: tuple(t.blocks) for seq, t in kv.swapped_tables().items()
                          if t.blocks}
        self._read_blocks(tables)
        swapped = self._read_swap_pool(swapped_tables)
        request_of, seq_status, requests = self._read_queues(tables, swapped_tables)
        for seq in (*tables, *swapped_tables):
            key = request_of.get(seq, seq)
            if key not in self.first_seen:
                self.first_seen[key] = len(self.first_seen)
            if seq not in self.shades:
                self.shades[seq] = self._seen_per_request.get(key, 0)
                self._seen_per_request[key] = self.shades[seq] + 1
        stats = kv.stats()
        peak, self._peak = max(self._peak, stats.used_blocks), stats.used_blocks
        frame = Frame(
            index=len(self.frames),
            step=step,
            block_size=self.block_size,
            blocks=tuple(self._blocks),
            memory=MemoryCounts(used=stats.used_blocks, cached=stats.cached_blocks,
                                free=stats.free_blocks, shared=self._shared,
                                tokens=stats.tokens_stored, swapped=stats.swapped_blocks),
            requests=requests,
            tables=tables,
            swapped_tables=swapped_tables,
            swapped=swapped,
            request_of=request_of,
            seq_status=seq_status,
            copies=tuple(self._copies),
            preemptions=len(self._preempted),
            preempted=tuple(self._preempted),
            event_counts={kind.value: n for kind, n in self._kinds.items()},
            peak_used=peak,
        )
        self.frames.append(frame)
        self._copies, self._preempted, self._kinds = [], {}, Counter()
        self._step_counts = None
        for listener in list(self._listeners):
            listener(frame)
        return frame

    def _read_blocks(self, tables: dict[Hashable, tuple[int, ...]]) -> None:
        """Read the blocks the events named since the last cut (all, the first time).

        A block that was only written into (``APPEND``: one owner, the writer) needs
        only its fill read again; any change of owners or ref count is an event of its
        own (allocate, fork, free, copy-on-write, cache hit) and reads it whole."""
        pool, dirty = self.kv.allocator, self._dirty
        for b in self._filled - dirty:
            old = self._blocks[b]
            self._blocks[b] = BlockState(old.status, old.owners, old.ref_count,
                                         pool.num_tokens(b))
        self._filled = set()
        if not dirty:
            return
        owners: dict[int, list[Hashable]] = {b: [] for b in dirty}
        for seq, blocks in tables.items():
            for b in dirty.intersection(blocks):  # a set operation: the loop is over hits
                owners[b].append(seq)
        for b in dirty:
            ref = pool.ref_count(b)
            if ref:
                state = BlockState(USED, tuple(owners[b]), ref, pool.num_tokens(b))
            elif pool.block_hash(b) is not None:
                state = BlockState(CACHED, (), 0, pool.num_tokens(b))
            else:
                state = EMPTY_BLOCK
            old = self._blocks[b]
            if state != old:
                self._shared += state.is_shared - old.is_shared
                self._blocks[b] = state
        self._dirty = set()

    def _read_swap_pool(self, swapped_tables: dict[Hashable, tuple[int, ...]]
                        ) -> dict[int, SwappedBlock]:
        """The CPU blocks the swapped-out tables point at. The CPU pool emits no
        events, but its blocks change only with the tables pointing at them: while
        those are as at the last cut, so is the swap area."""
        if not swapped_tables:
            return {}
        last_tables, last_swapped = self._last_swap
        if swapped_tables == last_tables:
            return last_swapped
        cpu_pool = self.kv.swap_pool
        owners: dict[int, list[Hashable]] = {}
        for seq, blocks in swapped_tables.items():
            for c in blocks:
                if c != NULL_BLOCK:
                    owners.setdefault(c, []).append(seq)
        self.cpu_blocks_seen = max(self.cpu_blocks_seen, max(owners, default=-1) + 1)
        swapped = {c: SwappedBlock(tuple(seqs), cpu_pool.num_tokens(c), self._from_gpu.get(c))
                   for c, seqs in sorted(owners.items())}
        self._last_swap = (swapped_tables, swapped)
        return swapped

    def _read_queues(self, tables, swapped_tables):
        """Which request each sequence serves, each sequence's queue, and the queue sizes."""
        request_of: dict[Hashable, Hashable] = {}
        status: dict[Hashable, str] = {}
        sched = self.scheduler
        if sched is not None:
            # Waiting requests hold no memory (a recompute preemption freed it): they are
            # counted, not listed, so a queue of thousands costs nothing per step.
            name = self.request_name
            for queue_status, queue in ((RUNNING, sched.running), (SWAPPED, sched.swapped)):
                for group in queue:
                    request = group.request_id if name is None else name(group.request_id)
                    for seq in _unfinished(group):
                        request_of[seq.seq_id] = request
                        status[seq.seq_id] = queue_status
            return request_of, status, RequestCounts(
                running=len(sched.running), waiting=len(sched.waiting),
                swapped=len(sched.swapped))
        # A bare manager: no queues; memory says who runs and who is swapped out.
        for seq in tables:
            status[seq] = RUNNING
        for seq in swapped_tables:
            status[seq] = SWAPPED
        for seq in status:
            if seq in self._admitted:
                request_of[seq] = self._admitted[seq]
        if self._step_counts is not None:
            return request_of, status, self._step_counts
        running = {request_of.get(s, s) for s in tables}
        away = {request_of.get(s, s) for s in swapped_tables}
        return request_of, status, RequestCounts(running=len(running), swapped=len(away))

    # --------------------------------------------------------------- the log
    def on_event(self, event: Event | Admit | Preempt | Finish | Step) -> None:
        """Note one event (the bus calls this): which block it touched, and
        what the step's log keeps of it."""
        kind = event.kind
        self._kinds[kind] += 1
        # read at every event (a free announces itself before it counts): the most in
        # use at once, which the step's end, after the finished freed theirs, can miss
        self._peak = max(self._peak, self._pool.num_used_blocks)
        handler = self._handlers.get(kind)
        if handler is None:  # allocate, free, fork, cache hit, evict
            self._dirty.add(event.block)
        else:
            handler(event)

    def _appended(self, e: Event) -> None:
        self._filled.add(e.block)

    def _touched(self, e: Event) -> None:
        self._dirty.add(e.block)

    def _cow(self, e: Event) -> None:
        self._dirty.add(e.block)
        self._dirty.add(e.src)
        self._copies.append((e.src, e.block))

    def _swap_out(self, e: Event) -> None:
        self._dirty.add(e.src)  # `block` is the CPU block
        self._from_gpu[e.block] = e.src

    def _admit(self, e: Admit) -> None:
        self._admitted[e.seq] = e.request_id

    def _preempt(self, e: Preempt) -> None:
        # one decision per request: the sequences of a group are preempted together
        request = self._admitted.get(e.seq, e.seq) if e.request_id is None else e.request_id
        self._preempted[request] = None

    def _finish(self, e: Finish) -> None:
        self._admitted.pop(e.seq, None)

    def _step(self, e: Step) -> None:
        if e.running is not None and e.waiting is not None and e.swapped is not None:
            self._step_counts = RequestCounts(running=e.running, waiting=e.waiting,
                                              swapped=e.swapped)
        if self.cut_on_step:
            self.cut(e.step)


_QUEUES = ("running", "waiting", "swapped")


def _find_kv(source: Any) -> KVCacheManager | None:
    for path in (("kv",), ("memory_manager",), ("memory", "kv")):
        obj = source
        for name in path:
            obj = getattr(obj, name, None)
        if isinstance(obj, KVCacheManager):
            return obj
    return None


def _unfinished(group: Any) -> Iterable[Any]:
    """A group's sequences still in flight (the engine keeps finished ones in
    ``seqs``; the simulator moves them out)."""
    unfinished = getattr(group, "unfinished_seqs", None)
    return unfinished() if unfinished is not None else group.seqs
