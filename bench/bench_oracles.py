"""Benchmark: the three oracles on 1,000 points of a 20-operation program, batched vs per point.

Both ways run the same code (`gradcheck.oracles.compute`, then `gradcheck.grading.compare.agree`, which
judges where the oracles agree), once on the whole batch and once on each point alone, side by side
in one run, after jax's compile for both batch shapes. Also timed: grading 1,000 answers of an
engine against those results (`gradcheck.grading.compare.grade`). Run: `python bench/bench_oracles.py`.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from gradcheck.grading.compare import agree, grade
from gradcheck.oracles import compute
from gradcheck.program.language import parse

#: 20 operations: mul tanh | pow neg exp | mul add | pow add | log sub sigmoid | sin cos mul |
#: div sqrt mul sum add
SOURCE = """\
a = (x * y).tanh()
c = exp(-x ** 2)
d = a * c + y
e = 1 + d ** 2
f = sigmoid(log(e) - x)
g = sin(f) * cos(y)
z = g / sqrt(e) + (v * x).sum()
"""
INPUTS = {"x": None, "y": None, "v": 3}
ORACLES = ("fd", "torch", "jax")


def _points(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(-1.5, 1.5, n), "y": rng.uniform(-1.5, 1.5, n),
            "v": rng.uniform(-1.5, 1.5, (n, 3))}


def _best(function: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def run(n: int = 1000, repeat: int = 5) -> dict[str, Any]:
    """Seconds to check `n` points batched and point by point, per oracle and for all three."""
    program = parse(SOURCE, INPUTS)
    assert sum(node.op not in ("input", "const") for node in program.nodes) == 20
    batch = _points(n)
    singles = [{k: v[i:i + 1] for k, v in batch.items()} for i in range(n)]
    rg = tuple(INPUTS)

    compute(parse("z = x", {"x": None}), [{"x": 0.0}], ["x"], ORACLES)  # imports, backends
    start = time.perf_counter()
    compute(program, batch, rg, ("jax",))
    compute(program, singles[0], rg, ("jax",))
    first_compile = time.perf_counter() - start

    def batched(oracles: tuple[str, ...]) -> None:
        agree(program, compute(program, batch, rg, oracles), rg, batch)

    def one_by_one(oracles: tuple[str, ...]) -> None:
        for point in singles:
            agree(program, compute(program, point, rg, oracles), rg, point)

    figures: dict[str, Any] = {"points": n, "operations": 20,
                               "jax_compile_both_shapes_s": first_compile}
    for label, oracles in [*((o, (o,)) for o in ORACLES), ("all", ORACLES)]:
        whole = _best(lambda: batched(oracles), repeat)
        each = _best(lambda: one_by_one(oracles), 1)
        figures[label] = {"batched_ms": whole * 1e3, "per_point_ms": each * 1e3,
                          "speedup": each / whole}
    # Grading an engine's answers (here torch's own, as plain lists) at the same points.
    results = compute(program, batch, rg, ORACLES)
    torch_result = results["torch"]
    answers = [{"value": float(torch_result.value[i]),
                "grads": {k: torch_result.grads[k][i].tolist() for k in rg}} for i in range(n)]
    figures["grade_answers_ms"] = _best(
        lambda: grade(program, batch, rg, results, answers), repeat) * 1e3
    return figures


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
