"""A live vLLM's prefix cache, drawn from its KV-cache events.

vLLM tells the outside world about its KV cache through three events
(`wire`): `BlockStored` (these full blocks now hold these tokens, chained
to this parent), `BlockRemoved` (these names are gone: the blocks were
evicted for reuse) and `AllBlocksCleared`. That is all a KV-aware router,
or this view, can see from outside the engine. The events do **not** say
which physical block holds a content, which request holds which block,
which blocks are in use right now, how full a request's last block is, or
when a request hit the cache: vLLM reports hits per request in its outputs
(``RequestOutput.num_cached_tokens``), not as events. So this view is not
pagedkit's `BlockMap` (one cell per physical block): it is a map of the
*cache's contents*, one cell per block name, laid out as the prefix tree the
parent links describe.

* `CacheRecording` applies event batches one by one (`feed`, or `follow` a
  `reader.ZmqEventStream`; `publish.WirePublisher.subscribe(recording.feed)`
  for pagedkit) and keeps a `CacheFrame` per batch: plain data, tested
  without a browser.
* `PrefixCacheMap(recording)` draws it with pagedkit's player: column *i* is
  the *i*-th block of a prompt (tokens ``i*block_size`` to
  ``(i+1)*block_size - 1``), a row is one chain, a child starts below its
  parent when the parent already has a child on its row (a branch: two
  prompts that share the blocks to its left). Cells stored by the batch shown
  wear an amber frame; cells removed by it are dark crosses; a badge ``×2``
  marks a content two physical blocks hold. A cell keeps its place for the
  whole recording (a name always stands for the same tokens).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..i18n import N_, _, counted, ngettext
from ..viz.controls import Player
from ..viz.palette import COW_COLOR, OWNER_COLORS
from ..viz.view import View, title_layout, title_margin, wrap_title
from .reader import CachedBlocks
from .wire import AllBlocksCleared, BlockRemoved, BlockStored, EventBatch, decode_batch

REMOVED_COLOR = "#212121"  # not a row color: rows use the request palette, red included
EDGE_COLOR = "#9E9E9E"

#: a map's title when none is given, and the two lab 10 gives its maps: messages, shown in
#: the language of the moment (a title given in other words is shown as it is)
DEFAULT_TITLE = N_("the prefix cache, from KV-cache events")
PAGEDKIT_TITLE = N_("pagedkit's prefix cache, from its events")
VLLM_TITLE = N_("vLLM's prefix cache, live from its KV events")


@dataclass(frozen=True, slots=True)
class Place:
    """Where a name is drawn: its block's index in its chain, and a row."""

    depth: int
    row: int


@dataclass(frozen=True, slots=True)
class CacheCell:
    """One cached content (a block name) at the end of a batch."""

    hash: Any
    place: Place
    parent: Place | None  # where its parent is drawn (None: a first block, or unknown)
    num_tokens: int
    copies: int
    new: bool  # stored by this batch
    prefix_known: bool  # False when the stream began after its parent was stored
    first_tokens: tuple[int, ...]


@dataclass(frozen=True)
class CacheFrame:
    """The cache after one event batch (index 0: before any)."""

    index: int
    seq: int | None  # the publisher's sequence number, where known
    cells: tuple[CacheCell, ...]
    removed: tuple[Place, ...]  # names this batch removed (drawn as crosses)
    stored: int  # blocks this batch stored (each copy counted)
    removed_count: int  # blocks this batch removed (each copy counted)
    cleared: bool  # an AllBlocksCleared in this batch

    @property
    def num_cached(self) -> int:
        """Distinct contents (names) cached."""
        return len(self.cells)

    @property
    def num_copies(self) -> int:
        """Physical blocks holding them."""
        return sum(c.copies for c in self.cells)


FrameListener = Callable[[CacheFrame], None]


class CacheRecording:
    """Every state the cache went through, one `CacheFrame` per event batch.

    Sized and indexable like a `pagedkit.viz.Recorder`, so pagedkit's `Player`
    (and with it every control of the widgets) steps through it; a view
    follows new frames live while it shows the newest.
    """

    #: a recording always accepts more batches: a player follows it
    listening = True

    def __init__(self) -> None:
        self.cache = CachedBlocks()
        self.places: dict[Any, Place] = {}
        self.block_size: int | None = None
        self._rows = 0
        self._row_taken: set[Place] = set()  # places whose row a child already continues
        self._listeners: list[FrameListener] = []
        self.batches: list[EventBatch] = []  # as fed, in order
        self.frames: list[CacheFrame] = [CacheFrame(0, None, (), (), 0, 0, False)]

    def __len__(self) -> int:
        return len(self.frames)

    def __getitem__(self, index: int) -> CacheFrame:
        return self.frames[index]

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def depth(self) -> int:
        """Columns drawn so far (the longest chain seen)."""
        return 1 + max((p.depth for p in self.places.values()), default=-1)

    def on_frame(self, listener: FrameListener) -> Callable[[], None]:
        """Call `listener(frame)` after each new frame (a `Player` follows with it)."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    # ---------------------------------------------------------------- feeding
    def feed(self, batch: EventBatch | bytes, seq: int | None = None) -> CacheFrame:
        """Apply one batch (or its MessagePack bytes) and cut its frame."""
        if isinstance(batch, (bytes, bytearray, memoryview)):
            batch = decode_batch(bytes(batch))
        _check(batch)  # before any change: a bad batch leaves the recording as it was
        self.batches.append(batch)
        new: set[Any] = set()
        removed: list[Place] = []
        stored = removed_count = 0
        cleared = False
        for event in batch.events:
            if isinstance(event, BlockStored):
                self._place_chain(event)
                new.update(event.block_hashes)
                stored += len(event.block_hashes)
            elif isinstance(event, BlockRemoved):
                removed += [self.places[h] for h in event.block_hashes if h in self.places]
                removed_count += len(event.block_hashes)
            elif isinstance(event, AllBlocksCleared):
                removed += [self.places[h] for h in self.cache.blocks]
                cleared = True
            self.cache.apply(event)
        self.cache.num_batches += 1
        frame = self._cut(seq, new, removed, stored, removed_count, cleared)
        self.frames.append(frame)
        for listener in list(self._listeners):
            listener(frame)
        return frame

    def feed_all(self, batches: Iterable[EventBatch | bytes]) -> CacheRecording:
        for batch in batches:
            self.feed(batch)
        return self

    def follow(self, stream: Any, timeout_ms: int = 0) -> int:
        """Feed every batch a `reader.ZmqEventStream` has received (waiting up
        to `timeout_ms` for each next one); how many arrived."""
        got = stream.receive(timeout_ms)
        for seq, batch in got:
            self.feed(batch, seq)
        return len(got)

    # ----------------------------------------------------------------- layout
    def _place_chain(self, event: BlockStored) -> None:
        if self.block_size is None:
            self.block_size = event.block_size
        parent = event.parent_block_hash
        for h in event.block_hashes:
            if h not in self.places:
                self.places[h] = self._new_place(self.places.get(parent))
            parent = h

    def _new_place(self, parent: Place | None) -> Place:
        """Below a parent's row only when a child already continues it."""
        if parent is not None and parent not in self._row_taken:
            self._row_taken.add(parent)
            return Place(parent.depth + 1, parent.row)
        self._rows += 1
        return Place(0 if parent is None else parent.depth + 1, self._rows - 1)

    def _cut(self, seq: int | None, new: set, removed: list[Place], stored: int,
             removed_count: int, cleared: bool) -> CacheFrame:
        cells = []
        for h, b in self.cache.blocks.items():
            # an edge only to a parent still cached (one evicted first has no cell)
            parent = self.places[b.parent] if b.parent in self.cache.blocks else None
            cells.append(CacheCell(h, self.places[h], parent, len(b.token_ids), b.copies,
                                   h in new, b.prefix is not None, b.token_ids[:8]))
        cells.sort(key=lambda c: (c.place.row, c.place.depth))
        alive = {c.place for c in cells}
        gone = tuple(sorted({p for p in removed if p not in alive},
                            key=lambda p: (p.row, p.depth)))
        return CacheFrame(len(self.frames), seq, tuple(cells), gone, stored, removed_count,
                          cleared)


def _check(batch: EventBatch) -> None:
    for event in batch.events:
        if not isinstance(event, (BlockStored, BlockRemoved, AllBlocksCleared)):
            raise TypeError(f"not a KV cache event: {event!r}")
        if isinstance(event, BlockStored) and \
                len(event.token_ids) != event.block_size * len(event.block_hashes):
            raise ValueError(f"BlockStored has {len(event.token_ids)} token ids for "
                             f"{len(event.block_hashes)} blocks of {event.block_size}")


def serve_live(engine: Any, work: Any, recording: CacheRecording, *,
               settle_ms: int = 300, on_step: Callable[[], Any] | None = None) -> Any:
    """Serve `work` on a `compare.VllmEngine` (vLLM in this process) and feed
    `recording` from vLLM's ZeroMQ publisher after every engine step, so a
    view of it follows vLLM while it serves (and call `on_step`, e.g. a
    `pool_view.VllmPoolRecorder`'s ``cut``); then wait until no batch has
    come for `settle_ms` (vLLM publishes from a thread of its own). Returns
    the run (`compare.SystemRun`: tokens, hits per request, the events)."""
    def after_step(_new_tokens: int) -> None:
        recording.follow(engine.stream)
        if on_step is not None:
            on_step()

    run = engine.run(work, progress=after_step)
    while recording.follow(engine.stream, settle_ms):
        pass
    return run


def hash_label(h: Any) -> str:
    """A short, stable label of a block name (int or bytes)."""
    if isinstance(h, int):
        return f"{h & 0xFFFFFFFFFFFFFFFF:016x}"[-8:]
    return bytes(h).hex()[-8:]


class PrefixCacheMap(View):
    """Draw a `CacheRecording`: ``PrefixCacheMap(recording)``; see the module docstring.

    >>> from pagedkit.vllm.wire import BlockStored, EventBatch
    >>> rec = CacheRecording()
    >>> _ = rec.feed(EventBatch(0.0, [BlockStored([1, 2], None, list(range(8)), 4)]))
    >>> PrefixCacheMap(rec)
    PrefixCacheMap(batch 1/1: 2 cached blocks (2 copies), this batch +2 stored, -0 removed)
    """

    CELL_PX = 30

    def __init__(self, recording: CacheRecording, *, player: Player | None = None,
                 title: str = DEFAULT_TITLE) -> None:
        self.recording = recording
        self.name = title
        super().__init__(player or Player(recording))

    @property
    def frame(self) -> CacheFrame:
        return self.recording[self.index]

    def summary(self, index: int | None = None) -> str:
        i = self._at(index)
        f = self.recording[i]
        return _("batch {i}/{last}: {cached} ({copies}), this batch +{stored} stored, "
                 "-{removed} removed{cleared}").format(
            i=i, last=self.player.last, cached=self._cached(f.num_cached),
            copies=ngettext("{n} copy", "{n} copies", f.num_copies).format(n=f.num_copies),
            stored=f.stored, removed=f.removed_count, cleared=self._cleared(f))

    @staticmethod
    def _cached(n: int) -> str:
        return ngettext("{n} cached block", "{n} cached blocks", n).format(n=n)

    @staticmethod
    def _cleared(f: CacheFrame) -> str:
        return _(", all cleared") if f.cleared else ""

    def text(self, index: int | None = None) -> str:
        """The summary and the tree in letters, a row per line: ``#`` a cached
        block, ``2``-``9`` one held twice or more, ``+`` stored by this batch,
        ``x`` removed by it, ``.`` no block there now."""
        i = self._at(index)
        f = self.recording[i]
        lines = [repr(self) if index is None else f"PrefixCacheMap({self.summary(i)})"]
        grid = {c.place: ("+" if c.new else str(min(c.copies, 9)) if c.copies > 1 else "#")
                for c in f.cells}
        grid.update({p: "x" for p in f.removed})
        rows = 1 + max((p.row for p in grid), default=-1)
        cols = 1 + max((p.depth for p in grid), default=-1)
        for r in range(rows):
            line = "".join(grid.get(Place(d, r), ".") for d in range(cols)).rstrip(".")
            if line:
                lines.append(f"{r:4d} {line}")
        return "\n".join(lines)

    # ---------------------------------------------------------------- drawing
    def _build(self, fig: Any) -> None:
        fig.add_scatter(name="parent -> child", x=[], y=[], mode="lines",
                        line=dict(color=EDGE_COLOR, width=1.5), hoverinfo="skip",
                        showlegend=False)
        fig.add_scatter(name="cached blocks", x=[], y=[], mode="markers",
                        marker=dict(symbol="square", size=self.CELL_PX, color=[],
                                    line=dict(width=1, color="#555")),
                        hovertemplate="%{hovertext}<extra></extra>", showlegend=False)
        fig.add_scatter(name="stored by this batch", x=[], y=[], mode="markers",
                        marker=dict(symbol="square-open", size=self.CELL_PX + 6,
                                    color=COW_COLOR, line=dict(width=3, color=COW_COLOR)),
                        hoverinfo="skip", showlegend=False)
        fig.add_scatter(name="removed by this batch", x=[], y=[], mode="markers",
                        marker=dict(symbol="x-thin-open", size=self.CELL_PX * 0.8,
                                    color=REMOVED_COLOR, line=dict(width=3,
                                                                   color=REMOVED_COLOR)),
                        hoverinfo="skip", showlegend=False)
        fig.add_scatter(name="copies", x=[], y=[], mode="text", text=[],
                        textfont=dict(size=11, color="white"), hoverinfo="skip",
                        showlegend=False)
        for name, color, symbol in ((_("cached block (color: its row)"), OWNER_COLORS[0],
                                     "square"),
                                    (_("stored by this batch"), COW_COLOR, "square-open"),
                                    (_("removed by this batch"), REMOVED_COLOR, "x-thin-open"),
                                    (_("×n: held by n physical blocks"), "white", "square")):
            fig.add_scatter(name=name, x=[None], y=[None], mode="markers",
                            marker=dict(symbol=symbol, size=11, color=color,
                                        line=dict(width=2 if symbol != "square" else 1,
                                                  color=color if symbol != "square"
                                                  else "#555")))
        fig.update_layout(template="simple_white", width=760, height=460,
                          margin=dict(l=50, r=15, t=title_margin(3), b=125),
                          hovermode="closest", title=title_layout(),
                          legend=dict(orientation="h", yanchor="top", y=-0.2, x=0,
                                      font=dict(size=11)),
                          xaxis=dict(title=dict(text=_("block of the prompt (0: its first "
                                                  "block_size tokens)"), font=dict(size=11)),
                                     showgrid=False, zeroline=False, fixedrange=True,
                                     dtick=1),
                          yaxis=dict(title=dict(text=_("chain"), font=dict(size=11)),
                                     showgrid=False, zeroline=False, fixedrange=True,
                                     showticklabels=False))

    def _draw(self, fig: Any, index: int) -> None:
        f = self.recording[index]
        edges, cells, new, gone, copies = fig.data[:5]
        lx: list[float | None] = []
        ly: list[float | None] = []
        for c in f.cells:
            if c.parent is not None:
                lx += [c.parent.depth, c.place.depth, None]
                ly += [c.parent.row, c.place.row, None]
        edges.x, edges.y = lx, ly
        cols = max(self.recording.depth, 6)
        rows = max(self.recording.rows, 4)
        size = max(6.0, min(self.CELL_PX, 660 / cols * 0.8, 280 / rows * 0.8))
        cells.x = [c.place.depth for c in f.cells]
        cells.y = [c.place.row for c in f.cells]
        cells.marker.color = [OWNER_COLORS[c.place.row % len(OWNER_COLORS)] for c in f.cells]
        cells.marker.size = size
        cells.hovertext = [self._hover(c) for c in f.cells]
        fresh = [c for c in f.cells if c.new]
        new.x, new.y = [c.place.depth for c in fresh], [c.place.row for c in fresh]
        new.marker.size = size + 6
        gone.x, gone.y = [p.depth for p in f.removed], [p.row for p in f.removed]
        gone.marker.size = size * 0.8
        held = [c for c in f.cells if c.copies > 1]
        copies.x, copies.y = [c.place.depth for c in held], [c.place.row for c in held]
        copies.text = [f"×{c.copies}" for c in held]
        fig.layout.xaxis.range = [-0.6, cols - 0.4]
        fig.layout.yaxis.range = [rows - 0.4, -0.6]
        fig.layout.title.text = self._title(f, index)

    def _hover(self, c: CacheCell) -> str:
        bs = self.recording.block_size or c.num_tokens
        start = c.place.depth * bs
        unknown = "" if c.prefix_known else _(" (parent stored before the stream began)")
        return _("block {name} (name's last 4 bytes)<br>prompt tokens {first}..{last}{unknown}"
                 "<br>first tokens {tokens}<br>physical copies: {copies}").format(
            name=hash_label(c.hash), first=start, last=start + c.num_tokens - 1,
            unknown=unknown, tokens=list(c.first_tokens), copies=c.copies)

    def _title(self, f: CacheFrame, index: int) -> str:
        seq = _(" (publisher seq {seq})").format(seq=f.seq) if f.seq is not None else ""
        size = self.recording.block_size
        bs = _("blocks of {tokens}").format(tokens=counted(size, "token")) if size else ""
        batch = _("batch {i}/{last}").format(i=index, last=self.player.last)
        name = _(self.name)  # one of the titles above, translated; any other as given
        return wrap_title([f"<b>{name}</b>", f"<b>{batch}</b>{seq}",
                           _("{cached} ({n} physical)").format(cached=self._cached(f.num_cached),
                                                               n=f.num_copies),
                           _("this batch: +{stored} stored, −{removed} removed{cleared}").format(
                               stored=f.stored, removed=f.removed_count,
                               cleared=self._cleared(f)), bs], 700)
