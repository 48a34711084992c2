"""Every public entry point refuses bad input loudly, and changes nothing.

One table: for each entry point (LLM, LLM.generate, SamplingParams,
LLMEngine.add_request(s), KVCacheManager, BlockAllocator, BlockTable,
ContiguousAllocator, TraceRequest / Trace / load_trace / synthetic_trace,
Simulator) the bad calls a learner makes, the exception type each must raise,
a piece of the message that names the value at fault, and a snapshot of the
state the call must leave exactly as it found it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pagedkit import LLM, BeamSearchParams, SamplingParams
from pagedkit.memory import (
    BlockAllocator,
    BlockStateError,
    BlockTable,
    ContiguousAllocator,
    KVCacheManager,
    OutOfBlocksError,
)
from pagedkit.sim import Simulator, Trace, TraceRequest, load_trace, synthetic_trace


# ------------------------------------------------------------------ snapshots
def pool_state(pool: BlockAllocator):
    blocks = range(pool.num_blocks)
    return (pool.stats(), pool.free_order(), [pool.ref_count(b) for b in blocks],
            [pool.num_tokens(b) for b in blocks], [pool.block_hash(b) for b in blocks])


def table_state(t: BlockTable):
    return (list(t.blocks), t.num_tokens, list(t.block_hashes), list(t._unnamed), t._freed)


def kv_state(kv: KVCacheManager):
    return (pool_state(kv.allocator), kv.swap_pool and pool_state(kv.swap_pool),
            {s: table_state(t) for s, t in kv.tables().items()},
            {s: table_state(t) for s, t in kv.swapped_tables().items()})


def contiguous_state(mem: ContiguousAllocator):
    return ([(r.request, r.start, r.size, r.need, r.used) for r in mem.regions()], mem.stats())


def engine_state(llm: LLM):
    engine = llm.llm_engine
    s = engine.scheduler
    return (engine.memory_stats(), sorted(engine.groups), kv_state(engine.kv),
            [[g.request_id for g in q] for q in (s.waiting, s.running, s.swapped)],
            [(sq.seq_id, list(sq.token_ids), sq.num_computed_tokens)
             for g in engine.groups.values() for sq in g.seqs],
            len(engine._aborted))


def nothing(_):
    return None


# ------------------------------------------------------------------- fixtures
def make_kv():
    """A manager mid-run: a sequence with two cached full blocks and a fork, a
    swapped-out one, a cached-but-free block, a few blocks free."""
    kv = KVCacheManager(num_blocks=10, block_size=4, enable_prefix_caching=True,
                        num_swap_blocks=4)
    kv.allocate_slots("A", list(range(1, 10)))  # blocks 0, 1 full (cached), 2 partial
    kv.fork("A", "B")
    kv.allocate_slots("S", [20, 21])
    kv.swap_out(["S"])
    kv.allocate_slots("F", [30, 31, 32, 33])
    kv.free("F")  # block 4: free but cached
    return kv


def make_full_kv():
    """No block free, two cached blocks live: a call short of room must still be refused."""
    kv = KVCacheManager(num_blocks=3, block_size=4, enable_prefix_caching=True)
    kv.allocate_slots("A", list(range(1, 10)))
    return kv


def make_freed_handle():
    kv = make_kv()
    handle = kv.table("A")
    kv.free("B")
    kv.free("A")
    return kv, handle


def make_pool():
    pool = BlockAllocator(num_blocks=4, block_size=2, enable_prefix_caching=True)
    pool.allocate("a")
    pool.append_tokens(0, 1, "a")
    return pool


def make_table():
    pool = BlockAllocator(num_blocks=4, block_size=2, enable_prefix_caching=True)
    table = BlockTable(pool, "T")
    table.append([1, 2, 3])
    return table


def make_contiguous():
    mem = ContiguousAllocator(capacity=100, policy="pow2", max_seq_len=64)
    mem.allocate("A", prompt_len=10, output_len=25)
    return mem


def trace_of(*requests):
    return Trace("t", tuple(TraceRequest(i, *r) for i, r in enumerate(requests)))


TRACE = trace_of((0.0, 4, 4), (1.0, 8, 2))

MEMORY_CASES = [
    # KVCacheManager
    ("kv.swap_out twice", make_kv, lambda kv: kv.swap_out(["A", "A"]), BlockStateError,
     "'A' is named twice", kv_state),
    ("kv.swap_in twice", make_kv, lambda kv: kv.swap_in(["S", "S"]), BlockStateError,
     "'S' is named twice", kv_state),
    ("kv.swap_out a bare id", make_kv, lambda kv: kv.swap_out("AB"), TypeError, "'AB'",
     kv_state),
    ("kv.swap_out unknown", make_kv, lambda kv: kv.swap_out(["A", "nope"]), KeyError, "'nope'",
     kv_state),
    ("kv.swap_in resident", make_kv, lambda kv: kv.swap_in(["A"]), KeyError, "'A'", kv_state),
    ("kv.allocate duplicate cached, room", make_kv,
     lambda kv: kv.allocate_slots("new", [1], cached_blocks=[0, 0]), BlockStateError,
     "[0, 0]", kv_state),
    ("kv.allocate duplicate cached, no room", make_full_kv,
     lambda kv: kv.allocate_slots("new", [1] * 9, cached_blocks=[0, 0]), BlockStateError,
     "[0, 0]", kv_state),
    ("kv.allocate a str for a new sequence", make_kv,
     lambda kv: kv.allocate_slots("new", "hello"), TypeError, "'hello'", kv_state),
    ("kv.allocate uncached block", make_kv,
     lambda kv: kv.allocate_slots("new", [1], cached_blocks=[7]), BlockStateError, "[7]",
     kv_state),
    ("kv.allocate block id out of range", make_kv,
     lambda kv: kv.allocate_slots("new", [1], cached_blocks=[99]), IndexError, "99", kv_state),
    ("kv.allocate cached into existing", make_kv,
     lambda kv: kv.allocate_slots("A", [1], cached_blocks=[0]), BlockStateError, "'A'",
     kv_state),
    ("kv.allocate swapped", make_kv, lambda kv: kv.allocate_slots("S", [1]), BlockStateError,
     "'S'", kv_state),
    ("kv.fork into existing", make_kv, lambda kv: kv.fork("A", "B"), BlockStateError, "'B'",
     kv_state),
    ("kv.fork unknown parent", make_kv, lambda kv: kv.fork("nope", "X"), KeyError, "'nope'",
     kv_state),
    ("kv.free unknown", make_kv, lambda kv: kv.free("nope"), KeyError, "'nope'", kv_state),
    ("kv.block_ids swapped", make_kv, lambda kv: kv.block_ids("S"), KeyError, "swapped out",
     kv_state),
    ("kv.table unknown", make_kv, lambda kv: kv.table("nobody"), KeyError, "nobody", kv_state),
    ("KVCacheManager num_blocks=0", None, lambda _: KVCacheManager(0, 4), ValueError,
     "got 0", nothing),
    ("KVCacheManager block_size='4'", None, lambda _: KVCacheManager(4, "4"), TypeError,
     "'4'", nothing),
    ("KVCacheManager prefix caching 'no'", None,
     lambda _: KVCacheManager(4, 4, enable_prefix_caching="no"), TypeError, "'no'", nothing),
    ("BlockTable kept after free: append", make_freed_handle,
     lambda ctx: ctx[1].append([1]), BlockStateError, "'A' was freed",
     lambda ctx: (kv_state(ctx[0]), table_state(ctx[1]))),
    ("BlockTable kept after free: fork", make_freed_handle,
     lambda ctx: ctx[1].fork("X"), BlockStateError, "'A' was freed",
     lambda ctx: (kv_state(ctx[0]), table_state(ctx[1]))),
    ("BlockTable kept after free: free", make_freed_handle,
     lambda ctx: ctx[1].free(), BlockStateError, "'A' was freed",
     lambda ctx: (kv_state(ctx[0]), table_state(ctx[1]))),
    # BlockAllocator
    ("pool.free a free block", make_pool, lambda p: p.free(3), BlockStateError, "block 3",
     pool_state),
    ("pool.fork a free block", make_pool, lambda p: p.fork(2), BlockStateError, "block 2",
     pool_state),
    ("pool.free out of range", make_pool, lambda p: p.free(9), IndexError, "9", pool_state),
    ("pool.free a str id", make_pool, lambda p: p.free("0"), TypeError, "'0'", pool_state),
    ("pool.free a bool id", make_pool, lambda p: p.free(True), TypeError, "True", pool_state),
    ("pool.append past block_size", make_pool, lambda p: p.append_tokens(0, 5),
     BlockStateError, "5 tokens", pool_state),
    ("pool.append negative", make_pool, lambda p: p.append_tokens(0, -1), ValueError, "-1",
     pool_state),
    ("pool.register a partial block", make_pool,
     lambda p: p.register(0, p.new_key(None, [1, 2])), BlockStateError, "block 0", pool_state),
    ("pool.register a name, not a key", make_pool, lambda p: p.register(0, b"x" * 32),
     TypeError, "BlockKey", pool_state),
    ("pool.find_cached a name, not a key", make_pool, lambda p: p.find_cached(b"x" * 32),
     TypeError, "BlockKey", pool_state),
    ("BlockAllocator num_blocks=2.5", None, lambda _: BlockAllocator(2.5, 2), TypeError, "2.5",
     nothing),
    ("BlockAllocator block_size=0", None, lambda _: BlockAllocator(2, 0), ValueError, "got 0",
     nothing),
    # BlockTable
    ("table.append a str", make_table, lambda t: t.append("ab"), TypeError, "'ab'",
     lambda t: (table_state(t), pool_state(t.allocator))),
    ("table.append too many", make_table, lambda t: t.append(list(range(20))),
     OutOfBlocksError, "20 tokens", lambda t: (table_state(t), pool_state(t.allocator))),
    ("table.adopt into a started table", make_table, lambda t: t.adopt_cached([0]),
     BlockStateError, "already has 2 blocks", lambda t: (table_state(t), pool_state(t.allocator))),
    ("table.physical_block out of range", make_table, lambda t: t.physical_block(5), IndexError,
     "5", table_state),
    ("table.slot out of range", make_table, lambda t: t.slot(-1), IndexError, "-1", table_state),
    ("BlockTable adopt duplicates", None,
     lambda _: BlockTable(make_table().allocator, "U").adopt_cached([0, 0]), BlockStateError,
     "[0, 0]", nothing),
    # ContiguousAllocator
    ("ContiguousAllocator capacity=0", None, lambda _: ContiguousAllocator(0), ValueError,
     "got 0", nothing),
    ("ContiguousAllocator policy", None, lambda _: ContiguousAllocator(10, "buddy"), ValueError,
     "'buddy'", nothing),
    ("ContiguousAllocator max_seq_len", None, lambda _: ContiguousAllocator(10, "max", -1),
     ValueError, "-1", nothing),
    ("mem.allocate twice", make_contiguous, lambda m: m.allocate("A", 1, 1), BlockStateError,
     "'A'", contiguous_state),
    ("mem.allocate empty prompt", make_contiguous, lambda m: m.allocate("B", 0, 5), ValueError,
     "got 0", contiguous_state),
    ("mem.allocate too long", make_contiguous, lambda m: m.allocate("B", 10, 100), ValueError,
     "110 tokens", contiguous_state),
    ("mem.allocate str length", make_contiguous, lambda m: m.allocate("B", "x", 1), TypeError,
     "'x'", contiguous_state),
    ("mem.append past need", make_contiguous, lambda m: m.append("A", 1000), BlockStateError,
     "1000 tokens", contiguous_state),
    ("mem.append negative", make_contiguous, lambda m: m.append("A", -1), ValueError, "-1",
     contiguous_state),
    ("mem.free unknown", make_contiguous, lambda m: m.free("nope"), KeyError, "'nope'",
     contiguous_state),
]

TRACE_CASES = [
    ("TraceRequest negative prompt", lambda: TraceRequest(0, 0.0, -1, 5), ValueError, "-1"),
    ("TraceRequest zero prompt", lambda: TraceRequest(0, 0.0, 0, 5), ValueError, "got 0"),
    ("TraceRequest zero output", lambda: TraceRequest("r", 0.0, 5, 0), ValueError,
     "output_len of request 'r' must be >= 1"),
    ("TraceRequest str length", lambda: TraceRequest(0, 0.0, "5", 5), TypeError, "'5'"),
    ("TraceRequest float length", lambda: TraceRequest(0, 0.0, 5.5, 5), TypeError, "5.5"),
    ("TraceRequest negative arrival", lambda: TraceRequest(0, -1.0, 5, 5), ValueError, "-1.0"),
    ("TraceRequest NaN arrival", lambda: TraceRequest(0, math.nan, 5, 5), ValueError, "nan"),
    ("TraceRequest inf arrival", lambda: TraceRequest(0, math.inf, 5, 5), ValueError, "inf"),
    ("TraceRequest str arrival", lambda: TraceRequest(0, "soon", 5, 5), TypeError, "'soon'"),
    ("Trace out of order", lambda: trace_of((1.0, 1, 1), (0.5, 1, 1)), ValueError, "0.5"),
    ("Trace of tuples", lambda: Trace("t", ((1, 2),)), TypeError, "(1, 2)"),
    ("Trace.head(0)", lambda: TRACE.head(0), ValueError, "got 0"),
    ("synthetic_trace dataset", lambda: synthetic_trace("lmsys", rate=1, num_requests=1),
     ValueError, "'lmsys'"),
    ("synthetic_trace rate -1", lambda: synthetic_trace("alpaca", rate=-1, num_requests=1),
     ValueError, "-1"),
    ("synthetic_trace rate nan", lambda: synthetic_trace("alpaca", rate=math.nan,
                                                         num_requests=1), ValueError, "nan"),
    ("synthetic_trace rate str", lambda: synthetic_trace("alpaca", rate="fast", num_requests=1),
     TypeError, "'fast'"),
    ("synthetic_trace 0 requests", lambda: synthetic_trace("alpaca", rate=1, num_requests=0),
     ValueError, "got 0"),
    ("synthetic_trace duration -1", lambda: synthetic_trace("alpaca", rate=1, duration=-1),
     ValueError, "-1"),
    ("synthetic_trace duration nan", lambda: synthetic_trace("alpaca", rate=1,
                                                             duration=math.nan), ValueError,
     "nan"),
    ("synthetic_trace both sizes", lambda: synthetic_trace("alpaca", rate=1, num_requests=1,
                                                           duration=1.0), ValueError,
     "exactly one of num_requests and duration"),
    ("Simulator trace a list", lambda: Simulator(list(TRACE), "paged"), TypeError, "list"),
    ("Simulator manager", lambda: Simulator(TRACE, "buddy"), ValueError, "'buddy'"),
    ("Simulator manager int", lambda: Simulator(TRACE, 5), TypeError, "5"),
    ("Simulator capacity 0", lambda: Simulator(TRACE, capacity_slots=0), ValueError, "got 0"),
    ("Simulator max_num_seqs 0", lambda: Simulator(TRACE, max_num_seqs=0), ValueError, "got 0"),
    ("Simulator preemption", lambda: Simulator(TRACE, preemption="evict"), ValueError,
     "'evict'"),
    ("Simulator prefill", lambda: Simulator(TRACE, prefill="both"), ValueError, "'both'"),
    ("Simulator watermark 2", lambda: Simulator(TRACE, watermark=2), ValueError, "2"),
    ("Simulator watermark nan", lambda: Simulator(TRACE, watermark=math.nan), ValueError,
     "nan"),
    ("Simulator watermark str", lambda: Simulator(TRACE, watermark="x"), TypeError, "'x'"),
    ("Simulator swap_slots -1", lambda: Simulator(TRACE, swap_slots=-1), ValueError, "-1"),
    ("Simulator seed str", lambda: Simulator(TRACE, seed="x"), TypeError, "'x'"),
    ("Simulator sharing", lambda: Simulator(TRACE, sharing=5), TypeError, "5"),
    ("Simulator model", lambda: Simulator(TRACE, model="opt"), ValueError,
     "model 'opt' is not a preset: give one of 'opt-13b', 'opt-66b', 'opt-175b'"),
    ("Simulator model int", lambda: Simulator(TRACE, model=13), TypeError,
     "or a preset's name ('opt-13b', 'opt-66b', 'opt-175b'), got 13"),
    # Newcomer 12: advance_to(nan) and advance_to(-1) returned [], advance_to('x') a raw TypeError
    *[(f"Simulator.advance_to({t!r})", lambda t=t: Simulator(TRACE).advance_to(t), error, named)
      for t, error, named in [(math.nan, ValueError, "got nan"), (math.inf, ValueError, "got inf"),
                              (-math.inf, ValueError, "got -inf"), (-1, ValueError, ">= 0"),
                              (-0.5, ValueError, ">= 0, got -0.5"),
                              ("x", TypeError, "got 'x' (str)"), (None, TypeError, "got None"),
                              ([1.0], TypeError, "got [1.0]"), (True, TypeError, "got True")]],
]

LOAD_CASES = [  # (file name, contents, keyword arguments, error, named)
    ("t.json", "[[-1, 5]]", {"rate": 1}, ValueError, "-1"),
    ("t.json", '[[1, "x"]]', {"rate": 1}, ValueError, "'x'"),
    ("t.json", "[[1, 2.5]]", {"rate": 1}, ValueError, "2.5"),
    ("t.json", "[[1, 2, NaN]]", {}, ValueError, "nan"),
    ("t.json", "[[1, 2, -3]]", {}, ValueError, "-3"),
    ("t.json", "[[1, 2]]", {"rate": 0}, ValueError, "got 0"),
    ("t.json", "[[1, 2]]", {"rate": math.nan}, ValueError, "nan"),
    ("t.json", '{"a": 1}', {"rate": 1}, ValueError, "dict"),
    ("t.json", "[]", {"rate": 1}, ValueError, "no requests"),
    ("t.txt", "1 2", {"rate": 1}, ValueError, "'.txt'"),
    ("t.csv", "prompt_len,output_len\n0,5\n", {"rate": 1}, ValueError, "got 0"),
]

SAMPLING_CASES = [
    ({"n": 0}, ValueError, "got 0"), ({"n": "2"}, TypeError, "'2'"),
    ({"temperature": -1}, ValueError, "-1"), ({"temperature": math.nan}, ValueError, "nan"),
    ({"top_p": 0}, ValueError, "got 0"), ({"top_k": -2}, ValueError, "got -2"),
    ({"top_k": 1.5}, TypeError, "1.5"),
    ({"presence_penalty": 2.5}, ValueError, "2.5"), ({"frequency_penalty": -3}, ValueError, "-3"),
    ({"repetition_penalty": 0}, ValueError, "got 0"),
    ({"repetition_penalty": math.inf}, ValueError, "inf"),
    ({"min_p": 1.5}, ValueError, "1.5"), ({"min_p": "0.1"}, TypeError, "'0.1'"),
    ({"stop": 5}, TypeError, "5"), ({"stop": [""]}, ValueError, "stop[0]"),
    ({"stop": ["a", 3]}, TypeError, "stop[1]"), ({"stop": [1, 2]}, TypeError, "stop[0]"),
    ({"temperature": "0"}, TypeError, "'0' (str)"), ({"top_p": "1"}, TypeError, "'1' (str)"),
    ({"temperature": True}, TypeError, "True (bool)"),
    ({"stop": "x", "detokenize": False}, ValueError, "detokenize=True"),
    ({"logprobs": -2}, ValueError, "-2"), ({"logprobs": 1.5}, TypeError, "1.5"),
    ({"prompt_logprobs": -5}, ValueError, "-5"),
    ({"include_stop_str_in_output": "yes"}, TypeError, "'yes'"),
    ({"skip_special_tokens": 0}, TypeError, "0"), ({"detokenize": None}, TypeError, "None"),
    ({"use_beam_search": True, "temperature": 0, "logprobs": 1}, ValueError, "beam_search"),
    ({"use_beam_search": True, "temperature": 0, "repetition_penalty": 1.2}, ValueError,
     "beam_search"),
    ({"max_tokens": 0}, ValueError, "got 0"),
    ({"max_tokens": 4, "min_tokens": 5}, ValueError,
     "min_tokens=5 is more than max_tokens=4: give min_tokens <= max_tokens"),
    ({"seed": -2}, ValueError, "-2"), ({"seed": 2**64}, ValueError, str(2**64)),
    ({"seed": "1"}, TypeError, "'1'"), ({"stop_token_ids": 5}, TypeError, "5"),
    ({"stop_token_ids": [-1]}, ValueError, "-1"),
    ({"ignore_eos": "no"}, TypeError, "'no'"), ({"ignore_eos": 1}, TypeError, "1"),
    ({"use_beam_search": "no"}, TypeError, "'no'"),
    ({"use_beam_search": True, "temperature": 1.0}, ValueError, "1.0"),
    ({"use_beam_search": True, "temperature": 0, "beam_width": 0}, ValueError, "got 0"),
    ({"beam_width": 2}, ValueError, "beam_width"),
    ({"length_penalty": math.nan}, ValueError, "nan"),
]

LLM_CASES = [
    ({"model": 5}, TypeError, "5"), ({"model": "./no/such/dir"}, FileNotFoundError,
                                     "'./no/such/dir'"),
    ({"block_size": 0}, ValueError, "got 0"), ({"num_blocks": 0}, ValueError, "got 0"),
    ({"num_blocks": 4, "kv_cache_memory": 2**20}, ValueError, "not both"),
    ({"kv_cache_memory": -5}, ValueError, "-5"),
    ({"enable_prefix_caching": "no"}, TypeError, "'no'"),
    ({"enable_chunked_prefill": "no"}, TypeError, "'no'"),
    ({"preemption_mode": "evict"}, ValueError, "'evict'"),
    ({"preemption_mode": "swap", "swap_space": -1}, ValueError, "-1"),
    ({"preemption_mode": "swap", "swap_space": "x"}, TypeError, "'x'"),
    ({"max_num_seqs": 0}, ValueError, "got 0"), ({"max_num_batched_tokens": 0}, ValueError,
                                                 "got 0"),
    ({"max_model_len": 1}, ValueError, "got 1"), ({"device": "gpu"}, ValueError, "'gpu'"),
    ({"dtype": "fp8"}, ValueError, "'fp8'"), ({"gpu_memory_utilization": "x"}, TypeError, "'x'"),
    ({"gpu_memory_utilization": 2}, ValueError, "2"), ({"seed": "x"}, TypeError, "'x'"),
    # vLLM's engine arguments: one-device values accepted, the others refused by name
    ({"tensor_parallel_size": 2}, ValueError, "LLM: tensor_parallel_size=2"),
    ({"tensor_parallel_size": True}, ValueError, "tensor_parallel_size=True"),
    ({"enforce_eager": "yes"}, TypeError, "LLM: enforce_eager"),
    ({"quantization": "awq"}, ValueError, "quantization='awq'"),
    ({"block_sise": 16}, TypeError, "did you mean 'block_size'"),
    ({"no_such_argument": 1}, TypeError, "LLM got an engine argument"),
    ({"swap_space": 4}, ValueError, "swap_space=4"),
    ({"kv_cache_memory": 2**20, "kv_cache_memory_bytes": 2**20}, ValueError, "not both"),
    ({"max_logprobs": -2}, ValueError, "-2"),
]


# ---------------------------------------------------------------------- tests
def check(call, target, error, named, state):
    before = state(target)
    with pytest.raises(error) as info:
        call(target)
    assert named in str(info.value), f"{str(info.value)!r} does not name {named!r}"
    assert state(target) == before, "a refused call changed the state"


@pytest.mark.parametrize("make, call, error, named, state",
                         [pytest.param(*c[1:], id=c[0]) for c in MEMORY_CASES])
def test_memory_entry_points(make, call, error, named, state):
    check(call, make() if make else None, error, named, state)


# Every public memory method that takes token ids, counts or a new sequence's id,
# crossed with every bad value of that kind: refused, named, and nothing changed
# (the full snapshot, and no event emitted).
def _ids(make):  # a fresh generator per call: a one-shot iterator is refused too
    return make() if callable(make) else make


BAD_TOKEN_IDS = [  # (id, token_ids, error, named)
    ("None", None, TypeError, "None"),
    ("a generator", lambda: (t for t in (1, 2)), TypeError, "generator"),
    ("a str", "ab", TypeError, "'ab'"),
    ("a dict", {1: 2}, TypeError, "{1: 2}"),
    ("None inside", [1, None], TypeError, "token_ids[1] is None"),
    ("a str inside", [1, "x"], TypeError, "token_ids[1] is 'x'"),
    ("floats", [1.5, 2.5], TypeError, "token_ids[0] is 1.5"),
    ("a whole float", [1, 2.0], TypeError, "token_ids[1] is 2.0"),
    ("a bool", [True], TypeError, "token_ids[0] is True"),
    ("None later", (1, 2, None), TypeError, "token_ids[2] is None"),
]

TOKEN_ID_CALLS = [  # (id, make, call(target, token_ids), state)
    ("kv.allocate_slots new", make_kv, lambda kv, ids: kv.allocate_slots("new", ids), kv_state),
    ("kv.allocate_slots existing", make_kv, lambda kv, ids: kv.allocate_slots("A", ids),
     kv_state),
    ("kv.allocate_slots from live cached blocks", make_kv,
     lambda kv, ids: kv.allocate_slots("new", ids, cached_blocks=[0, 1]), kv_state),
    ("kv.allocate_slots reviving a free cached block", make_kv,
     lambda kv, ids: kv.allocate_slots("new", ids, cached_blocks=[4]), kv_state),
    ("kv.cached_prefix new", make_kv, lambda kv, ids: kv.cached_prefix("new", ids), kv_state),
    ("kv.cached_prefix existing", make_kv, lambda kv, ids: kv.cached_prefix("A", ids),
     kv_state),
    ("table.append", make_table, lambda t, ids: t.append(ids),
     lambda t: (table_state(t), pool_state(t.allocator))),
    ("table.try_append", make_table, lambda t, ids: t.try_append(ids),
     lambda t: (table_state(t), pool_state(t.allocator))),
    ("table.cached_prefix", lambda: BlockTable(make_table().allocator, "U"),
     lambda t, ids: t.cached_prefix(ids), lambda t: (table_state(t), pool_state(t.allocator))),
]

BAD_COUNTS = [  # (token count, error, named)
    (-1, ValueError, "got -1"), (-3, ValueError, "got -3"), (1.5, TypeError, "1.5"),
    (2.0, TypeError, "2.0"), ("2", TypeError, "'2'"), (None, TypeError, "None"),
    (True, TypeError, "True"),
]

COUNT_CALLS = [  # (id, make, call(target, n), state)
    ("kv.blocks_needed existing", make_kv, lambda kv, n: kv.blocks_needed("A", n), kv_state),
    ("kv.blocks_needed new", make_kv, lambda kv, n: kv.blocks_needed("new", n), kv_state),
    ("kv.blocks_needed cached", make_kv,
     lambda kv, n: kv.blocks_needed("new", n, [0, 1]), kv_state),
    ("kv.can_allocate", make_kv, lambda kv, n: kv.can_allocate("new", n), kv_state),
    ("kv.blocks_to_admit", make_kv, lambda kv, n: kv.blocks_to_admit("new", n, [], [0]),
     kv_state),
    ("kv.blocks_to_admit appends", make_kv,
     lambda kv, n: kv.blocks_to_admit("new", 5, [], [2, n]), kv_state),
    ("kv.blocks_to_admit appends, none growing", make_kv,
     lambda kv, n: kv.blocks_to_admit("new", 5, [], [0, n]), kv_state),
    ("kv.blocks_needed_for one", make_kv, lambda kv, n: kv.blocks_needed_for([("A", n)]),
     kv_state),
    ("kv.blocks_needed_for a group", make_kv,
     lambda kv, n: kv.blocks_needed_for([("A", 1), ("B", n)]), kv_state),
    ("kv.free_uncomputed", make_kv, lambda kv, n: kv.free_uncomputed([("B", 1), ("A", n)]),
     kv_state),
    ("kv.allocate_slots computed, existing", make_kv,
     lambda kv, n: kv.allocate_slots("A", [1], computed=n), kv_state),
    ("kv.allocate_slots computed, new", make_kv,
     lambda kv, n: kv.allocate_slots("new", [1, 2, 3], computed=n), kv_state),
    ("kv.allocate_slots computed, cached", make_kv,
     lambda kv, n: kv.allocate_slots("new", [1], cached_blocks=[0, 1], computed=n), kv_state),
    ("table.blocks_needed", make_table, lambda t, n: t.blocks_needed(n), table_state),
    ("table.append computed", make_table, lambda t, n: t.append([1], computed=n),
     lambda t: (table_state(t), pool_state(t.allocator))),
    ("table.name_blocks", make_table, lambda t, n: t.name_blocks(n),
     lambda t: (table_state(t), pool_state(t.allocator))),
    ("pool.stats swapped_blocks", make_pool, lambda p, n: p.stats(swapped_blocks=n), pool_state),
    ("kv.can_allocate reserve", make_kv, lambda kv, n: kv.can_allocate("new", 1, reserve=n),
     kv_state),
    ("kv.can_swap_in reserve", make_kv, lambda kv, n: kv.can_swap_in(["S"], reserve=n),
     kv_state),
    # Newcomer 22 N2: these two checked their counts their own way (a float: ValueError)
    ("kv.release_outside_window num_computed_tokens", make_kv,
     lambda kv, n: kv.release_outside_window("A", n, 2), kv_state),
    ("kv.release_outside_window window", make_kv,
     lambda kv, n: kv.release_outside_window("A", 8, n), kv_state),
    ("table.release_before", make_table, lambda t, n: t.release_before(n),
     lambda t: (table_state(t), pool_state(t.allocator))),
]

TOO_MANY = [  # past the tokens there are: (id, make, call, error, named, state)
    ("kv.allocate_slots computed past the tokens, existing", make_kv,
     lambda kv: kv.allocate_slots("A", [1], computed=11), ValueError, "<= 10, got 11",
     kv_state),
    ("kv.allocate_slots computed past the tokens, new", make_kv,
     lambda kv: kv.allocate_slots("new", [1, 2, 3], computed=100), ValueError,
     "<= 3, got 100", kv_state),
    ("kv.allocate_slots computed past the tokens, cached", make_kv,
     lambda kv: kv.allocate_slots("new", [1], cached_blocks=[0, 1], computed=10), ValueError,
     "<= 9, got 10", kv_state),
    ("table.append computed past the tokens", make_table,
     lambda t: t.append([1], computed=5), ValueError, "<= 4, got 5",
     lambda t: (table_state(t), pool_state(t.allocator))),
    ("table.name_blocks past the tokens", make_table, lambda t: t.name_blocks(4), ValueError,
     "<= 3, got 4", lambda t: (table_state(t), pool_state(t.allocator))),
    ("kv.release_outside_window past the tokens", make_kv,
     lambda kv: kv.release_outside_window("A", 10, 2), ValueError, "<= 9, got 10", kv_state),
    ("kv.release_outside_window window 0", make_kv,
     lambda kv: kv.release_outside_window("A", 8, 0), ValueError, ">= 1, got 0", kv_state),
    ("table.release_before past the tokens", make_table, lambda t: t.release_before(4),
     ValueError, "<= 3, got 4", lambda t: (table_state(t), pool_state(t.allocator))),
    # Newcomer 22 N3: with caching off, a block id outside the pool gave False
    ("pool.register out of range, caching off", lambda: BlockAllocator(4, 2),
     lambda p: p.register(99, p.new_key(None, [1, 2])), IndexError, "99", pool_state),
    ("pool.register negative, caching off", lambda: BlockAllocator(4, 2),
     lambda p: p.register(-1, p.new_key(None, [1, 2])), IndexError, "-1", pool_state),
    ("pool.register a str id, caching off", lambda: BlockAllocator(4, 2),
     lambda p: p.register("0", p.new_key(None, [1, 2])), TypeError, "'0'", pool_state),
    ("pool.register out of range, caching on", make_pool,
     lambda p: p.register(99, p.new_key(None, [1, 2])), IndexError, "99", pool_state),
    ("kv.free_uncomputed past the tokens", make_kv,
     lambda kv: kv.free_uncomputed([("B", 1), ("A", 10)]), ValueError, "<= 9, got 10",
     kv_state),
    ("kv.allocate_slots for None", make_kv, lambda kv: kv.allocate_slots(None, [1]),
     TypeError, "sequence None", kv_state),
    ("kv.allocate_slots for None, cached", make_kv,
     lambda kv: kv.allocate_slots(None, [1], cached_blocks=[0]), TypeError, "sequence None",
     kv_state),
    ("kv.fork into None", make_kv, lambda kv: kv.fork("A", None), TypeError, "sequence None",
     kv_state),
    ("KVCacheManager num_swap_blocks=-1", None,
     lambda _: KVCacheManager(4, 4, num_swap_blocks=-1), ValueError, "num_swap_blocks", nothing),
]


# Newcomer 22 N1/N5: every call that takes several sequences names each once; a
# sequence named twice is refused before anything changes. free_uncomputed freed
# it, then failed on the second mention before forgetting the names of its
# uncomputed blocks (a later cache hit would read K/V never written), and
# blocks_needed_for counted one sequence as two writers of its own last block.
MULTI_SEQ_CALLS = [  # (id, call(kv, seqs of "A", "B"), what each entry is)
    ("free_uncomputed", lambda kv, seqs: kv.free_uncomputed([(s, 4) for s in seqs])),
    ("blocks_needed_for", lambda kv, seqs: kv.blocks_needed_for([(s, 1) for s in seqs])),
    ("can_swap_out", lambda kv, seqs: kv.can_swap_out(seqs)),
    ("swap_out", lambda kv, seqs: kv.swap_out(seqs)),
]
DUPLICATES = [["A", "A"], ["A", "B", "A"], ["B", "A", "A"], ["A", "A", "A"]]


@pytest.mark.parametrize("call", [pytest.param(c[1], id=c[0]) for c in MULTI_SEQ_CALLS])
@pytest.mark.parametrize("seqs", DUPLICATES, ids=["-".join(d) for d in DUPLICATES])
def test_memory_sequence_named_twice(call, seqs):
    target = make_kv()
    check(lambda kv: call(kv, seqs), target, BlockStateError, "sequence 'A' is named twice",
          _silent_state(target, kv_state))


@pytest.mark.parametrize("computed", [(0, 0), (4, 4), (0, 9), (9, 0)])
def test_free_uncomputed_named_twice_keeps_the_prefix_cache(computed):
    """The newcomer's case: after the refusal the sequence is still there, and
    freeing it once forgets the names of its uncomputed blocks."""
    kv = KVCacheManager(8, 2, enable_prefix_caching=True)
    kv.allocate_slots("A", [1, 2, 3, 4, 5], computed=5)
    with pytest.raises(BlockStateError, match="named twice"):
        kv.free_uncomputed([("A", computed[0]), ("A", computed[1])])
    assert kv.block_ids("A") == [0, 1, 2] and kv.allocator.num_free_blocks == 5
    kv.free_uncomputed([("A", 0)])
    assert kv.cached_prefix("new", [1, 2, 3, 4, 5]) == []


def test_blocks_needed_for_counts_distinct_sequences():
    kv = make_kv()  # A and B share a partly filled last block: one copy, then in place
    assert kv.blocks_needed_for([("A", 1), ("B", 1)]) == 1
    assert kv.blocks_needed_for([("A", 1)]) == 1


# Newcomer 22 N5: every list argument of the paged memory, given something that is
# not one, is a TypeError naming the argument, not Python's "'int' object is not
# iterable" (and a one-shot iterator is refused: blocks_to_admit read a generator
# of appends once to check it and then counted an empty group).
LIST_CALLS = [  # (id, make, call(target, x), named, state)
    ("kv.blocks_to_admit appends", make_kv,
     lambda kv, x: kv.blocks_to_admit("Z", 3, [], x), "appends must be a list", kv_state),
    ("kv.blocks_to_admit cached_blocks", make_kv,
     lambda kv, x: kv.blocks_to_admit("Z", 3, x, [0]), "cached_blocks must be a list",
     kv_state),
    ("kv.blocks_needed cached_blocks", make_kv,
     lambda kv, x: kv.blocks_needed("Z", 3, x), "cached_blocks must be a list", kv_state),
    ("kv.can_allocate cached_blocks", make_kv,
     lambda kv, x: kv.can_allocate("Z", 3, x), "cached_blocks must be a list", kv_state),
    ("kv.allocate_slots cached_blocks", make_kv,
     lambda kv, x: kv.allocate_slots("Z", [1], x), "cached_blocks must be a list", kv_state),
    ("table.check_cached", lambda: BlockTable(make_table().allocator, "U"),
     lambda t, x: t.check_cached(x), "cached_blocks must be a list",
     lambda t: (table_state(t), pool_state(t.allocator))),
    ("table.adopt_cached", lambda: BlockTable(make_table().allocator, "U"),
     lambda t, x: t.adopt_cached(x), "cached_blocks must be a list",
     lambda t: (table_state(t), pool_state(t.allocator))),
    ("kv.blocks_needed_for", make_kv, lambda kv, x: kv.blocks_needed_for(x),
     "appends must be a list of (sequence, token count) pairs", kv_state),
    ("kv.free_uncomputed", make_kv, lambda kv, x: kv.free_uncomputed(x),
     "seqs must be a list of (sequence, token count) pairs", kv_state),
]
NOT_LISTS = [("an int", 0), ("an int 5", 5), ("None", None), ("a float", 1.5),
             ("a generator", lambda: (n for n in (1, 1)))]
PAIR_CALLS = [c for c in LIST_CALLS if "pairs" in c[3]]
NOT_PAIRS = [("a str", "AB"), ("bare ids", ["A", "B"]), ("a triple", [("A", 1, 2)]),
             ("a pair of one", [("A",)]), ("a list pair", [["A", 1]])]


@pytest.mark.parametrize("make, call, named, state, x", [
    pytest.param(*c[1:], b[1], id=f"{c[0]}-{b[0]}") for c in LIST_CALLS for b in NOT_LISTS
    if not ("pairs" in c[3] and callable(b[1]))])  # pairs are read once, as a list
def test_memory_list_arguments(make, call, named, state, x):
    target = make()
    check(lambda t: call(t, _ids(x)), target, TypeError, named, _silent_state(target, state))


@pytest.mark.parametrize("make, call, named, state", [
    pytest.param(*c[1:], id=c[0]) for c in PAIR_CALLS])
@pytest.mark.parametrize("x", [pytest.param(b[1], id=b[0]) for b in NOT_PAIRS])
def test_memory_pair_lists(make, call, named, state, x):
    target = make()
    check(lambda t: call(t, x), target, TypeError, "(sequence, token count) pair",
          _silent_state(target, state))


def test_memory_pairs_may_come_from_a_generator():
    """The scheduler passes blocks_needed_for a generator: read once, as a list."""
    kv = make_kv()
    assert kv.blocks_needed_for((s, 1) for s in ("A", "B")) == 1
    kv.free_uncomputed((s, 9) for s in ("A", "B"))
    assert "A" not in kv and "B" not in kv


@pytest.mark.parametrize("n, window, released", [
    (np.int64(9), np.int64(2), [0, 1]), (np.int32(9), 6, [0]), (9, np.int16(9), [])])
def test_release_outside_window_takes_numpy_ints(n, window, released):
    """Newcomer 22 N2: the one rule for counts (check_int), numpy's ints included."""
    kv = KVCacheManager(8, 4)
    kv.allocate_slots("A", list(range(9)))
    assert kv.release_outside_window("A", n, window) == released


# Newcomer 12 finding 5: token positions and block indices of a table (3 tokens
# in 2 blocks of 2), each crossed with every bad position; `limit` is the first
# position past the end. slot_mapping runs 0 <= start <= end <= num_tokens.
POSITION_CALLS = [  # (id, call(table, p), limit)
    ("table.slot", lambda t, p: t.slot(p), 3),
    ("table.physical_block", lambda t, p: t.physical_block(p), 2),
    ("table.slot_mapping start", lambda t, p: t.slot_mapping(p), 4),
    ("table.slot_mapping end", lambda t, p: t.slot_mapping(0, p), 4),
    ("table.slot_mapping start, end 3", lambda t, p: t.slot_mapping(p, 3), 4),
]

BAD_POSITIONS = [  # (id, position, or a function of the limit; error, named)
    ("None", None, TypeError, "got None (NoneType)"),
    ("a str", "0", TypeError, "got '0' (str)"),
    ("a float", 1.0, TypeError, "got 1.0 (float)"),
    ("a bool", True, TypeError, "got True (bool)"),
    ("-1", -1, IndexError, "-1"),
    ("past the end", lambda limit: limit, IndexError, "{p}"),
    ("far past the end", lambda limit: limit + 100, IndexError, "{p}"),
]


def _position(p, limit):
    return p(limit) if callable(p) else p


@pytest.mark.parametrize("call, limit, p, error, named", [
    pytest.param(*c[1:], *b[1:], id=f"{c[0]}-{b[0]}") for c in POSITION_CALLS for b in BAD_POSITIONS
    if not (b[1] is None and c[0] == "table.slot_mapping end")])  # end=None: the default, all
def test_memory_positions(call, limit, p, error, named):
    target, p = make_table(), _position(p, limit)
    check(lambda t: call(t, p), target, error, named.format(p=p),
          _silent_state(target, lambda t: (table_state(t), pool_state(t.allocator))))
    if isinstance(p, int) and not isinstance(p, bool) and p >= 0:  # the limit is said too
        with pytest.raises(IndexError, match=r"\[0, [23]\)|<= 3 "):
            call(target, p)


@pytest.mark.parametrize("start, end", [(0, -1), (4, 2), (2, 1), (3, 2), (1, 0), (4, 3)])
def test_slot_mapping_of_a_backward_range_is_refused_not_empty(start, end):
    """slot_mapping(0, -1) and (4, 2) gave []: the range is refused, naming it."""
    target = make_table()
    check(lambda t: t.slot_mapping(start, end), target, IndexError,
          f"slot_mapping({start}, {end}): positions run 0 <= start <= end <= 3",
          _silent_state(target, lambda t: (table_state(t), pool_state(t.allocator))))


def test_slot_mapping_takes_every_range_inside_the_tokens():
    table = make_table()  # blocks [0, 1]: slots 0, 1, 2
    assert [table.slot_mapping(s, e) for s in range(4) for e in range(s, 4)] == [
        [], [0], [0, 1], [0, 1, 2], [], [1], [1, 2], [], [2], []]
    assert table.slot_mapping() == [0, 1, 2] and table.slot(np.int64(2)) == 2


BAD_POOLS = [  # (id, make the would-be allocator, named)
    ("None", lambda: None, "got None (NoneType)"),
    ("a KVCacheManager", make_kv, "a KVCacheManager's pool is kv.allocator"),
    ("a ContiguousAllocator", make_contiguous, "(ContiguousAllocator)"),
    ("a block count", lambda: 8, "got 8 (int)"),
    ("a str", lambda: "pool", "got 'pool' (str)"),
]


@pytest.mark.parametrize("make, named", [pytest.param(*b[1:], id=b[0]) for b in BAD_POOLS])
def test_block_table_takes_only_a_block_allocator(make, named):
    """BlockTable(KVCacheManager(8, 4)) was built, and failed later with an AttributeError."""
    target = make()
    state = (kv_state if isinstance(target, KVCacheManager) else
             contiguous_state if isinstance(target, ContiguousAllocator) else repr)
    check(lambda t: BlockTable(t, seq="X"), target, TypeError, named,
          _silent_state(target, state) if isinstance(target, KVCacheManager) else state)
    with pytest.raises(TypeError, match="BlockTable needs a BlockAllocator"):
        BlockTable(target)


# Every KVCacheManager method that takes a sequence id, crossed with ids that
# cannot key a table: a TypeError naming the id, not Python's "unhashable type".
SEQ_CALLS = [  # (id, call(kv, seq))
    ("in", lambda kv, s: s in kv),
    ("table", lambda kv, s: kv.table(s)),
    ("gpu_table", lambda kv, s: kv.gpu_table(s)),
    ("block_ids", lambda kv, s: kv.block_ids(s)),
    ("num_tokens", lambda kv, s: kv.num_tokens(s)),
    ("cached_prefix", lambda kv, s: kv.cached_prefix(s, [1, 2, 3, 4, 5])),
    ("blocks_needed", lambda kv, s: kv.blocks_needed(s, 1)),
    ("blocks_needed_for one", lambda kv, s: kv.blocks_needed_for([(s, 1)])),
    ("blocks_needed_for a group", lambda kv, s: kv.blocks_needed_for([("A", 1), (s, 1)])),
    ("blocks_to_admit", lambda kv, s: kv.blocks_to_admit(s, 1, [], [0])),
    ("can_allocate", lambda kv, s: kv.can_allocate(s, 1)),
    ("allocate_slots", lambda kv, s: kv.allocate_slots(s, [1])),
    ("allocate_slots cached", lambda kv, s: kv.allocate_slots(s, [1], cached_blocks=[0])),
    ("fork parent", lambda kv, s: kv.fork(s, "X")),
    ("fork child", lambda kv, s: kv.fork("A", s)),
    ("free", lambda kv, s: kv.free(s)),
    ("free_uncomputed", lambda kv, s: kv.free_uncomputed([("B", 1), (s, 1)])),
    ("release_outside_window", lambda kv, s: kv.release_outside_window(s, 4, 2)),
    ("can_swap_out", lambda kv, s: kv.can_swap_out(["A", s])),
    ("can_swap_in", lambda kv, s: kv.can_swap_in([s])),
    ("swap_out", lambda kv, s: kv.swap_out(["A", s])),
    ("swap_in", lambda kv, s: kv.swap_in(["S", s])),
]

BAD_SEQS = [("a list", ["x"]), ("a dict", {"a": 1}), ("a set", {1}),
            ("a tuple holding a list", ([1],))]


@pytest.mark.parametrize("call", [pytest.param(c[1], id=c[0]) for c in SEQ_CALLS])
@pytest.mark.parametrize("seq", [pytest.param(b[1], id=b[0]) for b in BAD_SEQS])
def test_memory_sequence_ids_must_be_hashable(call, seq):
    target = make_kv()
    check(lambda kv: call(kv, seq), target, TypeError,
          f"sequence id {seq!r} ({type(seq).__name__}) is not hashable",
          _silent_state(target, kv_state))


# Newcomer 22 N6: a NaN id is hashable but never equal to itself, so a table it
# keyed could never be found or freed again (a leak): every call refuses it, as
# the one rule for sequence ids (and ContiguousAllocator's request ids) says.
NAN_SEQS = [("float nan", float("nan")), ("numpy nan", np.float64("nan")),
            ("a tuple holding nan", ("r", float("nan"))),
            ("a nested tuple holding nan", (1, (2, float("nan"))))]
CONTIGUOUS_CALLS = [
    ("mem.allocate", lambda m, s: m.allocate(s, 1, 1)),
    ("mem.append", lambda m, s: m.append(s, 1)),
    ("mem.free", lambda m, s: m.free(s)),
    ("mem.region", lambda m, s: m.region(s)),
    ("mem in", lambda m, s: s in m),
]


@pytest.mark.parametrize("call", [pytest.param(c[1], id=c[0]) for c in SEQ_CALLS])
@pytest.mark.parametrize("seq", [pytest.param(b[1], id=b[0]) for b in NAN_SEQS])
def test_memory_sequence_ids_must_equal_themselves(call, seq):
    target = make_kv()
    check(lambda kv: call(kv, seq), target, ValueError,
          f"sequence id {seq!r} is not equal to itself", _silent_state(target, kv_state))


@pytest.mark.parametrize("call", [pytest.param(c[1], id=c[0]) for c in CONTIGUOUS_CALLS])
@pytest.mark.parametrize("seq, error, named", [
    pytest.param(b[1], ValueError, "is not equal to itself", id=b[0]) for b in NAN_SEQS] + [
    pytest.param(b[1], TypeError, "is not hashable", id=b[0]) for b in BAD_SEQS])
def test_contiguous_request_ids(call, seq, error, named):
    check(lambda m: call(m, seq), make_contiguous(), error, f"request id {seq!r}",
          contiguous_state)
    with pytest.raises(error, match=named):
        call(make_contiguous(), seq)


@pytest.mark.parametrize("seq", ["A", 0, -1, 1.5, ("r", 0), ("r", 1.5), frozenset({1}), b"x",
                                 None.__class__, np.int64(3)])
def test_memory_takes_every_self_equal_hashable_id(seq):
    kv = KVCacheManager(4, 2)
    kv.allocate_slots(seq, [1, 2, 3])
    assert seq in kv and kv.num_tokens(seq) == 3
    kv.free(seq)
    assert seq not in kv and kv.allocator.num_free_blocks == 4


def _silent_state(target, state):
    """`state`, and the events the target's pool has emitted since this was first called."""
    pool = target if isinstance(target, BlockAllocator) else getattr(target, "allocator", None)
    events: list = []
    if pool is not None:
        pool.events.subscribe(events.append)
    return lambda t: (state(t), list(events))


@pytest.mark.parametrize("make, call, state", [pytest.param(*c[1:], id=c[0])
                                               for c in TOKEN_ID_CALLS])
@pytest.mark.parametrize("ids, error, named", [pytest.param(*b[1:], id=b[0])
                                               for b in BAD_TOKEN_IDS])
def test_memory_token_ids(make, call, state, ids, error, named):
    target = make()
    check(lambda t: call(t, _ids(ids)), target, error, named, _silent_state(target, state))


@pytest.mark.parametrize("make, call, state, n, error, named", [
    pytest.param(*c[1:], *b, id=f"{c[0]}-{b[0]!r}") for c in COUNT_CALLS for b in BAD_COUNTS
    if not (b[0] is None and "computed" in c[0])])  # computed=None: the default, all of them
def test_memory_token_counts(make, call, state, n, error, named):
    target = make()
    check(lambda t: call(t, n), target, error, named, _silent_state(target, state))


@pytest.mark.parametrize("make, call, error, named, state",
                         [pytest.param(*c[1:], id=c[0]) for c in TOO_MANY])
def test_memory_limits_and_ids(make, call, error, named, state):
    target = make() if make else None
    check(call, target, error, named, _silent_state(target, state))


@pytest.mark.parametrize("ids", [[3, 4], (3, 4), range(3, 5), [np.int64(3), np.int32(4)],
                                 [-3, -4]],
                         ids=["list", "tuple", "range", "numpy ints", "negative ints"])
def test_memory_takes_token_ids_of_every_int_kind(ids):
    kv = make_kv()
    assert kv.allocate_slots("new", ids) == [] and kv.num_tokens("new") == 2
    assert kv.allocate_slots("A", ids) == [(2, 6)] and kv.num_tokens("A") == 11


@pytest.mark.parametrize("call, error, named", [pytest.param(*c[1:], id=c[0])
                                                for c in TRACE_CASES])
def test_trace_and_simulator_entry_points(call, error, named):
    check(lambda _: call(), None, error, named, nothing)


@pytest.mark.parametrize("name, text, kwargs, error, named", LOAD_CASES,
                         ids=[f"{c[0]}:{c[1][:20]}" for c in LOAD_CASES])
def test_load_trace(tmp_path, name, text, kwargs, error, named):
    path = tmp_path / name
    path.write_text(text)
    check(lambda _: load_trace(path, **kwargs), None, error, named, nothing)


def test_load_trace_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.json"):
        load_trace(tmp_path / "nope.json", rate=1)


@pytest.mark.parametrize("kwargs, error, named", SAMPLING_CASES,
                         ids=[repr(c[0]) for c in SAMPLING_CASES])
def test_sampling_params(kwargs, error, named):
    check(lambda _: SamplingParams(**kwargs), None, error, named, nothing)


@pytest.mark.parametrize("kwargs, error, named", LLM_CASES, ids=[repr(c[0]) for c in LLM_CASES])
def test_llm_constructor(kwargs, error, named):
    kwargs = {"model": "tiny", **kwargs}
    check(lambda _: LLM(**kwargs), None, error, named, nothing)


@pytest.fixture(scope="module")
def busy_llm():
    """The tiny model with a request of its own in flight, holding blocks."""
    llm = LLM("tiny", block_size=4, num_blocks=32)
    llm.llm_engine.add_request("keep", "Once upon a time",
                               SamplingParams(temperature=0, max_tokens=20))
    llm.llm_engine.step()
    return llm


def generate(*args, **kwargs):
    return lambda llm: llm.generate(*args, use_tqdm=kwargs.pop("use_tqdm", False), **kwargs)


def add(*requests):
    return lambda llm: llm.llm_engine.add_requests(list(requests))


GREEDY = SamplingParams(temperature=0, max_tokens=4)
ENGINE_CASES = [
    ("generate(None)", generate(None), TypeError, "prompts None"),
    ("generate(5)", generate(5), TypeError, "prompts 5"),
    ("generate(['text', 5])", generate(["text", 5]), TypeError, "prompts[1] 5"),
    ("generate([1, 'a'])", generate([1, "a"]), TypeError, "prompt[1] is 'a'"),
    ("generate([[1, 'a']])", generate([[1, "a"]]), TypeError, "prompts[0][1] is 'a'"),
    ("generate(tensor)", generate(torch.tensor([1, 2])), TypeError, ".tolist()"),
    ("generate({1: 2, 3: 4})", generate({1: 2, 3: 4}), TypeError, "{1: 2, 3: 4}"),
    ("generate({'prompts': ...})", generate({"prompts": "x"}), TypeError, "'prompts'"),
    ("generate({'prompt_token_ids': 'ab'})", generate({"prompt_token_ids": "ab"}), TypeError,
     "'ab'"),
    ("generate({'prompt': 5})", generate({"prompt": 5}), TypeError,
     "prompt['prompt'] must be a string (the prompt's text), got 5"),
    ("generate(token id past vocab)", generate([[1, 2], [1, 10**6]]), ValueError, "1000000"),
    ("generate(negative token id)", generate([[1, -1]]), ValueError, "-1"),
    ("generate(empty prompt)", generate([[1, 2], []]), ValueError, "empty"),
    ("generate(too long)", generate([[5] * 3000]), ValueError,
     "3000 tokens, so the request needs 3001 positions (3000 of the prompt + 1 generated), "
     "but max_model_len is 128 here: left unset, it was lowered from the model's 2048 to the "
     "128 the KV cache holds (num_blocks=32 x block_size=4); shorten the prompt to 127 tokens "
     "or fewer (up to 2047 with num_blocks=512 or more)"),  # newcomer 36: it said 2,047
    # named by its place in the caller's list, not by LLM's internal request id
    ("generate(second too long)", generate(["a", [5] * 3000]), ValueError,
     "prompts[1]: the prompt has 3000 tokens"),
    ("generate(one too long)", generate([5] * 3000), ValueError,
     "generate(): the prompt has 3000 tokens"),
    ("generate(longer than the cache)", generate([[5] * 200]), ValueError,
     "200 tokens, so the request needs 201 slots (200 of the prompt + 1 generated), but the "
     "whole KV cache holds 128 (num_blocks=32 x block_size=4); max_model_len, left unset, "
     "was lowered from the model's 2048 to the 128 the cache holds; give the engine "
     "num_blocks=51 or more, or shorten the prompt to 127 tokens or fewer"),
    ("generate(sampling_params=5)", generate(["a"], 5), TypeError, "5"),
    ("generate(sampling_params=[ok, 5])", generate(["a", "b"], [GREEDY, 5]), TypeError,
     "sampling_params[1]"),
    ("generate(params count)", generate(["a", "b"], [GREEDY]), ValueError,
     "1 sampling params for 2 prompts"),
    ("generate(seed 2**64 for a batch)", generate(["a", "b"], SamplingParams(seed=2**64 - 1),
                                                  on_step=5), TypeError, "5"),
    ("generate(use_tqdm='no')", generate(["a"], use_tqdm="no"), TypeError, "'no'"),
    ("generate(on_step=5)", generate(["a"], on_step=5), TypeError, "5"),
    ("generate(stop token past vocab)", generate(["a"], SamplingParams(stop_token_ids=[10**6])),
     ValueError, "1000000"),
    ("generate(n past max_num_seqs)", generate(["a"], SamplingParams(n=300)), ValueError,
     "n=300 samples"),
    ("generate(logprobs past max_logprobs)", generate(["a"], SamplingParams(logprobs=21)),
     ValueError, "max_logprobs=20 (an engine argument, vLLM's default 20): build the engine "
     "with LLM(..., max_logprobs=21), or ask for fewer"),
    ("generate(logprobs past the vocabulary)", generate(["a"], SamplingParams(logprobs=5000)),
     ValueError, "logprobs=5000 asks for more logprobs than the vocabulary has tokens (1024)"),
    # n samples (or beams) share the prompt's 5 full blocks and need one each: 35 of 32
    ("generate(n past the cache)", generate([[5] * 20], SamplingParams(n=30)), ValueError,
     "n=30 sequences share 5 full blocks of the prompt"),
    ("generate(beams past the cache)", generate([[5] * 20], SamplingParams(
        use_beam_search=True, beam_width=30, temperature=0)), ValueError,
     "lower beam_width to 27 or less, or give the engine num_blocks=35 or more"),
    ("generate(logprobs=-1 past max_logprobs)", generate(["a"], SamplingParams(logprobs=-1)),
     ValueError, "1024 logprobs"),
    ("generate(prompt_logprobs past max_logprobs)",
     generate(["a"], SamplingParams(prompt_logprobs=30)), ValueError, "prompt_logprobs=30"),
    ("chat(5)", lambda llm: llm.chat(5, use_tqdm=False), TypeError, "5"),
    # one conversation: its messages are named messages[j] (finding 10), in a list [i][j]
    ("chat(content 5)", lambda llm: llm.chat([{"role": "user", "content": 5}]), TypeError,
     "messages[0]['content'] must be text, got 5"),
    # (a content that is None or missing is empty text, as vLLM renders it: issue #26 N15)
    ("chat(content a dict)", lambda llm: llm.chat([{"role": "user", "content": {"a": 1}}]),
     TypeError, "messages[0]['content'] must be text, got {'a': 1}"),
    ("chat(second conversation)", lambda llm: llm.chat([[{"role": "user", "content": "x"}],
                                                        [{"role": "user", "content": 7}]]),
     TypeError, "messages[1][0]['content'] must be text, got 7"),
    ("chat(image part)", lambda llm: llm.chat([{"role": "user", "content": [
        {"type": "image_url", "image_url": "x"}]}]), ValueError,
     "messages[0]['content'][0]: content parts of type 'image_url' are not supported"),
    # newcomer42 finding 1: vLLM 0.32's text parts are taken (tests/engine/test_vllm_parity42.py);
    # a part of another type, or a text part without its text, is refused by name
    *[(f"chat({kind} part)", lambda llm, part=part: llm.chat(
        [{"role": "user", "content": ["x", part]}], use_tqdm=False), ValueError,
       f"messages[0]['content'][1]: content parts of type {part['type']!r} are not supported")
      for kind, part in [("input_image", {"type": "input_image", "image_url": "x"}),
                         ("audio_url", {"type": "audio_url", "audio_url": {"url": "x"}}),
                         ("input_audio", {"type": "input_audio", "input_audio": {}}),
                         ("video_url", {"type": "video_url", "video_url": {"url": "x"}}),
                         ("image_embeds", {"type": "image_embeds", "image_embeds": "x"}),
                         ("tool_reference", {"type": "tool_reference", "name": "t"}),
                         ("unknown", {"type": "foo", "text": "x"})]],
    *[(f"chat({kind} part without its text)", lambda llm, part=part: llm.chat(
        [{"role": "user", "content": [part]}], use_tqdm=False), TypeError,
       f"messages[0]['content'][0]: a {part['type']!r} part holds its text as a string")
      for kind, part in [("text", {"type": "text"}), ("input_text", {"type": "input_text"}),
                         ("output_text", {"type": "output_text", "text": None}),
                         ("refusal under 'text'", {"type": "refusal", "text": "x"}),
                         ("thinking under 'text'", {"type": "thinking", "text": "x"}),
                         ("text a number", {"type": "text", "text": 5})]],
    *[(f"chat(part {part!r})", lambda llm, part=part: llm.chat(
        [{"role": "user", "content": [part]}], use_tqdm=False), TypeError,
       "messages[0]['content'][0] must be a string or a dict with a 'type'")
      for part in [5, None, {"text": "x"}, {"type": None, "text": "x"}, ["x"]]],
    ("chat(both generation flags)", lambda llm: llm.chat(
        [{"role": "user", "content": "x"}], continue_final_message=True), ValueError,
     "add_generation_prompt=False"),
    ("beam_search(SamplingParams)", lambda llm: llm.beam_search(["a"], GREEDY), TypeError,
     "BeamSearchParams"),
    ("beam_search(prompts None)", lambda llm: llm.beam_search(None, BeamSearchParams(2, 3)),
     TypeError, "prompts None"),
    ("add_request(id in flight)", add(("keep", [1, 2], None)), ValueError, "'keep'"),
    ("add_requests(ids repeat)", add(("a", [1], None), ("a", [2], None)), ValueError,
     "'a'"),
    ("add_requests(second prompt None)", add(("x", [1], None), ("y", None, None)), TypeError,
     "prompt None"),
    ("add_requests(second params str)", add(("x", [1], None), ("y", [1], "greedy")), TypeError,
     "str"),
    ("add_requests(a pair)", add(("x", [1], None), ("y", [1])), TypeError, "('y', [1])"),
    ("add_request(arrival nan)", lambda llm: llm.llm_engine.add_request(
        "t", [1], GREEDY, arrival_time=math.nan), ValueError, "nan"),
    ("add_request(dict as prompt)", lambda llm: llm.llm_engine.add_request(
        "d", {1: 2, 3: 4}, GREEDY), TypeError, "{1: 2, 3: 4}"),
    # newcomer42 finding 4: what vLLM 0.32 refuses, refused (its behaviour: test_vllm_parity42)
    *[(f"add_request(request_id {rid!r})", lambda llm, rid=rid: llm.llm_engine.add_request(
        rid, [1], GREEDY), TypeError, f"request_id must be a string, got {rid!r}")
      for rid in [5, np.int64(7), 5.0, None, True]],
    ("add_request(params None)", lambda llm: llm.llm_engine.add_request("p", [1], None),
     TypeError, "params must be a SamplingParams, got None (NoneType); vLLM 0.32 refuses it"),
    ("add_request(params omitted)", lambda llm: llm.llm_engine.add_request("p", [1]),
     TypeError, "missing 1 required positional argument: 'params'"),
    ("add_request(BeamSearchParams)", lambda llm: llm.llm_engine.add_request(
        "p", [1], BeamSearchParams(2, 3)), TypeError, "beam search over prompts is "
                                                      "LLM.beam_search"),
    ("beam_search([])", lambda llm: llm.beam_search([], BeamSearchParams(2, 3)), ValueError,
     "beam_search() got no prompts (an empty list)"),
    ("beam_search(())", lambda llm: llm.beam_search((), BeamSearchParams(2, 3)), ValueError,
     "beam_search() got no prompts"),
    ("beam_search('a string')", lambda llm: llm.beam_search("a string", BeamSearchParams(2, 3)),
     TypeError, "beam_search() takes a list of prompts, got one prompt 'a string': give "
                "[prompt]"),
    ("beam_search({'prompt': ...})", lambda llm: llm.beam_search(
        {"prompt": "a"}, BeamSearchParams(2, 3)), TypeError, "got one prompt {'prompt': 'a'}"),
    ("beam_search(token ids)", lambda llm: llm.beam_search([1, 2], BeamSearchParams(2, 3)),
     TypeError, "got token ids [1, 2]: give [{'prompt_token_ids': ids}]"),
    # newcomer42 finding 6: generate's refusal of a BeamSearchParams points to beam_search
    *[(f"generate({name})", generate(["a"], value), TypeError,
       "for vLLM's beam search call llm.beam_search(prompts, params)")
      for name, value in [("BeamSearchParams", BeamSearchParams(2, 3)),
                          ("[BeamSearchParams]", [BeamSearchParams(2, 3)]),
                          ("[ok, BeamSearchParams]", [GREEDY, BeamSearchParams(2, 3)])]],
    # newcomer42 finding 5: a count of 1 is said in the singular
    ("generate(2 params for 1 prompt)", generate(["a"], [GREEDY, GREEDY]), ValueError,
     "got 2 sampling params for 1 prompt: give one for all (a SamplingParams, not in a "
     "list), or a list with one per prompt"),
]


@pytest.mark.parametrize("call, error, named", [pytest.param(*c[1:], id=c[0])
                                                for c in ENGINE_CASES])
def test_engine_entry_points(busy_llm, call, error, named):
    check(call, busy_llm, error, named, engine_state)


def test_the_busy_engine_still_finishes_its_request(busy_llm):
    """After every refusal above, the request in flight runs to its end, and a
    prompt in each accepted form gives the same tokens."""
    engine = busy_llm.llm_engine
    done = []
    while engine.has_unfinished_requests():
        done += engine.step().finished
    assert [o.request_id for o in done] == ["keep"]
    ids = busy_llm.get_tokenizer()("Once upon a time")["input_ids"]
    forms = ["Once upon a time", {"prompt": "Once upon a time"}, ids, tuple(ids),
             {"prompt_token_ids": ids}]
    outs = busy_llm.generate(forms, GREEDY, use_tqdm=False)
    assert len({tuple(o.outputs[0].token_ids) for o in outs}) == 1
    assert outs[0].outputs[0].token_ids == done[0].outputs[0].token_ids[:4]
    assert engine.memory_stats()["used_blocks"] == 0


def test_a_model_name_fails_at_once_when_the_hub_is_unreachable(monkeypatch):
    """No half a minute of hub retries: offline, a name not in the local cache is
    refused before transformers tries the network, and says why."""
    from huggingface_hub import constants

    from pagedkit.model import loader

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError, match="'no-such-org/no-such-model': it is not in the local "
                                      "Hugging Face cache and HF_HUB_OFFLINE is set"):
        LLM("no-such-org/no-such-model")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    tried = []

    def no_network(address, timeout):
        tried.append(address)
        raise OSError("network is unreachable")

    monkeypatch.setattr(loader.socket, "create_connection", no_network)
    with pytest.raises(OSError, match=r"the hub \(huggingface.co\) is not reachable from here "
                                      r"\(network is unreachable\)"):
        LLM("gpt2")
    assert tried == [("huggingface.co", 443)]
    with pytest.raises(FileNotFoundError, match="model path 'models/my/tiny' does not exist"):
        LLM("models/my/tiny")  # a path, not an org/name: the hub is never asked
    assert len(tried) == 1
