"""Every exercise check passes on its reference solution, and fails — with a
message, not an exception — on an empty answer. So checks and solutions in
labs/solutions/ cannot drift apart."""

import importlib
import importlib.util
from pathlib import Path

import pytest

SOLUTIONS = Path(__file__).resolve().parents[2] / "labs" / "solutions"


def solution_modules():
    return sorted(p for p in SOLUTIONS.glob("lab*.py"))


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"solutions_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pairs():
    for path in solution_modules():
        lab = path.stem.split("_")[0]  # lab03_paging -> lab03
        checks = importlib.import_module(f"pagedkit.exercises.{lab}").CHECKS
        for name in checks:
            yield pytest.param(path, lab, name, id=f"{lab}.{name}")


@pytest.mark.parametrize("path, lab, name", list(pairs()))
def test_reference_solution_passes(path, lab, name):
    check = importlib.import_module(f"pagedkit.exercises.{lab}").CHECKS[name]
    result = check(getattr(load(path), name))
    assert result.passed, repr(result)


@pytest.mark.parametrize("path, lab, name", list(pairs()))
def test_empty_answer_fails_with_a_message(path, lab, name):
    check = importlib.import_module(f"pagedkit.exercises.{lab}").CHECKS[name]

    def not_written(*args, **kwargs):
        raise NotImplementedError

    result = check(not_written)
    assert not result.passed and "not written yet" in repr(result)
    result = check(lambda *args, **kwargs: None)
    assert not result.passed and repr(result).startswith("❌")


def test_every_solution_module_has_checks():
    for path in solution_modules():
        lab = path.stem.split("_")[0]
        module = importlib.import_module(f"pagedkit.exercises.{lab}")
        assert module.CHECKS, f"{module.__name__} defines no CHECKS"
        missing = [n for n in module.CHECKS if not hasattr(load(path), n)]
        assert not missing, f"{path.name} lacks solutions for {missing}"
