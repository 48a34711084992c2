"""The widgets benchmark, small: it drives the real simulator, touches every event
kind, and reports what it measured (its speed is a number it prints, not a test)."""

import json

import pytest

from pagedkit.bench.widgets import main
from pagedkit.memory import EventKind
from pagedkit.scheduler import SchedulerEventKind


def test_widgets_bench_touches_every_event_kind_and_writes_json(tmp_path, capsys):
    out = tmp_path / "widgets.json"
    assert main(["--blocks", "256", "--steps", "300", "--rounds", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    kinds = set()
    for w in report["workloads"].values():
        assert w["steps"] == 300 and w["preemptions"] > 0 and w["peak_used"] == 256
        assert w["bare_s"] > 0 and w["recorded_s"] > 0 and w["cutting_s"] > 0
        kinds |= set(w["event_counts"])
    assert kinds == {k.value for k in (*EventKind, *SchedulerEventKind)}
    assert len(report["views"]["update_s"]) == 60
    printed = capsys.readouterr().out
    assert "ms per step" in printed and "block map widget, scrub a step" in printed


def test_widgets_bench_refuses_nonsense(capsys):
    with pytest.raises(SystemExit):
        main(["--steps", "0"])
    assert "argument --steps: must be >= 1, got 0" in capsys.readouterr().err


def test_its_help_and_a_default_run_say_how_long_it_takes(capsys, monkeypatch):
    """Newcomer finding 6: 208 s with nothing said of its length."""
    from pagedkit.bench import widgets

    with pytest.raises(SystemExit):
        main(["--help"])
    assert "3.5 to 7.5 minutes" in " ".join(capsys.readouterr().out.split())
    monkeypatch.setattr(widgets, "benchmark", lambda *a: {})
    assert main([]) == 0
    assert capsys.readouterr().err.startswith(f"bench widgets: {widgets.DURATION}")
    assert main(["--steps", "300"]) == 0
    assert "minutes" not in capsys.readouterr().err
