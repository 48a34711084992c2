"""`pagedkit bench labs`: its arguments, its JSON, and that the CPU time it
reports includes the notebook kernel's (a grandchild), on a tiny notebook
rather than a real lab (CI runs the labs already)."""

import json
import os

import nbformat
import pytest

from pagedkit.bench import labs
from pagedkit.bench.__main__ import main as bench_cli


def test_labs_are_found_by_number_in_order_and_bad_names_are_refused(tmp_path):
    found = labs.find_labs(labs.HOME / "labs", ["05", "04b", "00"])
    assert [p.name[:3] for p in found] == ["05_", "04b", "00_"]
    assert len(labs.find_labs(labs.HOME / "labs", None)) == len(
        list((labs.HOME / "labs").glob("*.ipynb")))
    with pytest.raises(ValueError, match=r"unknown lab\(s\) \['99'\]; choose from 00, 01"):
        labs.find_labs(labs.HOME / "labs", ["05", "99"])
    with pytest.raises(ValueError, match="listed twice"):
        labs.find_labs(labs.HOME / "labs", ["05", "05"])
    with pytest.raises(ValueError, match="no labs directory"):
        labs.find_labs(tmp_path / "labs", None)
    with pytest.raises(ValueError, match="takes KEY=VALUE, got 'FOO'"):
        labs.parse_env(["A=1", "FOO"])
    assert labs.parse_env(["A=1", "B=x=y"]) == {"A": "1", "B": "x=y"}


def test_usage_errors_name_the_value(capsys):
    for argv, message in ((["--labs", "99"], "unknown lab(s) ['99']"),
                          (["--labs", "zz"], "unknown lab(s) ['zz']"),  # not 04c's puZZles
                          (["--labs", ","], "no lab named; choose from 00"),
                          (["--env", "=1"], "takes KEY=VALUE")):
        with pytest.raises(SystemExit) as exit_info:
            bench_cli(["labs", *argv])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_checkout_whose_pagedkit_is_not_its_own_is_refused(tmp_path):
    """Times of another checkout's labs mean nothing if its children import
    this pagedkit (an editable install wins when the checkout has none)."""
    with pytest.raises(RuntimeError, match="would import pagedkit from"):
        labs.imported_pagedkit(tmp_path, labs.child_env(tmp_path, {}))
    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / "00_x.ipynb").write_text("{}")
    with pytest.raises(SystemExit) as exit_info:  # the command line: a usage error, no traceback
        bench_cli(["labs", "--repo", str(tmp_path)])
    assert exit_info.value.code == 2
    env = labs.child_env(labs.HOME, {"PAGEDKIT_X": "1"})
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(labs.HOME / "src")
    assert env["PAGEDKIT_X"] == "1"
    assert labs.imported_pagedkit(labs.HOME, env).startswith(str(labs.HOME))


def test_main_runs_the_named_labs_in_order_and_writes_json(monkeypatch, tmp_path):
    seen = []

    def fake_run(notebook, repo, env, log=print):
        seen.append((notebook.name, repo, env["PAGEDKIT_KERNELS"]))
        return labs.LabRun(notebook.name, notebook.name != "00_start_here.ipynb", 1.0, 2.0,
                           1.5, 0.5, [1.0, 1.0, 1.0], None)

    monkeypatch.setattr(labs, "run_lab", fake_run)
    path = tmp_path / "labs.json"
    argv = ["--labs", "08,05", "--env", "PAGEDKIT_KERNELS=torch", "--json", str(path)]
    assert labs.main(argv) == 0
    assert seen == [("08_full_engine.ipynb", labs.HOME, "torch"),
                    ("05_continuous_batching.ipynb", labs.HOME, "torch")]
    report = json.loads(path.read_text())
    assert report["repo"] == str(labs.HOME) and report["env"] == {"PAGEDKIT_KERNELS": "torch"}
    assert report["pagedkit_file"].startswith(str(labs.HOME)) and len(report["commit"]) == 40
    assert [r["lab"] for r in report["runs"]] == ["08_full_engine.ipynb",
                                                  "05_continuous_batching.ipynb"]
    assert set(report["runs"][0]) == {"lab", "passed", "wall_s", "cpu_s", "cpu_user_s",
                                      "cpu_sys_s", "load_before", "load_after"}
    assert labs.main(["--labs", "00", "--env", "PAGEDKIT_KERNELS=torch"]) == 1  # failed lab


def test_cpu_time_includes_the_kernels(tmp_path):
    """A notebook whose kernel burns 2 s of its own CPU time reports at least
    that (pytest's own start-up comes on top)."""
    (tmp_path / "labs").mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import time\nt = time.process_time()\n"
                                          "while time.process_time() - t < 2:\n    pass")]
    nbformat.write(nb, tmp_path / "labs" / "burn.ipynb")
    burn = labs.run_lab(tmp_path / "labs" / "burn.ipynb", tmp_path, dict(os.environ),
                        log=lambda s: None)
    assert burn.passed and burn.cpu_s >= 2.0 and burn.wall_s > 0
    assert burn.cpu_s == pytest.approx(burn.cpu_user_s + burn.cpu_sys_s, abs=0.02)


def test_without_pytest_or_nbval_it_says_what_to_install_before_any_run(monkeypatch, capsys):
    """Newcomer finding 3: right after the README's install (requirements.txt
    only), a lab's row printed as if it had run, then 'No module named pytest'."""
    monkeypatch.setattr(labs.importlib.util, "find_spec",
                        lambda name: None if name == "nbval" else object())
    monkeypatch.setattr(labs, "run_lab", lambda *a, **k: pytest.fail("it ran"))
    with pytest.raises(SystemExit) as exit_info:
        bench_cli(["labs", "--labs", "00"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert ("this Python has no nbval: pip install -r requirements-dev.txt" in err)


def test_its_help_says_what_it_needs_and_how_long_it_takes(capsys):
    with pytest.raises(SystemExit):
        bench_cli(["labs", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "requirements-dev.txt" in out and "about 10 minutes" in out
