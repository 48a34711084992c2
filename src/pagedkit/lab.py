"""``python -m pagedkit lab``: open the labs in JupyterLab, from a clone.

What plain ``jupyter lab labs/`` got wrong for a newcomer (issue #26), and
what this does instead:

* served from ``labs/``, the ``docs/`` files the labs cite could not be
  opened: JupyterLab is served from the clone's root, so ``docs/``,
  ``src/pagedkit/`` and the labs are all one click away;
* as root (a container, a cloud VM) JupyterLab refuses to start without
  ``--allow-root``: it is added when this process runs as root, and said;
* the learner's runs were saved into the tracked notebooks (whose committed
  outputs the test suite compares): the learner works in copies, in
  ``my-labs/`` beside ``labs/`` (ignored by git; links such as
  ``../docs/vllm.md`` resolve the same from there). A copy is made once, when
  missing; a lab that changed since is named, never overwritten;
* a reopened notebook showed "Loading widget..." until re-run: the command
  gives JupyterLab a default that saves widget state with a notebook
  (``overrides.d/pagedkit.json`` in JupyterLab's settings folder, where
  packages put their defaults; the learner's own settings still win).

``--lang zh-CN`` opens the Simplified Chinese edition instead (``labs/zh-CN/``,
copied to ``my-labs/zh-CN/``, so its links to ``../../docs/`` resolve the same);
where JupyterLab's Chinese language pack is installed, JupyterLab's own
interface is set to Chinese too (the same settings default), and this command
speaks Chinese (as ``PAGEDKIT_LANGUAGE=zh-CN`` makes every command do). ``--print`` makes
the copy the command opens and prints the command instead of running it, so it
runs as printed; it leaves JupyterLab's settings alone and says which default
it would have written.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from ._validation import PROG, no_progress_refusal
from .i18n import _, join_names, language_tag, speaking
from .i18n.terminal import HelpFormatter

#: The folder of the learner's copies, beside labs/ in the clone (in .gitignore).
WORK = "my-labs"
FIRST_LAB = "00_start_here.ipynb"
#: JupyterLab defaults for the labs: widget state saved with the notebook.
SETTINGS = {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}}
#: the editions of the labs: language -> their folder under labs/ (and under my-labs/)
EDITIONS = {"en": ".", "zh-CN": "zh-CN"}
#: JupyterLab's language pack for an edition (PyPI name, module, JupyterLab's locale)
LANGUAGE_PACKS = {"zh-CN": ("jupyterlab-language-pack-zh-CN", "jupyterlab_language_pack_zh_CN",
                            "zh_CN")}
#: JupyterLab's setting of its interface language (`ui_settings`)
UI_LANGUAGE = "@jupyterlab/translation-extension:plugin"


def edition(root: Path, language: str) -> Path:
    """The folder of the labs in `language` ("en": labs/, "zh-CN": labs/zh-CN/)."""
    return (root / "labs" / EDITIONS[language]).resolve()


def ui_settings(language: str) -> dict:
    """JupyterLab's interface language for `language`, where its language pack is
    installed ({} otherwise: JupyterLab keeps its own default)."""
    pack = LANGUAGE_PACKS.get(language)
    if pack is None or importlib.util.find_spec(pack[1]) is None:
        return {}
    return {UI_LANGUAGE: {"locale": pack[2]}}


def settings_dir() -> Path:
    """JupyterLab's folder of packages' setting defaults in this environment."""
    from jupyterlab.commands import get_app_dir

    return Path(get_app_dir()) / "settings" / "overrides.d"


def write_settings(folder: Path, settings: dict = SETTINGS) -> Path | None:
    """Put `settings` in `folder` as pagedkit.json; the path, or None where the
    environment is not writable (JupyterLab then runs with its own defaults)."""
    path = folder / "pagedkit.json"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings, indent=2) + "\n")
    except OSError:
        return None
    return path


def remove_widget_state(folder: Path) -> Path | None:
    """Take `SETTINGS` out of the pagedkit.json an earlier run wrote in `folder`, so
    ``--no-widget-state`` stops widget state as it says (the flag alone only skipped the
    writing); the file is deleted when nothing else is left in it (a language kept from
    `ui_settings` stays). The path changed, or None: no such file, not pagedkit's (a key
    pagedkit never writes), no widget setting in it, or not writable."""
    path = folder / "pagedkit.json"
    ours = {*SETTINGS, UI_LANGUAGE}
    try:
        held = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(held, dict) or not set(held) <= ours or not set(held) & set(SETTINGS):
        return None
    rest = {key: value for key, value in held.items() if key not in SETTINGS}
    try:
        if rest:
            path.write_text(json.dumps(rest, indent=2) + "\n")
        else:
            path.unlink()
    except OSError:
        return None
    return path


def clone_root(package_file: str | Path | None = None) -> Path | None:
    """The clone this pagedkit runs from (an editable install of ``src/``), or
    None when it was installed without one (from a wheel, on Colab)."""
    here = Path(package_file or Path(__file__).with_name("__init__.py")).resolve()
    root = here.parents[2] if len(here.parents) > 2 else None
    return root if root is not None and (root / "labs" / FIRST_LAB).is_file() else None


def other_clone(root: Path, where: Path | None = None) -> Path | None:
    """The clone of pagedkit that `where` (the current directory) lies in, if
    it is not `root`, the one this pagedkit runs from: a second clone, whose
    labs this command does not open."""
    here = (where or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "labs" / FIRST_LAB).is_file() and (folder / "src" / "pagedkit").is_dir():
            return None if folder == root.resolve() else folder
    return None


def say_other_clone(command: str, labs: Path) -> None:
    """What `bench study` and the nbgrader course say when they read `labs`
    of the clone pagedkit runs from while you are in another (newcomer 36
    edited a lab in a second clone and got the first's words); `lab` says
    it in the labs' language as it opens one."""
    here = labs.resolve()
    root = next((f for f in (here, *here.parents) if (f / "labs" / FIRST_LAB).is_file()), None)
    elsewhere = None if root is None else other_clone(root)
    if elsewhere is not None:
        print(f"{command}: you are in {elsewhere}, but this reads the labs in {labs} (the clone "
              f"pagedkit runs from); to read {elsewhere}'s, run pip install -r requirements.txt "
              "there first", file=sys.stderr)


def lab_title(path: Path) -> str:
    """A lab's title: its notebook's first heading after the dash (``# Lab 06 —
    When memory runs out: preemption, swap or recompute``), the one source the
    labs' tables (README.md, labs/README.md) copy from (tests/test_lab.py holds
    them to it)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    heading = next(("".join(c["source"]).strip().splitlines() for c in cells
                    if c["cell_type"] == "markdown"), [""])[0]
    before, dash, title = heading.partition("—")
    return (title if dash else before.lstrip("#")).strip()


#: a Chinese character (CJK ideographs): Chinese writes no spaces between words, so each
#: one starts a word for the lab names (``显存耗尽时`` names lab 06, whose title is
#: ``当显存耗尽时``), as each English word's start does
CJK = re.compile(r"([\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff])")


def _words(text: str) -> str:
    """`text` as the lab names read it: its words, lower case, joined by ``_``, each
    Chinese character a word of its own (`CJK`); a remark in brackets left out
    (``Split-KV and paged prefill (optional)`` is ``split_kv_and_paged_prefill``)."""
    text = CJK.sub(r" \1 ", re.sub(r"[(（][^)）]*[)）]", " ", text))
    return "_".join(re.findall(r"[^\W_]+", text.lower()))


def find_lab(labs: Path, name: str) -> tuple[str | None, list[str]]:
    """The lab `name` names in the folder `labs`: ``(its file name, [])``
    when it names exactly one, else ``(None, the labs it could mean)`` —
    several, or none. A lab is named by its file name (``03_paging.ipynb``),
    its stem (``03_paging``), its number (``03``, ``3``, ``04b``, ``4b``), a path to it
    (``labs/03_paging.ipynb``), the start of a word of its name (``paging``,
    ``puzz``, ``kv cache``; not ``zz`` from the middle of ``puzzles``), its title
    as the tables give it (`lab_title`: ``"When memory runs out"``) or the start
    of a word of it (``when``, ``memory``; in Chinese, each character starts a word:
    ``显存耗尽时``), alone or after the lab's number (``06 When memory runs out``), in
    either edition's language (`_titles`: ``"当显存耗尽时"`` names lab 06 too, in labs/ as
    in labs/zh-CN/; a title of the edition asked for before its twin's); case, spaces and
    dashes aside. The
    closest kind of match wins (``04`` is ``04_paged_attention``, not 04b or 04c;
    ``page`` starts a word of its name, ``paged``, where 03's is ``paging``). The one
    rule for lab names on every command line (``lab``, ``bench labs``, ``bench study``);
    `unnamed_lab` says what is wrong when none is found."""
    word = Path(name).name.removesuffix(".ipynb")
    digits = len(word) - len(word.lstrip("0123456789"))  # a number, as 3 or 4b, is 03 or 04b
    word = word[:digits].zfill(2) + word[digits:] if digits else word
    if not _words(word):
        return None, []
    for matches in _matches(sorted(labs.glob("*.ipynb")), word):
        if len(matches) == 1:
            return matches[0] + ".ipynb", []
        if matches:
            return None, [m + ".ipynb" for m in matches]
    return None, []


def _matches(paths: list[Path], word: str):
    """The stems of the labs in `paths` that `word` names, by each kind of match in
    turn, the closest first (`find_lab`); the titles are read only when no name matches."""
    stems, words = [p.stem for p in paths], _words(word)
    yield [s for s in stems if s == word]
    yield [s for s in stems if s.startswith(word + "_")]
    yield [s for s in stems if s.startswith(word)]
    yield [s for s in stems if f"_{words}" in f"_{s.lower()}"]
    titles = {p.stem: _titles(p) for p in paths}  # each lab's own first, then its twins'
    for match in (lambda title: title == words, lambda title: title.startswith(words),
                  lambda title: f"_{words}" in f"_{title}"):
        yield [s for s in stems if any(match(title) for title in titles[s][0])]
        yield [s for s in stems if any(match(title) for forms in titles[s][1:]
                                       for title in forms)]


def _titles(path: Path) -> list[list[str]]:
    """The titles of the lab `path` as its names read them (`_words`): each full and short
    (up to its colon, as the tables print it: ``PagedAttention``, whose Chinese edition's
    ``PagedAttention 之外`` starts alike), alone and after the lab's number (README.md's
    ``06 When memory runs out``): its own first, then its
    twin's in each other edition of the labs that has it (labs/06_preemption.ipynb and
    labs/zh-CN/06_preemption.ipynb are one lab), so a lab's English title and its
    Chinese one name it in both editions."""
    folder = path.parent
    labs = folder.parent if folder.name in EDITIONS.values() else folder  # labs/ itself
    twins = dict.fromkeys([path, *(labs / sub / path.name for sub in EDITIONS.values())])
    number = path.stem.split("_", 1)[0]
    titles = [lab_title(twin) for twin in twins if twin.is_file()]
    return [[_words(form) for title in [full, re.split("[:：]", full)[0]]  # short: as tables
             for form in (title, f"{number} {title}")] for full in titles]


def unnamed_lab(labs: Path, name: str, could_be: list[str]) -> str:
    """What is wrong with a lab name `find_lab` found no one lab for (`could_be`:
    the labs it could mean): one wording for ``lab``, ``bench labs`` and ``bench study``."""
    names = ", ".join(p.name for p in sorted(labs.glob("*.ipynb")))
    if could_be:
        return (_("{lab!r} could be any of {matches}: give more of its name, or its number "
                  "(the labs: {names})")
                .format(lab=name, matches=", ".join(could_be), names=names))
    close = _closest_lab(sorted(labs.glob("*.ipynb")), name)
    guess = _(" (did you mean {lab}?)").format(lab=close) if close else ""
    return (_("no lab {lab!r} in {folder}{guess}; name one by its number (03), name "
              "(03_paging), title (Paging) or file (03_paging.ipynb): {names}")
            .format(lab=name, folder=labs, guess=guess, names=names))


def _closest_lab(paths: list[Path], name: str) -> str | None:
    """The lab whose name, or a word of it, is spelled closest to `name`
    (``premption``: 06_preemption.ipynb), if any is close."""
    words = {}
    for path in paths:
        parts = path.stem.split("_")[1:]
        for form in [*parts, "_".join(parts)]:
            words.setdefault(form, path.name)
    match = difflib.get_close_matches(_words(Path(name).name.removesuffix(".ipynb")),
                                      list(words), n=1, cutoff=0.8)
    return words[match[0]] if match else None


def copy_labs(root: Path, language: str = "en") -> tuple[list[str], list[str]]:
    """Copy every lab of an edition (and its README) missing from ``my-labs/`` (the
    Chinese ones: ``my-labs/zh-CN/``); return the names copied and the names whose
    original changed since the copy was made."""
    labs = edition(root, language)
    work = root / WORK / EDITIONS[language]
    work.mkdir(parents=True, exist_ok=True)
    copied, changed = [], []
    for original in [*sorted(labs.glob("*.ipynb")), labs / "README.md"]:
        copy = work / original.name
        if not copy.exists():
            if original.suffix == ".md":  # its links rewritten to resolve from the copy
                copy.write_bytes(_readme_copy(original, work))
            else:
                shutil.copy2(original, copy)
            copied.append(original.name)
        elif original.stat().st_mtime > copy.stat().st_mtime and \
                (_readme_copy(original, work) if original.suffix == ".md"
                 else original.read_bytes()) != copy.read_bytes():
            changed.append(original.name)
    return copied, changed


def _readme_copy(original: Path, work: Path) -> bytes:
    """The labs' README `original` as its copy in `work` reads: a link to one of the
    labs copied beside it stays; every other relative link (``solutions/``,
    ``zh-CN/README.md``, ``../docs/``) is rewritten to reach what it names in the
    clone from `work`, where the copy lives (newcomer 16: ``solutions/`` was no
    folder of ``my-labs/``)."""
    from .i18n.notebooks import is_relative, relative_links

    labs = original.parent

    def from_work(target: str) -> str:
        path, hash_, anchor = target.partition("#")
        beside = (labs / path).parent == labs and path.endswith(".ipynb")  # copied too
        if not is_relative(target) or not path or beside:
            return target
        moved = os.path.relpath(labs / path, work).replace(os.sep, "/")
        return moved + ("/" if path.endswith("/") else "") + hash_ + anchor

    return relative_links(original.read_text(encoding="utf-8"), from_work).encode("utf-8")


def command(root: Path, lab: str, *, as_root: bool, extra: list[str],
            language: str = "en") -> list[str]:
    """The jupyter lab command line: served from `root`, opening ``my-labs/<lab>``
    (``my-labs/zh-CN/<lab>`` for the Chinese edition)."""
    argv = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root}"]
    if as_root:
        argv.append("--allow-root")
    return [*argv, *extra, str((root / WORK / EDITIONS[language] / lab).resolve())]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{PROG} lab",
        description=_("Open the labs in JupyterLab, served from the clone's root (docs/ "
                      "included). You work in copies in {WORK}/ (made once, ignored by git); "
                      "labs/ keeps the originals.").format(WORK=WORK),
        epilog=_("Any other option goes to jupyter lab, e.g. --no-browser or --port 8889."),
        formatter_class=HelpFormatter)
    p.add_argument("lab", nargs="?", default=FIRST_LAB,
                   help=(_("the lab to open: its number, name, title or file, e.g. 03, "
                           "03_paging, Paging or 03_paging.ipynb (default: {FIRST_LAB})")
                          .format(FIRST_LAB=FIRST_LAB)))
    p.add_argument("--lang", default=None, metavar="LANG",
                   help=_("the edition: en (default) or zh-CN, the Simplified Chinese labs "
                          "(labs/zh-CN/, copied to my-labs/zh-CN/); this command's messages are "
                          "then in that language too"))
    p.add_argument("--print", action="store_true", dest="dry_run",
                   help=_("copy the labs as usual, then print the jupyter command instead of "
                          "running it (JupyterLab's settings are left as they are)"))
    p.add_argument("--no-widget-state", action="store_false", dest="widget_state",
                   help=_("do not set JupyterLab (in this environment) to save widget state "
                        "with a notebook, and take out the setting an earlier run wrote; without "
                        "it, a reopened lab shows its widgets only once its cells run again (with "
                        "it, a lab saved after Run All shows pictures of them, whose controls work "
                        "once the cells run again)"))
    return p


def jupyter_options() -> tuple[set[str], set[str]]:
    """jupyter lab's options as ``--name``: (those that take no value, those
    that take one), read from JupyterLab itself; both empty where it is not
    installed (the lab will not open then anyway)."""
    try:
        from jupyterlab.labapp import LabApp
    except ImportError:
        return set(), set()

    def names(table) -> set[str]:
        keys = (k for key in table for k in (key if isinstance(key, tuple) else (key,)))
        return {f"--{k}" for k in keys}

    flags, valued = names(LabApp.flags), names(LabApp.aliases)
    return flags - valued, valued - flags  # one in both ('watch') is neither: it is guessed


def join_option_values(argv: list[str], is_lab, flags: set[str] = frozenset(),
                       valued: set[str] = frozenset()) -> list[str]:
    """jupyter's ``--port 8889`` as ``--port=8889``, so argparse does not take
    the 8889 for the notebook to open. An option in `valued` takes the next
    word; one in `flags` (``--print``, ``--no-browser``) never does, so the
    word after it is the lab (``lab --print 99`` asks for a lab 99); another
    takes it unless it names a lab (`is_lab`)."""
    out: list[str] = []
    for word in argv:
        prev = out[-1] if out else ""
        if (prev.startswith("--") and "=" not in prev and not word.startswith("-")
                and prev not in flags and (prev in valued or not is_lab(word))):
            out[-1] = f"{prev}={word}"
        else:
            out.append(word)
    return out


#: Signals that end this command, and what is passed on to JupyterLab for each: a
#: ``kill`` (TERM), a closed terminal (HUP), an interrupt (INT: Ctrl-C, or ``kill
#: -INT`` of this command alone). Without that, JupyterLab ran on, orphaned, on its
#: port. An interrupt is passed on as a TERM, JupyterLab's clean stop: Ctrl-C reaches
#: JupyterLab itself too (one process group), and a second INT would race with it.
FORWARDED = {getattr(signal, name): getattr(signal, sent) for name, sent in
             (("SIGTERM", "SIGTERM"), ("SIGHUP", "SIGHUP"), ("SIGINT", "SIGTERM"))
             if hasattr(signal, name)}


def run_until_it_exits(argv: list[str]) -> int:
    """Run `argv` and return its exit status, the shell's way. A TERM, HUP
    or INT (Ctrl-C) to this command is passed on to JupyterLab (`FORWARDED`),
    which stops cleanly, and is waited for instead of dying with a traceback
    (`exit_status`)."""
    received: list[int] = []
    pending: list[int] = []  # to pass on once JupyterLab has started
    proc = None

    def note(signum, _frame):
        received.append(signum)
        if proc is None:
            pending.append(FORWARDED[signum])
        else:
            proc.send_signal(FORWARDED[signum])

    previous = {s: signal.signal(s, note) for s in FORWARDED}
    try:
        proc = subprocess.Popen(argv)
        while pending:  # arrived before it started: pass them on now, once each
            proc.send_signal(pending.pop(0))
        while True:
            try:
                code = proc.wait()
                break
            except KeyboardInterrupt:  # where `note` could not be installed for SIGINT
                continue
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return exit_status(code, received)


def exit_status(code: int, received: list[int]) -> int:
    """The status to exit with once JupyterLab ended with `code` (Popen's:
    -N if signal N ended it): a KeyboardInterrupt when an interrupt (INT)
    came first, this command's or JupyterLab's own, so the command line
    says "interrupted" and exits 130, as every command does; 128 + N for a
    TERM or HUP this command passed on, or for a signal that ended
    JupyterLab; else JupyterLab's own code."""
    if (received[:1] or [-code]) == [signal.SIGINT]:
        raise KeyboardInterrupt
    if received:
        return 128 + received[0]
    return 128 - code if code < 0 else code


def set_jupyterlab(widget_state: bool, ui: dict) -> None:
    """Make pagedkit.json in JupyterLab's settings hold what this run asks for, and say
    so in one statement: widget state saved with a notebook, unless `widget_state` is
    False (``--no-widget-state``: the setting an earlier run wrote is taken out), and
    JupyterLab's menus in the edition's language, where its pack is installed (`ui`).
    Where it asks for neither, no file is written."""
    if not widget_state and not ui:
        if (removed := remove_widget_state(settings_dir())) is not None:
            print(_("lab: JupyterLab in this environment no longer saves widget state with a "
                    "notebook (the setting an earlier run wrote is taken out of {removed})")
                  .format(removed=removed), file=sys.stderr)
        return
    written = write_settings(settings_dir(), {**(SETTINGS if widget_state else {}), **ui})
    if written is None and widget_state:
        print(_("lab: could not write {settings_dir}: widgets in a reopened lab show again "
                "once its cells run").format(settings_dir=settings_dir()), file=sys.stderr)
    elif written is None:
        print(_("lab: could not write {settings_dir}: JupyterLab's own menus stay as they are "
                "(Settings > Language sets them to Chinese)").format(settings_dir=settings_dir()),
              file=sys.stderr)
    elif widget_state:
        print(_("lab: JupyterLab in this environment saves widget state with a notebook "
                "({written}; delete it, or run with --no-widget-state, to stop)")
              .format(written=written), file=sys.stderr)
        if ui:
            print(_("lab: and shows its own menus in Chinese (the same file; Settings > "
                    "Language changes it)"), file=sys.stderr)
    else:
        print(_("lab: JupyterLab in this environment shows its own menus in Chinese and saves "
                "no widget state with a notebook (both set in {written}; Settings > Language "
                "changes the language)").format(written=written), file=sys.stderr)


def asked_language(argv: list[str]) -> str | None:
    """The language ``--lang`` names in `argv`, read before anything else (`--help` and a
    usage error are said in it too), as `language_tag` spells it; None when it is not given
    or names no language pagedkit speaks (`main` then refuses it, in the language of the
    moment)."""
    early = argparse.ArgumentParser(add_help=False, exit_on_error=False,
                                    formatter_class=HelpFormatter)
    early.add_argument("--lang", default=None)
    try:
        asked, _rest = early.parse_known_args(argv)
    except argparse.ArgumentError:  # `--lang` without a value: the command's parser says so
        return None
    return None if asked.lang is None else language_tag(asked.lang)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    language = asked_language(argv)
    if language is None:  # no --lang (or a wrong one): messages in PAGEDKIT_LANGUAGE's language
        return _main(argv)
    with speaking(language):  # the edition's language is this command's too, --help included
        return _main(argv)


def _main(argv: list[str]) -> int:
    parser = _parser()
    root = clone_root()
    if root is not None:
        own_flags = {o for a in parser._actions if a.nargs == 0 for o in a.option_strings}
        flags, valued = jupyter_options() if argv else (set(), set())
        argv = join_option_values(argv, lambda word: find_lab(root / "labs", word)[0] is not None,
                                  own_flags | flags, valued)
    args, extra = parser.parse_known_args(argv)
    if any(word.split("=")[0] == "--no-progress" for word in extra):  # pagedkit's, not
        # JupyterLab's: refused before any copy (`--no-progress=x` as joined above too)
        parser.error(no_progress_refusal("lab"))
    if root is None:
        parser.error(_("the labs live in a clone of the repository, and this pagedkit was "
                     "installed without one: git clone https://github.com/pagedkit/pagedkit, "
                     "then in it pip install -r requirements.txt and run this again (or open "
                     "a lab on Colab)"))
    if args.lang is None:  # the English edition; messages in PAGEDKIT_LANGUAGE's language
        args.lang = "en"
    elif language_tag(args.lang) in EDITIONS:
        args.lang = language_tag(args.lang)
    else:
        parser.error(_("--lang {lang!r}: the labs come in {editions} (e.g. --lang zh-CN for "
                       "the Simplified Chinese edition)")
                     .format(lang=args.lang, editions=join_names(EDITIONS)))
    return _open(parser, root, args, extra)


def _open(parser: argparse.ArgumentParser, root: Path, args: argparse.Namespace,
          extra: list[str]) -> int:
    """Copy the labs of `args.lang`'s edition and open `args.lab` (or print the command)."""
    labs = edition(root, args.lang)
    found, could_be = find_lab(labs, args.lab)
    if found is None:
        parser.error(unnamed_lab(labs, args.lab, could_be))
    given, stem = Path(args.lab).name.removesuffix(".ipynb"), found.removesuffix(".ipynb")
    if given != stem and given.lstrip("0") != stem.split("_")[0].lstrip("0"):
        print(_("lab: {name!r} is {lab}").format(name=args.lab, lab=found), file=sys.stderr)
    args.lab = found
    elsewhere = other_clone(root)
    if elsewhere is not None:
        print(_("lab: you are in {here}, but pagedkit runs from {root}: this opens {root}'s "
                "labs (to work in {here}, run pip install -r requirements.txt there first)")
              .format(here=elsewhere, root=root), file=sys.stderr)
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    argv_ = command(root, args.lab, as_root=as_root, extra=extra, language=args.lang)
    copied, changed = copy_labs(root, args.lang)  # --print too: the command opens the copy
    sub = "" if args.lang == "en" else f"{EDITIONS[args.lang]}/"  # labs/zh-CN/, my-labs/zh-CN/
    notebooks = [name for name in copied if name.endswith(".ipynb")]  # not their README
    if notebooks:
        print(_("lab: copied {n} of the labs into {folder}/: you work there, labs/ keeps the "
                "originals").format(n=len(notebooks), folder=root / WORK / sub), file=sys.stderr)
    for name in changed:
        print(_("lab: labs/{name} changed since your copy in {WORK}/; yours is kept (delete it "
                "to take the new one)").format(name=sub + name, WORK=WORK + "/" + sub[:-1]
                                               if sub else WORK), file=sys.stderr)
    ui = ui_settings(args.lang)
    if args.dry_run:
        if args.widget_state:
            print(_("lab: --print writes no JupyterLab settings: a reopened lab shows its widgets "
                    "only once its cells run again, unless {path} holds {settings} (running "
                    "without --print writes it)")
                  .format(path=settings_dir() / "pagedkit.json",
                          settings=json.dumps({**SETTINGS, **ui})), file=sys.stderr)
        elif ui:
            print(_("lab: --print writes no JupyterLab settings: running without --print writes "
                    "{settings} into {path} (its menus in Chinese, no widget state)")
                  .format(path=settings_dir() / "pagedkit.json", settings=json.dumps(ui)),
                  file=sys.stderr)
        print(shlex.join(argv_))  # quoted where a path has a space: it runs as printed
        return 0
    if args.lang in LANGUAGE_PACKS and not ui:
        print(_("lab: JupyterLab's own menus stay English: pip install {pack} for them in "
                "Chinese (then Settings > Language)").format(pack=LANGUAGE_PACKS[args.lang][0]),
              file=sys.stderr)
    set_jupyterlab(args.widget_state, ui)
    if as_root:
        print(_("lab: running as root, so with --allow-root (JupyterLab refuses root without "
              "it)"), file=sys.stderr)
    if extra:  # a mistyped option is jupyter's to refuse: say where its error comes from
        print(_("lab: passing {options} on to jupyter lab").format(options=" ".join(extra)),
              file=sys.stderr)
    return run_until_it_exits(argv_)


if __name__ == "__main__":
    sys.exit(main())
