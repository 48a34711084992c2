"""`python -m pagedkit bench hash`: what naming and finding a cached block costs."""

import json

import pytest

from pagedkit.bench import prefix_hash


def test_hash_bench_prints_and_writes_every_figure(tmp_path, capsys):
    out = tmp_path / "hash.json"
    assert prefix_hash.main(["--blocks", "50", "--rounds", "1", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "CPU microseconds per block" in printed and "cache hit" in printed
    report = json.loads(out.read_text())
    assert set(report["per_block_size"]) == {"16", "32"}
    for row in report["per_block_size"].values():
        assert set(row) == {"builtin_hash_us", "sha256_us", "sha256_cbor_us", "block_key_us",
                            "cache_hit_us"}
        assert all(value >= 0 for value in row.values())


def test_every_lookup_the_bench_times_is_a_hit(monkeypatch):
    """The hit column times hits, not misses: a lookup that missed is refused."""
    assert prefix_hash.measure(16, 20, 1)["cache_hit_us"] >= 0
    monkeypatch.setattr(prefix_hash.BlockAllocator, "find_cached", lambda self, key: None)
    with pytest.raises(RuntimeError, match="misses"):
        prefix_hash.measure(16, 20, 1)


@pytest.mark.parametrize("argv", [["--blocks", "0"], ["--rounds", "-1"]])
def test_hash_bench_refuses_empty_runs(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        prefix_hash.main(argv)
    assert exit_.value.code == 2
    assert "must be >= 1" in capsys.readouterr().err
