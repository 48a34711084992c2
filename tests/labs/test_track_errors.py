"""Every answer the engine refuses (each ``raise TrackError`` in track.py) ends
`lockstep` with a verdict naming the piece, in every language pagedkit speaks
(newcomer19 #1: the Chinese message has a full-width colon, and lockstep used
to recover the message by splitting the text on ASCII ": " -> IndexError).

The sites are read from track.py's source, so a new one is tested too. Each
site's own message (its `_()` texts, translated) is raised from the piece it
names, at the first call the engine makes to that piece; two real wrong pieces
(newcomer19's repros) reach their own sites."""

import ast
import inspect

import pytest

from pagedkit import SamplingParams
from pagedkit.exercises import track
from pagedkit.i18n import LANGUAGES, _, speaking

PROMPTS = [[5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 11], [20, 21, 22]]
PARAMS = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
#: top_p_filter is asked only for rows that sample under a top-p cut.
SAMPLED = SamplingParams(temperature=1.0, top_p=0.9, seed=3, max_tokens=4, ignore_eos=True)
#: Prefix caching on (chain_hashes is asked), blocks of 4 (prompts end mid-block:
#: copy_on_write is asked at each decode), a pool small enough to fill.
ENGINE = {"num_blocks": 8, "block_size": 4, "enable_prefix_caching": True}


def _texts(node: ast.AST) -> list[str]:
    """The message's own texts: each ``_("...")`` (translated when raised; of an
    ``ngettext``, its singular), else
    an f-string's literal parts."""
    said = [call.args[0].value for call in ast.walk(node)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id in ("_", "ngettext") and call.args
            and isinstance(call.args[0], ast.Constant)]
    if said:
        return said
    return [part.value for f in ast.walk(node) if isinstance(f, ast.JoinedStr)
            for part in f.values if isinstance(part, ast.Constant)]


def raise_sites() -> list[tuple[int, str, list[str]]]:
    """(line, piece, message texts) for every ``raise TrackError(piece, message)``
    in track.py. A site whose piece is a parameter of its function stands for
    each piece a caller passes that function."""
    tree = ast.parse(inspect.getsource(track))
    functions = {f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
    callers: dict[str, set[str]] = {}
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.args \
                and isinstance(call.args[0], ast.Constant):
            callers.setdefault(call.func.id, set()).add(call.args[0].value)
    sites = []
    for function in functions.values():
        for node in ast.walk(function):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
                    and isinstance(node.exc.func, ast.Name) and node.exc.func.id == "TrackError"):
                continue
            piece, message = node.exc.args
            if isinstance(piece, ast.Constant):
                pieces = [piece.value]
            else:
                assert isinstance(piece, ast.Name) and piece.id == function.args.args[0].arg, \
                    f"line {node.lineno}: the piece is not its function's first argument"
                pieces = sorted(callers.get(function.name, ()))
                assert pieces, f"line {node.lineno}: no caller of {function.name} names a piece"
            texts = _texts(message)
            assert texts, f"line {node.lineno}: no message text found"
            sites += [(node.lineno, p, texts) for p in pieces]
    return sorted(sites)


SITES = raise_sites()


def test_the_sites_cover_every_piece():
    assert {piece for _line, piece, _texts in SITES} == set(track.PIECES)
    assert len({line for line, _piece, _texts in SITES}) >= 32   # newcomer19 counted 32


def test_every_refusal_speaks_the_learners_language():
    """Each message goes through ``_()``: an f-string prints English in the zh edition
    (the two top_p_filter refusals did)."""
    tree = ast.parse(inspect.getsource(track))
    english = [node.lineno for node in ast.walk(tree)
               if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
               and isinstance(node.exc.func, ast.Name) and node.exc.func.id == "TrackError"
               and not any(isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                           and call.func.id in ("_", "ngettext")
                           for call in ast.walk(node.exc.args[1]))]
    assert english == []


def _refusing(piece: str, message: str):
    def fn(*args):
        raise track.TrackError(piece, message)
    return fn


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("line, piece, texts", SITES,
                         ids=[f"line{line}-{piece}" for line, piece, _t in SITES])
def test_every_refusal_reaches_a_verdict_naming_the_piece(language, line, piece, texts):
    params = SAMPLED if piece == "top_p_filter" else PARAMS
    with speaking(language):
        message = " ".join(_(text) for text in texts)
        run = track.lockstep(track.Pieces(**{piece: _refusing(piece, message)}),
                             [(p, params) for p in PROMPTS], **ENGINE)
        verdict = repr(run)
        named = _("your {piece} (lab {lab})").format(piece=piece, lab=track._LAB[piece])
    assert run.divergence is not None, f"line {line}: the refusal was never reached"
    assert run.divergence.pieces == [piece] and run.divergence.what == message
    assert message in verdict and named in verdict


def never_preempts(running, free_blocks):
    return []


def takes_from_the_back(block_table, num_tokens, num_new_tokens, block_size, free_blocks):
    """Not atomic: a table that does not fit is left half-grown."""
    out = []
    for p in range(num_tokens, num_tokens + num_new_tokens):
        if p // block_size >= len(block_table):
            if not free_blocks:
                return None
            block_table.append(free_blocks.pop())
        out.append(block_table[p // block_size] * block_size + p % block_size)
    return out


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("piece, wrong", [("append_slots", takes_from_the_back),
                                          ("choose_victims", never_preempts)])
def test_newcomer19s_wrong_pieces_get_a_verdict(language, piece, wrong):
    with speaking(language):
        run = track.lockstep(track.Pieces(**{piece: wrong}), track.bench_requests(),
                             **track.SCENARIOS["recompute"])
        verdict = repr(run)
        named = _("your {piece} (lab {lab})").format(piece=piece, lab=track._LAB[piece])
    assert run.divergence is not None and run.divergence.pieces == [piece]
    assert run.divergence.what in verdict and named in verdict
