"""Benchmark: `gradcheck grade --watch`, from saving the submission to the new report, on the
bundled bank: this checkout against the code before (`--before REV`, run from a copy made with
`git archive`), in the same run, with a cold `gradcheck grade` of the same file as yardstick.

A copy of the reference engine is watched by each (`gradcheck grade engine.py --watch --seed
1`, its stdout read line by line). Once both watch, each file is saved `rounds` times, alternately
with a bug in `__mul__` (feedback and all) and fixed again, the two watches taking turns, so that
both meet the same load, each save PAUSE seconds after the last report. Per save, from the
moment the file is written: the time to the line
that ends the changes in points ("(scored ...)", printed once every score is known; the code
before prints them after the report), the time until the process says it watches again (the
whole report printed, the feedback of failed checks in it), and the CPU time of the watch
process and of the workers it reaped meanwhile. The poll interval and the wait for the write to
settle are in both times. The yardstick is the file graded by a cold `gradcheck grade engine.py
--seed 1 --quiet`, best of `cold_runs`, run first. Run: `python bench/bench_watch.py [--before
REV] [--rounds 6]`.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from code_before import ROOT, checkout

REFERENCE = ROOT / "reference" / "__init__.py"
MUL_BUG = ("return g * _val(node._b),", "return g * node._a._value,")  # tests/engines/mutant.py
#: main just before the watch's workers started ahead and its feedback after the scores
BEFORE = "0a9d869"
#: seconds between a watch's last report and the next save (of either watch): a student reads
#: the report before saving again, and meanwhile the interpreters each watch starts ahead for
#: its next grading are up, not starting while the other watch grades
PAUSE = 1.0


class Watch:
    """One `gradcheck grade engine.py --watch` process, in a folder of its own."""

    def __init__(self, folder: Path, source: str, env: dict[str, str] | None) -> None:
        self.engine = folder / "engine.py"
        self.engine.write_text(source)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gradcheck", "grade", "engine.py", "--watch", "--seed", "1"],
            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put((time.perf_counter(), line))
                                         for line in self.process.stdout], daemon=True).start()

    def watching(self) -> tuple[float, list[tuple[float, str]]]:
        """When it next says it watches, and what it printed until then."""
        seen = []
        while True:
            at, line = self.lines.get(timeout=900)
            seen.append((at, line))
            if line.startswith("watching engine.py"):
                return at, seen

    def cpu(self) -> float:
        """CPU seconds of the process and of the children it reaped."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    def save(self, source: str) -> dict[str, Any]:
        """Write the file; the figures of the grading that follows."""
        cpu, written = self.cpu(), time.perf_counter()
        self.engine.write_text(source)
        seen: list[tuple[float, str]] = []
        while not any(line.startswith("(graded ") for _, line in seen):
            done, lines = self.watching()  # lines printed before the write belong to another
            seen += [(at, line) for at, line in lines if at >= written]
        scored = next((at for at, line in seen if line.startswith("(scored ")), done)
        total = next(line for _, line in seen if line.startswith("total "))
        return {"score_s": scored - written, "report_s": done - written,
                "cpu_s": self.cpu() - cpu, "total": total.split()[1].rstrip(",")}

    def stop(self) -> str:
        """Ctrl-C; how the watch ended ("killed" if it had not after 60 s)."""
        self.process.send_signal(signal.SIGINT)
        try:
            return f"exit {self.process.wait(timeout=60)}"
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return "killed"


def run(rounds: int = 6, cold_runs: int = 3, before: str | None = BEFORE) -> dict[str, Any]:
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        good = REFERENCE.read_text()
        bad = good.replace(*MUL_BUG)
        assert bad != good, "the reference moved: update MUL_BUG"
        (work_dir / "engine.py").write_text(good)
        cold = []
        for _ in range(cold_runs):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "gradcheck", "grade", "engine.py", "--seed",
                            "1", "--quiet"], cwd=work, check=True, capture_output=True)
            cold.append(time.perf_counter() - started)
        trees: dict[str, dict[str, str] | None] = {"after": None}
        if before:
            # pyproject.toml: how gradcheck run from a checkout finds its bundled bank
            old = checkout(before, work_dir / "code-before",
                           ["gradcheck", "exercises", "reference", "pyproject.toml"])
            # `python -m` puts the watch's folder first on sys.path, then PYTHONPATH
            trees = {"before": {**os.environ, "PYTHONPATH": str(old)}, **trees}
        watches = {}
        started = time.perf_counter()
        for label, env in trees.items():
            (work_dir / label).mkdir()
            watches[label] = Watch(work_dir / label, good, env)
        try:
            ready = {label: watch.watching()[0] - started for label, watch in watches.items()}
            saves: dict[str, list[dict[str, Any]]] = {label: [] for label in watches}
            for number in range(rounds):
                for label, watch in watches.items():
                    time.sleep(PAUSE)
                    saves[label].append({"case": "bug" if number % 2 == 0 else "fixed",
                                         **watch.save(bad if number % 2 == 0 else good)})
        finally:
            ended = {label: watch.stop() for label, watch in watches.items()}
    summary: dict[str, Any] = {"load_before": load, "load_after": os.getloadavg(),
                               "before_rev": before, "cold_grade_s": cold,
                               "cold_best_s": min(cold), "watch_ready_s": ready,
                               "ended": ended}
    for label, figures in saves.items():
        for case in ("fixed", "bug"):
            mine = [f for f in figures if f["case"] == case]
            summary[f"{label}_{case}"] = {
                name: [round(f[name], 2) for f in mine] for name in ("score_s", "report_s",
                                                                     "cpu_s")}
            summary[f"{label}_{case}"]["total"] = mine[0]["total"]
            summary[f"{label}_{case}"]["report_median_s"] = statistics.median(
                f["report_s"] for f in mine)
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE, help="the code to compare with (a git "
                        "revision; '' for none; default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=6)
    options = parser.parse_args()
    print(json.dumps(run(options.rounds, before=options.before or None), indent=2))
