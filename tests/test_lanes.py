"""The grader's background threads (gradcheck.grading.oracle_threads): calls run in order, errors reach the caller,
and the threads that ran torch and jax never end while the process lives."""

from __future__ import annotations

import threading
import time

import pytest
from grading_samples import write_bank

from gradcheck.bank.loader import load_bank
from gradcheck.grading import oracle_threads
from gradcheck.grading.grader import Grader


def test_a_lane_runs_its_calls_in_order_and_hands_back_results_and_errors():
    lane = oracle_threads.lane("test-order")
    seen: list[int] = []
    futures = [lane.submit(seen.append, number) for number in range(50)]
    failed = lane.submit(int, "not a number")
    assert [future.result(timeout=10) for future in futures] == [None] * 50
    assert seen == list(range(50))
    with pytest.raises(ValueError, match="not a number"):
        failed.result(timeout=10)
    assert oracle_threads.lane("test-order") is lane


def test_a_call_cancelled_before_it_begins_never_runs():
    lane = oracle_threads.lane("test-cancel")
    started, release = threading.Event(), threading.Event()
    blocking = lane.submit(lambda: (started.set(), release.wait(10)))
    started.wait(10)
    ran: list[str] = []
    skipped = lane.submit(ran.append, "skipped")
    assert skipped.cancel() and not blocking.cancel()
    release.set()
    lane.submit(ran.append, "after").result(timeout=10)
    assert ran == ["after"] and blocking.result(timeout=10) == (None, True)


@pytest.mark.slow
def test_the_threads_that_ran_torch_and_jax_outlive_the_grader(tmp_path):
    """A thread that ran torch's autograd must not end before the process does: ending, it
    destroys its leftover graph nodes, and doing that while Python finalises aborts the process
    (see gradcheck.grading.oracle_threads). Live grading uses both threads; after close they are still alive,
    daemon threads, and no other thread of the grader is left."""
    before = set(threading.enumerate())
    with Grader("reference", seed=1, timeout=120) as grader:
        report = grader.grade_bank(load_bank(write_bank(tmp_path / "bank")))
    assert {result.status for result in report.results} == {"passed"}
    deadline = time.monotonic() + 10
    while {t for t in threading.enumerate() if not t.daemon} - before and (
            time.monotonic() < deadline):
        time.sleep(0.05)  # the worker's reader threads, if any, finish after close
    left = set(threading.enumerate()) - before
    assert all(thread.daemon for thread in left)
    for name in ("gradcheck-oracles", "gradcheck-jax"):
        thread = oracle_threads.lane(name).thread
        assert thread.is_alive() and thread.daemon and thread.name == name
