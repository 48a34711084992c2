"""Automatic checks for the labs' exercises.

Each lab's exercises live in ``pagedkit.exercises.labNN``: the learner writes
a function in the notebook and hands it to a check, which runs it on known
cases and answers with a `CheckResult` — a pass, or the first case that went
wrong, what was expected, and a hint. A check never raises on a wrong answer
(the notebook keeps running); it raises only for misuse (not a function).

The reference solutions live apart, in ``labs/solutions/``, and the test
suite runs every check against them, so checks and solutions cannot drift.
"""

from __future__ import annotations

import copy
import functools
import inspect
import numbers
import os
import signal
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from ..i18n import N_, _, ngettext

__all__ = ["EXPECTED_LATER", "GENERATOR_HINT", "NOT_WRITTEN", "Case", "CheckResult", "as_items",
           "call_learner", "check_function", "formula_mistake", "fresh", "function_name",
           "hint_text", "in_stub_order", "is_count", "is_sequence", "not_written", "order_mistake",
           "other_cases",
           "parting",
           "raised", "require_function",
           "same_items", "same_values", "stranger_or_repeat", "stub_name", "wrong_answer"]

NOT_WRITTEN = N_("not written yet: replace the `...` / NotImplementedError with your code")
"""English, as every message is written; `_(NOT_WRITTEN)` is what the learner reads."""

#: Each Python exercise's parameters, as its stub in the lab writes them (a test
#: holds this table to both editions' notebooks). A check calls the learner's
#: function by position, in this order (`order_mistake`); the build track asks
#: its pieces for these (`track.PARAMETERS`). Lab 04c's kernels are launched
#: by their checks, not called, and are not here.
SIGNATURES = {
    "blocks_for": "num_tokens, block_size",
    "cached_kv_reads": "prompt_len, new_tokens",
    "max_batch": "gpu_bytes, num_params, param_bytes, kv_bytes_per_token, seq_len",
    "kv_bytes_per_token": "config, dtype_bytes",
    "reservation_size": "policy, prompt_len, output_len, max_len",
    "first_fit": "regions, capacity, size",
    "waste_breakdown": "reservations, capacity, next_size",
    "token_at": "block_table, block_size, num_tokens, slot",
    "blocks_needed": "num_tokens, num_new_tokens, block_size",
    "append_slots": "block_table, num_tokens, num_new_tokens, block_size, free_blocks",
    "gather_kv": "cache, block_table, num_tokens",
    "paged_decode_attention": "query, k_cache, v_cache, block_table, context_len",
    "online_softmax_update": "row_max, row_sum, acc, scores, v",
    "merge_states": "out_a, lse_a, out_b, lse_b",
    "finish_steps": "output_lens, max_num_seqs, policy",
    "admit": "waiting, tokens_left, seats_left, free_blocks, block_size, chunked=False",
    "tokens_to_recompute": "num_tokens, block_size, cached_blocks",
    "preemption_mode": "tables, recompute_tokens, free_cpu_blocks, block_bytes, "
                       "link_bytes_per_s, prefill_tokens_per_s",
    "choose_victims": "running, free_blocks",
    "copy_on_write": "ref_counts, free_blocks, table",
    "chain_hashes": "token_ids, block_size",
    "sharing_blocks": "prompt_len, output_lens, block_size",
    "pack_step": "scheduled, block_size",
    "top_p_filter": "logits, top_p",
    "tokens_that_fit": "memory_bytes, num_layers, num_kv_heads, head_dim, dtype_bytes, "
                       "block_size",
    "best_num_drafts": "acceptance_rate, draft_cost, max_drafts",
}


def order_mistake(name: str, fn: Callable) -> str:
    """The hint for a function whose parameters are the stub's names in another
    order (newcomer 36: ``token_at(block_table, num_tokens, block_size,
    slot)``): the check passes values by position, so each lands under
    another name, and the cases' own hints would send the learner after a
    mistake in the body. '' for any other signature (names of one's own
    choosing are fine) and for an exercise not in `SIGNATURES`."""
    if name not in SIGNATURES:
        return ""
    stub = [part.split("=")[0] for part in SIGNATURES[name].split(", ")]
    try:
        given = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):  # (no signature to read: a builtin)
        return ""
    if given == stub or sorted(given) != sorted(stub):
        return ""
    return _("your {name}({given}) takes the stub's parameters in another order: the check "
             "calls {name}({stub}), by position, so each value lands under another name. Keep "
             "the stub's order").format(name=name, given=", ".join(given), stub=", ".join(stub))


def in_stub_order(check: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
    """Decorates a lab's ``check_NAME(fn)``: where it fails a function that
    takes the stub's parameters in another order, `order_mistake` is the
    hint, in place of the case's (which would send the learner after a
    mistake in the body). One rule for every exercise, whichever way its
    check found the failure (a wrong value, an error, a wrong shape)."""
    name = check.__name__.removeprefix("check_")

    @functools.wraps(check)
    def checked(fn: Callable, *args: Any, **kwargs: Any) -> CheckResult:
        result = check(fn, *args, **kwargs)
        order = "" if result.passed or not callable(fn) else order_mistake(name, fn)
        if not order:
            return result
        verdict = result.message.split(hint_text("{hint}").split("{hint}")[0])[0]
        return CheckResult(result.name, False, full_stop(verdict) + hint_text(order))
    return checked


@dataclass(frozen=True)
class Case:
    """One call of the learner's function and what it should give."""

    args: tuple
    expected: Any
    hint: str | Callable[[], str] = ""  # a callable is asked when the hint is shown
    kwargs: dict = field(default_factory=dict)

    def call_text(self, name: str) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        text = f"{name}({', '.join(parts)})"
        return text if len(text) <= 120 else text[:117] + "..."


@dataclass(frozen=True)
class CheckResult:
    """The outcome of a check; its text is what the notebook shows."""

    name: str
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        mark = "✅" if self.passed else "❌"
        return f"{mark} {self.name}: {self.message}"

    def _repr_markdown_(self) -> str:
        """In a notebook: a coloured text-style mark (✔ U+2714, ✘ U+2718, in
        common text fonts such as DejaVu Sans) for the emoji, which show as
        empty boxes where no emoji font is installed (issue #26).
        labs/nbval_sanitize.cfg reads this mark back as the emoji, so the
        committed outputs compare either way."""
        mark, colour = ("✔", "#1a7f37") if self.passed else ("✘", "#cf222e")
        return (f'<span class="pagedkit-check" style="color: {colour}; font-weight: bold">'
                f"{mark}</span> {self.name}: {self.message}")


def _raised_in(err: NotImplementedError):
    """The code object of the function that raised `err` (None if unknown)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return None if tb is None else tb.tb_frame.f_code


def stub_name(fn: Callable, err: NotImplementedError) -> str:
    """The function whose stub raised `err` while `fn` ran: `fn`'s own name, or
    that of another stub it calls (say an earlier exercise's, still unwritten)."""
    code = _raised_in(err)
    return code.co_name if code is not None else getattr(fn, "__name__", repr(fn))


def not_written(name: str, fn: Callable, err: NotImplementedError) -> CheckResult:
    """The stub's NotImplementedError — raised by `fn` itself, or by another
    stub it calls (`stub_name`)."""
    code, own = _raised_in(err), getattr(fn, "__code__", None)
    if code is not None and own is not None and code is not own:
        return CheckResult(name, False, _("your function calls `{culprit}`, which is not "
                                          "written yet: write it first, or call pagedkit's "
                                          "own version").format(culprit=code.co_name))
    return CheckResult(name, False, _(NOT_WRITTEN))


def fresh(args: Any) -> Any:
    """The one rule for what a learner's function is given: a deep copy of a
    case's arguments, made anew for each call. A correct answer may change
    what it is given (pop from a queue, sort a table, clear a list) without
    failing a later case or a later run: the cases (module-level, and some
    sharing one list) stay as written, and a message shows the arguments as
    they were before the call. An exercise whose contract is to change its
    input (lab 03's `append_slots`, lab 07's `copy_on_write`) calls the
    function on its fresh copy and then reads that copy."""
    return copy.deepcopy(args)


def require_function(name: str, fn: object) -> None:
    """Misuse, not a wrong answer: the check needs the function itself."""
    if not callable(fn):
        raise TypeError(_("{name}: give the check your function itself (no parentheses), "
                          "got {type}").format(name=name, type=type(fn).__name__))


EXPECTED_LATER = object()
"""`call_learner`'s `expected` (and a `Case`'s) where the check works the
expected answer out only after the call (lab 04: from the case's tensors),
and judges what comes back itself: an iterator is returned unread."""


def call_learner(name: str, fn: Callable, call: str, *args: Any, expected: Any = EXPECTED_LATER,
                 show: Callable[[Any], str] = repr, hint: str | Callable[[], str] = "",
                 elsewhere: Iterable[Case] = (),
                 error_hint: Callable[[Exception], str] | None = None,
                 **kwargs: Any) -> tuple[Any, CheckResult | None]:
    """Run the learner's function: ``(result, None)``, or ``(None, failure)`` if
    it raised — "not written yet" for the stub's NotImplementedError, else the
    call and the exception, with a hint by the one rule for raised answers
    (`raised`: this case's `hint` if `fn` runs on a case `elsewhere`).
    A generator (any iterator) it returns is
    read here, as a list, so that its errors are the call's (and a message
    shows its items) — but never past one item more than the `expected`
    answer holds: an endless generator fails, saying so (`show` writes the
    expected answer, as in `wrong_answer`), instead of hanging the check.
    Where `expected` is not a sequence, any iterator fails unread (with
    `GENERATOR_HINT` if `fn` is a generator function); where it is
    `EXPECTED_LATER`, any iterator is returned unread."""
    try:
        result = fn(*args, **kwargs)
        if isinstance(result, Iterator) and expected is not EXPECTED_LATER:
            return _read_iterator(name, call, result, expected, show, fn)
        return result, None
    except NotImplementedError as err:
        return None, not_written(name, fn, err)
    except Exception as err:  # the learner's bug, reported instead of raised
        return None, raised(name, fn, call, err, hint, elsewhere, error_hint)


GENERATOR_HINT = N_("`yield` in a function's body makes it a generator function: a call runs "
                    "none of its body (not even its `return`) and hands back a generator "
                    "instead. Return the answer; don't yield it.")
"""The hint for a generator where one answer is expected (newcomer 28: lab 03's
append_slots written with `yield`)."""


def _read_iterator(name: str, call: str, result: Iterator, expected: Any,
                   show: Callable[[Any], str],
                   fn: Callable | None = None) -> tuple[Any, CheckResult | None]:
    """An iterator the learner's function returned, read as `call_learner` says
    (`GENERATOR_HINT` where `fn` is a generator function and one answer is
    expected)."""
    if not is_sequence(expected):  # one answer, not a sequence of them: never an iterator
        return None, CheckResult(name, False, _(
            "{call} returned an iterator, expected {expected}.").format(
                call=call, expected=show(expected)) + hint_text(
                    GENERATOR_HINT if inspect.isgeneratorfunction(fn) else ""))
    most = len(expected)
    items = list(islice(result, most + 1))
    if len(items) > most:
        return None, CheckResult(name, False, ngettext(
            "{call} returned an iterator that gives more than {n} item (an endless "
            "generator?), expected {expected}.",
            "{call} returned an iterator that gives more than {n} items (an endless "
            "generator?), expected {expected}.", most).format(
                call=call, n=most, expected=show(expected)))
    return items, None


def raised(name: str, fn: Callable, call: str, err: Exception,
           hint: str | Callable[[], str] = "", elsewhere: Iterable[Case] = (),
           error_hint: Callable[[Exception], str] | None = None) -> CheckResult:
    """The one rule for an answer that raised `err` (not the stub's
    NotImplementedError): the call and the error, and a hint only where one
    helps —

    - the check's hint for this error itself, whatever the case
      (`error_hint(err)`; lab 04's IndexError from reading the table's padding);
    - else this case's `hint`, if the error is the case's: `fn` runs (returns,
      right or wrong) on another of the check's cases, `elsewhere` (lab 09's
      closed form divides by zero at a = 1 alone, and that case's hint says
      to mind it);
    - else none: an error on every case is the code's (a typo's NameError),
      and a case's idea would be beside the point.

    Trying the other cases stops at the first that runs; `elsewhere` lists the
    earlier ones first, which ran already."""
    message = (_("{call} raised {error}: {message}").format(
        call=call, error=type(err).__name__, message=err) if str(err) else
        _("{call} raised {error}").format(call=call, error=type(err).__name__))  # newcomer 42
    known = error_hint(err) if error_hint else ""
    if not known:
        case_hint = hint() if callable(hint) else hint
        if case_hint and _runs_on_any(fn, elsewhere):
            known = case_hint
    return CheckResult(name, False, (full_stop(message) if known else message)
                       + hint_text(known))


#: How many Python bytecodes `_runs_on_any` lets the learner's own code run (`_learners`),
#: over all the cases it tries for a hint: a thousand times the most any solution of labs
#: 00-09 runs on one case (lab 09's best_num_drafts, about 2,800: tests/labs/
#: test_hung_answers.py measures it), some 0.3 s of tracing. Where it trips (or
#: `PROBE_SECONDS` does), the check says the error without a case's hint.
PROBE_BYTECODES = 3_000_000

#: The wall clock next to the count, over all the cases `_runs_on_any` tries: a loop whose
#: time goes to library calls (``time.sleep``, a torch matmul) runs few bytecodes of its own.
#: A busy machine that trips it costs a hint, never a verdict: the answer raised already.
PROBE_SECONDS = 2.0

#: How often the probe's alarm (`_Probe`) rings again once the clock ran out, for a loop
#: that caught the probe's exception
PROBE_RING_S = 0.05

#: How many of the other cases `_runs_on_any` tries at most, in the check's order (its own
#: cases first, then its grid): more than any check of labs 00-09 reached while the count
#: also paid for copying each case's arguments (lab 05's finish_steps: 2,920, all of them);
#: lab 05's admit has 111,613, and trying them all would cost seconds for nothing
PROBE_CASES = 3_000

#: Frames kept free below Python's recursion limit: a learner's recursion that gets this near
#: it counts as spent, so the probe's own functions always have room to run
PROBE_SPARE_FRAMES = 100

_NOT_LEARNERS = tuple(os.path.join(folder, "") for folder in sorted(
    {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    | {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}))


def _learners(code) -> bool:
    """The probe's rule for the learner's own code: a code object from a file
    outside pagedkit's package and outside Python's library folders (the
    standard library and the installed packages, as `sysconfig` names them)
    — a notebook cell, a script, labs/solutions — and not code Python or a
    library generated (``<frozen importlib._bootstrap>``, the methods
    dataclasses write, ``<string>``: a probe that stopped an import there left
    torch half-imported), save IPython's older cell names (``<ipython-input-3-…>``).
    Only its bytecodes count against `PROBE_BYTECODES`, and only there does
    the probe raise: copying a case's arguments (`fresh`), reading a returned
    iterator, an import, or a library function the answer calls run to
    their end (the clock, `PROBE_SECONDS`, counts them)."""
    name = code.co_filename
    return not name.startswith(_NOT_LEARNERS) and (
        not name.startswith("<") or name.startswith("<ipython-input-"))


class _ProbeSpent(BaseException):
    """The probe ran out (a BaseException: the learner's ``except Exception``
    does not catch it). Its ``__del__`` does nothing, but is a Python call: where
    the learner's bare ``except:`` drops it, `_Probe.rearm` sees that call."""

    def __del__(self) -> None:
        pass


class _Probe:
    """`PROBE_BYTECODES` and `PROBE_SECONDS` for every call made under it
    (``with probe:``): the bytecodes counted by a trace function
    (`sys.settrace`) in the learner's frames (`_learners`), the clock read by
    that trace function and, in the main thread where Python has SIGALRM
    (Linux, macOS: a notebook's kernel), rung by an alarm (`signal.setitimer`)
    that also stops a library call that waits (``time.sleep``).

    Once spent it stays spent, and raises `_ProbeSpent` at every later event of
    the learner's code until the call unwinds: the first raise lands where the
    learner's ``except:`` (or ``except BaseException:``) may catch it, and the
    loop around goes on. Python takes a trace function off as soon as it
    raises, so from then on a profile function (`sys.setprofile`, which sees
    every call and return, the learner's handler dropping `_ProbeSpent`
    among them) puts it back, and so does the alarm, ringing again every
    `PROBE_RING_S` (its handler raises too, in a learner's frame: a loop
    that calls nothing, ``except: while True: pass``, is stopped by it). A
    recursion nearer than `PROBE_SPARE_FRAMES` to Python's limit counts as
    spent too (there the trace function itself could not be called, and
    Python would take it off).

    What nothing in Python can stop: a loop that runs in C and never looks
    for signals (``sum(itertools.count())``) — neither the alarm nor the
    kernel's interrupt (Jupyter: the ■ button, or I, I) gets in; the learner
    must restart the kernel. Without the alarm (another thread, Windows), a
    library call that does not return is waited on; the kernel's interrupt
    stops it, and the check then raises KeyboardInterrupt."""

    def __init__(self) -> None:
        self.left = PROBE_BYTECODES
        self.deadline = time.monotonic() + PROBE_SECONDS
        self.depth = 0
        self.inside = False  # the alarm raises only while a call runs under the probe
        frame, below = sys._getframe(), 0
        while frame is not None:
            frame, below = frame.f_back, below + 1
        self.deepest = sys.getrecursionlimit() - below - PROBE_SPARE_FRAMES
        self.trace = self.count  # one bound method, compared by `is`

    @property
    def spent(self) -> bool:
        return self.left < 0

    def __enter__(self) -> _Probe:
        self.previous = sys.gettrace(), sys.getprofile()
        self.alarm = None
        self.home = sys._getframe(1)  # `rearm` walks the learner's frames up to here
        if (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGALRM) is not None):  # None: not set from Python
            handler = signal.signal(signal.SIGALRM, self.ring)
            try:  # the timer last: an interrupt before it leaves no alarm ringing
                self.alarm = handler, (0.0, 0.0), time.monotonic()
                self.alarm = handler, signal.setitimer(
                    signal.ITIMER_REAL, max(self.deadline - time.monotonic(), 1e-3),
                    PROBE_RING_S), self.alarm[2]
            except BaseException:
                self.__exit__()
                raise
        sys.settrace(self.trace)
        self.inside = True
        return self

    def __exit__(self, *_exc) -> None:
        self.inside = False
        sys.setprofile(self.previous[1])
        sys.settrace(self.previous[0])
        if self.alarm:
            handler, (delay, interval), since = self.alarm
            self.alarm = None
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, handler)
            if delay:  # someone else's alarm (a test's time limit), postponed while the
                # probe ran (at most PROBE_SECONDS): it rings for the time it had left
                signal.setitimer(signal.ITIMER_REAL,
                                 max(delay - (time.monotonic() - since), 1e-3), interval)

    def count(self, frame, event, _arg):
        """The trace function: counts the learner's bytecodes and frames, reads the
        clock, and raises at every event once spent."""
        if event == "call":
            if not _learners(frame.f_code):
                return None  # not traced inside; the calls it makes are asked again
            frame.f_trace_lines, frame.f_trace_opcodes = False, True
            self.depth += 1
            if self.depth > self.deepest:
                self.left = -1
        elif event == "return":
            self.depth -= 1
        elif event == "opcode":
            self.left -= 1
            if not self.left % 1024 and time.monotonic() > self.deadline:
                self.left = -1
        if self.spent and event != "return":
            sys.setprofile(self.rearm)
            raise _ProbeSpent
        return self.trace

    def ring(self, _signum, frame) -> None:
        """The alarm's handler: spent; where the learner's code runs, the trace
        function back on and a raise. Elsewhere (pagedkit, a library, an import
        the answer started) nothing more: the trace function raises when the
        learner's code runs again, or the next ring does."""
        if not self.inside:
            return
        self.left = -1
        if frame is not None and _learners(frame.f_code):
            sys.setprofile(self.rearm)
            self.rearm(frame, "", None)
            raise _ProbeSpent

    def rearm(self, frame, _event, _arg) -> None:
        """The profile function, once spent: the trace function back on, in every
        learner's frame from `frame` up that lost it."""
        sys.settrace(self.trace)
        while frame is not None and frame is not self.home and frame.f_trace is not self.trace:
            if _learners(frame.f_code):
                frame.f_trace, frame.f_trace_lines, frame.f_trace_opcodes = self.trace, False, True
            frame = frame.f_back


def _runs_on_any(fn: Callable, cases: Iterable[Case]) -> bool:
    """Whether `fn` returns without raising on any of `cases` (each called on
    `fresh` arguments, an iterator it returns read as `call_learner` reads it),
    within one `_Probe`, trying `PROBE_CASES` at most: an answer that raised on
    one case and loops forever on the others (``while True: pass``, or a loop
    of ``time.sleep``) is stopped there, not waited for, and counts as running
    on none of them — even where it catches the probe's exception and returns.
    What it cannot stop (a loop in C) is said in `_Probe`."""
    probe = _Probe()
    for case in islice(cases, PROBE_CASES):
        args, kwargs = fresh((case.args, case.kwargs))
        try:
            with probe:
                result = fn(*args, **kwargs)
                if isinstance(result, Iterator) and case.expected is not EXPECTED_LATER:
                    _read_iterator("", "", result, case.expected, repr)
        except _ProbeSpent:
            return False
        except Exception:  # NotImplementedError too: it did not run there
            if probe.spent:
                return False
            continue
        return not probe.spent
    return False


def function_name(fn: Callable, name: str) -> str:
    """The name a check's message calls the learner's function by: its own
    (``ff_first_hole_any``, ``<lambda>``), or the exercise's if it has none."""
    return getattr(fn, "__name__", name)


def is_sequence(value: Any) -> bool:
    """The one rule for answers that are sequences: a list, a tuple, a range, a
    generator, a numpy array or a tensor with a dimension — anything iterable
    but text (str, bytes), a mapping or a set (which has no order)."""
    if isinstance(value, (str, bytes, bytearray, Mapping, Set)):
        return False
    try:
        iter(value)  # a 0-d array or tensor refuses: it is one number
    except TypeError:
        return False
    return True


def as_items(value: Any) -> Any:
    """`value` with every sequence in it (`is_sequence`) made a list, at every
    depth: ``((1, 2), [3])`` and ``[[1, 2], (3,)]`` both read ``[[1, 2], [3]]``."""
    return [as_items(item) for item in value] if is_sequence(value) else value


def is_count(value: Any) -> bool:
    """The one rule for a count: an integer by value and by kind — an int, a
    numpy integer, a 0-d integer array or tensor. Not ``2.0`` (from ``/``: a
    block table cannot have 2.0 entries, ``range(2.0)`` raises), nor a
    numpy or torch float, nor ``True`` (a comparison's answer, not a count,
    though ``True == 1``)."""
    return isinstance(_scalar(value), numbers.Integral) and not isinstance(_scalar(value), bool)


def _scalar(value: Any) -> Any:
    """A numpy or torch scalar (0-d) as the Python number it holds (its kind
    kept: ``np.int64(2)`` -> 2, ``torch.tensor(2.0)`` -> 2.0); else `value`."""
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        return value.item()
    return value


def _differences(got: Any, want: Any) -> Iterator[tuple[str, Any, Any]]:
    """Where `got` differs from the expected `want`, one ``(kind, got part,
    expected part)`` each: ``"type"`` for a number of the right value that is
    not a count where a count is expected (`is_count`), ``"value"`` for
    anything else. Sequences (`is_sequence`) are compared item by item, read
    no further than one item past the expected length (an endless generator
    ends the comparison, unequal); mappings key by key."""
    if is_sequence(want):
        items = list(islice(got, len(want) + 1)) if is_sequence(got) else None
        if items is None or len(items) != len(want):
            yield "value", got, want
            return
        for got_item, want_item in zip(items, want, strict=True):
            yield from _differences(got_item, want_item)
    elif isinstance(want, Mapping):
        if not isinstance(got, Mapping) or set(got) != set(want):
            yield "value", got, want
            return
        for key in want:
            yield from _differences(got[key], want[key])
    elif is_sequence(got) or not _equal(got, want):
        yield "value", got, want
    elif is_count(want) and not is_count(got):
        yield "type", got, want


def _equal(got: Any, want: Any) -> bool:
    """``got == want`` as a bool; False where the two cannot be compared."""
    try:
        return bool(got == want)
    except (TypeError, ValueError, RuntimeError):  # say, an array compared with text
        return False


def parting(got: list, want: list) -> int:
    """Where the list `got` parts from `want`: the index of its first item that
    is not `want`'s by `same_items`, else the shorter one's length (`got`
    stops early, or goes on past `want`'s end). Lab 05's, 06's and 07's
    checks say what a wrong answer did there."""
    return next((i for i, (a, b) in enumerate(zip(got, want, strict=False))
                 if not same_items(a, b)), min(len(got), len(want)))


def stranger_or_repeat(given: list, known: list) -> tuple[Any, bool] | None:
    """An id of `given` that is not one of `known`, with False, else one that
    `given` lists a second time, with True; None when each is known and
    listed once (ids compared by `same_items`). Lab 05's admitted and lab 06's
    preempted requests are named so before their order is read."""
    for rid in given:
        if not any(same_items(rid, r) for r in known):
            return rid, False
    for i, rid in enumerate(given):
        if any(same_items(rid, earlier) for earlier in given[:i]):
            return rid, True
    return None


def same_items(got: Any, want: Any) -> bool:
    """The one rule for a right answer (the default comparison of
    `check_function`; every check that compares answers compares them by
    it): equal items, whatever sequence holds them — a tuple of the right
    items is as right as a list of them, at every depth, and a dict is
    compared key by key — and where the expected answer is a count, a count
    (`is_count`): ``2.0`` and ``True`` are refused where ``2`` and ``1`` are
    expected, ``np.int64(2)`` is not. A float expected stays a float (any
    number of its value passes)."""
    return next(_differences(got, want), None) is None


def same_values(got: Any, want: Any) -> bool:
    """`same_items` by value alone: only counts of the wrong type differ
    (``[2.0]`` for ``[2]``), which `wrong_answer` then says."""
    return all(kind == "type" for kind, _got, _want in _differences(got, want))


def wrong_answer(name: str, call: str, got: Any, expected: Any, hint: str | Callable = "", *,
                 none_is_an_answer: bool = False, show: Callable[[Any], str] = repr,
                 answered_before: bool = False) -> CheckResult:
    """The failure for a wrong return value, in the words every check uses.

    `None` from a function that never answers `None` is most likely a missing
    ``return``, and says so; where `None` is one of the answers
    (`none_is_an_answer`: "return None if there is none"), it was returned on
    purpose and is judged like any other value: what was expected, and the
    case's hint. A number of the right value but another type (``2.0`` for
    ``2``), alone or as an item of the answer (`same_values`), says that and
    why, not the case's hint; `show` writes the values (``repr`` stands in
    where it would write the two alike). `answered_before`: the function
    returned a value for an earlier case, so a `None` is one path's missing
    ``return``."""
    if got is None and not none_is_an_answer:
        if answered_before:  # newcomer 42: one policy's branch with no return
            return CheckResult(name, False, _(
                "{call} returned None, where your function returned a value for the cases "
                "before it: the path this call takes ends without `return`.").format(call=call))
        return CheckResult(name, False, _("{call} returned None — did you forget `return`?")
                           .format(call=call))
    if _numbers_equal(_scalar(got), _scalar(expected)):  # refused by type alone: say so
        return CheckResult(name, False, _(
            "{call} returned {got!r} ({got_type}), expected {expected!r} ({want_type}): "
            "the value is right, its type is not.").format(
                call=call, got=got, got_type=type(got).__name__,
                expected=expected, want_type=type(expected).__name__)
            + hint_text(_type_hint(got, expected)))
    if (isinstance(got, str) and isinstance(expected, str)
            and got.strip().casefold() == expected.casefold()):  # newcomer 38: 'Swap'
        return CheckResult(name, False, _(_WORD_FORMS[got.strip() != expected,
                                                      got != got.strip()]).format(
            call=call, got=got, expected=expected))
    wrong_type = next(_differences(got, expected), None)
    if wrong_type is not None and same_values(got, expected):  # an item's type, not its value
        _kind, got_item, want_item = wrong_type
        return CheckResult(name, False, _(
            "{call} returned {got}, expected {expected}: the values are right, not all their "
            "types: {got_item!r} ({got_type}) stands where {want_item!r} ({want_type}) is "
            "expected.").format(
                call=call, got=show(got), expected=show(expected), got_item=got_item,
                got_type=type(got_item).__name__, want_item=want_item,
                want_type=type(want_item).__name__)
            + hint_text(_type_hint(got_item, want_item)))
    if isinstance(got, Set) and is_sequence(expected):  # never right: say why, not the case
        hint = SET_FOR_LIST
    got_text, expected_text = show(got), show(expected)
    if got_text == expected_text:  # a short form must not hide the difference
        got_text, expected_text = repr(got), repr(expected)
    return CheckResult(name, False, _("{call} returned {got}, expected {expected}.")
                       .format(call=call, got=got_text, expected=expected_text)
                       + hint_text(hint))


def check_function(name: str, fn: Callable, cases: Iterable[Case], *,
                   equal: Callable[[Any, Any], bool] | None = None,
                   show: Callable[[Any], str] = repr,
                   diagnose: Callable[[Callable, Case, Any], str] | None = None) -> CheckResult:
    """Run `fn` on each case; pass if every result equals the expected one.

    `equal(got, expected)` compares (default `same_items`: ``==``, a tuple
    and a list of equal items alike, a count only by a count); each call gets `fresh` arguments, so
    `fn` may change what it is given, and the message shows the case's
    arguments as they were before the call; `show` writes a
    value in a wrong answer's message (default ``repr``; lab 07 shortens
    hashes). `diagnose(fn, case, got)` may name the mistake that `got`, `fn`'s
    wrong answer to `case`, shows: one that `fn` makes throughout (lab 09: a
    wrong formula, found by calling `fn` again) or one in this case (lab 06:
    where its victims part from the walk's); its text ('' for none) then
    stands in for the case's hint. If any case
    expects `None`, `None` is one of the function's answers and a wrong
    `None` is judged like any wrong value (`wrong_answer`).
    """
    require_function(name, fn)
    equal = equal or same_items
    cases = list(cases)
    none_is_an_answer = any(case.expected is None for case in cases)
    answered = False  # a value returned for an earlier case
    for case in cases:
        call = case.call_text(function_name(fn, name))
        args, kwargs = fresh((case.args, case.kwargs))
        got, failed = call_learner(name, fn, call, *args, expected=case.expected, show=show,
                                   hint=case.hint, elsewhere=other_cases(cases, case), **kwargs)
        if failed is not None:
            return failed
        if not equal(got, case.expected):
            hint = ((diagnose(fn, case, got) if diagnose and got is not None else "")
                    or _kind_note(got, case.expected) or case.hint)
            return wrong_answer(name, call, got, case.expected, hint,
                                none_is_an_answer=none_is_an_answer, show=show,
                                answered_before=answered)
        answered = answered or got is not None
    return CheckResult(name, True, _("all {n} cases pass").format(n=len(cases)))


def other_cases(cases: list[Case], case: Case) -> Iterator[Case]:
    """Every case of `cases` but `case`, in order: where `raised` tries the
    function when it raised on `case`."""
    return (other for other in cases if other is not case)


FLOAT_FOR_INT = N_("a count is an int, but `/` (and numpy's ceil) give floats, even 8 / 4 = "
                   "2.0: count with `//`, which keeps an int (to round up: -(-a // b))")
"""The hint for a whole float where an int was expected (`wrong_answer`)."""

WORD_FOR_OTHER = N_("the answer is a word, a str such as {expected!r}, never a value of type "
                    "{kind}: return the word itself")
"""The note for anything but a str where a word was expected (`_kind_note`)."""

SET_FOR_LIST = N_("a set has no order (and no repeats), so it is never the answer: "
                  "return a list, in the order the exercise asks for")
"""The hint for a set where a sequence was expected (`wrong_answer`)."""

BOOL_FOR_INT = N_("a comparison gives a bool (True or False), not a count, although True == 1: "
                  "return the number itself, an int")
"""The hint for a bool where an int was expected (`wrong_answer`)."""


def _type_hint(got: Any, expected: Any) -> str:
    """Why a number of the right value has the wrong type, where a count was
    expected: a float (most often from `/`) or a bool (from a comparison)."""
    got = _scalar(got)
    if not is_count(expected):
        return ""
    if isinstance(got, bool):
        return BOOL_FOR_INT
    if isinstance(got, numbers.Real) and not isinstance(got, numbers.Integral):
        return FLOAT_FOR_INT
    return ""


def _kind_note(got: Any, expected: Any) -> str:
    """The note for an answer of a kind the expected one never is, whatever the
    check: where a count is expected, text, a bool or a fraction
    (`never_a_count`; newcomer 40: ``(n + k) / bs`` was told a case's story,
    newcomer 42: ``'1'``); where a word is, anything but a str (newcomer 43:
    ``True`` for ``'swap'``). '' otherwise. A check's own diagnosis comes
    first: it can say more."""
    from ._count_notes import never_a_count  # it builds on this module

    if is_count(expected):
        return never_a_count(got)
    if isinstance(expected, str) and got is not None and not isinstance(got, str):
        return _(WORD_FOR_OTHER).format(expected=expected, kind=type(got).__name__)
    return ""


def _numbers_equal(a: Any, b: Any) -> bool:
    """Two numbers of equal value (``2.0`` and ``2``), whatever their types."""
    return isinstance(a, numbers.Number) and isinstance(b, numbers.Number) and a == b


#: The right word returned in another form, by (in another case, with blanks around it).
_WORD_FORMS = {
    (True, False): N_("{call} returned {got!r}, expected {expected!r}: the word is right, "
                      "written with other capitals; return it exactly as the exercise writes "
                      "it."),
    (False, True): N_("{call} returned {got!r}, expected {expected!r}: the word is right, with "
                      "blank characters around it; return it exactly as the exercise writes it."),
    (True, True): N_("{call} returned {got!r}, expected {expected!r}: the word is right, "
                     "written with other capitals and with blank characters around it; return "
                     "it exactly as the exercise writes it."),
}


def formula_mistake(fn: Callable, cases: Iterable[Case],
                    formulas: Iterable[tuple[Callable, str]]) -> str:
    """The hint (marked ``N_()``, said in today's language) of the first of
    `formulas`, ``(wrong_formula, hint)`` pairs, that `fn` agrees with on
    every one of `cases` (fresh arguments each call): a mistake the function
    makes throughout, named whichever case it first fails. '' where it
    follows none, or raises (that error is a case's to say); a formula that
    raises on a case is simply not the one followed."""
    cases = list(cases)
    try:
        answers = [fn(*fresh(case.args)) for case in cases]
    except Exception:
        return ""
    for formula, hint in formulas:
        if all(_agrees(answer, formula, case.args) for answer, case in zip(answers, cases,
                                                                         strict=True)):
            return _(hint)
    return ""


def _agrees(answer: Any, formula: Callable, args: tuple) -> bool:
    """Whether `answer` is what `formula` gives for `args`; a formula that raises
    there is not the mistake made (the others are still tried)."""
    try:
        return same_items(answer, formula(*fresh(args)))
    except Exception:
        return False


def full_stop(verdict: str) -> str:
    """`verdict` ending as a sentence does, before a hint follows: a full stop
    in the current language where it ends without one ("... the expected
    values.  Hint: ...", not "... values  Hint: ...")."""
    if verdict.rstrip().endswith((".", "!", "?", "。", "！", "？")):
        return verdict
    return _("{verdict}.").format(verdict=verdict)


def hint_text(hint: str | Callable[[], str]) -> str:
    """``"  Hint: ..."`` to follow a verdict, in the current language ('' for no
    hint). A hint made at import time, marked ``N_()``, is translated here; a
    callable (a cached grid's case) makes its hint now, in today's language."""
    if callable(hint):
        hint = hint()
    return _("  Hint: {hint}").format(hint=_(hint)) if hint else ""
