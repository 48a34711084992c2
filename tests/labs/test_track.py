"""The build track (`pagedkit.exercises.track`): the reference solutions of
labs 03-07, plugged into the engine together, serve the bench workload —
preemption by recomputation and by swapping, prefix caching, forked samples
with copy-on-write — with tokens equal to transformers' `generate` and state
equal to pagedkit's own after every step; and every plausible wrong answer
to a plugged-in piece (tests/labs/wrong_answers.py) is stopped at a named
step, naming that piece."""

import dataclasses
import importlib.util
import os
from pathlib import Path

import pytest

from pagedkit import LLM, SamplingParams, ops
from pagedkit.exercises import track

from .wrong_answers import WRONG

SOLUTIONS = Path(__file__).resolve().parents[2] / "labs" / "solutions"
TRACK_LABS = ("lab03_paging", "lab04_paged_attention", "lab05_continuous_batching",
              "lab06_preemption", "lab07_sharing", "lab08_full_engine")


def _load(stem: str):
    spec = importlib.util.spec_from_file_location(f"track_{stem}", SOLUTIONS / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reference():
    namespace = {}
    for stem in TRACK_LABS:
        namespace.update(vars(_load(stem)))
    pieces = track.Pieces.from_namespace(namespace)
    assert pieces.plugged() == list(track.PIECES)
    return pieces


@pytest.fixture(scope="module")
def requests():
    return track.bench_requests()


@pytest.fixture(scope="module")
def expected(requests):
    return track.transformers_tokens(requests)


@pytest.mark.parametrize("scenario", ["recompute", "swap"])
def test_the_whole_track_serves_the_bench_workload_like_transformers(reference, requests,
                                                                     expected, scenario):
    run = track.lockstep(reference, requests, **track.SCENARIOS[scenario])
    assert run.passed, repr(run)
    assert run.outputs == expected
    assert run.num_preemptions > 0          # memory ran short and someone gave way
    assert run.num_cached_tokens > 0        # prompts shared blocks through the prefix cache
    assert len(run.outputs[str(len(requests) - 1)]) == 3   # forked samples (copy-on-write)
    assert "✅ lockstep" in repr(run)


@pytest.mark.parametrize("scenario", ["chunked", "budget", "whole", "admission", "memory",
                                      "memory_chunked"])
def test_the_whole_track_matches_pagedkit_step_by_step(reference, requests, expected,
                                                       scenario):
    run = track.lockstep(reference, requests, **track.SCENARIOS[scenario])
    assert run.passed, repr(run)
    assert run.outputs == expected


def _plugged_wrong_answers():
    for (lab, name), fns in WRONG.items():
        if name in track.PIECES:
            for fn in fns:
                yield pytest.param(name, fn, id=f"{lab}.{name}.{fn.__name__}")


def test_two_victims_for_one_pair(reference):
    requests = track.pair_requests()
    run = track.lockstep(reference, requests, **track.SCENARIOS["pair"])
    assert run.passed, repr(run)
    assert run.outputs == track.transformers_tokens(requests)
    assert run.num_preemptions > 0


@pytest.mark.parametrize("name, wrong", list(_plugged_wrong_answers()))
def test_a_wrong_piece_is_stopped_at_a_named_step(reference, name, wrong):
    # track.check is what the labs' build-track cells run
    pieces = dataclasses.replace(reference, **{name: wrong})
    run = track.check(pieces, log=lambda line: None)
    assert not run.passed, f"{wrong.__name__} served every scenario like pagedkit"
    assert run.divergence.pieces == [name], repr(run)   # the wrong piece, and only it
    assert repr(run).startswith(f"❌ lockstep: step {run.divergence.step}: ")
    assert f"your {name} (lab " in repr(run)


def test_plug_in_touches_only_its_own_engine(reference):
    mine, theirs = LLM("tiny", num_blocks=32, block_size=4), LLM("tiny", num_blocks=32,
                                                                block_size=4)
    track.plug_in(mine, reference)
    params = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    assert "allocate_slots" in vars(mine.llm_engine.kv)
    assert "allocate_slots" not in vars(theirs.llm_engine.kv)
    got = mine.generate(["Once upon a time"], params, use_tqdm=False)[0].outputs[0].token_ids
    want = theirs.generate(["Once upon a time"], params, use_tqdm=False)[0].outputs[0].token_ids
    assert got == want
    assert not ops.OVERRIDES                        # the attention override is per step
    track.unplug(mine)
    for name in ("allocate_slots", "cached_prefix"):
        assert name not in vars(mine.llm_engine.kv)
    for name in ("_schedule_waiting", "_schedule_running"):
        assert name not in vars(mine.llm_engine.scheduler)
    assert "step" not in vars(mine.llm_engine)


def test_plugged_context_gives_pagedkits_pieces_back(reference):
    llm = LLM("tiny", num_blocks=32, block_size=4)
    with track.plugged(llm, reference):
        assert "_schedule_waiting" in vars(llm.llm_engine.scheduler)
    assert "_schedule_waiting" not in vars(llm.llm_engine.scheduler)


def test_misuse_is_refused():
    llm = LLM("tiny", num_blocks=16, block_size=4)
    with pytest.raises(TypeError, match="needs a Pieces"):
        track.plug_in(llm, {"admit": print})
    with pytest.raises(TypeError, match="admit must be a function"):
        track.plug_in(llm, track.Pieces(admit=3))
    assert "_schedule_waiting" not in vars(llm.llm_engine.scheduler)


def test_a_piece_that_raises_is_named_not_raised(reference, requests):
    def broken(*args):
        raise KeyError("oops")

    run = track.lockstep(dataclasses.replace(reference, append_slots=broken), requests[:2],
                         **track.SCENARIOS["recompute"])
    assert not run.passed and run.divergence.step == 0
    assert run.divergence.pieces == ["append_slots"]
    assert "raised KeyError" in repr(run)


def test_pagedkits_own_pieces_alone_pass(requests):
    run = track.lockstep(track.Pieces(), requests[:3], **track.SCENARIOS["memory"])
    assert run.passed and run.plugged == []


def test_saved_pieces_come_back_in_a_later_lab(tmp_path, monkeypatch, reference):
    monkeypatch.setenv("PAGEDKIT_TRACK", str(tmp_path / "my_engine.py"))
    assert track.load().plugged() == []
    # a notebook's functions: saving append_slots brings the helpers it calls along
    source = (SOLUTIONS / "lab03_paging.py").read_text()
    notebook = tmp_path / "notebook.py"
    notebook.write_text(source)
    spec = importlib.util.spec_from_file_location("notebook", notebook)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    track.save(module.append_slots)
    saved = (tmp_path / "my_engine.py").read_text()
    assert "def blocks_needed" in saved and "def slot_of" in saved   # its helpers
    assert "def token_at" not in saved                              # not called by it
    track.save(reference.admit)
    pieces = track.load()
    assert pieces.plugged() == ["admit", "append_slots"]
    assert pieces.append_slots([], 0, 3, 4, [5, 1]) == [20, 21, 22]
    with pytest.raises(TypeError, match="save needs your functions"):
        track.save(print)


def test_a_stub_is_not_written_yet(requests):
    def append_slots(block_table, num_tokens, num_new_tokens, block_size, free_blocks):
        raise NotImplementedError

    def paged_decode_attention(query, k_cache, v_cache, block_table, context_len):
        raise NotImplementedError

    for pieces in (track.Pieces(append_slots=append_slots),
                   track.Pieces(paged_decode_attention=paged_decode_attention)):
        run = track.lockstep(pieces, requests[:2], **track.SCENARIOS["recompute"])
        assert not run.passed and "not written yet" in repr(run), repr(run)
        assert run.divergence.pieces == pieces.plugged()



def test_the_tests_never_overwrite_a_learners_saved_pieces():
    # labs 03-08 save their (stub) pieces as they run under nbval: conftest.py
    # points the track at a file of the tests' own, never the learner's
    path = track.pieces_path()
    assert path == Path(os.environ["PAGEDKIT_TRACK"])
    assert Path.home() / ".pagedkit" not in path.parents


def test_the_tests_leave_no_track_folder_behind(tmp_path):
    """Newcomer 8, finding 15: conftest.py's folder for the tests' track file is
    removed when pytest ends (515 were left in /tmp), here by a pytest run that
    collects this file, with its temporary folders in a folder of this test's."""
    import subprocess
    import sys

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", __file__], env=env, cwd=SOLUTIONS.parents[1],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_the_tests_leave_no_track_folder_behind" in done.stdout
    assert list(tmp_path.glob("pagedkit-track-*")) == []


def test_check_runs_every_scenario_for_pieces_that_agree(reference):
    lines = []
    run = track.check(reference, log=lines.append)
    assert run.passed, repr(run)
    assert [line.split(":")[0].strip() for line in lines] == list(track.CHECK_ORDER)
    assert set(track.CHECK_ORDER) == set(track.SCENARIOS)
    with pytest.raises(ValueError, match="unknown scenario 'fast'"):
        track.check(reference, scenarios=["fast"])


NOTEBOOK = '''
import torch.nn.functional as F
from pagedkit.kernels import reference
from pagedkit.memory import hash_block as name_block
SCALE = 2
LIMIT = [1]


def chain_hashes(x, block_size=None):  # named as a piece: save keeps only pieces
    return F.relu(torch.tensor([x])).item() * SCALE, reference.__name__, name_block.__name__


def admit(x, *rest):
    return LIMIT[0] + x


def append_slots(block_table, num_tokens, num_new_tokens, block_size, free_blocks):
    """not written yet"""
    # YOUR CODE HERE
    raise NotImplementedError
'''


def _notebook(tmp_path):
    path = tmp_path / "notebook.py"
    path.write_text("import torch\n" + NOTEBOOK)
    spec = importlib.util.spec_from_file_location("notebook", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_saved_pieces_keep_the_imports_and_constants_they_use(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGEDKIT_TRACK", str(tmp_path / "my_engine.py"))
    notebook = _notebook(tmp_path)
    track.save(notebook.chain_hashes)
    track.save(notebook.chain_hashes)  # saved twice: each line once
    saved = (tmp_path / "my_engine.py").read_text()
    for line in ("import torch.nn.functional as F",
                 "import pagedkit.kernels.reference as reference",
                 "import hash_block as name_block", "SCALE = 2", "import torch\n"):
        assert saved.count(line) == 1, saved
    namespace = {}
    exec(compile(saved, "my_engine.py", "exec"), namespace)
    assert namespace["chain_hashes"](3) == (6.0, "pagedkit.kernels.reference", "hash_block")
    with pytest.raises(TypeError, match=r"uses the notebook's 'LIMIT' \(list\)"):
        track.save(notebook.admit)


def test_every_reference_piece_saves_and_serves_from_the_saved_file(tmp_path, monkeypatch,
                                                                   reference, requests):
    """Each lab's reference solution, saved as a learner saves it (lab 07's
    chain_hashes uses the bytes constant ROOT_HASH, as its exercise asks),
    comes back from the file and serves like pagedkit."""
    monkeypatch.setenv("PAGEDKIT_TRACK", str(tmp_path / "my_engine.py"))
    for name in track.PIECES:
        track.save(getattr(reference, name), log=lambda _: None)
    pieces = track.load()
    assert pieces.plugged() == list(track.PIECES)
    run = track.lockstep(pieces, requests[:3], **track.SCENARIOS["memory"])
    assert run.passed, repr(run)


def test_a_stub_is_not_saved_and_a_piece_can_be_forgotten(tmp_path, monkeypatch, reference):
    monkeypatch.setenv("PAGEDKIT_TRACK", str(tmp_path / "my_engine.py"))
    said = []
    track.save(_notebook(tmp_path).append_slots, log=said.append)
    assert said == ["append_slots is not written yet: not saved (pagedkit's own runs in its "
                    "place)"]
    assert track.load().plugged() == []
    said.clear()
    path = track.save(reference.admit, _notebook(tmp_path).append_slots, reference.chain_hashes,
                      log=said.append)
    assert said[-1] == (f"saved admit, chain_hashes in {path} (track.load() gives your "
                        "pieces back; track.forget drops one)")  # it said nothing
    assert path == tmp_path / "my_engine.py" and len(said) == 2  # and the stub's line
    track.forget("chain_hashes")
    track.save(reference.admit, reference.append_slots)
    assert track.load().plugged() == ["admit", "append_slots"]
    track.forget("append_slots")
    assert track.load().plugged() == ["admit"]
    with pytest.raises(ValueError, match="'nope' is not one of the pieces"):
        track.forget("nope")


def test_lab08s_cell_with_nothing_saved_says_so_once(tmp_path, monkeypatch, capsys):
    """Newcomer 8, finding 13: lab 08's build-track cell, nothing saved and its
    own top_p_filter a stub, says once that nothing is saved, naming the labs
    that save pieces (lab 08 saves one too: its range comes from track's own
    list of pieces and labs)."""
    import json

    monkeypatch.setenv("PAGEDKIT_TRACK", str(tmp_path / "my_engine.py"))
    cells = json.loads((SOLUTIONS.parent / "08_full_engine.ipynb").read_text())["cells"]
    [cell] = [c for c in cells if "build-track" in c["metadata"].get("tags", [])
              and c["cell_type"] == "code"]
    stub = tmp_path / "lab08_notebook.py"
    stub.write_text("def top_p_filter(logits, top_p):\n    raise NotImplementedError\n")
    spec = importlib.util.spec_from_file_location("lab08_notebook", stub)
    notebook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(notebook)
    exec("".join(cell["source"]), vars(notebook))
    labs = sorted(set(track._LAB.values()))
    assert labs[0] == "03" and "08" in labs
    assert capsys.readouterr().out.splitlines() == [
        "top_p_filter is not written yet: not saved (pagedkit's own runs in its place)",
        f"none of your pieces is saved yet (track.save in labs {labs[0]}-{labs[-1]}): "
        "nothing to check"]


def test_an_empty_track_path_turns_the_track_off(monkeypatch, reference):
    monkeypatch.setenv("PAGEDKIT_TRACK", "")
    said = []
    assert track.save(reference.admit, log=said.append) is None
    assert said == ["the build track is off here (PAGEDKIT_TRACK is empty): nothing saved"]
    assert track.load().plugged() == []
    assert track.check(track.load(), log=said.append) is None


def test_top_p_filter_serves_sampled_requests_like_pagedkit(reference):
    """Lab 08's seam (#28): the sampled requests (seeded, top-p below 1) draw the
    same tokens through the learner's top_p_filter as through pagedkit's."""
    calls = []

    def counted(logits, top_p):
        calls.append(top_p)
        return reference.top_p_filter(logits, top_p)

    pieces = dataclasses.replace(reference, top_p_filter=counted)
    run = track.lockstep(pieces, track.sampled_requests(), **track.SCENARIOS["sampling"])
    assert run.passed, repr(run)
    assert len(calls) > 10 and _TIE in calls       # real rows, and the tie probe each step
    from pagedkit.model import sampler
    assert sampler.filter_logits.__module__ == "pagedkit.model.sampler"   # put back


_TIE = 0.75


def test_salted_prompts_serve_like_pagedkit(reference):
    """vLLM's cache_salt reached the engine's cached_prefix and allocate_slots
    (f6964d6), and the track's stand-ins refused the keyword: every plugged
    engine failed at its first step. A salted request's blocks are named with
    the salt, which lab 07's chain_hashes does not know, so pagedkit looks
    them up; unsalted ones still go through the learner's names. Tokens and
    cache hits equal pagedkit's own, prompt by prompt (equal salts share,
    other salts and none do not)."""
    prefix = "Once upon a time there was a little robot who lived in a big city and "
    prompts = [{"prompt": prefix + end, "cache_salt": salt} if salt else prefix + end
               for end, salt in (("it", "a"), ("she", "a"), ("he", "b"), ("we", None),
                                 ("they", None), ("you", "b"))]
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)

    def serve(llm):
        outs = [llm.generate([p], params, use_tqdm=False)[0] for p in prompts]
        return [(o.outputs[0].token_ids, o.num_cached_tokens) for o in outs]

    mine = track.plug_in(LLM("tiny", num_blocks=64, block_size=4), reference)
    want = serve(LLM("tiny", num_blocks=64, block_size=4))
    assert serve(mine) == want
    hits = [num_cached for _ids, num_cached in want]
    assert [bool(h) for h in hits] == [False, True, False, False, True, True], hits


#: the wrong attentions whose scaled probe gives inf or NaN: exp() overflows float32
OVERFLOWING = {"attention_softmax_without_the_max"}


@pytest.mark.parametrize("wrong", WRONG[("lab04", "paged_decode_attention")],
                         ids=lambda fn: fn.__name__)
def test_only_an_overflow_is_told_it_overflows(reference, requests, wrong):
    # newcomer 14: a finite difference (heads tiled, a head_dim scale) was blamed on exp()
    run = track.lockstep(dataclasses.replace(reference, paged_decode_attention=wrong),
                         requests[:3], **track.SCENARIOS["recompute"])
    assert not run.passed
    assert ("exp(score) overflows float32" in repr(run)) == (wrong.__name__ in OVERFLOWING), \
        repr(run)
    if "scaled by 64" in repr(run) and wrong.__name__ not in OVERFLOWING:
        assert "all finite, so not an overflow" in repr(run), repr(run)


def test_the_build_track_doc_reads_at_the_study_rules_rate():
    # newcomer 14: docs/build_track.md read at 200 words a minute, `bench study` at 100
    import re

    from pagedkit.bench.study import SECONDS_PER_CELL, SECONDS_PER_CODE_LINE, WORDS_PER_MINUTE

    doc = (Path(__file__).resolve().parents[2] / "docs" / "build_track.md").read_text()
    rates = re.findall(r"(\d+) words (?:of prose )?a minute", doc)
    assert rates and set(rates) == {str(WORDS_PER_MINUTE)}, rates
    assert f"{SECONDS_PER_CODE_LINE} s per line of code, {SECONDS_PER_CELL} s per code cell" in doc
