"""How fast does the paged engine serve, next to transformers itself?

``python -m pagedkit bench [--model tiny|larger] [--requests 64] [--quick] [--json PATH]
[--systems pagedkit,hf_static,hf_continuous,floor] [--rounds N] [--profile]
[--workload sharegpt|alpaca] [--threads T]``

(``--systems`` also takes ``pagedkit_unpacked``, ``pagedkit_unfused`` and
``pagedkit_compiled``, not run by default.)

One workload — requests with ShareGPT-shaped prompt and output lengths
(`pagedkit.sim`'s synthetic trace, scaled to the model; ``--workload
alpaca``: Alpaca-shaped, short prompts and longer answers), all arriving at
once, each generating exactly its output length (greedy, end-of-sequence
ignored) — runs through these systems on the same model:

* ``pagedkit``: `LLM.generate` — continuous batching over the paged cache;
* ``hf_static``: transformers ``generate`` in fixed, left-padded batches of
  ``--batch-size`` requests, as a static-batching server would: a batch runs
  until its longest request ends, and its KV cache is the padded rectangle;
* ``hf_continuous``: transformers' own continuous-batching manager (the
  engine behind ``generate_batch``), with per-request lengths;
* ``pagedkit_unpacked``: the same with ``PAGEDKIT_PREPACK=off``: every
  linear layer as transformers built it, none prepacked for oneDNN
  (`pagedkit.model.accel`); beside ``pagedkit``, what the prepacked
  linear layers change (not run unless named);
* ``pagedkit_unfused``: the same with ``PAGEDKIT_FUSE=off``: q, k and v
  (and gate and up) multiplied one by one (`pagedkit.model.fused`); beside
  ``pagedkit``, what the fused projections change on a model ``auto``
  fuses (512 wide and more; ``PAGEDKIT_FUSE=on`` fuses the tiny one too)
  (not run unless named);
* ``pagedkit_compiled``: the same with ``PAGEDKIT_COMPILE=on``: the model's
  forward under ``torch.compile`` (`pagedkit.model.compiled`); its note says
  how many graphs it compiled and how long that took, the untimed warm-up's
  included (not run unless named);
* ``floor``: the same packed forwards over contiguous per-request K/V with
  no scheduling at all (`pagedkit.bench.floor`), with the linear layers
  pagedkit's ``PAGEDKIT_PREPACK`` gives it: what no engine on this model
  can beat. pagedkit's share of it is printed as ``of floor``;
* ``vllm``: the real vLLM's CPU build, in this process (`pagedkit.vllm`),
  on the same weights; in the default systems only where vLLM is installed
  (docs/vllm.md). Its blocks are 32 tokens (the CPU build's smallest) when
  ``--block-size`` is not a multiple of 32, its prefill always chunked.

``--rounds N`` runs the systems N times, interleaved (a, b, c, a, b, c, ...),
and reports each system's median round (of an even number, the faster of
the middle two): on a shared machine the load drifts, and
interleaving spreads it over all systems alike. Long runs print a progress
line every few seconds (``--no-progress`` leaves them out). ``--profile``
then runs pagedkit once more with timers and prints where its time goes:
scheduling, packing, the model's linear layers, attention, the rest of the
model, sampling, and the engine's bookkeeping.

Each reports output tokens per second (and per second of process CPU time,
which a shared machine's load disturbs less than wall time; both over the same
window, the serving only: from the requests' common arrival to the last
output, never a system's setup such as building the `LLM`), time to first
token (from the common arrival time), and the share of reserved KV slots that
held a token ("KV usage"; where it is known). Greedy outputs are compared with pagedkit's and
the number of requests that differ is reported: the systems must agree on
what they compute before their speeds mean anything.

The ``larger`` model is a random-weight Llama (about 40M parameters), so
compute, not Python overhead, dominates a step on CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from .._validation import PROG, positive_float, positive_int, writable_file
from ..i18n import english_error
from ..i18n.terminal import HelpFormatter
from . import add_no_progress, check_choice, device_unavailable, load_average

MODELS = ("tiny", "larger")
SYSTEMS = ("pagedkit", "hf_static", "hf_continuous", "floor", "vllm", "pagedkit_unpacked",
           "pagedkit_compiled", "pagedkit_unfused")
#: What runs when no system is named: vLLM only where it is installed.
DEFAULT_SYSTEMS = SYSTEMS[:5] if importlib.util.find_spec("vllm") else SYSTEMS[:4]


@dataclass
class Workload:
    prompts: list[list[int]]
    output_lens: list[int]

    @property
    def num_output_tokens(self) -> int:
        return sum(self.output_lens)


@dataclass
class Result:
    system: str
    seconds: float
    output_tokens: int
    ttft_mean_s: float
    ttft_p50_s: float
    kv_usage: float | None
    outputs_differing: int | None = None  # requests whose tokens differ from pagedkit's
    note: str = ""
    round_seconds: list[float] = field(default_factory=list)  # every round; `seconds` the median
    cpu_seconds: float | None = None  # process CPU time (all threads), same window as `seconds`

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds

    @property
    def tokens_per_cpu_s(self) -> float | None:
        return None if self.cpu_seconds is None else self.output_tokens / self.cpu_seconds


@dataclass
class Report:
    model: str
    device: str
    num_requests: int
    mean_prompt_len: float
    mean_output_len: float
    results: list[Result] = field(default_factory=list)
    environment: dict = field(default_factory=dict)
    profile: dict | None = None  # seconds per part of pagedkit's steps (--profile)
    vllm_profile: dict | None = None  # the same split of vLLM's (--profile with vllm)
    workload: str = "sharegpt"

    def result(self, system: str) -> Result | None:
        return next((r for r in self.results if r.system == system), None)

    def share_of_floor(self, per: str = "tokens_per_s") -> float | None:
        """pagedkit's throughput as a share of the floor's, both measured in this
        run, per second of wall time (or of CPU time: ``per="tokens_per_cpu_s"``).
        None without both, or when pagedkit measured faster than the floor, which
        no engine can be: the machine's load changed between the runs (`floor_line`)."""
        paged, floor = self.result("pagedkit"), self.result("floor")
        if not (paged and floor) or getattr(floor, per) is None:
            return None
        share = getattr(paged, per) / getattr(floor, per)
        return share if share <= 1 else None

    def as_dict(self) -> dict:
        out = asdict(self)
        for r, d in zip(self.results, out["results"], strict=True):
            d["tokens_per_s"] = r.tokens_per_s
            d["tokens_per_cpu_s"] = r.tokens_per_cpu_s
        out["pagedkit_share_of_floor"] = self.share_of_floor()
        out["pagedkit_share_of_floor_cpu"] = self.share_of_floor("tokens_per_cpu_s")
        return out


class Progress:
    """A line at most every `interval` seconds while a system runs."""

    def __init__(self, system: str, total_tokens: int, log: Callable[[str], None],
                 interval: float = 10.0) -> None:
        self.system, self.total, self.log, self.interval = system, total_tokens, log, interval
        self.done = 0
        self.start = self.last = time.perf_counter()

    def tick(self, tokens: int) -> None:
        self.done += tokens
        now = time.perf_counter()
        if now - self.last >= self.interval:
            self.last = now
            self.log(f"  {self.system}: {self.done}/{self.total} output tokens, "
                     f"{now - self.start:.0f} s in (its setup included; the timed window "
                     "starts after it)")


def build_model(name: str, device: torch.device):
    """A fresh copy of the model (each system gets its own: pagedkit switches
    the attention of the model it serves)."""
    if name == "tiny":
        from ..models import load_tiny

        model, _ = load_tiny()
    elif name == "larger":
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1376,
                             num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2,
                             max_position_embeddings=2048)
        model = LlamaForCausalLM(config)
    else:
        raise ValueError(f"model must be one of {MODELS}, got {name!r}")
    return model.to(device).eval()


WORKLOADS = ("sharegpt", "alpaca")
#: Length scale on CPU: ShareGPT's lengths (mean prompt 161, output 338) are
#: cut to 1/8 to fit a CPU run; Alpaca's (19 and 58) are short already.
CPU_SCALE = {"sharegpt": 0.125, "alpaca": 1.0}


def sharegpt_workload(num_requests: int, vocab_size: int, *, scale: float, max_len: int,
                      seed: int = 0, dataset: str = "sharegpt") -> Workload:
    """ShareGPT-shaped (or `dataset`-shaped, see `WORKLOADS`) lengths times
    `scale`, random token ids, all at once."""
    from ..sim.trace import synthetic_trace

    if dataset not in WORKLOADS:
        raise ValueError(f"workload must be one of {WORKLOADS}, got {dataset!r}")
    trace = synthetic_trace(dataset, rate=1.0, num_requests=num_requests, seed=seed)
    rng = np.random.default_rng(seed)
    prompts, outs = [], []
    for r in trace:
        p = max(1, round(r.prompt_len * scale))
        o = max(1, min(round(r.output_len * scale), max_len - p))
        prompts.append(rng.integers(3, vocab_size, size=p).tolist())
        outs.append(o)
    return Workload(prompts, outs)


def _quiet(_: object) -> None:
    """Say nothing (a progress tick or a log line)."""


def _clocks() -> tuple[float, float]:
    """Wall time and the process's CPU time (all its threads), read together.

    Every runner reads both here, once where its serving starts (the requests
    arrive; the system is built and warmed up already) and once where it ends,
    so ``seconds`` and ``cpu_seconds`` cover exactly the same work: the
    serving, never the setup (building an `LLM`, starting transformers'
    batching manager, switching the floor's attention) or the teardown."""
    return time.perf_counter(), time.process_time()


@contextlib.contextmanager
def prepack(mode: str | None) -> Iterator[None]:
    """``PAGEDKIT_PREPACK`` set to `mode` inside the block (None: left as it is)."""
    from ..model.accel import ENV_VAR

    with _environ(ENV_VAR, mode):
        yield


@contextlib.contextmanager
def _environ(name: str, value: str | None) -> Iterator[None]:
    """Environment variable `name` set to `value` inside the block (None: left as it is)."""
    before = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def compile_note(runner) -> str:
    """How many graphs a compiled forward compiled, in how long (`pagedkit.model.compiled`)."""
    forward = getattr(runner, "compiled", None)
    if forward is None:
        return ""
    if forward.reason:
        return f"compiled forward fell back: {forward.reason}"
    from ..model.compiled import TOTALS

    return (f"compiled forward: {forward.graphs} graphs compiled in this run "
            f"({forward.compile_seconds:.1f} s), {TOTALS['graphs']} in this process "
            f"({TOTALS['seconds']:.1f} s, the untimed warm-up's included)")


def prepack_note(model) -> str:
    """How many of `model`'s linear layers run prepacked (`pagedkit.model.accel`)."""
    report = getattr(model, "pagedkit_prepack", None)
    if report is None:
        return ""  # with none prepacked, why (layers too small to pay, ...): "0 of 29" alone
    return str(report) if not report.replaced else str(report).split(";")[0]  # reads as a fault


def run_pagedkit(model, work: Workload, block_size: int, progress: Callable[[int], None] = _quiet,
                 llm=None, system: str = "pagedkit") -> tuple[Result, list[list[int]]]:
    from ..engine import LLM
    from ..sampling_params import SamplingParams

    if llm is None:
        from ..model.compiled import ENV_VAR as COMPILE
        from ..model.fused import ENV_VAR as FUSE

        with prepack("off" if system == "pagedkit_unpacked" else None), \
                _environ(FUSE, "off" if system == "pagedkit_unfused" else None), \
                _environ(COMPILE, "on" if system == "pagedkit_compiled" else None):
            llm = LLM(model, block_size=block_size)
    params = [SamplingParams(temperature=0, max_tokens=o, ignore_eos=True)
              for o in work.output_lens]
    usage: list[float] = []

    def on_step(step) -> None:
        usage.append(step.memory["kv_usage"])
        progress(len(step.new_tokens))

    start, cpu = _clocks()
    t0 = time.monotonic()
    outs = llm.generate(work.prompts, params, use_tqdm=False, on_step=on_step)
    end, cpu_end = _clocks()
    ttft = [o.metrics.first_token_time - t0 for o in outs]
    tokens = [o.outputs[0].token_ids for o in outs]
    notes = [prepack_note(llm.llm_engine.runner.model), compile_note(llm.llm_engine.runner)]
    if llm.llm_engine.device.type == "cpu" and torch.get_num_threads() > 1:
        notes.append(f"1 or {torch.get_num_threads()} threads per step, whichever measured "
                     "faster (pagedkit.model.threads)")
    note = "; ".join(n for n in notes if n)
    return Result(system, end - start, sum(map(len, tokens)), statistics.mean(ttft),
                  statistics.median(ttft), statistics.mean(usage), note=note,
                  cpu_seconds=cpu_end - cpu), tokens


class _FirstTokenClock:
    """A generate() streamer that notes when the first new token appears."""

    def __init__(self) -> None:
        self.calls = 0
        self.first_token: float | None = None

    def put(self, value) -> None:
        self.calls += 1
        if self.calls == 2:  # the first put is the prompt
            self.first_token = time.perf_counter()

    def end(self) -> None:
        pass


def run_hf_static(model, work: Workload, batch_size: int, pad_id: int,
                  progress: Callable[[int], None] = _quiet) -> tuple[Result, list[list[int]]]:
    """Fixed batches in arrival order, left-padded; each runs to its longest output."""
    tokens: list[list[int]] = []
    ttft: list[float] = []
    held = reserved = 0
    start, cpu = _clocks()
    for b in range(0, len(work.prompts), batch_size):
        prompts = work.prompts[b:b + batch_size]
        outs = work.output_lens[b:b + batch_size]
        width = max(map(len, prompts))
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        clock = _FirstTokenClock()
        with torch.inference_mode():
            gen = model.generate(ids.to(model.device), attention_mask=mask.to(model.device),
                                 max_new_tokens=max(outs), min_new_tokens=max(outs),
                                 do_sample=False, eos_token_id=None, pad_token_id=pad_id,
                                 streamer=clock)
        for row, o in zip(gen[:, width:].tolist(), outs, strict=True):
            tokens.append(row[:o])
        ttft += [clock.first_token - start] * len(prompts)
        held += sum(len(p) + o for p, o in zip(prompts, outs, strict=True))
        reserved += len(prompts) * (width + max(outs))
        progress(sum(outs))
    end, cpu_end = _clocks()
    return Result("hf_static", end - start, work.num_output_tokens, statistics.mean(ttft),
                  statistics.median(ttft), held / reserved,
                  note=(f"batches of {batch_size}" if batch_size < len(work.prompts) else
                        f"all {len(work.prompts)} requests in one batch (batches of up to "
                        f"{batch_size})"),
                  cpu_seconds=cpu_end - cpu), tokens


def run_hf_continuous(model, work: Workload, progress: Callable[[int], None] = _quiet
                      ) -> tuple[Result, list[list[int]]]:
    """transformers' continuous-batching manager (what generate_batch uses).

    Its KV cache holds the whole workload at once, as pagedkit's does: left to
    itself it takes most of the free memory (90% of it on CPU; a run peaked at
    11 GiB for 8 short requests), and setting that memory up cost it more time
    than serving them."""
    from transformers import ContinuousBatchingConfig, GenerationConfig

    # eos_token_id -1: no end-of-sequence (each request runs to its length), said
    # outright; left None, the manager warned twice per run that it set -1 itself
    config = GenerationConfig(do_sample=False, max_new_tokens=max(work.output_lens),
                              eos_token_id=-1, pad_token_id=0)
    page = ContinuousBatchingConfig().page_size
    blocks = sum(-(-(len(p) + o) // page) for p, o in zip(work.prompts, work.output_lens,
                                                           strict=True))
    manager = model.init_continuous_batching(
        generation_config=config, continuous_batching_config=ContinuousBatchingConfig(
            num_blocks=blocks))
    manager.start()
    try:
        start, cpu = _clocks()
        ids = [manager.add_request(p, request_id=f"r{i}", max_new_tokens=o,
                                   record_timestamps=True)
               for i, (p, o) in enumerate(zip(work.prompts, work.output_lens, strict=True))]
        results = {}
        while len(results) < len(ids):
            out = manager.get_result(timeout=60)
            if out is None:
                raise RuntimeError("transformers' continuous batching stopped answering")
            if out.is_finished():
                results[out.request_id] = out
                progress(len(out.generated_tokens))
        end, cpu_end = _clocks()
    finally:
        manager.stop(block=True)
    tokens = [results[i].generated_tokens for i in ids]
    ttft = [results[i].timestamps[0] - start for i in ids if results[i].timestamps]
    return Result("hf_continuous", end - start, sum(map(len, tokens)), statistics.mean(ttft),
                  statistics.median(ttft), None, note="KV usage not exposed",
                  cpu_seconds=cpu_end - cpu), tokens


def run_floor(model, work: Workload, progress: Callable[[int], None] = _quiet
              ) -> tuple[Result, list[list[int]]]:
    """The same packed forwards with no engine around them (`pagedkit.bench.floor`)."""
    from ..model.accel import prepack_linears
    from . import floor

    prepack_linears(model)  # the linear layers pagedkit's LLM(model) would get
    floor.prepare(model)
    start, cpu = _clocks()
    tokens, first = floor.generate(model, work.prompts, work.output_lens, on_step=progress)
    end, cpu_end = _clocks()
    ttft = [t - start for t in first]
    return Result("floor", end - start, sum(map(len, tokens)), statistics.mean(ttft),
                  statistics.median(ttft), None,
                  note="contiguous K/V, no scheduling, the engine's threads; "
                  + prepack_note(model),
                  cpu_seconds=cpu_end - cpu), tokens


def vllm_engine(model_name: str, block_size: int):
    """vLLM serving the bench's model (`pagedkit.vllm.compare.VllmEngine`), with
    the KV cache pagedkit gets on CPU, in blocks vLLM's CPU build accepts."""
    import tempfile

    from ..engine.llm_engine import DEFAULT_CPU_KV_CACHE_BYTES
    from ..model.kv_cache import KVCacheSpec
    from ..vllm.compare import VllmEngine, tiny_model_dir

    block_size = block_size if block_size % 32 == 0 else 32
    model = build_model(model_name, torch.device("cpu"))
    blocks = KVCacheSpec.from_config(model.config, torch.float32).num_blocks_for(
        DEFAULT_CPU_KV_CACHE_BYTES, block_size)
    length = model.config.max_position_embeddings
    with tempfile.TemporaryDirectory(prefix="pagedkit-bench-") as tmp:  # vLLM reads a folder
        folder = tiny_model_dir() if model_name == "tiny" else tmp
        if model_name != "tiny":
            model.save_pretrained(tmp)  # the same random weights (build_model is seeded)
        return VllmEngine(folder, num_blocks=blocks, block_size=block_size,
                          max_num_batched_tokens=length, max_model_len=length)


def run_vllm(engine, work: Workload, progress: Callable[[int], None] = _quiet
             ) -> tuple[Result, list[list[int]]]:
    """vLLM's CPU build on the same requests (greedy, each to its length)."""
    from ..vllm.compare import Workload as VllmWorkload

    run = engine.run(VllmWorkload(work.prompts, work.output_lens), progress)
    block_size = engine.llm.llm_engine.vllm_config.cache_config.block_size
    return Result("vllm", run.seconds, run.output_tokens, statistics.mean(run.ttft_s),
                  statistics.median(run.ttft_s), None,
                  note=f"vLLM {_vllm_version()} CPU build, blocks of {block_size}, chunked "
                  f"prefill, {torch.get_num_threads()} torch threads",
                  cpu_seconds=run.cpu_seconds), run.tokens


def _vllm_version() -> str:
    import vllm

    return vllm.__version__


PROFILE_PARTS = ("scheduling", "packing", "linear layers", "attention", "model other",
                 "sampling", "bookkeeping", "outside steps")


def profile_pagedkit(model, work: Workload, block_size: int) -> dict:
    """Run pagedkit once with timers around each part of a step; seconds per part.

    ``attention`` is the paged ops (store K/V, attend) the model's layers call,
    ``linear layers`` every ``torch.nn.functional.linear``, ``model other`` the
    rest of the forward (norms, rotary embedding, activations, transformers'
    glue), ``bookkeeping`` what `LLMEngine.step` does besides scheduling,
    packing, the forward and sampling (block copies, outputs, stop checks,
    memory stats), ``outside steps`` what `LLM.generate` does around them.
    The timers cost a little themselves; the split, not the total, is the point.
    """
    from .. import ops
    from ..engine import LLM
    from ..model import accel
    from .timers import PartTimers

    llm = LLM(model, block_size=block_size)
    engine = llm.llm_engine
    timers = PartTimers()
    wrap = timers.wrap

    import torch.nn.functional as F

    wrap(engine, "step", "step")
    wrap(engine.scheduler, "schedule", "scheduling")
    from ..model import runner
    wrap(runner, "pack_step", "packing")  # the runner calls it by this name
    wrap(engine.runner.model, "forward", "forward")
    from ..engine import llm_engine
    wrap(llm_engine, "sample_step", "sampling")  # the engine's step calls it by this name
    # every layer calls these by their names in pagedkit.ops
    for op in ("store_kv", "paged_decode_attention", "paged_prefill_attention"):
        wrap(ops, op, "attention")
    wrap(F, "linear", "linear layers")
    wrap(accel, "packed_linear", "linear layers")  # the prepacked ones (PAGEDKIT_PREPACK)
    try:
        result, _ = run_pagedkit(model, work, block_size, llm=llm)
    finally:
        timers.restore()
    seconds = timers.seconds
    seconds["model other"] = seconds["forward"] - seconds["attention"] - seconds["linear layers"]
    seconds["bookkeeping"] = (seconds["step"] - seconds["scheduling"] - seconds["packing"]
                              - seconds["forward"] - seconds["sampling"])
    seconds["outside steps"] = result.seconds - seconds["step"]
    return {"total_s": result.seconds, "tokens_per_s": result.tokens_per_s,
            "seconds": {part: seconds[part] for part in PROFILE_PARTS},
            "share": {part: seconds[part] / result.seconds for part in PROFILE_PARTS}}


def format_profile(profile: dict, other: dict | None = None, names=("pagedkit", "vllm")) -> str:
    """Seconds and shares per part of `profile`, and of `other` beside it."""
    profiles = [p for p in (profile, other) if p is not None]
    lines = [f"{name} profile: {p['total_s']:.2f} s ({p['tokens_per_s']:.1f} output tok/s "
             "with timers on)" for name, p in zip(names, profiles, strict=False)]
    if other is not None:
        lines.append(f"  {'':<15}" + "".join(f"{name:>18}" for name in names))
    for part in PROFILE_PARTS:
        lines.append(f"  {part:<15}" + "".join(
            f"{p['seconds'][part]:>8.2f} s{p['share'][part]:>8.1%}" for p in profiles))
    return "\n".join(lines)


DEVICES = ("auto", "cpu", "cuda")


def check_systems(systems) -> tuple[str, ...]:
    """The systems asked for, or a ValueError naming the unknown ones and the valid ones."""
    return check_choice("system", systems, SYSTEMS)


def benchmark(model_name: str = "tiny", *, num_requests: int = 64, scale: float | None = None,
              batch_size: int = 16, block_size: int = 16, device: str = "auto",
              systems: tuple[str, ...] = DEFAULT_SYSTEMS,
              rounds: int = 1, profile: bool = False, workload: str = "sharegpt",
              log: Callable[[str], None] = print, show_progress: bool = True) -> Report:
    """Serve one workload on each of `systems` and report their speeds.
    `log` gets what happens as it happens: which system runs, a line every
    few seconds, its speed (all left out when not `show_progress`) and any
    system that fails (always)."""
    systems = check_systems(systems)
    say = log if show_progress else _quiet
    why = device_unavailable(device) if device != "auto" else None
    if why:
        raise ValueError(f"device={device!r}: {why}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    for cpu_only in ("floor", "vllm"):
        if cpu_only in systems and device not in ("auto", "cpu"):
            raise ValueError(f"{cpu_only} runs on CPU only here; drop it from systems for "
                             f"device={device!r}")
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available()
                       else "cpu" if device == "auto" else device)
    probe = build_model(model_name, dev)
    vocab = probe.config.vocab_size
    max_len = probe.config.max_position_embeddings
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {WORKLOADS}, got {workload!r}")
    scale = scale if scale is not None else (CPU_SCALE[workload] if dev.type == "cpu" else 1.0)
    work = sharegpt_workload(num_requests, vocab, scale=scale, max_len=max_len, dataset=workload)
    report = Report(model_name, str(dev), num_requests,
                    statistics.mean(map(len, work.prompts)), statistics.mean(work.output_lens),
                    environment={"torch": torch.__version__, "python": platform.python_version(),
                                 "threads": torch.get_num_threads(),
                                 "device_name": torch.cuda.get_device_name(dev)
                                 if dev.type == "cuda" else platform.processor() or "cpu",
                                 "load_average": load_average()}, workload=workload)
    runners = {
        "pagedkit": lambda m, w, p: run_pagedkit(m, w, block_size, p),
        "pagedkit_unpacked": lambda m, w, p: run_pagedkit(m, w, block_size, p,
                                                          system="pagedkit_unpacked"),
        "pagedkit_compiled": lambda m, w, p: run_pagedkit(m, w, block_size, p,
                                                          system="pagedkit_compiled"),
        "pagedkit_unfused": lambda m, w, p: run_pagedkit(m, w, block_size, p,
                                                         system="pagedkit_unfused"),
        "hf_static": lambda m, w, p: run_hf_static(m, w, batch_size, pad_id=0, progress=p),
        "hf_continuous": lambda m, w, p: run_hf_continuous(m, w, p),
        "floor": lambda m, w, p: run_floor(m, w, p),
        "vllm": lambda m, w, p: run_vllm(m, w, p),
    }
    # a short untimed run first: one-time costs (lazy imports, allocator and
    # kernel warm-up) would otherwise land on whichever system runs first
    warmup = Workload(work.prompts[:2], [2] * len(work.prompts[:2]))  # 1 with --requests 1
    models: dict[str, torch.nn.Module] = {}
    runs: dict[str, list[tuple[Result, list[list[int]]]]] = {name: [] for name in systems}
    failed: set[str] = set()
    for r in range(rounds):
        for name in systems:
            if name in failed:
                continue
            say(f"running {name}" + (f" (round {r + 1}/{rounds})" if rounds > 1 else "")
                + f": {work.num_output_tokens} output tokens ...")
            try:
                if name not in models:
                    models[name] = (vllm_engine(model_name, block_size) if name == "vllm"
                                    else build_model(model_name, dev))
                    runners[name](models[name], warmup, _quiet)
                progress = Progress(name, work.num_output_tokens, say)
                result, tokens = runners[name](models[name], work, progress.tick)
            except Exception as err:  # report a system that cannot run here, keep the others
                log(f"  {name} failed: {type(err).__name__}: {err}")
                failed.add(name)
                continue
            say(f"  {name}: {result.tokens_per_s:.1f} output tok/s ({result.seconds:.1f} s)")
            runs[name].append((result, tokens))
    if "vllm" in models:
        if profile:
            from .vllm_profile import profile_vllm

            say("profiling vllm ...")
            report.vllm_profile = profile_vllm(models["vllm"], work)
        models.pop("vllm").close()
    reference = None
    for name in systems:
        if not runs[name]:
            continue
        ordered = sorted(runs[name], key=lambda run: run[0].seconds)
        result, tokens = ordered[(len(ordered) - 1) // 2]  # the median round
        result.round_seconds = [run[0].seconds for run in runs[name]]
        if reference is None:
            reference = tokens
        result.outputs_differing = max(
            sum(a != b for a, b in zip(toks, reference, strict=True)) for _, toks in runs[name])
        report.results.append(result)
    report.environment["load_average_end"] = load_average()
    if profile:
        say("profiling pagedkit ...")
        report.profile = profile_pagedkit(build_model(model_name, dev), work, block_size)
    return report


def format_report(report: Report) -> str:
    env = report.environment
    lines = [f"model={report.model} workload={report.workload} device={report.device} "
             f"requests={report.num_requests} mean prompt={report.mean_prompt_len:.1f} "
             f"mean output={report.mean_output_len:.1f} threads={env.get('threads')} "
             f"load {env.get('load_average')} -> {env.get('load_average_end')}",
             f"{'system':<15}{'tok/s':>10}{'x pagedkit':>12}{'tok/cpu-s':>11}{'TTFT mean':>11}"
             f"{'TTFT p50':>10}{'KV usage':>10}{'differ':>8}  note"]
    base = next((r.tokens_per_s for r in report.results if r.system == "pagedkit"), None)
    for r in report.results:
        ratio = f"{r.tokens_per_s / base:.2f}" if base else "-"
        usage = f"{r.kv_usage:.1%}" if r.kv_usage is not None else "n/a"
        spread = (f"; rounds {min(r.round_seconds):.2f}-{max(r.round_seconds):.2f} s"
                  if len(r.round_seconds) > 1 else "")
        cpu = f"{r.tokens_per_cpu_s:.1f}" if r.tokens_per_cpu_s is not None else "-"
        lines.append(f"{r.system:<15}{r.tokens_per_s:>10.1f}{ratio:>12}{cpu:>11}"
                     f"{r.ttft_mean_s:>10.2f}s"
                     f"{r.ttft_p50_s:>9.2f}s{usage:>10}{r.outputs_differing:>8}  {r.note}"
                     f"{spread}")
    line = floor_line(report)
    if line:
        lines.append(line)
    if report.profile is not None:
        lines.append(format_profile(report.profile, report.vllm_profile))
    return "\n".join(lines)


def floor_line(report: Report) -> str | None:
    """What the floor says about pagedkit, or why it says nothing this time."""
    paged, floor = report.result("pagedkit"), report.result("floor")
    if not (paged and floor):
        return None
    shares = {what: report.share_of_floor(per) for what, per in
              (("wall", "tokens_per_s"), ("CPU", "tokens_per_cpu_s"))}
    said = [f"{share:.1%} in {what} time" for what, share in shares.items() if share is not None]
    line = ("pagedkit's throughput as a share of the floor's (the same forwards with no engine "
            "around them; no engine passes 100%): " + (", ".join(said) or "none"))
    refused = [what for what, share in shares.items() if share is None]
    if refused:
        env = report.environment
        times = " and ".join(f"{what} time" for what in refused)
        line += (f"; in {times} pagedkit measured faster than the floor, which no engine "
                 f"can be: the load changed between their runs (load "
                 f"{env.get('load_average')} -> {env.get('load_average_end')}), so no share; "
                 "--rounds 3 interleaves the runs and takes medians")
    return line


#: What the default run cost, measured with /usr/bin/time -v on 2 cores shared with
#: other work (load 6-11): 16 min 47 s, 1.81 GiB peak resident (1,899,940 kB). Before
#: hf_continuous's cache was sized to the workload it took 10.2 GiB (issue #26).
DEFAULT_RUN_NOTE = ("the default run (both models, 64 requests, every system) took 17 minutes "
                    "on 2 busy cores (load 6-11) and 1.8 GiB of memory at its peak")
DEFAULT_RUN_GIB = 1.8
#: --quick, measured the same way: 1 min 51 s at load 8, 0.8 GiB (most of it start-up);
#: 13 s at load 3 (fourth newcomer's round, 2026-12-02).
QUICK_NOTE = ("--quick (8 requests, tiny model) took 2 minutes there (13 s at load 3), most of "
              "it start-up")
#: --quick's first line (newcomer finding 6: a smoke run said nothing of its length)
QUICK_LINE = ("bench --quick: 8 requests on the tiny model, 10 s to 2 minutes (on 2 cores: "
              "13 s at load 3, 1 min 51 s at load 8), most of it start-up")

#: Under --quick's table (newcomer 37 read pagedkit at 170 tok/s beside
#: transformers' continuous batching at 405, at load 1-2, and took it to rank them;
#: the same command measured 770 against 365 here at load 0.9, 490 against 320 beside
#: one busy core, 319 against 220 beside two).
QUICK_CAUTION = ("--quick: one round of 8 short requests checks that the bench runs; its "
                 "figures move with whatever else the machine runs and rank nothing. "
                 "docs/benchmarks.md has the default run's tables; run bench without --quick "
                 "(--model tiny: the small model alone) to compare the systems")


def available_gib() -> float | None:
    """Memory the OS says is available (Linux's MemAvailable), in GiB, or None."""
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) / 2**20
    except (OSError, KeyError, ValueError):
        return None


#: `bench`'s workload size without --requests (None there: --quick refuses one given)
DEFAULT_REQUESTS = 64


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{PROG} bench engine", description=__doc__.splitlines()[0],
        epilog=f"Time and memory: {DEFAULT_RUN_NOTE}; {QUICK_NOTE}.",
        formatter_class=HelpFormatter)
    p.add_argument("--model", choices=MODELS, action="append",
                   help="model(s) to run, repeatable (default: both)")
    p.add_argument("--requests", type=positive_int, metavar="N",
                   help=f"requests in the workload (default: {DEFAULT_REQUESTS})")
    p.add_argument("--scale", type=positive_float, metavar="X",
                   help="scale of the request lengths (default 1/8 on CPU, 1 on GPU)")
    p.add_argument("--batch-size", type=positive_int, default=16, metavar="N",
                   help="hf_static's batch size (default: 16)")
    p.add_argument("--block-size", type=positive_int, default=16, metavar="SLOTS",
                   help="pagedkit's KV block size (default: 16)")
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="auto (CUDA where available, else CPU), cpu or cuda")
    p.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                   help=f"comma-separated, from {', '.join(SYSTEMS)} (default: all but "
                   "pagedkit_unpacked, pagedkit_compiled and pagedkit_unfused; vllm where it is "
                   "installed)")
    p.add_argument("--rounds", type=positive_int, default=1, metavar="N",
                   help="run the systems this many times, interleaved; report medians")
    p.add_argument("--profile", action="store_true",
                   help="also print where pagedkit's step time goes (and vLLM's beside it when "
                   "vllm is among --systems)")
    p.add_argument("--threads", type=positive_int, metavar="N",
                   help="torch CPU threads (default: torch's choice)")
    p.add_argument("--workload", choices=WORKLOADS, default="sharegpt",
                   help="request lengths shaped like this dataset (default sharegpt)")
    p.add_argument("--quick", action="store_true",
                   help="8 requests, tiny model: a smoke run (10 s to 2 minutes on 2 cores, "
                        "by load)")
    p.add_argument("--json", metavar="PATH", type=writable_file,
                   help="write the reports here (checked before the run)")
    add_no_progress(p, "which system runs, its progress line every 10 s and its speed as it "
                       "ends: stdout holds the reports and any system that fails")
    return p


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    try:
        systems = check_systems(s.strip() for s in args.systems.split(",") if s.strip())
    except ValueError as err:
        english_error(p, f"--systems: {err}")
    if "vllm" in systems:  # before any model loads: say how to get it, not a traceback
        from ..vllm.compare import vllm_missing

        missing = vllm_missing()
        if missing:
            english_error(p, f"--systems vllm: {missing}; or leave vllm out of --systems")
    why = device_unavailable(args.device) if args.device != "auto" else None
    if why:
        english_error(p, f"--device {args.device}: {why}; use --device cpu (or auto)")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick and (args.model or args.requests is not None):  # newcomer 36: it ran
        #                                              8 requests on the tiny model in silence
        given = " and ".join(f"--{name}" for name, value in (("model", args.model),
                                                              ("requests", args.requests))
                             if value is not None)
        english_error(p, f"--quick runs 8 requests on the tiny model, so it takes no {given}: "
                         f"drop --quick to run what {given} {'say' if ' and ' in given else 'says'}"
                         ", or drop them")
    models = ["tiny"] if args.quick else (args.model or list(MODELS))
    requests = 8 if args.quick else (args.requests or DEFAULT_REQUESTS)
    if args.quick:
        print(QUICK_LINE, file=sys.stderr, flush=True)
    else:
        print(f"bench: {DEFAULT_RUN_NOTE}; this run: {', '.join(models)}, {requests} requests. "
              f"{QUICK_NOTE}.", file=sys.stderr, flush=True)
        gib = available_gib()
        if "larger" in models and gib is not None and gib < DEFAULT_RUN_GIB:
            print(f"bench: warning: {gib:.1f} GiB of memory is available here, less than the "
                  f"{DEFAULT_RUN_GIB} GiB the default run peaked at; the larger model takes "
                  "the most: --model tiny leaves it out", file=sys.stderr,
                  flush=True)
    reports = []
    for name in models:
        report = benchmark(name, num_requests=requests, scale=args.scale,
                           batch_size=args.batch_size, block_size=args.block_size,
                           device=args.device, systems=systems, rounds=args.rounds,
                           profile=args.profile, workload=args.workload,
                           show_progress=not args.no_progress)
        print(format_report(report), flush=True)
        if args.quick:  # beside the figures it is about
            print(QUICK_CAUTION, flush=True)
        reports.append(report.as_dict())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=2)
    return 0
