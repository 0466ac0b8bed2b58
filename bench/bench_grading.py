"""Benchmark: grading the bundled bank, with live oracles and with an answer key, and grade-batch.

Every figure is a whole command as a course runs it, in its own process (`python -m gradcheck
...`), timed by wall clock and side by side with its yardstick in one run:

1. `grade reference` with live oracles against the floor `python -c "import torch, jax"`, the two
   alternating (target: at most 2x the floor);
2. `grade reference --key` (target: at most 3 s), and the peak resident memory of each grading's
   whole process tree, the grader and its worker together (target: under 768 MB); beside it, a
   submission with a bug (tests/engines/wrong_mul.py) graded with the key, feedback included;
3. `grade-batch` of 50 submissions (45 copies of the reference engine, 5 buggy engines) with a key,
   `-j 1` then `-j 2` (target: `-j 2` at least 1.7x faster).

Each timing is the best of `repeat` runs. Peak memory is the largest sum of the tree's RSS seen by
a sampler that walks /proc every 10 ms (a short spike between samples can be missed).
`python bench/bench_grading.py --profile` prints cProfile's view of one grading run in each mode.
Run: `python bench/bench_grading.py`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from engine_packages import ENGINES, package  # noqa: E402

#: Buggy engines among the 50 submissions (tiny.py is the base the others import: each of them
#: is a package that brings its own copy).
BUGGY = ("tiny", "wrong_mul", "no_tanh", "string_grads", "lying_floats")
SEED = 1
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _tree_rss(root: int) -> int:
    """Resident bytes of `root` and all its descendants now."""
    parent, rss = {}, {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            parent[int(name)], rss[int(name)] = int(fields[1]), int(fields[21]) * _PAGE
    tree, grew = {root}, True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return sum(rss.get(pid, 0) for pid in tree)


def measure(command: list[str]) -> dict[str, Any]:
    """Wall time, peak RSS of the process tree, and stdout of one command."""
    peak = 0
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss(proc.pid))
            done.wait(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    out, err = proc.communicate()
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(command)} failed ({proc.returncode}):\n{err[-2000:]}")
    return {"s": seconds, "peak_mb": peak / 2**20, "stdout": out, "stderr": err}


def _gradcheck(*args: str) -> list[str]:
    return [sys.executable, "-m", "gradcheck", *args]


def snapshot(work: Path) -> Path:
    """A copy of the bundled bank, so that edits made while the benchmark runs cannot reach it."""
    from gradcheck.bank.bundled import bank_dir

    return Path(shutil.copytree(bank_dir(), work / "bank"))


def grading(bank: Path, key: Path, repeat: int) -> dict[str, Any]:
    """Figures 1 and 2: live, keyed and the import floor, alternating."""
    floor, live, keyed, buggy = [], [], [], []
    grade = ["grade", "reference", "--exercises", str(bank), "--quiet"]
    for _ in range(repeat):
        floor.append(measure([sys.executable, "-c", "import torch, jax"]))
        live.append(measure(_gradcheck(*grade, "--seed", str(SEED))))
        keyed.append(measure(_gradcheck(*grade, "--key", str(key))))
        # a submission with a bug: its failing checks' feedback comes from the key too
        buggy.append(measure(_gradcheck("grade", str(ENGINES / "wrong_mul.py"), *grade[2:],
                                         "--key", str(key))))
    best = {name: min(runs, key=lambda r: r["s"]) for name, runs in (
        ("floor", floor), ("live", live), ("keyed", keyed), ("buggy", buggy))}
    return {
        "import_torch_jax_s": best["floor"]["s"],
        "import_torch_jax_peak_mb": best["floor"]["peak_mb"],
        "live_s": best["live"]["s"],
        "live_over_floor": best["live"]["s"] / best["floor"]["s"],
        "live_peak_mb": max(r["peak_mb"] for r in live),
        "live_score": best["live"]["stdout"].split()[0],
        "keyed_s": best["keyed"]["s"],
        "keyed_peak_mb": max(r["peak_mb"] for r in keyed),
        "keyed_score": best["keyed"]["stdout"].split()[0],
        "keyed_buggy_s": best["buggy"]["s"],
        "keyed_buggy_peak_mb": max(r["peak_mb"] for r in buggy),
        "keyed_buggy_score": best["buggy"]["stdout"].split()[0],
        "all_s": {"floor": [r["s"] for r in floor], "live": [r["s"] for r in live],
                  "keyed": [r["s"] for r in keyed], "keyed_buggy": [r["s"] for r in buggy]},
    }


def submissions(folder: Path, count: int, buggy: Sequence[str] = BUGGY) -> Path:
    """A folder of `count` submissions: the `buggy` engines, then copies of the reference."""
    folder.mkdir()
    for name in buggy:  # each graded alone: those that import tiny.py bring their own
        if "from tiny import" in (ENGINES / f"{name}.py").read_text():
            package(folder / name, name)
        else:
            shutil.copy(ENGINES / f"{name}.py", folder / f"{name}.py")
    for i in range(count - len(buggy)):
        shutil.copytree(ROOT / "reference", folder / f"student{i:03d}",
                        ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def batch(bank: Path, key: Path, work: Path, count: int = 50) -> dict[str, Any]:
    """Figure 3: `count` submissions, -j 1 then -j 2, the same key."""
    folder = submissions(work / "submissions", count)
    figures: dict[str, Any] = {"submissions": count}
    for jobs in (1, 2):
        out = work / f"out-j{jobs}"
        run = measure(_gradcheck("grade-batch", str(folder), "-j", str(jobs), "--out", str(out),
                                 "--key", str(key), "--exercises", str(bank)))
        with open(out / "gradebook.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == count, run["stderr"][-2000:]
        figures[f"j{jobs}_s"] = run["s"]
        figures[f"j{jobs}_peak_mb"] = run["peak_mb"]
        figures[f"j{jobs}_graded"] = sum(row["status"] == "graded" for row in rows)
    figures["speedup"] = figures["j1_s"] / figures["j2_s"]
    return figures


def run(repeat: int = 3) -> dict[str, Any]:
    """Every grading figure, as plain data."""
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        work = Path(tmp)
        bank, key = snapshot(work), work / "key.json"
        load_before = os.getloadavg()[0]
        build = measure(_gradcheck("key", "build", "--exercises", str(bank), "--seed", str(SEED),
                                   "--out", str(key)))
        return {"exercises": len(list(bank.rglob("*.exercise.yaml"))),
                "cpus": len(os.sched_getaffinity(0)), "load_average_before": load_before,
                "key_build_s": build["s"], "key_bytes": key.stat().st_size,
                "grading": grading(bank, key, repeat), "batch": batch(bank, key, work),
                "load_average_after": os.getloadavg()[0]}


def profile(top: int = 40) -> None:
    """cProfile's view of one whole `grade reference` process (imports included), keyed and
    live, sorted by cumulative time."""
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        bank, key = snapshot(Path(tmp)), Path(tmp) / "key.json"
        measure(_gradcheck("key", "build", "--exercises", str(bank), "--seed", str(SEED),
                           "--out", str(key)))
        for label, options in (("with a key", ["--key", str(key)]), ("live", [])):
            run = measure([sys.executable, "-m", "cProfile", "-s", "cumulative", "-m",
                           "gradcheck", "grade", "reference", "--exercises", str(bank), "--seed",
                           str(SEED), "--quiet", *options])
            print(f"=== {label}: {run['s']:.2f} s ===")
            print("\n".join(run["stdout"].splitlines()[:top + 8]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="print cProfile views instead")
    if parser.parse_args().profile:
        profile()
    else:
        print(json.dumps(run(), indent=2))
