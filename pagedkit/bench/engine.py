"""How fast does the paged engine serve, next to transformers itself?

``python -m pagedkit bench [--model tiny|larger] [--requests 64] [--quick] [--json PATH]``

One workload — requests with ShareGPT-shaped prompt and output lengths
(`pagedkit.sim`'s synthetic trace, scaled to the model), all arriving at
once, each generating exactly its output length (greedy, end-of-sequence
ignored) — runs through three systems on the same model:

* ``pagedkit``: `LLM.generate` — continuous batching over the paged cache;
* ``hf_static``: transformers ``generate`` in fixed, left-padded batches of
  ``--batch-size`` requests, as a static-batching server would: a batch runs
  until its longest request ends, and its KV cache is the padded rectangle;
* ``hf_continuous``: transformers' own continuous-batching manager (the
  engine behind ``generate_batch``), with per-request lengths.

Each reports output tokens per second, time to first token (from the common
arrival time), and the share of reserved KV slots that held a token ("KV
usage"; where it is known). Greedy outputs are compared with pagedkit's and
the number of requests that differ is reported: the systems must agree on
what they compute before their speeds mean anything.

The ``larger`` model is a random-weight Llama (about 40M parameters), so
compute, not Python overhead, dominates a step on CPU.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

MODELS = ("tiny", "larger")


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

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds


@dataclass
class Report:
    model: str
    device: str
    num_requests: int
    mean_prompt_len: float
    mean_output_len: float
    results: list[Result] = field(default_factory=list)
    environment: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        out = asdict(self)
        for r, d in zip(self.results, out["results"], strict=True):
            d["tokens_per_s"] = r.tokens_per_s
        return out


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


def sharegpt_workload(num_requests: int, vocab_size: int, *, scale: float, max_len: int,
                      seed: int = 0) -> Workload:
    """ShareGPT-shaped lengths times `scale`, random token ids, all at once."""
    from ..sim.trace import synthetic_trace

    trace = synthetic_trace("sharegpt", rate=1.0, num_requests=num_requests, seed=seed)
    rng = np.random.default_rng(seed)
    prompts, outs = [], []
    for r in trace:
        p = max(1, round(r.prompt_len * scale))
        o = max(1, min(round(r.output_len * scale), max_len - p))
        prompts.append(rng.integers(3, vocab_size, size=p).tolist())
        outs.append(o)
    return Workload(prompts, outs)


def run_pagedkit(model, work: Workload, block_size: int) -> tuple[Result, list[list[int]]]:
    from ..engine import LLM
    from ..sampling_params import SamplingParams

    llm = LLM(model, block_size=block_size)
    params = [SamplingParams(temperature=0, max_tokens=o, ignore_eos=True)
              for o in work.output_lens]
    usage: list[float] = []
    start = time.perf_counter()
    t0 = time.monotonic()
    outs = llm.generate(work.prompts, params, use_tqdm=False,
                        on_step=lambda s: usage.append(s.memory["kv_usage"]))
    seconds = time.perf_counter() - start
    ttft = [o.metrics.first_token_time - t0 for o in outs]
    tokens = [o.outputs[0].token_ids for o in outs]
    return Result("pagedkit", seconds, sum(map(len, tokens)), statistics.mean(ttft),
                  statistics.median(ttft), statistics.mean(usage)), tokens


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


def run_hf_static(model, work: Workload, batch_size: int, pad_id: int
                  ) -> tuple[Result, list[list[int]]]:
    """Fixed batches in arrival order, left-padded; each runs to its longest output."""
    tokens: list[list[int]] = []
    ttft: list[float] = []
    held = reserved = 0
    start = time.perf_counter()
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
    seconds = time.perf_counter() - start
    return Result("hf_static", seconds, work.num_output_tokens, statistics.mean(ttft),
                  statistics.median(ttft), held / reserved,
                  note=f"batches of {batch_size}"), tokens


def run_hf_continuous(model, work: Workload) -> tuple[Result, list[list[int]]]:
    """transformers' continuous-batching manager (what generate_batch uses)."""
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=False, max_new_tokens=max(work.output_lens),
                              eos_token_id=None, pad_token_id=0)
    manager = model.init_continuous_batching(generation_config=config)
    manager.start()
    try:
        start = time.perf_counter()
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
        seconds = time.perf_counter() - start
    finally:
        manager.stop(block=True)
    tokens = [results[i].generated_tokens for i in ids]
    ttft = [results[i].timestamps[0] - start for i in ids if results[i].timestamps]
    return Result("hf_continuous", seconds, sum(map(len, tokens)), statistics.mean(ttft),
                  statistics.median(ttft), None, note="KV usage not exposed"), tokens


def benchmark(model_name: str = "tiny", *, num_requests: int = 64, scale: float | None = None,
              batch_size: int = 16, block_size: int = 16, device: str = "auto",
              systems: tuple[str, ...] = ("pagedkit", "hf_static", "hf_continuous"),
              log: Callable[[str], None] = print) -> Report:
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available()
                       else "cpu" if device == "auto" else device)
    probe = build_model(model_name, dev)
    vocab = probe.config.vocab_size
    max_len = probe.config.max_position_embeddings
    scale = scale if scale is not None else (0.125 if dev.type == "cpu" else 1.0)
    work = sharegpt_workload(num_requests, vocab, scale=scale, max_len=max_len)
    report = Report(model_name, str(dev), num_requests,
                    statistics.mean(map(len, work.prompts)), statistics.mean(work.output_lens),
                    environment={"torch": torch.__version__, "python": platform.python_version(),
                                 "threads": torch.get_num_threads(),
                                 "device_name": torch.cuda.get_device_name(dev)
                                 if dev.type == "cuda" else platform.processor() or "cpu"})
    runners = {
        "pagedkit": lambda m, w: run_pagedkit(m, w, block_size),
        "hf_static": lambda m, w: run_hf_static(m, w, batch_size, pad_id=0),
        "hf_continuous": lambda m, w: run_hf_continuous(m, w),
    }
    # a short untimed run first: one-time costs (lazy imports, allocator and
    # kernel warm-up) would otherwise land on whichever system runs first
    warmup = Workload(work.prompts[:2], [2, 2])
    reference = None
    for name in systems:
        log(f"running {name} ...")
        try:
            model = build_model(model_name, dev)
            runners[name](model, warmup)
            result, tokens = runners[name](model, work)
        except Exception as err:  # report a system that cannot run here, keep the others
            log(f"  {name} failed: {type(err).__name__}: {err}")
            continue
        if reference is None:
            reference = tokens
        result.outputs_differing = sum(a != b for a, b in zip(tokens, reference, strict=True))
        report.results.append(result)
    return report


def format_report(report: Report) -> str:
    lines = [f"model={report.model} device={report.device} requests={report.num_requests} "
             f"mean prompt={report.mean_prompt_len:.1f} mean output={report.mean_output_len:.1f}",
             f"{'system':<15}{'tok/s':>10}{'x pagedkit':>12}{'TTFT mean':>11}{'TTFT p50':>10}"
             f"{'KV usage':>10}{'differ':>8}  note"]
    base = next((r.tokens_per_s for r in report.results if r.system == "pagedkit"), None)
    for r in report.results:
        ratio = f"{r.tokens_per_s / base:.2f}" if base else "-"
        usage = f"{r.kv_usage:.1%}" if r.kv_usage is not None else "n/a"
        lines.append(f"{r.system:<15}{r.tokens_per_s:>10.1f}{ratio:>12}{r.ttft_mean_s:>10.2f}s"
                     f"{r.ttft_p50_s:>9.2f}s{usage:>10}{r.outputs_differing:>8}  {r.note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pagedkit bench", description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=MODELS, action="append",
                   help="model(s) to run (default: both)")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--scale", type=float, help="length scale (default 1/8 on CPU, 1 on GPU)")
    p.add_argument("--batch-size", type=int, default=16, help="hf_static batch size")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--device", default="auto")
    p.add_argument("--systems", default="pagedkit,hf_static,hf_continuous")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--quick", action="store_true", help="8 requests, tiny model (a smoke run)")
    p.add_argument("--json", help="write the reports here")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    models = ["tiny"] if args.quick else (args.model or list(MODELS))
    requests = 8 if args.quick else args.requests
    reports = []
    for name in models:
        report = benchmark(name, num_requests=requests, scale=args.scale,
                           batch_size=args.batch_size, block_size=args.block_size,
                           device=args.device, systems=tuple(args.systems.split(",")))
        print(format_report(report), flush=True)
        reports.append(report.as_dict())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=2)
    return 0
