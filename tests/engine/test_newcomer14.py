"""Newcomer 14's findings on the engine and the memory API (the n > 1
stream's ends are in test_n_stream_ends.py)."""

import re

import pytest

from pagedkit import LLMEngine, SamplingParams

BLOCK = 4


# finding 8: a prompt the cache (or max_model_len) cannot take says what it needs
# first: its tokens plus one generated, against the limit
@pytest.mark.parametrize("limit", ["cache", "max_model_len"])
@pytest.mark.parametrize("extra", [-2, -1, 0, 1])  # the prompt's length against the limit
def test_a_prompt_at_the_limit_is_refused_with_what_it_needs_first(reference, limit, extra):
    build, _, _ = reference("llama")
    kw = ({"num_blocks": 8} if limit == "cache" else {"num_blocks": 64, "max_model_len": 16})
    engine = LLMEngine(build(), block_size=BLOCK, enable_chunked_prefill=True, **kw)
    most = 32 if limit == "cache" else 16  # slots in the cache, or positions
    n = most + extra
    if n + 1 <= most:
        engine.add_request("r", {"prompt_token_ids": [5] * n}, SamplingParams(max_tokens=1))
        return
    with pytest.raises(ValueError) as refused:
        engine.add_request("r", {"prompt_token_ids": [5] * n}, SamplingParams(max_tokens=1))
    said = str(refused.value)
    what = "slots" if limit == "cache" else "positions"
    room = ("the whole KV cache holds 32 (num_blocks=8 x block_size=4)" if limit == "cache"
            else "max_model_len is 16")
    assert said.startswith(f"request 'r': the prompt has {n} tokens, so the request needs "
                           f"{n + 1} {what} ({n} of the prompt + 1 generated), but {room}"), said
    shorter = int(re.search(r"shorten the prompt to (\d+) tokens", said)[1])
    engine.add_request("short", {"prompt_token_ids": [5] * shorter}, SamplingParams(max_tokens=1))
    if limit == "cache":  # the advised cache takes it
        blocks = int(re.search(r"num_blocks=(\d+) or more", said)[1])
        LLMEngine(build(), block_size=BLOCK, num_blocks=blocks, enable_chunked_prefill=True
                  ).add_request("r", {"prompt_token_ids": [5] * n}, SamplingParams(max_tokens=1))


# finding 9: ids that are not a list of ints get advice true for their kind; a
# str or bytes is never advised into list(...), which would refuse or misread it
def _kinds():
    import numpy as np
    import torch
    return {"str": "abc", "bytes": b"abc", "bytearray": bytearray(b"abc"), "int": 5,
            "numpy int": np.int64(5), "numpy array": np.array([1, 2, 3]),
            "tensor": torch.tensor([1, 2, 3]), "0-d numpy array": np.array(5),
            "0-d tensor": torch.tensor(5), "generator": (t for t in [1, 2, 3]),
            "iterator": iter([1, 2, 3]), "set": {1, 2}, "dict": {1: 2}, "None": None,
            "float": 1.5}


ADVICE = {  # kind -> what its advice says, and what following it gives (None: no list)
    "str": ("a string is text: tokenize it first", None),
    "bytes": ("bytes are not token ids: decode them to text and tokenize it", None),
    "bytearray": ("bytes are not token ids: decode them to text and tokenize it", None),
    "int": ("one token is a list of one: [5]", lambda x: [x]),
    "numpy int": ("one token is a list of one: [5]", lambda x: [x]),
    "numpy array": ("a tensor or array: give ids.tolist()", lambda x: x.tolist()),
    "tensor": ("a tensor or array: give ids.tolist()", lambda x: x.tolist()),
    # review 41: a 0-d one's .tolist() is an int, refused again
    "0-d numpy array": ("a 0-d tensor or array holds one token: give [ids.item()]",
                        lambda x: [x.item()]),
    "0-d tensor": ("a 0-d tensor or array holds one token: give [ids.item()]",
                   lambda x: [x.item()]),
    "generator": ("an iterator: give list(...) of it", list),
    "iterator": ("an iterator: give list(...) of it", list),
    "set": ("", None), "dict": ("", None), "None": ("", None), "float": ("", None),
}


def _check_memory_api(ids):
    from pagedkit.memory import KVCacheManager
    kv = KVCacheManager(num_blocks=4, block_size=BLOCK)
    kv.allocate_slots("s", ids)
    return kv


def _check_engine(ids):
    from pagedkit._validation import check_prompt
    return check_prompt({"prompt_token_ids": ids})


@pytest.mark.parametrize("path", [_check_memory_api, _check_engine], ids=["memory", "engine"])
@pytest.mark.parametrize("kind", sorted(ADVICE))
def test_advice_for_ids_that_are_not_a_list_is_true_for_their_kind(kind, path):
    value = _kinds()[kind]
    with pytest.raises(TypeError) as refused:
        path(value)
    said, (advice, follow) = str(refused.value), ADVICE[kind]
    typename = type(value).__name__
    if advice:
        assert said.endswith(f"({typename}); {advice}") or f"({typename}); {advice} " in said, said
    else:
        assert said.endswith(f"({typename})"), said
    assert ("list(...)" in said) == (follow is list), said
    if follow is not None:  # following the advice serves the ids meant
        path(follow(_kinds()[kind]))


# finding 5: docs/architecture.md's complexity figures, measured as it says
def _complexities():
    """(complexity, function name) of every function of the engine's core, by ruff."""
    import json
    import shutil
    import subprocess
    import sys
    from pathlib import Path
    ruff = Path(sys.executable).with_name("ruff")
    ruff = str(ruff) if ruff.exists() else shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    src = Path(__file__).resolve().parents[2] / "src" / "pagedkit"
    paths = [src / d for d in ("memory", "scheduler", "engine", "kernels")] + [src / "ops.py"]
    run = subprocess.run([ruff, "check", "--isolated", "--select", "C901", "--config",
                          "lint.mccabe.max-complexity=1", "--output-format", "json",
                          *map(str, paths)], capture_output=True, text=True, check=False)
    found = json.loads(run.stdout)
    assert found, run.stderr
    return [(int(re.search(r"\((\d+) > 1\)", f["message"])[1]),
             re.search(r"`([^`]+)`", f["message"])[1]) for f in found]


def test_the_architecture_docs_complexity_figures_are_ruffs():
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    text = " ".join(doc.split())
    said = re.search(r"complexity over (\d+) \(ruff's C901\)\. At (\d+): ([^;]+); at (\d+): "
                     r"([^;]+); every other is at (\d+) or less", text)
    assert said, "the complexity sentence moved: update this test"
    cap, top, top_names, second, second_names, rest = said.groups()
    measured = _complexities()

    def names(figure):  # as ruff names them: a method without its class
        return sorted(name for c, name in measured if c == figure)

    def listed(text):
        return sorted(n.strip(" `").split(".")[-1] for n in text.split(","))

    assert max(c for c, _ in measured) == int(top) <= int(cap)
    assert listed(top_names) == names(int(top))
    assert listed(second_names) == names(int(second))
    assert all(c <= int(rest) for c, _ in measured if c < int(second))
    assert int(second) == int(top) - 1 and int(rest) == int(second) - 1
