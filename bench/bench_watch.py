"""Benchmark: `gradcheck grade --watch`, from saving the submission to the new report, on the
bundled bank, against a cold `gradcheck grade` of the same file in the same run.

A copy of the reference engine is watched (`gradcheck grade engine.py --watch --seed 1`, its
stdout read line by line). Once it watches, the file is saved `rounds` times, alternately with
a bug in `__mul__` (feedback and all) and fixed again; each latency is from the moment the file
is written to the moment the process says it watches again, its report and its changes printed
(so the poll interval and the wait for the write to settle are included). The yardstick is the
same file graded by a cold `gradcheck grade engine.py --seed 1 --quiet`, best of 3, run before
the watch starts. Run: `python bench/bench_watch.py`.
"""

from __future__ import annotations

import json
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

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "reference" / "__init__.py"
MUL_BUG = ("return g * _val(node._b),", "return g * node._a._value,")  # tests/engines/mutant.py


def run(rounds: int = 6) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        engine = Path(folder) / "engine.py"
        good = REFERENCE.read_text()
        bad = good.replace(*MUL_BUG)
        assert bad != good, "the reference moved: update MUL_BUG"
        engine.write_text(good)
        cold = []
        for _ in range(3):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "gradcheck", "grade", "engine.py", "--seed",
                            "1", "--quiet"], cwd=folder, check=True, capture_output=True)
            cold.append(time.perf_counter() - started)
        process = subprocess.Popen([sys.executable, "-m", "gradcheck", "grade", "engine.py",
                                    "--watch", "--seed", "1"], cwd=folder,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        lines: queue.Queue[tuple[float, str]] = queue.Queue()
        threading.Thread(target=lambda: [lines.put((time.perf_counter(), line))
                                         for line in process.stdout], daemon=True).start()

        def watching() -> tuple[float, list[str]]:
            seen = []
            while True:
                at, line = lines.get(timeout=300)
                seen.append(line)
                if line.startswith("watching engine.py"):
                    return at, seen

        try:
            started = time.perf_counter()
            ready, _ = watching()
            first = ready - started
            latencies, reported = [], []
            for number in range(rounds):
                written = time.perf_counter()
                engine.write_text(bad if number % 2 == 0 else good)
                done, seen = watching()
                latencies.append(done - written)
                reported += [line for line in seen if line.startswith("(graded ")]
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)
    return {"cold_grade_s": cold, "cold_best_s": min(cold),
            "watch_start_s": first, "save_to_report_s": latencies,
            "save_to_report_median_s": statistics.median(latencies),
            "save_to_report_best_s": min(latencies), "reported": reported}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
