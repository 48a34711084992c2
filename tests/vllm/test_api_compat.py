"""The offline API on pagedkit and on vLLM, one script with only the import
changed (`pagedkit.vllm.api_check`): tokens, texts after stop strings,
finish and stop reasons, logprobs (within float tolerance), n > 1, chat
prompts, beam search results, streaming step outputs.

The two runs are recorded in tests/vllm/data/api_{pagedkit,vllm}.json, and
docs/api.md's compatibility table is what `api_check.table` makes of them.
Without vLLM: the table is checked against the records, and pagedkit's
record against a fresh pagedkit run. With vLLM (marker ``vllm``): vLLM's
record against a fresh vLLM run, so neither record can go stale unseen.

To re-record after a change (vLLM's venv for the second)::

    python -m pagedkit.vllm.api_check run pagedkit tests/vllm/data/api_pagedkit.json
    python -m pagedkit.vllm.api_check run vllm tests/vllm/data/api_vllm.json
    python -m pagedkit.vllm.api_check table tests/vllm/data/api_pagedkit.json \\
        tests/vllm/data/api_vllm.json     # paste into docs/api.md
"""

import json
from pathlib import Path

import pytest

from pagedkit.vllm import api_check

DATA = Path(__file__).parent / "data"
DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
BEGIN, END = "<!-- api_check table: begin -->", "<!-- api_check table: end -->"


def recorded(system):
    return json.loads((DATA / f"api_{system}.json").read_text())


def test_the_docs_table_is_the_generators_from_the_records():
    doc = DOC.read_text()
    table = doc[doc.index(BEGIN) + len(BEGIN):doc.index(END)].strip()
    assert table == api_check.table(recorded("pagedkit"), recorded("vllm"))


def test_the_records_cover_every_case_and_agree():
    ours, theirs = recorded("pagedkit"), recorded("vllm")
    assert ours["system"] == "pagedkit" and theirs["system"] == "vllm"
    assert set(ours["cases"]) == set(theirs["cases"]) == set(api_check.CASES)
    assert all(api_check.compare(ours, theirs).values())


def test_comparing_can_fail():
    ours = recorded("pagedkit")
    changed = json.loads(json.dumps(ours))
    changed["cases"]["basic"][0]["outputs"][0]["text"] += "!"
    lp = changed["cases"]["logprobs"][2]["logprobs"][0][0]
    lp[1] += 2 * api_check.LOGPROB_TOL
    same = api_check.compare(ours, changed)
    assert not same["basic"] and not same["logprobs"] and same["chat"]
    assert "| `basic` | DIFFERENT |" in api_check.table(ours, changed)


def test_pagedkit_today_is_its_record():
    fresh = api_check.run_cases("pagedkit")
    same = api_check.compare(fresh, recorded("pagedkit"))
    assert all(same.values()), [name for name, ok in same.items() if not ok]


@pytest.mark.vllm
def test_vllm_today_is_its_record():
    fresh = api_check.run_cases("vllm")
    same = api_check.compare(fresh, recorded("vllm"))
    assert all(same.values()), [name for name, ok in same.items() if not ok]


def test_a_case_missing_from_both_records_is_not_equal():
    ours = recorded("pagedkit")
    both = json.loads(json.dumps(ours))
    del both["cases"]["chat"]
    same = api_check.compare(both, both)
    assert not same["chat"] and same["basic"]


@pytest.mark.vllm
def test_every_vllm_sampling_option_pagedkit_lacks_is_refused_by_name():
    """vLLM 0.32's public SamplingParams fields are pagedkit's own or in its
    list of refused options, each taken at vLLM's default."""
    import msgspec
    from vllm import SamplingParams as VllmParams

    from pagedkit.sampling_params import VLLM_ONLY_OPTIONS, SamplingParams

    defaults = VllmParams()
    ours = set(SamplingParams.__dataclass_fields__)
    theirs = [f.name for f in msgspec.structs.fields(VllmParams) if not f.name.startswith("_")]
    missing = [n for n in theirs if n not in ours and n not in VLLM_ONLY_OPTIONS]
    assert not missing, f"vLLM options neither taken nor refused by name: {missing}"
    assert set(VLLM_ONLY_OPTIONS) <= set(theirs), "an option listed that vLLM does not have"
    for name in VLLM_ONLY_OPTIONS:
        SamplingParams(**{name: getattr(defaults, name)})  # vLLM's default passes


@pytest.mark.vllm
@pytest.mark.parametrize("kind", ["LLM", "LLMEngine"])
def test_every_vllm_method_pagedkit_lacks_says_what_to_use(kind):
    """vLLM 0.32's public methods of `LLM` and `LLMEngine` (called on an
    object) are pagedkit's own or listed in `VLLM_ONLY_ATTRIBUTES`, whose
    every name is vLLM's; vLLM's ``model_config`` is listed too. Its class
    methods (``from_engine_args``, ``from_vllm_config``) are pagedkit's
    class methods too: they build, or say why not."""
    import inspect

    import vllm

    import pagedkit
    from pagedkit.vllm_names import VLLM_ONLY_ATTRIBUTES

    theirs_cls, ours_cls = getattr(vllm, kind), getattr(pagedkit, kind)
    theirs = {n for n in dir(theirs_cls) if not n.startswith("_")
              and not isinstance(inspect.getattr_static(theirs_cls, n),
                                 (classmethod, staticmethod))}
    builders = {n for n in dir(theirs_cls) if not n.startswith("_")
                and isinstance(inspect.getattr_static(theirs_cls, n), classmethod)}
    assert builders and all(isinstance(inspect.getattr_static(ours_cls, n), classmethod)
                            for n in builders), f"vLLM's {kind} class methods: {builders}"
    listed = set(VLLM_ONLY_ATTRIBUTES[kind])
    on_objects = {"LLM": set(), "LLMEngine": {"tokenizer"}}[kind]  # pagedkit's, set in __init__
    missing = sorted(n for n in theirs
                     if not hasattr(ours_cls, n) and n not in listed | on_objects)
    assert not missing, f"vLLM's {kind} names neither pagedkit's nor listed: {missing}"
    # attributes of vLLM's objects, not its class (recorded from its objects' dir() in
    # tests/engine/test_vllm_parity42.py; tests/vllm/test_parity42.py checks them live)
    from tests.engine.test_vllm_parity42 import VLLM_NAMES

    assert "model_config" in listed - theirs and listed - theirs <= set(VLLM_NAMES[kind])
    assert not [n for n in listed if hasattr(ours_cls, n)], "listed, yet pagedkit has it"
