"""newcomer20, finding 8: n (or beam_width) past max_num_seqs *and* past what
the KV cache holds. The advice's number is the smaller limit; the message
names both limits, so a cache's number is not read as max_num_seqs'."""

import pytest

from pagedkit import LLM, SamplingParams
from pagedkit.models import load_tiny_tokenizer

PROMPT = "Once upon a time there was a little girl who liked to play"
FULL = len(load_tiny_tokenizer()(PROMPT)["input_ids"]) // 4  # the prompt's full blocks of 4


@pytest.mark.parametrize("num_blocks", [FULL + 1, FULL + 2, 64])
@pytest.mark.parametrize("cap", [2, 3])
@pytest.mark.parametrize("count", [5, 9])
@pytest.mark.parametrize("beams", [False, True])
def test_the_message_names_the_limit_its_advice_comes_from(num_blocks, cap, count, beams):
    llm = LLM("tiny", block_size=4, num_blocks=num_blocks, max_num_seqs=cap)
    full = FULL
    in_cache = num_blocks - full
    params = (SamplingParams(n=count, use_beam_search=True, temperature=0, max_tokens=3)
              if beams else SamplingParams(n=count, max_tokens=3))
    name = "beam_width" if beams else "n"
    with pytest.raises(ValueError) as info:
        llm.generate(PROMPT, params, use_tqdm=False)
    message = str(info.value)
    assert f"but max_num_seqs is {cap}" in message
    most = min(cap, in_cache)
    assert f"lower {name} to {most}{' or less' * (most > 1)}, or build" in message
    cache = (f"nor does the KV cache hold them: they need {full + count} blocks ({full} full "
             f"ones of the prompt, shared, and one each), and it has {num_blocks}")
    assert (cache in message) == (count > in_cache), message
    assert (f" and num_blocks={full + count} or more" in message) == (count > in_cache)
