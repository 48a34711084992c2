"""Small random-weight models of several architectures, and transformers' own
greedy outputs for them: the ground truth the engine must match token for token."""

import pytest
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

VOCAB = 96


def build(arch: str, seed: int = 0):
    torch.manual_seed(seed)
    if arch == "llama":
        config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=256)
        model = LlamaForCausalLM(config)
    elif arch == "qwen2":
        config = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                             max_position_embeddings=256)
        model = Qwen2ForCausalLM(config)
    elif arch == "gpt2":
        config = GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=256)
        model = GPT2LMHeadModel(config)
    else:
        raise ValueError(arch)
    return model.eval()


def prompts(seed: int = 1, lengths=(1, 5, 16, 17, 31, 40)):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in lengths]


def hf_greedy(model, prompt_list, max_new_tokens):
    """transformers' generate, one prompt at a time (no padding)."""
    outs = []
    with torch.inference_mode():
        for p in prompt_list:
            ids = model.generate(torch.tensor([p]), max_new_tokens=max_new_tokens, do_sample=False,
                                 eos_token_id=None, pad_token_id=0, attention_mask=torch.ones(
                                     1, len(p), dtype=torch.long))
            outs.append(ids[0, len(p):].tolist())
    return outs


@pytest.fixture(scope="session")
def reference():
    """(arch) -> (fresh model factory, prompts, transformers' greedy outputs)."""
    cache = {}

    def get(arch, max_new_tokens=12):
        key = (arch, max_new_tokens)
        if key not in cache:
            ps = prompts()
            cache[key] = (ps, hf_greedy(build(arch), ps, max_new_tokens))
        return (lambda: build(arch), *cache[key])

    return get


@pytest.fixture
def make_prompts():
    return prompts


@pytest.fixture
def transformers_greedy():
    return hf_greedy
