"""An answer that raises on a check's first case and loops forever on the others
(``while True: pass``) never hangs the check. Newcomer: the check stopped at the
raised case, but the one rule for raised answers (`pagedkit.exercises.raised`) tries
the function on the check's other cases, to tell an error of that case alone (whose
hint helps) from the code's — and there it looped for good. Those tries now run
within a count of bytecodes (`exercises.PROBE_BYTECODES`), not a clock: a busy
machine never trips it. Every check of labs 00-09 that calls a Python function,
enumerated as tests/labs/test_raised_answers.py enumerates them."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

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
    """`fn`, counting the bytecodes each call runs into `counts`, as the probe counts
    (the learner's own code alone, `exercises._learners`)."""
    def counted(*args, **kwargs):
        n = [0]

        def count(frame, event, _arg):
            if event == "call":
                if not exercises._learners(frame.f_code):
                    return None
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


# Issue #26 leftovers: answers that raise on the first call and then loop in ways a plain
# bytecode count did not stop (its exception caught by a bare ``except:`` or ``except
# BaseException:``, the loop going on untraced), or that recurse. Each kind runs every check
# in a child process, so a hang costs that child's time limit, not the test run.

def _loop(*_a, **_k):
    while True:
        pass


def _bare_except(*_a, **_k):
    x = 0
    while True:
        try:  # noqa: SIM105 -- the learner's loop, as written
            x += 1
        except:  # noqa: E722 -- the learner's bare except
            pass


def _bare_except_calls(*args, **_k):
    while True:
        try:  # noqa: SIM105
            len(args)
        except:  # noqa: E722
            pass


def _except_base(*_a, **_k):
    x = 0
    while True:
        try:  # noqa: SIM105 -- the learner's loop, as written
            x += 1
        except BaseException:
            pass


def _nested_bare_except(*_a, **_k):
    while True:
        try:
            while True:
                pass
        except:  # noqa: E722
            pass


def _catches_and_returns(*_a, **_k):
    try:
        while True:
            pass
    except BaseException:
        return None


def _recursion(*args, **kwargs):
    return _recursion(*args, **kwargs)


def _recursion_except_exception(*args, **kwargs):
    try:
        return _recursion_except_exception(*args, **kwargs)
    except Exception:  # RecursionError too: 2 ** 1000 calls without the probe
        return _recursion_except_exception(*args, **kwargs)


LATER = {f.__name__: f for f in (_loop, _bare_except, _bare_except_calls, _except_base,
                                   _nested_bare_except, _catches_and_returns, _recursion,
                                   _recursion_except_exception)}
CHILD_LIMIT_S = int(os.environ.get("PAGEDKIT_TEST_HUNG_CHILD_S", "600"))


def _first_raises(later):
    calls = []

    def answer(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            return 1 / 0
        return later(*args, **kwargs)
    return answer


def _child() -> None:
    """Every (later kind, check): one JSON line each, written as it comes."""
    for kind, later in LATER.items():
        for lab, name, check in (p.values for p in every_check()):
            result = check(_first_raises(later))
            print(json.dumps([kind, lab, name, result.passed, result.message,
                              sys.gettrace() is None and sys.getprofile() is None]), flush=True)


@pytest.fixture(scope="module")
def child_results():
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(root / "src"), str(root), os.environ.get("PYTHONPATH", "")]))
    try:
        out = subprocess.run([sys.executable, "-c", "from tests.labs.test_hung_answers import "
                              "_child; _child()"], capture_output=True, text=True, env=env,
                             cwd=root, timeout=CHILD_LIMIT_S).stdout
    except subprocess.TimeoutExpired as hung:
        out = hung.stdout.decode() if isinstance(hung.stdout, bytes) else hung.stdout or ""
    results = {}
    for line in out.splitlines():
        kind, lab, name, passed, message, untraced = json.loads(line)
        results[kind, lab, name] = passed, message, untraced
    return results


@pytest.mark.parametrize("kind", list(LATER))
@pytest.mark.parametrize("lab, name, check", list(every_check()))
def test_an_answer_that_raises_then_loops_or_recurses_gets_its_error(child_results, kind, lab,
                                                                     name, check):
    assert (kind, lab, name) in child_results, f"{lab}.{name} hung on {kind}"
    passed, message, untraced = child_results[kind, lab, name]
    assert not passed
    assert message.endswith(ERROR), message  # the error, no case's hint
    assert untraced  # the probe's trace and profile functions are taken off again
