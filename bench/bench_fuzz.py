"""Benchmark: `gradcheck fuzz` on every engine of the mutant catalogue, with no exercise at all.

Each mutant of gradcheck/course/mutants.py (the reference engine with one bug) is fuzzed by the
command as a user runs it, `gradcheck fuzz MUTANT.py --seed 0 --examples 2000 --report-json F`,
one after the other: whether a difference is found, the seconds the command took (start-up
included) and the search's own seconds, and the operations in the shrunk program. The reference
engine and torch itself are fuzzed the same way: they must show no difference in 2,000 examples.

Left out, with why (`EXCLUDED`): the bugs that only a graph thousands of operations deep or a
point exactly at a kink can show, and the second-order ones (fuzz draws first-order programs). The catalogue has no deliberate hang or exit (those engines
live in tests/engines/, not in the catalogue). Run: `python bench/bench_fuzz.py`.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gradcheck.course.mutants import BEHAVIOUR, CATALOGUE, SECOND_ORDER, SLOPES
from gradcheck.course.mutation import CONTROL, write_mutants

EXAMPLES = 2000
SEED = 0
#: Mutants no random program can show, and why.
EXCLUDED = {
    "recursive-topological-sort": "only a chain of a few thousand operations overflows Python's "
                                  "recursion limit; a drawn program has at most 6",
    "relu-kink-one": "only x exactly 0 shows it; drawn points keep 0.1 from every kink",
    "abs-kink-one": "only x exactly 0 shows it; drawn points keep 0.1 from every kink",
    "sqrt-kink-zero": "only x exactly 0 shows it (a domain edge); drawn points keep clear",
    "pow-zero-exponent-nan": "only x ** 0 at x exactly 0 shows it; drawn exponents leave 0 out "
                             "and points keep clear of 0",
    **{m.name: "a second-order bug (backward with create_graph=True, grad() of a gradient); "
               "fuzz draws first-order programs and sessions" for m in SECOND_ORDER},
}


def fuzz(submission: str, folder: Path) -> dict[str, Any]:
    """One `gradcheck fuzz` run: its report, exit status and wall-clock seconds."""
    report = folder / f"{Path(submission).stem}.json"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gradcheck", "fuzz", submission, "--seed",
                           str(SEED), "--examples", str(EXAMPLES), "--report-json", str(report)],
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    data = json.loads(report.read_text()) if report.exists() else {}
    return {"exit": done.returncode, "wall_s": round(wall, 2), "found": data.get("found"),
            "search_s": data.get("seconds"), "examples": data.get("examples"),
            "operations": data.get("operations"), "kind": data.get("kind"),
            "program": data.get("program"), "steps": len(data.get("steps") or [])}


def run() -> dict[str, Any]:
    """Every mutant's search, the two controls, and the summary against the targets."""
    with tempfile.TemporaryDirectory(prefix="bench-fuzz-") as tmp:
        folder = Path(tmp)
        fuzzed = [m for m in CATALOGUE if m.name not in EXCLUDED]
        write_mutants(folder, fuzzed)
        results = {}
        for mutant in fuzzed:
            print(f"fuzzing {mutant.name} ...", file=sys.stderr, flush=True)
            results[mutant.name] = fuzz(str(folder / f"{mutant.name}.py"), folder)
        controls = {name: fuzz(path, folder) for name, path in
                    (("reference", str(folder / f"{CONTROL}.py")), ("torch", "torch"))}
    found = [r for r in results.values() if r["found"]]
    groups = {"derivative": {m.name for m in SLOPES}, "semantic": {m.name for m in BEHAVIOUR}}
    summary = {
        "fuzzed": len(results), "found": len(found),
        "missed": sorted(name for name, r in results.items() if not r["found"]),
        "slowest_s": max(r["wall_s"] for r in results.values()),
        "over_60_s": sorted(name for name, r in results.items() if r["wall_s"] > 60),
        "median_operations": statistics.median(r["operations"] for r in found) if found else None,
        "controls_clean": all(r["found"] is False and r["examples"] == EXAMPLES
                              for r in controls.values()),
    }
    for group, names in groups.items():
        mine = [results[n] for n in names if n in results]
        summary[f"{group}_found"] = f"{sum(bool(r['found']) for r in mine)}/{len(mine)}"
    return {"examples": EXAMPLES, "seed": SEED, "excluded": EXCLUDED, "mutants": results,
            "controls": controls, "summary": summary}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
