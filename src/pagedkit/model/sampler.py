"""Pick next tokens from logits: greedy, temperature, min-p, top-k, top-p.

Each request may carry its own seed; its draws then come from its own
`torch.Generator`, so a seeded request samples the same tokens whatever else
shares its batch, and whether or not it was preempted and recomputed. They
are not vLLM's tokens for the same seed: vLLM draws differently, and
differently on each platform (docs/api.md, "Compared with vLLM").
Greedy picks need no generator, so the engine takes them for a whole step at
once (one argmax in `pagedkit.engine.sampling.sample_step`) instead of one
per sequence.
"""

from __future__ import annotations

import torch

from ..sampling_params import SamplingParams


def filter_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Temperature, then min-p, then top-k, then top-p (nucleus) on one row
    of logits (vLLM's order)."""
    logits = logits / params.temperature
    if params.min_p:  # keep tokens at least min_p times as likely as the best one
        probs = logits.softmax(-1)
        logits = logits.masked_fill(probs < probs.max() * params.min_p, float("-inf"))
    if 0 < params.top_k < logits.numel():  # 0 and -1: no limit
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token once the mass *before* it already reaches top_p
        drop = probs.cumsum(-1) - probs >= params.top_p
        drop[0] = False  # the most likely token stays, however small top_p (vLLM's rule)
        logits = logits.clone()
        logits[order[drop]] = float("-inf")
    return logits


def sample(logits: torch.Tensor, params: SamplingParams, num_samples: int = 1,
           generator: torch.Generator | None = None) -> list[int]:
    """Draw `num_samples` tokens from one row of logits (argmax if greedy)."""
    if params.greedy:
        return [int(logits.argmax())] * num_samples
    probs = filter_logits(logits, params).softmax(-1)
    draws = torch.multinomial(probs, num_samples, replacement=True, generator=generator)
    return draws.tolist()
