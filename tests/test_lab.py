"""``python -m pagedkit lab`` (issue #26): JupyterLab served from the clone's
root (so docs/ opens), as root too, on copies of the labs (the tracked ones
stay as committed), saving widget state with a notebook."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import pagedkit
from pagedkit import lab
from pagedkit.__main__ import main as cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_copies_in_this_checkout(monkeypatch):
    """`lab --print` makes the copy it opens; the tests that run it on this
    checkout leave the checkout as it is (a fixture clone gets its copies)."""
    copy_labs = lab.copy_labs
    monkeypatch.setattr(lab, "copy_labs", lambda root, language="en": (
        ([], []) if Path(root).resolve() == ROOT else copy_labs(root, language)))


def _clone(tmp_path: Path) -> Path:
    """A clone's folders as the command sees them: labs/ (two labs, README), docs/."""
    root = tmp_path / "clone"
    (root / "labs").mkdir(parents=True)
    (root / "docs").mkdir()
    shutil.copy(ROOT / "labs" / lab.FIRST_LAB, root / "labs" / lab.FIRST_LAB)
    (root / "labs" / "03_paging.ipynb").write_text((ROOT / "labs" / lab.FIRST_LAB).read_text())
    (root / "labs" / "README.md").write_text("# labs\n")
    (root / "docs" / "kernels.md").write_text("# kernels\n")
    return root


def test_this_checkout_is_a_clone_and_a_wheel_install_is_not(tmp_path):
    assert lab.clone_root() == ROOT
    assert lab.clone_root(tmp_path / "site-packages" / "pagedkit" / "__init__.py") is None


def test_the_command_serves_the_root_opens_a_copy_and_allows_root_only_as_root(tmp_path):
    root = _clone(tmp_path)
    argv = lab.command(root, "03_paging.ipynb", as_root=False, extra=["--no-browser"])
    assert argv[:3] == [sys.executable, "-m", "jupyterlab"]
    assert f"--ServerApp.root_dir={root}" in argv and "--no-browser" in argv
    assert argv[-1] == str(root / lab.WORK / "03_paging.ipynb")
    assert "--allow-root" not in argv
    assert "--allow-root" in lab.command(root, lab.FIRST_LAB, as_root=True, extra=[])


def test_the_learner_works_in_copies_never_overwritten(tmp_path):
    root = _clone(tmp_path)
    copied, changed = lab.copy_labs(root)
    assert copied == [lab.FIRST_LAB, "03_paging.ipynb", "README.md"] and changed == []
    mine = root / lab.WORK / "03_paging.ipynb"
    mine.write_text("my work")
    assert lab.copy_labs(root) == ([], [])
    original = root / "labs" / "03_paging.ipynb"
    original.write_text("a new version")
    later = mine.stat().st_mtime + 10
    os.utime(original, (later, later))
    assert lab.copy_labs(root) == ([], ["03_paging.ipynb"])
    assert mine.read_text() == "my work"
    assert "/my-labs/" in (ROOT / ".gitignore").read_text().splitlines()


def test_the_widget_state_default(tmp_path):
    path = lab.write_settings(tmp_path / "overrides.d")
    assert json.loads(path.read_text()) == {
        "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}}
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert lab.write_settings(blocked / "overrides.d") is None


def test_usage_errors(capsys, monkeypatch):
    assert _run(["lab", "99_nope.ipynb", "--print"]) == 2
    err = capsys.readouterr().err
    assert "no lab '99_nope.ipynb'" in err and lab.FIRST_LAB in err
    monkeypatch.setattr(lab, "clone_root", lambda: None)
    assert _run(["lab"]) == 2
    assert "the labs live in a clone of the repository" in capsys.readouterr().err


def _clone_zh(tmp_path: Path) -> Path:
    """A clone with the Chinese edition too: labs/zh-CN/ (its first lab, its README)."""
    root = _clone(tmp_path)
    (root / "labs" / "zh-CN").mkdir()
    shutil.copy(ROOT / "labs" / "zh-CN" / lab.FIRST_LAB, root / "labs" / "zh-CN" / lab.FIRST_LAB)
    (root / "labs" / "zh-CN" / "README.md").write_text("# 实验\n")
    return root


def test_the_chinese_edition_is_copied_beside_the_english_one(tmp_path):
    root = _clone_zh(tmp_path)
    assert lab.copy_labs(root, "zh-CN") == ([lab.FIRST_LAB, "README.md"], [])
    assert (root / lab.WORK / "zh-CN" / lab.FIRST_LAB).read_bytes() == \
        (root / "labs" / "zh-CN" / lab.FIRST_LAB).read_bytes()
    assert not (root / lab.WORK / lab.FIRST_LAB).exists()  # the English ones: not asked for
    assert lab.copy_labs(root) == ([lab.FIRST_LAB, "03_paging.ipynb", "README.md"], [])
    assert lab.copy_labs(root, "zh-CN") == ([], [])
    argv = lab.command(root, lab.FIRST_LAB, as_root=False, extra=[], language="zh-CN")
    assert argv[-1] == str((root / lab.WORK / "zh-CN" / lab.FIRST_LAB).resolve())
    # its links to ../../docs/ resolve from the copy as from labs/zh-CN/
    assert (root / lab.WORK / "zh-CN" / ".." / ".." / "docs" / "kernels.md").is_file()


def test_the_real_chinese_labs_are_all_there_to_open():
    zh = sorted(p.name for p in (ROOT / "labs" / "zh-CN").glob("*.ipynb"))
    assert lab.FIRST_LAB in zh
    assert set(zh) <= {p.name for p in (ROOT / "labs").glob("*.ipynb")}


def test_lang_is_validated_and_names_the_editions(capsys, monkeypatch):
    assert _run(["lab", "--lang", "fr", "--print"]) == 2
    err = capsys.readouterr().err
    assert "--lang 'fr': the labs come in en, zh-CN" in err
    assert _run(["lab", "99_nope.ipynb", "--lang", "zh-CN", "--print"]) == 2
    err = capsys.readouterr().err  # the Chinese edition's command speaks Chinese
    assert "中没有实验 '99_nope.ipynb'" in err and "zh-CN" in err and lab.FIRST_LAB in err
    assert _run(["lab", "--lang", "zh-CN", "--print", "--no-browser"]) == 0
    out = capsys.readouterr().out.split()
    assert out[-1] == str(ROOT / lab.WORK / "zh-CN" / lab.FIRST_LAB)


@pytest.mark.parametrize("argv", [["lab", "--lang"], ["lab", "--print", "--lang"]])
def test_lang_without_a_value_gets_the_commands_usage(capsys, argv):
    """`--lang` is read before the command's parser (so that --help speaks it); its
    missing value is still reported by the command's own parser, with its usage."""
    assert _run(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m pagedkit lab [-h]")
    assert "argument --lang: expected one argument" in err


def test_chinese_menus_where_the_language_pack_is_installed(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lab, "settings_dir", lambda: tmp_path / "overrides.d")
    monkeypatch.setattr(lab, "copy_labs", lambda root, language="en": ([], []))
    monkeypatch.setattr(lab, "run_until_it_exits", lambda argv: 0)
    settings = tmp_path / "overrides.d" / "pagedkit.json"
    monkeypatch.setattr(lab.importlib.util, "find_spec", lambda name: None)
    assert lab.main(["--lang", "zh-CN", "--no-browser"]) == 0
    assert "pip install jupyterlab-language-pack-zh-CN" in capsys.readouterr().err
    assert json.loads(settings.read_text()) == lab.SETTINGS
    monkeypatch.setattr(lab.importlib.util, "find_spec", lambda name: object())
    assert lab.main(["--lang", "zh-CN", "--no-browser"]) == 0
    assert "以中文显示它自己的菜单" in capsys.readouterr().err
    assert json.loads(settings.read_text()) == {
        **lab.SETTINGS, "@jupyterlab/translation-extension:plugin": {"locale": "zh_CN"}}
    assert lab.main(["--no-browser"]) == 0  # the English edition: JupyterLab's own default
    assert json.loads(settings.read_text()) == lab.SETTINGS


@pytest.mark.parametrize("folder", ["clone", "my clone"])
@pytest.mark.parametrize("language, name, file", [
    ("en", "03", "03_paging.ipynb"), ("en", None, lab.FIRST_LAB),
    ("zh-CN", "00", lab.FIRST_LAB), ("zh-CN", None, lab.FIRST_LAB)])
def test_the_printed_command_runs_as_printed(tmp_path, monkeypatch, capsys, folder, language,
                                             name, file):
    """Newcomer 8 finding 11: `lab 04b --print --lang zh-CN` printed a command
    opening my-labs/zh-CN/04b_...ipynb, which --print had not copied. It makes
    the copy, prints a command whose words survive the shell (a folder with a
    space), and writes no JupyterLab settings but says which it would."""
    root = _clone_zh(tmp_path / folder)
    monkeypatch.setattr(lab, "clone_root", lambda: root)
    monkeypatch.setattr(lab, "settings_dir", lambda: tmp_path / "overrides.d")
    argv = ["--print", "--no-browser", *([name] if name else []), "--lang", language]
    assert lab.main(argv) == 0
    out, err = capsys.readouterr()
    words = shlex.split(out)
    assert words[:3] == [sys.executable, "-m", "jupyterlab"] and "--no-browser" in words
    opened = Path(words[-1])
    assert opened == root / lab.WORK / lab.EDITIONS[language] / file and opened.is_file()
    assert opened.read_bytes() == (lab.edition(root, language) / file).read_bytes()
    assert f"--ServerApp.root_dir={root}" in words
    assert not (tmp_path / "overrides.d").exists()  # a dry run changes no settings
    said = ("unless {path} holds {settings}" if language == "en" else "除非 {path} 里有 {settings}")
    assert said.format(path=tmp_path / 'overrides.d' / 'pagedkit.json', settings='{"@jupyter-'
                       'widgets/jupyterlab-manager:plugin": {"saveState": true}}') in err
    assert lab.main(argv) == 0 and capsys.readouterr()[0] == out  # again: the same, no copy


def test_print_shows_the_command(capsys):
    assert cli(["lab", "--print", "--no-browser"]) == 0
    out = capsys.readouterr().out.split()
    assert f"--ServerApp.root_dir={ROOT}" in out and "--no-browser" in out
    assert ("--allow-root" in out) == (os.geteuid() == 0)


@pytest.mark.parametrize("given, lab_name, jupyter", [
    (["--no-browser", "--port", "8889"], lab.FIRST_LAB, ["--no-browser", "--port=8889"]),
    (["--port", "8889", "03_paging.ipynb"], "03_paging.ipynb", ["--port=8889"]),
    (["--no-browser", "03_paging.ipynb"], "03_paging.ipynb", ["--no-browser"]),
    (["03_paging.ipynb", "--ip", "0.0.0.0", "--port=9"], "03_paging.ipynb",
     ["--ip=0.0.0.0", "--port=9"]),
])
def test_jupyters_options_take_their_values_as_written(capsys, given, lab_name, jupyter):
    """`--port 8889` (the help's own example) is jupyter's port, not a lab named 8889."""
    assert cli(["lab", "--print", *given]) == 0
    out = capsys.readouterr().out.split()
    assert out[-1].endswith(f"my-labs/{lab_name}")
    assert [w for w in out if w.startswith("--") and "root" not in w] == jupyter


def test_ctrl_c_waits_for_jupyterlab_instead_of_a_traceback(monkeypatch):
    class Jupyter:  # Ctrl-C reaches it too; it takes a moment to shut down
        waits = 0

        def __init__(self, argv):
            pass

        def wait(self):
            Jupyter.waits += 1
            if Jupyter.waits == 1:
                raise KeyboardInterrupt
            return 130

    monkeypatch.setattr(lab.subprocess, "Popen", Jupyter)
    assert lab.run_until_it_exits(["jupyter"]) == 130 and Jupyter.waits == 2


def _run(argv):
    try:
        return cli(argv)
    except SystemExit as e:
        return e.code


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_jupyterlab_runs_the_command_and_serves_docs(tmp_path):
    """The command as built, run: JupyterLab starts (as root here when the tests
    run as root, where plain `jupyter lab` refuses) and serves docs/ and the copy."""
    pytest.importorskip("jupyterlab")
    root = _clone(tmp_path)
    lab.copy_labs(root)
    port, work = _free_port(), tmp_path / "jupyter"
    env = {**os.environ, **{name: str(work / name.lower()) for name in (
        "JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTERLAB_SETTINGS_DIR",
        "JUPYTERLAB_WORKSPACES_DIR", "IPYTHONDIR")}}
    extra = ["--no-browser", "--ip=127.0.0.1", f"--port={port}", "--IdentityProvider.token=",
             "--ServerApp.password=", "--LabApp.news_url=",
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    as_root = os.geteuid() == 0
    log = tmp_path / "jupyter.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(lab.command(root, lab.FIRST_LAB, as_root=as_root, extra=extra),
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/api/contents"
        deadline = time.monotonic() + 180
        while True:
            try:
                docs = json.load(urllib.request.urlopen(f"{url}/docs", timeout=5))
                break
            except OSError:
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.5)
        assert [item["name"] for item in docs["content"]] == ["kernels.md"]
        mine = json.load(urllib.request.urlopen(f"{url}/{lab.WORK}/{lab.FIRST_LAB}?content=0",
                                                timeout=5))
        assert mine["type"] == "notebook"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    if as_root:  # and what the flag is for: plain jupyter lab as root refuses
        argv = [a for a in lab.command(root, lab.FIRST_LAB, as_root=False, extra=extra)]
        refused = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0 and "--allow-root" in refused.stdout + refused.stderr


def test_the_widget_state_default_is_said_and_can_be_left_off(tmp_path, monkeypatch, capsys):
    written = []
    monkeypatch.setattr(lab, "settings_dir", lambda: tmp_path / "overrides.d")
    monkeypatch.setattr(lab, "copy_labs", lambda root, language="en": ([], []))
    monkeypatch.setattr(lab, "run_until_it_exits", lambda argv: written.append(argv) or 0)
    assert lab.main(["--no-browser"]) == 0
    assert str(tmp_path / "overrides.d" / "pagedkit.json") in capsys.readouterr().err
    assert (tmp_path / "overrides.d" / "pagedkit.json").exists()
    (tmp_path / "overrides.d" / "pagedkit.json").unlink()
    assert lab.main(["--no-widget-state", "--no-browser"]) == 0
    assert not (tmp_path / "overrides.d" / "pagedkit.json").exists()
    assert "widget state" not in capsys.readouterr().err
    assert all("--no-widget-state" not in argv for argv in written)  # not passed to jupyter


def test_no_widget_state_takes_out_the_setting_an_earlier_run_wrote(tmp_path, monkeypatch, capsys):
    """Newcomer 16, finding 4: `lab` said "run with --no-widget-state, to stop", but the
    flag only skipped writing: the file an earlier run wrote kept widget state on. Only
    pagedkit's own file is changed, and only its widget setting (a language stays)."""
    folder = tmp_path / "overrides.d"
    path = folder / "pagedkit.json"
    monkeypatch.setattr(lab, "settings_dir", lambda: folder)
    monkeypatch.setattr(lab, "copy_labs", lambda root, language="en": ([], []))
    monkeypatch.setattr(lab, "run_until_it_exits", lambda argv: 0)
    assert lab.main(["--no-browser"]) == 0 and path.exists()
    capsys.readouterr()
    assert lab.main(["--no-widget-state", "--no-browser"]) == 0
    assert not path.exists()
    assert str(path) in capsys.readouterr().err
    assert lab.main(["--no-widget-state", "--no-browser"]) == 0  # nothing left: nothing said
    assert "widget state" not in capsys.readouterr().err
    language = {lab.UI_LANGUAGE: {"locale": "zh_CN"}}
    path.write_text(json.dumps({**lab.SETTINGS, **language}))
    assert lab.remove_widget_state(folder) == path
    assert json.loads(path.read_text()) == language
    for foreign in ({**lab.SETTINGS, "someone/else:plugin": {}}, [1], "not json"):
        text = foreign if isinstance(foreign, str) else json.dumps(foreign)
        path.write_text(text)
        assert lab.remove_widget_state(folder) is None and path.read_text() == text


#: what pagedkit.json holds before a run, in each case: none, an English run's, a Chinese
#: run's with the language pack, a Chinese --no-widget-state run's with it
EARLIER = {"none": None, "widgets": lab.SETTINGS,
           "widgets and menus": {**lab.SETTINGS, lab.UI_LANGUAGE: {"locale": "zh_CN"}},
           "menus": {lab.UI_LANGUAGE: {"locale": "zh_CN"}}}


@pytest.mark.parametrize("earlier", list(EARLIER))
@pytest.mark.parametrize("pack", [True, False], ids=["pack", "no pack"])
@pytest.mark.parametrize("widget_state", [True, False], ids=["", "--no-widget-state"])
@pytest.mark.parametrize("language", list(lab.EDITIONS))
def test_jupyterlabs_settings_are_said_in_one_statement(tmp_path, monkeypatch, capsys, language,
                                                        widget_state, pack, earlier):
    """Newcomer (issue #26): `lab --lang zh-CN --no-widget-state` (the language pack
    installed, after an earlier `lab`) said "no longer saves widget state (the setting is
    taken out of pagedkit.json)", then "menus in Chinese: Settings > Language
    (--no-widget-state leaves JupyterLab's defaults as they are)": the defaults had just
    changed, and the file still held the Chinese menus. The file holds what the run asks
    for (widget state unless --no-widget-state, the menus' language where the pack is
    installed), and one statement says it, naming the file; else nothing is written and an
    earlier run's widget setting is taken out, said where there was one."""
    folder = tmp_path / "overrides.d"
    path = folder / "pagedkit.json"
    monkeypatch.setattr(lab, "settings_dir", lambda: folder)
    monkeypatch.setattr(lab, "copy_labs", lambda root, language="en": ([], []))
    monkeypatch.setattr(lab, "run_until_it_exits", lambda argv: 0)
    monkeypatch.setattr(lab.importlib.util, "find_spec", lambda name: object() if pack else None)
    if EARLIER[earlier] is not None:
        folder.mkdir()
        path.write_text(json.dumps(EARLIER[earlier]))
    argv = ["--lang", language, "--no-browser", *([] if widget_state else ["--no-widget-state"])]
    assert lab.main(argv) == 0
    said = [line for line in capsys.readouterr().err.splitlines()
            if "--allow-root" not in line and "--no-browser" not in line]
    ui = lab.ui_settings(language)
    assert bool(ui) == (pack and language == "zh-CN")
    wanted = {**(lab.SETTINGS if widget_state else {}), **ui}
    held = {key: value for key, value in (EARLIER[earlier] or {}).items()
            if key not in lab.SETTINGS}  # --no-widget-state, nothing to write: the rest stays
    assert (json.loads(path.read_text()) if path.exists() else None) == (wanted or held or None)
    pip = [said.pop(0)] if language == "zh-CN" and not pack else []
    assert all("pip install jupyterlab-language-pack-zh-CN" in line for line in pip)
    if wanted:  # one statement (a second line continues it: "and shows its own menus")
        assert len(said) == 1 + (widget_state and bool(ui)) and str(path) in said[0], said
    else:  # said only where an earlier run's widget setting was taken out
        taken_out = lab.SETTINGS.keys() <= (EARLIER[earlier] or {}).keys()
        assert len(said) == taken_out and all(str(path) in line for line in said), said
    if ui and not widget_state:
        assert said == [f"lab：此环境中的 JupyterLab 以中文显示它自己的菜单，且不把小部件状态随 "
                        f"notebook 保存（两者都写在 {path} 中；Settings > Language 可以更改语言）"]


@pytest.mark.parametrize("pack", [True, False], ids=["pack", "no pack"])
@pytest.mark.parametrize("widget_state", [True, False], ids=["", "--no-widget-state"])
@pytest.mark.parametrize("language", list(lab.EDITIONS))
def test_print_says_the_settings_it_would_write(tmp_path, monkeypatch, capsys, language,
                                                widget_state, pack):
    """--print writes no settings and says the ones a run would write, in every case the
    run writes some (`set_jupyterlab`): the menus' language alone with --no-widget-state too."""
    folder = tmp_path / "overrides.d"
    monkeypatch.setattr(lab, "settings_dir", lambda: folder)
    monkeypatch.setattr(lab, "copy_labs", lambda root, language="en": ([], []))
    monkeypatch.setattr(lab.importlib.util, "find_spec", lambda name: object() if pack else None)
    argv = ["--lang", language, "--print", *([] if widget_state else ["--no-widget-state"])]
    assert lab.main(argv) == 0
    err = capsys.readouterr().err
    wanted = {**(lab.SETTINGS if widget_state else {}), **lab.ui_settings(language)}
    assert not folder.exists()
    assert (str(folder / "pagedkit.json") in err) == bool(wanted), err
    assert (json.dumps(wanted) in err) == bool(wanted), err


#: a fake JupyterLab: a real process that stops on TERM, HUP or INT, exiting 100 + the signal
CHILD = ("import signal, sys, time\n"
         "for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):\n"
         "    signal.signal(s, lambda signum, _: sys.exit(100 + signum))\n"
         "print('ready', flush=True)\n"
         "time.sleep(120)\n")


@pytest.mark.parametrize("sent, passed_on", [("SIGTERM", "SIGTERM"), ("SIGHUP", "SIGHUP"),
                                             ("SIGINT", "SIGTERM")])
def test_a_kill_is_passed_on_to_jupyterlab_not_left_running(monkeypatch, sent, passed_on):
    """Newcomer finding 5: `kill <pid of pagedkit lab>` ended the command and left
    JupyterLab running, orphaned, on its port. A fake JupyterLab (a real
    process) gets the signal this command got, and is waited for. Issue #26
    (newcomer 7, finding 7): `kill -INT` of this command alone was noted and
    not passed on, so JupyterLab ran on; an INT is passed on as a TERM
    (JupyterLab's clean stop) and the command says "interrupted" (130)."""
    sent, passed_on = getattr(lab.signal, sent), getattr(lab.signal, passed_on)
    started = []

    class Jupyter(subprocess.Popen):
        def __init__(self, argv):
            super().__init__([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
            started.append(self)

        def wait(self, timeout=None):
            if self.returncode is None and not getattr(self, "killed", False):
                assert self.stdout.readline() == "ready\n"  # its handler is in place
                self.killed = True
                os.kill(os.getpid(), sent)  # what `kill -N <pid>` sends this command alone
            return super().wait(timeout)

    monkeypatch.setattr(lab.subprocess, "Popen", Jupyter)
    before = {s: lab.signal.getsignal(s) for s in lab.FORWARDED}
    try:
        if sent == lab.signal.SIGINT:
            with pytest.raises(KeyboardInterrupt):  # the command line: "interrupted", 130
                lab.run_until_it_exits(["jupyter"])
        else:
            assert lab.run_until_it_exits(["jupyter"]) == 128 + sent
    finally:
        for child in started:
            child.kill() if child.poll() is None else None
            child.stdout.close()
    assert started[0].returncode == 100 + passed_on  # it stopped on the signal passed on
    assert {s: lab.signal.getsignal(s) for s in lab.FORWARDED} == before  # handlers put back


def test_ctrl_c_twice_is_interrupted_and_130_as_every_command(monkeypatch, capsys):
    """Two quick Ctrl-Cs skip JupyterLab's confirmation and end it by SIGINT:
    the command said nothing and exited 254 (Popen's -2 as a status)."""
    class Jupyter:
        def __init__(self, argv):
            self.got = []

        def send_signal(self, signum):
            self.got.append(signum)

        def wait(self):
            os.kill(os.getpid(), lab.signal.SIGINT)  # the terminal's Ctrl-C reaches us too
            assert self.got == [lab.signal.SIGTERM]  # and is passed on as a TERM
            return -lab.signal.SIGINT

    monkeypatch.setattr(lab.subprocess, "Popen", Jupyter)
    monkeypatch.setattr(lab, "copy_labs", lambda root, language="en": ([], []))
    assert cli(["lab", "--no-widget-state"]) == 130
    assert capsys.readouterr().err.strip().endswith("python -m pagedkit lab: interrupted")
    assert lab.exit_status(-9, []) == 137 and lab.exit_status(0, [lab.signal.SIGHUP]) == 129
    for code in (0, -lab.signal.SIGTERM, -lab.signal.SIGINT):  # an interrupt came first
        with pytest.raises(KeyboardInterrupt):
            lab.exit_status(code, [lab.signal.SIGINT, lab.signal.SIGTERM])


def test_it_counts_notebooks_and_says_which_options_go_to_jupyter(tmp_path, monkeypatch,
                                                                   capsys):
    """Newcomer finding 12: 'copied 14 of the labs' for 13 notebooks and their
    README; a mistyped option came back as JupyterLab's 25-line usage."""
    root = _clone(tmp_path)
    monkeypatch.setattr(lab, "clone_root", lambda: root)
    monkeypatch.setattr(lab, "run_until_it_exits", lambda argv: 0)
    assert lab.main(["--no-widget-state", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "copied 2 of the labs" in err
    assert "lab: passing --dry-run on to jupyter lab" in err


@pytest.mark.parametrize("lang, said", [
    ("zh-CN", "lab：已把 1 个实验复制到"), ("zh-cn", "lab：已把 1 个实验复制到"),
    ("en", "lab: copied 2 of the labs into"), (None, "lab: copied 2 of the labs into")])
def test_lang_names_the_language_the_command_speaks(tmp_path, monkeypatch, capsys, lang, said):
    """Newcomer 15, finding 10: `lab --lang zh-CN` opened the Chinese labs but said
    so in English (only PAGEDKIT_LANGUAGE=zh-CN switched it). The edition's language
    is the command's while it runs; the language spoken before comes back after."""
    root = _clone_zh(tmp_path)
    monkeypatch.setattr(lab, "clone_root", lambda: root)
    monkeypatch.setattr(lab, "run_until_it_exits", lambda argv: 0)
    monkeypatch.setattr(lab, "settings_dir", lambda: tmp_path / "overrides.d")
    assert lab.main(["--no-browser", *(["--lang", lang] if lang else [])]) == 0
    err = capsys.readouterr().err
    assert said in err, err
    assert pagedkit.get_language() == "en"


@pytest.mark.parametrize("argv", [
    ["--lang", "zh-CN", "--help"], ["--help", "--lang", "zh-CN"], ["--lang=zh-cn", "-h"],
    ["--lang", "zh_CN", "--help"], ["-h", "--lang", " ZH_cn "]])
def test_help_with_lang_is_in_that_language(capsys, argv):
    """Newcomer 19, finding 7: `lab --lang zh-CN --help` printed English (argparse
    answered --help before --lang took effect), though README.zh-CN promises this
    command's own messages in Chinese with --lang zh-CN."""
    with pytest.raises(SystemExit) as exit_:
        lab.main(argv)
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "要打开的实验" in out and "the lab to open" not in out, out
    assert "例如03、03_paging、分页" in "".join(out.split()), out  # wrapped by columns
    assert pagedkit.get_language() == "en"


def test_help_without_lang_or_with_a_wrong_one_is_in_the_language_of_the_moment(capsys):
    for argv in (["--help"], ["--lang", "fr", "--help"]):
        with pytest.raises(SystemExit):
            lab.main(argv)
        out = capsys.readouterr().out
        assert "the lab to open" in out and "要打开的实验" not in out, out


def test_an_unknown_lab_under_zh_gives_a_chinese_title_as_the_example(capsys):
    """Newcomer 19, finding 6: the zh error gave the English title Paging as its example."""
    pagedkit.set_language("zh-CN")
    try:
        said = lab.unnamed_lab(ROOT / "labs" / "zh-CN", "nope", [])
    finally:
        pagedkit.set_language("en")
    assert "标题（分页）" in said and "Paging" not in said, said
    assert lab.find_lab(ROOT / "labs" / "zh-CN", "分页")[0] == "03_paging.ipynb"


def _names_of(path: Path) -> list[str]:
    """Every way a newcomer names a lab: file, stem, path, number (and unpadded)."""
    number = path.stem.split("_", 1)[0]
    names = [path.name, path.stem, f"labs/{path.name}", f"./labs/{path.name}", number]
    return [*names, _unpadded(number)]


def _unpadded(number: str) -> str:
    """A lab's number as a newcomer types it: 0 for 00, 3 for 03, 4b for 04b."""
    return number[1:] if number[0] == "0" and number[1].isdigit() else number


@pytest.mark.parametrize("path", sorted((ROOT / "labs").glob("*.ipynb")), ids=lambda p: p.stem)
def test_a_lab_is_opened_by_its_number_name_file_or_path(capsys, path):
    """Second newcomer: `lab 03_paging`, `lab 03` and `lab labs/03_paging.ipynb`
    were 'no lab'; each names one lab, and opens it."""
    for name in _names_of(path):
        assert lab.find_lab(ROOT / "labs", name) == (path.name, []), name
        assert cli(["lab", name, "--print"]) == 0, name
        assert capsys.readouterr().out.split()[-1].endswith(f"my-labs/{path.name}"), name
        assert cli(["lab", "--port", "8889", name, "--print"]) == 0, name  # still jupyter's
        out = capsys.readouterr().out.split()
        assert "--port=8889" in out and out[-1].endswith(f"my-labs/{path.name}"), name


@pytest.mark.parametrize("language", list(lab.EDITIONS))
@pytest.mark.parametrize("path", sorted((ROOT / "labs").glob("*.ipynb")), ids=lambda p: p.stem)
def test_a_lab_is_named_alike_in_both_editions(capsys, path, language):
    """Newcomer (issue #26): `lab "When memory runs out" --lang zh-CN`, the README's own
    example title, was "no lab" in the Chinese edition, whose tables give Chinese titles.
    One rule in both: a lab's number, its English title and its Chinese one (each
    edition's first heading, `lab.lab_title`) open it in the edition asked for."""
    twins = [folder / path.name for folder in (ROOT / "labs", ROOT / "labs" / "zh-CN")]
    titles = [lab.lab_title(twin) for twin in twins if twin.is_file()]
    opened = lab.edition(ROOT, language) / path.name
    if not opened.is_file():
        pytest.skip(f"no {language} edition of {path.name}")
    number = path.stem.split("_", 1)[0]
    for name in [number, _unpadded(number), *titles, *(title.upper() for title in titles)]:
        assert lab.find_lab(lab.edition(ROOT, language), name) == (path.name, []), name
        assert cli(["lab", name, "--lang", language, "--print"]) == 0, name
        sub = lab.EDITIONS[language]
        assert Path(capsys.readouterr().out.split()[-1]) == (ROOT / lab.WORK / sub
                                                            / path.name).resolve(), name


@pytest.mark.parametrize("name, could_be", [
    ("pag", ["03_paging.ipynb", "04_paged_attention.ipynb"]),
    ("04_p", None), ("99", []), ("99_nope.ipynb", []), ("labs/", [])])
def test_an_ambiguous_or_unknown_lab_is_refused_listing_the_labs(capsys, name, could_be):
    labs = sorted(p.name for p in (ROOT / "labs").glob("*.ipynb"))
    if could_be is None:  # a prefix of one lab: opened
        assert lab.find_lab(ROOT / "labs", name)[0] == "04_paged_attention.ipynb"
        return
    assert lab.find_lab(ROOT / "labs", name) == (None, could_be)
    assert _run(["lab", name, "--print"]) == 2
    err = capsys.readouterr().err
    assert ", ".join(labs) in err  # every lab, to choose from
    if could_be:
        assert (f"{name!r} could be any of {', '.join(could_be)}: give more of its name, or "
                "its number") in err
    else:
        assert f"no lab {name!r} in" in err and "its number (03)" in err


LABS = sorted((ROOT / "labs").glob("*.ipynb"))


def _word_starts(stem: str) -> set[str]:
    """Every start of a word of a lab's name after its number (``pag``, ``paging``)."""
    return {word[:k] for word in stem.lower().split("_")[1:] for k in range(1, len(word) + 1)}


def _title_starts(path: Path) -> set[str]:
    """Every start of a word of a lab's title (``whe``, ``memory``)."""
    return _word_starts("_" + "_".join(re.findall(r"[^\W_]+", lab.lab_title(path).lower())))


def _inner_pieces(stem: str) -> set[str]:
    """Pieces from inside a word of a lab's name, at no word's start in any lab
    (its name or its title)."""
    starts = set().union(*(_word_starts(p.stem) | _title_starts(p) for p in LABS))
    return {word[i:i + k] for word in stem.lower().split("_")[1:] for i in range(1, len(word))
            for k in (2, 3, len(word) - i)} - starts - {""}


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.stem)
def test_a_lab_is_named_by_the_start_of_a_word_never_by_a_piece_inside_one(path):
    """Newcomer 12: `lab zz` opened 04c_triton_puzzles silently, "zz" being inside
    "puzzles". The start of a word of one lab's name names it; a piece from inside
    a word names none, and is refused listing the labs."""
    others = set().union(*(_word_starts(p.stem) for p in LABS if p != path))
    for start in sorted(_word_starts(path.stem) - others):
        assert lab.find_lab(ROOT / "labs", start) == (path.name, []), start
    for piece in sorted(_inner_pieces(path.stem)):
        assert lab.find_lab(ROOT / "labs", piece) == (None, []), piece


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.stem)
def test_bench_labs_and_study_name_labs_by_the_labs_rule(path, capsys):
    """Newcomer 12: `lab 3` opened lab 03 while `bench study --labs 3` and
    `bench labs --labs 3` said "unknown lab(s) ['3']": one rule now."""
    from pagedkit.bench import labs as bench_labs

    for name in _names_of(path):
        assert bench_labs.find_labs(ROOT / "labs", [name]) == [path], name
    assert cli(["bench", "study", "--markdown", "--labs",
                _unpadded(path.stem.split("_", 1)[0])]) == 0
    assert f"| {path.stem} |" in capsys.readouterr().out
    for piece in sorted(_inner_pieces(path.stem))[:3]:
        with pytest.raises(ValueError, match=rf"unknown lab\(s\) \[{piece!r}\]"):
            bench_labs.find_labs(ROOT / "labs", [piece])


@pytest.mark.parametrize("name", ["kv", "pag", "KV", "the", "a", "s"])
def test_an_ambiguous_lab_name_gets_one_message_on_every_command_line(capsys, name):
    """Newcomer 13: `lab kv` said "give more of its name" and `bench study --labs
    kv` "give its number": one message now (`lab.unnamed_lab`), on all three."""
    from pagedkit.bench import labs as bench_labs

    found, could_be = lab.find_lab(ROOT / "labs", name)
    assert found is None and len(could_be) > 1, name
    said = lab.unnamed_lab(ROOT / "labs", name, could_be)
    assert said.startswith(f"{name!r} could be any of {', '.join(could_be)}: give more of "
                           "its name, or its number (the labs: 00_start_here.ipynb, "), said
    assert _run(["lab", name, "--print"]) == 2
    assert f"pagedkit lab: error: {said}\n" in capsys.readouterr().err
    assert _run(["bench", "study", "--labs", f"05,{name}"]) == 2
    assert f"pagedkit bench study: error: {said}\n" in capsys.readouterr().err
    with pytest.raises(ValueError) as info:
        bench_labs.find_labs(ROOT / "labs", ["05", name])  # bench labs' own
    assert str(info.value) == said


def _table_titles(page: Path) -> list[tuple[str, str]]:
    """(title, lab file) for each lab a table of `page` lists: README.md's
    ``[04 PagedAttention](labs/04_paged_attention.ipynb)``, labs/README.md's
    ``| [04](04_paged_attention.ipynb) | PagedAttention |``."""
    text = page.read_text(encoding="utf-8")
    rows = re.findall(r"^\| \[\w+\]\((\w+\.ipynb)\) \| ([^|]+?) \|", text, re.M)
    rows = [(title, file) for file, title in rows]
    links = re.findall(r"^\| \[\d\d\w? ([^\]]+)\]\(labs/(\w+\.ipynb)\)", text, re.M)
    return rows + links


TABLES = [(ROOT / "README.md", ROOT / "labs"), (ROOT / "labs" / "README.md", ROOT / "labs"),
          (ROOT / "labs" / "zh-CN" / "README.md", ROOT / "labs" / "zh-CN")]


@pytest.mark.parametrize("page, labs", TABLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_title_a_table_shows_names_its_lab(page, labs):
    """Newcomer 13: `lab "KV cache"`, the README table's title, was no lab. A title
    the tables show names its lab, in any case; the titles are read from the
    notebooks' first headings (`lab.lab_title`), so a table that drifts from them
    fails here."""
    titles = _table_titles(page)
    assert sorted(file for _, file in titles) == sorted(p.name for p in labs.glob("*.ipynb"))
    for title, file in titles:
        for spelling in (title, title.lower(), title.upper()):
            assert lab.find_lab(labs, spelling) == (file, []), (page.name, spelling)


@pytest.mark.parametrize("name, file", [
    ("KV cache", "01_kv_cache.ipynb"), ("kv-cache", "01_kv_cache.ipynb"),
    ("The KV cache", "01_kv_cache.ipynb"), ("paged attention", "04_paged_attention.ipynb"),
    ("PagedAttention", "04_paged_attention.ipynb"), ("when", "06_preemption.ipynb"),
    ("memory", "06_preemption.ipynb"), ("When memory runs out", "06_preemption.ipynb"),
    ("page", "04_paged_attention.ipynb"), ("paging", "03_paging.ipynb"),
    ("Paging", "03_paging.ipynb"), ("split-kv decoding", "04b_split_kv_and_prefill.ipynb"),
    ("Triton puzzles (optional)", "04c_triton_puzzles.ipynb"),
    ("meet the real", "10_meet_vllm.ipynb"), ("4b", "04b_split_kv_and_prefill.ipynb"),
    ("04", "04_paged_attention.ipynb"), ("puzz", "04c_triton_puzzles.ipynb")])
def test_the_names_a_newcomer_gave_open_their_lab_on_every_command_line(capsys, name, file):
    """Newcomer 13's spellings, refused before: through `lab`, `bench study` and
    `bench labs` alike. ``page`` opens 04_paged_attention: it starts a word of
    that lab's name (``paged``) and of no other's (03's is ``paging``)."""
    from pagedkit.bench import labs as bench_labs

    assert lab.find_lab(ROOT / "labs", name) == (file, []), name
    assert cli(["lab", name, "--print"]) == 0
    assert capsys.readouterr().out.split()[-1].endswith(f"my-labs/{file}")
    assert bench_labs.find_labs(ROOT / "labs", [name]) == [ROOT / "labs" / file]
    assert cli(["bench", "study", "--markdown", "--labs", name]) == 0
    assert f"| {file.removesuffix('.ipynb')} |" in capsys.readouterr().out


@pytest.mark.parametrize("spelling, edition", [
    ("zh-cn", "zh-CN"), ("ZH-CN", "zh-CN"), ("Zh-Cn", "zh-CN"), ("zh-CN", "zh-CN"), ("EN", "."),
    ("en", "."), (" zh-CN", "zh-CN"), ("zh-cn ", "zh-CN"), (" EN ", "."), ("zh_CN", "zh-CN"),
    ("zh_cn", "zh-CN")])
def test_lang_is_read_without_regard_to_case(capsys, spelling, edition):
    """Newcomer 12: `--lang zh-cn` was refused."""
    assert _run(["lab", "3", "--lang", spelling, "--print", "--no-browser"]) == 0
    out = capsys.readouterr().out.split()
    assert out[-1] == str((ROOT / lab.WORK / edition / "03_paging.ipynb").resolve())


#: options that take no value, ours and jupyter's: the word after one is the lab
FLAGS = ["--print", "--no-widget-state", "--no-browser", "--allow-root", "--debug",
         "--core-mode", "--dev-mode", "--collaborative"]


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("typo", ["99", "3x", "paging2"])
def test_a_word_after_a_flag_is_the_lab_so_a_typo_is_named(capsys, flag, typo):
    """Issue #26 N4: `lab --print 99` glued the 99 onto the flag ('argument
    --print: ignored explicit argument '99''; with --no-browser jupyter's own
    usage). A flag takes no value: 99 is the lab asked for, and is not one."""
    argv = ["lab", flag, typo] + (["--print"] if flag != "--print" else [])
    assert _run(argv) == 2
    err = capsys.readouterr().err
    assert f"no lab {typo!r} in " in err and "03_paging.ipynb" in err
    assert "explicit argument" not in err and "Traceback" not in err


@pytest.mark.parametrize("flag", FLAGS)
def test_a_lab_after_a_flag_opens(capsys, flag):
    assert _run(["lab", flag, "03", *(["--print"] if flag != "--print" else [])]) == 0
    out = capsys.readouterr().out.split()
    assert out[-1].endswith("my-labs/03_paging.ipynb")
    assert flag == "--print" or flag in out or flag == "--no-widget-state"


@pytest.mark.parametrize("option", ["--port", "--ip", "--port-retries", "--browser",
                                    "--log-level"])
@pytest.mark.parametrize("value", ["8889", "03", "99"])
def test_an_option_that_takes_a_value_takes_the_next_word(capsys, option, value):
    """jupyter's valued options take the word after them, even one that
    names a lab (`--port 03` is port 03, as written)."""
    assert _run(["lab", "--print", option, value]) == 0
    out = capsys.readouterr().out.split()
    assert f"{option}={value}" in out and out[-1].endswith(f"my-labs/{lab.FIRST_LAB}")


def test_jupyter_options_are_read_from_jupyterlab():
    flags, valued = lab.jupyter_options()
    assert {"--no-browser", "--allow-root"} <= flags and {"--port", "--ip"} <= valued
    assert not flags & valued


LINK = re.compile(r"\]\(\s*<?([^)\s>]+)")


@pytest.mark.parametrize("language", list(lab.EDITIONS))
def test_every_link_of_the_copied_readme_resolves_from_my_labs(tmp_path, language):
    """Newcomer 16, finding 5: my-labs/README.md, copied from labs/README.md, linked
    ``solutions/`` and ``zh-CN/README.md``, which are not in my-labs/ (and the Chinese
    copy ``../solutions/``): a click in JupyterLab did nothing. Each edition's copy is
    made alone (the other edition not copied), then every relative link in it must
    name something that exists from where the copy lives."""
    root = tmp_path / "clone"
    shutil.copytree(ROOT / "labs", root / "labs")
    shutil.copytree(ROOT / "docs", root / "docs")
    lab.copy_labs(root, language)
    copy = root / lab.WORK / lab.EDITIONS[language] / "README.md"
    links = [t.split("#")[0] for t in LINK.findall(copy.read_text(encoding="utf-8"))
             if not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:|#|/", t)]
    assert len(links) > 10
    broken = [t for t in links if not (copy.parent / t).exists()]
    assert not broken, broken
    original = ROOT / "labs" / lab.EDITIONS[language] / "README.md"
    readme = root / "labs" / lab.EDITIONS[language] / "README.md"
    os.utime(readme, (time.time() + 60, time.time() + 60))  # touched, the same text
    assert lab.copy_labs(root, language) == ([], [])
    readme.write_text(readme.read_text(encoding="utf-8") + "\nmore\n", encoding="utf-8")
    os.utime(readme, (time.time() + 120, time.time() + 120))
    assert lab.copy_labs(root, language) == ([], ["README.md"])
    assert copy.read_text(encoding="utf-8") != original.read_text(encoding="utf-8")


def test_the_no_widget_state_help_says_what_the_flag_and_the_setting_do():
    """Newcomer 16, findings 3 and 4: the help said only that without the setting a
    reopened lab shows its widgets once its cells run, which read as "with it they
    work"; a saved widget is a picture whose controls work once its cell runs again.
    And the flag now takes out a setting an earlier run wrote."""
    action = next(a for a in lab._parser()._actions if "--no-widget-state" in a.option_strings)
    text = " ".join(action.help.split())
    assert "take out the setting an earlier run wrote" in text
    assert "pictures" in text and "controls work once the cells run again" in text


@pytest.mark.parametrize("typo, lab_file", [("premption", "06_preemption.ipynb"),
                                            ("pagng", "03_paging.ipynb"),
                                            ("kv cahce", "01_kv_cache.ipynb"),
                                            ("contigous", "02_contiguous_waste.ipynb"),
                                            ("shring", "07_sharing.ipynb")])
def test_a_misspelt_lab_is_answered_with_the_closest(typo, lab_file):
    """Newcomer 32: ``lab premption`` listed every lab without a suggestion."""
    message = lab.unnamed_lab(ROOT / "labs", typo, [])
    assert f"no lab {typo!r} in " in message and f"(did you mean {lab_file}?)" in message


@pytest.mark.parametrize("name", ["zzz", "5x", "quantum"])
def test_a_name_like_no_lab_gets_no_guess(name):
    assert "did you mean" not in lab.unnamed_lab(ROOT / "labs", name, [])


@pytest.mark.parametrize("name, said", [("pagin", "'pagin' is 03_paging.ipynb"),
                                        ("When memory runs out",
                                         "'When memory runs out' is 06_preemption.ipynb"),
                                        ("03", None), ("3", None), ("03_paging", None),
                                        ("labs/03_paging.ipynb", None), ("4b", None)])
def test_a_lab_named_by_a_word_or_title_says_which_it_opens(capsys, name, said):
    """Newcomer 33: ``lab pagin`` (a typo that starts a word of 03's name)
    opened 03_paging and started JupyterLab without a word; a number or the
    lab's own name needs none."""
    assert _run(["lab", name, "--print"]) == 0
    err = capsys.readouterr().err
    if said:
        assert f"lab: {said}\n" in err
    else:
        assert "lab: '" not in err


def test_a_second_clone_is_told_whose_labs_open(tmp_path, monkeypatch, capsys):
    """Newcomer 34: `lab` run from a second clone opened (and copied into) the
    clone pagedkit is installed from, without a word. It says so now, from the
    second clone's root or any folder in it; from the clone itself, or a
    folder of no clone, it says nothing."""
    root, second = _clone(tmp_path / "installed"), _clone(tmp_path / "second")
    (second / "src" / "pagedkit").mkdir(parents=True)
    (root / "src" / "pagedkit").mkdir(parents=True, exist_ok=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.setattr(lab, "clone_root", lambda: root)
    monkeypatch.setattr(lab, "settings_dir", lambda: tmp_path / "overrides.d")
    for where, told in [(second, True), (second / "labs", True), (root, False),
                        (root / "labs", False), (tmp_path / "elsewhere", False)]:
        assert lab.other_clone(root, where) == (second if told else None), where
        monkeypatch.chdir(where)
        assert lab.main(["--print"]) == 0
        err = capsys.readouterr().err
        said = f"you are in {second}, but pagedkit runs from {root}: this opens {root}'s labs"
        assert (said in err) == told, err


def test_bench_study_and_the_nbgrader_course_say_whose_labs_they_read(tmp_path, monkeypatch,
                                                                      capsys):
    """Newcomer 36: from a second clone, `bench study` and the nbgrader course
    read the installed clone's labs in silence."""
    root, second = _clone(tmp_path / "installed"), _clone(tmp_path / "second")
    for clone in (root, second):
        (clone / "src" / "pagedkit").mkdir(parents=True, exist_ok=True)
        (clone / "labs" / "zh-CN").mkdir(exist_ok=True)
    for where, told in [(second, True), (second / "labs", True), (root, False),
                        (tmp_path, False)]:
        monkeypatch.chdir(where)
        for labs in (root / "labs", root / "labs" / "zh-CN"):
            lab.say_other_clone("bench study", labs)
            err = capsys.readouterr().err
            said = f"bench study: you are in {second}, but this reads the labs in {labs}"
            assert (said in err) == told, (where, labs, err)
