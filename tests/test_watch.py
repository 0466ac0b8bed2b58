"""`gradcheck grade --watch`, for real: a gradcheck process watching an engine file, the file
edited, the new report and what changed read from its output; bounded in time."""

import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from grading_samples import write_fd_bank

from gradcheck.grading.results import CheckResult, GradeReport
from gradcheck.watch import changes

sys.path.insert(0, str(Path(__file__).parent / "engines"))
import mutant  # noqa: E402  (tests/engines: the reference engine with a bug put in)

WATCHING = "watching engine.py for changes (Ctrl-C stops)"


def result(exercise_id, score, max_score=2.0):
    return CheckResult(exercise_id=exercise_id, check="gradients", title="", score=score,
                       max_score=max_score, status="passed" if score == max_score else "failed")


def test_changes_are_said_largest_first_then_the_total():
    before = GradeReport("e.py", 1, [result("op-mul", 0), result("op-add", 2), result("tanh", 0),
                                     result("gone", 1)])
    after = GradeReport("e.py", 1, [result("op-mul", 2), result("op-add", 0), result("tanh", 1),
                                    result("new", 2, 3)])
    assert changes(before, after) == ["+2 points: op-mul now passes",
                                      "-2 points: op-add now fails",
                                      "+2 points: new is new, 2/3",
                                      "+1 points: tanh now has 1/2",
                                      "total 5/9, +2 points"]
    assert changes(after, after) == ["total 5/9, no change in points"]


@pytest.mark.slow  # torch is imported first, once: a few seconds
def test_an_edit_is_graded_again_in_the_same_process(tmp_path):
    bank = write_fd_bank(tmp_path / "bank")
    engine = tmp_path / "engine.py"
    engine.write_text(mutant.source("mul"))  # x * y gets the wrong gradient: product fails
    process = subprocess.Popen(
        [sys.executable, "-m", "gradcheck", "grade", "engine.py", "--exercises", str(bank),
         "--oracles", "fd", "--watch"], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line.rstrip("\n")) for line in process.stdout],
                     daemon=True).start()

    def read_until(wanted, seconds=60):
        seen, deadline = [], time.monotonic() + seconds
        while True:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            seen.append(line)
            if line == wanted:
                return seen

    try:
        first = read_until(WATCHING)
        assert any(line.startswith("total 2/4") for line in first)
        engine.write_text((Path(mutant.REFERENCE)).read_text())  # the bug fixed
        again = read_until(WATCHING)
        assert "engine.py changed: grading again (seed " in "\n".join(again)
        assert "+2 points: product now passes" in again and "total 4/4, +2 points" in again
        started = time.monotonic()
        engine.write_text(mutant.source("mul"))
        worse = read_until(WATCHING)
        assert "-2 points: product now fails" in worse
        assert time.monotonic() - started < 30
    finally:
        process.send_signal(signal.SIGINT)
        try:
            assert process.wait(timeout=20) == 130  # Ctrl-C ends the watch as any command
        finally:
            process.kill()
