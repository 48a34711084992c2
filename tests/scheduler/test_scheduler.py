"""The engine's `Scheduler` on its own: a `KVCacheManager`, sequence groups of
token ids, and a loop that plays the model (one token per sampling sequence,
then `Scheduler.update`). Each test checks one rule of paper §4.5 at values
where it decides something."""

import pytest

from pagedkit.memory import KVCacheManager
from pagedkit.sampling_params import SamplingParams
from pagedkit.scheduler import Sampled, Scheduler, SchedulerConfig
from pagedkit.scheduler.policy import preemption_mode
from pagedkit.sequence import FinishReason, SequenceGroup, SequenceStatus


def make(num_blocks, *, block_size=4, swap_blocks=0, mode="recompute", max_num_seqs=8,
         max_tokens=64):
    kv = KVCacheManager(num_blocks, block_size, num_swap_blocks=swap_blocks)
    config = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_tokens,
                             preemption_mode=mode)
    return Scheduler(config, kv), kv


def add(sched, i, prompt_len, output_len):
    group = SequenceGroup.new(f"r{i}", None, [10 + i] * prompt_len,
                              SamplingParams(max_tokens=output_len, ignore_eos=True),
                              arrival_time=float(i), seq_id=i)
    sched.add(group)
    return group


def step(sched):
    """One step without a model: every sequence the step reaches the end of samples token 1."""
    out = sched.schedule()
    stops = []
    for s in out.scheduled:
        if s.computes_last_token:
            s.seq.token_ids.append(1)
            if len(s.seq.output_token_ids) >= s.group.params.max_tokens:
                stops.append((s.group, s.seq, FinishReason.LENGTH))
    done = sched.update(out, Sampled(stops=stops))
    return out, done


def ids(groups):
    return [g.request_id for g in groups]


def test_admission_is_first_come_first_served_under_the_sequence_cap():
    sched, _ = make(64, max_num_seqs=2)
    groups = [add(sched, i, 3, out) for i, out in enumerate((2, 5, 1))]
    out, _ = step(sched)
    assert ids(out.admitted) == ["r0", "r1"] and ids(sched.waiting) == ["r2"]
    out, done = step(sched)  # r0 produces its second and last token
    assert ids(done) == ["r0"] and not out.admitted
    out, _ = step(sched)  # its seat is free: r2 comes in
    assert ids(out.admitted) == ["r2"]
    assert all(g.seqs[0].num_computed_tokens > 0 for g in groups)


def test_a_head_that_does_not_fit_holds_back_everyone_behind_it():
    sched, kv = make(4)  # blocks of 4 tokens
    add(sched, 0, 8, 8)  # 2 blocks
    add(sched, 1, 12, 2)  # 3 blocks: not in the 2 left
    add(sched, 2, 1, 1)  # 1 block would fit, but it arrived after r1
    for _ in range(3):
        step(sched)
        assert ids(sched.running) == ["r0"] and ids(sched.waiting) == ["r1", "r2"]
    assert kv.allocator.num_free_blocks == 1  # r0 grew into a third block; r2's one would still fit


def test_the_update_writes_progress_and_frees_finished_sequences():
    sched, kv = make(16)
    group = add(sched, 0, 5, 3)
    out, _ = step(sched)
    seq = group.seqs[0]
    assert [s.num_tokens for s in out.scheduled] == [5] and seq.num_computed_tokens == 5
    assert len(seq.token_ids) == 6  # the sampled token, to be computed by the next step
    step(sched)
    _, done = step(sched)
    assert done == [group] and seq.status is SequenceStatus.FINISHED
    assert seq.finish_reason is FinishReason.LENGTH and kv.allocator.num_free_blocks == 16
    assert not sched.has_unfinished()


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_the_newest_running_group_is_preempted_and_returns_to_its_place(mode):
    sched, kv = make(4, swap_blocks=8 if mode == "swap" else 0, mode=mode)
    old, new = add(sched, 0, 4, 8), add(sched, 1, 4, 8)
    step(sched)  # both prompts: 1 block each
    preempted = []
    for _ in range(12):
        out, _ = step(sched)
        preempted += [(g.request_id, how) for g, how in out.preempted]
        if preempted:
            break
    assert preempted == [("r1", mode)]  # the newest goes, the oldest keeps running
    queue = sched.swapped if mode == "swap" else sched.waiting
    assert list(queue) == [new] and sched.running == [old]
    assert new.num_preemptions == 1 and sched.num_preemptions == 1
    if mode == "recompute":
        assert new.seqs[0].num_computed_tokens == 0 and new.seqs[0].seq_id not in kv
    else:
        assert new.seqs[0].status is SequenceStatus.SWAPPED
    while sched.has_unfinished():
        step(sched)
    assert old.is_finished and new.is_finished
    assert kv.allocator.num_free_blocks == 4 and kv.stats().swapped_blocks == 0


def test_nobody_is_admitted_while_a_group_is_swapped_out():
    sched, _ = make(4, swap_blocks=8, mode="swap")
    add(sched, 0, 4, 8)
    add(sched, 1, 4, 8)
    step(sched)
    while not sched.swapped:
        step(sched)
    late = add(sched, 2, 1, 1)  # one token would fit, but the swapped group is older
    held_back = 0
    while sched.swapped:
        out, _ = step(sched)
        if sched.swapped:  # still out after this step's swap-in phase: nobody came in
            assert not out.admitted
            held_back += 1
    assert held_back and ids(out.admitted) == ["r2"]  # in the step that brought it back
    assert late.seqs[0].num_computed_tokens == 1


def test_swap_without_cpu_room_falls_back_to_recompute():
    assert preemption_mode("swap", swap_fits=True) == "swap"
    assert preemption_mode("swap", swap_fits=False) == "recompute"
    assert preemption_mode("recompute", swap_fits=True) == "recompute"
    sched, _ = make(4, swap_blocks=1, mode="swap")  # 1 CPU block: a 2-block group won't go
    add(sched, 0, 4, 8)
    add(sched, 1, 4, 8)
    step(sched)
    while not sched.num_preemptions:
        out, _ = step(sched)
    assert [how for _, how in out.preempted] == ["recompute"] and not sched.swapped


def test_a_group_alone_that_outgrows_the_whole_pool_is_ended_with_the_reason():
    sched, kv = make(2)  # 8 slots
    group = add(sched, 0, 4, 10)
    ended = []
    while sched.has_unfinished():
        out, _ = step(sched)
        ended += out.ended
    assert ended == [group]
    assert group.seqs[0].finish_reason is FinishReason.LENGTH and kv.allocator.num_free_blocks == 2
