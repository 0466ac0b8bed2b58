"""A job slot's long-lived grader (gradcheck/course/slots.py): each submission is graded in a
process forked from it, so a fault of gradcheck's in one grading, whatever it breaks, does not
reach the next; a hung grading is killed; the server's gradings die with it."""

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from engine_packages import package
from grading_samples import keyed_bank
from processes import alive, gone_within

from gradcheck.course.slots import Options, Running, Server

ENGINES = Path(__file__).parent / "engines"

#: `gradcheck` with a fault of its own put in for submissions named poison*: the grading breaks
#: the bank and the key it was given (this process loaded them once, for every submission),
#: patches the comparison to pass everything, then raises, or (poison_crash*) dies of SIGSEGV.
FAULTY = """
import os, signal, sys
from gradcheck.grading import compare, grader
real = grader.Grader.grade_bank
def grade_bank(self, bank, progress=None, **options):
    if "poison" in self.label:
        del bank.exercises[1:]
        self.key.exercises.clear()
        compare.grade = lambda *args, **kwargs: None
        if "crash" in self.label:
            os.kill(os.getpid(), signal.SIGSEGV)
        raise RuntimeError("a fault of gradcheck's")
    return real(self, bank, progress, **options)
grader.Grader.grade_bank = grade_bank
from gradcheck.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def options(tmp_path_factory):
    bank, key = keyed_bank(tmp_path_factory.mktemp("slots"))
    return Options(seed=5, exercises=[bank], key=key, submission_timeout=60)


def fresh_score(submission: Path, options: Options) -> str:
    """The total a `gradcheck grade` process of its own gives `submission`."""
    done = subprocess.run([*options.command(), str(submission)], capture_output=True, text=True,
                          timeout=120)
    return done.stdout.split()[0]


@pytest.mark.slow
def test_a_fault_of_gradchecks_in_one_grading_does_not_reach_the_next(options, tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(ENGINES / "tiny.py", subs / "tiny.py")
    package(subs / "wrong_mul", "wrong_mul")
    for name in ("poison.py", "poison_crash.py"):
        shutil.copy(ENGINES / "tiny.py", subs / name)
    running = Running()
    server = Server([sys.executable, "-c", FAULTY, *options.command()[3:]], running)
    try:
        def grade(name):
            return server.grade(subs / name, tmp_path / "out" / name, 7.0, options)

        before = grade("wrong_mul")
        pid = server.proc.pid
        poisoned = grade("poison.py")
        crashed = grade("poison_crash.py")
        after, honest = grade("wrong_mul"), grade("tiny.py")
        assert server.proc.pid == pid  # one long-lived grader throughout
    finally:
        server.close()
    assert poisoned.status == "error" and "a fault of gradcheck" in poisoned.note
    assert "a fault of gradcheck's" in (tmp_path / "out" / "poison.py" / "grader.log").read_text()
    assert crashed.status == "crashed" and crashed.note == "exit status -11"
    # the bank, the key and the comparison are whole again for the next submission
    assert (before.status, before.score) == (after.status, after.score) == ("graded", 6.0)
    assert f"{after.score:g}/7" == fresh_score(subs / "wrong_mul", options)
    assert (honest.status, honest.score) == ("graded", 7.0)


def children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(child) for child in f.read().split()]
    return found


@pytest.mark.slow
def test_a_hung_grading_is_killed_and_the_server_goes_on_and_its_gradings_die_with_it(
        options, tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(ENGINES / "hang_import.py", subs / "hang_import.py")
    shutil.copy(ENGINES / "tiny.py", subs / "tiny.py")
    short = Options(**{**options.__dict__, "submission_timeout": 3})
    server = Server(short.command(), Running())
    try:
        hung = server.grade(subs / "hang_import.py", tmp_path / "hang", 7.0, short)
        assert (hung.status, hung.note) == ("timeout", "stopped after 3 s")
        assert server.grade(subs / "tiny.py", tmp_path / "tiny", 7.0, short).score == 7.0
        # the batch goes away while a grading hangs: the server kills it and exits
        rows = []
        thread = threading.Thread(target=lambda: rows.append(
            server.grade(subs / "hang_import.py", tmp_path / "gone", 7.0, options)))
        thread.start()
        deadline = time.monotonic() + 30
        # a child of the server may be one the first hung grading left, dead and not yet reaped
        while not (running := [pid for pid in children(server.proc.pid) if alive(pid)]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        grading, proc = running[0], server.proc
        proc.stdin.close()
        thread.join(timeout=30)
        assert gone_within(grading, 10) and proc.wait(timeout=10) in (0, -9)
        assert rows[0].status == "crashed" and "grader failed" in rows[0].note
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.kill()


def test_a_grading_after_the_slots_warm_up_makes_none_of_its_first_requests_again(
        tmp_path, monkeypatch):
    """A job slot builds, checks and packs once what every keyed grading asks whatever the
    engine answers (`grader.warm`): a grading after it checks only requests made from the
    engine's replies (the feedback of a failed check), and reports as a grading without the
    warm-up does."""
    from gradcheck.bank.loader import load_bank
    from gradcheck.engine import sandbox, wire
    from gradcheck.grading import answer_key
    from gradcheck.grading.grader import Grader, warm

    folder, key_path = keyed_bank(tmp_path)
    key = answer_key.load(key_path)

    def graded(bank):
        with Grader(ENGINES / "wrong_mul.py", seed=5, key=key.anew()) as grader:
            report = grader.grade_bank(bank, feedback_later=True)
            grader.give_feedback(report)
        return [(r.exercise_id, r.check, r.status, r.score, r.message) for r in report.results]

    cold = graded(load_bank(folder))
    bank = load_bank(folder)  # new exercise objects: nothing of the grading above is reused
    key.prepare(bank, None)
    warm(bank, key)
    checked, asked = [], []
    check, frame = wire.check_request, sandbox.frame
    monkeypatch.setattr(wire, "check_request", lambda r: checked.append(r) or check(r))
    monkeypatch.setattr(sandbox, "frame", lambda r: asked.append(r) or frame(r))
    assert graded(bank) == cold
    assert any(status == "failed" for *_, status, _, _ in cold)
    sealed = [r for r in asked if type(r) is wire.Sealed]
    assert len(sealed) > 10 and checked  # the failed check's feedback asks more
    assert not any(type(r) is wire.Sealed for r in checked)
