"""Lab 04c's checks (#28; newcomer 8, findings 3 and 4): the layouts the
puzzles' kernels get, and the verdict on a run whose process died.

The wrong kernels themselves are in `wrong_answers.py` (run by
test_wrong_answers.py); these tests need no Triton."""

import json
import signal
import subprocess
import sys

import pytest

from pagedkit.exercises import lab04c

#: a child process builds each padded puzzle's tensors as its check does, and
#: hands them to a stand-in kernel that prints their shapes and strides
#: (importing the runner sets TRITON_INTERPRET, so not in this process)
_LAYOUTS = """
import json, sys
import torch
from pagedkit.exercises import _puzzle_runner as runner
from pagedkit.exercises.lab04c import BLOCK_N, PUZZLES

class Recorder:
    def __getitem__(self, grid):
        def run(*args, **kw):
            print(json.dumps([[list(a.shape), list(a.stride())] for a in args
                              if isinstance(a, torch.Tensor) and a.dim() >= 3]))
        return run

for puzzle in ("store_kv", "gather", "decode"):
    for case in PUZZLES[puzzle]:
        runner.CASES_RUN[puzzle](Recorder(), case, {"block_n": BLOCK_N}, True)
"""


def test_every_stride_a_puzzle_passes_differs_from_the_sizes_after_it():
    """The lab promises "a stride is never the product of the sizes after
    it": for every tensor of 3 or more dims each padded puzzle passes (the
    K/V input, the caches, gather's output), stride i differs from size i+1
    times stride i+1, so a kernel that multiplies sizes misses. Newcomer 8's
    store kernel ignored stride_block and passed: the blocks were unpadded."""
    done = subprocess.run([sys.executable, "-c", _LAYOUTS], capture_output=True, text=True,
                          check=True)
    calls = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(calls) == sum(len(lab04c.PUZZLES[p]) for p in ("store_kv", "gather", "decode"))
    for tensors in calls:
        assert len(tensors) >= 2         # store_kv: key, value, caches; gather: cache, out; ...
        for shape, stride in tensors:
            for i in range(len(shape) - 1):
                assert stride[i] != shape[i + 1] * stride[i + 1], (shape, stride)


#: how a runner process may die of its kernel touching memory it must not
DEATHS = [(-signal.SIGSEGV, ""), (128 + signal.SIGSEGV, ""), (-signal.SIGBUS, ""),
          (-signal.SIGABRT, "munmap_chunk(): invalid pointer"),
          (128 + signal.SIGABRT, "free(): invalid pointer"),
          (1, "double free or corruption (out)")]


@pytest.mark.parametrize("puzzle", sorted(lab04c.PUZZLES))
@pytest.mark.parametrize("code, stderr", DEATHS)
@pytest.mark.parametrize("done", [0, 1])
def test_a_process_that_died_names_the_case_and_the_likely_cause(puzzle, code, stderr, done):
    """Newcomer 8's store kernel without the slot guard killed the process
    with "munmap_chunk(): invalid pointer" (SIGABRT), and the check said only
    "the interpreter process failed": every such death names the case it
    struck (the first without a result line) and the puzzle's likely cause."""
    cases = lab04c.PUZZLES[puzzle]
    results = [{"max_diff": 0.0, "nan": False}] * done
    result = lab04c._verdict(puzzle, results, code, stderr)
    assert not result.passed
    assert result.message.startswith(f"on {lab04c._DESCRIBE[puzzle](cases[done])} the "
                                     "interpreter process died ("), result.message
    assert stderr in result.message
    assert lab04c._CRASHES[puzzle] in result.message


@pytest.mark.parametrize("code, stderr", DEATHS)
def test_a_process_that_died_after_its_last_case_fails(code, stderr):
    """Heap corruption is found when memory is freed, perhaps after the last
    case printed its (right) result: the check fails, naming the last case."""
    cases = lab04c.PUZZLES["store_kv"]
    results = [{"max_diff": 0.0, "nan": False, "outside": False}] * len(cases)
    result = lab04c._verdict("store_kv", results, code, stderr)
    assert not result.passed
    assert "interpreter process died" in result.message


def test_other_endings_are_not_called_memory_faults():
    """A Python error in the runner, or a process killed by another signal
    (SIGKILL), is reported as the process failing, with its stderr; a run
    with every result that exits 1 stopped early; one that exits 0 passes."""
    for code, stderr in [(1, "Traceback ...\nImportError: no module named triton"),
                         (-signal.SIGKILL, "")]:
        result = lab04c._verdict("gather", [], code, stderr)
        assert not result.passed
        assert "died" not in result.message and "interpreter process failed" in result.message
    result = lab04c._verdict("gather", [{"max_diff": 0.0, "nan": False}] * 6, 1, "Boom")
    assert not result.passed and "stopped early (exit 1): Boom" in result.message
    result = lab04c._verdict("gather", [{"max_diff": 0.0, "nan": False}] * 6, 0, "")
    assert result.passed
