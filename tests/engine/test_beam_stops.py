"""Beam search with several stop ids keeps transformers' candidates: the top
``max(2, 1 + number of stop ids) x num_beams`` (beam, token) pairs, so that
``num_beams`` candidates that do not stop always remain. With the top
``2 x num_beams`` only, a beam whose best tokens are all stop ids continued
from worse candidates. Every returned beam is compared, on the tiny model,
for stop sets enumerated from each prompt's most likely next tokens."""

import pytest
import torch

from pagedkit import LLM, SamplingParams
from pagedkit.models import load_tiny

TEXTS = ("Once upon a time", "The little robot looked at the sky and", "She said",
         "One day, a cat")
#: which of the prompt's 8 most likely next tokens stop (more stop ids than beams, mostly)
PICKS = ((0, 2, 3), (1, 2, 3), (0, 2, 3, 4, 5), (1, 2, 3, 4, 5, 6), (0, 3, 4, 5))
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = load_tiny()
    return model, tokenizer, LLM(model, tokenizer, block_size=4, num_blocks=256)


def transformers_beams(model, prompt, num_beams, stop_ids):
    """Every returned beam of transformers' generate, each cut after its stop id."""
    with torch.inference_mode():
        ids = model.generate(torch.tensor([prompt]), num_beams=num_beams,
                             num_return_sequences=num_beams, do_sample=False,
                             max_new_tokens=MAX_TOKENS, eos_token_id=list(stop_ids),
                             pad_token_id=0,
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    beams = []
    for row in ids:
        out = row[len(prompt):].tolist()
        stop = next((i for i, t in enumerate(out) if t in stop_ids), None)
        beams.append(out if stop is None else out[:stop + 1])
    return beams


@pytest.mark.parametrize("num_beams", [2, 3])
@pytest.mark.parametrize("text", TEXTS)
def test_beam_search_with_several_stop_ids_matches_transformers(tiny, text, num_beams):
    model, tokenizer, llm = tiny
    prompt = tokenizer(text)["input_ids"]
    with torch.inference_mode():
        likely = torch.topk(model(torch.tensor([prompt])).logits[0, -1], 8).indices.tolist()
    for pick in PICKS:
        stop_ids = tuple(likely[i] for i in pick)
        params = SamplingParams(use_beam_search=True, beam_width=num_beams, n=num_beams,
                                temperature=0, max_tokens=MAX_TOKENS, stop_token_ids=stop_ids,
                                ignore_eos=True)
        out = llm.generate([prompt], params, use_tqdm=False)[0]
        assert [c.token_ids for c in out.outputs] == \
            transformers_beams(model, prompt, num_beams, set(stop_ids)), stop_ids
    assert llm.llm_engine.memory_stats()["used_blocks"] == 0
