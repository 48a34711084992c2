"""Rebuild the embedded "tiny" model from nothing: corpus -> tokenizer -> Llama -> weights.

    python -m pagedkit.models.train_tiny --out src/pagedkit/models/tiny

Everything is seeded (corpus, tokenizer, initial weights, batch order) and runs on one
CPU thread, so float reductions happen in a fixed order: the same command with the same
torch and transformers versions rebuilds the committed weights. The defaults cost about
nine CPU-minutes (docs/tiny_model.md has the measured run).

The architecture is chosen to exercise what a paged engine must handle, not to be good:
grouped-query attention (4 query heads share 2 KV heads), head_dim 64, RoPE, tied
embeddings, and a 2048-token position limit - the "max length" the contiguous baselines
of the paper reserve for every request.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from ..i18n.terminal import HelpFormatter
from .bpe import train_tokenizer
from .corpus import stories


def tiny_config(tokenizer: PreTrainedTokenizerFast) -> LlamaConfig:
    """The tiny model's shapes; the tokenizer fixes the vocabulary and special ids."""
    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=256, intermediate_size=768,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        max_position_embeddings=2048, rope_parameters={"rope_type": "default",
                                                       "rope_theta": 10000.0},
        rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)


def pack_rows(texts: list[str], tokenizer: PreTrainedTokenizerFast, seq_len: int) -> torch.Tensor:
    """Pack `BOS story EOS BOS story EOS ...` into rows of `seq_len` tokens.

    Each row starts at a story's BOS, like a prompt does at generation time, and runs
    on into the next stories, so the model also learns that a new story follows EOS.
    The story cut off at a row's end is not continued in the next row.
    """
    eos = tokenizer.eos_token_id
    rows: list[list[int]] = []
    row: list[int] = []
    for ids in tokenizer(texts)["input_ids"]:  # each starts with BOS
        row += [*ids, eos]
        if len(row) >= seq_len:
            rows.append(row[:seq_len])
            row = []
    return torch.tensor(rows, dtype=torch.long)


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warmup, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def mean_loss(model: LlamaForCausalLM, rows: torch.Tensor, batch: int) -> float:
    model.eval()
    losses = [model(input_ids=b, labels=b).loss.item() for b in rows.split(batch)]
    model.train()
    return sum(losses) / len(losses)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder to save the model into")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--train-stories", type=int, default=20_000)
    p.add_argument("--val-stories", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    started = time.time()

    train_text = stories(args.train_stories, seed=args.seed)
    val_text = stories(args.val_stories, seed=args.seed + 1)
    tokenizer = train_tokenizer(train_text)
    train_rows = pack_rows(train_text, tokenizer, args.seq_len)
    val_rows = pack_rows(val_text, tokenizer, args.seq_len)
    print(f"corpus: {len(train_text)} stories -> {train_rows.numel():,} train tokens "
          f"({len(train_rows)} rows), {val_rows.numel():,} val tokens; vocab {len(tokenizer)}")

    model = LlamaForCausalLM(tiny_config(tokenizer))
    print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    order = torch.Generator().manual_seed(args.seed)
    perm = torch.randperm(len(train_rows), generator=order)
    trained_first = train_rows[perm[:len(val_rows)]]  # the rows of the first steps
    warmup = max(1, args.steps // 20)
    log: list[dict] = []
    running = 0.0
    model.train()
    for step in range(args.steps):
        first = (step * args.batch) % len(train_rows)
        if first + args.batch > len(train_rows):  # a fresh shuffle for each epoch
            perm = torch.randperm(len(train_rows), generator=order)
            first = 0
        batch = train_rows[perm[first:first + args.batch]]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args.steps, args.lr, warmup)
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running += loss.item()
        if (step + 1) % 50 == 0 or step + 1 == args.steps:
            n = (step % 50) + 1
            entry = {"step": step + 1, "train_loss": round(running / n, 4),
                     "seconds": round(time.time() - started, 1)}
            running = 0.0
            if (step + 1) % 200 == 0 or step + 1 == args.steps:
                entry["val_loss"] = round(mean_loss(model, val_rows, args.batch), 4)
            log.append(entry)
            print(json.dumps(entry), flush=True)

    final_train = mean_loss(model, trained_first, args.batch)
    final_val = mean_loss(model, val_rows, args.batch)
    print(f"final: train loss {final_train:.4f}, val loss {final_val:.4f} "
          f"({time.time() - started:.0f} s)")

    args.out.mkdir(parents=True, exist_ok=True)
    model.eval()
    # fp16 on disk halves the package size; load_tiny casts to whatever dtype is asked for.
    model.to(torch.float16).save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                     pad_token_id=tokenizer.pad_token_id).save_pretrained(args.out)
    record = {"args": {k: str(v) for k, v in vars(args).items()},
              "versions": {"torch": torch.__version__,
                           "transformers": __import__("transformers").__version__},
              "final_train_loss": round(final_train, 4), "final_val_loss": round(final_val, 4),
              "log": log}
    (args.out / "train_log.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"saved to {args.out}")

    model.to(torch.float32)
    for prompt in ["Once upon a time", "Lily and Max went to the beach.", "One day, Ben"]:
        ids = tokenizer(prompt, return_tensors="pt")
        out = model.generate(**ids, max_new_tokens=60, do_sample=False)
        print(repr(tokenizer.decode(out[0], skip_special_tokens=True)))


if __name__ == "__main__":
    main()
