"""A request of n samples (or beams) runs as one group that shares its
prompt's blocks; when the group outgrows the whole KV cache part-way through,
its sequences end early with finish_reason 'length'. vLLM (each sample a
request of its own) would serve every token, so pagedkit says so, once per
request, with a `KVCacheTooSmallWarning` whose advice is checked here to
serve the request whole."""

import dataclasses
import re
import warnings
from pathlib import Path

import pytest

from pagedkit import LLM, KVCacheTooSmallWarning, SamplingParams

BLOCK = 4
MAX_TOKENS = 10


def run(build, num_blocks, prompt, params):
    llm = LLM(build(), block_size=BLOCK, num_blocks=num_blocks)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = llm.generate([prompt, [1, 2]], [params, SamplingParams(max_tokens=2)],
                           use_tqdm=False)[0]
    said = [str(w.message) for w in caught if w.category is KVCacheTooSmallWarning]
    assert llm.llm_engine.memory_stats()["used_blocks"] == 0
    return out, said


def blocks_to_serve(prompt_len, n, max_tokens):
    """The prompt's full blocks once, then each sample's blocks for the rest:
    its prompt tail and every generated token but the last."""
    full = prompt_len // BLOCK
    end = prompt_len + max_tokens
    return full + n * -(-(end - 1 - full * BLOCK) // BLOCK)


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("prompt_len", [3, 4, 9])
def test_samples_that_outgrow_the_cache_say_so_and_the_advice_serves_them(reference, n,
                                                                          prompt_len):
    build, _, _ = reference("llama")
    prompt = list(range(1, prompt_len + 1))
    params = SamplingParams(n=n, temperature=1.0, seed=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    full = prompt_len // BLOCK
    need = blocks_to_serve(prompt_len, n, MAX_TOKENS)
    for num_blocks in range(full + n, need + 2):  # fewer are refused at the door
        out, said = run(build, num_blocks, prompt, params)
        lengths = [len(c.token_ids) for c in out.outputs]
        short = any(k < MAX_TOKENS for k in lengths)
        # exactly the caches that hold fewer blocks than the group needs cut it short,
        # and exactly those say so: once, for this request
        assert short == (num_blocks < need), (num_blocks, lengths)
        assert len(said) == short, (num_blocks, said)
        if not short:
            continue
        message = said[0]
        assert message.startswith(f"prompts[0]: the n={n} samples outgrew the whole KV cache")
        assert f"after {', '.join(map(str, lengths))} generated tokens" in message
        assert f"needs {need} blocks of {BLOCK} tokens" in message
        assert f"the cache has num_blocks={num_blocks}" in message
        # each piece of advice, taken, serves the request whole and says nothing
        more = int(re.search(r"num_blocks=(\d+) or more", message)[1])
        assert more == need
        out, again = run(build, more, prompt, params)
        assert again == [] and all(len(c.token_ids) == MAX_TOKENS for c in out.outputs)
        fewer = re.search(r"lower n to (\d+)", message)
        if fewer:
            k = int(fewer[1])
            out, again = run(build, num_blocks, prompt, dataclasses.replace(params, n=k))
            assert again == [] and [len(c.token_ids) for c in out.outputs] == [MAX_TOKENS] * k
            out, again = run(build, num_blocks, prompt, dataclasses.replace(params, n=k + 1))
            assert again, f"n={k + 1} fits too: the advice is not the largest"
        shorter = re.search(r"lower max_tokens to (\d+)", message)
        if shorter:
            m = int(shorter[1])
            out, again = run(build, num_blocks, prompt, dataclasses.replace(params, max_tokens=m))
            assert again == [] and [len(c.token_ids) for c in out.outputs] == [m] * n
            longer = dataclasses.replace(params, max_tokens=m + 1)
            out, again = run(build, num_blocks, prompt, longer)
            assert again, f"max_tokens={m + 1} fits too: the advice is not the largest"


@pytest.mark.parametrize("width", [2, 3])
def test_beams_that_outgrow_the_cache_say_so_and_the_advice_serves_them(reference, width):
    build, _, _ = reference("llama")
    prompt = list(range(1, 7))
    params = SamplingParams(use_beam_search=True, beam_width=width, temperature=0,
                            max_tokens=MAX_TOKENS, ignore_eos=True)
    need = blocks_to_serve(len(prompt), width, MAX_TOKENS)
    warned = 0
    for num_blocks in range(1 + width, need + 1):
        out, said = run(build, num_blocks, prompt, params)
        short = any(len(c.token_ids) < MAX_TOKENS for c in out.outputs)
        assert len(said) == short, (num_blocks, said)
        warned += short
        if short:
            assert said[0].startswith(f"prompts[0]: the beam_width={width} beams outgrew")
            more = int(re.search(r"num_blocks=(\d+) or more", said[0])[1])
            out, again = run(build, more, prompt, params)
            assert again == [] and all(len(c.token_ids) == MAX_TOKENS for c in out.outputs)
    assert warned  # the smallest caches do cut beams short


def test_every_cut_short_warning_names_the_request_and_ends_with_its_fixes_and_docs():
    """The four ways a request is cut short (a group outgrowing the cache, a
    max_model_len the cache lowered, beams at the cache, beams at
    max_num_batched_tokens) are told by one helper: '<request>: <what
    happened>. To be served whole: <every fix> (docs/api.md, '<a section
    there>').'"""
    from pagedkit import BeamSearchParams

    def said(llm, call):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call(llm)
        return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]

    prompt = list(range(10))
    small = LLM("tiny", num_blocks=4, block_size=BLOCK)
    narrow = LLM("tiny", num_blocks=64, block_size=BLOCK, max_num_batched_tokens=12)
    beams = BeamSearchParams(beam_width=2, max_tokens=30)
    messages = (
        said(small, lambda llm: llm.generate(
            [prompt], SamplingParams(n=2, temperature=1.0, seed=0, max_tokens=30,
                                     ignore_eos=True), use_tqdm=False))
        + said(small, lambda llm: llm.generate(
            {"prompt_token_ids": prompt}, SamplingParams(max_tokens=30, ignore_eos=True),
            use_tqdm=False))
        + said(small, lambda llm: llm.beam_search([prompt], beams))
        + said(narrow, lambda llm: llm.beam_search([prompt], beams)))
    page = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    headings = {line.lstrip("#").strip() for line in page.splitlines() if line.startswith("#")}
    assert len(messages) == 4
    for message in messages:
        shape = re.fullmatch(r"(generate|beam_search)\(\): .+\. To be served whole: "
                             r"build the engine with .+ or more.*, or lower max_tokens to \d+ "
                             r"\(docs/api\.md, '(.+)'\)\.", message)
        assert shape, message
        assert shape[2] in headings
