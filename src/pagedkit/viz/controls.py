"""The player: which recorded step every view shows, and the controls that move it.

The step index is plain Python state (`Player.index`); the ipywidgets —
play/pause, step buttons, a speed choice, a slider to scrub history and a
live toggle — are built only when a view is displayed. ``Play`` ticks in the
browser alone (it is linked to the slider in JavaScript), so in a kernel,
a test or a notebook run headless it never moves: set `index` instead. It
ticks no faster than the views draw (`_Controls._pace`).

Live mode follows the newest frame as the recorder cuts it, throttled by a
`Throttle` so a fast engine does not flood the browser: frames arriving
closer together than `min_interval` are skipped, and the last one is drawn
when the cell finishes (or at `flush()`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sized
from typing import Any

from ..i18n import _
from .frontend import after_cell

IndexListener = Callable[[int], None]

#: Speeds offered by the speed control: label -> milliseconds between steps.
SPEEDS = {"0.25×": 1600, "0.5×": 800, "1×": 400, "2×": 200, "4×": 100, "8×": 50}


class Throttle:
    """Let an action through at most once per `min_interval` seconds."""

    def __init__(self, min_interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        if min_interval < 0:
            raise ValueError(f"min_interval must be >= 0 seconds, got {min_interval}")
        self.min_interval = min_interval
        self.clock = clock
        self._last = -float("inf")

    def ready(self) -> bool:
        now = self.clock()
        if now - self._last >= self.min_interval:
            self._last = now
            return True
        return False


class Player:
    """A step index over `frames` (anything sized: a `Recorder`, a tuple of frames).

    >>> p = Player([10, 11, 12]); p.index = 2; p.index
    2
    """

    def __init__(self, frames: Sized, *, min_interval: float = 0.15,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.frames = frames
        self.throttle = Throttle(min_interval, clock)
        # A recording still listening is live: show its newest frame and follow.
        self.follow = bool(getattr(frames, "listening", False))
        self._index = max(len(frames) - 1, 0) if self.follow else 0
        self._pending = False
        self._listeners: list[IndexListener] = []
        self._controls: Any = None  # the widgets, once built
        self._syncing = False
        #: seconds the views took to draw the last step they moved to (Play's pace)
        self.last_draw_s = 0.0
        #: where a view chose to open (`open_at`), and the line that says why
        self.opened_at: int | None = None
        self.opening_note = ""
        #: whether where the views open is settled: by the first look at one
        #: (`open_on_busiest`) or by a learner setting the index
        self.opening_settled = False
        if hasattr(frames, "on_frame"):
            self._stop = frames.on_frame(lambda _frame: self._frames_added())

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def last(self) -> int:
        return len(self.frames) - 1

    @property
    def index(self) -> int:
        return self._index

    @index.setter
    def index(self, value: int) -> None:
        value = self.resolve(value)
        self.opening_settled = True
        if value != self.last:
            self.follow = False  # the learner is looking back: stop following
        self._move(value)

    def resolve(self, value: int) -> int:
        """`value` as a step index; negative ones count from the end, as in a list
        (-1 is the last step)."""
        if isinstance(value, int) and not isinstance(value, bool) and -len(self) <= value < 0:
            value += len(self)
        self._check(value)
        return value

    def _check(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"step index must be an integer, got {value!r}")
        if not 0 <= value <= self.last:
            raise IndexError(f"step index {value} is outside the recording [0, {self.last}] "
                             f"(or [-{len(self)}, -1] from the end)")

    def _move(self, value: int) -> None:
        self._check(value)
        if value == self._index:
            return
        self._index = value
        self._sync_controls()
        start = time.perf_counter()
        for listener in list(self._listeners):
            listener(value)
        self.last_draw_s = time.perf_counter() - start

    def open_at(self, index: int, note: str) -> None:
        """Show `index` as the opening step, stop following, and remember `note` (why),
        which views show while they stay on that step."""
        self._check(index)
        self.follow = False
        self.opened_at, self.opening_note = index, note
        self._move(index)

    def subscribe(self, listener: IndexListener) -> Callable[[], None]:
        """Call `listener(index)` whenever the index moves."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def step(self, delta: int = 1) -> int:
        """Move `delta` steps, stopping at either end. Returns the new index."""
        self.index = min(max(self._index + delta, 0), self.last)
        return self._index

    # ------------------------------------------------------------------- live
    def _frames_added(self) -> None:
        if self._controls is not None:
            self._controls.set_max(self.last)
        if not self.follow:
            return
        if self._controls is None or self.throttle.ready():  # unseen: no need to wait
            self._pending = False
            self._move(self.last)
        elif not self._pending:
            self._pending = True
            after_cell(self.flush)

    def flush(self) -> None:
        """Show the newest frame now if live mode skipped it."""
        if self._pending and self.follow:
            self._pending = False
            self._move(self.last)

    def live(self, min_interval: float | None = None) -> _Live:
        """``with player.live(): llm.generate(...)`` — follow new frames, draw the last on exit."""
        return _Live(self, min_interval)

    def on_step(self, *_: object) -> None:
        """An ``on_step`` callback for ``LLM.generate``: turns live mode on.

        The frames themselves arrive through the recorder; this only makes
        sure the view is following them (throttled) while the engine runs."""
        if not self.follow:
            self.follow = True
            self._frames_added()

    # --------------------------------------------------------------- widgets
    @property
    def widget(self) -> Any:
        """The control row (built on first use)."""
        if self._controls is None:
            self._controls = _Controls(self)
        return self._controls.box

    def _sync_controls(self) -> None:
        if self._controls is not None and not self._syncing:
            self._syncing = True
            try:
                self._controls.show(self._index)
            finally:
                self._syncing = False


class _Live:
    def __init__(self, player: Player, min_interval: float | None) -> None:
        self.player = player
        self.min_interval = min_interval
        self._saved = player.throttle.min_interval

    def __enter__(self) -> Player:
        if self.min_interval is not None:
            self.player.throttle.min_interval = self.min_interval
        self.player.follow = True
        return self.player

    def __exit__(self, *exc: object) -> None:
        self.player.flush()
        self.player.throttle.min_interval = self._saved


class _Controls:
    """The ipywidgets of a player. The slider is the source of truth in the
    browser; its changes come back to `Player.index`."""

    def __init__(self, player: Player) -> None:
        import ipywidgets as w

        self.player = player
        last = max(player.last, 0)
        self.play = w.Play(value=player.index, min=0, max=last, interval=SPEEDS["1×"],
                           description=_("play"), show_repeat=False,
                           layout=w.Layout(width="auto"))
        self.slider = w.IntSlider(value=player.index, min=0, max=last, description=_("step"),
                                  style={"description_width": "30px"},
                                  continuous_update=True, layout=w.Layout(width="260px"))
        w.jslink((self.play, "value"), (self.slider, "value"))
        self.back = w.Button(description="◀", tooltip=_("previous step"),
                             layout=w.Layout(width="40px"))
        self.forward = w.Button(description="▶", tooltip=_("next step"),
                                layout=w.Layout(width="40px"))
        self.speed = w.Dropdown(options=list(SPEEDS), value="1×", description=_("speed"),
                                layout=w.Layout(width="140px"),
                                style={"description_width": "40px"})
        self.live = w.ToggleButton(value=player.follow, description=_("live"),
                                   tooltip=_("follow the newest step while the engine runs"),
                                   layout=w.Layout(width="70px"))
        self.back.on_click(lambda _: player.step(-1))
        self.forward.on_click(lambda _: player.step(1))
        self.slider.observe(self._slid, names="value")
        self.speed.observe(lambda ch: self._pace(), names="value")
        self.live.observe(self._toggled, names="value")
        # 650 px of controls: on a narrower output area they wrap onto a second row
        self.box = w.HBox([self.play, self.back, self.forward, self.slider, self.speed,
                           self.live], layout=w.Layout(flex_flow="row wrap"))

    def _slid(self, change: dict) -> None:
        if not self.player._syncing:
            self.player.index = change["new"]
            self._pace()

    def _pace(self) -> None:
        """Play no faster than the views draw. Play ticks in the browser, linked to
        the slider there; ticks faster than the kernel draws queue up, and the
        slider ran ahead of the views (at 8x, "step 27" drawn while it said 36,
        issue #26). So Play's interval is the speed's, or the time the last step
        took to draw if that is longer: 8x means as fast as this machine draws."""
        asked = SPEEDS[self.speed.value]
        self.play.interval = max(asked, round(1000 * self.player.last_draw_s))

    def _toggled(self, change: dict) -> None:
        if self.player._syncing:
            return
        self.player.follow = change["new"]
        if change["new"]:
            self.player._move(self.player.last)

    def set_max(self, last: int) -> None:
        self.play.max = self.slider.max = max(last, 0)

    def show(self, index: int) -> None:
        self.slider.value = index
        self.live.value = self.player.follow


class Played:
    """What a view and a dashboard both offer through their `player`: the
    step shown, and following an engine while it runs."""

    player: Player

    @property
    def index(self) -> int:
        """The step shown (0 is before the first step), after the opening rule
        (`open_on_busiest`). Setting it redraws."""
        self._open()
        return self.player.index

    def _open(self) -> None:
        open_on_busiest(self.player, getattr(self, "recorder", None))

    @index.setter
    def index(self, value: int) -> None:
        self.player.index = value

    def live(self, min_interval: float | None = None) -> Any:
        """``with view.live(): llm.generate(...)`` — follow the engine, throttled,
        and show its last step when the block ends."""
        return self.player.live(min_interval)

    def on_step(self, *step_output: object) -> None:
        """Pass as ``LLM.generate(..., on_step=view.on_step)`` to follow the engine."""
        self.player.on_step(*step_output)


def open_on_busiest(player: Player, recorder: Any) -> None:
    """Where a view opens, settled by the first look at it (`Played.index`: the
    index, the text, print, repr, a figure, the display all look first, so all
    show the same step): looked at after a run that ended with nothing in use
    (every request done: an empty pool, or one of grey cached blocks), it opens
    on the busiest step instead of the last — the last one with the most
    blocks in use — and says so in its title and its text. A view of a
    finished recording (a closed recorder, a replay) opens the same way, from
    its last step. A view first looked at before or during a run keeps
    following it; one a learner moved (set `index`, even to the last step)
    stays where it is."""
    if player.opening_settled:
        return
    player.opening_settled = True
    frames = getattr(recorder, "frames", None)
    if not frames or len(frames) < 2 or player.opened_at is not None:
        return
    if player.index == 0 and not player.follow:  # a finished recording: from its end
        player._move(player.last)
    if player.index != player.last or frames[-1].memory.used > 0:
        return
    used = [f.memory.used for f in frames]
    busiest = max(range(len(used)), key=lambda i: (used[i], i))
    if used[busiest] == 0:
        return
    player.open_at(busiest, (_("opened on the busiest step ({used} blocks in use); step {last}, "
                              "the end, holds none: ◀ ▶ play or drag")
                              .format(used=used[busiest], last=player.last)))
