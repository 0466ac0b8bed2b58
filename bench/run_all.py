"""Rerun every benchmark figure quoted in BENCHMARKS.md, in one command.

Run from the checkout: `python bench/run_all.py` (add `--out FILE` to keep the JSON, `--only
NAME` to run some of them: the table of every target needs engine, oracles and grading). Each
benchmark module in `BENCHMARKS` that exists is imported and its `run()` called, in turn; the
figures are printed as one JSON document keyed by module name.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: The benchmark modules of bench/, each with `run() -> dict`.
BENCHMARKS = ("bench_engine", "bench_oracles", "bench_grading", "bench_watch", "bench_fuzz",
              "bench_batch", "bench_request")


def run_all(only: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every present benchmark's figures (or those named in `only`), with how long each took to
    run."""
    sys.path.insert(0, str(HERE))
    figures: dict[str, Any] = {}
    for name in BENCHMARKS:
        if not (HERE / f"{name}.py").is_file() or only and name not in only:
            continue
        started = time.perf_counter()
        print(f"running {name} ...", file=sys.stderr, flush=True)
        figures[name] = importlib.import_module(name).run()
        figures[name]["benchmark_s"] = time.perf_counter() - started
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the figures (JSON) here")
    parser.add_argument("--only", action="append", default=[], choices=BENCHMARKS,
                        metavar="NAME", help="run this benchmark only (repeatable)")
    arguments = parser.parse_args()
    text = json.dumps(run_all(tuple(arguments.only)), indent=2)
    if arguments.out:
        arguments.out.write_text(text + "\n")
    print(text)
