"""Lab 07's chain_hashes check writes a wrong answer's block names as people
read them (newcomer 8 finding 14): 32 raw bytes each printed as escapes
(``b'\\x1dHzz\\xbcx...'``) hid which name differed. A name is shown as
`BlockKey` shows it, its first 12 hex digits and "…", in both languages."""

import re

import pytest

import pagedkit
from pagedkit.exercises import lab07
from pagedkit.memory import ROOT_HASH, hash_block
from pagedkit.memory.block_hash import short_hash

from .wrong_answers import WRONG


def chain(tokens, bs):
    out, parent = [], ROOT_HASH
    for i in range(0, len(tokens) - len(tokens) % bs, bs):
        parent = hash_block(parent, tokens[i:i + bs])
        out.append(parent)
    return out


def hashes_as_hex_text(tokens, bs):
    return [h.hex() for h in chain(tokens, bs)]


def hashes_of_half_blocks_as_a_tuple(tokens, bs):
    """Wrong names (blocks of half the size), in a tuple: a tuple of the right
    ones passes (tests/labs/test_check_rules.py), a wrong one shows as a tuple."""
    return tuple(chain(tokens, max(1, bs // 2)))


SHORT = [*WRONG[("lab07", "chain_hashes")], hashes_of_half_blocks_as_a_tuple]
NAME = r"[0-9a-f]{12}…"


@pytest.mark.parametrize("language", ["en", "zh-CN"])
@pytest.mark.parametrize("wrong", [*SHORT, hashes_as_hex_text], ids=lambda f: f.__name__)
def test_a_wrong_answer_shows_names_by_their_first_hex_digits(wrong, language):
    pagedkit.set_language(language)
    try:
        message = lab07.check_chain_hashes(wrong).message
    finally:
        pagedkit.set_language("en")
    assert "\\x" not in message and "b'" not in message and 'b"' not in message, message
    expected = re.search(r"(?:expected|应为) (\[.*?\])", message).group(1)
    assert re.fullmatch(rf"\[(?:{NAME}(?:, {NAME})*)?\]", expected), expected
    if wrong in SHORT:  # the learner's names are shown alike
        got = re.search(r"(?:returned|返回了) ([\[(].*?[\])])[,，]", message).group(1)
        assert re.fullmatch(rf"\[(?:{NAME}(?:, {NAME})*)?\]|\({NAME}(?:,|(?:, {NAME})+)\)",
                            got), got
    assert len(message) < 400, message


def test_names_alike_in_short_are_written_in_full():
    """Names that agree in their first 12 hex digits (here cut to 16 bytes)
    would read as equal: the message writes both in full."""
    def names_cut_to_16_bytes(tokens, bs):
        return [h[:16] for h in chain(tokens, bs)]

    message = lab07.check_chain_hashes(names_cut_to_16_bytes).message
    got = names_cut_to_16_bytes([5, 9, 2, 7], 4)
    want = chain([5, 9, 2, 7], 4)
    assert [short_hash(h) for h in got] == [short_hash(h) for h in want]
    assert f"returned {got!r}, expected {want!r}." in message


def test_a_block_key_and_the_check_write_a_name_alike():
    from pagedkit.memory.block_hash import BlockKey

    key = BlockKey(None, [5, 9, 2, 7])
    assert key.hash == chain([5, 9, 2, 7], 4)[0]
    assert repr(key) == f"BlockKey({key.hash.hex()[:12]}…, token_ids=[5, 9, 2, 7])"
    assert short_hash(key.hash) == key.hash.hex()[:12] + "…"
