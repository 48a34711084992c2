"""The tiny model's tokenizer: a byte-level BPE trained on the story corpus.

Byte-level means the base alphabet is the 256 bytes, so *any* text - emoji, accents,
code - tokenizes and decodes back exactly; the merges learned from the corpus only make
common story words short. The result is wrapped as a transformers
`PreTrainedTokenizerFast`, so the engine treats it like any hub tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterable

from transformers import PreTrainedTokenizerFast

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL_TOKENS = [BOS, EOS, PAD]  # ids 0, 1, 2
#: The tiny model's chat template (`LLM.chat`): the model was trained on stories, not
#: chats, so this is the plainest format: BOS, then one "role: content" line per
#: message, then "assistant:" for the reply. It teaches the mechanics of chat
#: templates; the tiny model's replies are stories whatever is asked.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}")


def train_tokenizer(texts: Iterable[str], vocab_size: int = 1024) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE of `vocab_size` tokens (specials and 256 bytes included).

    Encoding prepends BOS, as Llama tokenizers do, so a prompt starts the way every
    training story started; EOS is what the model emits when a story ends.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be >= {256 + len(SPECIAL_TOKENS)} "
                         f"(256 bytes + specials), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS,
                                   pad_token=PAD, clean_up_tokenization_spaces=False,
                                   model_max_length=2048, chat_template=CHAT_TEMPLATE)
