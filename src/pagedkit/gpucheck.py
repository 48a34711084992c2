"""One prepared check of a real GPU: ``python -m pagedkit gpucheck [--json PATH] [--quick]``.

CI has no GPU, so everything the interpreter cannot prove waits for the first
machine that has one. This runs it all in one go, in a few minutes (76 s on
an H200), and prints one table:

1. **kernels**: the compiled Triton kernels against a float64 oracle over the
   un-paged K/V (and the torch reference), bfloat16 included (the interpreter
   computes bfloat16 ``tl.dot`` wrongly), decode single-pass and split, prefill
   chunks after a cached prefix, GQA and MQA, head dims 64/128/256, and the
   sliding-window / softcap / sink options;
2. **benchmark**: `pagedkit.bench.kernels`' quick grid: decode bandwidth as a
   percentage of the device's peak next to SDPA on a contiguous cache, and
   prefill TFLOP/s;
3. **engine**: `pagedkit.LLM` against transformers' ``generate`` (greedy) on a
   random Llama of real size (Llama-3.2-1B-like: 16 layers, hidden 2048, 32
   query / 8 KV heads of 64): token for token in float32, and in bfloat16
   each token within rounding of transformers' choice (`rounding_verdict`).

Exit status 0 means all checks passed, 1 that a check failed (the table
says which), 2 a usage error (argparse's), and 3 (`NO_GPU_STATUS`) that there
is no CUDA GPU here, so nothing was checked.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from ._validation import PROG, no_progress_refusal, writable_file
from .i18n.terminal import HelpFormatter

NO_GPU = ("gpucheck needs a CUDA GPU, and torch sees none here "
          "(torch.cuda.is_available() is False; torch {torch}, built for CUDA {cuda}). "
          "Nothing was checked. Run it on a machine with an NVIDIA GPU (e.g. a Colab GPU "
          "runtime); on CPU the kernel tests run in Triton's interpreter: "
          "python -m pytest tests/kernels")
#: The exit status without a GPU: not 2, which is argparse's for a usage error,
#: so a script can tell "nothing to check here" from a mistyped option.
NO_GPU_STATUS = 3

def cuda_device(value: str) -> torch.device:
    """``--device``: a CUDA device, refused by name otherwise, before the
    check for a GPU (so ``--device cpu`` hears that it is not a choice)."""
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError):
        device = None
    if device is None or device.type != "cuda":
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a CUDA device: gpucheck checks the GPU kernels, so give cuda or "
            "cuda:N (default cuda); on CPU the kernel tests run in Triton's interpreter: "
            "python -m pytest tests/kernels")
    return device


TOLERANCE = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}  # max abs error


@dataclass
class Check:
    """One line of the table."""

    section: str        # "kernels", "benchmark" or "engine"
    name: str
    value: str          # what was measured, as printed
    ok: bool | None     # None: a measurement with no pass/fail (a benchmark figure)
    detail: dict


# ------------------------------------------------------------------ kernels
def oracle(query, keys, values, scale, first_position, sliding_window=None, softcap=None,
           sinks=None):
    """float64 attention of query rows at positions first_position.. over contiguous K/V,
    with the options of docs/kernels.md spelled out (the kernel tests use it too)."""
    group = query.shape[1] // keys.shape[1]
    q = query.double()
    k = keys.double().repeat_interleave(group, dim=1)
    v = values.double().repeat_interleave(group, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, k) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    pos = first_position + torch.arange(q.shape[0], device=q.device)[:, None]
    kpos = torch.arange(k.shape[0], device=q.device)[None, :]
    visible = kpos <= pos
    if sliding_window is not None:
        visible &= kpos > pos - sliding_window
    s = s.masked_fill(~visible[None], float("-inf"))
    if sinks is not None:
        sink = sinks.double()[:, None, None].expand(-1, s.shape[1], 1)
        p = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :-1]
    else:
        p = torch.softmax(s, dim=-1)
    return torch.einsum("hqk,khd->qhd", p, v)


def paged_cache(lens, block_size, hkv, d, dtype, device, gen):
    """A cache with each sequence's blocks scattered, every other slot NaN."""
    needed = [-(-n // block_size) for n in lens]
    num_blocks = sum(needed) + 2
    order = torch.randperm(num_blocks, generator=gen).tolist()
    k_cache = torch.full((num_blocks, block_size, hkv, d), float("nan"), dtype=dtype,
                         device=device)
    v_cache = torch.full_like(k_cache, float("nan"))
    tables = torch.zeros(len(lens), max(needed) + 1, dtype=torch.int32)
    keys, values = [], []
    for s, n in enumerate(lens):
        blocks, order = order[:needed[s]], order[needed[s]:]
        tables[s, :len(blocks)] = torch.tensor(blocks)
        k = torch.randn(n, hkv, d, generator=gen).to(dtype).to(device)
        v = torch.randn(n, hkv, d, generator=gen).to(dtype).to(device)
        padded = needed[s] * block_size
        kp = torch.full((padded, hkv, d), float("nan"), dtype=dtype, device=device)
        vp = torch.full_like(kp, float("nan"))
        kp[:n], vp[:n] = k, v
        k_cache[blocks] = kp.view(-1, block_size, hkv, d)
        v_cache[blocks] = vp.view(-1, block_size, hkv, d)
        keys.append(k)
        values.append(v)
    return k_cache, v_cache, tables.to(device), torch.tensor(lens, dtype=torch.int32,
                                                            device=device), keys, values


def kernel_checks(device: torch.device,
                  dtypes: tuple = (torch.float16, torch.bfloat16, torch.float32),
                  lens: tuple = (1, 300, 1025, 3000), q_lens: tuple = (1, 300, 17, 129),
                  window: int = 100) -> list[Check]:
    """The Triton kernels at each dtype, head layout and option against the oracle
    (`lens`: context per sequence, `q_lens`: its prefill chunk)."""
    from pagedkit.kernels import paged_decode, paged_prefill, reference

    checks = []
    gen = torch.Generator().manual_seed(0)
    shapes = [(32, 8, 128), (32, 1, 64), (8, 8, 256), (28, 4, 128)]
    options = [{}, dict(sliding_window=window), dict(softcap=30.0), dict(sinks=True),
               dict(sliding_window=window // 3 + 4, softcap=30.0, sinks=True)]
    for dtype in dtypes:
        for hq, hkv, d in shapes:
            for opts in options:
                if opts and (hq, hkv, d) != (32, 8, 128):
                    continue
                k_cache, v_cache, tables, ctx, keys, values = paged_cache(
                    lens, 16, hkv, d, dtype, device, gen)
                kw = dict(opts)
                if kw.pop("sinks", False):
                    kw["sinks"] = torch.linspace(-2, 6, hq, device=device)
                scale = d ** -0.5
                label = (f"{str(dtype)[6:]} {hq}q/{hkv}kv d{d}"
                         + (" " + "+".join(sorted(opts)) if opts else ""))
                q = torch.randn(len(lens), hq, d, generator=gen).to(dtype).to(device)
                truth = torch.stack([oracle(q[s:s + 1], keys[s], values[s], scale, lens[s] - 1,
                                            **kw)[0] for s in range(len(lens))])
                for splits in (1, None):
                    got = paged_decode.paged_decode_attention(q, k_cache, v_cache, tables, ctx,
                                                              num_splits=splits, **kw)
                    checks.append(_compare("decode " + label + f" splits={splits or 'auto'}",
                                           got, truth, dtype))
                ref = reference.paged_decode_attention(q, k_cache, v_cache, tables, ctx, **kw)
                checks.append(_compare("reference decode " + label, ref, truth, dtype))
                cu = torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32,
                                  device=device)
                qp = torch.randn(int(cu[-1]), hq, d, generator=gen).to(dtype).to(device)
                truth = torch.cat([oracle(qp[cu[s]:cu[s + 1]], keys[s], values[s], scale,
                                          lens[s] - q_lens[s], **kw) for s in range(len(lens))])
                got = paged_prefill.paged_prefill_attention(qp, k_cache, v_cache, tables, cu, ctx,
                                                            **kw)
                checks.append(_compare("prefill " + label, got, truth, dtype))
    return checks


def _compare(name: str, got: torch.Tensor, truth: torch.Tensor, dtype: torch.dtype) -> Check:
    err = float((got.double() - truth).abs().max())
    tol = TOLERANCE[dtype]
    ok = math.isfinite(err) and err <= tol
    return Check("kernels", name, f"max |err| {err:.2e} (tol {tol:.0e})", ok,
                 {"max_abs_err": err if math.isfinite(err) else None, "tolerance": tol})


# ------------------------------------------------------------------ benchmark
def benchmark_checks(device: torch.device, log: Callable[[str], None]) -> tuple[list[Check],
                                                                                   dict]:
    from pagedkit.bench import kernels as bench

    report = bench.run(device, quick=True, log=log)
    checks = []
    for row in report["decode"]:
        s = row["shape"]
        name = f"decode {s['batch']} x {s['context']} {s['dtype']}"
        if "skipped" in row:
            checks.append(Check("benchmark", name, "skipped: " + row["skipped"], None, row))
            continue
        paged, sdpa = row["results"]["paged_triton"], row["results"]["sdpa_contiguous"]
        if "ms" not in paged:
            checks.append(Check("benchmark", name, "not timed: " + paged["skipped"], False, row))
            continue
        pct = paged.get("pct_of_peak")
        value = (f"{paged['gb_per_s']:.0f} GB/s" + (f" ({pct:.0f}% of peak)" if pct else "")
                 + f", SDPA {sdpa['gb_per_s']:.0f} GB/s, paged/SDPA time "
                 f"{row['paged_over_sdpa']:.2f}")
        checks.append(Check("benchmark", name, value,
                            row.get("paged_max_abs_diff", 1.0) < 1e-2, row))
    for row in report["prefill"]:
        s = row["shape"]
        name = f"prefill {s['batch']} x {s['query_len']}/{s['context']} {s['dtype']}"
        if "skipped" in row or "ms" not in row["results"]["paged_triton"]:
            checks.append(Check("benchmark", name, "skipped", None, row))
            continue
        paged, sdpa = row["results"]["paged_triton"], row["results"]["sdpa_contiguous"]
        checks.append(Check("benchmark", name,
                            f"{paged['tflop_per_s']:.1f} TFLOP/s, SDPA "
                            f"{sdpa['tflop_per_s']:.1f} TFLOP/s",
                            row.get("paged_max_abs_diff", 1.0) < 1e-2, row))
    return checks, report


# ------------------------------------------------------------------ engine
def _llama(device: torch.device, layers: int, dtype: torch.dtype):
    """A random Llama-3.2-1B-like model (same weights for every dtype: seed 0)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=8192,
                         num_hidden_layers=layers, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, max_position_embeddings=4096)
    with torch.device(device):
        return LlamaForCausalLM(config).to(dtype).eval()


def _logits(model, prompt: list[int], tokens: list[int], attention: str) -> torch.Tensor:
    """transformers' logits (in the model's dtype, returned as float32) at each
    generated position of ``prompt + tokens`` (teacher forcing: the model reads
    the tokens given, one forward pass)."""
    model.set_attn_implementation(attention)
    ids = torch.tensor([prompt + tokens], device=model.device)
    with torch.inference_mode():
        out = model(ids).logits[0, len(prompt) - 1:len(prompt) - 1 + len(tokens)]
    return out.float()


def rounding_verdict(model, prompt: list[int], tokens: list[int]) -> dict:
    """Whether greedy `tokens` are transformers' own choices up to rounding.

    In bfloat16 two close logits can swap between two correct
    implementations: transformers' SDPA and eager paths disagree too. So each
    chosen token is judged by transformers' logits for the engine's own
    sequence: its ``gap`` below the best logit must stay within twice the
    largest difference between transformers' two paths (``noise``; two,
    since the engine's logits may err on both tokens compared). A wrong K/V
    or position shows as gaps of whole units, far above it."""
    sdpa = _logits(model, prompt, tokens, "sdpa")
    eager = _logits(model, prompt, tokens, "eager")
    model.set_attn_implementation("sdpa")
    chosen = sdpa.gather(1, torch.tensor(tokens, device=sdpa.device)[:, None])[:, 0]
    gap = (sdpa.max(dim=1).values - chosen).max().item()
    noise = (sdpa - eager).abs().max().item()
    return {"gap": gap, "noise": noise, "ok": gap <= 2 * noise}


def engine_checks(device: torch.device, quick: bool) -> list[Check]:
    """The engine's greedy tokens against transformers'. In float32 they must be
    equal token for token; in bfloat16, where rounding alone can swap two
    near-equal logits (transformers' SDPA and eager paths disagree as well),
    each token must be transformers' choice up to that rounding
    (`rounding_verdict`), and the equal prefix is reported."""
    from pagedkit import LLM, SamplingParams

    layers = 4 if quick else 16
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 32000, (n,), generator=gen).tolist() for n in (7, 100, 513, 1500)]
    new_tokens = 32
    checks = []
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        model = _llama(device, layers, dtype)
        start = time.perf_counter()
        expected = []
        with torch.inference_mode():
            for p in prompts:
                ids = model.generate(torch.tensor([p], device=device), max_new_tokens=new_tokens,
                                     do_sample=False, eos_token_id=None, pad_token_id=0,
                                     attention_mask=torch.ones(1, len(p), dtype=torch.long,
                                                               device=device))
                expected.append(ids[0, len(p):].tolist())
        hf_s = time.perf_counter() - start
        llm = LLM(model, device=str(device), dtype=name, gpu_memory_utilization=0.4)
        start = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts],
                            SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True),
                            use_tqdm=False)
        engine_s = time.perf_counter() - start
        for p, want, out in zip(prompts, expected, outs, strict=True):
            got = out.outputs[0].token_ids
            same = next((i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b),
                        len(want))
            value = f"{same}/{len(want)} tokens as transformers' generate"
            detail = {"engine": got, "transformers": want}
            ok = same == len(want)
            if dtype != torch.float32:
                verdict = rounding_verdict(model, p, got)
                value += (f"; each within rounding: largest gap {verdict['gap']:.3f} "
                          f"(limit 2 x {verdict['noise']:.3f}, transformers' SDPA vs eager)")
                detail |= verdict
                ok = verdict["ok"]
            checks.append(Check("engine", f"llama {layers}L {name} prompt {len(p)}", value, ok,
                                detail))
        checks.append(Check("engine", f"wall time {name}",
                            f"engine {engine_s:.1f} s, transformers {hf_s:.1f} s (one prompt "
                            "at a time)", None, {"engine_s": engine_s, "transformers_s": hf_s}))
        del llm, model
        torch.cuda.empty_cache()
    return checks


# ------------------------------------------------------------------ report
def table(checks: list[Check]) -> str:
    """The printed table: section, check, measured value, PASS / FAIL / '-'."""
    width = max([len(c.name) for c in checks] + [5])
    lines = [f"{'section':<10} {'check':<{width}} {'result':<5} value"]
    for c in checks:
        mark = "-" if c.ok is None else ("PASS" if c.ok else "FAIL")
        lines.append(f"{c.section:<10} {c.name:<{width}} {mark:<5} {c.value}")
    failed = sum(c.ok is False for c in checks)
    passed = sum(c.ok is True for c in checks)
    lines.append(f"{passed} passed, {failed} failed, {sum(c.ok is None for c in checks)} "
                 "measured")
    return "\n".join(lines)


def build_report(device_info: dict, versions: dict, checks: list[Check], seconds: float,
                 bench_report: dict | None = None) -> dict:
    """The JSON document: every check, the verdict, and the raw benchmark report."""
    from pagedkit.bench.kernels import finite_json

    return finite_json({
        "gpucheck": 1,
        "device": device_info,
        "versions": versions,
        "seconds": round(seconds, 1),
        "ok": all(c.ok is not False for c in checks),
        "failed": [f"{c.section}: {c.name}" for c in checks if c.ok is False],
        "checks": [asdict(c) for c in checks],
        "benchmark": bench_report,
    })


def run(device: torch.device, quick: bool = False,
        log: Callable[[str], None] = print) -> dict:
    from pagedkit import ops
    from pagedkit.bench import kernels as bench

    start = time.perf_counter()
    info = bench.device_info(device)
    chosen = ops.backend(device)
    log(f"device: {info['name']} (capability {info.get('capability')}); kernels: {chosen} "
        f"({chosen.reason})")
    checks: list[Check] = []
    bench_report = None
    sections = [("kernels", lambda: kernel_checks(device)),
                ("benchmark", lambda: benchmark_checks(device, log)),
                ("engine", lambda: engine_checks(device, quick))]
    for section, fn in sections:
        log(f"{section} ...")
        try:
            found = fn()
        except Exception as exc:  # a crash is a failed line, and the other sections still run
            found = [Check(section, "crashed", f"{type(exc).__name__}: {exc}"[:300], False, {})]
        if section == "benchmark" and isinstance(found, tuple):
            found, bench_report = found
        checks += found
        torch.cuda.empty_cache()
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda,
                "triton": bench._triton_version(), "python": platform.python_version()}
    return build_report(info, versions, checks, time.perf_counter() - start, bench_report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} gpucheck", description=__doc__.split("\n\n")[0].replace("``", ""),
        epilog="It checks the compiled Triton kernels against a float64 oracle (bfloat16, "
               "float16, float32; GQA/MQA; window, softcap, sinks), times them against SDPA "
               "on a contiguous cache, and serves a random Llama-3.2-1B-sized model against "
               "transformers' generate (float32: token for token; bfloat16: each token within "
               "rounding). 76 s on an H200 (docs/kernels.md). Exit status 0: all passed; 1: a "
               "check failed; 2: a usage error; 3: no CUDA GPU (nothing checked).",
        formatter_class=HelpFormatter)
    parser.add_argument("--json", metavar="PATH", type=writable_file,
                        help="also write the report here as JSON")
    parser.add_argument("--quick", action="store_true",
                        help="a 4-layer model in the engine check instead of 16 layers")
    parser.add_argument("--device", default="cuda", type=cuda_device,
                        help="cuda or cuda:N (default cuda)")
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(word.split("=")[0] == "--no-progress" for word in argv):  # as `lab` and
        # `python -m pagedkit --no-progress gpucheck` say it
        parser.error(no_progress_refusal("gpucheck"))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(NO_GPU.format(torch=torch.__version__, cuda=torch.version.cuda), file=sys.stderr)
        return NO_GPU_STATUS
    report = run(args.device, args.quick)
    checks = [Check(**c) for c in report["checks"]]
    print(table(checks))
    print(f"{report['seconds']:.0f} s; " + ("all checks passed" if report["ok"]
                                            else f"FAILED: {', '.join(report['failed'])}"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2, allow_nan=False)
        print(f"wrote {args.json}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
