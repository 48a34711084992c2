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

import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..i18n import N_, _

__all__ = ["NOT_WRITTEN", "Case", "CheckResult", "call_learner", "check_function",
           "hint_text", "not_written", "require_function"]

NOT_WRITTEN = N_("not written yet: replace the `...` / NotImplementedError with your code")
"""English, as every message is written; `_(NOT_WRITTEN)` is what the learner reads."""


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


def not_written(name: str, fn: Callable, err: NotImplementedError) -> CheckResult:
    """The stub's NotImplementedError — raised by `fn` itself, or by another
    stub it calls (say an earlier exercise's function still unwritten)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    code = getattr(fn, "__code__", None)
    if tb is not None and code is not None and tb.tb_frame.f_code is not code:
        culprit = tb.tb_frame.f_code.co_name
        return CheckResult(name, False, _("your function calls `{culprit}`, which is not "
                                          "written yet: write it first, or call pagedkit's "
                                          "own version").format(culprit=culprit))
    return CheckResult(name, False, _(NOT_WRITTEN))


def require_function(name: str, fn: object) -> None:
    """Misuse, not a wrong answer: the check needs the function itself."""
    if not callable(fn):
        raise TypeError(_("{name}: give the check your function itself (no parentheses), "
                          "got {type}").format(name=name, type=type(fn).__name__))


def call_learner(name: str, fn: Callable, call: str, *args: Any, hint: str | Callable = "",
                 **kwargs: Any) -> tuple[Any, CheckResult | None]:
    """Run the learner's function: ``(result, None)``, or ``(None, failure)`` if
    it raised — "not written yet" for the stub's NotImplementedError, else the
    call, the exception and the hint."""
    try:
        return fn(*args, **kwargs), None
    except NotImplementedError as err:
        return None, not_written(name, fn, err)
    except Exception as err:  # the learner's bug, reported instead of raised
        return None, CheckResult(name, False, _("{call} raised {error}: {message}").format(
            call=call, error=type(err).__name__, message=err) + hint_text(hint))


def check_function(name: str, fn: Callable, cases: Iterable[Case], *,
                   equal: Callable[[Any, Any], bool] | None = None,
                   prepare: Callable[[Case], Case] | None = None,
                   show: Callable[[Any], str] = repr,
                   diagnose: Callable[[Callable, Any], str] | None = None) -> CheckResult:
    """Run `fn` on each case; pass if every result equals the expected one.

    `equal(got, expected)` compares (default ``==``); `prepare` builds fresh
    arguments per case (for functions that mutate what they are given);
    `show` writes a value in a wrong answer's message (default ``repr``; lab 07
    shortens hashes), and ``repr`` stands in where it would write the two
    values alike. `diagnose(fn, got)` may name a known mistake that `fn`
    makes throughout, `got` being one wrong answer (lab 09: a wrong formula);
    its text ('' for none) then stands in for the case's hint.
    """
    require_function(name, fn)
    equal = equal or (lambda got, want: got == want)
    cases = list(cases)
    for case in cases:
        case = prepare(case) if prepare else case
        call = case.call_text(getattr(fn, "__name__", name))
        got, failed = call_learner(name, fn, call, *case.args, hint=case.hint, **case.kwargs)
        if failed is not None:
            return failed
        if got is None and case.expected is not None:
            return CheckResult(name, False, _("{call} returned None — did you forget `return`?")
                               .format(call=call))
        if not equal(got, case.expected):
            if _numbers_equal(got, case.expected):  # refused by type alone: say so, not the hint
                return CheckResult(name, False, _(
                    "{call} returned {got!r} ({got_type}), expected {expected!r} ({want_type}): "
                    "the value is right, its type is not.").format(
                        call=call, got=got, got_type=type(got).__name__,
                        expected=case.expected, want_type=type(case.expected).__name__))
            got_text, expected_text = show(got), show(case.expected)
            if got_text == expected_text:  # a short form must not hide the difference
                got_text, expected_text = repr(got), repr(case.expected)
            hint = (diagnose(fn, got) if diagnose else "") or case.hint
            return CheckResult(name, False, _("{call} returned {got}, expected {expected}.")
                               .format(call=call, got=got_text, expected=expected_text)
                               + hint_text(hint))
    return CheckResult(name, True, _("all {n} cases pass").format(n=len(cases)))


def _numbers_equal(a: Any, b: Any) -> bool:
    """Two numbers of equal value (``2.0`` and ``2``), whatever their types."""
    return isinstance(a, numbers.Number) and isinstance(b, numbers.Number) and a == b


def hint_text(hint: str | Callable[[], str]) -> str:
    """``"  Hint: ..."`` to follow a verdict, in the current language ('' for no
    hint). A hint made at import time, marked ``N_()``, is translated here; a
    callable (a cached grid's case) makes its hint now, in today's language."""
    if callable(hint):
        hint = hint()
    return _("  Hint: {hint}").format(hint=_(hint)) if hint else ""
