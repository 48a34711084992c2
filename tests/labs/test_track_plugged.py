"""Newcomer 30, N3: an engine with the learner's pieces plugged in
(`track.plug_in`, `track.plugged`) — no pagedkit engine beside it — never
serves a wrong token. Every call of a plugged attention is held to pagedkit's
own on the same inputs (as lab 04c's serve holds each kernel call): an
attention wrong only for some sequences, some layers or long contexts is
stopped at its first wrong call with a `TrackError` naming the piece; each
sampled row's top-p cut is held to pagedkit's likewise. The other pieces'
answers are carried out by pagedkit's own bookkeeping (checked answers,
pagedkit's copies, names looked up by pagedkit's own keys), so they cannot
change a token."""

import math

import pytest
import torch

from pagedkit import LLM, SamplingParams
from pagedkit.exercises import track
from pagedkit.kernels.reference import gather_kv

from .wrong_answers import WRONG, _solution

RIGHT = _solution("lab04_paged_attention").paged_decode_attention
RIGHT_TOP_P = _solution("lab08_full_engine").top_p_filter


def _attention(query, k_cache, v_cache, table, n, *, scale=None, rows=None):
    k, v = gather_kv(k_cache, table, n), gather_kv(v_cache, table, n)
    if rows is not None:
        k, v = k[rows], v[rows]
    group = query.shape[0] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    return torch.einsum("ht,thd->hd", torch.softmax(torch.einsum("hd,thd->ht", query, k)
                                                    * scale, dim=-1), v)


def reads_at_most_12_tokens(query, k_cache, v_cache, table, n):
    return RIGHT(query, k_cache, v_cache, table, min(n, 12))


def reads_one_token_too_few(query, k_cache, v_cache, table, n):
    return RIGHT(query, k_cache, v_cache, table, max(n - 1, 1))


def scales_by_head_dim(query, k_cache, v_cache, table, n):
    return _attention(query, k_cache, v_cache, table, n, scale=1 / query.shape[-1])


def skips_the_first_token_past_8(query, k_cache, v_cache, table, n):
    return _attention(query, k_cache, v_cache, table, n, rows=slice(1 if n > 8 else 0, n))


def wrong_for_the_second_layer(query, k_cache, v_cache, table, n):
    calls = wrong_for_the_second_layer.calls = getattr(wrong_for_the_second_layer, "calls", 0) + 1
    out = RIGHT(query, k_cache, v_cache, table, n)
    return out * 1.01 if calls % 2 == 0 else out


def nan_past_20_tokens(query, k_cache, v_cache, table, n):
    out = RIGHT(query, k_cache, v_cache, table, n)
    return out * math.nan if n > 20 else out


def a_list_past_20_tokens(query, k_cache, v_cache, table, n):
    out = RIGHT(query, k_cache, v_cache, table, n)
    return out.tolist() if n > 20 else out


WRONG_ATTENTION = [reads_at_most_12_tokens, reads_one_token_too_few, scales_by_head_dim,
                   skips_the_first_token_past_8, wrong_for_the_second_layer, nan_past_20_tokens,
                   a_list_past_20_tokens, *WRONG[("lab04", "paged_decode_attention")]]

#: a short prompt first (the step's first attention call is its), then longer ones
PROMPTS = [[5, 6, 7], list(range(20, 60)), list(range(100, 117))]
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
ENGINE = {"block_size": 4, "num_blocks": 64}


def _tokens(llm, params):
    outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs]


@pytest.fixture(scope="module")
def pagedkits():
    llm = LLM("tiny", **ENGINE)
    return {"greedy": _tokens(llm, GREEDY)}


def test_the_right_attention_serves_pagedkits_tokens(pagedkits):
    llm = LLM("tiny", **ENGINE)
    with track.plugged(llm, track.Pieces(paged_decode_attention=RIGHT)):
        assert _tokens(llm, GREEDY) == pagedkits["greedy"]


@pytest.mark.parametrize("wrong", WRONG_ATTENTION, ids=lambda fn: fn.__name__)
def test_a_wrong_attention_is_refused_never_served(wrong, pagedkits):
    llm = LLM("tiny", **ENGINE)
    with track.plugged(llm, track.Pieces(paged_decode_attention=wrong)):
        try:
            got = _tokens(llm, GREEDY)
        except track.TrackError as err:
            assert err.piece == "paged_decode_attention"
            assert "your paged_decode_attention (lab 04)" in str(err)
            return
    pytest.fail(f"{wrong.__name__} served {got} (pagedkit: {pagedkits['greedy']}) without an "
                "error" + (" — wrong tokens" if got != pagedkits["greedy"] else ""))


def test_an_attention_off_for_some_sequence_says_so():
    llm = LLM("tiny", **ENGINE)
    with track.plugged(llm, track.Pieces(paged_decode_attention=reads_at_most_12_tokens)), \
            pytest.raises(track.TrackError, match=r"for a sequence of \d+ tokens returned "
                                                  r"values off by up to .*"
                                                  r"lab04.check_paged_decode_attention"):
        _tokens(llm, GREEDY)


SAMPLED = [SamplingParams(temperature=t, top_p=p, max_tokens=8, seed=7 + i, ignore_eos=True)
           for i, (t, p) in enumerate([(1.0, 0.9), (0.8, 0.5), (1.3, 0.95)])]


def keeps_one_more(logits, top_p):
    probs = torch.softmax(logits, -1)
    order = torch.argsort(probs, descending=True)
    mass_before = torch.cumsum(probs[order], 0) - 2 * probs[order]
    out = torch.full_like(logits, -math.inf)
    keep = order[mass_before < top_p]
    out[keep] = logits[keep]
    return out


def zero_not_inf(logits, top_p):
    out = RIGHT_TOP_P(logits, top_p)
    return torch.where(torch.isinf(out), torch.zeros_like(out), out)


def cuts_at_a_fixed_top_p(logits, top_p):
    return RIGHT_TOP_P(logits, 0.9)


WRONG_TOP_P = [keeps_one_more, zero_not_inf, cuts_at_a_fixed_top_p,
               *WRONG[("lab08", "top_p_filter")]]


@pytest.mark.parametrize("wrong", WRONG_TOP_P, ids=lambda fn: fn.__name__)
def test_a_wrong_top_p_cut_is_refused_never_served(wrong):
    llm = LLM("tiny", **ENGINE)
    with track.plugged(llm, track.Pieces(top_p_filter=wrong)), \
            pytest.raises(track.TrackError, match="your top_p_filter \\(lab 08\\)"):
        llm.generate([{"prompt_token_ids": p} for p in PROMPTS], SAMPLED, use_tqdm=False)


def test_the_right_top_p_cut_serves_pagedkits_tokens():
    def sampled(llm):
        outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], SAMPLED,
                            use_tqdm=False)
        return [o.outputs[0].token_ids for o in outs]

    want = sampled(LLM("tiny", **ENGINE))
    llm = LLM("tiny", **ENGINE)
    with track.plugged(llm, track.Pieces(top_p_filter=RIGHT_TOP_P)):
        assert sampled(llm) == want
