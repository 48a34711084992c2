"""`LLM.beam_search`: vLLM's offline beam search, on pagedkit's engine.

vLLM (V1) searches beams from outside its engine: every step, each live
beam is one request of one token asking for ``2 x beam_width`` logprobs
(the prefix cache serves the shared prompt and the beam's earlier tokens),
each (beam, candidate token) pair is a new beam with the candidate's
log-probability added, a candidate that is end-of-sequence completes its
beam, and the ``beam_width`` best of the rest live on. When every live beam
is done or ``max_tokens`` steps have run, the ``beam_width`` best of all
completed and live beams come back. A beam's score is its cumulative
log-probability over its length (prompt included, end-of-sequence not)
to the power ``length_penalty``. This module follows those rules, so
results match vLLM's; the engine's own ``use_beam_search`` (beams that
share blocks inside one request, `beam_search.py`) is the paper's §4.4
picture and follows transformers' rules instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from ..i18n import _
from ..sampling_params import BeamSearchParams, SamplingParams


@dataclass
class BeamSearchSequence:
    """One beam: all its tokens (the prompt's first, as in vLLM), the
    logprobs of each step's candidates, its cumulative log-probability,
    and its text (the prompt's too) once returned."""

    tokens: list[int]
    logprobs: list[dict] = field(default_factory=list)
    cum_logprob: float = 0.0
    text: str | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class BeamSearchOutput:
    """The best ``beam_width`` beams of one prompt, best first."""

    sequences: list[BeamSearchSequence]


def beam_score(beam: BeamSearchSequence, eos_token_id: int | None,
               length_penalty: float) -> float:
    """vLLM's score: cumulative logprob / length ** length_penalty, the
    length counting the prompt and not a final end-of-sequence token."""
    length = len(beam.tokens) - (beam.tokens[-1] == eos_token_id)
    return beam.cum_logprob / max(length, 1) ** length_penalty


def _grow(group: list[BeamSearchSequence], outs, eos: int | None, ignore_eos: bool,
          completed: list[BeamSearchSequence]) -> list[BeamSearchSequence]:
    """Every beam of one prompt grown by each of its candidates (the next
    outputs of `outs`, one per beam): an end-of-sequence candidate goes to
    `completed`, the others come back."""
    grown = []
    for beam in group:
        position = next(outs).outputs[0].logprobs[0]
        for token, lp in position.items():
            new = BeamSearchSequence([*beam.tokens, token], [*beam.logprobs, position],
                                     beam.cum_logprob + lp.logprob)
            (completed if token == eos and not ignore_eos else grown).append(new)
    return grown


def _end_too_long(live: list[list[BeamSearchSequence]], completed: list[list[BeamSearchSequence]],
                  longest: int) -> list[int]:
    """End (finish reason ``"length"``) the live beams longer than `longest`,
    the longest prompt the engine takes; the prompts whose beams ended.
    A prompt's live beams all have one length, so they end together."""
    ended = []
    for i, group in enumerate(live):
        if group and len(group[0].tokens) > longest:
            for beam in group:
                beam.finish_reason = "length"
            completed[i] += group
            live[i] = []
            ended.append(i)
    return ended


def beam_search(llm: Any, prompts: list[list[int]], params: BeamSearchParams,
                use_tqdm: bool = False, names: list[str] | None = None,
                cache_salts: list[str | None] | None = None) -> list[BeamSearchOutput]:
    """Search `prompts` (token ids) with `llm` (an `LLM`); see the module.

    Each step sends every live beam to the engine as a prompt, so a beam can
    grow only while it is a prompt the engine takes (`LLMEngine.longest_prompt`:
    max_model_len, the whole KV cache). Past that, the beams end with
    ``finish_reason="length"``, as `generate` ends a sequence at
    max_model_len (vLLM's own beam search would refuse the longer prompt
    part-way through); if it is the KV cache that cut them short, a
    `KVCacheTooSmallWarning` names the prompt (`names`: how errors call each,
    ``prompts[i]``) and what serves it whole. A prompt's cache salt
    (`cache_salts`, None: none) goes with each of its beams' requests, as
    in vLLM."""
    names = names or [f"prompts[{i}]" for i in range(len(prompts))]
    cache_salts = cache_salts or [None] * len(prompts)
    longest = llm.llm_engine.longest_prompt()
    tokenizer = llm.get_tokenizer()
    eos = None if tokenizer is None else tokenizer.eos_token_id
    step_params = SamplingParams(logprobs=2 * params.beam_width, max_tokens=1,
                                 temperature=params.temperature, detokenize=False)
    live = [[BeamSearchSequence(list(p))] for p in prompts]
    completed: list[list[BeamSearchSequence]] = [[] for _prompt in prompts]

    def key(beam: BeamSearchSequence) -> float:
        return beam_score(beam, eos, params.length_penalty)

    for step in tqdm(range(params.max_tokens), desc=_("beam search"), disable=not use_tqdm):
        for i in _end_too_long(live, completed, longest):
            llm.llm_engine.warn_beams_cut(names[i], len(prompts[i]), step, params)
        beams = [{"prompt_token_ids": b.tokens, "cache_salt": salt}
                 for group, salt in zip(live, cache_salts, strict=True) for b in group]
        if not beams:
            break
        outs = iter(llm.generate(beams, step_params, use_tqdm=False))
        for i, group in enumerate(live):
            grown = _grow(group, outs, eos, params.ignore_eos, completed[i])
            live[i] = sorted(grown, key=key, reverse=True)[:params.beam_width]
    outputs = []
    for done, group in zip(completed, live, strict=True):
        best = sorted(done + group, key=key, reverse=True)[:params.beam_width]
        for beam in best:
            if tokenizer is not None:
                beam.text = tokenizer.decode(beam.tokens,
                                             skip_special_tokens=params.skip_special_tokens)
        outputs.append(BeamSearchOutput(best))
    return outputs
