"""``python -m pagedkit.i18n``: the Chinese labs, made from the English ones.

    python -m pagedkit.i18n skeleton labs/03_paging.ipynb   # start or refresh a catalog
    python -m pagedkit.i18n build [labs/03_paging.ipynb ...] # generate + execute labs/zh-CN/
    python -m pagedkit.i18n build --no-execute labs/03_paging.ipynb  # markdown only: fast
    python -m pagedkit.i18n check                           # what the tests check

Run from a clone's root (or anywhere in it: the clone is the one this package
is in). See `pagedkit.i18n.notebooks` for the catalog's shape.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import notebooks as nbs
from .terminal import HelpFormatter


def _stem(root: Path, arg: str, parser: argparse.ArgumentParser) -> str:
    path = Path(arg)
    stem = path.stem
    if path.suffix != ".ipynb" or not (root / "labs" / f"{stem}.ipynb").is_file():
        names = ", ".join(p.name for p in sorted((root / "labs").glob("*.ipynb")))
        parser.error(f"{arg!r} is not an English lab in {root / 'labs'}; the labs: {names}")
    return stem


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pagedkit.i18n",
        description="The Chinese labs (labs/zh-CN/) from the English labs and the catalogs "
                    "in i18n/zh-CN/labs/.",
        formatter_class=HelpFormatter)
    p.add_argument("--root", type=Path, default=None,
                   help="the clone's root (default: the clone this package is in)")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="generate labs/zh-CN/<lab>.ipynb and execute it",
                       formatter_class=HelpFormatter)
    b.add_argument("labs", nargs="*",
                   help="English labs, e.g. labs/03_paging.ipynb (default: every lab with a "
                        "catalog)")
    b.add_argument("--no-execute", action="store_false", dest="execute",
                   help="do not run the notebook: each code cell keeps the outputs of the "
                        "Chinese notebook already there (same id and code), else the English "
                        "run's; enough when only markdown changed")
    b.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    b.set_defaults(parser=b)  # a command's usage error prints its own usage
    sub.add_parser("check", help="catalogs complete and fresh, glossary terms kept, generated "
                                 "notebooks as the generator makes them now",
                   formatter_class=HelpFormatter)
    s = sub.add_parser("skeleton", help="write or refresh a lab's catalog (empty \"zh\" for new "
                                        "cells; translations kept, changed ones marked stale)",
                       formatter_class=HelpFormatter)
    s.add_argument("lab", help="the English lab, e.g. labs/03_paging.ipynb")
    s.set_defaults(parser=s)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    root = (args.root or nbs.repo_root()).resolve()
    if args.command == "skeleton":
        stem = _stem(root, args.lab, args.parser)
        path, counts = nbs.skeleton(root, root / "labs" / f"{stem}.ipynb")
        print(f"{path.relative_to(root)}: {counts['new']} to translate, {counts['kept']} kept, "
              f"{counts['stale']} stale (English changed: revise, then remove \"stale\"), "
              f"{counts['dropped']} dropped (their cells are gone)")
        return 0
    if args.command == "check":
        found = nbs.problems(root)
        for line in found:
            print(line, file=sys.stderr)
        stems = nbs.stems_with_catalogs(root)
        print(f"{len(stems)} catalogs, {len(found)} problems", file=sys.stderr if found else
              sys.stdout)
        return 1 if found else 0
    stems = ([_stem(root, a, args.parser) for a in args.labs] if args.labs
             else nbs.stems_with_catalogs(root))
    failed = 0
    for stem in stems:
        if not nbs.catalog_path(root, stem).is_file():
            print(f"build: {stem} has no catalog ({nbs.CATALOGS / (stem + '.json')}); "
                  f"python -m pagedkit.i18n skeleton labs/{stem}.ipynb starts one",
                  file=sys.stderr)
            failed += 1
            continue
        try:
            out = nbs.build(root, stem, execute=args.execute, timeout=args.timeout)
        except ValueError as e:
            print(f"build: {stem} not built:\n{e}", file=sys.stderr)
            failed += 1
            continue
        print(f"build: {out.relative_to(root)}" + ("" if args.execute else " (not executed)"))
    if stems:
        print(f"build: {nbs.write_index(root).relative_to(root)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
