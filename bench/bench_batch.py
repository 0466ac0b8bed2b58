"""Benchmark: `grade-batch` with a long-lived grader per job slot, against a process per
submission, and on a local Dask cluster.

Side by side in one run, on a snapshot of the bundled bank:

1. 50 submissions (45 copies of the reference engine, 5 buggy engines of tests/engines), `-j 2`:
   the code before the long-lived grader (`--before REV`, default main's commit just before it,
   run from a copy made with `git archive`) against this checkout; wall time, and the CPU of
   the whole process tree per submission (the batch, its graders and their workers, from
   `os.wait4`) (targets: at least 2x the throughput, at most 0.6 s of CPU a submission). Both
   grade the exercises the code before can read (the bank has gained a few it cannot since),
   each with an answer key it built itself at the same seed (the key's format changed since);
   a check's own hint, which the code before does not know, is dropped from both's copy;
   then one keyed grading's CPU in batch mode, the job slot's start left out: `grade-batch
   -j 1` on 1 and on 1 + K copies of the reference engine (`--one-grading K`, default 10),
   the difference over K, before and after taking turns;
2. `--cluster N` submissions (default 200) graded by a `dask scheduler` and two `dask worker`
   processes of one thread each on 127.0.0.1, against `-j 2` on this machine (the overhead of
   the cluster), on the whole snapshot; the cluster's start is timed apart.

Run: `python bench/bench_batch.py [--cluster 200] [--rounds 1]`. Rounds alternate before and
after; each figure is the best of its rounds. Load averages before and after are reported:
the machine may be shared.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_grading import SEED, snapshot, submissions
from code_before import checkout

#: main just before the long-lived grader: a `gradcheck grade` process per submission
BEFORE = "ba5ce10"


def timed(command: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Wall time and the CPU seconds of a command's whole tree of waited-for processes."""
    started = time.perf_counter()
    # not from the checkout: `python -m` puts the current folder first on sys.path, before the
    # PYTHONPATH that picks the code before
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            cwd=tempfile.gettempdir(), env=env)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise RuntimeError(f"{' '.join(command)} failed:\n{err.decode()[-2000:]}")
    return {"s": seconds, "cpu_s": usage.ru_utime + usage.ru_stime}


def graded(out: Path) -> dict[str, str]:
    with open(out / "gradebook.csv", newline="") as f:
        return {row["submission"]: row["score"] for row in csv.DictReader(f)}


def batch(folder: Path, out: Path, bank: Path, key: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "gradcheck", "grade-batch", str(folder), "--out", str(out),
            "--exercises", str(bank), "--key", str(key), *options]


def unreadable(old: Path, bank: Path) -> list[str]:
    """The exercise files of `bank` that the code in `old` cannot load."""
    listed = subprocess.run(
        [sys.executable, "-c", "import json, sys; from gradcheck.bank.loader import load_bank; "
         "print(json.dumps([str(p) for p, _ in load_bank(sys.argv[1]).broken]))", str(bank)],
        env={**os.environ, "PYTHONPATH": str(old)}, cwd=tempfile.gettempdir(), check=True,
        capture_output=True, text=True).stdout
    return json.loads(listed)


def without_check_hints(path: Path) -> None:
    """Rewrite the exercise file without its checks' own hints (the code before knows only the
    exercise's hint): they change no grade, only the feedback of a failed check."""
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    for check in (data.get("checks") or {}).values():
        if isinstance(check, dict):
            check.pop("hint", None)
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=100), encoding="utf-8")


def build_key(bank: Path, key: Path, env: dict[str, str] | None = None) -> None:
    subprocess.run([sys.executable, "-m", "gradcheck", "key", "build", "--exercises",
                    str(bank), "--seed", str(SEED), "--out", str(key)], check=True,
                   capture_output=True, cwd=tempfile.gettempdir(), env=env)


def long_lived(work: Path, bank: Path, before: str, rounds: int, extra: int) -> dict[str, Any]:
    """Figure 1: 50 submissions, -j 2, before and after, alternating, on the exercises of
    `bank` that the code before can read, each with its own key; and figure 1b unless
    `extra` is 0."""
    old = checkout(before, work / "before",
                   ["gradcheck", "exercises", "reference", "examples", "pyproject.toml"])
    common = Path(shutil.copytree(bank, work / "common"))
    for path in unreadable(old, common):  # a check's own hint is feedback only: dropped
        without_check_hints(Path(path))
    left_out = unreadable(old, common)
    for path in left_out:
        Path(path).unlink()
    envs = {"before": {**os.environ, "PYTHONPATH": str(old)}, "after": None}
    keys = {label: work / f"key-{label}.json" for label in envs}
    for label, env in envs.items():
        build_key(common, keys[label], env)
    folder = submissions(work / "fifty", 50)
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for number in range(rounds):
        for label, env in envs.items():
            out = work / f"{label}-{number}"
            runs[label].append(timed(batch(folder, out, common, keys[label], "-j", "2"), env))
            runs[label][-1]["scores"] = graded(out)
    first = {label: found[0]["scores"] for label, found in runs.items()}
    best = {label: min(found, key=lambda run: run["s"]) for label, found in runs.items()}
    one = one_grading(work, common, keys, envs, rounds, extra) if extra else {}
    return {**one, "submissions": 50, "before_rev": before,
            "exercises_left_out": [Path(path).name for path in left_out],
            "scores_that_differ": sorted(name for name, score in first["after"].items()
                                         if first["before"].get(name) != score),
            "before_s": best["before"]["s"], "after_s": best["after"]["s"],
            "throughput_ratio": best["before"]["s"] / best["after"]["s"],
            "before_cpu_per_submission_s": min(r["cpu_s"] for r in runs["before"]) / 50,
            "after_cpu_per_submission_s": min(r["cpu_s"] for r in runs["after"]) / 50,
            "all_s": {label: [r["s"] for r in found] for label, found in runs.items()}}


def one_grading(work: Path, bank: Path, keys: dict[str, Path], envs: dict[str, Any],
                rounds: int, extra: int) -> dict[str, Any]:
    """Figure 1b: the CPU of one keyed grading of the reference engine in batch mode, the job
    slot's start left out: `grade-batch -j 1` on one copy and on 1 + `extra` copies, before
    and after taking turns; the difference over `extra`, best of the rounds."""
    folders = {count: submissions(work / f"copies-{count}", count, buggy=())
               for count in (1, 1 + extra)}
    cpu: dict[str, list[float]] = {"before": [], "after": []}
    for number in range(rounds):
        for label, env in envs.items():
            used = {count: timed(batch(folder, work / f"{label}-{count}-{number}", bank,
                                       keys[label], "-j", "1"), env)["cpu_s"]
                    for count, folder in folders.items()}
            cpu[label].append((used[1 + extra] - used[1]) / extra)
    return {"one_grading_extra": extra,
            "before_cpu_per_grading_s": min(cpu["before"]),
            "after_cpu_per_grading_s": min(cpu["after"]),
            "all_cpu_per_grading_s": cpu}


def cluster(work: Path, bank: Path, key: Path, count: int) -> dict[str, Any]:
    """Figure 2: `count` submissions on two local Dask workers, then -j 2 here."""
    folder = submissions(work / "many", count)
    # this interpreter's: a `dask` on PATH may run another Python, and so another gradcheck
    dask = [sys.executable, "-m", "dask"]
    procs = []
    started = time.perf_counter()
    try:
        file = work / "scheduler.json"
        procs.append(subprocess.Popen(
            [*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(file)], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, cwd=work))
        while not file.is_file() or not file.read_text().strip():
            time.sleep(0.05)
        time.sleep(0.2)
        address = json.loads(file.read_text())["address"]
        for name in ("a", "b"):
            procs.append(subprocess.Popen(
                [*dask, "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                 "--host", "127.0.0.1", "--name", name, "--local-directory", str(work / name)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        from distributed import Client

        with Client(address) as client:
            client.wait_for_workers(2, timeout=60)
        start_s = time.perf_counter() - started
        on_cluster = timed(batch(folder, work / "cluster", bank, key, "--scheduler", address))
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    here = timed(batch(folder, work / "here", bank, key, "-j", "2"))
    differ = sorted(name for name, score in graded(work / "cluster").items()
                    if graded(work / "here").get(name) != score)
    return {"scores_that_differ": differ,"submissions": count, "cluster_start_s": start_s, "cluster_s": on_cluster["s"],
            "here_s": here["s"], "cluster_over_here": on_cluster["s"] / here["s"],
            "cluster_client_cpu_per_submission_s": on_cluster["cpu_s"] / count,
            "here_cpu_per_submission_s": here["cpu_s"] / count}


def run(count: int = 200, rounds: int = 1, before: str = BEFORE,
        leave_out: tuple[str, ...] = (), extra: int = 10) -> dict[str, Any]:
    """Both figures, as plain data; `leave_out`: folders of the bank left out of the snapshot."""
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp:
        work = Path(tmp)
        bank = snapshot(work)
        for folder in leave_out:
            shutil.rmtree(bank / folder)
        figures: dict[str, Any] = {"cpus": len(os.sched_getaffinity(0)),
                                   "load_average_before": os.getloadavg(),
                                   "left_out": list(leave_out),
                                   "long_lived": long_lived(work, bank, before, rounds, extra)}
        print(json.dumps(figures["long_lived"]), file=sys.stderr, flush=True)  # while it runs on
        figures["load_average_between"] = os.getloadavg()
        if count:
            key = work / "key.json"
            build_key(bank, key)
            figures["cluster"] = cluster(work, bank, key, count)
        figures["load_average_after"] = os.getloadavg()
        return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", type=int, default=200, metavar="N",
                        help="submissions graded on the local cluster (0: skip it)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of before and after")
    parser.add_argument("--before", default=BEFORE, help="the revision to compare with")
    parser.add_argument("--leave-out", action="append", default=[], metavar="FOLDER",
                        help="a folder of the bundled bank to leave out (repeatable)")
    parser.add_argument("--one-grading", type=int, default=10, metavar="K",
                        help="copies of the reference over one that measure a single grading's "
                             "CPU in batch mode (0: skip it)")
    arguments = parser.parse_args()
    print(json.dumps(run(arguments.cluster, arguments.rounds, arguments.before,
                         tuple(arguments.leave_out), arguments.one_grading), indent=2))
