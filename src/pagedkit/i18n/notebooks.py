"""The Chinese labs, generated from the English ones and a catalog per lab.

The English notebooks ``labs/NN_name.ipynb`` are the one source. A catalog
``i18n/zh-CN/labs/NN_name.json`` holds one entry per English markdown cell, in
notebook order: the cell's id, the first 16 hex digits of the SHA-256 of the
English text it was translated from, and the Chinese markdown ("zh").
`generate` makes ``labs/zh-CN/NN_name.ipynb`` from the two:

* every cell of the English notebook, ids and metadata (nbgrader's) included;
  code cells as they are (shared, never translated);
* each markdown cell's source replaced by its "zh", with relative links
  rewritten for the folder one level deeper, and the lab's own Colab and Binder
  addresses and ``python -m pagedkit lab`` pointed at the Chinese edition
  (`rewrite_links`);
* one code cell more, right after the Colab set-up cell (which must run first:
  on Colab it installs pagedkit): ``pagedkit.set_language("zh-CN")``, so the
  package's messages come out in Chinese.

`build` writes the generated notebook and executes it (as ``.ci/notebooks.py
run`` does), so its outputs are the Chinese run's own. `problems` is what the
tests check: every catalog complete and fresh, its terms the glossary's, and
every generated notebook's sources what `generate` makes now. `skeleton`
starts or refreshes a catalog for translators.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

LANGUAGE = "zh-CN"
CATALOGS = Path("i18n") / LANGUAGE / "labs"
OUTPUT = Path("labs") / LANGUAGE
GLOSSARY = Path("docs") / "glossary.md"
#: the Chinese labs' index, labs/zh-CN/README.md, with a row for every lab
INDEX_SOURCE = Path("i18n") / LANGUAGE / "labs_README.md"
#: the marker in docs/glossary.md above the table of terms the check holds labs to
GLOSSARY_MARKER = "<!-- checked terms: python -m pagedkit.i18n check reads this table -->"

SET_LANGUAGE_ID = "set-language-zh-cn"
SET_LANGUAGE_SOURCE = f'import pagedkit\npagedkit.set_language("{LANGUAGE}")'
#: how the labs' Colab set-up cell begins (the language cell comes right after it)
COLAB_SETUP = "# Setup: on Colab"


def cell_sha(source: str) -> str:
    """The first 16 hex digits of the SHA-256 of a cell's text (UTF-8)."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


def source_of(cell: dict) -> str:
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def first_words(text: str, n: int = 8) -> str:
    words = text.split()
    return " ".join(words[:n]) + (" ..." if len(words) > n else "")


def repo_root() -> Path:
    """The clone this module runs from (src/pagedkit/i18n -> the root), else the cwd."""
    here = Path(__file__).resolve().parents[3]
    return here if (here / "labs").is_dir() else Path.cwd()


# --- links -----------------------------------------------------------------

_SIBLING_LAB = re.compile(r"\d\d[\w-]*\.ipynb(#.*)?$")
_ABSOLUTE = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*:|#|/)")
_INLINE = re.compile(r"(\]\(\s*<?)([^)\s>]+)")
_HTML = re.compile(r"""(\b(?:href|src)\s*=\s*["'])([^"']+)""")
_REFERENCE = re.compile(r"(^[ ]{0,3}\[[^\]]+\]:[ \t]*<?)(\S+?)(>?(?:\s|$))", re.M)
#: the English lab's own Colab/Binder addresses -> its Chinese sibling's
_HOSTED = re.compile(r"(github/pagedkit/pagedkit/blob/main/labs/|lab/tree/labs/)"
                     r"(\d\d[\w-]*\.ipynb)")
#: Binder's folder of the labs, and the command that opens them, as the text quotes them
_HOSTED_FOLDER = re.compile(r"(urlpath=lab/tree/labs)(?=[`)\s\"'>]|$)")
_LAB_COMMAND = re.compile(r"(python -m pagedkit lab)(?=`)")
#: code, whose text is shown as written: a fenced block (``` or ~~~), or a code span
#: (a run of backticks up to the next run of as many, across lines as in CommonMark)
_CODE = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})[^\n]*\n[\s\S]*?^[ ]{0,3}\1[^\n]*$"
                   r"|(?<!`)(`+)(?!`)[\s\S]*?(?<!`)\2(?!`)", re.M)


def rewrite_target(target: str) -> str:
    """A relative link of an English lab, as the Chinese lab (in labs/zh-CN/) needs it.

    ``../docs/x.md`` -> ``../../docs/x.md``; ``solutions/x`` -> ``../solutions/x``;
    a sibling lab ``NN_name.ipynb`` and ``README.md`` stay (the Chinese ones);
    absolute links and anchors stay.
    """
    if _ABSOLUTE.match(target) or _SIBLING_LAB.match(target) or \
            target.split("#")[0] == "README.md":
        return target
    return "../" + target


def rewrite_links(markdown: str) -> str:
    """`markdown` with every relative link rewritten by `rewrite_target`, and the
    lab's Colab and Binder addresses (a lab's, or Binder's folder of the labs) and the
    command ``python -m pagedkit lab`` (as inline code) opening the Chinese edition.
    Code (spans and fenced blocks) is no link: ``kernel[grid](args)`` stays."""
    markdown = relative_links(markdown, rewrite_target)
    markdown = _HOSTED.sub(lambda m: f"{m.group(1)}{LANGUAGE}/{m.group(2)}", markdown)
    markdown = _HOSTED_FOLDER.sub(lambda m: f"{m.group(1)}/{LANGUAGE}", markdown)
    return _LAB_COMMAND.sub(lambda m: f"{m.group(1)} --lang {LANGUAGE}", markdown)


def relative_links(markdown: str, rewrite: Callable[[str], str]) -> str:
    """`markdown` with every link's target rewritten by `rewrite` (which leaves
    absolute ones alone); code (spans and fenced blocks) is no link and stays."""
    pieces, start = [], 0
    for code in _CODE.finditer(markdown):
        pieces += [_relative_links(markdown[start:code.start()], rewrite), code.group(0)]
        start = code.end()
    return "".join([*pieces, _relative_links(markdown[start:], rewrite)])


def _relative_links(text: str, rewrite: Callable[[str], str]) -> str:
    """`text` (markdown without code) with its links' targets rewritten by `rewrite`."""
    text = _INLINE.sub(lambda m: m.group(1) + rewrite(m.group(2)), text)
    text = _HTML.sub(lambda m: m.group(1) + rewrite(m.group(2)), text)
    return _REFERENCE.sub(lambda m: m.group(1) + rewrite(m.group(2)) + m.group(3), text)


def is_relative(target: str) -> bool:
    """A link target that names a path relative to its page (not a URL, an anchor or
    an absolute path)."""
    return not _ABSOLUTE.match(target)


# --- catalogs --------------------------------------------------------------

def catalog_path(root: Path, stem: str) -> Path:
    return root / CATALOGS / f"{stem}.json"


def output_path(root: Path, stem: str) -> Path:
    return root / OUTPUT / f"{stem}.ipynb"


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def read_notebook(path: Path) -> dict:
    """A notebook as nbformat reads it (version 4; each cell's source one string)."""
    import nbformat

    return nbformat.read(path, as_version=4)


def write_catalog(path: Path, catalog: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(catalog, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def markdown_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "markdown"]


def catalog_problems(root: Path, stem: str) -> list[str]:
    """Why the catalog of lab `stem` cannot make its Chinese notebook (empty: it can).

    Each names the cell (id and the English text's first words) and what to do.
    """
    path = catalog_path(root, stem)
    rel = path.relative_to(root)
    english_path = root / "labs" / f"{stem}.ipynb"
    if not english_path.is_file():
        return [f"{rel}: labs/{stem}.ipynb does not exist; delete the catalog or restore the lab"]
    try:
        catalog = read_json(path)
    except (OSError, ValueError) as e:
        return [f"{rel}: not readable JSON ({e})"]
    found = []
    if catalog.get("source") != f"labs/{stem}.ipynb":
        found.append(f"{rel}: \"source\" is {catalog.get('source')!r}, "
                     f"expected 'labs/{stem}.ipynb'")
    if catalog.get("language") != LANGUAGE:
        found.append(f"{rel}: \"language\" is {catalog.get('language')!r}, "
                     f"expected {LANGUAGE!r}")
    entries = catalog.get("cells")
    if not isinstance(entries, list):
        return [*found, f"{rel}: no \"cells\" list"]
    english = {c["id"]: source_of(c) for c in markdown_cells(read_notebook(english_path))}
    by_id = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not {"id", "sha", "zh"} <= set(entry):
            found.append(f"{rel}: entry {i} lacks one of \"id\", \"sha\", \"zh\"")
            continue
        if entry["id"] in by_id:
            found.append(f"{rel}: cell {entry['id']} has two entries")
        by_id[entry["id"]] = entry
    for cell_id in by_id:
        if cell_id not in english:
            found.append(f"{rel}: an entry for cell {cell_id}, which labs/{stem}.ipynb no "
                         f"longer has as a markdown cell: delete the entry "
                         f"(its text: {first_words(by_id[cell_id]['zh'])!r})")
    for cell_id, text in english.items():
        words = first_words(text)
        entry = by_id.get(cell_id)
        if entry is None:
            found.append(f"{rel}: markdown cell {cell_id} ({words!r}) has no translation "
                         f"(python -m pagedkit.i18n skeleton labs/{stem}.ipynb adds its entry)")
        elif not str(entry["zh"]).strip():
            found.append(f"{rel}: markdown cell {cell_id} ({words!r}) is not translated yet "
                         f"(its \"zh\" is empty)")
        elif entry.get("stale"):
            found.append(f"{rel}: cell {cell_id} ({words!r}) changed since it was translated "
                         f"(marked stale by skeleton): revise its \"zh\", then remove "
                         f"\"stale\"")
        elif entry["sha"] != cell_sha(text):
            found.append(f"{rel}: English cell {cell_id} ({words!r}) changed since it was "
                         f"translated (sha {entry['sha']}, now {cell_sha(text)}): revise its "
                         f"\"zh\" and set \"sha\" (skeleton does, marking it stale)")
    known = [i for i in by_id if i in english]
    if not found and known != [i for i in english if i in by_id]:
        found.append(f"{rel}: entries are not in the notebook's order "
                     f"(python -m pagedkit.i18n skeleton labs/{stem}.ipynb reorders them)")
    return found


def skeleton(root: Path, notebook: Path) -> tuple[Path, dict[str, int]]:
    """Write or refresh the catalog of `notebook` (an English lab): one entry per
    markdown cell in order; a new cell gets an empty "zh"; a translation is never
    dropped or overwritten: one whose English changed keeps its "zh", takes the new
    sha and is marked ``"stale": true``; entries of cells gone are dropped (and
    counted). Returns the path and counts of new, kept, stale and dropped entries."""
    notebook = notebook if notebook.is_absolute() else root / notebook
    stem = notebook.stem
    path = catalog_path(root, stem)
    old = {e["id"]: e for e in read_json(path)["cells"]} if path.is_file() else {}
    counts = {"new": 0, "kept": 0, "stale": 0, "dropped": 0}
    cells = []
    for cell in markdown_cells(read_notebook(notebook)):
        sha = cell_sha(source_of(cell))
        entry = old.pop(cell["id"], None)
        if entry is None or not str(entry.get("zh", "")).strip():
            counts["new"] += 1
            cells.append({"id": cell["id"], "sha": sha, "zh": ""})
        elif entry["sha"] != sha or entry.get("stale"):
            counts["stale"] += 1
            cells.append({"id": cell["id"], "sha": sha, "zh": entry["zh"], "stale": True})
        else:
            counts["kept"] += 1
            cells.append({"id": cell["id"], "sha": sha, "zh": entry["zh"]})
    dropped = [e for e in old.values() if str(e.get("zh", "")).strip()]
    counts["dropped"] = len(dropped)
    write_catalog(path, {"source": f"labs/{stem}.ipynb", "language": LANGUAGE,
                         "cells": cells})
    return path, counts


# --- the generated notebook ------------------------------------------------

def generate(english: dict, catalog: dict) -> dict:
    """The Chinese notebook (nbformat 4 JSON, without outputs' changes) from the
    English one and its complete catalog (`catalog_problems` empty)."""
    zh = {e["id"]: e["zh"] for e in catalog["cells"]}
    nb = copy.deepcopy(english)
    cells = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = rewrite_links(zh[cell["id"]])
        cells.append(cell)
        if cell["cell_type"] == "code" and source_of(cell).startswith(COLAB_SETUP) \
                and not any(c.get("id") == SET_LANGUAGE_ID for c in cells):
            cells.append(set_language_cell())
    if not any(c.get("id") == SET_LANGUAGE_ID for c in cells):
        first_code = next((i for i, c in enumerate(cells) if c["cell_type"] == "code"),
                          len(cells))
        cells.insert(first_code, set_language_cell())
    nb["cells"] = cells
    return nb


def set_language_cell() -> dict:
    return {"cell_type": "code", "execution_count": None, "id": SET_LANGUAGE_ID,
            "metadata": {}, "outputs": [], "source": SET_LANGUAGE_SOURCE}


def _comparable(cell: dict) -> tuple:
    meta = {k: v for k, v in cell.get("metadata", {}).items() if k not in ("execution",)}
    return cell["cell_type"], cell.get("id"), source_of(cell), meta


def _difference(want: dict, have: dict) -> str:
    """Where a committed cell first departs from the generated one, in a few words."""
    for name, w, h in zip(("type", "id", "source", "metadata"), _comparable(want),
                          _comparable(have), strict=True):
        if w == h:
            continue
        if name != "source":
            return f"its {name} is {h!r}, the generator's {w!r}"
        wl, hl = w.splitlines(), h.splitlines()
        pairs = enumerate(zip(wl, hl, strict=False))
        n = next((i for i, (a, b) in pairs if a != b), min(len(wl), len(hl)))
        got = hl[n] if n < len(hl) else "(no line)"
        made = wl[n] if n < len(wl) else "(no line)"
        col = next((i for i, (a, b) in enumerate(zip(got, made, strict=False)) if a != b),
                   min(len(got), len(made)))
        start = max(0, col - 20)  # from a little before the first character that differs
        return (f"line {n + 1}, from column {start + 1}: {got[start:start + 50]!r}, "
                f"the generator's {made[start:start + 50]!r}")
    return "?"


def generated_problems(root: Path, stem: str) -> list[str]:
    """How the committed labs/zh-CN/<stem>.ipynb differs from what `generate` makes
    now (cells, ids, sources, cell metadata; outputs are the run's, not compared)."""
    out = output_path(root, stem)
    rel = out.relative_to(root)
    fix = f"run python -m pagedkit.i18n build labs/{stem}.ipynb"
    if not out.is_file():
        return [f"{rel} is missing: {fix}"]
    want = generate(read_notebook(root / "labs" / f"{stem}.ipynb"),
                    read_json(catalog_path(root, stem)))
    have = read_notebook(out)
    for i, (w, h) in enumerate(zip(want["cells"], have["cells"], strict=False)):
        if _comparable(w) != _comparable(h):
            return [f"{rel}: cell {i} (id {h.get('id')}) is not what the generator makes now "
                    f"({_difference(w, h)}): {fix}"]
    if len(want["cells"]) != len(have["cells"]):
        return [f"{rel} has {len(have['cells'])} cells, the generator makes "
                f"{len(want['cells'])}: {fix}"]
    return []


def stems_with_catalogs(root: Path) -> list[str]:
    folder = root / CATALOGS
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def problems(root: Path) -> list[str]:
    """Everything `python -m pagedkit.i18n check` reports (empty: all is well)."""
    found = []
    stems = stems_with_catalogs(root)
    glossary = Glossary.read(root / GLOSSARY)
    for stem in stems:
        these = catalog_problems(root, stem)
        found += these
        if these:
            continue
        found += glossary.problems(root, stem)
        found += generated_problems(root, stem)
    out = root / OUTPUT
    for path in sorted(out.glob("*.ipynb")) if out.is_dir() else []:
        if path.stem not in stems:
            found.append(f"{path.relative_to(root)} has no catalog "
                         f"({CATALOGS / (path.stem + '.json')}): delete it or add the catalog")
    found += index_problems(root, stems)
    return found


_INDEX_ROW = re.compile(r"\|\s*\[[^\]]*\]\((\d\d[\w-]*)\.ipynb\)")


def index(root: Path, stems: list[str]) -> str:
    """labs/zh-CN/README.md: `INDEX_SOURCE` without the table rows of labs that have
    no Chinese version yet (a row starts ``| [NN](NN_name.ipynb)``)."""
    lines = (root / INDEX_SOURCE).read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(line for line in lines
                   if not ((m := _INDEX_ROW.match(line)) and m.group(1) not in stems))


def write_index(root: Path) -> Path:
    path = root / OUTPUT / "README.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(index(root, stems_with_catalogs(root)), encoding="utf-8")
    return path


def index_problems(root: Path, stems: list[str]) -> list[str]:
    """labs/zh-CN/README.md is what `index` makes now: it lists exactly the Chinese labs."""
    readme = root / OUTPUT / "README.md"
    if not stems:
        return []
    rel = readme.relative_to(root)
    fix = "run python -m pagedkit.i18n build (it writes the index)"
    if not readme.is_file():
        return [f"{rel} is missing: {fix}"]
    if readme.read_text(encoding="utf-8") != index(root, stems):
        return [f"{rel} is not what {INDEX_SOURCE} and the catalogs make now (it lists "
                f"exactly the labs with a catalog): {fix}"]
    rows = {m.group(1) for line in readme.read_text(encoding="utf-8").splitlines()
            if (m := _INDEX_ROW.match(line))}
    return [f"{rel} has no row for {stem}.ipynb: add one to {INDEX_SOURCE}"
            for stem in stems if stem not in rows]


# --- building --------------------------------------------------------------

def _ci_notebooks(root: Path):
    """.ci/notebooks.py (its `execute` and `tidy`), the ones the English labs use."""
    spec = importlib.util.spec_from_file_location("ci_notebooks", root / ".ci" / "notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(root: Path, stem: str, *, execute: bool = True, timeout: int = 600) -> Path:
    """Write labs/zh-CN/<stem>.ipynb from its catalog; execute it unless told not to.

    Raises ValueError naming the catalog's problems when it is incomplete or stale.
    """
    import nbformat

    these = catalog_problems(root, stem)
    if these:
        raise ValueError("\n".join(these))
    nb = nbformat.from_dict(generate(read_notebook(root / "labs" / f"{stem}.ipynb"),
                                     read_json(catalog_path(root, stem))))
    out = output_path(root, stem)
    out.parent.mkdir(parents=True, exist_ok=True)
    ci = _ci_notebooks(root)
    if execute:
        ci.execute(nb, out.parent, timeout)
    else:
        keep_outputs(nb, out)
    ci.tidy(nb)
    nbformat.write(nb, out)
    return out


def keep_outputs(nb, out: Path) -> None:
    """Without executing: each code cell keeps the outputs of the same cell (same id,
    same source) in the Chinese notebook already at `out`, else the English run's;
    a markdown-only change so needs no run. Not a substitute for executing after
    code changed: nbval then compares these outputs with a real run's."""
    old = {}
    if out.is_file():
        old = {c["id"]: c for c in read_notebook(out)["cells"] if c["cell_type"] == "code"}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        before = old.get(cell.get("id"))
        if before is not None and source_of(before) == cell.source:
            cell.outputs = before.get("outputs", [])
            cell.execution_count = before.get("execution_count")
        elif cell.get("id") == SET_LANGUAGE_ID:
            cell.outputs, cell.execution_count = [], None


# --- the glossary ----------------------------------------------------------

@dataclass(frozen=True)
class Term:
    english: tuple[str, ...]   # forms, any of which in an English cell's prose...
    chinese: tuple[str, ...]   # ...asks for one of these in its translation

    def pattern(self) -> re.Pattern:
        forms = "|".join(re.escape(f).replace(r"\ ", r"[\s-]+") for f in self.english)
        return re.compile(rf"(?<![\w-])(?:{forms})(?:s|es)?(?![\w-])", re.I)


_CODE_FENCE = re.compile(r"```.*?```|~~~.*?~~~", re.S)
_INLINE_CODE = re.compile(r"`[^`]*`")
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]*\$", re.S)
_LINK_TARGET = re.compile(r"\]\([^)]*\)|https?://\S+|<[^>]+>")


def prose(markdown: str) -> str:
    """The words of `markdown` a translator translates: no code, math, URLs or tags."""
    for pattern in (_CODE_FENCE, _INLINE_CODE, _MATH, _LINK_TARGET):
        markdown = pattern.sub(" ", markdown)
    return markdown


@dataclass(frozen=True)
class Glossary:
    terms: tuple[Term, ...]

    @classmethod
    def read(cls, path: Path) -> Glossary:
        """The table after `GLOSSARY_MARKER` in docs/glossary.md: | English | 中文 |,
        each column's forms separated by " / " (its header and rule row skipped)."""
        if not path.is_file():
            return cls(())
        lines = path.read_text(encoding="utf-8").splitlines()
        try:
            start = lines.index(GLOSSARY_MARKER) + 1
        except ValueError as e:
            raise ValueError(f"{path} has no line {GLOSSARY_MARKER!r} above its checked "
                             f"terms") from e
        terms = []
        for line in lines[start:]:
            if not line.strip():
                if terms:
                    break
                continue
            cols = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cols) < 2 or set(cols[0]) <= set("-: ") or cols[0].lower() == "english":
                continue
            terms.append(Term(tuple(f.strip() for f in cols[0].split(" / ")),
                              tuple(f.strip() for f in cols[1].split(" / "))))
        return cls(tuple(terms))

    def departures(self, english: str, chinese: str) -> list[tuple[str, str]]:
        """(English term found, Chinese expected) for each term the English prose uses
        whose glossary Chinese the translation lacks."""
        words = prose(english)
        found = []
        for term in self.terms:
            hit = term.pattern().search(words)
            if hit and not any(c in chinese for c in term.chinese):
                found.append((hit.group(0), " / ".join(term.chinese)))
        return found

    def problems(self, root: Path, stem: str) -> list[str]:
        english = {c["id"]: source_of(c)
                   for c in markdown_cells(read_notebook(root / "labs" / f"{stem}.ipynb"))}
        rel = catalog_path(root, stem).relative_to(root)
        found = []
        for entry in read_json(catalog_path(root, stem))["cells"]:
            for term, expected in self.departures(english[entry["id"]], entry["zh"]):
                found.append(f"{rel}: cell {entry['id']} says {term!r} in English; its "
                             f"translation lacks the glossary's {expected} (docs/glossary.md)")
        return found
