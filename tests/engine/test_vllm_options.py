"""vLLM's sampling options, streaming step outputs, engine arguments, chat and
beam search, each against a plain reference: the tiny model run by
transformers without a cache (its logits for the whole sequence, every
step), and the rules computed directly from them. tests/vllm holds the same
checks against the real vLLM."""

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedkit import (
    LLM,
    BeamSearchParams,
    EngineArgs,
    LLMEngine,
    SamplingParams,
    TextPrompt,
    TokensPrompt,
)
from pagedkit.engine.offline_beam import beam_score
from pagedkit.models import load_tiny
from pagedkit.sampling_params import VLLM_ONLY_OPTIONS, shown

PROMPTS = ["Once upon a time", "The little dog ran", "Tom and Lily"]


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", num_blocks=128, dtype="float32")


@pytest.fixture(scope="module")
def hf():
    model, tokenizer = load_tiny(torch.float32)
    return model, tokenizer


def next_logits(model, ids):
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0, -1]
    return logits.double().clone()


def reference_greedy(model, prompt_ids, max_tokens, *, rep=1.0, freq=0.0, pres=0.0,
                     eos=None):
    """Greedy decoding with vLLM's penalties, written out on float64 logits."""
    ids = list(prompt_ids)
    out = []
    for _ in range(max_tokens):
        logits = next_logits(model, ids)
        for t in set(ids):
            logits[t] = logits[t] / rep if logits[t] > 0 else logits[t] * rep
        for t in set(out):
            logits[t] -= freq * out.count(t) + pres
        tok = int(logits.argmax())
        ids.append(tok)
        out.append(tok)
        if tok == eos:
            break
    return out


def gen(llm, prompt, **kw):
    kw.setdefault("temperature", 0)
    return llm.generate([prompt], SamplingParams(**kw), use_tqdm=False)[0]


# ------------------------------------------------------------------ penalties
@pytest.mark.parametrize("rep, freq, pres", [(1.0, 0, 0), (1.3, 0, 0), (0.7, 0, 0),
                                             (1.0, 0.8, 0), (1.0, 0, 1.5), (1.0, -0.5, 0),
                                             (1.2, 0.5, 0.5)])
def test_penalties_match_the_written_out_rule(llm, hf, rep, freq, pres):
    """Greedy with penalties picks the argmax of the penalized logits, token
    for token (the tiny model repeats itself, so the penalties bite)."""
    model, tokenizer = hf
    for prompt in PROMPTS[:2]:
        ids = tokenizer(prompt)["input_ids"]
        got = gen(llm, prompt, max_tokens=24, repetition_penalty=rep, frequency_penalty=freq,
                  presence_penalty=pres, ignore_eos=True)
        want = reference_greedy(model, ids, 24, rep=rep, freq=freq, pres=pres)
        assert got.outputs[0].token_ids == want


def test_penalties_change_a_repetitive_output(llm):
    plain = gen(llm, "Once upon a time", max_tokens=40, ignore_eos=True).outputs[0].token_ids
    assert len(set(plain)) < len(plain)  # it repeats: the penalties have something to do
    penalized = gen(llm, "Once upon a time", max_tokens=40, ignore_eos=True,
                    frequency_penalty=2.0).outputs[0].token_ids
    assert penalized != plain


def test_min_p_keeps_the_tokens_at_least_min_p_times_the_best():
    from pagedkit.model.sampler import filter_logits

    g = torch.Generator().manual_seed(0)
    for min_p in (0.0, 0.05, 0.3, 1.0):
        for temperature in (0.5, 1.0, 2.0):
            logits = torch.randn(64, generator=g) * 3
            out = filter_logits(logits, SamplingParams(min_p=min_p, temperature=temperature))
            probs = (logits.double() / temperature).softmax(-1)
            keep = probs >= probs.max() * min_p
            assert torch.equal(torch.isfinite(out), keep)


def test_min_p_samples_only_kept_tokens(llm, hf):
    model, tokenizer = hf
    ids = tokenizer("Once upon a time")["input_ids"]
    probs = next_logits(model, ids).softmax(-1)
    kept = set(torch.nonzero(probs >= probs.max() * 0.2).flatten().tolist())
    out = llm.generate(["Once upon a time"] * 8,
                       [SamplingParams(min_p=0.2, max_tokens=1, seed=s) for s in range(8)],
                       use_tqdm=False)
    assert {o.outputs[0].token_ids[0] for o in out} <= kept


# ------------------------------------------------------------------- logprobs
@pytest.mark.parametrize("k", [0, 1, 5])
def test_logprobs_are_the_raw_log_softmax(llm, hf, k):
    """Each position: the chosen token first (its rank counts the tokens at
    least as likely), then the top k in order with ranks 1..k; the values
    are the model's own log-softmax, before any penalty or temperature
    (vLLM's raw_logprobs); cumulative_logprob is their sum."""
    model, tokenizer = hf
    ids = tokenizer("The little dog ran")["input_ids"]
    out = gen(llm, "The little dog ran", max_tokens=6, logprobs=k, repetition_penalty=1.5,
              ignore_eos=True).outputs[0]
    assert len(out.logprobs) == len(out.token_ids) == 6
    seq = list(ids)
    total = 0.0
    for token, position in zip(out.token_ids, out.logprobs, strict=True):
        ref = torch.log_softmax(next_logits(model, seq), -1)
        top = torch.topk(ref, k).indices.tolist() if k else []
        assert next(iter(position)) == token
        assert set(position) == {token, *top}
        assert len(position) == k + (token not in top)
        for t, entry in position.items():
            assert entry.logprob == pytest.approx(float(ref[t]), abs=1e-4)
            assert entry.decoded_token == tokenizer.decode([t])
        if token not in top:
            assert position[token].rank == int((ref >= ref[token]).sum())
        for rank, t in enumerate(top, 1):
            assert position[t].rank == rank
        total += position[token].logprob
        seq.append(token)
    assert out.cumulative_logprob == pytest.approx(total, abs=1e-9)


def test_without_logprobs_cumulative_logprob_is_none(llm):
    out = gen(llm, "Tom and Lily", max_tokens=3).outputs[0]
    assert out.logprobs is None and out.cumulative_logprob is None


def test_logprobs_of_n_samples_are_each_their_own(llm, hf):
    """n > 1 (top_k=1: every sample is the greedy one, as vLLM refuses greedy
    n > 1): each completion has its own logprobs list, all equal here."""
    outs = gen(llm, "Tom and Lily", max_tokens=5, n=3, temperature=1.0, top_k=1, logprobs=2,
               ignore_eos=True).outputs
    assert [o.index for o in outs] == [0, 1, 2]
    greedy = gen(llm, "Tom and Lily", max_tokens=5, logprobs=2, ignore_eos=True).outputs[0]
    for o in outs:
        assert o.token_ids == greedy.token_ids
        assert o.cumulative_logprob == pytest.approx(greedy.cumulative_logprob, abs=1e-5)
    assert outs[0].logprobs is not outs[1].logprobs


def test_no_detokenize_means_no_text(llm):
    out = gen(llm, "Tom and Lily", max_tokens=4, logprobs=1, detokenize=False).outputs[0]
    assert out.text == ""
    assert all(e.decoded_token is None for p in out.logprobs for e in p.values())


def test_skip_special_tokens_false_shows_them(llm):
    prompt = [0, 1, 0]  # bos, eos, bos: the model has seen stories end
    out = gen(llm, prompt, max_tokens=30, ignore_eos=True, skip_special_tokens=False).outputs[0]
    tokenizer = llm.get_tokenizer()
    assert out.text == tokenizer.decode(out.token_ids, skip_special_tokens=False)
    shown = gen(llm, prompt, max_tokens=30, ignore_eos=True).outputs[0].text
    assert shown == tokenizer.decode(out.token_ids, skip_special_tokens=True)


# --------------------------------------------------------------- stop strings
def texts_by_token(tokenizer, ids):
    return [tokenizer.decode(ids[:i + 1], skip_special_tokens=True) for i in range(len(ids))]


def reference_stop(tokenizer, ids, stops, include=False, min_tokens=0):
    """Where vLLM's rule stops a completion whose full greedy tokens are
    `ids`: the first token after min_tokens whose text holds a stop string
    ending in its new characters (the earliest-ending one)."""
    texts = texts_by_token(tokenizer, ids)
    for i, text in enumerate(texts):
        if i + 1 <= min_tokens:
            continue
        before = len(texts[i - 1]) if i else 0
        found = [(text.find(s, max(0, before - len(s) + 1)), s) for s in stops]
        found = [(start + len(s), start, s) for start, s in found if start != -1]
        if found and before < len(text):
            end, start, s = min(found, key=lambda f: f[0])
            return ids[:i + 1], text[:end] if include else text[:start], s
    return ids, texts[-1], None


def stop_cases(tokenizer, ids):
    """Stop strings that bite everywhere: a whole token, the start, middle and
    end of a token, across two and three tokens, a single space, one never
    there, and pairs where the later one in the list ends first."""
    pieces = [tokenizer.decode([t]) for t in ids]
    text = "".join(pieces)
    cases = [[p] for p in pieces[2:6] if p.strip()]
    for p in pieces[3:7]:
        if len(p) >= 3:
            cases += [[p[:2]], [p[1:-1]], [p[-2:]]]
    for i in (3, 6):
        cases += [[pieces[i][-1] + pieces[i + 1][:1]], ["".join(pieces[i:i + 3])[1:-1]]]
    cases += [[" "], ["zzqx"], [text[10:14], text[5:7]], ["zzqx", text[8:11]]]
    return [c for c in cases if all(c)]


@pytest.mark.parametrize("include", [False, True])
def test_stop_strings_follow_vllms_rule(llm, include):
    tokenizer = llm.get_tokenizer()
    for prompt in PROMPTS:
        full = gen(llm, prompt, max_tokens=24, ignore_eos=True).outputs[0].token_ids
        for stops in stop_cases(tokenizer, full):
            out = gen(llm, prompt, max_tokens=24, ignore_eos=True, stop=stops,
                      include_stop_str_in_output=include).outputs[0]
            ids, text, which = reference_stop(tokenizer, full, stops, include)
            assert (out.token_ids, out.text, out.stop_reason) == (ids, text, which), stops
            assert out.finish_reason == ("stop" if which else "length")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=True)
@given(data=st.data())
def test_any_piece_of_the_text_stops_where_the_rule_says(llm, data):
    """Property: stop strings cut from anywhere in the greedy text (one or
    two, any length), with or without include_stop_str_in_output and
    min_tokens, stop where the written-out rule says."""
    tokenizer = llm.get_tokenizer()
    prompt = data.draw(st.sampled_from(PROMPTS))
    full = gen(llm, prompt, max_tokens=20, ignore_eos=True).outputs[0].token_ids
    text = tokenizer.decode(full)
    stops = []
    for _ in range(data.draw(st.integers(1, 2))):
        start = data.draw(st.integers(0, len(text) - 1))
        stops.append(text[start:start + data.draw(st.integers(1, 6))])
    include = data.draw(st.booleans())
    min_tokens = data.draw(st.sampled_from([0, 0, 2, 5]))
    out = gen(llm, prompt, max_tokens=20, ignore_eos=True, stop=stops, min_tokens=min_tokens,
              include_stop_str_in_output=include).outputs[0]
    ids, want, which = reference_stop(tokenizer, full, list(dict.fromkeys(stops)), include,
                                      min_tokens)
    assert (out.token_ids, out.text, out.stop_reason) == (ids, want, which)


def test_stop_strings_wait_for_min_tokens(llm):
    tokenizer = llm.get_tokenizer()
    full = gen(llm, "Once upon a time", max_tokens=24, ignore_eos=True).outputs[0].token_ids
    first = tokenizer.decode(full[:1])
    for min_tokens in (0, 1, 3, 8):
        out = gen(llm, "Once upon a time", max_tokens=24, ignore_eos=True, stop=[first[-1]],
                  min_tokens=min_tokens).outputs[0]
        ids, text, which = reference_stop(tokenizer, full, [first[-1]], min_tokens=min_tokens)
        assert (out.token_ids, out.text, out.stop_reason) == (ids, text, which)


def test_a_stop_token_is_named_and_left_out_of_the_text(llm):
    tokenizer = llm.get_tokenizer()
    full = gen(llm, "Once upon a time", max_tokens=12, ignore_eos=True).outputs[0].token_ids
    stop_id = full[3]
    for include in (False, True):
        out = gen(llm, "Once upon a time", max_tokens=12, ignore_eos=True,
                  stop_token_ids=[stop_id], include_stop_str_in_output=include).outputs[0]
        assert out.token_ids == full[:4] and out.stop_reason == stop_id
        shown = full[:4] if include else full[:3]
        assert out.text == tokenizer.decode(shown, skip_special_tokens=True)


def test_stop_strings_with_n_samples_stop_each_on_its_own(llm):
    outs = gen(llm, "The little dog ran", max_tokens=30, n=4, temperature=1.0, seed=3,
               stop=["."], ignore_eos=True).outputs
    for o in outs:
        assert "." not in o.text
        if o.finish_reason == "stop":
            assert llm.get_tokenizer().decode(o.token_ids).count(".") >= 1


# ---------------------------------------------------------------- streaming
def stream(engine, requests):
    for rid, prompt, params in requests:
        engine.add_request(rid, prompt, params)
    seen = []
    while engine.has_unfinished_requests():
        step = engine.step()
        seen.append([(o.request_id, o.finished, [(c.index, list(c.token_ids), c.text,
                                                  c.finish_reason) for c in o.outputs])
                     for o in step])
    return seen


def test_step_streams_partial_outputs_vllm_style(llm):
    """``for out in engine.step()``: every request with a new token, its
    completion so far (text held back by the longest stop string - 1 chars
    while unfinished), finished once; the last equals generate's output."""
    engine = llm.llm_engine
    tokenizer = llm.get_tokenizer()
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, stop=["zzqx"])
    seen = stream(engine, [("s0", "Once upon a time", params), ("s1", "Tom and Lily", params)])
    final = llm.generate(["Once upon a time", "Tom and Lily"], params, use_tqdm=False)
    for rid, want in zip(["s0", "s1"], final, strict=True):
        mine = [o for step in seen for o in step if o[0] == rid]
        assert len(mine) == 8  # one output per token
        assert [o[1] for o in mine] == [False] * 7 + [True]
        for n, (_, _, [(index, ids, text, reason)]) in enumerate(mine, 1):
            assert index == 0 and len(ids) == n
            full = tokenizer.decode(ids, skip_special_tokens=True)
            assert text == (full if n == 8 else full[:-3])
            assert reason == ("length" if n == 8 else None)
        assert mine[-1][2][0][1] == want.outputs[0].token_ids
        assert mine[-1][2][0][2] == want.outputs[0].text
    assert engine.get_num_unfinished_requests() == 0


def test_a_step_read_late_shows_that_step(llm):
    engine = llm.llm_engine
    engine.add_request("late", "Once upon a time", SamplingParams(temperature=0, max_tokens=5))
    steps = [engine.step() for _ in range(3)]
    assert engine.get_num_unfinished_requests() == 1
    assert [len(s[0].outputs[0].token_ids) for s in steps] == [1, 2, 3]
    while engine.has_unfinished_requests():
        engine.step()


def test_n_samples_stream_one_output_per_completion(llm):
    """vLLM streams n > 1 as one RequestOutput per completion that got a
    token; the request is finished with the last completion to end."""
    engine = llm.llm_engine
    params = SamplingParams(temperature=1.0, top_k=1, n=3, max_tokens=4, ignore_eos=True)
    seen = stream(engine, [("n3", "Tom and Lily", params)])
    for step in seen[:-1]:
        assert [o[2][0][0] for o in step] == [0, 1, 2] and not any(o[1] for o in step)
    assert [o[1] for o in seen[-1]] == [False, False, True]


def test_step_output_keeps_pagedkits_fields(llm):
    engine = llm.llm_engine
    engine.add_request("f", "Tom and Lily", SamplingParams(temperature=0, max_tokens=2))
    step = engine.step()
    assert step.scheduled and step.new_tokens and step.memory and not step.finished
    assert len(step) == 1 and step[0].request_id == "f" and list(step) == step.outputs
    step = engine.step()
    assert step.finished == list(step) and step.finished[0].finished


def test_metrics_have_vllms_names(llm):
    out = gen(llm, "Tom and Lily", max_tokens=4, ignore_eos=True)
    m = out.metrics
    assert m.queued_ts == m.arrival_time <= m.scheduled_ts <= m.first_token_ts <= m.last_token_ts
    assert m.first_token_latency == m.first_token_ts - m.arrival_time
    assert m.num_generation_tokens == 4 and m.num_preemptions == 0


# ------------------------------------------------------- engine args, prompts
def test_one_device_engine_arguments_are_accepted():
    llm = LLM("tiny", num_blocks=16, tensor_parallel_size=1, pipeline_parallel_size=1,
              enforce_eager=True, trust_remote_code=False, disable_log_stats=True,
              kv_cache_dtype="auto", max_logprobs=3, skip_tokenizer_init=False)
    assert llm.llm_engine.max_logprobs == 3
    with pytest.raises(ValueError, match="max_logprobs=3"):
        llm.generate("a", SamplingParams(logprobs=4), use_tqdm=False)


def test_skip_tokenizer_init_serves_token_ids_without_text():
    llm = LLM("tiny", num_blocks=16, skip_tokenizer_init=True)
    out = llm.generate([[0, 87, 85]], SamplingParams(temperature=0, max_tokens=3),
                       use_tqdm=False)[0]
    assert out.outputs[0].text == "" and len(out.outputs[0].token_ids) == 3
    with pytest.raises(ValueError, match="no tokenizer"):
        llm.generate("text", use_tqdm=False)


def test_engine_args_build_the_same_engine():
    args = EngineArgs(model="tiny", num_blocks=16, block_size=8, enforce_eager=True)
    assert args.block_size == 8 and args.max_num_seqs == 256
    engine = LLMEngine.from_engine_args(args)
    assert engine.kv.block_size == 8 and engine.kv.allocator.num_blocks == 16
    with pytest.raises(TypeError, match="EngineArgs got an engine argument"):
        EngineArgs(model="tiny", nonsense=1)
    with pytest.raises(TypeError, match="EngineArgs"):
        LLMEngine.from_engine_args({"model": "tiny"})


@pytest.mark.parametrize("cls", [LLM, LLMEngine], ids=["LLM", "LLMEngine"])
@pytest.mark.parametrize("wrong", [{"model": "tiny"}, "tiny", None, LLMEngine])
def test_from_engine_args_refuses_what_is_not_engine_args(cls, wrong):
    """vLLM has ``from_engine_args`` on `LLM` and `LLMEngine`; both name
    themselves and what to give."""
    with pytest.raises(TypeError, match=rf"{cls.__name__}\.from_engine_args takes an "
                                        r"EngineArgs \(pagedkit\.EngineArgs"):
        cls.from_engine_args(wrong)


def test_llm_from_engine_args_is_llm_of_the_same_arguments():
    args = EngineArgs(model="tiny", num_blocks=16, block_size=8, seed=3, max_model_len=64)
    llm = LLM.from_engine_args(args)
    assert type(llm) is LLM
    engine = llm.llm_engine
    kv = engine.kv
    assert (kv.block_size, kv.allocator.num_blocks, engine.max_model_len) == (8, 16, 64)
    params = SamplingParams(temperature=0.8, max_tokens=6)
    direct = LLM("tiny", num_blocks=16, block_size=8, seed=3, max_model_len=64)
    assert [o.outputs[0].token_ids for o in llm.generate(["Once upon a time"], params,
                                                         use_tqdm=False)] == \
        [o.outputs[0].token_ids for o in direct.generate(["Once upon a time"], params,
                                                         use_tqdm=False)]


def test_from_vllm_config_says_pagedkit_has_no_vllm_config():
    with pytest.raises(TypeError, match=r"from_vllm_config: pagedkit has no VllmConfig.*"
                                        r"from_engine_args\(EngineArgs"):
        LLMEngine.from_vllm_config(object())


def test_an_engine_error_names_the_class_the_user_called():
    with pytest.raises(TypeError, match=r"^LLM got an engine argument"):
        LLM("tiny", num_blocks=16, tensor_paralel_size=1)
    with pytest.raises(TypeError, match=r"^LLMEngine got an engine argument"):
        LLMEngine("tiny", num_blocks=16, tensor_paralel_size=1)


def test_typed_prompts_are_plain_dicts(llm):
    assert TokensPrompt(prompt_token_ids=[1, 2]) == {"prompt_token_ids": [1, 2]}
    a = gen(llm, TextPrompt(prompt="Tom and Lily"), max_tokens=3)
    ids = llm.get_tokenizer()("Tom and Lily")["input_ids"]
    b = gen(llm, TokensPrompt(prompt_token_ids=ids), max_tokens=3)
    assert a.outputs[0].token_ids == b.outputs[0].token_ids and a.prompt == "Tom and Lily"


# ----------------------------------------------------------------------- chat
def test_chat_renders_the_template_and_adds_no_second_bos(llm):
    tokenizer = llm.get_tokenizer()
    conversation = [{"role": "system", "content": "Be kind."},
                    {"role": "user", "content": "Tell me a story"}]
    out = llm.chat(conversation, SamplingParams(temperature=0, max_tokens=5), use_tqdm=False)[0]
    assert out.prompt == "<|bos|>system: Be kind.\nuser: Tell me a story\nassistant:"
    ids = tokenizer(out.prompt, add_special_tokens=False)["input_ids"]
    assert out.prompt_token_ids == ids and ids.count(tokenizer.bos_token_id) == 1
    assert out.outputs[0].token_ids == gen(llm, ids, max_tokens=5).outputs[0].token_ids
    two = llm.chat([conversation, conversation[1:]], SamplingParams(max_tokens=2),
                   use_tqdm=False)
    assert len(two) == 2 and two[1].prompt == "<|bos|>user: Tell me a story\nassistant:"
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"},
                                          {"type": "text", "text": "b"}]}]
    assert llm.chat(parts, SamplingParams(max_tokens=1), use_tqdm=False,
                    add_generation_prompt=False)[0].prompt == "<|bos|>user: a\nb\n"


# ---------------------------------------------------------------- beam search
def reference_beam_search(model, eos, prompt, width, max_tokens, length_penalty=1.0):
    """vLLM's offline beam search written out on transformers' logits."""
    live = [(list(prompt), 0.0)]
    done = []

    def score(beam):
        tokens, cum = beam
        return cum / max(len(tokens) - (tokens[-1] == eos), 1) ** length_penalty

    for _ in range(max_tokens):
        if not live:
            break
        grown = []
        for tokens, cum in live:
            lp = torch.log_softmax(next_logits(model, tokens).float(), -1)
            top = torch.topk(lp, 2 * width)
            for t, v in zip(top.indices.tolist(), top.values.tolist(), strict=True):
                (done if t == eos else grown).append(([*tokens, t], cum + v))
        live = sorted(grown, key=score, reverse=True)[:width]
    return sorted(done + live, key=score, reverse=True)[:width]


@pytest.mark.parametrize("width, length_penalty", [(1, 1.0), (2, 1.0), (3, 0.5)])
def test_beam_search_is_vllms(llm, hf, width, length_penalty):
    model, tokenizer = hf
    prompts = [TextPrompt(prompt="Once upon a time"), TokensPrompt(prompt_token_ids=[0, 87])]
    outs = llm.beam_search(prompts, BeamSearchParams(beam_width=width, max_tokens=6,
                                                     length_penalty=length_penalty))
    for prompt, out in zip([tokenizer("Once upon a time")["input_ids"], [0, 87]], outs,
                           strict=True):
        want = reference_beam_search(model, tokenizer.eos_token_id, prompt, width, 6,
                                     length_penalty)
        assert [s.tokens for s in out.sequences] == [t for t, _ in want]
        for s, (_, cum) in zip(out.sequences, want, strict=True):
            assert s.cum_logprob == pytest.approx(cum, abs=1e-4)
            assert s.text == tokenizer.decode(s.tokens, skip_special_tokens=True)
        scores = [beam_score(s, tokenizer.eos_token_id, length_penalty) for s in out.sequences]
        assert scores == sorted(scores, reverse=True) and not math.isnan(scores[0])


@pytest.mark.parametrize("whole", [0.0, 1.0, 3.0, np.float32(2.0)])
def test_beam_max_tokens_takes_a_whole_float_as_sampling_params_does(whole):
    """SamplingParams' rule for a count (5.0 is 5, as in vLLM): beams take it too."""
    params = BeamSearchParams(beam_width=2, max_tokens=whole)
    assert params.max_tokens == int(whole) and type(params.max_tokens) is int
    assert SamplingParams(max_tokens=whole or 1).max_tokens == int(whole or 1)


@pytest.mark.parametrize("wrong", [1.5, float("nan"), float("inf"), "3", True])
def test_beam_max_tokens_refuses_what_sampling_params_refuses(wrong):
    with pytest.raises((TypeError, ValueError)) as sampling:
        SamplingParams(max_tokens=wrong)
    with pytest.raises(type(sampling.value), match=f"^{re.escape(str(sampling.value))}$"):
        BeamSearchParams(beam_width=2, max_tokens=wrong)


def test_beam_search_leaves_the_engine_empty(llm):
    llm.beam_search(["Tom and Lily", "The little dog ran"], BeamSearchParams(2, 3),
                    concurrency_limit=1)
    assert llm.llm_engine.get_num_unfinished_requests() == 0


def test_unfinished_requests_count_samples_as_vllm_does(llm):
    """vLLM runs each of n samples as a request of its own: n > 1 counts n
    until each sample ends."""
    engine = llm.llm_engine
    engine.add_request("one", "Tom and Lily", SamplingParams(temperature=0, max_tokens=2))
    engine.add_request("three", "Tom and Lily", SamplingParams(n=3, top_k=1, max_tokens=3))
    counts = [engine.get_num_unfinished_requests()]
    while engine.has_unfinished_requests():
        engine.step()
        counts.append(engine.get_num_unfinished_requests())
    assert counts == [4, 4, 3, 0]


# ------------------------------------------------------------ prompt logprobs
def check_prompt_logprobs(model, tokenizer, ids, got, k):
    """vLLM's format: None for the first token, then per prompt token a dict
    with that token first (its tie-aware rank) and the top k ranked 1..k,
    the raw log-softmax of the logits of the position before it."""
    with torch.inference_mode():
        ref = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
    assert got[0] is None and len(got) == len(ids)
    for pos in range(1, len(ids)):
        position, row, token = got[pos], ref[pos - 1], ids[pos]
        top = torch.topk(row, k).indices.tolist() if k else []
        assert next(iter(position)) == token and set(position) == {token, *top}
        for t, entry in position.items():
            assert entry.logprob == pytest.approx(float(row[t]), abs=1e-4)
            assert entry.decoded_token == tokenizer.decode([t])
        if token not in top:
            assert position[token].rank == int((row >= row[token]).sum())
        for rank, t in enumerate(top, 1):
            assert position[t].rank == rank


@pytest.mark.parametrize("k", [0, 1, 5])
def test_prompt_logprobs_are_the_raw_log_softmax(llm, hf, k):
    model, tokenizer = hf
    for prompt in PROMPTS:
        out = gen(llm, prompt, max_tokens=2, prompt_logprobs=k)
        check_prompt_logprobs(model, tokenizer, out.prompt_token_ids, out.prompt_logprobs, k)
    assert gen(llm, PROMPTS[0], max_tokens=1).prompt_logprobs is None


def test_prompt_logprobs_through_chunks_the_prefix_cache_and_a_batch(hf):
    """A prompt computed in chunks, a prompt whose blocks are cached (vLLM
    reads no cache for such a request: every token is computed), and a
    batch mixing requests with and without: the same prompt logprobs."""
    model, tokenizer = hf
    llm = LLM("tiny", num_blocks=64, block_size=4, dtype="float32",
              enable_chunked_prefill=True, max_num_batched_tokens=8)
    prompt = "Once upon a time, there was a little girl named Lily. She liked to play"
    ids = tokenizer(prompt)["input_ids"]
    assert len(ids) > 8  # more than one chunk
    gen(llm, prompt, max_tokens=1)  # caches the prompt's blocks
    outs = llm.generate([prompt, "Tom and Lily", prompt],
                        [SamplingParams(temperature=0, max_tokens=3, prompt_logprobs=2),
                         SamplingParams(temperature=0, max_tokens=3),
                         SamplingParams(temperature=0, max_tokens=3, n=2, seed=1,
                                        prompt_logprobs=2)], use_tqdm=False)
    assert outs[0].num_cached_tokens == 0 and outs[1].prompt_logprobs is None
    for out in (outs[0], outs[2]):
        check_prompt_logprobs(model, tokenizer, ids, out.prompt_logprobs, 2)
    assert llm.llm_engine._prompt_logprob_groups == 0


def test_prompt_logprobs_survive_a_preemption(hf):
    """A request preempted by recomputation computes its prompt again: its
    prompt logprobs are recorded once, and stay right."""
    model, tokenizer = hf
    llm = LLM("tiny", num_blocks=14, block_size=4, dtype="float32")
    prompts = ["Once upon a time, there was a little girl", "Tom and Lily went to the park",
               "The little dog ran to the big tree"]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=20, ignore_eos=True,
                                                prompt_logprobs=1), use_tqdm=False)
    assert sum(o.num_preemptions for o in outs) > 0
    for out in outs:
        check_prompt_logprobs(model, tokenizer, out.prompt_token_ids, out.prompt_logprobs, 1)


def test_abort_takes_vllms_list_of_ids(llm):
    engine = llm.llm_engine
    for rid in ("x", "y"):
        engine.add_request(rid, "Tom and Lily", SamplingParams(max_tokens=5))
    assert engine.abort_request(["x", "y"]) is True
    assert engine.get_num_unfinished_requests() == 0
    assert engine.abort_request(["x"]) is False
    step = engine.step()  # pagedkit reports the aborted with the next step
    assert sorted(o.request_id for o in step) == ["x", "y"]
    assert {o.outputs[0].finish_reason for o in step} == {"abort"}


def test_vllms_none_defaults_are_taken(llm):
    """vLLM's SamplingParams takes max_tokens=None (up to the model's
    length) and stop_token_ids=None (none)."""
    params = SamplingParams(temperature=0, max_tokens=None, stop_token_ids=None, ignore_eos=True)
    assert params.stop_token_ids == []
    engine = LLMEngine("tiny", num_blocks=8, block_size=4)  # 32 tokens at most
    engine.add_request("long", [0, 87, 85], params)
    done = []
    while engine.has_unfinished_requests():
        done += engine.step().finished
    assert len(done[0].outputs[0].token_ids) == 32 - 3
    assert done[0].outputs[0].finish_reason == "length"


def test_a_byte_token_shows_the_character_it_completes(llm):
    """A token ending inside a multi-byte character shows "" alone, and the
    whole character once it completes it, with the tokens before it as
    context (vLLM's rule; checked beside vLLM in api_check's multibyte case)."""
    from pagedkit.engine.llm_engine import decode_token

    tokenizer = llm.get_tokenizer()
    e1, e2 = tokenizer("é", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode([e2]).endswith("\ufffd")
    assert decode_token(tokenizer, e1, []) == "" and decode_token(tokenizer, e2, [e1]) == "é"
    ni = tokenizer("日", add_special_tokens=False)["input_ids"]
    assert len(ni) == 3 and decode_token(tokenizer, ni[2], [5, *ni[:2]]) == "日"
    assert decode_token(tokenizer, ni[1], ni[:1]) == ""
    out = gen(llm, "Tom said café", max_tokens=1, prompt_logprobs=0)
    shown = "".join(p[t].decoded_token for p, t in
                    zip(out.prompt_logprobs[1:], out.prompt_token_ids[1:], strict=True))
    assert shown == "Tom said café"


def test_the_models_generation_config_sets_the_defaults():
    """vLLM's LLM samples with what the model's generation config sets when
    given no sampling parameters (the tiny model's sets none)."""
    model, tokenizer = load_tiny(torch.float32)
    assert LLM("tiny", num_blocks=16).get_default_sampling_params() == SamplingParams()
    model.generation_config.repetition_penalty = 1.3
    model.generation_config.max_new_tokens = 5
    model.generation_config.top_k = 7
    llm = LLM(model, tokenizer, num_blocks=16)
    assert llm.get_default_sampling_params() == SamplingParams(repetition_penalty=1.3,
                                                               max_tokens=5, top_k=7)
    out = llm.generate(["Tom and Lily"], use_tqdm=False)[0].outputs[0]
    assert len(out.token_ids) == 5 or out.finish_reason == "stop"


@pytest.mark.parametrize("name", sorted(VLLM_ONLY_OPTIONS))
def test_vllm_only_options_pass_at_no_op_values_and_are_refused_by_name(name):
    accepted, why = VLLM_ONLY_OPTIONS[name]
    for value in accepted:  # vLLM's default first: spelling it out changes nothing
        assert SamplingParams(**{name: value}) == SamplingParams()
    for value in _other_values(accepted):
        with pytest.raises(TypeError) as err:
            SamplingParams(**{name: value})
        message = str(err.value)
        assert f"{name}={value!r}" in message and why in message
        assert f"pagedkit takes {name}={shown(accepted[0])}" in message


def _other_values(accepted):
    """Values a user might pass that are not among `accepted`: a non-default
    of each kind a vLLM option takes (True for 1 and 1 for True included)."""
    candidates = [True, False, 1, 2, 0.5, "x", ["x"], [1, 2], {1: 2.0}, {"k": 1}]
    return [v for v in candidates if not any(
        type(v) is type(a) and v == a for a in accepted)
        and not (isinstance(v, int) and not isinstance(v, bool) and v in accepted)]


def test_a_name_neither_has_is_pythons_own_error():
    with pytest.raises(TypeError, match="unexpected keyword argument 'best_of'"):
        SamplingParams(best_of=2)
