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
    every = len(lab04c.PUZZLES["gather"])
    result = lab04c._verdict("gather", [{"max_diff": 0.0, "nan": False}] * every, 1, "Boom")
    assert not result.passed and "stopped early (exit 1): Boom" in result.message
    result = lab04c._verdict("gather", [{"max_diff": 0.0, "nan": False}] * every, 0, "")
    assert result.passed


#: what a NaN on each case says caused it (newcomer 14: one text blamed a read of
#: "a slot outside the sequence" in the merge, which has none, and for a decode
#: kernel that read a KV head past the cache's)
def _nan_causes(puzzle, case):
    if puzzle == "gather":
        return ("so your kernel read one", "a padding element of a block or a head")
    if puzzle == "decode":
        return ("read one", "a KV head past the cache's", "h // GROUP", "online softmax")
    splits, empty, shift = case[1:4]
    if len(empty) == splits:
        return ("every split is empty", "use 0 in place of the largest lse")
    if shift:
        return (f"around {shift:g}", "subtract the largest lse before exp",
                "overflows" if shift > 0 else "underflows")
    return ("subtract the largest lse", "mask")


@pytest.mark.parametrize("puzzle, done", [
    (puzzle, done) for puzzle in ("gather", "decode", "merge")
    for done in range(len(lab04c.PUZZLES[puzzle]))])
def test_a_nan_names_its_likely_cause_in_each_case(puzzle, done):
    cases = lab04c.PUZZLES[puzzle]
    results = [{"max_diff": 0.0, "nan": False}] * done + [{"max_diff": 0.0, "nan": True}]
    result = lab04c._verdict(puzzle, results, 0, "")
    assert not result.passed
    assert result.message.startswith(f"on {lab04c._DESCRIBE[puzzle](cases[done])}: returned "
                                     "NaN: "), result.message
    for words in _nan_causes(puzzle, cases[done]):
        assert words in result.message, (words, result.message)
    if puzzle == "merge":                      # the merge reads no slot of any sequence
        assert "slot" not in result.message, result.message


@pytest.mark.parametrize("puzzle", ["gather", "decode"])
def test_a_far_case_is_in_gather_and_decode_and_its_miss_names_64_bits(puzzle):
    """Newcomer 14: 32-bit block offsets passed lab 04c while lab 04 stopped
    them. Each of these puzzles has one case whose blocks start past 2^32
    elements; a difference there names the cast, a pass says it was checked,
    and a far cache that could not be mapped is said to leave it unchecked."""
    cases = lab04c.PUZZLES[puzzle]
    far = [i for i, case in enumerate(cases) if case[-1] is True]
    assert len(far) == 1
    right = [{"max_diff": 0.0, "nan": False}]
    result = lab04c._verdict(puzzle, right * far[0] + [{"max_diff": 2.0, "nan": False}], 0, "")
    assert not result.passed
    assert "its blocks start past 2^32 elements: is off by up to 2" in result.message
    assert "Cast the block ids to tl.int64" in result.message
    result = lab04c._verdict(puzzle, right * len(cases), 0, "")
    assert result.passed and "a cache past 2^32 elements" in result.message
    results = right * far[0] + [{"skipped": "OSError: no room"}] + right * (len(cases) - 1
                                                                             - far[0])
    result = lab04c._verdict(puzzle, results, 0, "")
    assert result.passed and f"all {len(cases) - 1} cases" in result.message
    assert "could not be mapped here, so 64-bit offsets went unchecked: OSError: no room" \
        in result.message
