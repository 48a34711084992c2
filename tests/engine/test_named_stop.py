"""The one rule for what a stopped sequence names in ``stop_reason``
(`StopRule.named_stop`, used by sampled sequences and by beams): the token
if it is one of the request's own ``stop_token_ids`` and not an
end-of-sequence that ends it anyway (vLLM checks end-of-sequence first);
with ``ignore_eos`` end-of-sequence ends nothing, so a stop id that is also
end-of-sequence is named. Every combination, as a truth table."""

import itertools

import pytest

from pagedkit import SamplingParams
from pagedkit.engine.sampling import StopRule

EOS, STOP, OTHER = 2, 7, 9


@pytest.mark.parametrize("token, stop_ids, ignore_eos", list(itertools.product(
    (EOS, STOP, OTHER), ([], [STOP], [EOS], [STOP, EOS]), (False, True))))
def test_named_stop_truth_table(token, stop_ids, ignore_eos):
    rule = StopRule(eos_token_ids={EOS}, max_model_len=64)
    params = SamplingParams(temperature=0, stop_token_ids=stop_ids, ignore_eos=ignore_eos)
    ends_by_eos = token == EOS and not ignore_eos
    expected = token if token in stop_ids and not ends_by_eos else None
    assert rule.named_stop(params, token) == expected
