"""Lab 04's checks say what is wrong with an answer whose values are right but
whose shape or dtype is not, in both languages (newcomer 29, findings 1, 2, 8
and 9): a vector where one number belongs crashed online_softmax_update's
check (RuntimeError); an acc of shape [1, D] or a float32 answer printed two
identical-looking lists and a hint about another mistake; a float16 gather or
attention got "off by up to 0.0002" and the gather hint; a Triton kernel that
raised in the interpreter got no hint at all."""

import importlib.util

import pytest
import torch

from pagedkit.exercises import lab04
from pagedkit.kernels.reference import gather_kv

OUTPUTS = ("row_max", "row_sum", "acc")


def online_right(m, s, acc, scores, v):
    new_max = torch.maximum(m, scores.max())
    safe = new_max if torch.isfinite(new_max) else torch.zeros_like(new_max)
    alpha, p = torch.exp(m - safe), torch.exp(scores - safe)
    return new_max, s * alpha + p.sum(), acc * alpha + p @ v


def online_vector(m, s, acc, scores, v):  # the kernel's lines keep [BLOCK_G] vectors
    new_max = torch.maximum(m, scores.max())
    safe = new_max if torch.isfinite(new_max) else torch.zeros_like(new_max)
    alpha, p = torch.exp(m - safe), torch.exp(scores - safe)
    return torch.maximum(m, scores), s * alpha + p, acc * alpha + p @ v


def _changed(index: int, change):
    def answer(*args):
        got = list(online_right(*args))
        got[index] = change(got[index], args)
        return tuple(got)
    return answer


# (output, what the answer does, the answer, words the message must hold in any language)
SHAPES = [
    ("row_max", "not reduced", _changed(0, lambda x, a: online_vector(*a)[0]), ["row_max"]),
    ("row_max", "[1, 1]", _changed(0, lambda x, a: x.reshape(1, 1).expand(1, 2)), ["[1, 2]"]),
    ("row_max", "empty", _changed(0, lambda x, a: x.reshape(1)[:0]), ["[0]"]),
    ("row_sum", "not summed", _changed(1, lambda x, a: online_vector(*a)[1]), ["row_sum"]),
    ("row_sum", "[2]", _changed(1, lambda x, a: x.reshape(1).repeat(2)), ["[2]"]),
    ("acc", "[1, D]", _changed(2, lambda x, a: x[None]), ["[1, 4]", "[4]"]),
    ("acc", "[D, 1]", _changed(2, lambda x, a: x[:, None]), ["[4, 1]", "[4]"]),
    ("acc", "one number", _changed(2, lambda x, a: x.sum()), ["[]", "[4]"]),
    ("acc", "[2D]", _changed(2, lambda x, a: x.repeat(2)), ["[8]", "[4]"]),
]
DTYPES = [(out, dtype) for out in OUTPUTS for dtype in (torch.float32, torch.float16,
                                                        torch.bfloat16)]


@pytest.mark.parametrize("output, doing, answer, words", SHAPES,
                         ids=[f"{o}-{d}" for o, d, _a, _w in SHAPES])
def test_online_softmax_wrong_shape_named(output, doing, answer, words, language):
    result = lab04.check_online_softmax_update(answer)  # raised RuntimeError on a vector
    assert not result.passed, repr(result)
    assert output in result.message and all(w in result.message for w in words), repr(result)
    assert "shape" in result.message or "形状" in result.message, repr(result)
    wrong_hint = ("divided by row_sum", "largest score seen so far", "exp(old_max - new_max)")
    assert not any(h in result.message for h in wrong_hint), repr(result)
    if output != "acc":
        said = "one number" if language == "en" else "一个数"
        assert said in result.message, repr(result)


def test_one_number_as_a_one_element_tensor_still_passes():
    def kernel_shaped(*args):
        m, s, acc = online_right(*args)
        return m.reshape(1), s.reshape(1), acc
    assert lab04.check_online_softmax_update(kernel_shaped).passed


@pytest.mark.parametrize("output, dtype", DTYPES, ids=[f"{o}-{d}" for o, d in DTYPES])
def test_online_softmax_low_precision_named(output, dtype, language):
    answer = _changed(OUTPUTS.index(output), lambda x, a: x.to(dtype))
    result = lab04.check_online_softmax_update(answer)
    name = str(dtype).removeprefix("torch.")
    if result.passed:  # float32's rounding of one right value stays within tolerance
        assert dtype == torch.float32, repr(result)
        return
    assert f"{output}" in result.message and name in result.message, repr(result)
    assert "float64" in result.message and "Hint" not in result.message \
        and "提示" not in result.message, repr(result)


def test_online_softmax_all_float32(language):
    def in_float32(m, s, acc, scores, v):
        return online_right(m.float(), s.float(), acc.float(), scores.float(), v.float())
    result = lab04.check_online_softmax_update(in_float32)
    assert not result.passed and "float32" in result.message and "float64" in result.message
    assert "divided by row_sum" not in result.message, repr(result)


LOW = (torch.float16, torch.bfloat16)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_gather_kv_low_precision_named(dtype, language):
    result = lab04.check_gather_kv(lambda c, t, n: gather_kv(c, t, n).to(dtype))
    name = str(dtype).removeprefix("torch.")
    assert not result.passed and name in result.message and "float32" in result.message
    assert "offset i % block_size" not in result.message and "i // block_size" \
        not in result.message, repr(result)


def _attention(q, kc, vc, table, n):
    k, v = gather_kv(kc, table, n), gather_kv(vc, table, n)
    group = q.shape[0] // k.shape[1]
    k, v = (x.repeat_interleave(group, 1).transpose(0, 1) for x in (k, v))
    return torch.nn.functional.scaled_dot_product_attention(q[:, None], k, v)[:, 0]


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_decode_attention_low_precision_named(dtype, language):
    result = lab04.check_paged_decode_attention(lambda *a: _attention(*a).to(dtype))
    name = str(dtype).removeprefix("torch.")
    assert not result.passed and name in result.message and "float32" in result.message
    assert "gather the K and V" not in result.message, repr(result)


def test_right_answers_in_float64_still_pass():
    assert lab04.check_gather_kv(lambda c, t, n: gather_kv(c, t, n).double()).passed
    assert lab04.check_paged_decode_attention(lambda *a: _attention(*a).double()).passed


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs Triton")
@pytest.mark.parametrize("variant, words", [
    ("kernel_table_load_per_tile_masked", ("Mask argument", "n // BLOCK_SIZE", "n_mask")),
    ("kernel_stride_slot", ("NameError", "stride_token")),
])
def test_kernel_raising_in_the_interpreter_gets_a_hint(variant, words, language):
    from .wrong_answers import _kernel_variant
    lookups = {
        "kernel_table_load_per_tile_masked": (
            "            block = tl.load(block_table_ptr + tile_start // BLOCK_SIZE, "
            "mask=n_mask, other=0).to(tl.int64)\n"
            "            row = block * stride_block + (n % BLOCK_SIZE) * stride_token + "
            "head * stride_head\n"),
        "kernel_stride_slot": (  # lab 04c's name for the stride
            "            block = tl.load(block_table_ptr + n // BLOCK_SIZE, mask=n_mask, "
            "other=0).to(tl.int64)\n"
            "            row = block * stride_block + (n % BLOCK_SIZE) * stride_slot + "
            "head * stride_head\n"),
    }
    name = f"{variant}_{language.replace('-', '_')}"
    result = lab04.check_paged_kernel(_kernel_variant(name, lookups[variant]))
    assert not result.passed, repr(result)
    hint = "Hint: " if language == "en" else "提示："
    assert hint in result.message, repr(result)
    assert all(w in result.message for w in words), repr(result)
