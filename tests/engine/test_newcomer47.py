"""Newcomer 47's findings (issue #26): what a weight edit after `LLM(...)` does,
as docs/api.md ("Prepacked linear layers") now says it."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from pagedkit import LLM
from pagedkit.model import accel

pytestmark = pytest.mark.skipif(accel.prepack_unavailable() is not None,
                                reason=f"no prepacked linears here: {accel.prepack_unavailable()}")


def wide_llama():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=512, intermediate_size=512,
                         num_hidden_layers=1, num_attention_heads=8, num_key_value_heads=2,
                         max_position_embeddings=128, tie_word_embeddings=False)
    return LlamaForCausalLM(config).eval()


def plain_logits(model, ids):
    """The logits of a fresh, unpacked model with `model`'s weights."""
    clone = LlamaForCausalLM(model.config).eval()
    clone.load_state_dict(model.state_dict())
    with torch.no_grad():
        return clone(ids).logits


@pytest.mark.parametrize("layer", ["model.layers.0.self_attn.k_proj",  # in the q/k/v product
                                   "model.layers.0.mlp.down_proj"])      # packed alone
@pytest.mark.parametrize("how", ["no_grad", "data"])
def test_a_weight_written_after_llm_is_seen_as_the_docs_say(layer, how):
    """Written under no_grad, the next call packs again; written through
    `.data` (which torch does not count) it is not seen until
    `prepack_linears(model)` packs again: the documented way out."""
    model = wide_llama()
    LLM(model, num_blocks=8, block_size=8)
    weight = model.get_submodule(layer).weight
    ids = torch.tensor([[1, 5, 9, 22]])
    if how == "no_grad":
        with torch.no_grad():
            weight.mul_(-1)
    else:
        weight.data.mul_(-1)
    with torch.no_grad():
        seen = model(ids).logits
    want = plain_logits(model, ids)
    assert torch.allclose(seen, want, atol=1e-4) == (how == "no_grad")
    accel.prepack_linears(model)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, want, atol=1e-4, rtol=1e-4)
