"""What `track.save` keeps and `track.load` gives back (newcomer 8, findings 1
and 2): after any sequence of saves, each loaded piece is the learner's latest
saved function — the same code, and every name it uses bound to what the
learner's notebook bound it to when it was saved — and it sees nothing else
(no constant of an earlier save, no other piece's helper of the same name).
What cannot be kept so is refused at save, by name."""

import copy
import dis
import importlib.util
import inspect
import itertools
import re
from pathlib import Path

import pytest

from pagedkit.exercises import track

SOLUTIONS = Path(__file__).resolve().parents[2] / "labs" / "solutions"
TRACK_LABS = ("lab03_paging", "lab04_paged_attention", "lab05_continuous_batching",
              "lab06_preemption", "lab07_sharing", "lab08_full_engine")
_counter = itertools.count()


@pytest.fixture(autouse=True)
def saved_file(tmp_path, monkeypatch):
    path = tmp_path / "my_engine.py"
    monkeypatch.setenv("PAGEDKIT_TRACK", str(path))
    return path


def _notebook(tmp_path, source: str):
    """`source` run as a notebook of its own (a module read from a file of its
    own, so `inspect.getsource` finds each function's text)."""
    path = tmp_path / f"notebook_{next(_counter)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _codes(code):
    yield code
    for const in code.co_consts:
        if inspect.iscode(const):
            yield from _codes(const)


def _globals_read(fn):
    """The global names `fn`'s code (and every code in it) reads or writes:
    not an attribute's name, which ``co_names`` lists too."""
    ops = {"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL",
           "LOAD_FROM_DICT_OR_GLOBALS"}
    return {ins.argval for code in _codes(fn.__code__) for ins in dis.get_instructions(code)
            if ins.opname in ops}


def _same_code(got, want):
    for attr in ("co_code", "co_names", "co_varnames", "co_freevars", "co_cellvars",
                 "co_argcount", "co_kwonlyargcount", "co_posonlyargcount", "co_flags"):
        assert getattr(got, attr) == getattr(want, attr), attr
    assert len(got.co_consts) == len(want.co_consts)
    for a, b in zip(got.co_consts, want.co_consts, strict=True):
        if inspect.iscode(b):
            _same_code(a, b)
        else:
            assert type(a) is type(b) and repr(a) == repr(b)


def _same(got, want, seen=None):
    """`got` (from the saved file) is `want` (the notebook's): the same object
    (a module, an imported function), an equal constant of the same type, or a
    function with the same code whose every global is the same, recursively;
    and a function's module holds no name the notebook did not have."""
    seen = set() if seen is None else seen
    if got is want:
        return
    if inspect.isfunction(want):
        assert inspect.isfunction(got), (got, want)
        if id(want) in seen:
            return
        seen.add(id(want))
        assert got.__name__ == want.__name__
        _same_code(got.__code__, want.__code__)
        _same(got.__defaults__, want.__defaults__, seen)
        _same(got.__kwdefaults__, want.__kwdefaults__, seen)
        for name in _globals_read(want):
            if name in want.__globals__ and not name.startswith("__"):
                assert name in got.__globals__, f"{want.__name__} needs {name}"
                _same(got.__globals__[name], want.__globals__[name], seen)
            else:  # a builtin: the saved file must not bind it
                assert name not in got.__globals__, f"{want.__name__}: {name}"
        for name, value in got.__globals__.items():  # nothing the notebook did not have
            if not name.startswith("__"):
                assert name in want.__globals__, f"{want.__name__} sees {name}, not the notebook's"
                _same(value, want.__globals__[name], seen)
    elif type(want) in (tuple, dict):
        assert type(got) is type(want) and len(got) == len(want)
        for a, b in zip(got.items() if type(want) is dict else got,
                        want.items() if type(want) is dict else want, strict=True):
            _same(a, b, seen)
    else:
        assert type(got) is type(want) and repr(got) == repr(want), (got, want)


def _holds_latest(latest: dict):
    """The loaded pieces are exactly `latest`'s functions, each alone."""
    pieces = track.load()
    assert pieces.plugged() == [p for p in track.PIECES if p in latest]
    for name, fn in latest.items():
        _same(getattr(pieces, name), fn)
        if inspect.signature(fn).parameters.keys() == {"x"}:  # the sequences' pieces
            got_x, want_x = [3, 1, 2], [3, 1, 2]
            assert repr(getattr(pieces, name)(got_x)) == repr(fn(want_x))
            assert got_x == want_x


def _piece(name, body, pre=""):
    return f"{pre}\n\ndef {name}(x, *rest):\n    {body}\n"


# Each sequence: the notebooks saved one after another, and the pieces each saves.
SEQUENCES = {
    "constant changed, then back": [
        (_piece("append_slots", "return [len(x) + EXTRA]", f"EXTRA = {v}"), ["append_slots"])
        for v in (0, 1, 0)],
    "values that sort the other way": [
        (_piece("append_slots", "return x[:BLOCK]", f"BLOCK = {v}"), ["append_slots"])
        for v in (16, 4, 16, 100, 9, -1)],
    "str, bytes, tuple and float constants": [
        (_piece("chain_hashes", "return (NAME, ROOT, SIZES, SCALE, len(x))",
                f"NAME = {n!r}\nROOT = {r!r}\nSIZES = {s!r}\nSCALE = {f}"), ["chain_hashes"])
        for n, r, s, f in [("b", b"\xff" * 4, (1, 2), "0.1"), ("a", b"\x00", (3,), "-0.0"),
                           ("b\n", b"", ((1, "a"), b"x", None, True), "float('-inf')"),
                           ("", b"\x00", (), "float('nan')"), ("b", b"\xff" * 4, (1, 2), "0.0")]],
    "helper renamed": [
        (_piece("append_slots", "return pick(x)", "def pick(x):\n    return x.pop(0)"),
         ["append_slots"]),
        (_piece("append_slots", "return take(x)", "def take(x):\n    return x.pop()"),
         ["append_slots"])],
    "helper removed": [
        (_piece("append_slots", "return pick(x)", "def pick(x):\n    return x.pop(0)"),
         ["append_slots"]),
        (_piece("append_slots", "return x.pop(0)"), ["append_slots"])],
    "helper becomes a constant of its name": [
        (_piece("append_slots", "return pick(x) if callable(pick) else pick",
                "def pick(x):\n    return x.pop(0)"), ["append_slots"]),
        (_piece("append_slots", "return pick(x) if callable(pick) else pick", "pick = 3"),
         ["append_slots"])],
    "constant becomes a helper of its name": [
        (_piece("append_slots", "return pick(x) if callable(pick) else pick", "pick = 3"),
         ["append_slots"]),
        (_piece("append_slots", "return pick(x) if callable(pick) else pick",
                "def pick(x):\n    return x.pop(0)"), ["append_slots"])],
    "import alias rebound": [
        (_piece("append_slots", "return m(len(x) / 2)", "from math import floor as m"),
         ["append_slots"]),
        (_piece("append_slots", "return m(len(x) / 2)", "from math import ceil as m"),
         ["append_slots"])],
    "same-named helpers of two labs": [
        (_piece("append_slots", "return pick(x)", "def pick(x):\n    return x.pop(0)"),
         ["append_slots"]),
        (_piece("copy_on_write", "return pick({}, x)",
                "def pick(ref_counts, x):\n    ref_counts[x[0]] = 1\n    return x.pop(0), "
                "ref_counts"), ["copy_on_write"]),
        (_piece("append_slots", "return pick(x)", "def pick(x):\n    return x.pop()"),
         ["append_slots"])],
    "a constant used only by a default": [
        (_piece("admit", "return pick(x)", f"COUNT = {v}\n\ndef pick(x, n=COUNT):\n"
                "    return x[:n]"), ["admit"]) for v in (1, 2)],
    "a name used only by an annotation": [
        (_piece("admit", "return x", "from collections import OrderedDict as Kind\n\n"
                "def admit(x: Kind, *rest):\n    return len(x)"), ["admit"])],
    "saved together, then one again": [
        ("ROOT = 1\n\ndef shared(x):\n    return [ROOT] + x\n"
         + _piece("copy_on_write", "return shared(x)")
         + _piece("chain_hashes", "return shared(x[:1])"), ["copy_on_write", "chain_hashes"]),
        ("ROOT = 2\n\ndef shared(x):\n    return x + [ROOT]\n"
         + _piece("chain_hashes", "return shared(x[:1])"), ["chain_hashes"])],
}


@pytest.mark.parametrize("steps", SEQUENCES.values(), ids=SEQUENCES.keys())
def test_every_save_sequence_loads_the_latest_saved_code(tmp_path, steps):
    latest = {}
    for source, names in steps:
        notebook = _notebook(tmp_path, source)
        track.save(*(getattr(notebook, n) for n in names), log=print)
        latest.update({n: getattr(notebook, n) for n in names})
        _holds_latest(latest)


def test_saving_again_leaves_nothing_of_the_earlier_save(tmp_path, saved_file):
    track.save(_notebook(tmp_path, SEQUENCES["helper renamed"][0][0]).append_slots)
    assert "def pick" in saved_file.read_text()
    track.save(_notebook(tmp_path, SEQUENCES["helper removed"][1][0]).append_slots)
    assert "pick" not in saved_file.read_text()


def test_a_loaded_piece_saved_again_is_the_same_section(tmp_path, saved_file):
    source = SEQUENCES["a constant used only by a default"][0][0]
    track.save(_notebook(tmp_path, source).admit)
    before = saved_file.read_text()
    track.save(track.load().admit)
    assert saved_file.read_text() == before
    _holds_latest({"admit": _notebook(tmp_path, source).admit})


def _solutions():
    spec = {}
    for stem in TRACK_LABS:
        s = importlib.util.spec_from_file_location(f"save_{stem}", SOLUTIONS / f"{stem}.py")
        module = importlib.util.module_from_spec(s)
        s.loader.exec_module(module)
        spec[stem] = module
    return spec


def test_every_reference_piece_saved_then_each_saved_again():
    """Each lab's reference pieces, saved lab by lab as a learner saves them,
    then each again alone, in both orders: every loaded piece is its lab's
    function, seeing only its lab's names."""
    latest = {}
    for module in _solutions().values():
        names = [n for n in track.PIECES if callable(getattr(module, n, None))]
        track.save(*(getattr(module, n) for n in names), log=print)
        latest.update({n: getattr(module, n) for n in names})
        _holds_latest(latest)
    assert list(latest) != [] and set(latest) == set(track.PIECES)
    for order in (track.PIECES, track.PIECES[::-1]):
        for name in order:
            track.save(latest[name], log=print)
            _holds_latest(latest)


def test_sections_come_back_in_place_and_forget_drops_one(tmp_path, saved_file):
    modules = _solutions()
    track.save(modules["lab03_paging"].append_slots, modules["lab05_continuous_batching"].admit)
    track.save(modules["lab03_paging"].append_slots)  # saved again: its section stays first
    text = saved_file.read_text()
    assert text.index("# ======== append_slots (lab 03)") < text.index("# ======== admit (lab 05)")
    track.forget("append_slots")
    assert track.load().plugged() == ["admit"] and "slot_of" not in saved_file.read_text()
    with pytest.raises(ValueError, match=r"'nope' is not one of the pieces .*; saved: admit; "
                                         r"nothing forgotten"):
        track.forget("nope", "admit")
    assert track.load().plugged() == ["admit"]
    said = []
    assert track.forget("admit", "append_slots", log=said.append) == saved_file
    assert said == ["append_slots is not saved: pagedkit's own runs already"]
    assert track.load().plugged() == []
    # newcomer 38: a cell that forgets, run twice, said so instead of raising
    assert track.forget("admit", log=said.append) is None
    assert said[-1] == "admit is not saved: pagedkit's own runs already"


def test_an_error_in_the_saved_file_names_its_line(tmp_path, saved_file):
    track.save(_notebook(tmp_path, _piece("admit", "return x")).admit)
    track.save(_notebook(tmp_path, _piece("append_slots", "return 1 / 0")).append_slots)
    with pytest.raises(ZeroDivisionError) as err:
        track.load().append_slots([])
    line = err.traceback[-1].lineno + 1  # pytest's are 0-based
    assert saved_file.read_text().splitlines()[line - 1].strip() == "return 1 / 0"


REFUSED = {
    "a function made inside another": (
        "def make(n):\n    def pick(x):\n        return x[n]\n    return pick\n\npick = make(0)\n"
        + _piece("append_slots", "return pick(x)"),
        r"uses the notebook's 'pick', a function made inside another \(it uses n\)"),
    "a function under another name": (
        "def take(x):\n    return x[0]\n\npick = take\n" + _piece("append_slots", "return pick(x)"),
        r"uses the notebook's 'pick', the function take, .* def pick\(\.\.\.\)"),
    "a lambda": ("pick = lambda x: x[0]\n" + _piece("append_slots", "return pick(x)"),
                 r"uses the notebook's 'pick', the function <lambda>"),
    "a list": ("LIMIT = [1]\n" + _piece("append_slots", "return LIMIT"),
               r"uses the notebook's 'LIMIT' \(list\)"),
    "a tuple holding a list": ("LIMIT = (1, [2])\n" + _piece("append_slots", "return LIMIT"),
                               r"uses the notebook's 'LIMIT' \(tuple\)"),
    "an int subclass": ("import enum\n\nclass K(enum.IntEnum):\n    A = 1\n\nLIMIT = K.A\n"
                        + _piece("append_slots", "return LIMIT"),
                        r"uses the notebook's 'LIMIT' \(K\)"),
    "a line that opens a section": (
        _piece("append_slots", '"""\n# ======== admit (lab 05) ========\n    """\n    return x'),
        r"^append_slots's source has the line '# ======== admit \(lab 05\) ========', which "
        r"the saved file uses"),
    "a helper's line that opens a section": (
        'def pick(x):\n    """\n# ======== admit\n    """\n    return x\n'
        + _piece("append_slots", "return pick(x)"),
        r"^pick \(a function append_slots uses\)'s source has the line '# ======== admit'"),
    "a function not named as a piece": (
        _piece("my_admit", "return x") + "\n\nappend_slots = my_admit\n",
        r"^my_admit is not one of the pieces \(admit, choose_victims, chain_hashes, "
        r"append_slots, copy_on_write, paged_decode_attention, top_p_filter\), so the labs .*"
        r"name it as the piece it is .*nothing saved"),
}


@pytest.mark.parametrize("source, match", REFUSED.values(), ids=REFUSED.keys())
def test_what_cannot_be_kept_is_refused_by_name_and_nothing_changes(tmp_path, saved_file,
                                                                    source, match):
    track.save(_notebook(tmp_path, _piece("admit", "return x")).admit)
    before = saved_file.read_text()
    with pytest.raises((TypeError, ValueError), match=match):
        track.save(_notebook(tmp_path, source).append_slots)
    assert saved_file.read_text() == before


#: How a function uses a name only as an attribute's (or binds it itself),
#: never as a notebook global (``{n}``: the name), and the globals it reads.
NOT_GLOBAL = {
    "a method call": ("return x.{n}()", set()),
    "an attribute read": ("return x.{n}", set()),
    "an attribute set": ("x.{n} = 1", set()),
    "torch's function": ("return torch.{n}(x)", {"torch"}),
    "a nested function's method call": (
        "def inner(y):\n        return y.{n}()\n    return inner(x)", set()),
    "a comprehension's attribute": ("return [y.{n} for y in x]", set()),
    "a lambda's attribute": ("return (lambda y: y.{n})(x)", set()),
    "an import of its own": ("from math import {n}\n    return {n}", set()),
}
#: How a function really reads the notebook global ``{n}``.
GLOBAL = {
    "a read": "return {n}",
    "a method call on it": "return {n}.copy()",
    "a read beside an attribute of its name": "return x.{n}, {n}",
    "a nested function's read": "def inner():\n        return {n}\n    return inner()",
    "a comprehension's read": "return [{n} for y in x]",
    "a lambda's read": "return (lambda: {n})()",
}
#: The notebook globals named alike: kinds save refuses (and their type's
#: name), and kinds it keeps as a constant line.
REFUSED_KINDS = {"a list": ("[]", "list"), "an object": ("object()", "object")}
KEPT_KINDS = {"an int": "3", "a str": "'s'"}
#: Names labs 05-08 bind at a notebook's top level (lab 08's ``log = []``).
LAB_GLOBALS = ("log", "view", "size", "index", "tokens")


@pytest.mark.parametrize("name", LAB_GLOBALS)
@pytest.mark.parametrize("kind", [k for k, _type in REFUSED_KINDS.values()]
                         + list(KEPT_KINDS.values()), ids=[*REFUSED_KINDS, *KEPT_KINDS])
@pytest.mark.parametrize("body, reads", NOT_GLOBAL.values(), ids=NOT_GLOBAL.keys())
def test_an_attribute_named_as_a_notebook_global_is_not_that_global(tmp_path, saved_file,
                                                                   body, reads, kind, name):
    """Lab 08's top_p_filter calls ``probs.log()`` in a notebook with ``log = []``:
    saved, and its section binds only the globals it reads."""
    notebook = _notebook(tmp_path, f"import torch\n\n{name} = {kind}\n"
                         + _piece("top_p_filter", body.format(n=name)))
    track.save(notebook.top_p_filter)
    loaded = track.load().top_p_filter
    assert {k for k in loaded.__globals__ if not k.startswith("__")} == reads | {"top_p_filter"}
    assert f"\n{name} = " not in saved_file.read_text()
    _same(loaded, notebook.top_p_filter)


@pytest.mark.parametrize("name", LAB_GLOBALS)
@pytest.mark.parametrize("kind, type_name", REFUSED_KINDS.values(), ids=REFUSED_KINDS.keys())
@pytest.mark.parametrize("body", GLOBAL.values(), ids=GLOBAL.keys())
def test_a_notebook_global_really_read_is_still_refused(tmp_path, saved_file, body, kind,
                                                        type_name, name):
    track.save(_notebook(tmp_path, _piece("admit", "return x")).admit)
    before = saved_file.read_bytes()
    notebook = _notebook(tmp_path, f"{name} = {kind}\n" + _piece("top_p_filter",
                                                                 body.format(n=name)))
    with pytest.raises(TypeError, match=rf"^top_p_filter uses the notebook's '{name}' "
                                        rf"\({type_name}\)"):
        track.save(notebook.top_p_filter)
    assert saved_file.read_bytes() == before


@pytest.mark.parametrize("name", LAB_GLOBALS)
@pytest.mark.parametrize("kind", KEPT_KINDS.values(), ids=KEPT_KINDS.keys())
@pytest.mark.parametrize("body", GLOBAL.values(), ids=GLOBAL.keys())
def test_a_notebook_constant_really_read_is_kept(tmp_path, saved_file, body, kind, name):
    notebook = _notebook(tmp_path, f"{name} = {kind}\n" + _piece("top_p_filter",
                                                                 body.format(n=name)))
    track.save(notebook.top_p_filter)
    assert f"\n{name} = {kind}\n" in saved_file.read_text()
    _same(track.load().top_p_filter, notebook.top_p_filter)


def test_a_stub_saved_over_a_saved_piece_says_that_piece_keeps_running(tmp_path, saved_file):
    """What save says of a stub is what runs: pagedkit's own piece, or the one
    saved before (the stub is not saved over it)."""
    said = []
    written = _notebook(tmp_path, _piece("admit", "return x[:1]")).admit
    stub = _notebook(tmp_path, _piece("admit", "raise NotImplementedError")).admit
    assert track.save(stub, log=said.append) is None  # newcomer 37: it named a file
    assert track.load().plugged() == []
    assert not saved_file.exists()  # newcomer 35: a lab run untouched made the file
    assert track.save(written, log=said.append) == saved_file
    before = saved_file.read_bytes()
    assert track.save(stub, log=said.append) is None  # nothing written, though the file is
    assert saved_file.read_bytes() == before and track.load().admit([3, 4]) == [3]
    track.forget("admit")
    track.save(stub, log=said.append)
    assert track.load().plugged() == []
    pagedkits = "admit is not written yet: not saved (pagedkit's own runs in its place)"
    assert said == [pagedkits, f"saved admit in {saved_file} (track.load() gives your pieces "
                    "back; track.forget drops one)",
                    "admit is not written yet: not saved; the admit you saved "
                    "before keeps running (track.forget('admit') brings back pagedkit's own)",
                    pagedkits]


OLD_FILE = ('"""Your engine\'s pieces, saved by pagedkit.exercises.track.save from the labs."""\n'
            "import math\n\nEXTRA = 0\nEXTRA = 1\n\n\ndef append_slots(x):\n    return EXTRA\n")
DATA = Path(__file__).resolve().parent / "data"


def _old_file(saved_file, name: str) -> bytes:
    """An earlier pagedkit's saved file, written by its own save (data/README.md)."""
    saved_file.write_bytes((DATA / f"old_my_engine_{name}.txt").read_bytes())
    return saved_file.read_bytes()


def test_a_file_saved_by_an_earlier_pagedkit_loads_as_it_did(tmp_path, saved_file):
    """A learner who upgrades mid-course can still run track.check: load runs
    an earlier pagedkit's file in one namespace, as that pagedkit did."""
    before = _old_file(saved_file, "two_pieces")
    pieces = track.load()
    assert pieces.plugged() == ["admit", "append_slots"]
    want = _solutions()["lab03_paging"].append_slots
    for args in ([[], 0, 5, 4, [7, 3, 9]], [[2], 3, 2, 4, [8]], [[1], 4, 9, 4, [6]]):
        got_args, want_args = copy.deepcopy(args), copy.deepcopy(args)
        assert pieces.append_slots(*got_args) == want(*want_args) and got_args == want_args
    assert saved_file.read_bytes() == before
    saved_file.write_text(OLD_FILE)
    assert track.load().append_slots([]) == 1  # one namespace: the last EXTRA, as it ran


@pytest.mark.parametrize("old, pieces, labs", [(None, "append_slots", "lab 03"),
                                              ("two_pieces", "admit, append_slots",
                                               "labs 03, 05")], ids=["hand-made", "saved"])
def test_save_and_forget_refuse_an_earlier_pagedkits_file_naming_its_pieces(
        tmp_path, saved_file, old, pieces, labs):
    if old is None:
        saved_file.write_text(OLD_FILE)
        before = saved_file.read_bytes()
    else:
        before = _old_file(saved_file, old)
    written = _notebook(tmp_path, _piece("admit", "return x")).admit
    stub = _notebook(tmp_path, _piece("admit", "raise NotImplementedError")).admit
    for call in (lambda: track.save(written), lambda: track.save(stub),
                 lambda: track.forget("append_slots"), lambda: track.forget("nope")):
        with pytest.raises(ValueError, match=re.escape(
                f"{saved_file} holds pieces saved by an earlier pagedkit ({pieces}), ")
                + ".*" + re.escape(f"run the build-track cells of {labs} again (track.save)")):
            call()
        assert saved_file.read_bytes() == before


def test_an_earlier_pagedkits_file_with_no_piece_left_is_empty(tmp_path, saved_file):
    """That pagedkit's forget left a piece's helpers, imports and constants:
    no piece, so nothing to refuse or load; save replaces it."""
    before = _old_file(saved_file, "forgotten")
    assert "def slot_of" in before.decode() and "ROOT_HASH = b" in before.decode()
    assert track.load().plugged() == []
    assert track.forget("admit", log=print) is None
    assert saved_file.read_bytes() == before
    track.save(_solutions()["lab05_continuous_batching"].admit)
    assert track.load().plugged() == ["admit"] and "slot_of" not in saved_file.read_text()
    # an earlier pagedkit's file with no piece saved (its header's imports alone)
    saved_file.write_text(OLD_FILE.split("\n\nEXTRA")[0])
    assert track.load().plugged() == []
    track.save(_notebook(tmp_path, _piece("admit", "return x")).admit)
    assert track.load().plugged() == ["admit"] and "import math" not in saved_file.read_text()


def test_a_piece_saved_twice_in_the_file_is_refused(tmp_path, saved_file):
    track.save(_notebook(tmp_path, _piece("admit", "return x")).admit)
    saved_file.write_text(saved_file.read_text() * 2)
    with pytest.raises(ValueError, match="two sections for 'admit'"):
        track.load()


@pytest.mark.parametrize("name", track.PIECES)
@pytest.mark.parametrize("change", ["one fewer", "one more", "keyword only"])
def test_a_piece_the_engine_could_not_call_is_refused_at_save(tmp_path, saved_file, name,
                                                              change):
    """Newcomer 33: a piece with another number of parameters was saved, and
    only `check` found it. Each piece, one parameter short, one required
    parameter more, or its last made keyword-only, is refused naming the lab's
    signature, and nothing is saved; the lab's own signature (the reference's)
    and one with a defaulted extra parameter or ``*args`` are taken."""
    params = [p.split("=")[0] for p in track.PARAMETERS[name].split(", ")]
    wrong = {"one fewer": params[:-1], "one more": [*params, "extra"],
             "keyword only": [*params[:-1], "*", params[-1]]}[change]
    notebook = _notebook(tmp_path, f"def {name}({', '.join(wrong)}):\n    return None\n")
    before = saved_file.read_text() if saved_file.exists() else None
    with pytest.raises(ValueError) as refused:
        track.save(getattr(notebook, name), log=print)
    assert f"def {name}({track.PARAMETERS[name]})" in str(refused.value)
    assert "nothing saved" in str(refused.value)
    assert (saved_file.read_text() if saved_file.exists() else None) == before
    for fine in ([*params, "extra=None"], ["*args"]):
        notebook = _notebook(tmp_path, f"def {name}({', '.join(fine)}):\n    return None\n")
        track.save(getattr(notebook, name), log=print)


def test_the_parameters_are_the_labs_own():
    """`track.PARAMETERS` is what each lab's notebook writes."""
    labs = Path(__file__).resolve().parents[2] / "labs"
    text = "".join(p.read_text() for p in labs.glob("0*.ipynb"))
    for name, params in track.PARAMETERS.items():
        assert f"def {name}({params})" in text, name
