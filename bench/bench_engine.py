"""Benchmark: the reference engine against torch scalar tensors (float64), side by side in one run.

Five figures: (1) build and backpropagate a chain of 200,000 operations, (2) the same for a sum of
100,000 products, (3) a chain 1,000,000 deep (reference only: it must work, no RecursionError),
(4) bytes per scalar node, by tracemalloc, while a 200,000-node chain is alive, (5) second
order: on a chain of 20,000 operations, `grad(y, x, create_graph=True)` then `grad` of that. Each timing is the
best of `repeat` runs, the two engines alternating so that both see the same machine load.
Run: `python bench/bench_engine.py`.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

from gradcheck.engine import torch_engine

ROOT = Path(__file__).resolve().parents[1]


def _reference() -> Any:
    """The engine as the grader loads a submission: by file path."""
    spec = importlib.util.spec_from_file_location("reference_engine",
                                                  ROOT / "reference" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def chain(engine: Any, length: int) -> tuple[Any, Any]:
    """A leaf, and `length` operations on it in turn: times a constant, plus a constant, sin.

    The value settles near 0.01, where each step's slope is close to 1, so the gradient stays a
    normal number (about 0.05 after 200,000 operations) that both engines must agree on.
    """
    x = engine.tensor(0.01, requires_grad=True)
    y = x
    for i in range(length):
        step = i % 3
        if step == 0:
            y = y * 1.00001
        elif step == 1:
            y = y + 1e-7
        else:
            y = y.sin()
    return x, y


def products(engine: Any, n: int) -> tuple[list[Any], Callable[[], Any]]:
    """`n` pairs of leaves, and a function summing their products (2n operations)."""
    xs = [engine.tensor(i / n, requires_grad=True) for i in range(n)]
    ys = [engine.tensor(1.0 - i / n, requires_grad=True) for i in range(n)]
    return xs, lambda: sum(x * y for x, y in zip(xs, ys))


def _time_chain(engine: Any, length: int) -> tuple[float, float, float]:
    """Seconds to build and to backpropagate a chain, and the leaf's gradient."""
    start = time.perf_counter()
    x, y = chain(engine, length)
    built = time.perf_counter()
    y.backward()
    done = time.perf_counter()
    return built - start, done - built, x.grad.tolist()


def _time_products(engine: Any, n: int) -> tuple[float, float, float]:
    xs, total = products(engine, n)
    start = time.perf_counter()
    s = total()
    built = time.perf_counter()
    s.backward()
    done = time.perf_counter()
    return built - start, done - built, xs[-1].grad.tolist()


def _time_second_order(engine: Any, length: int) -> tuple[float, float, float]:
    """Seconds for the first derivative with its graph and for the second, and the second."""
    x, y = chain(engine, length)
    start = time.perf_counter()
    (first,) = engine.grad(y, x, create_graph=True)
    built = time.perf_counter()
    (second,) = engine.grad(first, x)
    done = time.perf_counter()
    return built - start, done - built, second.tolist()


def _best(measure: Callable[[Any, int], tuple[float, float, float]], engines: dict[str, Any],
          size: int, repeat: int) -> dict[str, Any]:
    """Best build and backward seconds per engine over `repeat` alternating runs."""
    best: dict[str, list[float]] = {name: [float("inf"), float("inf"), 0.0] for name in engines}
    for _ in range(repeat):
        for name, engine in engines.items():
            build, backward, grad = measure(engine, size)
            figures = best[name]
            if build + backward < figures[0] + figures[1]:
                figures[:] = [build, backward, grad]
            gc.collect()
    out: dict[str, Any] = {}
    for name, (build, backward, grad) in best.items():
        out[name] = {"build_s": build, "backward_s": backward, "total_s": build + backward,
                     "grad": grad}
    out["speedup"] = out["torch"]["total_s"] / out["reference"]["total_s"]
    mine, torchs = out["reference"]["grad"], out["torch"]["grad"]
    out["grads_agree"] = abs(mine - torchs) <= 1e-9 * abs(torchs)
    return out


def bytes_per_node(engine: Any, length: int = 200_000) -> float:
    """Memory held by a live chain of `length` operations, per operation (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    x, y = chain(engine, length)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del x, y
    return held / length


def run(repeat: int = 3) -> dict[str, Any]:
    """The four figures, as plain data."""
    reference = _reference()
    engines = {"reference": reference, "torch": torch_engine}
    results: dict[str, Any] = {
        "chain_200k": _best(_time_chain, engines, 200_000, repeat),
        "sum_of_100k_products": _best(_time_products, engines, 100_000, repeat),
        "second_order_chain_20k": _best(_time_second_order, engines, 20_000, repeat),
    }
    build, backward, grad = _time_chain(reference, 1_000_000)
    results["chain_1m_reference"] = {"build_s": build, "backward_s": backward,
                                     "total_s": build + backward, "grad": grad}
    results["bytes_per_node_reference"] = bytes_per_node(reference)
    return results


def _table(results: dict[str, Any]) -> str:
    rows = ["| case | reference build + backward | torch build + backward | torch / reference |",
            "|---|---|---|---|"]
    for case in ("chain_200k", "sum_of_100k_products", "second_order_chain_20k"):
        r, t = results[case]["reference"], results[case]["torch"]
        rows.append(f"| {case} | {r['build_s']:.2f} + {r['backward_s']:.2f} = {r['total_s']:.2f} s"
                    f" | {t['build_s']:.2f} + {t['backward_s']:.2f} = {t['total_s']:.2f} s"
                    f" | {results[case]['speedup']:.1f}x |"
                    + ("" if results[case]["grads_agree"] else " (gradients differ!)"))
    deep = results["chain_1m_reference"]
    rows.append(f"| chain_1m (reference only) | {deep['build_s']:.2f} + {deep['backward_s']:.2f} = "
                f"{deep['total_s']:.2f} s, no RecursionError | - | - |")
    rows.append(f"\nreference engine: {results['bytes_per_node_reference']:.0f} bytes per scalar "
                "node (tracemalloc, live 200,000-op chain)")
    return "\n".join(rows)


if __name__ == "__main__":
    figures = run()
    print(_table(figures))
    print(json.dumps(figures, indent=2))
