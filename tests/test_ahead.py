"""The helper process that draws the sampled points and runs jax ahead of live grading: the same
points and results as the grader's own process, and nothing lost when it fails."""

import dataclasses
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from grading_samples import PRODUCT, write_bank
from processes import alive, gone_within

from gradcheck.bank.loader import load_bank
from gradcheck.grading import helper_process
from gradcheck.grading.grader import Grader
from gradcheck.grading.plan import GRADIENT_CHECKS
from gradcheck.grading.plan import jax_modules, sample_seed
from gradcheck.oracles import jax_grad, job

SEED = 5


@pytest.fixture(scope="module")
def bank(tmp_path_factory):
    folder = write_bank(tmp_path_factory.mktemp("ahead") / "bank")
    (folder / "product.exercise.yaml").write_text(PRODUCT)
    return load_bank(folder)


def _checks(bank):
    """Every gradient check of the bank as the grader gives it to the helper."""
    checks = []
    for number, exercise in enumerate(bank.exercises):
        for name in exercise.checks.present():
            if name in GRADIENT_CHECKS:
                points = (exercise.sampling(sample_seed(SEED, exercise.id)) if name == "sampled"
                          else exercise.check_points(name))
                checks.append((number, helper_process.Check(exercise.program,
                                                   tuple(exercise.grad_names), points)))
    return jax_modules(checks)


def test_the_helper_sends_the_points_and_jax_results_this_process_computes(bank):
    modules = _checks(bank)
    helper = helper_process.Helper(modules)
    try:
        checks = [check for module in modules for check in module]
        drawn = [c.points.draw() if isinstance(c.points, helper_process.Sampling) else c.points
                 for c in checks]
        assert [f.result(timeout=120) for f in helper.points] == drawn
        assert any(isinstance(c.points, helper_process.Sampling) for c in checks)
        start = 0
        for module, future in zip(modules, helper.results):
            points = drawn[start:start + len(module)]
            start += len(module)
            here = jax_grad.run_many([job(c.program, p, c.requires_grad)
                                      for c, p in zip(module, points)])
            for sent, computed in zip(future.result(timeout=120), here):
                np.testing.assert_array_equal(sent.value, computed.value)
                assert sent.grads.keys() == computed.grads.keys()
                for name in computed.grads:
                    np.testing.assert_array_equal(sent.grads[name], computed.grads[name])
    finally:
        helper.close()


def test_a_draw_that_fails_costs_only_its_check_and_its_module(bank):
    modules = _checks(bank)
    sampled = next(c for module in modules for c in module if isinstance(c.points, helper_process.Sampling))
    broken = dataclasses.replace(sampled, points=dataclasses.replace(sampled.points, margin=10.0))
    helper = helper_process.Helper([[broken], modules[0]])
    try:
        with pytest.raises(helper_process.HelperError, match="ValueError: the domain"):
            helper.points[0].result(timeout=120)
        with pytest.raises(helper_process.HelperError, match="could not be drawn"):
            helper.results[0].result(timeout=120)
        assert len(helper.results[1].result(timeout=120)) == len(modules[0])
    finally:
        helper.close()


def test_a_helper_that_dies_fails_every_result_it_had_not_sent(bank):
    helper = helper_process.Helper(_checks(bank))
    helper._proc.kill()
    helper.close()
    for future in [*helper.points, *helper.results]:
        assert future.done()
        if future.exception() is not None:
            assert isinstance(future.exception(), helper_process.HelperError)
    assert any(future.exception() is not None for future in helper.results)


def test_a_prestarted_helper_is_the_one_the_next_helper_takes(bank, monkeypatch):
    monkeypatch.setattr(helper_process, "available", lambda: True)
    helper_process.prestart()
    helper_process.prestart()  # one spare at a time
    assert len(helper_process._SPARE) == 1
    spare = helper_process._SPARE[0].pid
    modules = _checks(bank)
    helper = helper_process.Helper(modules)
    try:
        assert helper._proc.pid == spare and not helper_process._SPARE
        assert len(helper.results[0].result(timeout=120)) == len(modules[0])
    finally:
        helper.close()


@pytest.mark.parametrize("oracles", [["fd", "torch"], None])
def test_a_spare_helper_nobody_needs_is_stopped(bank, monkeypatch, oracles):
    """After a prestart, a grading that jax has no part in, or one that runs jax in its own
    process (which has jax imported, as this test session has), stops the spare."""
    monkeypatch.setattr(helper_process, "available", lambda: True)
    helper_process.prestart()
    spare = helper_process._SPARE[0].pid
    monkeypatch.setattr(helper_process, "available", lambda: False)
    with Grader("reference", seed=SEED, oracles=oracles) as grader:
        grader.grade_bank(bank)
        assert grader._helper is None
    assert not helper_process._SPARE and gone_within(spare, 10)


def test_grade_stops_its_spare_helper_when_it_cannot_grade(bank, monkeypatch, tmp_path):
    from gradcheck.grading.grader import GraderError, grade

    monkeypatch.setattr(helper_process, "available", lambda: True)
    started, spawn = [], helper_process._spawn

    def spawn_and_remember():
        started.append(spawn())
        return started[-1]

    monkeypatch.setattr(helper_process, "_spawn", spawn_and_remember)
    with pytest.raises(GraderError, match="no submission at"):
        grade(tmp_path / "missing.py", bank.exercises[0].path.parent)
    assert len(started) == 1 and not helper_process._SPARE and gone_within(started[0].pid, 10)


def test_a_spare_helper_whose_grader_finishes_exits_by_itself():
    spare = helper_process._spawn()
    spare.stdin.close()  # as when its grader's process ends without giving it work
    assert spare.wait(timeout=120) == 0
    spare.stdout.close()


def _grade(bank, monkeypatch, helper: bool):
    monkeypatch.setattr(helper_process, "available", lambda: helper)
    with Grader("reference", seed=SEED) as grader:
        report = grader.grade_bank(bank)
        started = grader._helper is not None
    return started, [(r.exercise_id, r.check, r.status, r.score, r.message)
                     for r in report.results]


def test_grading_with_the_helper_gives_the_report_of_grading_without_it(bank, monkeypatch):
    with_helper, without = _grade(bank, monkeypatch, True), _grade(bank, monkeypatch, False)
    assert with_helper[0] and not without[0]
    assert with_helper[1] == without[1]
    assert all(status == "passed" for _, _, status, _, _ in with_helper[1])


def test_a_helper_too_slow_to_answer_is_stopped_and_its_work_done_here(bank, monkeypatch):
    monkeypatch.setattr(helper_process, "PATIENCE", 0.001)  # less than the helper takes to start
    impatient = _grade(bank, monkeypatch, True)
    assert impatient[0] and impatient[1] == _grade(bank, monkeypatch, False)[1]


def test_the_helper_dies_with_the_grader(tmp_path):
    """A helper still waiting for its work is killed with the grader that started it, not left
    behind: the test holds the helper's standard input open, so only the grader's death can end
    it."""
    read, write = os.pipe()
    grader = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""\
            import os, subprocess, sys, time
            helper = subprocess.Popen([sys.executable, "-m", "gradcheck.grading.helper_process",
                                       str(os.getpid())], stdin={read}, pass_fds=({read},))
            print(helper.pid, flush=True)
            time.sleep(600)
            """)], stdout=subprocess.PIPE, text=True, pass_fds=(read,))
    os.close(read)
    try:
        helper = int(grader.stdout.readline())
        time.sleep(1.0)  # the helper is importing, then waits for its work on the open pipe
        assert alive(helper)
        grader.kill()
        grader.wait()
        assert gone_within(helper, 10)
    finally:
        os.close(write)
        grader.kill()
