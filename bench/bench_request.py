"""Benchmark: what one request to a worker costs, in the grader and in the worker.

A keyed grading of the bundled bank sends the reference engine 444 requests, so a fixed cost
per request weighs on the CPU target of grade-batch (issue 23) and on the watch's latency (issue
20). For two requests, a one-point gradient of `y = x * x` (almost no engine work: the cost is
the channel, the checks of request and reply, and the grader's poll of the worker's limits) and
the same on 20 points of two 10-vectors, it reports the CPU per request of the grader
(`time.process_time`) and of the worker (from /proc), with the default memory limit polled.
With `--before REV` the same runs in a copy of that revision (`bench/code_before.py`), rounds
taking turns; each figure is the best of its rounds.

Run: `python bench/bench_request.py [--before REV] [--rounds 3] [--requests 2000]`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from code_before import ROOT, checkout

#: run in the tree under test, with that tree's gradcheck first on sys.path
MEASURE = """
import json, os, random, sys, time
from pathlib import Path
from gradcheck.engine.sandbox import Worker
from gradcheck.program.language import parse

count = int(sys.argv[1])
rng = random.Random(0)
scalar = parse("y = x * x", {"x": None}, "y")
vectors = parse("z = (v * w).sum()", {"v": 10, "w": 10}, "z")
requests = {
    "one point, y = x * x": {"kind": "gradients", "program": scalar.spec(),
                             "points": [{"x": 0.5}], "requires_grad": ["x"]},
    "20 points, two 10-vectors": {"kind": "gradients", "program": vectors.spec(),
                                  "points": [{n: [rng.random() for _ in range(10)]
                                              for n in "vw"} for _ in range(20)],
                                  "requires_grad": ["v", "w"]}}


def worker_cpu(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


out = {}
with Worker(Path("reference/__init__.py").resolve(), import_timeout=30,
            memory_mb=1024) as worker:
    for name, request in requests.items():
        worker.request(request, timeout=10)
        grader, engine = time.process_time(), worker_cpu(worker.pid)
        for _ in range(count):
            worker.request(request, timeout=10)
        out[name] = {"grader_ms": (time.process_time() - grader) / count * 1000,
                     "worker_ms": (worker_cpu(worker.pid) - engine) / count * 1000}
print(json.dumps(out))
"""


def measure(tree: Path, count: int) -> dict[str, dict[str, float]]:
    done = subprocess.run([sys.executable, "-c", MEASURE, str(count)], cwd=tree, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout)


def run(before: str | None = None, rounds: int = 3, requests: int = 2000
        ) -> dict[str, dict[str, dict[str, float]]]:
    """{side: {request: {"grader_ms", "worker_ms"}}}, the best of `rounds` for each figure; the
    side "before" only with `before`."""
    with tempfile.TemporaryDirectory(prefix="gradcheck-bench-") as folder:
        trees = {"now": ROOT}
        if before:
            trees = {"before": checkout(before, Path(folder) / "before",
                                        ["gradcheck", "reference"]), **trees}
        best: dict[str, dict[str, dict[str, float]]] = {}
        for _ in range(rounds):
            for side, tree in trees.items():
                for name, figures in measure(tree, requests).items():
                    kept = best.setdefault(side, {}).setdefault(name, figures)
                    for field, value in figures.items():
                        kept[field] = min(kept[field], value)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="a revision to measure side by side with this checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    best = run(args.before, args.rounds, args.requests)
    print("| request | " + " | ".join(f"{side}: grader, worker (ms CPU)" for side in best) + " |")
    print("|---|" + "---:|" * len(best))
    for name in best["now"]:
        print(f"| {name} | " + " | ".join(
            f"{best[side][name]['grader_ms']:.3f}, {best[side][name]['worker_ms']:.3f}"
            for side in best) + " |")


if __name__ == "__main__":
    main()
