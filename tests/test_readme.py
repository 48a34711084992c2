"""The README's first snippet runs as printed and shows a figure that means
something after the run: the peak blocks in use, not kv_usage (1.0 once every
block is back, which reads as "100% used")."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_first_python_snippet_prints_the_peak_blocks(capsys):
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    peak = re.search(r"peak (\d+) of 256 KV blocks in use", out)
    assert peak, out
    stats = namespace["llm"].llm_engine.memory_stats()
    assert stats["used_blocks"] == 0 and stats["kv_usage"] == 1.0  # why the peak is shown
    prompt = len(namespace["out"][0].prompt_token_ids)
    generated = len(namespace["out"][0].outputs[0].token_ids)
    # the last sampled token is never written to the cache: p + g - 1 tokens in blocks of 16
    assert int(peak.group(1)) == -(-(prompt + generated - 1) // 16) == stats["peak_used_blocks"]


ROOT = README.parent
TEST_TOOLS = {"pytest", "hypothesis", "nbval", "ruff", "playwright", "cbor2", "nbgrader"}


def _setup_commands() -> list[str]:
    quickstart = README.read_text().split("## Quickstart", 1)[1]
    block = re.search(r"```bash\n(.*?)```", quickstart, re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def _requirement_names(path):
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    return [re.split(r"[<>=;\[ ]", line)[0].lower() for line in lines if line]


def test_two_setup_commands_a_learners_and_a_developers():
    """The README's two commands: the labs (no test tooling), then the tests,
    which CI runs verbatim after installing from the project's own files."""
    lab, tests = _setup_commands()
    assert lab == "pip install -r requirements.txt && python -m pagedkit lab"
    assert tests == "pip install -r requirements-dev.txt && python -m pytest"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci


def test_lab_and_development_requirements_apart():
    """Issue #26: `pip install -r requirements.txt` gave a student pytest, ruff,
    playwright... The labs' file installs pagedkit and JupyterLab only; the
    developers' file adds every test tool pyproject's `test` extra names."""
    tomllib = __import__("pytest").importorskip("tomllib")
    lab = _requirement_names(ROOT / "requirements.txt")
    dev = _requirement_names(ROOT / "requirements-dev.txt")
    assert "-e" in lab and "jupyterlab" in lab
    assert not TEST_TOOLS & set(lab), TEST_TOOLS & set(lab)
    binder = _requirement_names(ROOT / "binder" / "requirements.txt")  # Binder: learners too
    assert "jupyterlab" in binder and not TEST_TOOLS & set(binder), TEST_TOOLS & set(binder)
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["test"]
    assert dev[0] == "-r" and "-r requirements.txt" in (ROOT / "requirements-dev.txt").read_text()
    assert {re.split(r"[<>=;\[ ]", name)[0].lower() for name in extra} == TEST_TOOLS <= set(dev)


def test_no_page_still_serves_the_labs_from_labs():
    """Issue #26: `jupyter lab labs/` served from labs/ (the docs the labs cite
    could not open), refused root, and saved runs into the tracked notebooks.
    Every page that tells a learner how to start says `python -m pagedkit lab`."""
    pages = [README, ROOT / "labs" / "README.md", ROOT / "docs" / "teachers_guide.md",
             ROOT / "labs" / "00_start_here.ipynb"]
    for page in pages:
        text = page.read_text()
        assert "jupyter lab labs" not in text, page
        assert "python -m pagedkit lab" in text, page


def test_the_api_pages_code_runs_or_says_it_is_signatures():
    """Newcomer finding 16: docs/api.md's first LLM block used undefined
    prompts and messages, its streaming loop an undefined engine. Every
    Python block runs in order, except one that says it shows signatures."""
    page = (ROOT / "docs" / "api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    signatures = [b for b in blocks if b.startswith("# The signatures")]
    assert len(signatures) == 1 and len(blocks) >= 3
    namespace = {}
    for code in blocks:
        if code not in signatures:
            exec(compile(code, "docs/api.md", "exec"), namespace)
    assert namespace["engine"].get_num_unfinished_requests() == 0


def test_the_widgets_pages_quick_start_runs_as_written():
    """Newcomer 16, finding 11: docs/widgets.md's Quick start called
    llm.generate(prompts, ...) and never defined prompts (NameError when pasted).
    Its first block runs as written, and the dashboard recorded the run."""
    page = (ROOT / "docs" / "widgets.md").read_text()
    code = re.search(r"## Quick start\n.*?```python\n(.*?)```", page, re.S).group(1)
    namespace = {}
    exec(compile(code, "docs/widgets.md", "exec"), namespace)
    assert len(namespace["dash"].recorder.frames) > 1


def _snippets(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", README.read_text(), re.S)


def test_every_python_snippet_runs():
    """Every ```python block of the README runs as printed (the first one's
    figures are checked above)."""
    snippets = _snippets("python")
    assert snippets
    for code in snippets:
        exec(compile(code, "README.md", "exec"), {})


def test_every_session_snippet_prints_what_it_shows():
    """Second newcomer: the KVCacheManager snippet showed [] and None results
    that taught nothing, as comments nobody checked. Each ```pycon block of
    the README is a doctest: every line it shows is what Python prints."""
    import doctest

    sessions = _snippets("pycon")
    assert sessions
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for i, text in enumerate(sessions):
        test = doctest.DocTestParser().get_doctest(text, {}, f"README pycon {i}", "README.md", 0)
        assert test.examples
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def _run_time_table() -> tuple[list[int], list[int], str]:
    """The wall and CPU seconds of the teachers' guide's run-time table (the rows
    with both figures at the table's load: a row measured later says its own
    load, as 04c's does), and the load it was measured at."""
    guide = (ROOT / "docs" / "teachers_guide.md").read_text()
    assert re.search(r"^\| 04c [^|]+\| \d+ at load [\d.]+ [^|]*\| \d+ at load [\d.]+ \|$",
                     guide, re.M), "newcomer 16, finding 10: the table has no row for lab 04c"
    rows = re.findall(r"^\| \d\d\w? [^|]+\| (\d+)(?! at load)[^|]*\| (\d+) \|$", guide, re.M)
    load = re.search(r"load\s+averages (\d[\d.]*–\d[\d.]*)", guide).group(1)
    return [int(w) for w, _ in rows], [int(c) for _, c in rows], load


def test_every_lab_run_time_claim_is_the_teachers_guides_table():
    """Newcomer 12 finding 7: the README and labs/README.md said 5 to 45 s "on a
    2-core machine running nothing else" and lab 00 "about 15 s to 100 s", while
    the guide they cite shows only loaded-machine times. Each states the table's
    range and load now, in English and in Chinese."""
    import json

    walls, cpus, load = _run_time_table()
    assert len(walls) >= 10 and load == "5–8.5"
    wall, cpu = (min(walls), max(walls)), (min(cpus), max(cpus))
    lab00 = "".join("".join(c["source"]) for c in json.loads(
        (ROOT / "labs" / "00_start_here.ipynb").read_text())["cells"])
    lab00_zh = "".join("".join(c["source"]) for c in json.loads(
        (ROOT / "labs" / "zh-CN" / "00_start_here.ipynb").read_text())["cells"])
    claims = {
        "README.md": (README.read_text(), f"{wall[0]} to {wall[1]} seconds",
                      f"{cpu[0]} to {cpu[1]} s"),
        "labs/README.md": ((ROOT / "labs" / "README.md").read_text(),
                           f"{wall[0]} to {wall[1]} seconds", f"{cpu[0]} to {cpu[1]} s"),
        "lab 00": (lab00, f"{wall[0]} s to\n{wall[1]} s", None),
        "labs/zh-CN/README.md": ((ROOT / "labs" / "zh-CN" / "README.md").read_text(),
                                 f"{wall[0]} 到 {wall[1]} 秒", f"{cpu[0]} 到 {cpu[1]} 秒"),
        "zh lab 00": (lab00_zh, f"{wall[0]} 秒到 {wall[1]} 秒", None),
    }
    for page, (text, wall_text, cpu_text) in claims.items():
        flat = " ".join(text.split())
        assert " ".join(wall_text.split()) in flat, page
        assert cpu_text is None or cpu_text in flat, page
        assert f"load {load}" in flat or f"负载 {load}" in flat, page
        assert "running nothing else" not in flat and "只跑它" not in flat, page


def test_pages_that_promise_the_check_marks_name_what_jupyterlab_shows():
    """Newcomer 16, finding 6: the labs and the teachers' guide promised ✅/❌, but
    JupyterLab shows a check's Markdown, ✔/✘ (issue #26: no emoji font needed); the
    emoji are only in the plain-text output. Every page that promises the emoji
    names the marks too."""
    import json

    from pagedkit.exercises import CheckResult

    right, wrong = (CheckResult("f", ok, "m")._repr_markdown_() for ok in (True, False))
    assert "✔" in right and "✘" in wrong
    pages = {p: (ROOT / p).read_text() for p in (
        "labs/README.md", "labs/zh-CN/README.md", "docs/teachers_guide.md",
        "docs/zh-CN/teachers_guide.md")}
    for lab in ("labs/00_start_here.ipynb", "labs/zh-CN/00_start_here.ipynb"):
        pages[lab] = "".join("".join(c["source"]) for c in json.loads(
            (ROOT / lab).read_text())["cells"] if c["cell_type"] == "markdown")
    for page, text in pages.items():
        assert "✅" in text and "✔" in text and "✘" in text, page


def test_the_readme_and_the_api_page_list_the_benchmarks_as_bench_help_does():
    """Newcomer 31, N8: the README listed the benchmarks in another order than
    ``bench --help``. Both pages follow `pagedkit.bench.__main__.BENCHMARKS`."""
    from pagedkit.bench.__main__ import BENCHMARKS

    names = list(BENCHMARKS)
    readme = README.read_text()
    line = next(x for x in readme.splitlines() if "# other benchmarks:" in x)
    listed = line.split("# other benchmarks:")[1].split("(")[0]
    assert [n.strip() for n in listed.split(",")] == names[1:], line
    api = (ROOT / "docs" / "api.md").read_text()
    row = next(x for x in api.splitlines() if x.startswith("| `python -m pagedkit bench` |"))
    assert ", ".join(names) in row, row
    commands = [x.split("`")[1].split()[-1] for x in api.splitlines()
                if x.startswith("| `python -m pagedkit bench ")]
    assert commands == names, commands
