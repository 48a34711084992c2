"""The sentences lab 10 prints about its runs, in the language of the moment.

Lab 10's code cells are shared by the English and the Chinese lab (only
markdown is translated), so a sentence written in a cell prints English in
both. The lab computes each figure in its own cell, in plain sight, and hands
it to one of these functions for the words around it: ``_()`` picks them
after ``pagedkit.set_language`` (docs/i18n.md). In English every sentence
reads as the lab printed it before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..i18n import _


def installed(version: str) -> str:
    return _("vLLM {version} is installed: every cell of this lab runs for real.").format(
        version=version)


def workload(num_requests: int, prompt_lengths: Sequence[int], new_tokens: int) -> str:
    return _("{n} requests, prompts of {lengths} tokens, {new} new tokens each").format(
        n=num_requests, lengths=list(prompt_lengths), new=new_tokens)


def run(system: str, steps: int, preemptions: int, peak: int, num_blocks: int,
        cached_tokens: Sequence[int]) -> str:
    """One engine's run of the workload (pagedkit's, then vLLM's: the same sentence)."""
    return _("{system}: {steps} steps, {preemptions} preemptions, peak {peak}/{num_blocks} "
             "blocks in use, prompt tokens served from the prefix cache per request: "
             "{cached}").format(system=system, steps=steps, preemptions=preemptions,
                                peak=peak, num_blocks=num_blocks, cached=list(cached_tokens))


def cache_events(batches: int, kinds: dict[str, int]) -> str:
    return _("its cache events, in vLLM's format: {batches} batches, {kinds}").format(
        batches=batches, kinds=kinds)


def removals(batch: int, stored: int, removed: int, cached: int) -> str:
    return _("batch {batch:2d}: +{stored} stored, -{removed} removed, {cached} blocks cached "
             "after it").format(batch=batch, stored=stored, removed=removed, cached=cached)


def pool(version: str, num_blocks: int, block_size: int) -> str:
    return _("vLLM {version}: {num_blocks} blocks of {block_size} tokens").format(
        version=version, num_blocks=num_blocks, block_size=block_size)


def batches_received(batches: int) -> str:
    return _("the view received {batches} event batches from vLLM's publisher").format(
        batches=batches)


def steps_read(steps: int, counts_equal: bool, preemptions: int) -> str:
    return _("{steps} steps read; blocks in use after each equal vLLM's own count: {equal}; "
             "preemptions seen: {preemptions}").format(steps=steps, equal=counts_equal,
                                                       preemptions=preemptions)


def after_last_step(used: int, cached: int, free: int, described: int) -> str:
    return _("after the last step: {used} used, {cached} cached, {free} free; the events "
             "describe {described} cached blocks").format(used=used, cached=cached, free=free,
                                                          described=described)


def tokens_equal(equal: int, requests: int) -> str:
    return _("tokens equal: {equal}/{requests} requests").format(equal=equal,
                                                                  requests=requests)


def first_event(kind: str, hashes: Sequence[Any], parent: Any, tokens: int) -> str:
    return _("vLLM's first event: {kind} of {n} blocks, named {hashes} ({type}s), parent "
             "{parent}, {tokens} tokens").format(kind=kind, n=len(hashes), hashes=hashes,
                                                 type=type(hashes[0]).__name__,
                                                 parent=parent, tokens=tokens)


def events_equal(equal: bool, from_vllm: int, from_pagedkit: int) -> str:
    return _("events equal event for event: {equal} ({vllm} from vLLM, {pagedkit} from "
             "pagedkit)").format(equal=equal, vllm=from_vllm, pagedkit=from_pagedkit)


def caches_equal(equal: bool) -> str:
    return _("cached blocks equal hash for hash: {equal}").format(equal=equal)


def blocks_equal(steps: int, equal: bool) -> str:
    return _("blocks in use equal after every one of {steps} steps: {equal}").format(
        steps=steps, equal=equal)


def preemptions_and_hits(vllm_preemptions: int, pagedkit_preemptions: int,
                         vllm_cached: Sequence[int], pagedkit_cached: Sequence[int]) -> str:
    return _("preemptions: vLLM {vllm}, pagedkit {pagedkit}; prompt tokens from the cache: "
             "vLLM {vllm_cached}, pagedkit {pagedkit_cached}").format(
        vllm=vllm_preemptions, pagedkit=pagedkit_preemptions,
        vllm_cached=list(vllm_cached), pagedkit_cached=list(pagedkit_cached))


def same_tree(equal: bool, batches: int) -> str:
    return _("the two views show the same tree after every batch: {equal} ({batches} "
             "batches each)").format(equal=equal, batches=batches)


def block_size(tokens: int) -> str:
    return _("block size: {tokens} tokens (vLLM's CPU backend accepts multiples of 32 only; "
             "pagedkit takes any size, its default is 16)").format(tokens=tokens)


def null_block(num_blocks: int, null: int) -> str:
    return _("vLLM's pool: {num_blocks} blocks, block {null} is its null block (a "
             "placeholder it never hands out): {usable} usable").format(
        num_blocks=num_blocks, null=null, usable=num_blocks - 1)


def chunked_prefill(enabled: bool, budget: int) -> str:
    return _("chunked prefill: {enabled}; token budget per step: {budget}").format(
        enabled=enabled, budget=budget)


def block_names(algorithm: str) -> str:
    return _("block names: vLLM {algorithm!r}").format(algorithm=algorithm)


def speed(system: str, tokens_per_s: float, mean_latency_s: float) -> str:
    return _("{system:>8}: {tokens_per_s:6.1f} output tokens/s, mean latency "
             "{latency:.2f} s").format(system=system, tokens_per_s=tokens_per_s,
                                       latency=mean_latency_s)


def load_now(load: Any, cores: int | None) -> str:
    return _("load average now: {load} (this machine's cores: {cores})").format(
        load=load, cores=cores)


def closed() -> str:
    return _("vLLM closed")


def cache_manager_inside(coordinator: str, managers: Sequence[str]) -> str:
    return _("inside vLLM's cache manager: {coordinator} over {managers}").format(
        coordinator=coordinator, managers=list(managers))


def block_fields(block_class: str, fields: Sequence[str]) -> str:
    return _("a vLLM block: {block_class} with fields {fields}").format(
        block_class=block_class, fields=list(fields))
