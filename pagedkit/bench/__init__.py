"""Benchmarks: ``python -m pagedkit.bench <name>`` (see `pagedkit.bench.__main__`).

Benchmarks measure; tests check. Nothing here runs during ``pytest`` except
a ``--quick`` smoke run that checks the shape of the JSON report.
"""
