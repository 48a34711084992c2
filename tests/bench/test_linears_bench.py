"""`python -m pagedkit bench linears` runs end to end (its ratios are printed, never asserted)."""

import json

import pytest

from pagedkit.bench import linears
from pagedkit.model import accel


@pytest.mark.skipif(accel.prepack_unavailable() is not None, reason="no oneDNN here")
@pytest.mark.parametrize("cold", [False, True])
def test_linears_prints_a_ratio_per_shape_and_rows_and_writes_json(tmp_path, capsys, cold,
                                                                   monkeypatch):
    monkeypatch.setattr(linears, "COLD_BYTES", 8 * 2**20)  # a few copies: still cycled
    path = tmp_path / "linears.json"
    assert linears.main(["--threads", "1", "--widths", "64,512", "--rows", "1,4",
                         "--json", str(path)] + ["--cold"] * cold) == 0
    out = capsys.readouterr().out
    assert "512 x 512" in out and "  yes" in out and "load" in out
    assert ("from memory (--cold: copies of each, 8 MiB in all)" in out) == cold
    assert ("in cache" in out) != cold
    data = json.loads(path.read_text())
    assert data["runs"][0]["cold"] == cold
    results = data["runs"][0]["results"]
    assert len(results) == 2 * len(linears.SHAPES)
    packs = {(r["in_features"], r["out_features"]): r["auto_packs"] for r in results}
    assert packs[(512, 512)] and packs[(512, 128)] and not packs[(64, 4096)]  # by width
    assert all(v["plain_s"] > 0 and v["packed_s"] > 0 for r in results for v in r["rows"].values())


def test_linears_refuses_a_bad_list(capsys):
    with pytest.raises(SystemExit) as exit_info:
        linears.main(["--rows", "0,4"])
    assert exit_info.value.code == 2
    assert "'0,4'" in capsys.readouterr().err


def test_linears_says_why_without_onednn(monkeypatch, capsys):
    monkeypatch.setattr(accel, "prepack_unavailable", lambda: "no oneDNN in this torch")
    assert linears.main(["--widths", "64"]) == 1
    assert "no oneDNN in this torch" in capsys.readouterr().out


@pytest.mark.parametrize("sizes, expected", [
    ({"index0": "48K", "index2": "2048K", "index3": "32768K"}, 64 * 2**20),
    ({"index0": "32K", "index3": "1M"}, 2 * 2**20),
    ({"index0": "garbage"}, 64 * 2**20),
    ({}, 64 * 2**20),
])
def test_cold_means_twice_the_largest_cache(tmp_path, monkeypatch, sizes, expected):
    """--cold's copies fill twice the CPU's largest cache (sysfs), 64 MiB where
    none can be read: on a CPU with a larger L3 a fixed size would stay in it."""
    for index, size in sizes.items():
        (tmp_path / index).mkdir()
        (tmp_path / index / "size").write_text(size + "\n")
    real = linears.Path
    monkeypatch.setattr(linears, "Path", lambda p: tmp_path if "cache" in str(p) else real(p))
    assert linears.cold_bytes() == expected
