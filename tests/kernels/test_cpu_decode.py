"""The C decode kernel (kernels/cpu_decode.c) against a float64 oracle.

Caches come from `kernel_cases.make_case`: blocks in random order, NaN in
every slot that holds no token and in the blocks a window lets go, tables
padded with -1 or a NaN block; the kernel must never read any of them. Every
option of the contract (grouped-query attention, windows, softcaps, sinks),
block sizes from 1, head sizes that are not a multiple of a vector, one and
two threads (two even below the grain at which a call runs one), and a
query that is a strided view as the engine passes it.
"""

from __future__ import annotations

import itertools
import os

import pytest
import torch
from kernel_cases import assert_close, make_case, run_python

from pagedkit import ops
from pagedkit.gpucheck import oracle
from pagedkit.kernels import batched, cpu_decode

pytestmark = pytest.mark.skipif(cpu_decode.unavailable() is not None,
                                reason=f"no C decode kernel here: {cpu_decode.unavailable()}")

BLOCK_SIZES = [1, 3, 16, 32]
HEADS = [(1, 1), (4, 4), (8, 2), (6, 3), (4, 1)]  # (query heads, KV heads)
HEAD_DIMS = [8, 64, 80, 128]
OPTIONS = [{}, {"sliding_window": 1}, {"sliding_window": 5}, {"sliding_window": 17},
           {"softcap": 2.0}, {"sinks": True}, {"sliding_window": 5, "softcap": 30.0,
                                               "sinks": True}]


def contexts(block_size: int) -> list[int]:
    b = block_size
    return sorted({1, 2, b, b + 1, max(1, b - 1), 2 * b, 3 * b + 1, 97})


def forget_before_window(case, window: int, fill: int) -> None:
    """Point the table entries wholly before each sequence's window at `fill`."""
    bs = case.k_cache.shape[1]
    for s, ctx in enumerate(case.context_lens.tolist()):
        first = max(0, ctx - window) // bs
        case.block_tables[s, :first] = fill


def run_case(block_size, heads, head_dim, options, threads, seed):
    q_heads, kv_heads = heads
    lens = contexts(block_size)
    case = make_case(lens, block_size, num_kv_heads=kv_heads, head_dim=head_dim,
                     seed=seed, padding=-1 if seed % 2 else None)
    gen = torch.Generator().manual_seed(seed)
    window = options.get("sliding_window")
    if window is not None:
        forget_before_window(case, window, -1)
    sinks = torch.randn(q_heads, generator=gen) if options.get("sinks") else None
    opts = {**options, "sinks": sinks}
    # the engine's layout: [1, heads, tokens, head_dim] transposed, a strided view
    query = torch.randn(1, q_heads, len(lens), head_dim, generator=gen)[0].transpose(0, 1)
    scale = 0.3 if seed % 3 == 0 else None
    previous = torch.get_num_threads(), cpu_decode.GRAIN_ELEMENTS
    torch.set_num_threads(threads)
    cpu_decode.GRAIN_ELEMENTS = 0  # two threads mean two, however small the case
    try:
        out = cpu_decode.paged_decode_attention(query, case.k_cache, case.v_cache,
                                                case.block_tables, case.context_lens, scale,
                                                **opts)
    finally:
        torch.set_num_threads(previous[0])
        cpu_decode.GRAIN_ELEMENTS = previous[1]
    used = head_dim ** -0.5 if scale is None else scale
    expected = torch.stack([oracle(query[s:s + 1], k, v, used, k.shape[0] - 1, **opts)[0]
                            for s, (k, v) in enumerate(zip(case.keys, case.values,
                                                           strict=True))])
    return out, expected


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_every_shape_matches_float64(block_size, heads, head_dim):
    for threads in (1, 2):
        out, expected = run_case(block_size, heads, head_dim, {}, threads,
                                 seed=block_size * 7 + head_dim + heads[0] + threads)
        assert_close(out, expected, torch.float32)


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(o) or "plain")
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_every_option_matches_float64(options, block_size):
    for heads, threads in itertools.product([(4, 4), (8, 2)], (1, 2)):
        out, expected = run_case(block_size, heads, 64, options, threads,
                                 seed=block_size + heads[1] + threads + len(options))
        assert_close(out, expected, torch.float32)
        # the options change the output: the test would see one that is ignored
        if options:
            plain, _ = run_case(block_size, heads, 64, {}, threads,
                                seed=block_size + heads[1] + threads + len(options))
            assert not torch.allclose(plain, out, atol=1e-4)


def test_int64_tables_and_lengths_and_checks():
    case = make_case([5, 40, 17], 16, num_kv_heads=2, head_dim=64)
    query = torch.randn(3, 4, 64)
    out = cpu_decode.paged_decode_attention(query, case.k_cache, case.v_cache,
                                            case.block_tables.long(), case.context_lens.long())
    same = cpu_decode.paged_decode_attention(query, case.k_cache, case.v_cache,
                                             case.block_tables, case.context_lens, check=False)
    assert torch.equal(out, same)
    with pytest.raises(ValueError, match="context_lens"):  # the contract's checks run first
        cpu_decode.paged_decode_attention(query, case.k_cache, case.v_cache, case.block_tables,
                                          torch.tensor([5, 400, 17], dtype=torch.int32))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_dtypes_run_the_batched_path(dtype):
    case = make_case([5, 40, 17], 16, num_kv_heads=2, head_dim=64, dtype=dtype)
    query = torch.randn(3, 4, 64).to(dtype)
    args = (query, case.k_cache, case.v_cache, case.block_tables, case.context_lens)
    out = cpu_decode.paged_decode_attention(*args)
    assert out.dtype == dtype
    assert torch.equal(out, batched.paged_decode_attention(*args))


def test_no_sequences():
    case = make_case([5], 16, num_kv_heads=2, head_dim=64)
    out = cpu_decode.paged_decode_attention(torch.empty(0, 4, 64), case.k_cache, case.v_cache,
                                            case.block_tables[:0], case.context_lens[:0])
    assert out.shape == (0, 4, 64)


def test_the_cpu_runs_it_by_default():
    with ops.use_backend(None):
        chosen = ops.backend("cpu")
    if "PAGEDKIT_KERNELS" not in os.environ:
        assert chosen == "native" and "cpu_decode.c" in chosen.reason
    with ops.use_backend("native"):
        assert ops.backend("cpu") == "native"
        with pytest.raises(RuntimeError, match="CPU tensors, not meta"):
            ops.backend("meta")


WITHOUT_COMPILER = """
import os, pytest, torch
os.environ["CC"] = "/nonexistent/cc"
from pagedkit import ops
from pagedkit.kernels import cpu_decode
why = cpu_decode.unavailable()
assert "/nonexistent/cc" in why, why
chosen = ops.backend("cpu")
assert chosen == "batched" and "/nonexistent/cc" in chosen.reason, chosen.reason
with ops.use_backend("native"):
    try:
        ops.backend("cpu")
    except RuntimeError as exc:
        assert "/nonexistent/cc" in str(exc) and "use_backend('batched')" in str(exc), exc
    else:
        raise AssertionError("forcing native without a compiler did not raise")
from kernel_cases import make_case
case = make_case([5, 40], 16, num_kv_heads=2, head_dim=64)
q = torch.randn(2, 4, 64)
from pagedkit.kernels import batched
args = (q, case.k_cache, case.v_cache, case.block_tables, case.context_lens)
assert torch.equal(ops.paged_decode_attention(*args), batched.paged_decode_attention(*args))
print("ok")
"""


def test_without_a_compiler_the_batched_path_runs_and_says_why(tmp_path):
    run = run_python(WITHOUT_COMPILER, PAGEDKIT_CACHE_DIR=str(tmp_path))
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
    assert not list(tmp_path.iterdir())  # nothing was built


#: exits 0 where the C kernel is available, built into the cache folder if need be
BUILDS = ("from pagedkit.kernels import cpu_decode; import sys; "
          "print(cpu_decode.unavailable()); sys.exit(cpu_decode.unavailable() is not None)")


def test_a_small_call_runs_one_thread_and_computes_the_same():
    """Below the grain (torch's 32,768 elements) the call runs one thread;
    forced to two, the same numbers."""
    case = make_case([5, 9], 16, num_kv_heads=2, head_dim=8)
    query = torch.randn(2, 4, 8)
    args = (query, case.k_cache, case.v_cache, case.block_tables, case.context_lens)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        small = cpu_decode.paged_decode_attention(*args)
        cpu_decode.GRAIN_ELEMENTS, grain = 0, cpu_decode.GRAIN_ELEMENTS
        try:
            forced = cpu_decode.paged_decode_attention(*args)
        finally:
            cpu_decode.GRAIN_ELEMENTS = grain
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(small, forced)


def test_odd_arguments_the_contract_allows():
    """A window wider than a C int is no window (it used to wrap to a small
    one); the output is float32 whatever torch's default dtype."""
    case = make_case([40, 7], 16, num_kv_heads=2, head_dim=64)
    query = torch.randn(2, 4, 64)
    args = (query, case.k_cache, case.v_cache, case.block_tables, case.context_lens)
    plain = cpu_decode.paged_decode_attention(*args)
    assert torch.equal(cpu_decode.paged_decode_attention(*args, sliding_window=2**32 + 5), plain)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = cpu_decode.paged_decode_attention(*args)
    finally:
        torch.set_default_dtype(previous)
    assert out.dtype == torch.float32 and torch.equal(out, plain)


FLOATING_POINT = """
import torch
torch.set_num_threads(2)
x = torch.full((10**6,), -100.)
def tiny():  # exp(-100) is a subnormal float32: 0 under flush-to-zero
    return int((torch.exp(x) == 0).sum()), float(torch.exp(torch.tensor(-100.)))
before = tiny()
from pagedkit.kernels import cpu_decode
assert cpu_decode.unavailable() is None, cpu_decode.unavailable()
after = tiny()
assert before == after == (0, float(torch.tensor(-100.).exp())) and after[1] > 0, (before, after)
print("ok")
"""


def test_loading_the_library_leaves_the_processs_floating_point_alone(tmp_path):
    """Review of stop 49: linked with -ffast-math, gcc 12 added crtfastmath.o,
    whose constructor turned flush-to-zero on for the whole process when the
    library loaded (torch.exp(-100.) became 0 on the thread that loaded it,
    not on torch's other thread). It is linked without it now."""
    run = run_python(FLOATING_POINT, PAGEDKIT_CACHE_DIR=str(tmp_path))
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


def test_a_compiler_given_as_a_command_and_a_broken_cached_library(tmp_path):
    """CC may hold a command ("gcc -O2"); a cached library that does not load
    (cut short) is built again, once."""
    env = {"PAGEDKIT_CACHE_DIR": str(tmp_path), "CC": "gcc -O2"}
    run = run_python(BUILDS, **env)
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    built = list(tmp_path.glob("cpu_decode-*.so"))
    assert len(built) == 1
    built[0].write_bytes(b"")  # a library cut short
    run = run_python(BUILDS, **env)
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    assert built[0].stat().st_size > 0
