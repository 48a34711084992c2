"""An answer that raises on a check's first case and loops forever on the others
(``while True: pass``) never hangs the check. Newcomer: the check stopped at the
raised case, but the one rule for raised answers (`pagedkit.exercises.raised`) tries
the function on the check's other cases, to tell an error of that case alone (whose
hint helps) from the code's — and there it looped for good. Those tries now run
within a count of bytecodes (`exercises.PROBE_BYTECODES`), not a clock: a busy
machine never trips it. Every check of labs 00-09 that calls a Python function,
enumerated as tests/labs/test_raised_answers.py enumerates them."""

import os
import signal
import sys

import pytest

from pagedkit import exercises

from .test_raised_answers import ERROR, every_check, solution

#: this test's own alarm, for a check that would hang (the fix makes each take about a
#: second); the guard in the package has none
HUNG_AFTER_S = int(os.environ.get("PAGEDKIT_TEST_HUNG_AFTER_S", "120"))


class Hung(BaseException):
    pass


def _raises_then_loops():
    calls = []

    def answer(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            return 1 / 0
        while True:
            pass
    return answer, calls


def _alarm(_signum, _frame):
    raise Hung


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="the test's alarm needs SIGALRM")
@pytest.mark.parametrize("lab, name, check", list(every_check()))
def test_an_answer_that_raises_then_loops_forever_gets_its_error(lab, name, check):
    answer, calls = _raises_then_loops()
    tracing = sys.gettrace()  # a coverage run's, or None
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HUNG_AFTER_S)
    try:
        result = check(answer)
    except Hung:
        pytest.fail(f"{lab}.{name} hung on the answer's later cases ({len(calls)} calls)")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert not result.passed
    assert result.message.endswith(ERROR), result.message  # the error, no case's hint
    assert sys.gettrace() is tracing  # the probe's counting is taken off again


def _bytecodes(fn, counts):
    """`fn`, counting the bytecodes each call runs into `counts`, as the probe counts."""
    def counted(*args, **kwargs):
        n = [0]

        def count(frame, event, _arg):
            if event == "call":
                frame.f_trace_lines, frame.f_trace_opcodes = False, True
            elif event == "opcode":
                n[0] += 1
            return count
        tracing = sys.gettrace()
        sys.settrace(count)
        try:
            return fn(*args, **kwargs)
        finally:
            sys.settrace(tracing)
            counts.append(n[0])
    return counted


@pytest.mark.parametrize("lab, name, check", list(every_check()))
def test_the_probes_count_is_a_thousand_times_what_a_solution_runs_on_a_case(lab, name, check):
    """The count never stands in for a clock: each solution runs on any one case in
    under a thousandth of it (the most, lab 09's best_num_drafts: about 2,800)."""
    counts = []
    assert check(_bytecodes(solution(lab, name), counts)).passed
    assert counts and max(counts) * 1000 <= exercises.PROBE_BYTECODES, (max(counts), lab, name)
