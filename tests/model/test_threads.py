"""The per-step thread choice (pagedkit.model.threads): measured with a fake
clock, so every test is deterministic — a step "costs" what the test says the
thread count it runs on costs, whatever the machine does."""

import itertools
import os
import time

import pytest
import torch

from pagedkit.model import threads
from pagedkit.model.threads import MAX_GAP, MIN_GAP, SHARE, ThreadChooser


class Machine:
    """A fake clock whose steps cost ``cost[threads]`` seconds."""

    def __init__(self, cost):
        self.cost, self.now, self.seen = dict(cost), 0.0, []

    def __call__(self):
        return self.now

    def run(self, chooser, steps, macs=1000, key=None):
        """Run `steps` steps; returns the thread count of each."""
        got = []
        for _ in range(steps):
            with chooser.step(macs, key) as n:
                assert torch.get_num_threads() == n
                self.seen.append(n)
                self.now += self.cost[n]
            got.append(n)
        return got


@pytest.fixture
def two_threads():
    """torch allowed 2 threads for the test (a user's set_num_threads)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


def tried(seq, arm):
    return [i for i, n in enumerate(seq) if n == arm]


def test_runs_the_faster_arm_after_a_warm_up_and_one_try_of_each(two_threads):
    for cost, fast in (({1: 1.0, 2: 0.8}, 2), ({1: 1.0, 2: 1.3}, 1)):
        clock = Machine(cost)
        seq = clock.run(ThreadChooser(clock), 200)
        assert seq[:3] == [1, 1, 2]  # warm-up (untimed), one thread, two threads
        assert seq[3:3 + MIN_GAP] == [fast] * MIN_GAP
        slow = 3 - fast
        assert len(tried(seq[3:], slow)) <= 200 / (MIN_GAP + 1)


def test_the_slower_arm_is_retried_with_exponential_backoff(two_threads):
    """A cheap loser (10% slower): the step gap decides — re-tried after
    8, 16, 32, ... steps on the winner, up to MAX_GAP."""
    clock = Machine({1: 1.0, 2: 1.1})
    seq = clock.run(ThreadChooser(clock), 3 + 2000)
    retries = tried(seq, 2)
    assert retries[0] == 2  # the first try
    gaps = [b - a - 1 for a, b in itertools.pairwise(retries)]
    expected = [min(MIN_GAP * 2**i, MAX_GAP) for i in range(len(gaps))]
    assert gaps == expected and gaps[-1] == MAX_GAP


def test_an_expensive_loser_waits_until_its_cost_is_a_small_share(two_threads):
    """A loaded machine: two threads cost 13 steps. A re-try is expected to
    lose 12 steps' time, so it waits for 12 / SHARE = 240 steps on one."""
    clock = Machine({1: 1.0, 2: 13.0})
    seq = clock.run(ThreadChooser(clock), 1000)
    retries = tried(seq, 2)
    assert retries[0] == 2
    gaps = [b - a - 1 for a, b in itertools.pairwise(retries)]
    assert len(gaps) >= 3 and set(gaps) == {round(12 / SHARE)}


@pytest.mark.parametrize("one, two", [(1.0, 0.5), (1.0, 0.9), (1.0, 0.99), (1.0, 1.01),
                                      (1.0, 1.1), (1.0, 2.0), (1.0, 13.0), (1.0, 100.0)])
def test_time_lost_to_retries_is_within_the_stated_share(two_threads, one, two):
    """What the docstring claims: after the warm-up and the first try, the
    time lost to running the slower arm is at most SHARE of the time on the
    faster one, and at most one step in MIN_GAP + 1."""
    clock = Machine({1: one, 2: two})
    seq = clock.run(ThreadChooser(clock), 3000)
    fast = min(clock.cost, key=clock.cost.get)
    slow = 3 - fast
    rest = seq[3:]
    lost = rest.count(slow) * (clock.cost[slow] - clock.cost[fast])
    on_fast = rest.count(fast) * clock.cost[fast]
    assert lost <= SHARE * on_fast
    assert rest.count(slow) <= len(rest) / (MIN_GAP + 1)


def test_it_follows_the_machine_when_the_load_changes(two_threads):
    """Quiet: two threads win. The machine gets busy: the very next step
    after one slow one runs on one thread. Quiet again: two threads are
    re-tried, within the share bound, and win back."""
    clock = Machine({1: 1.0, 2: 0.8})
    chooser = ThreadChooser(clock)
    assert clock.run(chooser, 50)[-10:] == [2] * 10
    clock.cost[2] = 13.0  # busy
    busy = clock.run(chooser, 300)
    assert busy[:2] == [2, 1]  # one slow step, then off two threads
    assert busy[2:].count(2) <= 2
    clock.cost[2] = 0.8  # quiet again
    quiet = clock.run(chooser, 300)
    first = quiet.index(2)
    assert first <= 300 - 50  # re-tried: after 12 / SHARE steps at most
    back = quiet[first:]
    assert back.count(1) <= len(back) / (MIN_GAP + 1)


def test_classes_learn_apart_and_only_the_first_class_tries_blind(two_threads):
    """Steps of another power of two of work, or of another model, have their
    own estimates; an untried arm borrows the ratio of the nearest class that
    timed both (this model's, else any), so on a loaded machine no class but
    the first pays for two threads blind."""
    clock = Machine({1: 1.0, 2: 13.0})
    chooser = ThreadChooser(clock)
    assert clock.run(chooser, 10, macs=1000)[:3] == [1, 1, 2]
    assert clock.run(chooser, 200, macs=4000) == [1] * 200
    other = clock.run(chooser, 200, macs=1000, key="other model")
    # one re-try of two threads in all, once 12 / SHARE = 240 steps ran on one
    # (the schedule is the process's, not the class's: 7 + 198 + 35 steps on one
    # thread; a class's warm-up and first timed step are not counted)
    assert tried(other, 2) == [37]
    # a model's own classes are preferred to a nearer one of another model
    clock = Machine({1: 1.0, 2: 0.5})
    chooser = ThreadChooser(clock)
    assert clock.run(chooser, 4, macs=2**20, key="a") == [1, 1, 2, 2]
    clock.cost[2] = 13.0
    assert clock.run(chooser, 4, macs=2**12, key="b") == [1, 1, 2, 1]  # a's ratio, then its own
    assert clock.run(chooser, 3, macs=2**13, key="a") == [1, 1, 2]  # a's ratio, not b's
    # on a quiet machine the borrowed ratio sends a new class to two threads at once
    clock = Machine({1: 1.0, 2: 0.8})
    chooser = ThreadChooser(clock)
    clock.run(chooser, 10, macs=1000)
    assert clock.run(chooser, 5, macs=4000) == [1, 1, 2, 2, 2]


class Free:
    """A fake `IdleCores`: the CPUs' worth free to the process, counting its calls."""

    def __init__(self, cpus):
        self.cpus, self.calls = cpus, 0

    def __call__(self):
        self.calls += 1
        return self.cpus


def test_with_the_cpus_free_a_process_starts_on_all_threads(two_threads):
    """Issue #25: before any class has timed both arms there is no ratio to
    borrow; with both CPUs free the first steps (a fresh process's prompts)
    run on two threads, then one thread is timed at once."""
    clock, free = Machine({1: 1.0, 2: 0.6}), Free(2.0)
    chooser = ThreadChooser(clock, idle=free)
    seq = clock.run(chooser, 20)
    assert seq[:4] == [2, 2, 1, 2]  # warm-up and first time on two, one thread's time, the faster
    assert free.calls == 1  # asked once for the class, not per step
    # once a class has timed both, a new class starts where the nearest runs fastest, if
    # the CPUs are still free (asked again), then times one thread at once: the start
    # is a guess, and a class must not stay on it on a borrowed ratio alone
    assert clock.run(chooser, 4, macs=10**6) == [2, 2, 1, 2]
    assert free.calls == 2
    # where the nearest runs fastest on one thread, a new class starts there, not asking
    clock.cost[2] = 13.0
    clock.run(chooser, 60, macs=10**6)
    assert clock.run(chooser, 4, macs=10**9) == [1, 1, 1, 1]
    assert free.calls == 2


@pytest.mark.parametrize("gap_steps", [0, 10, 30, 100, 600])
def test_load_after_a_wrong_free_reading_costs_a_new_class_two_steps(two_threads, gap_steps):
    """Review of issue #25's change: the CPUs look free (a stale reading), the
    nearest class runs fastest on two threads, but the load has just arrived.
    A new class pays its warm-up and one timed step on two threads, then
    times one thread at once and stays there, whatever the process's re-try
    schedule has grown to (`gap_steps` steps of another class before)."""
    clock = Machine({1: 1.0, 2: 0.9})
    chooser = ThreadChooser(clock, idle=Free(2.0))
    clock.run(chooser, 20 + gap_steps)
    clock.cost[2] = 13.0
    seq = clock.run(chooser, 300, macs=10**9)
    assert seq[:3] == [2, 2, 1] and seq[3:3 + 200].count(2) == 0


def test_busy_cpus_send_a_new_class_to_one_thread_whatever_the_nearest_says(two_threads):
    clock, free = Machine({1: 1.0, 2: 0.6}), Free(2.0)
    chooser = ThreadChooser(clock, idle=free)
    clock.run(chooser, 20)
    free.cpus = 1.0  # another process took a CPU
    assert clock.run(chooser, 3, macs=10**6) == [1, 1, 2]  # then the borrowed ratio


def test_retries_are_one_schedule_for_the_process_not_one_per_class(two_threads):
    """Issue #25: a run's steps fall into many classes (every power of two of
    work), most of them young. Starting each on one thread and re-trying
    the slower arm per class ran a 64-request run of the larger model 17-28
    of ~160 steps on one thread on a quiet machine. With the CPUs free (as
    `IdleCores` reads them there) and one schedule for the process, the time
    lost to one-thread steps stays within SHARE of the time on two threads,
    plus one step's difference."""
    # bench engine's warm-up, then the prompts (large steps), then decode
    # steps of a shrinking batch
    pattern = ([2**7] * 4 + [2**20] * 5 + [2**19] * 2 + [2**14] * 20 + [2**13] * 30
               + [2**12] * 30 + [2**11] * 30 + [2**10] * 20 + [2**9] * 20)
    for one, two in ((1.6, 1.0), (1.2, 1.0)):
        clock = Machine({1: one, 2: two})
        chooser = ThreadChooser(clock, idle=Free(2.0))
        seq = [clock.run(chooser, 1, macs=macs)[0] for macs in pattern]
        lost = seq.count(1) * (one - two)
        assert lost <= SHARE * seq.count(2) * two + (one - two)
        assert seq[:2] == [2, 2] and seq.count(1) <= len(seq) / (MIN_GAP + 1)


@pytest.mark.parametrize("cpus", [None, 1.0, 1.79])
def test_with_a_cpu_busy_or_unknown_a_process_starts_on_one(two_threads, cpus):
    """One CPU's worth taken by others (or no /proc/stat): as before, one
    thread first, then two threads once, blind."""
    clock = Machine({1: 1.0, 2: 0.6})
    assert clock.run(ThreadChooser(clock, idle=Free(cpus)), 5)[:4] == [1, 1, 2, 2]


def test_a_wrong_free_reading_costs_one_warm_up_and_one_step(two_threads):
    """The CPUs looked free but two threads are slow: after the warm-up and one
    timed step on two, one thread is timed and kept (the expensive loser waits)."""
    clock = Machine({1: 1.0, 2: 13.0})
    seq = clock.run(ThreadChooser(clock, idle=Free(2.0)), 200)
    assert seq[:3] == [2, 2, 1] and seq[3:].count(2) == 0


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or not os.path.exists("/proc/stat"),
                    reason="no /proc/stat here")
def test_idle_cores_reads_the_cpus_free_to_this_process():
    free = threads.IdleCores()
    assert free() is None  # a window under MIN_TICKS says nothing
    end = time.process_time() + 0.4
    while time.process_time() < end:  # this process's own work counts as free to it
        pass
    got = free()
    assert got is not None and 0 < got <= len(free.cpus)
    assert free() == got  # a window too short since: the last reading again


@pytest.mark.parametrize("allowed", [1, 2, 3])
def test_never_more_threads_than_torch_allows_and_the_count_is_restored(allowed):
    """Whatever torch.set_num_threads allows is the upper bound; a step runs
    on 1 or all of it; afterwards the user's count is back. With one thread
    allowed nothing is timed (the clock must not be read)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(allowed)
    try:
        if allowed == 1:
            def clock():
                raise AssertionError("timed a step with one thread available")
            chooser = ThreadChooser(clock)
            for _ in range(20):
                with chooser.step(10**9) as n:
                    assert n == torch.get_num_threads() == 1
            assert chooser.counts == {1: 20}
            return
        clock = Machine({1: 1.0, allowed: 0.5})
        chooser = ThreadChooser(clock)
        for macs in (0, 1, 10**6, 10**12):
            clock.run(chooser, 30, macs=macs)
            assert torch.get_num_threads() == allowed
        assert set(clock.seen) == {1, allowed}
        torch.set_num_threads(allowed - 1)  # the user lowers it: the new bound holds at once
        clock.cost[allowed - 1] = 0.5
        clock.seen.clear()
        clock.run(chooser, 30)
        assert max(clock.seen) == allowed - 1 and torch.get_num_threads() == allowed - 1
    finally:
        torch.set_num_threads(previous)


def test_a_failing_step_restores_the_count_and_is_not_timed(two_threads):
    clock = Machine({1: 1.0, 2: 0.5})
    chooser = ThreadChooser(clock)
    clock.run(chooser, 20)
    state = repr(chooser._classes)
    with pytest.raises(RuntimeError, match="inside"), chooser.step(1000) as n:
        assert n == torch.get_num_threads() == 2
        clock.now += 1000.0  # a failed step's time says nothing about the arm
        raise RuntimeError("inside")
    assert torch.get_num_threads() == 2
    assert repr(chooser._classes) == state and sum(chooser.counts.values()) == 20


@pytest.mark.parametrize("macs", [-1, 1.5, "10", True, None])
def test_bad_work_is_refused(macs):
    with pytest.raises(ValueError, match="macs must be a non-negative integer"), \
            ThreadChooser().step(macs):
        pass


def test_step_threads_leaves_threads_alone_off_the_cpu(monkeypatch, two_threads):
    """On CUDA the forward is asynchronous (a timer would time the launch),
    and torch's CPU threads do not run it: no choice, no timing."""
    monkeypatch.setattr(threads, "CHOOSER", None)  # would fail if used
    with threads.step_threads(10**9, device=torch.device("cuda")) as n:
        assert n == torch.get_num_threads() == 2


# ------------------------------------------------------------- numerics
def _models():
    from transformers import LlamaConfig, LlamaForCausalLM

    from pagedkit.models import load_tiny

    torch.manual_seed(0)
    wide = LlamaForCausalLM(LlamaConfig(
        vocab_size=256, hidden_size=768, intermediate_size=2048, num_hidden_layers=1,
        num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=512)).eval()
    return {"tiny": load_tiny()[0], "wide": wide}


@pytest.fixture(scope="module")
def models():
    return _models()


@pytest.mark.parametrize("name", ["tiny", "wide"])
@pytest.mark.parametrize("num_tokens", [1, 7, 64, 300])
def test_logits_on_one_and_two_threads(models, name, num_tokens):
    """The tiny model's ops split rows over threads, not sums, so one thread
    and two compute the same bits. A wider model's need not: MKL splits the
    inner sum of some products over two threads (on an AVX-512 Xeon, the
    MLP's down projection, 2048 -> 768, at 128 rows: fourth newcomer, F18),
    so its logits agree to float32 rounding and its greedy tokens are the
    same, but not every bit (pagedkit.model.threads says so)."""
    model = models[name]
    ids = torch.randint(0, model.config.vocab_size, (2, num_tokens),
                        generator=torch.Generator().manual_seed(num_tokens))
    out = {}
    for n in (1, 2):
        with threads.intra_op_threads(n), torch.inference_mode():
            out[n] = model(input_ids=ids).logits
    if name == "tiny":
        assert torch.equal(out[1], out[2])
    else:
        torch.testing.assert_close(out[1], out[2], rtol=0, atol=1e-5)
        assert torch.equal(out[1].argmax(-1), out[2].argmax(-1))


@pytest.mark.parametrize("n_threads", [1, 2])
def test_engine_tokens_equal_transformers_on_one_and_two_threads(models, monkeypatch,
                                                                  n_threads):
    """The engine's greedy tokens equal transformers' generate (run on one
    thread) when its steps run on one thread and when they run on two
    (a fake clock that makes two threads fast, so the chooser picks them)."""
    from pagedkit import LLM, SamplingParams

    model = models["tiny"]
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, model.config.vocab_size, (n,), generator=g).tolist()
               for n in (1, 17, 40, 9)]
    expected = []
    with threads.intra_op_threads(1), torch.inference_mode():
        for p in prompts:
            ids = model.generate(torch.tensor([p]), max_new_tokens=12, do_sample=False,
                                 eos_token_id=None, pad_token_id=0,
                                 attention_mask=torch.ones(1, len(p), dtype=torch.long))
            expected.append(ids[0, len(p):].tolist())
    clock = Machine({1: 1.0, 2: 0.01})

    def now():  # every step of the engine costs what its thread count costs
        clock.now += clock.cost[torch.get_num_threads()] / 2
        return clock.now

    chooser = ThreadChooser(now)
    monkeypatch.setattr(threads, "CHOOSER", chooser)
    with threads.intra_op_threads(n_threads):
        outs = LLM(model, block_size=8, max_num_seqs=2).generate(
            prompts, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True),
            use_tqdm=False)
        assert torch.get_num_threads() == n_threads
    assert [o.outputs[0].token_ids for o in outs] == expected
    if n_threads == 1:  # nothing to choose: the chooser is not asked
        assert not chooser.counts
    else:  # most steps ran on two threads
        assert chooser.counts[2] > 2 * chooser.counts[1]
