"""The offline API on both systems: one script, only the import changed.

`run_cases(api)` runs every case below with ``api`` the module ``pagedkit``
or ``vllm`` (`load_api`): the same calls (``api.LLM(...)``,
``api.SamplingParams(...)``, ``llm.generate``, ``llm.chat``,
``llm.beam_search``, ``llm.llm_engine.step()``), on the tiny model's
weights, and returns what each case printed as plain data. `compare`
holds two such records side by side (tokens, texts, finish and stop
reasons exactly; logprobs within `LOGPROB_TOL`), and `table` writes the
compatibility table of docs/api.md from a recorded comparison::

    python -m pagedkit.vllm.api_check run vllm out/vllm.json        # in vLLM's venv
    python -m pagedkit.vllm.api_check run pagedkit out/pagedkit.json
    python -m pagedkit.vllm.api_check table out/pagedkit.json out/vllm.json
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: logprobs of the two systems agree this closely (float32 forwards with
#: different kernels)
LOGPROB_TOL = 1e-3
PROMPTS = ["Once upon a time", "The little dog ran", "Tom and Lily"]
CASES: dict[str, tuple[str, Callable]] = {}


def case(api_row: str):
    """Register a case under the API row of the table it checks."""
    def register(fn):
        CASES[fn.__name__] = (api_row, fn)
        return fn
    return register


def load_api(system: str):
    """The module a script imports: ``import pagedkit as api`` or ``import vllm as api``."""
    if system == "vllm":
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return importlib.import_module(system)


def open_system(system: str):
    """The module (`load_api`) and an LLM made from it (`make_llm`)."""
    api = load_api(system)
    return api, make_llm(api)


def beam_params(api):
    return importlib.import_module(f"{api.__name__}.sampling_params").BeamSearchParams


def make_llm(api):
    from ..models import TINY_DIR

    # one-device engine arguments a vLLM script passes, accepted by both
    return api.LLM(model=str(TINY_DIR), dtype="float32", block_size=32, max_model_len=512,
                   kv_cache_memory_bytes=64 * 2**20, seed=0, tensor_parallel_size=1,
                   enforce_eager=True, trust_remote_code=False, disable_log_stats=True)


def completions(outs) -> list[dict[str, Any]]:
    return [{"prompt": o.prompt, "prompt_token_ids": list(o.prompt_token_ids),
             "outputs": [{"index": c.index, "token_ids": list(c.token_ids), "text": c.text,
                          "finish_reason": c.finish_reason,
                          "stop_reason": c.stop_reason} for c in o.outputs]}
            for o in outs]


# ---------------------------------------------------------------------- cases
@case("`LLM.generate`, greedy; `RequestOutput` / `CompletionOutput` fields")
def basic(api, llm):
    params = api.SamplingParams(temperature=0, max_tokens=24)
    return completions(llm.generate(PROMPTS, params, use_tqdm=False))


@case("`TokensPrompt` / `TextPrompt`")
def typed_prompts(api, llm):
    ids = llm.get_tokenizer()(PROMPTS[0])["input_ids"]
    params = api.SamplingParams(temperature=0, max_tokens=8)
    return completions(llm.generate([api.TokensPrompt(prompt_token_ids=ids),
                                     api.TextPrompt(prompt=PROMPTS[1])], params,
                                    use_tqdm=False))


def stop_strings_for(tokenizer, ids):
    pieces = [tokenizer.decode([t]) for t in ids]
    text = "".join(pieces)
    cases = [[pieces[3]], [pieces[4][:2]], [pieces[5][1:-1] or pieces[5]], [pieces[6][-2:]],
             [pieces[3][-1] + pieces[4][:1]], ["".join(pieces[6:9])[1:-1]], [" "],
             ["zzqx"], [text[10:14], text[5:7]]]
    return [c for c in cases if all(c)]


@case("`stop` strings, `include_stop_str_in_output`, `stop_reason`")
def stop_strings(api, llm):
    tokenizer = llm.get_tokenizer()
    out = []
    for prompt in PROMPTS:
        full = llm.generate([prompt], api.SamplingParams(temperature=0, max_tokens=24,
                                                         ignore_eos=True), use_tqdm=False)
        for stops in stop_strings_for(tokenizer, full[0].outputs[0].token_ids):
            for include in (False, True):
                params = api.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True,
                                            stop=stops, include_stop_str_in_output=include)
                out.append({"stop": stops, "include": include, "result": completions(
                    llm.generate([prompt], params, use_tqdm=False))})
    return out


@case("`stop` with `min_tokens`")
def stop_min_tokens(api, llm):
    return [completions(llm.generate(PROMPTS[0], api.SamplingParams(
        temperature=0, max_tokens=20, ignore_eos=True, stop=[" "], min_tokens=m),
        use_tqdm=False)) for m in (0, 2, 5)]


@case("`stop_token_ids` (`stop_reason`, text without the stop token)")
def stop_tokens(api, llm):
    full = llm.generate(PROMPTS[1], api.SamplingParams(temperature=0, max_tokens=12,
                                                       ignore_eos=True), use_tqdm=False)
    stop_id = full[0].outputs[0].token_ids[4]
    return [completions(llm.generate(PROMPTS[1], api.SamplingParams(
        temperature=0, max_tokens=12, stop_token_ids=[stop_id],
        include_stop_str_in_output=include), use_tqdm=False)) for include in (False, True)]


def logprob_record(positions):
    if positions is None:
        return None
    return [[[t, e.logprob, e.rank, e.decoded_token] for t, e in p.items()] for p in positions]


@case("`logprobs` (k = 0, 1, 5), `cumulative_logprob`")
def logprobs(api, llm):
    out = []
    for k in (None, 0, 1, 5):
        params = api.SamplingParams(temperature=0, max_tokens=8, logprobs=k, ignore_eos=True)
        for o in llm.generate(PROMPTS[:2], params, use_tqdm=False):
            c = o.outputs[0]
            out.append({"k": k, "token_ids": list(c.token_ids),
                        "cumulative_logprob": c.cumulative_logprob,
                        "logprobs": logprob_record(c.logprobs)})
    return out


@case("`prompt_logprobs` (k = 0, 1, 5)")
def prompt_logprobs(api, llm):
    out = []
    for k in (None, 0, 1, 5):
        params = api.SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=k)
        for o in llm.generate(PROMPTS[1:], params, use_tqdm=False):
            positions = o.prompt_logprobs
            out.append({"k": k, "prompt_token_ids": list(o.prompt_token_ids),
                        "prompt_logprobs": None if positions is None else
                        [None, *logprob_record(positions[1:])]})
    return out


@case("`decoded_token` of tokens inside multi-byte characters")
def multibyte(api, llm):
    params = api.SamplingParams(temperature=0, max_tokens=6, logprobs=3, prompt_logprobs=3)
    o = llm.generate(["Tom said: café, naïve — 日本"], params, use_tqdm=False)[0]
    return [list(o.prompt_token_ids), [None, *logprob_record(o.prompt_logprobs[1:])],
            list(o.outputs[0].token_ids), logprob_record(o.outputs[0].logprobs)]


@case("`presence_penalty`, `frequency_penalty`, `repetition_penalty`")
def penalties(api, llm):
    out = []
    for rep, freq, pres in ((1.3, 0, 0), (0.8, 0, 0), (1, 1.0, 0), (1, 0, 1.5),
                            (1.2, 0.5, -0.5)):
        params = api.SamplingParams(temperature=0, max_tokens=32, ignore_eos=True,
                                    repetition_penalty=rep, frequency_penalty=freq,
                                    presence_penalty=pres)
        out.append(completions(llm.generate(PROMPTS, params, use_tqdm=False)))
    return out


@case("`n > 1` (top_k=1, so both are deterministic), `top_k`, `min_p`")
def n_samples(api, llm):
    params = api.SamplingParams(n=3, temperature=1.0, top_k=1, min_p=0.1, max_tokens=10,
                                logprobs=1, ignore_eos=True)
    outs = llm.generate(PROMPTS[:2], params, use_tqdm=False)
    return [completions(outs), [[logprob_record(c.logprobs) for c in o.outputs] for o in outs]]


@case("`skip_special_tokens`, `detokenize`")
def detokenizing(api, llm):
    out = []
    for skip, detok in ((True, True), (False, True), (True, False)):
        params = api.SamplingParams(temperature=0, max_tokens=30, ignore_eos=True,
                                    skip_special_tokens=skip, detokenize=detok)
        out.append(completions(llm.generate([[0, 1, 0]], params, use_tqdm=False)))
    return out


@case("`LLMEngine.step()` streaming (`for out in engine.step()`), "
      "`get_num_unfinished_requests`")
def streaming(api, llm):
    engine = llm.llm_engine
    params = [api.SamplingParams(temperature=0, max_tokens=6, stop=["zzqx"]),
              api.SamplingParams(temperature=1.0, top_k=1, n=2, max_tokens=3)]
    for i, (prompt, p) in enumerate(zip(PROMPTS[:2], params, strict=True)):
        engine.add_request(f"stream-{i}", prompt, p)
    steps = [engine.get_num_unfinished_requests()]
    while engine.has_unfinished_requests():
        steps.append(sorted([o.request_id, o.finished, [[c.index, list(c.token_ids), c.text,
                                                        c.finish_reason] for c in o.outputs]]
                            for o in engine.step()))
    return steps


@case("`abort_request`, then `get_num_unfinished_requests`, `has_unfinished_requests`")
def abort_counts(api, llm):
    engine = llm.llm_engine
    engine.add_request("abort-me", PROMPTS[0], api.SamplingParams(temperature=0, max_tokens=10))
    engine.step()
    engine.abort_request(["abort-me"])
    after_abort = [engine.get_num_unfinished_requests(), engine.has_unfinished_requests()]
    engine.step()  # pagedkit's returns the abort, vLLM's nothing (docs/api.md)
    return [after_abort, [engine.get_num_unfinished_requests(), engine.has_unfinished_requests()]]


@case("`SamplingParams`: `stop` and `stop_token_ids` lists, `seed=-1`, `max_tokens=5.0`; "
      "a list changed after `add_request`")
def params_forms(api, llm):
    params = api.SamplingParams(stop="x", stop_token_ids=(1, 2, 2), seed=-1)
    forms = [params.stop, type(params.stop).__name__, params.stop_token_ids,
             type(params.stop_token_ids).__name__, params.seed]
    whole = llm.generate(PROMPTS[:1], api.SamplingParams(temperature=0, max_tokens=5.0),
                         use_tqdm=False)
    engine, params = llm.llm_engine, api.SamplingParams(temperature=0, max_tokens=8)
    engine.add_request("changed", PROMPTS[0], params)
    params.stop.append(" there")  # in the greedy text: it would stop there
    last = []
    while engine.has_unfinished_requests():
        last = [[c.text, c.finish_reason] for o in engine.step() for c in o.outputs]
    return [forms, completions(whole), last]


@case("`LLM.chat` (the tiny model's chat template)")
def chat(api, llm):
    conversation = [{"role": "system", "content": "Be kind."},
                    {"role": "user", "content": "Tell me a story"}]
    params = api.SamplingParams(temperature=0, max_tokens=12)
    return completions(llm.chat([conversation, conversation[1:]], params, use_tqdm=False))


@case("`LLM.beam_search`, `BeamSearchParams`")
def beam_search(api, llm):
    params_cls = beam_params(api)
    out = []
    for width, penalty in ((1, 1.0), (2, 1.0), (3, 0.7)):
        outs = llm.beam_search([api.TextPrompt(prompt=PROMPTS[0]),
                                api.TokensPrompt(prompt_token_ids=[0, 87, 85])],
                               params_cls(beam_width=width, max_tokens=8,
                                          length_penalty=penalty))
        out.append([[[list(s.tokens), s.cum_logprob, s.text] for s in o.sequences]
                    for o in outs])
    return out


# ------------------------------------------------------------------- running
def run_cases(system: str) -> dict[str, Any]:
    api, llm = open_system(system)
    return {"system": system, "cases": {name: fn(api, llm) for name, (_, fn) in CASES.items()}}


def _close(a: Any, b: Any, tol: float) -> bool:
    """Equal, floats within `tol` (the only floats here are log-probabilities)."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= tol
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y, tol) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], tol) for k in a)
    return a == b


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, bool]:
    """Per case: do the two records agree (floats within `LOGPROB_TOL`)? A
    case either record lacks does not."""
    return {name: name in ours["cases"] and name in theirs["cases"]
            and _close(ours["cases"][name], theirs["cases"][name], LOGPROB_TOL)
            for name in CASES}


def table(ours: dict[str, Any], theirs: dict[str, Any]) -> str:
    """docs/api.md's compatibility table, from the two recorded runs."""
    same = compare(ours, theirs)
    lines = ["| API | case | pagedkit and vLLM 0.32 |", "|---|---|---|"]
    for name, (row, _) in CASES.items():
        lines.append(f"| {row} | `{name}` | {'equal' if same[name] else 'DIFFERENT'} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"] and len(argv) == 3:
        Path(argv[2]).write_text(json.dumps(run_cases(argv[1]), indent=1) + "\n")
        return 0
    if argv[:1] == ["table"] and len(argv) == 3:
        ours, theirs = (json.loads(Path(p).read_text()) for p in argv[1:])
        print(table(ours, theirs))
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
