"""``python -m bench`` (what ``make bench`` runs): every benchmark, one table.

Each module of this package whose name does not start with ``_`` is a benchmark with
``run() -> list[dict]`` returning rows ``{"figure", "herald", "baseline", "ratio",
"goal"}``. They run one after another, each in its own event loop; the combined table is
printed and written as Markdown to ``bench/results/latest.md`` (gitignored) for the README.

``bench.soak`` is left out: ``make soak`` runs it, for minutes by design.
``--quick`` passes a module's ``QUICK`` sizes to its ``run()`` (modules without ``QUICK``
run at their defaults); ``--only NAME`` (repeatable) runs only the named modules.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import pkgutil
import platform
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import bench
from bench._common import Row, format_markdown, format_table

#: Run first, in this order; any other benchmark module follows alphabetically.
ORDER = ("lanes", "transcripts", "archive", "turns", "spawn", "fanin", "batches")
#: Modules with a make target of their own (``make soak`` runs for minutes by design).
EXCLUDED = frozenset({"soak"})
RESULTS = Path(__file__).resolve().parent / "results" / "latest.md"


def bench_names() -> list[str]:
    """Every benchmark module of the package, in running order."""
    found = {
        m.name
        for m in pkgutil.iter_modules(bench.__path__)
        if not m.name.startswith("_") and m.name not in EXCLUDED
    }
    return [n for n in ORDER if n in found] + sorted(found - set(ORDER))


def run_module(module: ModuleType, *, quick: bool) -> list[Row]:
    """The rows of one benchmark module, at its quick sizes when asked and available."""
    sizes: dict[str, Any] = getattr(module, "QUICK", {}) if quick else {}
    rows: list[Row] = module.run(**sizes)
    return rows


def markdown_report(results: list[tuple[str, list[Row]]], *, quick: bool, seconds: float) -> str:
    """The results as a Markdown document: a heading, how it was run, one table."""
    rows = [{**r, "figure": f"{name}: {r['figure']}"} for name, group in results for r in group]
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    mode = " (quick sizes)" if quick else ""
    return (
        f"# Herald benchmarks{mode}\n\n"
        f"{when}; Python {platform.python_version()} on {platform.machine()}, "
        f"{seconds:.0f} s in all. Ratios are Herald ÷ baseline, measured side by side in "
        "one run.\n\n" + format_markdown(rows) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; returns the exit status (2 for an unknown ``--only`` name)."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--only", action="append", metavar="NAME", help="run only NAME")
    parser.add_argument("--output", type=Path, default=RESULTS, help="Markdown file to write")
    ns = parser.parse_args(argv)
    names = bench_names()
    selected = ns.only or names
    unknown = sorted(set(selected) - set(names))
    if unknown:
        print(f"unknown benchmark {unknown[0]!r}; known: {', '.join(names)}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    results: list[tuple[str, list[Row]]] = []
    for name in [n for n in names if n in selected]:
        print(f"== {name}", flush=True)
        begun = time.perf_counter()
        rows = run_module(importlib.import_module(f"bench.{name}"), quick=ns.quick)
        print(f"   {len(rows)} figures in {time.perf_counter() - begun:.1f} s", flush=True)
        results.append((name, rows))
    seconds = time.perf_counter() - started
    report = markdown_report(results, quick=ns.quick, seconds=seconds)
    ns.output.parent.mkdir(parents=True, exist_ok=True)
    ns.output.write_text(report, encoding="utf-8")
    print()
    print(format_table([{**r, "figure": f"{n}: {r['figure']}"} for n, g in results for r in g]))
    print(f"\nwritten to {ns.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
