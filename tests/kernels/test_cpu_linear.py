"""The C kernel for a linear layer's product of a few rows (kernels/cpu_linear.c)
against a float64 oracle, and how `accel.packed_linear` uses it.

Every row count from 0 past `MAX_ROWS` (tiles of 4 rows and each remainder),
output counts below, at and past a 64-wide panel, inputs from 1, with and
without a bias, inputs that are strided views, one and two threads (two even
below the grain). The bound is float32's for a sum of K products in any
order: |error| <= 2 K u sum_k |x_k w_k| (u = 2^-24), which oneDNN's and
MKL's products meet too.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from kernel_cases import run_python

from pagedkit.kernels import cpu_linear
from pagedkit.model import accel

pytestmark = pytest.mark.skipif(cpu_linear.unavailable() is not None,
                                reason=f"no C linear kernel here: {cpu_linear.unavailable()}")

U = 2.0 ** -24
ROWS = list(range(0, cpu_linear.MAX_ROWS + 4))
SHAPES = [(1, 1), (5, 3), (63, 17), (64, 64), (65, 100), (130, 7), (256, 512), (96, 1376)]


def check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, got: torch.Tensor):
    """`got` within float32's bound of the float64 product."""
    x64, w64 = x.double(), weight.double()
    want = F.linear(x64, w64, None if bias is None else bias.double())
    assert got.shape == want.shape and got.dtype == torch.float32
    if not want.numel():
        return
    scale = F.linear(x64.abs(), w64.abs())  # sum_k |x_k w_k|, per output
    bound = 2 * weight.shape[1] * U * scale + (0 if bias is None else 2 * U * want.abs())
    assert ((got.double() - want).abs() <= bound + 1e-30).all()


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("out_features, in_features", SHAPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_the_product_is_float32s_of_the_exact_one(rows, out_features, in_features, with_bias):
    gen = torch.Generator().manual_seed(rows * 1000 + out_features + in_features)
    weight = torch.randn(out_features, in_features, generator=gen)
    bias = torch.randn(out_features, generator=gen) if with_bias else None
    x = torch.randn(1, rows, in_features, generator=gen)  # (batch, tokens, hidden), as a model
    packed = cpu_linear.pack(weight)
    # a product of other numbers first: an output the kernel leaves unwritten would
    # hold its numbers (the allocator hands the same memory out again), not these
    cpu_linear.linear(x + 1, packed, out_features, bias)
    check(x, weight, bias, cpu_linear.linear(x, packed, out_features, bias))


@pytest.mark.parametrize("rows", [1, 3, 4, 7])
def test_strided_inputs_as_the_model_passes_them(rows):
    """A slice of a wider tensor (rows apart), a transposed one (columns apart),
    a strided vector."""
    weight = torch.randn(70, 40)
    packed = cpu_linear.pack(weight)
    wide = torch.randn(rows, 100)[:, 30:70]
    check(wide, weight, None, cpu_linear.linear(wide, packed, 70, None))
    transposed = torch.randn(40, rows).t()
    check(transposed, weight, None, cpu_linear.linear(transposed, packed, 70, None))
    vector = torch.randn(80)[::2]  # one input, as F.linear takes it
    check(vector, weight, None, cpu_linear.linear(vector, packed, 70, None))


@pytest.mark.parametrize("rows, out_features",
                         list(itertools.product([1, 4, 6, 8], [64, 200, 1376])))
def test_two_threads_compute_what_one_does(rows, out_features):
    """Threads split the panels: each output is one thread's, summed in the same
    order, so the numbers are bitwise those of one thread (above the grain
    and, forced, below it)."""
    weight, x = torch.randn(out_features, 96), torch.randn(rows, 96)
    packed = cpu_linear.pack(weight)
    previous, grain = torch.get_num_threads(), cpu_linear.GRAIN_MACS
    try:
        torch.set_num_threads(1)
        one = cpu_linear.linear(x, packed, out_features, None)
        torch.set_num_threads(2)
        cpu_linear.GRAIN_MACS = 0
        two = cpu_linear.linear(x, packed, out_features, None)
    finally:
        torch.set_num_threads(previous)
        cpu_linear.GRAIN_MACS = grain
    assert torch.equal(one, two)


def test_the_packed_layout_is_panels_of_64_outputs_transposed_and_zero_padded():
    weight = torch.arange(70 * 3, dtype=torch.float32).view(70, 3)
    packed = cpu_linear.pack(weight)
    assert packed.shape == (2, 3, 64) and packed.is_contiguous()
    assert torch.equal(packed[0], weight[:64].t())
    assert torch.equal(packed[1, :, :6], weight[64:].t())
    assert not packed[1, :, 6:].any()


@pytest.mark.parametrize("rows", [1, cpu_linear.MAX_ROWS, cpu_linear.MAX_ROWS + 1, 40])
def test_accel_runs_a_few_rows_in_c_and_more_with_onednn(rows, monkeypatch):
    """`packed_linear`: up to MAX_ROWS rows (of any batch shape) in C, more with oneDNN."""
    ran = []
    real = cpu_linear.linear
    monkeypatch.setattr(cpu_linear, "linear", lambda *a: ran.append("C") or real(*a))
    weight, bias = torch.randn(300, 512), torch.randn(300)
    x = torch.randn(1, rows, 512)
    with torch.inference_mode():
        got = accel.packed_linear(x, accel.pack_weight(weight), bias)
    assert ran == (["C"] if rows <= cpu_linear.MAX_ROWS else [])
    check(x, weight, bias, got)


WITHOUT_COMPILER = """
import os, torch
os.environ["CC"] = "/nonexistent/cc"
from pagedkit.kernels import cpu_linear
from pagedkit.model import accel
assert "/nonexistent/cc" in cpu_linear.unavailable(), cpu_linear.unavailable()
weight, x = torch.randn(64, 32), torch.randn(2, 32)
packed = accel.pack_weight(weight)
assert packed.panels is None
with torch.inference_mode():
    assert torch.allclose(accel.packed_linear(x, packed, None), x @ weight.t(), atol=1e-4)
print("ok")
"""


def test_without_a_compiler_every_packed_call_runs_onednn(tmp_path):
    run = run_python(WITHOUT_COMPILER, PAGEDKIT_CACHE_DIR=str(tmp_path))
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
    assert not list(tmp_path.iterdir())  # nothing was built



@pytest.mark.parametrize("shape", [(2, 16), (2, 48), (64,), (1, 1, 64), (3, 0)])
def test_an_input_of_another_width_is_refused_not_read_past(shape):
    """Review of this stop: the kernel took its width from the packed weight,
    so a wrong-width input read or wrote past its tensors (a heap error)."""
    packed = cpu_linear.pack(torch.randn(16, 32))
    with pytest.raises(ValueError, match=r"inputs per row, the packed weight 32"):
        cpu_linear.linear(torch.randn(shape), packed, 16, None)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_another_dtype_is_refused_by_name(dtype):
    packed = cpu_linear.pack(torch.randn(16, 32))
    with pytest.raises(ValueError, match=f"x is {dtype}.*float32 CPU tensors only"):
        cpu_linear.linear(torch.randn(2, 32, dtype=dtype), packed, 16, None)
    with pytest.raises(ValueError, match=f"bias is {dtype}"):
        cpu_linear.linear(torch.randn(2, 32), packed, 16, torch.randn(16, dtype=dtype))


@pytest.mark.parametrize("shape", [(2, 16), (2, 48), (64,), (1, 1, 64), (20, 31)])
def test_a_packed_layer_refuses_another_width_with_f_linears_message(shape):
    """Through `PackedLinear`, a wrong width goes to F.linear, whose error names
    the shapes (oneDNN's named a 'primitive descriptor'; newcomer 51)."""
    layer = accel.PackedLinear(torch.nn.Linear(32, 16), min_rows=1)
    x = torch.randn(shape)
    with torch.no_grad(), pytest.raises(RuntimeError) as plain:
        F.linear(x, layer.weight, layer.bias)
    with torch.no_grad(), pytest.raises(RuntimeError) as packed:
        layer(x)
    assert str(packed.value) == str(plain.value)


@pytest.mark.parametrize("out_features", [200, 5000, 5, 64, 0, -1, 70.0, True])
def test_out_features_the_packed_weight_does_not_hold_are_refused(out_features):
    """Newcomer 51: 5000 read past the packed weight (a crash), 200 gave garbage,
    71-128 zeros. `packed` of 70 outputs holds 2 panels: 65-128 may be asked."""
    packed = cpu_linear.pack(torch.randn(70, 24))
    with pytest.raises(ValueError, match=r"out_features=.*2 panels of 64: 65-128 outputs"):
        cpu_linear.linear(torch.randn(3, 24), packed, out_features, None)


def test_a_bias_of_another_length_and_autograd_are_refused():
    packed = cpu_linear.pack(torch.randn(70, 24))
    with pytest.raises(ValueError, match=r"bias has shape \(69,\), not \(70,\)"):
        cpu_linear.linear(torch.randn(3, 24), packed, 70, torch.randn(69))
    x = torch.randn(3, 24, requires_grad=True)
    with pytest.raises(ValueError, match="records no autograd graph"):
        cpu_linear.linear(x, packed, 70, None)
    with torch.no_grad():
        check(x.detach(), torch.zeros(70, 24), None, cpu_linear.linear(x, cpu_linear.pack(
            torch.zeros(70, 24)), 70, None))


DEFAULTS = """
import torch
torch.set_default_dtype(torch.{dtype})
torch.manual_seed(0)
before = torch.rand(1)
torch.manual_seed(0)
from pagedkit.kernels import cpu_linear
assert cpu_linear.unavailable() is None, cpu_linear.unavailable()
assert torch.equal(torch.rand(1), before)  # the check drew nothing from the user's stream
print("ok")
"""


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_the_kernels_own_check_ignores_torchs_defaults(dtype, tmp_path):
    """Review: the check after the build made its tensors with torch's default
    dtype: float16 corrupted the heap, float64 switched the kernel off."""
    run = run_python(DEFAULTS.format(dtype=dtype), PAGEDKIT_CACHE_DIR=str(tmp_path))
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr[-2000:]


def test_a_library_without_the_kernel_or_with_a_wrong_one_is_a_reason(monkeypatch):
    """A foreign file in the cache folder (no such symbol), or a kernel whose
    product is wrong here: `unavailable` says so, nothing raises."""
    import ctypes

    from pagedkit.kernels import cbuild, cpu_decode

    monkeypatch.setattr(cbuild, "build", lambda source, what: ctypes.CDLL(None))
    assert "has no linear_rows_f32" in cpu_linear._library.__wrapped__()
    assert "has no paged_decode_f32" in cpu_decode._library.__wrapped__()
    monkeypatch.undo()
    monkeypatch.setattr(cpu_linear, "pack", lambda weight: torch.zeros(
        -(-weight.shape[0] // 64), weight.shape[1], 64))
    assert "another product" in cpu_linear._library.__wrapped__()


def test_a_lazily_negated_input_is_read_as_its_values():
    z = torch.randn(3, 24, dtype=torch.complex64)
    x = z.conj().imag  # a view whose values are the stored ones negated
    assert x.is_neg()
    weight = torch.randn(70, 24)
    check(x, weight, None, cpu_linear.linear(x, cpu_linear.pack(weight), 70, None))
