"""The build track: the learner's own pieces serve pagedkit's engine.

Across labs 03-08 the learner writes the pieces of a serving engine. This
module plugs them into a real `LLM` *in place of pagedkit's own* — the same
objects and calls the engine makes, no second engine — and runs the engine
beside an untouched one, step by step, so that a wrong piece is caught at
the first step whose state differs, by name.

The seams (what pagedkit's engine asks, and which of your functions answers):

==========================  ==================================  ==============================
your function (lab)         answers the engine's question       pagedkit's own piece it replaces
==========================  ==================================  ==============================
``append_slots`` (03)       which free blocks a sequence's      `BlockTable.append` taking the
                            new tokens go to                    free queue's head
``paged_decode_attention``  one sequence's decode attention     the ``paged_decode_attention``
(04)                        over its block table                op (`ops.use_decode_attention`)
``admit`` (05)              which waiting requests a step       `Scheduler._schedule_waiting`
                            admits, and how many tokens each
``choose_victims`` (06)     whom to preempt when memory is      `Scheduler._schedule_running`'s
                            short                               `policy.make_room`
``copy_on_write`` (07)      the block a sequence writes its     `BlockAllocator.copy_on_write`
                            last, shared block's copy to
``chain_hashes`` (07)       the prefix-cache names a new        the names
                            prompt is looked up by              `KVCacheManager.cached_prefix`
                                                                computes
``top_p_filter`` (08)       which tokens a sampled row keeps    the top-p cut of
                            under its top-p cut                 `model.sampler.filter_logits`
==========================  ==================================  ==============================

Each answer is *carried out* by pagedkit's own bookkeeping: the blocks your
``append_slots`` picks are the ones the pool hands out, the requests your
``admit`` lists are the ones admitted, your victims are the ones preempted.
An answer the engine cannot carry out (a block that is not free, a request
that does not fit) stops the run there, with the piece named (`TrackError`).

`plug_in(llm, pieces)` plugs the pieces into one engine (`unplug` takes them
out): even there, alone, no wrong answer serves a token — every call of your
attention and every top-p cut is held to pagedkit's own on the same inputs,
and every other answer is carried out by pagedkit's own bookkeeping once
checked; `lockstep(pieces, requests, ...)` runs a plugged-in engine and a plain
one on the same requests and compares, after every step, what each
scheduled, admitted and preempted, every block table, the free queue, the
prefix-cache names, the logits and the sampled tokens — and stops at the
first difference, saying which piece and what differed.

Where a lab's model of the engine is simpler than the engine, pagedkit
decides and says so here: ``admit`` decides for the head of the waiting
queue whose requests each hold one sequence never run, whose prefix-cache
hits are all in use (lab 05's model: one seat, ``ceil(tokens / block_size)``
blocks for the tokens to compute), and pagedkit for the rest of the queue
once all of those are in; ``choose_victims`` sees each running
request's need under the whole step budget; ``append_slots`` answers appends
that write no shared block (a shared one is ``copy_on_write``'s, or
pagedkit's when that is not plugged in). The plain engine beside holds the
learner's engine to pagedkit's answer either way.
"""

from __future__ import annotations
import __future__

import ast
import contextlib
import copy
import dataclasses
import dis
import inspect
import math
import os
import re
import textwrap
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import ops
from ..i18n import N_, _, join_names, ngettext
from ..vllm.compare import vllm_missing  # lab 08 asks it (track.vllm_missing)
from . import SET_FOR_LIST, SIGNATURES, CheckResult

__all__ = ["PIECES", "SCENARIOS", "BrokenEngineError", "Divergence", "LockstepRun", "Pieces",
           "TrackError",
           "bench_requests", "load", "lockstep", "pair_requests", "pieces_path", "plug_in",
           "plugged", "sampled_requests", "save",
           "transformers_tokens", "unplug", "vllm_missing", "vllm_tokens"]

#: The pieces a learner can plug in, in the order a step uses them.
PIECES = ("admit", "choose_victims", "chain_hashes", "append_slots", "copy_on_write",
          "paged_decode_attention", "top_p_filter")

#: Each piece's parameters as its lab writes them (`exercises.SIGNATURES`): the
#: engine calls a piece with this many arguments, by position.
PARAMETERS = {name: SIGNATURES[name] for name in PIECES}

_LAB = {"append_slots": "03", "paged_decode_attention": "04", "admit": "05",
        "choose_victims": "06", "copy_on_write": "07", "chain_hashes": "07",
        "top_p_filter": "08"}


class TrackError(RuntimeError):
    """A plugged-in piece gave an answer the engine cannot carry out.

    The piece and the message travel as data (``.piece``, ``.message``): a
    verdict is built from them, never by parsing the translated text."""

    def __init__(self, piece: str, message: str) -> None:
        super().__init__(_("your {piece} (lab {LAB}): {message}")
                           .format(piece=piece, LAB=_LAB[piece], message=message))
        self.piece = piece
        self.message = message


@dataclass
class Pieces:
    """The learner's functions, any of them ``None`` (pagedkit's own piece runs)."""

    append_slots: Callable | None = None
    paged_decode_attention: Callable | None = None
    admit: Callable | None = None
    choose_victims: Callable | None = None
    copy_on_write: Callable | None = None
    chain_hashes: Callable | None = None
    top_p_filter: Callable | None = None

    def plugged(self) -> list[str]:
        return [name for name in PIECES if getattr(self, name) is not None]

    @classmethod
    def from_namespace(cls, namespace: dict[str, Any]) -> Pieces:
        """The pieces a notebook (or a solutions module's ``vars()``) defines."""
        return cls(**{name: namespace.get(name) for name in PIECES
                      if callable(namespace.get(name))})


# ------------------------------------------------------------------ plugging in
@dataclass
class _Plug:
    """What one engine has plugged in, and what its pieces did this step."""

    pieces: Pieces
    acted: dict[Any, list[str]] = field(default_factory=dict)  # seq or request -> pieces
    took: dict[Any, dict[int, str]] = field(default_factory=dict)  # seq -> block -> piece

    def note(self, who: Any, piece: str) -> None:
        pieces = self.acted.setdefault(who, [])
        if piece not in pieces:
            pieces.append(piece)


_OVERRIDDEN = {"kv": ("allocate_slots", "cached_prefix"),
               "scheduler": ("_schedule_waiting", "_schedule_running"),
               "engine": ("step", "add_request", "add_requests", "abort_request")}


def plug_in(llm: Any, pieces: Pieces) -> Any:
    """Let `pieces` answer `llm`'s questions (see the table above); returns `llm`.

    The functions are set on this engine's own objects (its KV-cache manager,
    scheduler and step), so another engine in the same process keeps
    pagedkit's pieces."""
    _need_pieces("plug_in", pieces)
    for name in pieces.plugged():
        if not callable(getattr(pieces, name)):
            raise TypeError(f"{name} must be a function, got {getattr(pieces, name)!r}")
    unplug(llm)
    engine = llm.llm_engine
    if engine.__dict__.get("_track_broken"):
        raise BrokenEngineError(engine.__dict__["_track_broken"])
    plug = _Plug(pieces)
    engine._track = plug
    kv, scheduler = engine.kv, engine.scheduler
    if pieces.append_slots or pieces.copy_on_write:
        kv.allocate_slots = _allocate_slots(kv, plug, type(kv).allocate_slots.__get__(kv))
    if pieces.chain_hashes:
        kv.cached_prefix = _cached_prefix(kv, plug, type(kv).cached_prefix.__get__(kv))
    if pieces.admit:
        scheduler._schedule_waiting = _schedule_waiting(scheduler, plug)
    if pieces.choose_victims:
        scheduler._schedule_running = _schedule_running(scheduler, plug)
    step = type(engine).step.__get__(engine)
    attention = None
    probed = [False]  # the large-score probe, once a step
    if pieces.paged_decode_attention:
        def attention(query, k_cache, v_cache, block_table, context_len):
            # yours gets its own query and table: one it changes in place (lab 04's
            # check and the engine accept that) leaves pagedkit's answer as it was
            args = (query, k_cache, v_cache, block_table, context_len)
            out = _call("paged_decode_attention", pieces.paged_decode_attention, query.clone(),
                        k_cache, v_cache, block_table.clone(), context_len)
            _hold_attention(out, *args)  # every call: a wrong one never serves a token
            if not probed[0]:
                probed[0] = True
                _probe_large_scores(pieces.paged_decode_attention, *args)
            return out

    def plugged_step(**how):  # how: step's own keywords (LLM.generate's outputs=False)
        probed[0] = False
        try:
            with (ops.use_decode_attention(attention) if attention else
                  contextlib.nullcontext()), _yours_filter(pieces.top_p_filter):
                return step(**how)
        except BaseException as err:  # a step stopped part-way (an error, or the notebook's
            _break(engine, _broken_text(engine, err))  # stop button): not a step's state
            raise
    engine.step = plugged_step
    return llm


def _need_pieces(who: str, pieces: Any) -> None:
    """Refuse anything but a `Pieces` (a bare function, a dict), saying what to pass."""
    if isinstance(pieces, Pieces):
        return
    name = getattr(pieces, "__name__", "")
    example = (f"track.Pieces({name}={name})" if name in PIECES
               else "track.Pieces(append_slots=append_slots)")
    raise TypeError(_("{who} needs a Pieces, got {got}: pass track.load() (the pieces you "
                      "saved), or {example} for a function of this notebook")
                    .format(who=who, got=_short(pieces), example=example))


# ------------------------------------------------------------------- lab 08
@contextlib.contextmanager
def _yours_filter(fn: Callable | None) -> Iterator[None]:
    """For one step, the sampler's top-p cut is `fn`'s (`top_p_filter(logits,
    top_p)`, lab 08): pagedkit's `filter_logits` still applies temperature,
    min-p and top-k, then hands the row to `fn` and holds its answer to its
    own (the same tokens kept, the kept logits unchanged, the row it was given
    left as it was); once a step `fn` is also asked the lab's tie, where the
    mass before a token reaches top_p exactly. Patched in `pagedkit.model.
    sampler` for the step only (as `ops.use_decode_attention` is)."""
    if fn is None:
        yield
        return
    from ..model import sampler

    pagedkit_filter = sampler.filter_logits
    probed = [False]

    def filter_logits(logits, params):
        want = pagedkit_filter(logits, params)
        if params.top_p >= 1.0:
            return want
        if not probed[0]:
            probed[0] = True
            _ask_top_p(fn, _TIE_ROW, _TIE_TOP_P, pagedkit_filter, _(
                "the lab's tie (the mass before the third token is exactly top_p)"))
        before = pagedkit_filter(logits, dataclasses.replace(params, top_p=1.0))
        return _ask_top_p(fn, before, params.top_p, pagedkit_filter,
                          _("a row the engine samples"))

    sampler.filter_logits = filter_logits
    try:
        yield
    finally:
        sampler.filter_logits = pagedkit_filter


_TIE_ROW = [math.log(2), math.log(8), 0.0, math.log(4), 0.0]
_TIE_TOP_P = 0.75


def _ask_top_p(fn: Callable, row, top_p: float, pagedkit_filter: Callable, what: str):
    """`fn`'s top-p cut of `row` at `top_p`, held to pagedkit's."""
    from ..sampling_params import SamplingParams
    from .lab08 import _top_p_mistake

    row = torch.as_tensor(row, dtype=torch.float32)
    given, kept = row.clone(), row.clone()
    want = pagedkit_filter(row, SamplingParams(temperature=1.0, top_p=top_p))
    got = _call("top_p_filter", fn, given, top_p)
    if not torch.equal(given, kept):
        raise TrackError("top_p_filter", _(
            "changed the logits it was given ({what}): return a new tensor (clone first)"
        ).format(what=what))
    dropped = torch.isinf(want)
    if not isinstance(got, torch.Tensor) or got.dtype != want.dtype or got.shape != want.shape \
            or not torch.equal(torch.isinf(got) & (got < 0), dropped) \
            or not torch.allclose(got[~dropped], want[~dropped]):
        def ids(x):
            return torch.nonzero(~(torch.isinf(x) & (x < 0))).flatten().tolist()
        hint = _top_p_mistake(got, row, top_p, want)  # lab 08's check names the mistake
        if hint:
            raise TrackError("top_p_filter", _(
                "at top_p={top_p:g} on {what} ({n} logits): {hint}").format(
                    top_p=top_p, what=what, n=row.numel(), hint=hint))
        raise TrackError("top_p_filter", _(
            "at top_p={top_p:g} on {what} ({n} logits) kept {got}; pagedkit keeps {want} with "
            "their logits unchanged").format(top_p=top_p, what=what, n=row.numel(),
                                             got=_short(ids(got)), want=_short(ids(want))))
    return got


def _hold_attention(out, query, k_cache, v_cache, block_table, context_len) -> None:
    """Hold one call's answer to pagedkit's attention on the same inputs (as
    lab 04c's `serve` holds each kernel call): the first wrong call stops the
    engine, naming the piece, before its output reaches a token."""
    from ..kernels import reference

    n = int(context_len)
    if not isinstance(out, torch.Tensor) or out.shape != query.shape:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise TrackError("paged_decode_attention", _(
            "returned {got} for a sequence of {n} tokens; expected a tensor of shape {shape} "
            "(num_q_heads, head_dim)").format(got=got, n=n, shape=tuple(query.shape)))
    want = reference.paged_decode_attention(
        query[None], k_cache, v_cache, block_table[None],
        torch.tensor([n], dtype=torch.int32))[0].double()
    if not torch.isfinite(out).all():
        raise TrackError("paged_decode_attention", _(
            "returned inf or NaN for a sequence of {n} tokens where pagedkit's attention is "
            "finite").format(n=n))
    if not torch.allclose(out.double(), want, rtol=1e-3, atol=1e-3):
        diff = (out.double() - want).abs().max().item()
        raise TrackError("paged_decode_attention", _(
            "for a sequence of {n} tokens returned values off by up to {diff:.3g} from "
            "pagedkit's attention (every call is held to it). Check which KV head each query "
            "head reads (h // group: repeat_interleave, not repeat), the scale "
            "(1/sqrt(head_dim)) and the keys read (the context's first {n} tokens, through "
            "the block table); lab04.check_paged_decode_attention names the case").format(
                n=n, diff=diff))


#: The large-score probe scales a real query by this: the scores reach the
#: hundreds, where exp() overflows float32 unless the maximum is subtracted.
LARGE_SCORES = 64.0


def _probe_large_scores(fn: Callable, query, k_cache, v_cache, block_table, context_len) -> None:
    """The engine's own call again with the query scaled by `LARGE_SCORES`,
    held to pagedkit's attention: the tiny model's scores are small, so a
    softmax that overflows on large ones would otherwise serve it unnoticed
    (as `lab04.check_paged_decode_attention`'s large-score cases)."""
    from ..kernels import reference

    big = query * LARGE_SCORES
    got = _call("paged_decode_attention", fn, big.clone(), k_cache, v_cache, block_table.clone(),
                context_len)
    want = reference.paged_decode_attention(
        big[None], k_cache, v_cache, block_table[None],
        torch.tensor([int(context_len)], dtype=torch.int32))[0]
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return  # the engine's own call already names a result of the wrong shape
    if not torch.isfinite(got).all() or not torch.allclose(got.float(), want.float(),
                                                           rtol=1e-3, atol=1e-3):
        if not torch.isfinite(got).all():     # only an overflow makes inf or NaN of these
            raise TrackError("paged_decode_attention", _(
                "with the query scaled by {scale:g} (scores in the hundreds, over a context of "
                "{n} tokens) returned inf or NaN where pagedkit's attention is finite: "
                "exp(score) overflows float32 past ~88 unless the largest score is subtracted "
                "first (or use torch.softmax)").format(scale=LARGE_SCORES, n=int(context_len)))
        diff = (got.float() - want.float()).abs().max().item()
        raise TrackError("paged_decode_attention", _(
            "with the query scaled by {scale:g} (scores in the hundreds, over a context of "
            "{n} tokens) returned values off by up to {diff:.3g} from pagedkit's attention, "
            "all finite, so not an overflow: most likely the unscaled call is off too. Check "
            "which KV head each query head reads (h // group: repeat_interleave, not repeat), "
            "the scale (1/sqrt(head_dim)) and the keys read (the context's first {n} tokens); "
            "lab04.check_paged_decode_attention names the case").format(
                scale=LARGE_SCORES, n=int(context_len), diff=diff))


def _broken_text(engine: Any, err: BaseException) -> str:
    where = (_("your {piece} (lab {lab})").format(piece=err.piece, lab=_LAB[err.piece])
             if isinstance(err, TrackError) else f"{type(err).__name__} ({err})")
    return _("this engine stopped part-way through a step, in {where}: some of its requests "
             "may be neither running nor waiting and its block tables as the piece left them, "
             "not as a step leaves them, so it serves nothing more. Fix the piece, then make a "
             "new engine (LLM(...)) to plug it into").format(where=where)


class BrokenEngineError(RuntimeError):
    """An engine a plugged-in piece stopped part-way through a step."""


def _refuse(text: str) -> Callable:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise BrokenEngineError(text)
    return refused


def _break(engine: Any, text: str) -> None:
    """From now on `engine` refuses every step and request (`BrokenEngineError`);
    aborting does nothing (`LLM.generate` aborts its requests when a step
    raises: on this state that would be one more half-done change)."""
    engine.__dict__["_track_broken"] = text
    for name in _REFUSED:
        setattr(engine, name, _refuse(text))
    engine.abort_request = lambda *args, **kwargs: 0


def unplug(llm: Any) -> None:
    """Give `llm` pagedkit's own pieces back — or, if a plugged-in piece stopped
    a step part-way (`plug_in`), leave it refusing every step and request with
    `BrokenEngineError`, which says why: never a run on half a step's state."""
    engine = llm.llm_engine
    for owner in (engine.kv, engine.scheduler, engine):
        for names in _OVERRIDDEN.values():
            for name in names:
                owner.__dict__.pop(name, None)
    engine.__dict__.pop("_track", None)
    broken = engine.__dict__.get("_track_broken")
    if broken:
        _break(engine, broken)


#: What a broken engine refuses (LLM.generate and its kin go through these).
_REFUSED = ("step", "add_request", "add_requests")


# ------------------------------------------------------------ lab 03 and lab 07
def _free_list(pool) -> list[int]:
    return pool.free_order()


def _steer(pool, blocks: Sequence[int]) -> None:
    """Make the pool hand out `blocks` next, in this order (each free): the
    pool's own `allocate` then takes exactly the blocks the learner chose. A
    cached block chosen is forgotten first (taking it evicts it anyway)."""
    for block in blocks:
        pool.forget(block)
    for block in reversed(blocks):
        pool._blank.move_to_end(block, last=False)


def _check_chosen(piece: str, seq: Any, chosen: list[int], pool) -> None:
    free = set(pool.free_order())
    for block in chosen:
        if isinstance(block, bool) or not isinstance(block, int):
            raise TrackError(piece, (_("sequence {seq} got {block!r}, not a block id")
                                      .format(seq=seq, block=block)))
        if block not in free:
            owner = _("in use") if 0 <= block < pool.num_blocks else _("outside the pool")
            raise TrackError(piece, (_("gave sequence {seq} block {block}, which is {owner} "
                                      "(not in the free list)")
                                      .format(seq=seq, block=block, owner=owner)))
    if len(set(chosen)) != len(chosen):
        raise TrackError(piece, (_("gave sequence {seq} the blocks {chosen}: one of them twice")
                                  .format(seq=seq, chosen=chosen)))


def _call(piece: str, fn: Callable, *args: Any) -> Any:
    try:
        return fn(*args)
    except TrackError:
        raise
    except NotImplementedError as err:
        raise TrackError(piece, _("not written yet: write it (and check it) first")) from err
    except Exception as err:
        raise TrackError(piece, _("raised {name}: {err}")
                         .format(name=type(err).__name__, err=err)) from err


def _read(piece: str, got: Any, read: Callable, want: str) -> Any:
    """`read(got)`: the track reading `piece`'s answer `got`. An answer of a
    type it cannot read is refused naming that piece (never blamed on every
    piece plugged in), with `want`: what the piece returns."""
    try:
        return read(got)
    except TrackError:
        raise
    except Exception as err:
        raise TrackError(piece, _("returned {got} ({type}), which the engine cannot read "
                                  "({name}: {err}): {want}")
                         .format(got=_short(got), type=type(got).__name__,
                                 name=type(err).__name__, err=err, want=want)) from None


def _a_list(piece: str, got: Any) -> None:
    """Refuse None and a set where a piece returns a list (as the labs' checks do)."""
    if got is None:
        raise TrackError(piece, _("returned None — did you forget `return`? (choosing nobody "
                                  "returns [])"))
    if isinstance(got, (set, frozenset)):
        raise TrackError(piece, _("returned {got}: {hint}")
                         .format(got=_short(got), hint=_(SET_FOR_LIST)))


def _pair(got: Any) -> tuple[Any, Any]:
    first, second = got
    return first, second


def _learner_cow(plug: _Plug, kv, seq, table: list[int]) -> tuple[list[int], list[int]]:
    """Ask `copy_on_write` to make `table`'s last block writable; returns the
    new table and the blocks taken (the copy's, if any)."""
    pool = kv.allocator
    refs = [pool.ref_count(b) for b in range(pool.num_blocks)]
    free = _free_list(pool)
    before_refs, before_free, last = list(refs), list(free), table[-1]
    new_table = list(table)
    got = _call("copy_on_write", plug.pieces.copy_on_write, refs, free, new_table)
    plug.note(seq, "copy_on_write")
    shared = before_refs[last] > 1
    if got is None:
        if shared:
            raise TrackError("copy_on_write", (_("returned None for sequence {seq}'s last block "
                                                "{last}, which {before_refs} sequences hold: "
                                                "its write would change theirs")
                                                .format(seq=seq, last=last,
                                                        before_refs=before_refs[last])))
        if (refs, free, new_table) != (before_refs, before_free, table):
            raise TrackError("copy_on_write", _("returned None but changed the pool"))
        return table, []
    src, dst = _read("copy_on_write", got, _pair,
                     _("return the pair (src, dst): the shared block and its copy"))
    if not shared:
        raise TrackError("copy_on_write", (_("copied sequence {seq}'s last block {last} "
                                            "although only this sequence holds it (ref count 1)")
                                            .format(seq=seq, last=last)))
    if dst == last and src != last:
        raise TrackError("copy_on_write", (_("for sequence {seq}'s shared last block {last} "
                                            "returned {got!r}: the pair is (src, dst), the "
                                            "shared block first, then its copy")
                                            .format(seq=seq, last=last, got=got)))
    _check_chosen("copy_on_write", seq, [dst], pool)
    want_refs = list(before_refs)
    want_refs[last] -= 1
    want_refs[dst] = 1
    if src != last or new_table != [*table[:-1], dst] or refs != want_refs \
            or free != [b for b in before_free if b != dst]:
        raise TrackError("copy_on_write", (_("for sequence {seq} (table {table}, last block "
                                            "{last} held by {before_refs}): returned {got!r}, "
                                            "left table {new_table}, "
                                            "ref_counts[{last}]={refs}, "
                                            "ref_counts[{dst}]={refs2} and {n} free blocks; "
                                            "the copy takes block {dst} from the free list, "
                                            "holds ref count 1, and block {last} keeps {value}")
                                            .format(seq=seq, table=table, last=last,
                                                    before_refs=before_refs[last], got=got,
                                                    new_table=new_table, refs=refs[last], dst=dst,
                                                    refs2=refs[dst], n=len(free),
                                                    value=before_refs[last] - 1)))
    return new_table, [dst]


def _learner_append(plug: _Plug, kv, seq, table: list[int], num_tokens: int, count: int,
                    free: list[int]) -> list[int]:
    """Ask `append_slots` for `count` tokens' blocks; returns the blocks taken."""
    pool, size = kv.allocator, kv.block_size
    grown, left = list(table), list(free)
    slots = _call("append_slots", plug.pieces.append_slots, grown, num_tokens, count, size, left)
    plug.note(seq, "append_slots")
    if slots is None:
        raise TrackError("append_slots", (_("returned None for {count} new tokens of sequence "
                                           "{seq} (table {table}, {num_tokens} tokens) with "
                                           "{n} blocks free: they fit")
                                           .format(count=count, seq=seq, table=table,
                                                   num_tokens=num_tokens, n=len(free))))
    if grown[:len(table)] != table:
        raise TrackError("append_slots", (_("changed sequence {seq}'s existing table {table} to "
                                           "{grown}: appending only adds blocks")
                                           .format(seq=seq, table=table, grown=grown[:len(table)])))
    taken = grown[len(table):]
    _check_chosen("append_slots", seq, taken, pool)
    if taken != free[:len(taken)]:
        raise TrackError("append_slots", (_("took blocks {taken} for sequence {seq} from the "
                                           "free list {free}: take them from its front, in "
                                           "order (free_blocks.pop(0)), as the pool does")
                                           .format(taken=taken, seq=seq,
                                                   free=_short(free))))
    if left != [b for b in free if b not in taken]:
        raise TrackError("append_slots", (_("took blocks {taken} for sequence {seq} but left "
                                           "the free list as {left}: what it appends to the "
                                           "table comes off the free list")
                                           .format(taken=taken, seq=seq, left=left)))
    want = [grown[p // size] * size + p % size for p in range(num_tokens, num_tokens + count)
            if p // size < len(grown)]
    slots = _read("append_slots", slots, lambda got: [int(s) for s in got],
                  _("return a list of slots, one per new token"))
    if slots != want or len(want) != count:
        raise TrackError("append_slots", (_("returned slots {list} for sequence {seq}'s tokens "
                                           "{num_tokens}..{value}; its table {grown} puts them "
                                           "at {want}")
                                           .format(list=list(slots), seq=seq, num_tokens=num_tokens,
                                                   value=num_tokens + count - 1, grown=grown,
                                                   want=want)))
    return taken


def _probe_all_or_nothing(plug: _Plug, kv, seq, table: list[int], num_tokens: int,
                          count: int, needed: int, free: list[int]) -> None:
    """The same append with exactly the blocks it needs free must fit, and with
    one block fewer must return None having changed nothing: the questions
    the pool answers whenever memory runs short."""
    fn, size = plug.pieces.append_slots, kv.block_size
    probes = [(free[:needed], True)] + ([(free[:needed - 1], False)] if needed else [])
    for given, fits in probes:
        grown, left = list(table), list(given)
        try:
            got = _call("append_slots", fn, grown, num_tokens, count, size, left)
        except TrackError as err:
            if fits or isinstance(err.__cause__, NotImplementedError):
                raise
            raise TrackError("append_slots", (_("with {n} free blocks for {count} tokens of "
                                               "sequence {seq} that need {needed} (table "
                                               "{table}, {num_tokens} tokens) {message}: an "
                                               "append that does not fit returns None and "
                                               "changes nothing (check before popping)")
                                               .format(n=len(given), count=count, seq=seq,
                                                       needed=needed, table=table,
                                                       num_tokens=num_tokens,
                                                       message=err.message))) from None
        if fits and got is None:
            raise TrackError("append_slots", (ngettext(
                "returned None for {count} token of sequence {seq} (table {table}, "
                "{num_tokens} tokens) with {n} free blocks, exactly the {needed} it needs: {why}",
                "returned None for {count} tokens of sequence {seq} (table {table}, "
                "{num_tokens} tokens) with {n} free blocks, exactly the {needed} it needs: {why}",
                count)
                                               .format(count=count, seq=seq, table=table,
                                                       num_tokens=num_tokens, n=len(given),
                                                       needed=needed,
                                                       why=_why_refused(fn, table, num_tokens,
                                                                        count, size, needed,
                                                                        kv.allocator.num_blocks))))
        if not fits and (got is not None or grown != table or left != given):
            raise TrackError("append_slots", (_("with {n} free blocks for {count} tokens of "
                                               "sequence {seq} that need {needed} (table "
                                               "{table}, {num_tokens} tokens) returned {got!r} "
                                               "and left table {grown}, free list {left}: an "
                                               "append that does not fit returns None and "
                                               "changes nothing")
                                               .format(n=len(given), count=count, seq=seq,
                                                       needed=needed, table=table,
                                                       num_tokens=num_tokens, got=got, grown=grown,
                                                       left=left)))


def _why_refused(fn: Callable, table: list[int], num_tokens: int, count: int, size: int,
                 needed: int, num_blocks: int) -> str:
    """Why `append_slots` refused an append that exactly fits, told by asking
    it again (block ids past the pool's, which it cannot tell apart):

    - a `>=` for `>`: it refuses a full table's next `size` tokens with the
      one block they need free, and takes them with two;
    - else, from the fewest free blocks with which it takes this append:
      ``ceil(count / size)`` where the last block has room (that room not
      counted), another number (the need computed wrong: a block size of its
      own, say), or none up to one per token."""
    def fits(table: list[int], num_tokens: int, count: int, free: int) -> bool:
        try:  # (an error here is no answer: the refusal is the verdict, this explains it)
            return fn(list(table), num_tokens, count, size,
                      list(range(num_blocks + 2, num_blocks + 2 + free))) is not None
        except Exception:
            return False

    full = [num_blocks, num_blocks + 1]
    if not fits(full, 2 * size, size, 1) and fits(full, 2 * size, size, 2):
        return _("exactly enough is enough (refuse only when more blocks are needed than are "
                 "free: >, not >=)")
    fewest = next((m for m in range(needed + 1, count + 2)
                   if fits(table, num_tokens, count, m)), None)
    room = len(table) * size - num_tokens  # left in the last block
    if fewest is None:
        return (_("it returns None with {plenty} free blocks too: an append refuses only "
                  "when more blocks are needed than are free").format(plenty=count + 1))
    if room and fewest == -(-count // size):
        return _("the last block still has room for {room} tokens: count it").format(room=room)
    return (_("it takes them only with {fewest} free blocks, but {count} tokens after "
              "{num_tokens} in blocks of block_size={size} need {needed}: count them from the "
              "block_size argument").format(fewest=fewest, count=count, num_tokens=num_tokens,
                                            size=size, needed=needed))


def _probe_cow_out_of_blocks(plug: _Plug, kv, seq, table: list[int]) -> None:
    """With no block free, a write into a shared block cannot be made safe:
    `copy_on_write` must raise and change nothing."""
    pool = kv.allocator
    refs = [pool.ref_count(b) for b in range(pool.num_blocks)]
    before, free, mine = list(refs), [], list(table)
    try:
        got = plug.pieces.copy_on_write(refs, free, mine)
    except NotImplementedError as err:
        raise TrackError("copy_on_write", _("not written yet: write it (and check it) "
                                          "first")) from err
    except Exception:
        if (refs, mine) != (before, table):
            raise TrackError("copy_on_write", (_("with no free block, for sequence {seq}'s "
                                                "shared block {table}: raised, but changed ref "
                                                "counts or the table first: check before "
                                                "touching anything")
                                                .format(seq=seq, table=table[-1]))) from None
        return
    raise TrackError("copy_on_write", (_("with no free block, for sequence {seq}'s shared last "
                                        "block {table} (ref count {before}) returned {got!r}: "
                                        "the write cannot be made safe, so raise (say "
                                        "MemoryError) and change nothing")
                                        .format(seq=seq, table=table[-1], before=before[table[-1]],
                                                got=got)))


def _allocate_slots(kv, plug: _Plug, original: Callable) -> Callable:
    def allocate_slots(seq, token_ids, cached_blocks=(), *, computed=None, cache_salt=None):
        table = kv.tables().get(seq)
        if seq in kv.swapped_tables() or (table is not None and cached_blocks) \
                or not token_ids or (table is not None and table.num_released):
            # errors, sliding windows
            return original(seq, token_ids, cached_blocks, computed=computed,
                            cache_salt=cache_salt)
        pool, size = kv.allocator, kv.block_size
        blocks = list(table.blocks) if table is not None else list(cached_blocks)
        num_tokens = table.num_tokens if table is not None else len(cached_blocks) * size
        taken: list[int] = []
        shared = num_tokens % size != 0 and pool.ref_count(blocks[-1]) > 1
        if num_tokens % size and plug.pieces.copy_on_write:
            copied, taken = _learner_cow(plug, kv, seq, blocks)  # the real question first:
            if shared:  # a piece that never copies is told so, not to raise when out of blocks
                _probe_cow_out_of_blocks(plug, kv, seq, blocks)
            blocks = copied
            plug.took.setdefault(seq, {}).update(dict.fromkeys(taken, "copy_on_write"))
        elif shared:
            return original(seq, token_ids, cached_blocks, computed=computed,
                            cache_salt=cache_salt)  # pagedkit's own copy
        if plug.pieces.append_slots:
            free = [b for b in _free_list(pool) if b not in taken and b not in cached_blocks]
            needed = -(-(num_tokens + len(token_ids)) // size) - len(blocks)
            _probe_all_or_nothing(plug, kv, seq, blocks, num_tokens, len(token_ids), needed,
                                  free)
            appended = _learner_append(plug, kv, seq, blocks, num_tokens, len(token_ids), free)
            plug.took.setdefault(seq, {}).update(dict.fromkeys(appended, "append_slots"))
            taken += appended
            blocks = blocks + appended
        _steer(pool, taken)
        copies = original(seq, token_ids, cached_blocks, computed=computed,
                          cache_salt=cache_salt)
        got = kv.tables()[seq].blocks
        if plug.pieces.append_slots and got != blocks:  # a fault of this module, not yours
            raise AssertionError(f"track: sequence {seq}'s table is {got}, not {blocks}")
        return copies
    return allocate_slots


# ------------------------------------------------------------------- lab 07
def _cached_prefix(kv, plug: _Plug, original: Callable) -> Callable:
    def cached_prefix(seq, token_ids, *, cache_salt=None):
        pool, size = kv.allocator, kv.block_size
        if cache_salt:  # lab 07 names unsalted blocks: a salted request is looked up by pagedkit
            return original(seq, token_ids, cache_salt=cache_salt)
        if seq in kv or not pool.enable_prefix_caching:
            return []
        usable = list(token_ids[:len(token_ids) - 1])  # the last token is always computed
        full = len(usable) // size
        names = _call("chain_hashes", plug.pieces.chain_hashes, usable, size)
        plug.note(seq, "chain_hashes")
        if names is not None and not isinstance(names, (list, tuple)):
            raise TrackError("chain_hashes", _("returned {got} ({type}) for {n} tokens: return "
                                               "a list of names, one per full block")
                             .format(got=_short(names), type=type(names).__name__,
                                     n=len(usable)))
        if names is None or len(names) != full:
            count = "None" if names is None else f"{len(names)} names"
            raise TrackError("chain_hashes", (_("returned {count} for {n} tokens in blocks of "
                                               "{size}: one name per full block ({full})")
                                               .format(count=count, n=len(usable), size=size,
                                                       full=full)))
        hits, parent = [], None
        for i, learner_name in enumerate(names):
            key = pool.new_key(parent, usable[i * size:(i + 1) * size])
            block = pool.find_cached(key) if key.hash == learner_name else None
            if block is None:  # a name the cache does not hold: a miss, and the chain ends
                break
            hits.append(block)
            parent = pool.block_key(block)
        return hits
    return cached_prefix


# ------------------------------------------------------------------- lab 05
def _to_compute(scheduler, group) -> int | None:
    """The tokens a waiting request computes, if lab 05's model covers it (one
    sequence, never run, its prefix-cache hits all in use, so admitting it
    takes ``ceil(tokens / block_size)`` blocks and one seat); else None."""
    seqs = group.unfinished_seqs()
    if len(seqs) != 1 or group.params.num_sequences != 1 or seqs[0].num_output_tokens:
        return None
    kv = scheduler.kv
    hits = type(kv).cached_prefix(kv, seqs[0].seq_id, seqs[0].token_ids,  # pagedkit's own
                                  cache_salt=group.cache_salt)
    if any(kv.allocator.is_free(b) for b in hits):  # a free cached block leaves the free queue
        return None
    return len(seqs[0].token_ids) - len(hits) * kv.block_size


def _schedule_waiting(scheduler, plug: _Plug) -> Callable:
    original = type(scheduler)._schedule_waiting.__get__(scheduler)

    def schedule_waiting(out, budget):
        queue, waiting, firsts = [], [], set()
        size, caching = scheduler.kv.block_size, scheduler.kv.allocator.enable_prefix_caching
        for group in scheduler.waiting:  # the head of the queue that lab 05's model covers
            tokens = _to_compute(scheduler, group)
            first = tuple(group.unfinished_seqs()[0].token_ids[:size])
            if tokens is None or (caching and first in firsts):  # its hits would grow as
                break                                             # the others come in
            firsts.add(first)
            queue.append(group)
            waiting.append((group.request_id, tokens))
        if not queue:
            return original(out, budget)  # beyond lab 05's model: pagedkit admits
        kv = scheduler.kv
        free = kv.allocator.num_free_blocks
        admitted = _call("admit", plug.pieces.admit, list(waiting), budget.tokens_left,
                         budget.seqs_left, free, kv.block_size,
                         scheduler.config.enable_chunked_prefill)
        for g in queue:
            plug.note(g.request_id, "admit")
        _a_list("admit", admitted)
        admitted = _read("admit", admitted, list,
                         _("return a list of (request_id, tokens) pairs"))
        ids = [item[0] for item in admitted if isinstance(item, (tuple, list)) and len(item) == 2]
        order = [rid for rid, _tokens in waiting]
        # pairs of waiting ids (anything else is `_admit_one`'s to name): in order, by lab 05's rule
        if len(ids) == len(admitted) and all(rid in order for rid in ids):
            if ids != order[:len(ids)]:
                raise TrackError("admit", _("admitted {ids} from the waiting list {order}: "
                                            "first come, first served: admit from its head, in "
                                            "order, and stop at the first request that does not "
                                            "fit").format(ids=_short(ids), order=_short(order)))
            _hold_admit(admitted, waiting, budget, free, kv.block_size,
                        scheduler.config.enable_chunked_prefill)
        if not admitted and not scheduler.running:
            head = scheduler._plan_admission(queue[0], budget)
            if head is not None and head.blocks > free:  # it can never fit: pagedkit ends it
                return original(out, budget)
        by_id = {g.request_id: g for g in queue}
        for item in admitted:
            _admit_one(scheduler, by_id, item, out, budget)
        if len(admitted) == len(queue) and scheduler.waiting:
            original(out, budget)  # the rest of the queue is beyond lab 05's model
    return schedule_waiting


def _hold_admit(admitted: list, waiting: list, budget, free: int, block_size: int,
                chunked: bool) -> None:
    """Hold the learner's `admit` answer, pairs of waiting ids, to lab 05's rule
    on the same call (`lab05.admit_mistake` names the mistake), as attention and
    top-p are held to pagedkit's: an engine it is plugged into, alone, stops
    there."""
    from .lab05 import _admit_oracle, admit_mistake

    args = (waiting, budget.tokens_left, budget.seqs_left, free, block_size, chunked)
    why = admit_mistake([tuple(item) for item in admitted], *args)
    if why:
        raise TrackError("admit", _(
            "admit({waiting}, tokens_left={tokens}, seats_left={seats}, free_blocks={blocks}, "
            "block_size={block_size}, chunked={chunked}) returned {got}; lab 05's rule admits "
            "{want}: {why}").format(
                waiting=_short(waiting), tokens=budget.tokens_left, seats=budget.seqs_left,
                blocks=free, block_size=block_size, chunked=chunked, got=_short(admitted),
                want=_short(_admit_oracle(*args)), why=why))


def _admit_one(scheduler, by_id: dict, item: Any, out, budget) -> None:
    """Carry out one admission the learner's `admit` made, or say why it cannot be."""
    kv = scheduler.kv
    try:
        rid, take = tuple(item)
    except (TypeError, ValueError):
        raise TrackError("admit", _("returned {item!r} in its list: each admission is a "
                                    "(request_id, tokens) pair").format(item=item)) from None
    try:
        group = by_id.pop(rid, None)
    except TypeError:  # unhashable: not a request id
        raise TrackError("admit", _("returned {item!r} in its list: each admission is a "
                                    "(request_id, tokens) pair, the request id as the waiting "
                                    "list gives it").format(item=item)) from None
    if group is None:
        raise TrackError("admit", _("admitted {rid!r}, which is not waiting (or was admitted "
                                    "twice)").format(rid=rid))
    plan = scheduler._plan_admission(group, budget)
    if plan is None or plan.seqs[0].num_tokens != take:
        allows = (_("no seat or token") if plan is None
                  else _("{n} tokens").format(n=plan.seqs[0].num_tokens))
        raise TrackError("admit", (_("admitted {rid!r} with {take} tokens; after the requests "
                                    "before it this step has {allows} for it ({tokens_left} "
                                    "tokens and {seqs_left} seats left)")
                                    .format(rid=rid, take=take, allows=allows,
                                            tokens_left=budget.tokens_left,
                                            seqs_left=budget.seqs_left)))
    if plan.blocks > kv.allocator.num_free_blocks:
        raise TrackError("admit", (_("admitted {rid!r} ({take} tokens, {blocks} blocks) with "
                                    "{num_free_blocks} blocks free")
                                    .format(rid=rid, take=take, blocks=plan.blocks,
                                            num_free_blocks=kv.allocator.num_free_blocks)))
    scheduler.waiting.remove(group)
    scheduler._admit(plan, out, budget)


# ------------------------------------------------------------------- lab 06
def _held(kv, group) -> int:
    """Blocks preempting `group` frees: those no sequence outside it holds."""
    counts: dict[int, int] = {}
    for seq in group.unfinished_seqs():
        for block in kv.gpu_table(seq.seq_id).live_blocks:
            counts[block] = counts.get(block, 0) + 1
    return sum(1 for b, n in counts.items() if kv.allocator.ref_count(b) == n)


def _schedule_running(scheduler, plug: _Plug) -> Callable:
    original = type(scheduler)._schedule_running.__get__(scheduler)

    def schedule_running(out, budget):
        groups = list(scheduler.running)
        if not groups:
            return None
        running, served = [], copy.copy(budget)  # each group's need once the older are served
        for g in groups:
            plan = scheduler._plan(g, served)
            served.tokens_left -= sum(p.num_tokens for p in plan.seqs) if plan else 0
            served.seqs_left -= len(g.unfinished_seqs())
            running.append((g.request_id, plan.blocks if plan else 0, _held(scheduler.kv, g)))
        try:
            victims = plug.pieces.choose_victims(list(running),
                                                 scheduler.kv.allocator.num_free_blocks)
        except TrackError:  # as `_call`: a refusal already names its piece
            raise
        except NotImplementedError as err:
            raise TrackError("choose_victims", _("not written yet: write it (and check it) "
                                                 "first")) from err
        except ValueError as err:  # "does not fit even alone": pagedkit ends that request,
            from .lab06 import _victims_walk  # if lab 06's rule says so too

            free = scheduler.kv.allocator.num_free_blocks
            try:
                _victims_walk(list(running), free)
            except ValueError:
                return original(out, budget)
            raise TrackError("choose_victims", _("raised ValueError ({err}) for {running} with "
                                                 "{free} blocks free, yet no request there fails "
                                                 "to fit alone: preempt the newest until the one "
                                                 "being served fits, and when none newer is left "
                                                 "it steps aside itself")
                             .format(err=err, running=running, free=free)) from err
        except Exception as err:
            raise TrackError("choose_victims", _("raised {name}: {err}")
                             .format(name=type(err).__name__, err=err)) from err
        for g in groups:
            plug.note(g.request_id, "choose_victims")
        _a_list("choose_victims", victims)
        victims = _read("choose_victims", victims, list,
                        _("return a list of the running requests' ids"))
        _read("choose_victims", victims, set, _("return a list of the running requests' ids"))
        ids = {g.request_id for g in groups}
        stray = [v for v in victims if v not in ids]
        if stray or len(set(victims)) != len(victims):
            raise TrackError("choose_victims", (_("returned {victims}: each victim is one of "
                                                 "the running requests {sorted}, once")
                                                 .format(victims=victims, sorted=sorted(ids))))
        _run_with_victims(scheduler, deque(groups), victims, out, budget, running)
    return schedule_running


def _run_with_victims(scheduler, queue, victims, out, budget, running) -> None:
    """pagedkit's running loop (`Scheduler._schedule_running`) with the
    learner's victims: a victim gives way at its turn, or as soon as an older
    group needs its memory, in the learner's order."""
    scheduler.running = []
    left = list(victims)
    while queue:
        group = queue.popleft()
        if group.request_id in left:
            left.remove(group.request_id)
            scheduler._preempt(group, out)
            continue
        plan = scheduler._plan(group, budget)
        if plan is None:  # no budget left for it: still running, next step
            budget.seqs_left -= len(group.unfinished_seqs())
            scheduler.running.append(group)
            continue
        while plan.blocks > scheduler.kv.allocator.num_free_blocks:
            newer = [g for g in queue if g.request_id in left]
            if not newer:
                raise TrackError("choose_victims", (_("chose {victims} from {running} with "
                                                     "{num_free_blocks} blocks free, but "
                                                     "{request_id!r} still does not fit once "
                                                     "they are gone: preempt until the request "
                                                     "being served fits")
                                                     .format(victims=victims, running=running,
                                                             num_free_blocks=scheduler.kv.allocator.num_free_blocks,
                                                             request_id=group.request_id)))
            victim = next(g for v in left for g in newer if g.request_id == v)  # yours first
            queue.remove(victim)
            left.remove(victim.request_id)
            scheduler._preempt(victim, out)
        scheduler._allocate(plan, out, budget)
        scheduler.running.append(group)


# ------------------------------------------------------------------ lockstep
@dataclass(frozen=True)
class Divergence:
    """The first step at which the learner's engine differs from pagedkit's."""

    step: int
    pieces: list[str]
    what: str

    def __str__(self) -> str:
        who = _(" or ").join(_("your {piece} (lab {lab})").format(piece=p, lab=_LAB[p])
                             for p in self.pieces) or _("the engine")
        return (_("step {step}: {what} — look at {who}")
                 .format(step=self.step, what=self.what, who=who))


@dataclass
class LockstepRun:
    """The outcome of `lockstep`: `passed`, else the first `divergence`."""

    plugged: list[str]
    steps: int = 0
    divergence: Divergence | None = None
    outputs: dict[str, list[list[int]]] = field(default_factory=dict)  # request -> completions
    num_preemptions: int = 0
    num_cached_tokens: int = 0
    peak_used_blocks: int = 0

    @property
    def passed(self) -> bool:
        return self.divergence is None

    def __bool__(self) -> bool:
        return self.passed

    @property
    def result(self) -> CheckResult:
        """The outcome as a check's result (how a notebook shows it)."""
        if not self.passed:
            return CheckResult("lockstep", False, str(self.divergence))
        return CheckResult("lockstep", True, (
            _("your {value} served {n} requests in {steps} steps ({num_preemptions} "
              "preemptions, {num_cached_tokens} prompt tokens from the prefix cache), state "
              "equal to pagedkit's after every step")
              .format(value=join_names(self.plugged) or _("nothing"), n=len(self.outputs),
                      steps=self.steps, num_preemptions=self.num_preemptions,
                      num_cached_tokens=self.num_cached_tokens)))

    def __repr__(self) -> str:
        return repr(self.result)

    def _repr_markdown_(self) -> str:
        return self.result._repr_markdown_()


def _snapshot(llm, out, logits, hits: dict) -> dict[str, Any]:
    engine = llm.llm_engine
    kv = engine.kv
    return {
        "preempted": list(out.preempted),
        "running": sorted(s.seq_id for s in out.scheduled),
        "rid": {s.seq_id: s.request_id for s in out.scheduled},
        "hits": dict(sorted(hits.get(id(llm), {}).items())),
        "scheduled": sorted((s.seq_id, s.num_tokens) for s in out.scheduled),
        "tables": {seq: list(t.blocks) for seq, t in sorted(kv.tables().items())},
        "swapped": {seq: list(t.blocks) for seq, t in sorted(kv.swapped_tables().items())},
        "names": {seq: t.block_hashes for seq, t in sorted(kv.tables().items())},
        "free": kv.allocator.free_order(),
        "logits": logits,
        "tokens": dict(sorted(out.new_tokens.items())),
    }


#: the state compared after each step, in the order a step makes it, with the
#: pieces that make it
_FIELDS = (
    ("preempted", N_("the requests preempted"), ("choose_victims",)),
    ("hits", N_("the blocks found in the prefix cache at admission"), ("chain_hashes",)),
    ("running", N_("the sequences scheduled"), ("admit", "choose_victims")),
    ("scheduled", N_("the sequences scheduled (id, tokens)"), ("admit", "choose_victims")),
    ("tables", N_("the block tables"), ("append_slots", "copy_on_write")),
    ("swapped", N_("the swapped-out tables"), ("choose_victims",)),
    ("names", N_("the prefix-cache names of the full blocks"), ("chain_hashes",)),
    ("free", N_("the free list (in the order it is handed out)"),
     ("append_slots", "copy_on_write", "choose_victims")),
    ("logits", N_("the logits"), ("paged_decode_attention",)),
    ("tokens", N_("the sampled tokens"), ("paged_decode_attention",)),
)


def _first_difference(mine: dict, theirs: dict) -> tuple[str, tuple[str, ...], str] | None:
    for key, label, pieces in _FIELDS:
        label = _(label)
        a, b = mine[key], theirs[key]
        if key == "hits":  # of the sequences both admitted: whom each admitted is "running"'s
            a, b = ({s: h for s, h in x.items() if s in a and s in b} for x in (a, b))
        if key == "logits":
            if (a is None) != (b is None) or (a is not None and (
                    a.shape != b.shape or not torch.allclose(a, b, atol=1e-3, rtol=1e-3))):
                diff = "" if a is None or b is None or a.shape != b.shape else \
                    _(" by up to {item:.3g}").format(item=(a - b).abs().max().item())
                return key, pieces, f"{label} differ{diff}"
            continue
        if a != b:
            return key, pieces, f"{label}: {_diff_text(a, b)}"
    return None


def _diff_text(a: Any, b: Any) -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if a.get(k) != b.get(k):
                return (_("for sequence {k}, {short} in your engine, {short2} in pagedkit's")
                          .format(k=k, short=_short(a.get(k)), short2=_short(b.get(k))))
    return (_("{short} in your engine, {short2} in pagedkit's")
             .format(short=_short(a), short2=_short(b)))


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 160 else text[:157] + "..."


def _blame(plug: _Plug, field_pieces: tuple[str, ...], key: str, mine: dict,
           theirs: dict) -> list[str]:
    """The plugged-in pieces that made the differing state: of a table, the
    piece that wrote its first differing entry (a replaced entry is a copy's,
    a new one an append's); else those that acted on the sequence or request."""
    plugged = [p for p in field_pieces if getattr(plug.pieces, p) is not None]
    if key == "tables":
        for seq in sorted(set(mine[key]) | set(theirs[key]), key=str):
            a, b = mine[key].get(seq) or [], theirs[key].get(seq) or []
            if a != b:
                first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                             min(len(a), len(b)))
                piece = plug.took.get(seq, {}).get(a[first]) if first < len(a) else None
                if piece is not None:
                    return [piece]
                break
    who: set = set()
    if key in ("tables", "names", "swapped", "hits"):
        who = {s for s in set(mine[key]) | set(theirs[key])
               if mine[key].get(s) != theirs[key].get(s)}
    elif key in ("preempted", "running", "scheduled"):  # entries (request or seq, ...)
        rid = {**theirs["rid"], **mine["rid"]}
        who = {rid.get(x[0], x[0]) if key != "running" else rid.get(x, x)
               for x in set(mine[key]) ^ set(theirs[key])}
    acted = [p for w in who for p in plug.acted.get(w, [])]
    named = [p for p in plugged if p in acted]
    return named or plugged or plug.pieces.plugged()


def lockstep(pieces: Pieces, requests: Sequence[tuple[Any, Any]], *, model: Any = "tiny",
             max_steps: int = 10_000, **engine_args: Any) -> LockstepRun:
    """Run `requests` (``(prompt, SamplingParams)`` pairs) through an engine with
    `pieces` plugged in and through pagedkit's own, step by step, and stop at
    the first step whose state differs (see `_FIELDS`), or at an answer the
    engine cannot carry out. Both engines are built with `engine_args`
    (``num_blocks``, ``block_size``, ``preemption_mode``, ...)."""
    from ..engine import LLM

    _need_pieces("lockstep", pieces)
    mine, theirs = LLM(model, **engine_args), LLM(model, **engine_args)
    plug_in(mine, pieces)
    plug = mine.llm_engine._track
    run = LockstepRun(plugged=pieces.plugged())
    logits: dict[int, torch.Tensor | None] = {}
    hits: dict[int, dict[int, int]] = {}
    for llm in (mine, theirs):
        _record_logits(llm, logits)
        _record_hits(llm, hits)
        for i, (prompt, params) in enumerate(requests):
            llm.llm_engine.add_request(str(i), prompt, params, arrival_time=0.0)
    finished: dict[str, list[int]] = {}
    try:
        while theirs.llm_engine.has_unfinished_requests() and run.steps < max_steps:
            plug.acted.clear()
            plug.took.clear()
            hits.clear()
            step = run.steps
            run.steps += 1
            try:
                out_mine = mine.llm_engine.step()
            except TrackError as err:
                run.divergence = Divergence(step, [err.piece], err.message)
                return run
            except Exception as err:  # e.g. your attention's result of the wrong shape
                run.divergence = Divergence(step, plug.pieces.plugged(),
                                            (_("your engine raised {name}: {err}")
                                              .format(name=type(err).__name__, err=err)))
                return run
            got = _snapshot(mine, out_mine, logits.get(id(mine)), hits)
            out_theirs = theirs.llm_engine.step()
            want = _snapshot(theirs, out_theirs, logits.get(id(theirs)), hits)
            diff = _first_difference(got, want)
            if diff is not None:
                key, field_pieces, what = diff
                run.divergence = Divergence(
                    step, _blame(plug, field_pieces, key, got, want), what)
                return run
            for output in out_theirs.finished:
                finished[output.request_id] = [o.token_ids for o in output.outputs]
                run.num_cached_tokens += output.num_cached_tokens or 0
        run.outputs = {rid: finished[rid] for rid in sorted(finished, key=int)}
        run.num_preemptions = theirs.llm_engine.scheduler.num_preemptions
        run.peak_used_blocks = theirs.llm_engine._peak_used_blocks
        return run
    finally:
        unplug(mine)


# ------------------------------------------------- your pieces, lab to lab
#: Where `save` keeps the learner's pieces between notebooks (each lab is a
#: notebook of its own): ``$PAGEDKIT_TRACK`` or ``~/.pagedkit/my_engine.py``.
#: ``PAGEDKIT_TRACK=""`` turns the track off (nbgrader's grading does): nothing
#: is saved, nothing is loaded.
def pieces_path() -> Path | None:
    path = os.environ.get("PAGEDKIT_TRACK", str(Path.home() / ".pagedkit" / "my_engine.py"))
    return Path(path) if path else None


_HEADER = '''"""Your engine's pieces, saved by pagedkit.exercises.track.save from the labs.

Each piece has a section of its own: the piece, the functions of your notebook
it calls, and the imports and constants they use, as they were when you saved
it. track.load runs each section alone, so no two pieces share a name (two
helpers called alike stay apart), and saving a piece again replaces its whole
section (a constant you changed, a helper you renamed or dropped)."""
'''

#: A code's flag for ``from __future__ import annotations``: a saved piece
#: keeps it if the notebook had it (as no module but this one needs).
_LAZY_ANNOTATIONS = __future__.annotations.compiler_flag

#: The line that opens a piece's section in the saved file.
_SECTION = re.compile(r"^# ={8} ([A-Za-z_]\w*)\b.*$", re.MULTILINE)


def _section_line(name: str) -> str:
    lab = f" (lab {_LAB[name]})" if name in _LAB else ""
    return f"# ======== {name}{lab} ========"


def _lab_range() -> str:
    """The labs that save pieces, from `_LAB` ("03-08")."""
    return f"{min(_LAB.values())}-{max(_LAB.values())}"


def _section(fn: Callable) -> str:
    """The section that keeps `fn`: the imports and constants it and its
    helpers use, then the helpers (each after the ones it names when it is
    defined), then `fn`."""
    functions: dict[str, str] = {}
    lines: dict[str, str] = {}
    _sources(fn.__name__, fn, fn, functions, lines, {fn.__name__})
    lazy = fn.__code__.co_flags & _LAZY_ANNOTATIONS  # the notebook's own future import
    text = ("from __future__ import annotations\n" * bool(lazy)
            + "".join(f"{line}\n" for line in sorted(lines.values()))
            + "".join(f"\n\n{source.rstrip()}\n" for source in functions.values()))
    for name, source in functions.items():
        marker = _SECTION.search(source)
        if marker:
            whose = name if name == fn.__name__ else f"{name} (a function {fn.__name__} uses)"
            raise ValueError(f"{whose}'s source has the line {marker.group(0)!r}, which the "
                             "saved file uses to open a piece's section: change that line "
                             "(a comment or string) and save again")
    return text.strip("\n")


def _sources(name: str, value: Callable, piece: Callable, functions: dict[str, str],
             lines: dict[str, str], seen: set[str]) -> None:
    """Add the function `value` (the notebook's `name`) to `functions`, after
    the functions of the notebook it names, and the line giving each other
    global it names to `lines` (`_global_line`). The names are the globals
    its ``def`` reads or writes (`_global_names`), decorators, defaults and
    annotations included; an attribute's name is none of them."""
    if value.__closure__ or value.__name__ != name:
        what = ("a function made inside another (it uses "
                f"{', '.join(value.__code__.co_freevars)})" if value.__closure__
                else f"the function {value.__name__}")
        raise TypeError(f"{piece.__name__} uses the notebook's {name!r}, {what}, which save "
                        f"cannot keep for the next labs: define it with def {name}(...) at "
                        "the top level of a cell")
    source = textwrap.dedent(_source(value))
    # the def statement (as the notebook ran it), and every code in it
    codes = [compile(source, "<saved>", "exec", value.__code__.co_flags & _LAZY_ANNOTATIONS,
                     dont_inherit=True)]
    while codes:
        code = codes.pop()
        codes += [c for c in code.co_consts if inspect.iscode(c)]
        for global_name in _global_names(code):
            if (global_name in seen or global_name not in value.__globals__
                    or global_name.startswith("__")):  # a class body's __name__
                continue
            seen.add(global_name)
            found = value.__globals__[global_name]
            if inspect.isfunction(found) and found.__module__ == piece.__module__:
                _sources(global_name, found, piece, functions, lines, seen)
            else:
                lines[global_name] = _global_line(global_name, found, piece)
    functions[name] = source


#: The instructions that read or write a global name. ``co_names`` lists
#: attributes' names too (``probs.log()``, ``torch.log``): a notebook global
#: ``log`` is not used by them.
_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL",
                         "LOAD_FROM_DICT_OR_GLOBALS"})


def _global_names(code: Any) -> list[str]:
    """The global names `code` itself reads or writes (not those of the codes
    in it), in order of first use."""
    return list(dict.fromkeys(ins.argval for ins in dis.get_instructions(code)
                              if ins.opname in _GLOBAL_OPS))


def _global_line(name: str, value: Any, fn: Callable) -> str:
    """The line that gives a saved piece the notebook global `name`: an
    import for a module or an importable function or class, an assignment
    for a plain constant (`_constant`: bytes too, lab 07's `ROOT_HASH`);
    anything else is refused by name."""
    if inspect.ismodule(value):
        return (f"import {value.__name__}" if value.__name__ == name
                else f"import {value.__name__} as {name}")
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if module and qualname and module != fn.__module__ and "." not in qualname:
        return f"from {module} import {qualname}" + ("" if qualname == name else f" as {name}")
    constant = _constant(value)
    if constant is not None:
        return f"{name} = {constant}"
    raise TypeError(f"{fn.__name__} uses the notebook's {name!r} ({type(value).__name__}), "
                    "which save cannot keep for the next labs: pass it as an argument, or "
                    "build it inside the function")


def _constant(value: Any) -> str | None:
    """The source of a plain constant — None, a bool, an int, a float, a
    string, bytes, or a tuple of those — that reads back as the same value of
    the same type; None for anything else."""
    if value is None or type(value) in (bool, int, str, bytes):
        return repr(value)
    if type(value) is float:
        return repr(value) if math.isfinite(value) else f"float({repr(value)!r})"
    if type(value) is tuple:
        parts = [_constant(item) for item in value]
        if None in parts:
            return None
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    return None


def _source(fn: Callable) -> str:
    """`fn`'s source, as `save` keeps it; a function with none to read (typed
    at a prompt, piped into ``python -``) is refused, saying where to write it."""
    try:
        return inspect.getsource(fn)
    except OSError as err:
        raise ValueError(f"save cannot read {fn.__name__}'s source ({err}): a function typed at "
                         "an interactive prompt or piped into python has no file to read it "
                         "from; define it in a notebook cell or a .py file and save it from "
                         "there; nothing saved") from err


def _is_stub(fn: Callable) -> bool:
    """Is `fn` still the exercise's stub (its body ``raise NotImplementedError``)?"""
    body = ast.parse(textwrap.dedent(_source(fn))).body[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return (len(body) == 1 and isinstance(body[0], ast.Raise)
            and "NotImplementedError" in ast.unparse(body[0]))


def save(*functions: Callable, log: Callable[[str], None] = print) -> Path | None:
    """Keep your pieces for the labs after this one: `load` gives them back.
    Each piece is kept in a section of its own, with the functions, imports
    and constants of your notebook it uses, as they are now; saving a piece
    again replaces its whole section. A function not named as a piece is
    refused, nothing saved. A stub (not written yet) is not saved: the piece
    saved before keeps running, or pagedkit's own if none was; `forget`
    drops a saved piece. Returns the file written, or None where nothing
    was (the track off, or only stubs given: newcomer 37 was handed a
    path that did not exist)."""
    path = pieces_path()
    if path is None:
        log(_("the build track is off here (PAGEDKIT_TRACK is empty): nothing saved"))
        return None
    sections = _saved_sections(path)
    for fn in functions:
        if not inspect.isfunction(fn):
            raise TypeError(f"save needs your functions, got {fn!r}")
        if fn.__name__ not in PIECES:
            raise ValueError(f"{fn.__name__} is not one of the pieces ({', '.join(PIECES)}), "
                             "so the labs after this one would never run it: name it as the "
                             "piece it is (def admit(...), say) and save that; nothing saved")
        _need_parameters(fn)
    written = []
    for fn in functions:
        if _is_stub(fn):
            log(_stub_text(fn.__name__, fn.__name__ in sections))
            continue
        sections[fn.__name__] = (0, _section(fn))
        written.append(fn.__name__)
    if not written:  # only stubs: nothing to keep, and no file made (a lab run untouched
        return None  # writes nothing)
    path = _write(sections)
    log(_("saved {names} in {path} (track.load() gives your pieces back; track.forget "
          "drops one)").format(names=", ".join(written), path=path))
    return path


def _need_parameters(fn: Callable) -> None:
    """Refuse a piece the engine could not call: it passes
    ``len(PARAMETERS[name])`` arguments by position."""
    name, wanted = fn.__name__, PARAMETERS[fn.__name__]
    try:
        inspect.signature(fn).bind(*range(wanted.count(",") + 1))
    except TypeError as err:
        raise ValueError(f"{name}{inspect.signature(fn)} cannot take the engine's arguments "
                         f"({err}): lab {_LAB[name]} writes def {name}({wanted}); give it "
                         "those parameters and save it again; nothing saved") from None


def _stub_text(name: str, saved: bool) -> str:
    """What `save` says of a stub `name`: what runs in its place (the piece
    saved before, if one was)."""
    if saved:
        return _("{name} is not written yet: not saved; the {name} you saved before keeps "
                 "running (track.forget('{name}') brings back pagedkit's own)").format(name=name)
    return _("{name} is not written yet: not saved (pagedkit's own runs in its place)").format(
        name=name)


def forget(*names: str, log: Callable[[str], None] = print) -> Path | None:
    """Drop saved pieces by name (pagedkit's own runs in their place again).
    A piece that is not saved is said and left alone, so a cell that forgets
    runs twice (newcomer 38); a name that is no piece is refused, nothing
    dropped. Returns the file written, or None where nothing was."""
    path = pieces_path()
    if path is None:
        raise ValueError("the build track is off here (PAGEDKIT_TRACK is empty)")
    sections = _saved_sections(path)
    unknown = [n for n in names if n not in PIECES]
    if unknown:
        raise ValueError(f"{unknown[0]!r} is not one of the pieces ({', '.join(PIECES)}); "
                         f"saved: {', '.join(sections) or 'none'}; nothing forgotten")
    for name in names:
        if name not in sections:
            log(_("{name} is not saved: pagedkit's own runs already").format(name=name))
    if not any(name in sections for name in names):
        return None
    return _write({k: v for k, v in sections.items() if k not in names})


def _write(sections: dict[str, tuple[int, str]]) -> Path:
    """The saved pieces file: the header, then each piece's section."""
    path = pieces_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_HEADER + "".join(f"\n\n{_section_line(name)}\n{text.strip()}\n"
                                      for name, (_line, text) in sections.items()))
    return path


def _saved_sections(path: Path) -> dict[str, tuple[int, str]]:
    """The saved file's sections by piece: how many lines come before the
    line that opens it, and its text after that line. A file saved by an
    earlier pagedkit (`_earlier_pieces`) that holds pieces is refused (`load`
    still runs it); one that holds none is empty. A piece twice is refused."""
    if not path.exists():
        return {}
    text = path.read_text()
    earlier = _earlier_pieces(text)
    if earlier == []:
        return {}  # an earlier pagedkit's header and lines, no piece: nothing to keep
    if earlier:
        labs = sorted({_LAB[name] for name in earlier})
        raise ValueError(
            f"{path} holds pieces saved by an earlier pagedkit ({', '.join(earlier)}), which "
            "kept all pieces' constants and helpers in one namespace (a constant saved again "
            "could keep its old value): track.load still runs them as they are, but to save "
            "or forget a piece, move the file aside and run the build-track cells of "
            f"lab{'s' * (len(labs) > 1)} {', '.join(labs)} again (track.save)")
    return _sections(text, path)


def _sections(text: str, path: Path) -> dict[str, tuple[int, str]]:
    """The sections of a saved file of sections (`_saved_sections`), by piece."""
    marks = list(_SECTION.finditer(text))
    sections: dict[str, tuple[int, str]] = {}
    for i, mark in enumerate(marks):
        name, end = mark.group(1), marks[i + 1].start() if i + 1 < len(marks) else len(text)
        if name in sections:
            raise ValueError(f"{path} has two sections for {name!r}: delete one (its lines "
                             f"from {mark.group(0)!r} to the next such line)")
        sections[name] = (text.count("\n", 0, mark.start()),  # the lines before it
                          text[mark.end():end])
    return sections


def _earlier_pieces(text: str) -> list[str] | None:
    """None for a saved file of sections; for a file saved by an earlier
    pagedkit, which kept every piece in one namespace (more than a docstring
    and imports before the first section: its constants and functions), the
    pieces it defines, in `PIECES` order (none: its pieces were forgotten)."""
    marks = list(_SECTION.finditer(text))
    before = ast.parse(text[:marks[0].start()] if marks else text).body
    if all(isinstance(node, (ast.Expr, ast.Import, ast.ImportFrom)) for node in before):
        return None
    defined = {node.name for node in before if isinstance(node, ast.FunctionDef)}
    return [name for name in PIECES if name in defined]


def load() -> Pieces:
    """The pieces saved so far (`save`), ready to plug in, each run from its
    own section of the saved file; none saved (or the track off): no pieces.
    A file saved by an earlier pagedkit runs as that pagedkit ran it: in one
    namespace (its annotations not evaluated)."""
    path = pieces_path()
    if path is None or not path.exists():
        return Pieces()
    text = path.read_text()
    earlier = _earlier_pieces(text)  # the file is read and parsed once
    if earlier:
        namespace: dict[str, Any] = {"__name__": "my_engine"}
        exec(compile(text, str(path), "exec", _LAZY_ANNOTATIONS, dont_inherit=True), namespace)
        return Pieces.from_namespace(namespace)
    found = {}
    for name, (line, section) in ({} if earlier == [] else _sections(text, path)).items():
        namespace = {"__name__": f"my_engine.{name}"}
        # blank lines first: an error's line number is the saved file's
        # (and none of this module's own __future__ imports)
        exec(compile("\n" * line + section, str(path), "exec", dont_inherit=True), namespace)
        if name in PIECES:
            if not callable(namespace.get(name)):
                raise ValueError(f"{path}: the section {name!r} does not define {name}: "
                                 f"save it again (track.save({name}))")
            found[name] = namespace[name]
    return Pieces(**found)


# ---------------------------------------------------------------- workloads
def bench_requests(num_requests: int = 10, *, seed: int = 0, block_size: int = 4,
                   prefix_blocks: int = 3, samples: int = 3, vocab_size: int = 1024
                   ) -> list[tuple[list[int], Any]]:
    """The bench's ShareGPT-shaped workload (`pagedkit.bench.engine.sharegpt_workload`
    at its CPU scale, 1/8 of ShareGPT's lengths: random token ids, greedy,
    end-of-sequence ignored) with sharing added: every third request starts
    with the same `prefix_blocks` full blocks (prefix caching), and the
    last asks for `samples` samples (they fork and copy on write; greedy,
    so each equals transformers' greedy output). ``(prompt, params)`` pairs."""
    from ..bench.engine import CPU_SCALE, sharegpt_workload
    from ..sampling_params import SamplingParams

    work = sharegpt_workload(num_requests, vocab_size, scale=CPU_SCALE["sharegpt"],
                             max_len=160, seed=seed)
    prefix = list(range(7, 7 + prefix_blocks * block_size))
    requests = []
    for i, (prompt, out) in enumerate(zip(work.prompts, work.output_lens, strict=True)):
        if i % 3 == 0:
            prompt = prefix + prompt
        n = samples if i == num_requests - 1 else 1
        out = out if n == 1 else min(out, 16)  # the samples share the pool: all must fit it
        requests.append((prompt, SamplingParams(temperature=0, n=n, max_tokens=out,
                                                ignore_eos=True)))
    return requests


def sampled_requests() -> list[tuple[list[int], Any]]:
    """Requests that sample with a top-p cut (seeded, so both engines draw alike):
    what puts lab 08's `top_p_filter` to work (`SCENARIOS["sampling"]`)."""
    from ..sampling_params import SamplingParams

    return [([11 + i, 30 + 2 * i, 50 + 3 * i, 7], SamplingParams(
        temperature=t, top_p=p, max_tokens=10, seed=100 + i, ignore_eos=True))
        for i, (t, p) in enumerate([(1.0, 0.9), (0.8, 0.5), (1.3, 0.95), (1.0, 0.3)])]


def pair_requests() -> list[tuple[list[int], Any]]:
    """Two forked samples of a 15-token prompt and four 2-token prompts, in
    blocks of 8 (`SCENARIOS["pair"]`): at the third step the pair needs a block
    for each sample with none free, and each newer request holds one block,
    so it takes two victims, not one. Greedy, end-of-sequence ignored."""
    from ..sampling_params import SamplingParams

    pair = SamplingParams(temperature=0, n=2, max_tokens=12, ignore_eos=True)
    short = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    return [(list(range(40, 55)), pair)] + [([60 + i, 70 + i], short) for i in range(4)]


#: Engine settings that put each plugged-in piece to work (for `bench_requests`,
#: but "pair", for `pair_requests`): memory tight enough to preempt (by
#: recomputation, or by swapping), a prefix cache, and for admission a small
#: token budget and few seats, with and without chunked prefill, or few blocks;
#: "whole" a budget that a prompt outruns without chunked prefill (it waits whole).
#: "budget" has blocks of 8 and a prefix cache, the others mostly 4: a piece
#: that uses a notebook's constant for its ``block_size`` argument differs.
SCENARIOS: dict[str, dict[str, Any]] = {
    "recompute": dict(block_size=4, num_blocks=40, enable_prefix_caching=True,
                      preemption_mode="recompute"),
    "swap": dict(block_size=4, num_blocks=40, enable_prefix_caching=True,
                 preemption_mode="swap", swap_space=0.01),
    "chunked": dict(block_size=4, num_blocks=24, enable_prefix_caching=True,
                    enable_chunked_prefill=True, max_num_batched_tokens=16, max_num_seqs=3),
    "budget": dict(block_size=8, num_blocks=12, enable_prefix_caching=True,  # not 4: a piece
                   max_num_batched_tokens=64, max_num_seqs=3),  # must use its block_size
    "admission": dict(block_size=4, num_blocks=22, enable_prefix_caching=False,
                      max_num_seqs=8),
    "memory": dict(block_size=4, num_blocks=24, enable_prefix_caching=True, max_num_seqs=8),
    "pair": dict(block_size=8, num_blocks=7, enable_prefix_caching=False),  # pair_requests()
    "memory_chunked": dict(block_size=4, num_blocks=24, enable_prefix_caching=True,
                           enable_chunked_prefill=True, max_num_batched_tokens=16,
                           max_num_seqs=6),
    "sampling": dict(block_size=4, num_blocks=32),  # sampled_requests(): top_p_filter's
    # no chunked prefill: a prompt longer than the budget left waits whole
    "whole": dict(block_size=4, num_blocks=40, max_num_batched_tokens=64),
}


#: The scenarios `check` runs, in this order (those that stop most wrong
#: pieces first): every wrong piece in the course's tests is stopped by one
#: of them (tests/labs/test_track.py runs `check` itself).
CHECK_ORDER = ("sampling", "recompute", "admission", "memory", "chunked", "memory_chunked",
               "budget", "whole", "pair", "swap")


def check(pieces: Pieces, *, scenarios: Sequence[str] = CHECK_ORDER,
          log: Callable[[str], None] = print) -> LockstepRun | None:
    """Your `pieces` beside pagedkit's own in each of `scenarios` (the bench
    workload, `bench_requests()`; "pair" runs `pair_requests()`, "sampling"
    `sampled_requests()`, only when a `top_p_filter` is plugged in), stopping
    at the first run that differs: that run is returned, naming the step and
    the piece. If every scenario passes, the last run is returned. One
    scenario alone can miss a wrong piece (a rule that matters only when
    seats, budget or blocks run short): the labs' build-track cells run
    them all. None, said, when no piece of yours is saved."""
    _need_pieces("check", pieces)
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario {unknown[0]!r}; the scenarios are "
                         f"{', '.join(SCENARIOS)}")
    if not pieces.plugged():
        log(_("none of your pieces is saved yet (track.save in labs {labs}): nothing to check")
            .format(labs=_lab_range()))
        return None
    requests = bench_requests()
    run = None
    for name in scenarios:
        if name == "sampling" and not pieces.top_p_filter:
            continue  # only lab 08's top_p_filter sees these requests' sampling
        special = {"pair": pair_requests, "sampling": sampled_requests}.get(name)
        run = lockstep(pieces, special() if special else requests, **SCENARIOS[name])
        verdict = _("same as pagedkit") if run.passed else _("DIFFERS")
        log(f"{name:>15}: " + ngettext("{verdict} ({steps} step)", "{verdict} ({steps} steps)",
                                       run.steps).format(verdict=verdict, steps=run.steps))
        if not run.passed:
            break
    return run


def transformers_tokens(requests: Sequence[tuple[list[int], Any]], model: Any = None
                        ) -> dict[str, list[list[int]]]:
    """What transformers' greedy `generate` gives for each request (its `n`
    completions all alike), keyed as `lockstep`'s outputs are: the oracle the
    build track's tokens are held to."""
    from ..models import load_tiny

    model = load_tiny()[0] if model is None else model
    expected = {}
    with torch.inference_mode():
        for i, (prompt, params) in enumerate(requests):
            if not params.greedy:
                raise ValueError(f"request {i} samples (temperature {params.temperature}): "
                                 "only greedy requests have one right answer")
            ids = torch.tensor([prompt])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=params.max_tokens, min_new_tokens=params.max_tokens,
                                 eos_token_id=None, pad_token_id=0)
            expected[str(i)] = [out[0, len(prompt):].tolist()] * params.n
    return expected


def vllm_tokens(requests: Sequence[tuple[list[int], Any]]) -> dict[str, list[list[int]]]:
    """What the real vLLM (its CPU build, in this process) serves for each greedy
    request on the same tiny model, keyed as `lockstep`'s outputs are; a
    request's `n` samples are `n` requests to vLLM (greedy: all alike). Raises
    RuntimeError saying why when vLLM is not here (`vllm_missing`)."""
    why = vllm_missing()
    if why:
        raise RuntimeError(why)
    from ..vllm.compare import VllmEngine, Workload, tiny_model_dir

    prompts, lengths, owner = [], [], []
    for i, (prompt, params) in enumerate(requests):
        if not params.greedy or not params.ignore_eos:
            raise ValueError(f"request {i}: only greedy requests that ignore end-of-sequence "
                             "have one answer to compare")
        for _sample in range(params.n):
            prompts.append(list(prompt))
            lengths.append(params.max_tokens)
            owner.append(str(i))
    blocks = sum(-(-(len(p) + n) // 32) for p, n in zip(prompts, lengths, strict=True))
    engine = VllmEngine(tiny_model_dir(), num_blocks=blocks + 8)
    try:
        run = engine.run(Workload(prompts, lengths, temperature=0.0, ignore_eos=True,
                                  name="build track"))
    finally:
        engine.close()
    out: dict[str, list[list[int]]] = {}
    for rid, tokens in zip(owner, run.tokens, strict=True):
        out.setdefault(rid, []).append(list(tokens))
    return out


def _record_hits(llm, store: dict) -> None:
    """Note the cached blocks each admission starts from (first sequence -> count)."""
    scheduler = llm.llm_engine.scheduler
    admit = type(scheduler)._admit.__get__(scheduler)

    def admit_and_note(plan, *args, **kwargs):
        first = plan.group.unfinished_seqs()[0].seq_id
        store.setdefault(id(llm), {})[first] = len(plan.cached)
        return admit(plan, *args, **kwargs)
    scheduler._admit = admit_and_note


def _record_logits(llm, store: dict) -> None:
    runner = llm.llm_engine.runner
    execute = type(runner).execute.__get__(runner)

    def execute_and_keep(*args, **kwargs):
        logits = execute(*args, **kwargs)
        store[id(llm)] = None if logits is None else logits.detach().clone()
        return logits
    runner.execute = execute_and_keep


@contextlib.contextmanager
def plugged(llm: Any, pieces: Pieces) -> Iterator[Any]:
    """``with plugged(llm, pieces): llm.generate(...)`` — pagedkit's pieces come back after."""
    plug_in(llm, pieces)
    try:
        yield llm
    finally:
        unplug(llm)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pagedkit.exercises.track``: `check` the pieces saved so far
    and print the verdict, outside a notebook. Exit status 0 when they serve
    as pagedkit's own, 1 when one differs or none is saved."""
    from ..i18n import argparse_speaking, command_language

    if not command_language(_TRACK_PROG):  # PAGEDKIT_LANGUAGE, as every command reads it
        return 2
    with argparse_speaking():
        return _main(argv)


_TRACK_PROG = "python -m pagedkit.exercises.track"


def _main(argv: Sequence[str] | None) -> int:
    """`main` once the language is set."""
    import argparse

    from ..i18n.terminal import HelpFormatter

    parser = argparse.ArgumentParser(
        prog=_TRACK_PROG, formatter_class=HelpFormatter,
        description="The build track, outside a notebook: check the engine pieces you saved "
                    "in labs 03-08 (track.save) beside pagedkit's own, on every setting "
                    "lab 08's cell runs, and print the verdict. The pieces are read from "
                    "~/.pagedkit/my_engine.py, or the file PAGEDKIT_TRACK names. "
                    "docs/build_track.md explains the track.")
    parser.parse_args(argv)
    path = pieces_path()
    if path is None:
        print(_("the build track is off here (PAGEDKIT_TRACK is empty): nothing to check"))
        return 1
    print(_("your pieces: {path}").format(path=path))
    run = check(load())
    if run is None:
        return 1
    print(run)
    return 0 if run.passed else 1


if __name__ == "__main__":  # the imported module's main, not a second copy's
    import sys

    from pagedkit.exercises import track as _track

    sys.exit(_track.main())
