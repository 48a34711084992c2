"""The type note for an answer that should be one count and is of a kind no
count can be: text (``'3'``), a bool (``True``), a number with a fraction
(``10.1``).

`wrong_answer` gives its type notes (`BOOL_FOR_INT`, `FLOAT_FOR_INT`) where
the value is right and the type is not (``8.0`` for ``8``); a check whose
answer is one count hands `one_count` to `check_function` as its `diagnose`
(or calls `never_a_count` in its own), so the same notes stand in for the
case's hint whatever the value: lab 01's three checks, lab 06's
tokens_to_recompute, lab 09's two (issue #26). A case's hint explains a
value, and says nothing to ``'3'`` or ``True``, which no value makes right.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

from ..i18n import N_
from . import BOOL_FOR_INT, FLOAT_FOR_INT, _scalar

__all__ = ["STR_FOR_INT", "never_a_count", "one_count"]

STR_FOR_INT = N_("text (a str) is not a count, even where it reads as one ('8' != 8): return the "
                 "number itself, an int")
"""The note for text where an int was expected (`never_a_count`)."""


def never_a_count(got: Any, fraction: str = FLOAT_FOR_INT) -> str:
    """The note for `got`, where one count is expected, if nothing of its kind
    is one: text, a bool, or a finite number with a fraction (`fraction`: the
    check's own words, `FLOAT_FOR_INT` by default); '' for anything else (an
    int, a whole float, a list: the case's hint says what is wrong)."""
    got = _scalar(got)
    if isinstance(got, str):
        return STR_FOR_INT
    if isinstance(got, bool):
        return BOOL_FOR_INT
    if (isinstance(got, numbers.Real) and not isinstance(got, numbers.Integral)
            and math.isfinite(got) and not float(got).is_integer()):
        return fraction
    return ""


def one_count(_fn: Callable, _case: Any, got: Any) -> str:
    """`never_a_count`, as `check_function`'s `diagnose` for a check whose
    answer is one count (it does not call the learner's function again)."""
    return never_a_count(got)
