"""Progress on stderr while `gradcheck grade` runs: in place on a terminal, plain lines
elsewhere, nothing with --quiet."""

import os
import pty
import subprocess
import sys

from another_user import ENGINES
from grading_samples import write_fd_bank as write_bank


def grade(bank, *extra, stderr, engine="reference"):
    return subprocess.run([sys.executable, "-m", "gradcheck", "grade", engine,
                           "--exercises", str(bank), "--oracles", "fd", "--seed", "1", *extra],
                          stdout=subprocess.PIPE, stderr=stderr, timeout=120)


def test_plain_lines_when_not_a_terminal_and_nothing_when_quiet(tmp_path):
    bank = write_bank(tmp_path / "bank")
    run = grade(bank, stderr=subprocess.PIPE)
    lines = [line for line in run.stderr.decode().splitlines()  # (besides the bank's line)
             if line.startswith("gradcheck: ")]
    assert lines[0] == "gradcheck: grading 2 exercises: starting the worker and the oracles"
    assert lines[1].startswith("gradcheck: [1/2] 0") and lines[2].startswith("gradcheck: [2/2] ")
    assert "01-forward: product graded, " in run.stderr.decode()
    assert "\033" not in run.stderr.decode() and "total 4/4" in run.stdout.decode()
    quiet = grade(bank, "--quiet", stderr=subprocess.PIPE)
    assert b"gradcheck: " not in quiet.stderr and quiet.stdout == b"4/4 (seed 1)\n"


def test_with_an_answer_key_the_first_line_starts_no_oracle(tmp_path):
    """With a key no oracle runs: the first line said it started them all the same."""
    bank = write_bank(tmp_path / "bank")
    key = tmp_path / "key.json"
    subprocess.run([sys.executable, "-m", "gradcheck", "key", "build", "--exercises", str(bank),
                    "--seed", "1", "--out", str(key)], check=True, capture_output=True,
                   timeout=300)
    run = subprocess.run([sys.executable, "-m", "gradcheck", "grade", "reference",
                          "--exercises", str(bank), "--key", str(key)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert ("gradcheck: grading 2 exercises: starting the worker (the oracles' answers come "
            "from the answer key)") in run.stderr.splitlines()


def test_the_feedback_of_failed_checks_is_announced_once_their_side_is_scored(tmp_path):
    """Every score of the visible exercises is known before their feedback is worked out
    (`Grader.grade_bank(feedback_later=True)`): the line says so, after the last exercise's and
    before the report."""
    bank = write_bank(tmp_path / "bank")
    run = grade(bank, stderr=subprocess.PIPE, engine=str(ENGINES / "wrong_mul.py"))
    lines = [line for line in run.stderr.decode().splitlines() if line.startswith("gradcheck: ")]
    assert lines[2].startswith("gradcheck: [2/2] ")
    assert lines[3].startswith("gradcheck: [2/2] scored, ")
    assert lines[3].endswith(" s: working out the feedback of 1 failed check")
    report = run.stdout.decode()
    assert "total 2/4" in report
    assert "(MulBackward0) passed -0.5 to y; it should pass 1.5" in report  # the walk, after all
    passing = grade(bank, stderr=subprocess.PIPE)
    assert b"working out the feedback" not in passing.stderr  # nothing failed: nothing to say


def test_one_line_rewritten_in_place_on_a_terminal(tmp_path):
    bank = write_bank(tmp_path / "bank")
    main, terminal = pty.openpty()
    try:
        run = grade(bank, stderr=terminal)
        os.close(terminal)
        terminal = -1
        seen = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the terminal's other end is closed: all is read
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(main)
        if terminal != -1:
            os.close(terminal)
    text = seen.decode()
    assert run.returncode == 0
    updates = text.split("\r\033[K")
    assert updates[0].startswith("bank: ") and updates[-1] == ""  # cleared before the report
    assert [u.split("]")[0] for u in updates[2:-1]] == ["[1/2", "[2/2"]
    assert "\n" not in text.replace("\r\n", "")  # never a new line, only the same one again
