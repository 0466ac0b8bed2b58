"""`gradcheck grade --watch`, for real: a gradcheck process watching an engine file, the file
edited, what changed and then the new report read from its output; bounded in time."""

import argparse
import gc
import io
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import pytest
from grading_samples import CUBE, PRODUCT, write_fd_bank
from processes import gradcheck_command

from gradcheck.bank.loader import load_bank
from gradcheck.grading import localise
from gradcheck.grading.grader import Grader
from gradcheck.grading.results import CheckResult, GradeReport
from gradcheck.bank.selection import Selection
from gradcheck.engine import sandbox
from gradcheck.engine.sandbox import Worker
from gradcheck.watch import (EMPTIED, SETTLE, _precompile, _prestart, _snapshot, _wait_for_change,
                             changes, settle)

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


def test_what_is_loaded_before_the_saves_is_out_of_the_collectors_reach():
    """`settle` (before the watch waits for the first save): a full collection in a grading
    walks none of what was loaded (torch, jax, the bank, the key), only what came after, and
    the garbage of the start is gone. The test's process is given its collector back."""
    loaded, garbage = [[] for _ in range(3)], argparse.Namespace()
    garbage.itself = garbage  # a cycle: only the collector frees it
    dropped = weakref.ref(garbage)
    del garbage
    try:
        settle()
        assert dropped() is None
        assert not any(o is loaded for o in gc.get_objects())
        later = [[]]
        assert any(o is later for o in gc.get_objects())
    finally:
        gc.unfreeze()
    assert any(o is loaded for o in gc.get_objects())


def test_the_watch_decodes_its_keys_answers_before_the_first_save(tmp_path, monkeypatch):
    """The first save's grading finds the key's answers decoded and the oracles' agreement on
    them worked out (`Key.prepare`), as every later save does: that work (0.1 s on the bundled
    bank) is done while the watch waits, not after the first save."""
    from grading_samples import keyed_bank

    from gradcheck import watch
    from gradcheck.grading import answer_key

    bank, key = keyed_bank(tmp_path)
    seen = []

    def grade(bank, seed, key, scored):
        if not isinstance(key, answer_key.Key):  # the first grading, given --key's path
            return GradeReport("reference", 5)
        seen.append((len(key._decoded), len(key._own)))
        raise KeyboardInterrupt  # (the watch's own way out)

    monkeypatch.setattr(watch, "settle", lambda: None)  # the test's collector stays its own
    monkeypatch.setattr(watch, "_prestart", lambda args, bank: None)
    monkeypatch.setattr(watch, "_wait_for_change", lambda submission, chosen, seen, changing: (seen, set()))
    args = argparse.Namespace(submission="reference", seed=5, key=str(key), oracles=None,
                              strict=False)
    chosen = Selection([bank])
    with pytest.raises(KeyboardInterrupt):
        watch.run(args, chosen.load(), chosen, grade, out=io.StringIO())
    decoded, agreements = seen[0]
    assert decoded > 0 and agreements > 0


FEEDBACK_IMPORTS = """
import json, sys
from gradcheck import watch
from gradcheck.bank.loader import load_bank
from gradcheck.grading import answer_key
from gradcheck.grading.grader import Grader
key = sys.argv[1]
if sys.argv[4] == "warm":
    watch.warm_up(key, None)
bank = load_bank(sys.argv[2])
with Grader(sys.argv[3], key=answer_key.load(key), seed=3) as grader:
    report = grader.grade_bank(bank, feedback_later=True, every_score_first=True)
    loaded = set(sys.modules)
    grader.give_feedback(report)
print(json.dumps({"imported": sorted(set(sys.modules) - loaded),
                  "shrunk": [r.message for r in report.results if r.check == "random_programs"]}))
"""


@pytest.mark.parametrize("warm", [False, True])
def test_the_watch_loads_what_a_failing_saves_feedback_needs_before_the_first_save(
        tmp_path, warm):
    """`watch.warm_up`: the feedback of a failed random-programs check (its shrinking) imports
    nothing; without it, the first failing save imported hypothesis's strategies then (0.2 s,
    and a full collection of what they made: BENCHMARKS.md)."""
    from gradcheck.bank.bundled import bank_dir
    from gradcheck.grading import answer_key

    exercise = bank_dir() / "02-backward" / "mixed-arithmetic.exercise.yaml"
    answer_key.build(load_bank(exercise), 3, tmp_path / "key.json")
    engine = Path(__file__).parent / "engines" / "wrong_mul.py"
    run = subprocess.run([sys.executable, "-c", FEEDBACK_IMPORTS, str(tmp_path / "key.json"),
                          str(exercise), str(engine), "warm" if warm else "cold"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert "smallest" in seen["shrunk"][0]  # the finding was shrunk, in the feedback
    if warm:
        assert seen["imported"] == []
    else:
        assert "hypothesis" in seen["imported"]


def test_feedback_worked_out_after_the_scores_is_the_feedback_given_at_once(tmp_path):
    """`grade_bank(feedback_later=True, every_score_first=True)`, as the watch grades: the same
    scores at once, the plain comparison until `give_feedback`, then the same messages and walk
    as in one go."""
    bank = load_bank(write_fd_bank(tmp_path / "bank"))
    engine = tmp_path / "engine.py"
    engine.write_text(mutant.source("mul"))
    with Grader(engine, seed=3, oracles=["fd"]) as grader:
        at_once = grader.grade_bank(bank)
    with Grader(engine, seed=3, oracles=["fd"]) as grader:
        later = grader.grade_bank(bank, feedback_later=True, every_score_first=True)
        assert [(r.name, r.status, r.score) for r in later.results] == [
            (r.name, r.status, r.score) for r in at_once.results]
        failed = next(r for r in later.results if r.status == "failed")
        assert "the backward of" not in failed.message and failed.detail == {}
        grader.give_feedback(later)
    assert "the backward of `x * y` (MulBackward0)" in failed.message
    assert [(r.message, r.detail) for r in later.results] == [
        (r.message, r.detail) for r in at_once.results]


@pytest.mark.parametrize("fault", ["raises", "malformed request"])
def test_a_fault_of_gradcheck_in_one_walk_costs_only_that_feedback(tmp_path, monkeypatch, fault):
    """The walks go in rounds (`Grader._in_rounds`): the first, which meets a fault of
    gradcheck's, in the walk or in the request it asks, leaves its check the plain comparison
    and the traceback for the author; the next walk gives what it gives in one go."""
    folder = write_fd_bank(tmp_path / "bank")
    (folder / "sum.exercise.yaml").write_text(  # a second product to walk
        (folder / "product.exercise.yaml").read_text().replace("id: product", "id: sum")
        .replace("f = x * y", "f = x * y + y"))
    bank = load_bank(folder)
    engine = tmp_path / "engine.py"
    engine.write_text(mutant.source("mul"))
    with Grader(engine, seed=3, oracles=["fd"]) as grader:
        at_once = grader.grade_bank(bank)
    alone_request, faults = localise.alone_request, []

    def faulty(w, nodes):
        if faults:
            return alone_request(w, nodes)
        faults.append(fault)
        if fault == "raises":
            raise RuntimeError("a fault of gradcheck's")
        return {"kind": "behaviour"}  # refused by the sandbox: RequestError

    monkeypatch.setattr(localise, "alone_request", faulty)
    with Grader(engine, seed=3, oracles=["fd"]) as grader:
        later = grader.grade_bank(bank, feedback_later=True)
        grader.give_feedback(later)
    noted = [r for r in later.results if r.author_notes and "Traceback" in r.author_notes[-1]]
    assert len(noted) == 1 and "the backward of" not in noted[0].message
    walked = [(r.message, r.detail) for r in later.results if r is not noted[0]]
    assert sum("the backward of" in message for message, _ in walked) >= 1
    assert walked == [(r.message, r.detail) for r in at_once.results
                      if (r.exercise_id, r.check) != (noted[0].exercise_id, noted[0].check)]


def test_the_interpreters_started_ahead_parse_no_hidden_exercise(tmp_path):
    """Any interpreter the watch starts ahead may become the worker of the exercises whose
    details are shown: it is given their programs to parse, never a hidden exercise's."""
    bank = tmp_path / "bank"
    bank.mkdir()
    (bank / "product.exercise.yaml").write_text(PRODUCT)
    (bank / "secret-cube.exercise.yaml").write_text(CUBE)
    seen = tmp_path / "seen"
    submission = tmp_path / "engine.py"
    submission.write_text(
        "import sys\nfrom gradcheck.program import language\n"
        f"open({str(seen)!r}, 'w').write(repr(sorted(k[0] for k in language._KNOWN)))\n"
        f"sys.path.append({str(Path(__file__).parent / 'engines')!r})\nfrom tiny import *\n")
    _prestart(argparse.Namespace(worker_user=None, worker_python=None), load_bank(bank))
    try:
        assert len(sandbox._SPARES) == 4  # two sides, each for the scores and the feedback
        for _ in range(4):  # every one of them
            with Worker(submission, import_timeout=10) as worker:
                worker.request({"kind": "inspect"}, timeout=10)
            assert seen.read_text() == repr(["f = x * y\n"])
    finally:
        sandbox.discard_spares()
    assert sandbox._SPARES == []


def test_the_interpreters_started_ahead_compile_a_save_and_run_only_what_is_saved(tmp_path):
    """While a save settles, the interpreters started ahead compile the submission's files
    (`watch._precompile`): a worker whose files are still those bytes imports them compiled, its
    helper module too; a file saved again after that is compiled anew, and what runs is what is
    saved. Nothing of the submission runs before a worker's start, and a FIFO among its files
    holds nothing up."""
    package = tmp_path / "engine"
    package.mkdir()
    ran = tmp_path / "ran"
    (package / "__init__.py").write_text(
        f"from .helper import NAME\nopen({str(ran)!r}, 'a').write(NAME)\n"
        f"import sys\nsys.path.append({str(Path(__file__).parent / 'engines')!r})\n"
        "from tiny import *\n")
    (package / "helper.py").write_text("NAME = 'first'\n")
    os.mkfifo(package / "pipe.py")  # never imported; opened, it would wait for a writer
    options = argparse.Namespace(worker_user=None, worker_python=None)
    try:
        for saved, helper, compiled in (("first", None, 2), ("second", "NAME = 'second'\n", 1)):
            sandbox.prestart(1)
            time.sleep(2.0)  # started: it compiles as soon as it is told
            _wait_for_change(package, Selection([]), {}, lambda: _precompile(options, package))
            time.sleep(1.0)  # two small files compiled
            if helper is not None:  # saved again once compiled ahead
                (package / "helper.py").write_text(helper)
            assert not ran.exists()  # compiled, not run
            with Worker(package, import_timeout=10) as worker:
                reply = worker.request({"kind": "inspect"}, timeout=10)
                assert isinstance(reply, dict) and worker.precompiled == compiled
            assert ran.read_text() == saved
            ran.unlink()
    finally:
        sandbox.discard_spares()


@pytest.mark.parametrize("edited", ["engine.py", "bank/product.exercise.yaml", "helper.py"])
def test_a_save_of_the_submission_or_of_an_exercise_is_seen_and_named(tmp_path, edited):
    """The submission's files are looked at every POLL, the exercise files less often: a save
    of either (or a new file of the submission's) ends the wait, naming what changed."""
    bank = write_fd_bank(tmp_path / "bank")
    submission = tmp_path / "engine.py"
    submission.write_text("x = 1\n")
    folder = tmp_path if edited == "helper.py" else submission  # a package folder, or a file
    chosen = Selection([bank])
    seen = _snapshot(folder, chosen)
    target = tmp_path / edited
    threading.Timer(0.3, lambda: target.write_text(
        (target.read_text() if target.exists() else "") + "\n")).start()
    started = time.monotonic()
    now, changed = _wait_for_change(folder, chosen, seen)
    assert changed == {target} and now == _snapshot(folder, chosen)
    assert time.monotonic() - started < 5


def test_a_save_in_place_is_graded_once_written_not_while_the_file_is_empty(tmp_path):
    """An editor that saves in place truncates the file, then writes it; on a busy machine the
    write may come well after SETTLE. The wait ends with the file written, not emptied; a file
    that stays empty is graded as it is, after EMPTIED."""
    bank = write_fd_bank(tmp_path / "bank")
    submission = tmp_path / "engine.py"
    submission.write_text("x = 1\n")
    chosen = Selection([bank])
    seen = _snapshot(submission, chosen)
    threading.Timer(0.2, lambda: submission.write_text("")).start()
    threading.Timer(0.2 + 10 * SETTLE, lambda: submission.write_text("x = 2\n")).start()
    now, changed = _wait_for_change(submission, chosen, seen)
    assert changed == {submission} and now[submission][1] == len("x = 2\n")
    submission.write_text("")
    started = time.monotonic()
    now, changed = _wait_for_change(submission, chosen, now)
    assert changed == {submission} and now[submission][1] == 0
    assert EMPTIED <= time.monotonic() - started < EMPTIED + 5


@pytest.mark.slow  # torch is imported first, once: a few seconds
def test_an_edit_is_graded_again_in_the_same_process(tmp_path):
    bank = write_fd_bank(tmp_path / "bank")
    engine = tmp_path / "engine.py"
    engine.write_text(mutant.source("mul"))  # x * y gets the wrong gradient: product fails
    process = subprocess.Popen(
        gradcheck_command("grade", "engine.py", "--exercises", str(bank), "--oracles", "fd",
                          "--watch"), cwd=tmp_path, stdout=subprocess.PIPE,
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
        assert time.monotonic() - started < 30
        # the change in points first, then the report, its feedback (the walk's finding) in
        scored = next(i for i, line in enumerate(worse) if line.startswith("(scored "))
        assert "-2 points: product now fails" in worse[:scored]
        report = "\n".join(worse[scored:])
        assert "the backward of `x * y` (MulBackward0) passed 1.5 to x" in report
        assert worse[-2].startswith("(graded ")
    finally:
        process.send_signal(signal.SIGINT)
        try:
            assert process.wait(timeout=20) == 130  # Ctrl-C ends the watch as any command
        finally:
            process.kill()
