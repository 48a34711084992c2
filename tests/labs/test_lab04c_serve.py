"""Lab 04c's kernels serve LLM("tiny") (#28, `lab04c.serve`).

The reference kernels serve it with tokens equal to transformers' `generate`
and to pagedkit's own run, every call held to pagedkit's: the decode and
store kernels, and the gather and merge kernels composed into a split-KV
decode attention. Each wrong kernel of `wrong_answers.WRONG_SERVED` (of all
four puzzles: newcomer 14 served a decode kernel without the online
softmax's rescaling and a store kernel without the slot guard) stops the run
with that kernel named, beside the right kernel of the other puzzle. One
interpreter process per run (10-25 s on a 2-core machine), so only what no
faster test covers runs here."""

import importlib.util

import pytest

from pagedkit.exercises import lab04c

from .wrong_answers import WRONG, WRONG_SERVED, _solution

#: wrong kernels that serve the tiny model's own calls right: only the large-score probe stops them
ONLY_WITH_LARGE_SCORES = {"merge_weights_without_the_max", "merge_exp_without_any_max"}
#: wrong store kernels right on the engine's batches: only the padding-token probe stops them
ONLY_WITH_A_PADDING_TOKEN = {"store_without_the_slot_guard"}
#: the right kernel each puzzle's kernel serves beside
BESIDE = {"decode_kernel": "store_kv", "store_kv_kernel": "decode", "gather_kernel": "merge",
          "merge_kernel": "gather"}

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="Triton has no wheels here (macOS)")


@pytest.fixture(scope="module")
def solutions():
    return _solution("lab04c_triton_puzzles")


def _kernels(solutions, *puzzles, **wrong):
    return {**{f"{p}_kernel": getattr(solutions, f"{p}_kernel") for p in puzzles}, **wrong}


@needs_triton
@pytest.mark.parametrize("puzzles", [("decode", "store_kv"), ("gather", "merge")],
                         ids=["decode+store_kv", "gather+merge"])
def test_the_reference_kernels_serve_the_tiny_model_like_transformers(solutions, puzzles):
    result = lab04c.serve(**_kernels(solutions, *puzzles))
    assert result.passed, repr(result)
    assert "transformers' generate and pagedkit's own" in result.message
    for puzzle in puzzles:        # serve fails a kernel that never ran; each ran here
        assert f"{puzzle}_kernel " in result.message.split("calls:")[1]


def test_three_wrong_kernels_each_for_serving_each_puzzle():
    assert sorted(WRONG_SERVED) == sorted(BESIDE)
    assert all(len(kernels) >= 3 for kernels in WRONG_SERVED.values()) or \
        importlib.util.find_spec("triton") is None


@needs_triton
@pytest.mark.parametrize("keyword, wrong", [
    pytest.param(keyword, kernel, id=kernel.__name__)
    for keyword, kernels in WRONG_SERVED.items() for kernel in kernels])
def test_a_wrong_kernel_stops_serving_by_name(solutions, keyword, wrong):
    result = lab04c.serve(**_kernels(solutions, BESIDE[keyword], **{keyword: wrong}))
    assert not result.passed
    where = "K/V store" if keyword == "store_kv_kernel" else "decode-attention call"
    assert result.message.startswith(f"your {keyword} stopped serving at {where} "), \
        result.message
    assert f"lab04c.check_{keyword.removesuffix('_kernel')}_kernel" in result.message
    if wrong.__name__ in ONLY_WITH_LARGE_SCORES:    # right on the tiny model's small scores
        assert "asked again with the query scaled by 64" in result.message, result.message
    if wrong.__name__ in ONLY_WITH_A_PADDING_TOKEN:  # the engine's batches have no slot -1
        assert "asked again with a padding token (slot -1)" in result.message, result.message


def test_the_serve_reaches_a_second_tile():
    """Newcomer 14: with contexts of at most 16 tokens (one tile of BLOCK_N)
    a decode kernel that never rescales served right. The default prompts'
    decode contexts take one tile and two."""
    from pagedkit.models import load_tiny

    _, tokenizer = load_tiny()
    lengths = [len(tokenizer(prompt)["input_ids"])
               for prompt in lab04c.serve.__kwdefaults__["prompts"]]
    assert min(lengths) + 1 <= lab04c.BLOCK_N < max(lengths) + 1, lengths


@needs_triton
def test_a_wrong_store_kernel_is_named_not_the_decode_kernel_beside_it(solutions):
    [wrong] = [k for k in WRONG[("lab04c", "store_kv_kernel")]
               if k.__name__ == "store_value_from_key"]
    result = lab04c.serve(**_kernels(solutions, "decode", store_kv_kernel=wrong))
    assert not result.passed
    assert result.message.startswith("your store_kv_kernel stopped serving at K/V store 1 ("), \
        result.message


@needs_triton
def test_serve_refuses_no_kernel_and_two_decode_attentions(solutions):
    with pytest.raises(ValueError, match="needs a kernel"):
        lab04c.serve()
    with pytest.raises(ValueError, match="not both"):
        lab04c.serve(solutions.decode_kernel, merge_kernel=solutions.merge_kernel)


def test_serve_says_a_stub_is_not_written_yet_without_a_process():
    def gather_kernel():
        raise NotImplementedError       # a stub not yet a Triton kernel
    result = lab04c.serve(gather_kernel=gather_kernel)
    assert not result.passed and "not written yet" in result.message
