"""The one rule for an answer that raises (`pagedkit.exercises.raised`).

Newcomer 16, finding 7: an answer that raised got the case's hint run into the
error ("...name 'num_tokns' is not defined  Hint: 4 tokens exactly fill one block
of 4"): a typo's NameError has nothing to do with the case's idea. But an error
on one case alone is the case's (lab 09's closed form divides by zero at a = 1,
and that case's hint says to mind it), so its hint stays. Every check of labs
00-09 that calls a Python function is given both: an answer that raises on
every case gets its call and its error alone; one that raises on one case and
runs on the others gets that case's hint, where the check has case hints."""

import importlib
import importlib.util
from pathlib import Path

import pytest
import torch

LABS = ("lab00", "lab01", "lab02", "lab03", "lab04", "lab05", "lab06", "lab07", "lab08", "lab09")
#: checks that take a Triton kernel (@triton.jit), not a Python function: they refuse one
KERNELS = {("lab04", "paged_kernel")}
SOLUTIONS = Path(__file__).resolve().parents[2] / "labs" / "solutions"
ERROR = "raised ZeroDivisionError: division by zero"

#: (lab, check) -> (the case an answer raises on, counted from 0 in the order the
#: check calls them; how its hint begins). The first case, but where that has no hint.
ONE_CASE = {
    ("lab00", "blocks_for"): (0, "4 tokens exactly fill one block of 4"),
    ("lab01", "cached_kv_reads"): (0, "one new token comes from the prefill alone"),
    ("lab01", "kv_bytes_per_token"): (0, "the tiny model: 4 layers, 2 KV heads"),
    ("lab01", "max_batch"): (0, "OPT-13B on a 40 GiB GPU: the weights come first"),
    ("lab02", "first_fit"): (0, "an empty address space: the region starts at 0"),
    ("lab02", "reservation_size"): (0, "max reserves the longest a request might grow"),
    ("lab02", "waste_breakdown"): (0, "one request under 'max': 5 prompt tokens stored"),
    ("lab03", "token_at"): (0, "slot 28 = block 7, offset 0; block 7 is logical block 0"),
    ("lab03", "blocks_needed"): (0, "an empty sequence has no blocks"),
    ("lab03", "append_slots"): (0, "an empty table takes the head of the free list (block 5)"),
    # the first case (5 tokens, blocks of 4, one query head per KV head) has no label
    ("lab04", "paged_decode_attention"): (1, "the context fills exactly 3 block(s); 2 query "
                                             "heads share each KV head"),
    ("lab05", "finish_steps"): (0, "one batch holds everyone"),
    ("lab05", "admit"): (0, "each prompt takes its tokens from the step's budget; c finds none"),
    ("lab06", "tokens_to_recompute"): (0, "with nothing cached, every token is computed again"),
    ("lab06", "preemption_mode"): (0, "swap: 2 x 3 blocks x 1000 B / 1e6 B/s = 6 ms"),
    ("lab06", "choose_victims"): (0, "3 free blocks cover the 3 needed"),
    ("lab07", "chain_hashes"): (0, "one full block: its parent is ROOT_HASH"),
    ("lab07", "copy_on_write"): (0, "ref count 1: nobody else reads the block, so no copy"),
    ("lab07", "sharing_blocks"): (0, "the prompt fills 2 whole blocks"),
    ("lab08", "top_p_filter"): (0, "sort by probability; keep tokens until the kept mass"),
    ("lab08", "pack_step"): (0, "one prompt of 6 tokens from position 0"),
    ("lab09", "tokens_that_fit"): (0, "Llama-2-7B in fp16: 2 x 32 x 32 x 128 x 2 bytes"),
    ("lab09", "best_num_drafts"): (0, "a step with k drafts costs 1 + k x draft_cost"),
}
#: checks without case hints: the call names the case (lab 04's softmax and merge
#: cases, by their label), or one hint serves every case (gather_kv's)
NO_CASE_HINTS = {("lab04", "gather_kv"), ("lab04", "online_softmax_update"),
                 ("lab04", "merge_states")}


def every_check():
    for lab in LABS:
        for name, check in importlib.import_module(f"pagedkit.exercises.{lab}").CHECKS.items():
            if (lab, name) not in KERNELS:
                yield pytest.param(lab, name, check, id=f"{lab}.{name}")


def solution(lab: str, name: str):
    (path,) = SOLUTIONS.glob(f"{lab}_*.py")
    spec = importlib.util.spec_from_file_location(f"solutions_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def _key(value):
    """Arguments as comparable data (a tensor's repr may elide its values)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", repr(value.tolist()))
    if isinstance(value, (list, tuple)):
        return type(value).__name__, tuple(_key(v) for v in value)
    if isinstance(value, dict):
        return "dict", tuple((k, _key(v)) for k, v in value.items())
    return repr(value)


def raising_on_one_case(right, which: int):
    """`right`, but dividing by zero on the arguments of the check's call number
    `which` (and only on those): an error of that case alone."""
    seen = []

    def answer(*args, **kwargs):
        key = _key((args, kwargs))
        if key not in seen:
            seen.append(key)
        if seen.index(key) == which:
            return 1 / 0
        return right(*args, **kwargs)
    return answer


def _typo(*args, **kwargs):
    return num_tokns  # noqa: F821 -- the learner's typo


def _divides_by_zero(*args, **kwargs):
    return 1 / 0


def test_every_check_is_listed_once():
    checks = {(lab, name) for lab, name, _check in (p.values for p in every_check())}
    assert set(ONE_CASE) | NO_CASE_HINTS == checks and not set(ONE_CASE) & NO_CASE_HINTS


@pytest.mark.parametrize("lab, name, check", list(every_check()))
def test_an_answer_that_raises_on_every_case_gets_its_error_and_no_case_hint(lab, name, check):
    for answer, error in ((_typo, "raised NameError: name 'num_tokns' is not defined"),
                          (_divides_by_zero, ERROR)):
        result = check(answer)
        assert not result.passed
        assert result.message.endswith(error), result.message
        assert "Hint" not in result.message


@pytest.mark.parametrize("lab, name, check", list(every_check()))
def test_an_answer_that_raises_on_one_case_gets_that_cases_hint(lab, name, check):
    which, hint = ONE_CASE.get((lab, name), (0, None))
    result = check(raising_on_one_case(solution(lab, name), which))
    assert not result.passed
    assert ERROR in result.message, result.message
    after = result.message.split(ERROR, 1)[1]
    if hint is None:
        assert after == "", result.message
    else:
        assert after.startswith(f".  Hint: {hint}"), result.message  # a sentence ends first
        assert after.count("Hint") == 1, result.message
