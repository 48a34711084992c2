"""An answer that raises on a check's first case and loops forever on the others
(``while True: pass``) never hangs the check. Newcomer: the check stopped at the
raised case, but the one rule for raised answers (`pagedkit.exercises.raised`) tries
the function on the check's other cases, to tell an error of that case alone (whose
hint helps) from the code's — and there it looped for good. Those tries now run
within a count of bytecodes (`exercises.PROBE_BYTECODES`) and a wall clock
(`exercises.PROBE_SECONDS`: newcomer 28's loops of library calls, ``time.sleep`` or a
torch matmul, ran few bytecodes and were waited on for minutes). Every check of labs
00-09 that calls a Python function, enumerated as tests/labs/test_raised_answers.py
enumerates them."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

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


def _checked_under_alarm(check, answer, what: str):
    """`check(answer)` under this test's own alarm (`HUNG_AFTER_S`): its result, and
    the alarm's handler and time left just after (the probe must give them back)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HUNG_AFTER_S)
    try:
        result = check(answer)
        return result, (signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)[0])
    except Hung:
        pytest.fail(f"{what} hung")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="the test's alarm needs SIGALRM")
@pytest.mark.parametrize("lab, name, check", list(every_check()))
def test_an_answer_that_raises_then_loops_forever_gets_its_error(lab, name, check):
    answer, _calls = _raises_then_loops()
    tracing = sys.gettrace()  # a coverage run's, or None
    result, alarm = _checked_under_alarm(check, answer, f"{lab}.{name} on the answer's later cases")
    assert not result.passed
    assert result.message.endswith(ERROR), result.message  # the error, no case's hint
    assert sys.gettrace() is tracing  # the probe's counting is taken off again
    assert alarm[0] is _alarm and alarm[1] > 0  # the probe's alarm gave this test's own back


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


def _recursion_bare_except(*args, **kwargs):
    try:
        return _recursion_bare_except(*args, **kwargs)
    except:  # noqa: E722 -- each new call starts inside its own try
        return _recursion_bare_except(*args, **kwargs)


LATER = {f.__name__: f for f in (_loop, _bare_except, _bare_except_calls, _except_base,
                                   _nested_bare_except, _catches_and_returns, _recursion,
                                   _recursion_except_exception, _recursion_bare_except)}


# Newcomer 28 (N1, N2): loops whose time goes to library calls, stopped by the wall clock
# (`exercises.PROBE_SECONDS`) and, for a call that waits or a loop in an ``except:`` block
# that calls nothing, by the probe's alarm. Each kind runs in its own child process, on the
# first check of each lab, with the clock cut to SLOW_PROBE_S to keep the run short
# (`test_the_clock_stops_a_loop_of_library_calls` runs the real one).

def _sleeps(*_a, **_k):
    while True:
        time.sleep(0.00001)


def _sleeps_bare_except(*_a, **_k):
    while True:
        try:  # noqa: SIM105
            time.sleep(0.001)
        except:  # noqa: E722
            pass


def _matmuls(*_a, **_k):
    while True:
        torch.randn(64, 64) @ torch.randn(64, 64)


def _matmuls_except_base(*_a, **_k):
    while True:
        try:
            torch.randn(64, 64) @ torch.randn(64, 64)
        except BaseException:
            continue


def _sorts(*_a, **_k):
    while True:
        sorted(range(10_000))


def _waits(*_a, **_k):
    time.sleep(3600)


def _loops_in_except(*_a, **_k):
    try:
        while True:
            pass
    except:  # noqa: E722
        while True:
            pass


SLOW = {f.__name__: f for f in (_sleeps, _sleeps_bare_except, _matmuls, _matmuls_except_base,
                                  _sorts, _waits, _loops_in_except)}
SLOW_PROBE_S = 0.3


def _first_of_each_lab():
    seen = set()
    for param in every_check():
        if param.values[0] not in seen:
            seen.add(param.values[0])
            yield param


def _put_back() -> bool:
    """The probe's trace, profile, alarm handler and timer are all taken off again."""
    return (sys.gettrace() is None and sys.getprofile() is None
            and signal.getsignal(signal.SIGALRM) is signal.SIG_DFL
            and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))
CHILD_LIMIT_S = int(os.environ.get("PAGEDKIT_TEST_HUNG_CHILD_S", "600"))


def _first_raises(later):
    calls = []

    def answer(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            return 1 / 0
        return later(*args, **kwargs)
    return answer


def _child(kinds=None) -> None:
    """Every (later kind, check): one JSON line each, written as it comes; `kinds`: one
    of SLOW's, on the first check of each lab."""
    if kinds is None:
        kinds, checks = LATER, every_check
    else:
        exercises.PROBE_SECONDS = SLOW_PROBE_S
        kinds, checks = {kinds: SLOW[kinds]}, _first_of_each_lab
    for kind, later in kinds.items():
        for lab, name, check in (p.values for p in checks()):
            result = check(_first_raises(later))
            print(json.dumps([kind, lab, name, result.passed, result.message, _put_back()]),
                  flush=True)


def _run_child(call: str, limit_s: int) -> dict:
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(root / "src"), str(root), os.environ.get("PYTHONPATH", "")]))
    try:
        out = subprocess.run([sys.executable, "-c", "from tests.labs.test_hung_answers import "
                              f"_child; {call}"], capture_output=True, text=True, env=env,
                             cwd=root, timeout=limit_s).stdout
    except subprocess.TimeoutExpired as hung:
        out = hung.stdout.decode() if isinstance(hung.stdout, bytes) else hung.stdout or ""
    results = {}
    for line in out.splitlines():
        kind, lab, name, passed, message, untraced = json.loads(line)
        results[kind, lab, name] = passed, message, untraced
    return results


@pytest.fixture(scope="module")
def child_results():
    return _run_child("_child()", CHILD_LIMIT_S)


@pytest.mark.parametrize("kind", list(LATER))
@pytest.mark.parametrize("lab, name, check", list(every_check()))
def test_an_answer_that_raises_then_loops_or_recurses_gets_its_error(child_results, kind, lab,
                                                                     name, check):
    assert (kind, lab, name) in child_results, f"{lab}.{name} hung on {kind}"
    passed, message, untraced = child_results[kind, lab, name]
    assert not passed
    assert message.endswith(ERROR), message  # the error, no case's hint
    assert untraced  # the probe's trace and profile functions are taken off again


#: a child's limit for one SLOW kind: about 10 checks x SLOW_PROBE_S, and room for a loaded box
SLOW_CHILD_S = int(os.environ.get("PAGEDKIT_TEST_SLOW_CHILD_S", "120"))


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="the probe's alarm needs SIGALRM")
@pytest.mark.parametrize("kind", list(SLOW))
def test_an_answer_that_raises_then_loops_over_library_calls_gets_its_error(kind):
    results = _run_child(f"_child({kind!r})", SLOW_CHILD_S)
    for lab, name, _check in (p.values for p in _first_of_each_lab()):
        assert (kind, lab, name) in results, f"{lab}.{name} hung on {kind}"
        passed, message, put_back = results[kind, lab, name]
        assert not passed
        assert message.endswith(ERROR), message
        assert put_back, (lab, name)


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="the test's alarm needs SIGALRM")
@pytest.mark.parametrize("later", [_sleeps, _waits], ids=lambda f: f.__name__)
def test_the_clock_stops_a_loop_of_library_calls(later):
    """The real `PROBE_SECONDS`, in this process, under this test's own alarm: the check
    answers (no limit on how fast beyond the alarm's), and the alarm is this test's again."""
    from pagedkit.exercises import lab00
    result, alarm = _checked_under_alarm(lab00.check_blocks_for, _first_raises(later),
                                         f"lab00.blocks_for on {later.__name__}")
    assert not result.passed and result.message.endswith(ERROR), result.message
    assert alarm[0] is _alarm and alarm[1] > 0


#: a child process that imports nothing but lab 00's check: an answer that raises, then
#: imports torch (its first import there, well over the probe's PROBE_SECONDS, set to 50 ms
#: here so that it runs out in the import however fast the machine: the 2 s default did
#: not on a quick one); then torch, imported again and used
IMPORT_CHILD = """
import json, sys
import pagedkit.exercises
from pagedkit.exercises import lab00
pagedkit.exercises.PROBE_SECONDS = 0.05
assert "torch" not in sys.modules, "lab 00's check imports torch itself: pick another library"
calls = []
def answer(*args):
    calls.append(1)
    if len(calls) == 1:
        return 1 / 0
    import torch
    return 0
result = lab00.check_blocks_for(answer)
import torch
print(json.dumps([result.passed, result.message, float(torch.ones(2).sum())]))
"""


def test_an_import_the_probe_stops_in_is_finished_first():
    """The probe stops only the learner's own code: an import the answer starts (the
    import machinery, ``<frozen importlib._bootstrap>``, and the methods dataclasses
    generate, ``<string>``) runs to its end, so the module works after the check;
    stopping it part-way left torch half-imported for the rest of the kernel's life
    (review of 944a5ad)."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(root / "src"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", IMPORT_CHILD], capture_output=True, text=True,
                          env=env, cwd=root, timeout=SLOW_CHILD_S)
    assert done.returncode == 0, done.stderr[-2000:]
    passed, message, total = json.loads(done.stdout.splitlines()[-1])
    assert not passed and message.endswith(ERROR), message
    assert total == 2.0


def test_the_probe_counts_and_stops_the_learners_code_alone():
    """`exercises._learners`: a notebook cell (ipykernel's file, IPython's older
    ``<ipython-input-…>``) or a script is the learner's; the import machinery,
    generated methods (``<string>``), pagedkit and the libraries are not."""
    import dataclasses
    import importlib._bootstrap

    @dataclasses.dataclass
    class Point:
        x: int

    def cell(name):
        return compile("x = 1", name, "exec")
    learners = [cell("/tmp/ipykernel_123/4567.py"), cell("<ipython-input-3-abcdef>"),
                cell(__file__), _raises_then_loops.__code__]
    not_learners = [importlib._bootstrap._find_and_load.__code__, Point.__init__.__code__,
                    cell("<string>"), cell("<frozen importlib._bootstrap>"),
                    exercises.check_function.__code__, json.dumps.__code__,
                    pytest.approx.__code__]
    assert [exercises._learners(code) for code in learners] == [True] * len(learners)
    assert [exercises._learners(code) for code in not_learners] == [False] * len(not_learners)
