"""pagedkit.ops: which implementation runs where, and that it imports without Triton."""

import warnings

import pytest
import torch
from kernel_cases import make_case, run_python

from pagedkit import ops
from pagedkit.kernels import cpu_decode


@pytest.fixture(autouse=True)
def _clean_choice(monkeypatch):
    monkeypatch.delenv("PAGEDKIT_KERNELS", raising=False)
    ops.set_backend(None)
    ops._noticed.clear()
    ops._CHOSEN.clear()
    yield
    ops.set_backend(None)
    ops._noticed.clear()
    ops._CHOSEN.clear()


def fake_gpu(monkeypatch, capability, name):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(ops, "_triton_import_error", lambda: None)


def test_cpu_runs_the_c_kernel_and_says_how_to_get_the_others():
    choice = ops.backend("cpu")
    if cpu_decode.unavailable() is None:
        assert choice == "native" and "kernels/cpu_decode.c" in choice.reason
        assert "PAGEDKIT_KERNELS=batched" in choice.reason
    else:
        assert choice == "batched" and cpu_decode.unavailable() in choice.reason
    assert "batched torch path" in choice.reason
    assert "PAGEDKIT_KERNELS=torch" in choice.reason  # the per-sequence reference
    assert "PAGEDKIT_KERNELS=triton" in choice.reason and "TRITON_INTERPRET=1" in choice.reason


@pytest.mark.parametrize("name,implementation", [("batched", "batched"), ("torch", "reference")])
def test_each_torch_path_is_selectable_and_runs(monkeypatch, name, implementation):
    monkeypatch.setenv("PAGEDKIT_KERNELS", name)
    assert ops.backend("cpu") == name
    assert ops.backend("cpu").reason == f"forced by PAGEDKIT_KERNELS={name}"
    for op in ("paged_decode_attention", "paged_prefill_attention", "store_kv"):
        chosen = ops.IMPLEMENTATIONS[ops.backend("cpu")][op]
        assert chosen.__module__ == f"pagedkit.kernels.{implementation}"
    # one batched torch op already: the reference's, on both paths
    chosen = ops.IMPLEMENTATIONS[ops.backend("cpu")]["copy_blocks"]
    assert chosen.__module__ == "pagedkit.kernels.reference"


def test_environment_variable_and_set_backend(monkeypatch):
    monkeypatch.setenv("PAGEDKIT_KERNELS", "torch")
    assert ops.backend("cpu").reason == "forced by PAGEDKIT_KERNELS=torch"
    monkeypatch.setenv("PAGEDKIT_KERNELS", "fast")
    with pytest.raises(ValueError, match="PAGEDKIT_KERNELS must be one of auto, native, "
                                         "batched, torch, triton; got 'fast'"):
        ops.backend("cpu")
    ops.set_backend("torch")  # the function wins over the variable
    assert ops.backend("cpu").reason == "forced by set_backend('torch')"
    with pytest.raises(ValueError, match="backend must be one of"):
        ops.set_backend("cuda")


def test_a_modern_gpu_gets_triton(monkeypatch):
    fake_gpu(monkeypatch, (9, 0), "NVIDIA H200")
    assert ops.backend("cuda") == "triton"


def test_t4_falls_back_to_the_batched_path_with_one_notice(monkeypatch):
    fake_gpu(monkeypatch, (7, 5), "Tesla T4")
    with pytest.warns(ops.KernelFallbackWarning, match="Tesla T4 has compute capability 7.5"):
        choice = ops.backend("cuda")
    assert choice == "batched" and "batched torch path" in choice.reason
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second call stays quiet
        assert ops.backend("cuda") == "batched"
    ops.set_backend("triton")  # on request a T4 runs them (docs/kernels.md, "T4")
    assert ops.backend("cuda") == "triton"
    fake_gpu(monkeypatch, (7, 0), "Tesla V100")
    with pytest.raises(RuntimeError, match=r"forces the Triton kernels, but Tesla V100 has "
                                           r"compute capability 7\.0 and pagedkit's Triton "
                                           r"kernels need 7\.5\+"):
        ops.backend("cuda")


def test_use_backend_restores_the_previous_choice_even_on_error():
    ops.set_backend("torch")
    with pytest.raises(KeyError), ops.use_backend("auto"):
        assert ops.backend("cpu").reason.startswith("cpu device")
        raise KeyError("a failing cell")
    assert ops.backend("cpu").reason == "forced by set_backend('torch')"
    ops.set_backend(None)


def test_the_backend_is_decided_once_per_setting_and_follows_every_change(monkeypatch):
    """An op looks its backend up (`ops._CHOSEN`) rather than deciding it on
    every call, so the lookup must follow each thing the choice depends on:
    the variable, `set_backend` and `use_backend` take effect at the next call."""
    auto = str(ops.backend("cpu"))  # native where the C kernel builds
    ran = []
    for name in ("native", "batched", "torch"):
        monkeypatch.setitem(ops.IMPLEMENTATIONS[name], "store_kv",
                            lambda *args, _name=name, **options: ran.append(_name))
    cache = torch.zeros(1)

    def store():
        ops.store_kv(cache, cache, cache, cache, cache)

    store()  # auto on CPU
    monkeypatch.setenv("PAGEDKIT_KERNELS", "torch")
    store()
    monkeypatch.setenv("PAGEDKIT_KERNELS", "batched")
    store()
    with ops.use_backend("torch"):
        store()
    store()
    ops.set_backend("torch")
    store()
    assert ran == [auto, "torch", "batched", "torch", "batched", "torch"]


def test_ops_on_cpu_run_the_default_path_and_agree_with_the_references():
    case = make_case([3, 17, 9], block_size=4, num_kv_heads=2, head_dim=16)
    query = torch.randn(3, 4, 16)
    args = (query, case.k_cache, case.v_cache, case.block_tables, case.context_lens)
    out = ops.paged_decode_attention(*args)
    default = ops.IMPLEMENTATIONS[ops.backend("cpu")]["paged_decode_attention"]
    assert torch.equal(out, default(*args))
    torch.testing.assert_close(out, ops.paged_decode_attention_batched(*args))
    torch.testing.assert_close(out, ops.paged_decode_attention_reference(*args))
    cu = torch.tensor([0, 1, 2, 3], dtype=torch.int32)
    prefill = ops.paged_prefill_attention(*args[:4], cu, case.context_lens)
    assert torch.equal(prefill, ops.paged_prefill_attention_batched(*args[:4], cu,
                                                                    case.context_lens))
    torch.testing.assert_close(prefill, ops.paged_decode_attention_reference(*args))
    with ops.use_backend("torch"):
        assert torch.equal(ops.paged_decode_attention(*args),
                           ops.paged_decode_attention_reference(*args))


def test_an_override_runs_for_its_op_only_inside_its_block():
    """`ops.override` puts a function in `ops.OVERRIDES` for a block: the public
    op calls it with the op's own arguments (no step_cache); nested blocks
    restore the previous one; an unknown op name is refused."""
    case = make_case([5, 9], 4, num_kv_heads=1, head_dim=8, seed=3)
    query = torch.randn(2, 2, 8)
    args = (query, case.k_cache, case.v_cache, case.block_tables, case.context_lens)
    calls = []

    def doubled(*a, **options):
        calls.append(sorted(options))
        return 2 * ops.paged_decode_attention_reference(*a, **options)

    expected = ops.paged_decode_attention(*args)
    with ops.override("paged_decode_attention", doubled):
        assert torch.allclose(ops.paged_decode_attention(*args), 2 * expected, atol=1e-6)
        with ops.override("paged_decode_attention", lambda *a, **k: torch.zeros_like(a[0])):
            assert not ops.paged_decode_attention(*args).any()
        assert torch.allclose(ops.paged_decode_attention(*args), 2 * expected, atol=1e-6)
        cu = torch.tensor([0, 1, 2], dtype=torch.int32)
        ops.paged_prefill_attention(query, case.k_cache, case.v_cache, case.block_tables, cu,
                                    case.context_lens)  # another op: not overridden
    assert ops.OVERRIDES == {} and len(calls) == 2
    assert calls[0] == ["check", "num_splits", "sinks", "sliding_window", "softcap"]
    assert torch.equal(ops.paged_decode_attention(*args), expected)
    with pytest.raises(ValueError, match="no operation named 'paged_attention'"), \
            ops.override("paged_attention", doubled):
        pass


def test_works_without_triton():
    """macOS has no Triton wheels: a failing `import triton` must not matter on the torch path."""
    code = """
import sys, warnings
sys.modules["triton"] = None          # `import triton` now raises ImportError
import torch
import pagedkit.ops as ops
assert "triton" not in [m.split(".")[0] for m in sys.modules if sys.modules[m] is not None]
k = torch.zeros(4, 2, 1, 8); v = torch.zeros(4, 2, 1, 8)
ops.store_kv(torch.ones(3, 1, 8), torch.ones(3, 1, 8), k, v, torch.tensor([0, 1, 5]))
table, lens = torch.tensor([[0, 2]], dtype=torch.int32), torch.tensor([4], dtype=torch.int32)
out = ops.paged_decode_attention(torch.ones(1, 2, 8), k, v, table, lens)
assert out.shape == (1, 2, 8)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    choice = ops.backend("cuda")
assert choice == "batched" and "Triton is not installed" in choice.reason, choice.reason
assert len(caught) == 1, caught
ops.set_backend("triton")
try:
    ops.backend("cpu")
except RuntimeError as exc:
    assert "Triton is not installed" in str(exc)
else:
    raise AssertionError("forcing triton without triton must raise")
print("ok")
"""
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_forcing_triton_on_cpu_without_the_interpreter_says_to_set_it_before_import():
    code = """
import torch, pagedkit.ops as ops
try:
    ops.backend("cpu")
except RuntimeError as exc:
    print(exc)
"""
    out = run_python(code, PAGEDKIT_KERNELS="triton")
    assert out.returncode == 0, out.stderr
    assert "TRITON_INTERPRET=1" in out.stdout and "before importing pagedkit" in out.stdout


def test_switching_the_interpreter_on_after_triton_was_imported_is_refused_clearly():
    """Triton fixes interpreter mode when it is first imported (its own helpers
    are kernels too): a kernel module imported after the switch must say so."""
    code = """
import os, triton
os.environ["TRITON_INTERPRET"] = "1"
try:
    import pagedkit.kernels.paged_decode
except RuntimeError as exc:
    print(exc)
"""
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert "TRITON_INTERPRET is on now but was off when Triton was first imported" in out.stdout


@pytest.mark.parametrize("name", ["torch", "batched"])
def test_a_forced_backend_names_the_call_that_forced_it(name):
    """Newcomer 30 (N13): lab 04b's `with ops.use_backend("triton")` cell printed
    "forced by set_backend('triton')". The reason names the call made, and after a
    `use_backend` block the earlier `set_backend` is named again."""
    with ops.use_backend(name):
        assert ops.backend("cpu").reason == f"forced by use_backend({name!r})"
    ops.set_backend("torch")
    try:
        with ops.use_backend(name):
            assert ops.backend("cpu").reason == f"forced by use_backend({name!r})"
        assert ops.backend("cpu").reason == "forced by set_backend('torch')"
    finally:
        ops.set_backend(None)
