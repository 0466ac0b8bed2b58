"""The worker sandbox with real subprocess workers and real misbehaving engines (tests/engines/).

Each fault loses only the request it happened in, is named in plain words, leaves no process
behind, and the next request gets a fresh worker. Correct answers come from torch, live.
"""

import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy.testing
import pytest
from processes import alive, gone_within

from gradcheck.engine import census, handler, sandbox, torch_engine, wire
from gradcheck.engine.worker import MODULE, own_name
from gradcheck.engine.sandbox import Failure, Worker
from gradcheck.program.language import parse

#: what inspect reports of a scalar test engine: no 1-D tensors, no higher-order protocol
SCALAR_ONLY = ["select", "create_graph", "grad()"]

ENGINES = Path(__file__).parent / "engines"
MUL_EXP = parse("z = x * y + x.exp()", {"x": None, "y": None}).spec()
ADD_EXP = parse("z = x + y + x.exp()", {"x": None, "y": None}).spec()
POINTS = [{"x": 1.0, "y": 2.0}, {"x": -0.5, "y": 3.0}]
INSPECT = {"kind": "inspect"}


def gradients(spec: dict) -> dict:
    return {"kind": "gradients", "program": spec, "points": POINTS, "requires_grad": ["x", "y"]}


def torch_reply(request: dict) -> dict:
    """torch's answer, in the grader's process, through the same probe."""
    return handler.handle(torch_engine, request)


def worker(name: str, **limits) -> Worker:
    options = {"import_timeout": 3, "memory_mb": 256, "max_tasks": 32, **limits}
    return Worker(ENGINES / f"{name}.py", **options)


def test_a_correct_engine_answers_what_torch_answers():
    with worker("tiny") as w:
        for spec in (MUL_EXP, ADD_EXP):
            reply = w.request(gradients(spec), timeout=5)
            expected = torch_reply(gradients(spec))
            for got, want in zip(reply["results"], expected["results"]):
                assert got["error"] is None
                assert got["value"] == pytest.approx(want["value"], rel=1e-12)
                assert got["grads"] == pytest.approx(want["grads"], rel=1e-12)
        assert w.starts == 1  # one worker answered every request


def test_a_package_is_imported_with_its_relative_imports():
    with Worker(ENGINES / "packaged") as w:
        reply = w.request(gradients(ADD_EXP), timeout=5)
    for got, want in zip(reply["results"], torch_reply(gradients(ADD_EXP))["results"]):
        assert got["grads"] == pytest.approx(want["grads"], rel=1e-12)


FAULTS = [
    # engine, extra Worker options, timeout, kind, message
    ("hang_forward", {}, 2, "timeout", "timed out after 2 s in the forward pass"),
    ("hang_backward", {}, 2, "timeout", "timed out after 2 s in backward()"),
    ("os_exit", {}, 5, "exit", "the engine exited with code 3 in backward()"),
    ("sys_exit", {}, 5, "exit", "the engine called sys.exit(3) in backward()"),
    ("keyboard_interrupt", {}, 5, "raised", "the engine raised KeyboardInterrupt in backward()"),
    ("base_exception", {}, 5, "raised", "the engine raised Escape in the forward pass"),
    ("segfault", {}, 5, "signal", "the engine crashed with signal SIGSEGV in backward()"),
    ("memory_hog", {}, 10, "memory", "the engine ran out of memory (limit 256 MB) in backward()"),
    ("memory_hog_shared", {}, 10, "memory",
     "the engine ran out of memory (limit 256 MB) in backward()"),
    ("output_flood", {}, 10, "output", "the engine printed more than 1 MB in backward()"),
    ("fork_flood", {}, 10, "tasks", "the engine started more than 32 processes or threads"),
    ("thread_flood", {"memory_mb": 1024}, 10, "tasks",
     "the engine started more than 32 processes or threads in the forward pass"),
    ("forge", {}, 5, "protocol", "the engine sent a malformed reply"),
    ("garbage", {}, 5, "protocol",
     "the engine wrote garbage to the grader's channel in backward()"),
]


@pytest.fixture
def zygote():
    made = sandbox.Zygote()
    yield made
    made.close()


def forked(w: Worker) -> bool:
    """Whether w's running process was forked by a zygote, and is this process's child."""
    return isinstance(w._proc, sandbox._Forked) and int(
        Path(f"/proc/{w.pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid()


@pytest.mark.parametrize("mode", ["", "next sent ahead", "forked by a zygote"])
@pytest.mark.parametrize("name, options, timeout, kind, message", FAULTS,
                         ids=[fault[0] for fault in FAULTS])
def test_a_fault_loses_only_its_request_and_is_named(name, options, timeout, kind, message,
                                                      mode, zygote):
    """Each fault, named; also when the next request was sent with the faulty one, and when
    the worker was forked by a zygote (the restart too)."""
    by_zygote = {"zygote": zygote} if mode == "forked by a zygote" else {}
    with worker(name, **options, **by_zygote) as w:
        assert w.request(INSPECT, timeout=5)["missing"] == SCALAR_ONLY
        first = w.pid
        assert forked(w) == bool(by_zygote)
        start = time.monotonic()
        failure = w.request(gradients(MUL_EXP), timeout=timeout,
                            then=[gradients(ADD_EXP)] * 2 if mode == "next sent ahead" else ())
        elapsed = time.monotonic() - start
        assert isinstance(failure, Failure)
        assert (failure.kind, failure.message[:len(message)]) == (kind, message)
        assert elapsed < (timeout + 2 if kind == "timeout" else 3)
        assert running(w) == []  # nothing of the old worker survives
        assert w.request(INSPECT, timeout=5)["missing"] == SCALAR_ONLY
        assert w.starts == 2 and w.pid != first and forked(w) == bool(by_zygote)


def test_requests_sent_ahead_are_answered_as_if_sent_in_their_turn():
    """`then`: the next requests go with this one, as many as a quarter of the channel's send
    buffer holds; each reply is the one it gets in its turn, asked as the same object or as one
    built alike, and a later call's `then` sends only those not sent yet. Another request
    first drops them all (counted in `unasked`, as are those still waiting when the worker is
    closed); one too large to send ahead goes in its turn."""
    mul, add = gradients(MUL_EXP), gradients(ADD_EXP)
    many = {**add, "points": POINTS * 20000}
    with worker("tiny") as w:
        w.request(INSPECT, timeout=5)
        assert len(json.dumps(many)) > w.ahead_bytes >= 48 << 10  # a vector request fits
        assert w.request(mul, timeout=5, then=[add, mul, add]) == torch_reply(mul)
        assert len(w._ahead) == 3
        assert w.request(dict(add), timeout=5, then=[mul, add, INSPECT]) == torch_reply(add)
        assert len(w._ahead) == 3  # INSPECT only was sent
        for asked in (mul, add):
            assert w.request(asked, timeout=5) == torch_reply(asked)
        assert w.request(INSPECT, timeout=5)["missing"] == SCALAR_ONLY
        assert w.request(mul, timeout=5, then=[many, add]) == torch_reply(mul)
        assert len(w._ahead) == 0  # in order: not the one after it either
        assert w.request(many, timeout=5) == torch_reply(many)
        assert w.unasked == 0
        w.request(mul, timeout=5, then=itertools.repeat(add))
        size = sum(len(frame) for frame, _ in w._ahead)  # as many as fit, no more
        assert sandbox._cost(size) <= w.ahead_bytes < sandbox._cost(size + len(w._ahead[0][0]))
        filled = len(w._ahead)
        assert w.request(mul, timeout=5, then=[INSPECT, add, INSPECT]) == torch_reply(mul)
        assert w.unasked == filled  # not sent ahead: every reply before it is dropped
        # a check's time ran out: those sent ahead for it are dropped, up to the next one asked
        assert w.request(add, timeout=5) == torch_reply(add) and w.unasked == filled + 1
        assert w.request(INSPECT, timeout=5)["missing"] == SCALAR_ONLY and not w._ahead
        assert w.unasked == filled + 1
        w.request(mul, timeout=5, then=[add, INSPECT])
        assert w.starts == 1
    assert w.unasked == filled + 3  # still sent ahead when it was closed


def test_replies_that_came_together_are_polled_once_unless_a_poll_is_due():
    """The worker's limits are polled after a reply the grader read from the channel; the
    replies read with it were sent before that poll, which saw the worker after them, so they
    are polled again only once POLL s have passed since the last poll."""
    mul, add = gradients(MUL_EXP), gradients(ADD_EXP)
    with worker("tiny") as w:
        w.request(INSPECT, timeout=5)
        polls = []
        poll = w._over_limits
        w._over_limits = lambda: polls.append(time.monotonic()) or poll()
        for pause in (0.0, sandbox.POLL):
            assert w.request(mul, timeout=5, then=[add] * 10) == torch_reply(mul)
            time.sleep(1.0)  # the worker answers the ten meanwhile: one read brings them all
            polls.clear()
            started = time.monotonic()
            for _ in range(10):
                time.sleep(pause)
                assert w.request(add, timeout=5) == torch_reply(add)
            # the first read is polled; then only a due poll (all ten, a poll apart)
            assert polls and polls[0] - started < sandbox.POLL + pause
            assert all(b - a >= sandbox.POLL for a, b in zip(polls, polls[1:]))
            assert len(polls) == 10 if pause else len(polls) < 10


def test_a_submission_that_cannot_be_imported_gets_its_traceback_every_time():
    with worker("import_error") as w:
        failure = w.request(gradients(MUL_EXP), timeout=5)
        assert failure.kind == "import"
        assert failure.message == ("the submission could not be imported: ValueError: the "
                                   "table of derivatives is empty")
        assert failure.detail.startswith("Traceback (most recent call last):\n  File \"")
        assert 'import_error.py", line 9, in _load_table' in failure.detail
        # the worker's own frames are left out: every frame is the submission's (whatever folder
        # the checkout lies in, which may well be named gradcheck)
        frames = re.findall(r'^  File "([^"]+)", line', failure.detail, re.M)
        assert frames and {Path(frame).name for frame in frames} == {"import_error.py"}
        assert w.request(INSPECT, timeout=5) == failure
        assert w.starts == 1  # not retried


def test_a_syntax_error_is_an_import_failure_with_its_line():
    with worker("syntax_error") as w:
        failure = w.request(INSPECT, timeout=5)
        assert failure.kind == "import"
        assert failure.message.startswith("the submission could not be imported: SyntaxError:")
        assert 'syntax_error.py", line 4' in failure.detail


def test_a_hang_in_import_times_out_once():
    with worker("hang_import", import_timeout=2) as w:
        start = time.monotonic()
        failure = w.request(INSPECT, timeout=5)
        assert failure.message == "timed out after 2 s while importing the submission"
        assert w.request(INSPECT, timeout=5) is failure
        assert time.monotonic() - start < 4


def test_a_missing_file_is_an_import_failure():
    with Worker(ENGINES / "no_such_engine.py") as w:
        failure = w.request(INSPECT, timeout=5)
        assert failure.kind == "import"
        assert "no_such_engine.py is not a .py file" in failure.message


def test_output_is_captured_per_request_and_kept():
    with worker("chatty") as w:
        for _ in range(3):
            assert w.request(gradients(ADD_EXP), timeout=5)["results"][0]["error"] is None
        assert w.output == "\n".join(["--- stdout ---\n" + "backward called\n" * 6,
                                      "--- stderr ---\n" + "a word on stderr\n" * 6])
        assert w.dropped == 0


def test_an_output_flood_is_truncated_and_counted():
    with worker("output_flood", keep_output=1000) as w:
        w.request(gradients(ADD_EXP), timeout=10)
        assert w.output.startswith("--- stdout ---\nflood flood")
        assert len(w.output) < 2200
        assert w.dropped > 1_000_000
        assert f"[gradcheck dropped {w.dropped} more bytes of output]" in w.output


def test_the_cpu_limit_stops_a_spinning_worker():
    with worker("hang_forward", cpu_seconds=1) as w:
        failure = w.request(gradients(ADD_EXP), timeout=20)
        assert failure.kind == "cpu"
        assert failure.message == "the engine used more than 1 s of CPU time in the forward pass"


def test_an_engines_values_are_plain_floats_whatever_the_floats_claim():
    with worker("lying_floats") as w:
        reply = w.request(gradients(MUL_EXP), timeout=5)
    truth = torch_reply(gradients(MUL_EXP))
    for got, want in zip(reply["results"], truth["results"]):
        assert type(got["value"]) is float
        assert got["value"] == want["value"] + 1.0  # what the float stores, not what it claims
        assert got["grads"]["x"] != want["grads"]["x"]


def test_a_grad_left_as_a_string_is_a_protocol_error():
    with worker("string_grads") as w:
        result = w.request(gradients(MUL_EXP), timeout=5)["results"][0]
    assert result["grads"] == {"x": None, "y": None}
    assert result["error"]["type"] == "ProtocolError"
    assert result["error"]["message"].startswith("backward left x.grad as a str")
    assert result["error"]["phase"] == "read"


def test_a_raising_tolist_is_an_error_of_the_point():
    with worker("tolist_raises") as w:
        result = w.request(gradients(MUL_EXP), timeout=5)["results"][0]
    # the record names the use that failed: tolist() of the output (node 4), which it has
    assert result["error"] == {"type": "ValueError",
                               "kinds": ["ValueError", "Exception", "BaseException"],
                               "message": "no list for you", "phase": "read", "piece": "tolist",
                               "node": 4, "absent": False}


def test_a_wrong_derivative_shows_only_where_it_is_used():
    with worker("wrong_mul") as w:
        wrong = w.request(gradients(MUL_EXP), timeout=5)["results"]
        right = w.request(gradients(ADD_EXP), timeout=5)["results"]
    expected = torch_reply(gradients(ADD_EXP))["results"]
    assert len(right) == len(expected)
    for got, want in zip(right, expected):  # approx takes a mapping of numbers, not a list of them
        assert got["grads"] == pytest.approx(want["grads"], rel=1e-12)
    truth = torch_reply(gradients(MUL_EXP))["results"]
    assert [r["grads"]["y"] for r in wrong] != pytest.approx([r["grads"]["y"] for r in truth])


def test_a_missing_operation_is_named_and_costs_only_programs_that_use_it():
    uses_tanh = parse("z = x.tanh() + y", {"x": None, "y": None}).spec()
    with worker("no_tanh") as w:
        inspected = w.request(INSPECT, timeout=5)
        assert inspected["missing"] == ["tanh", *SCALAR_ONLY]
        assert inspected["details"]["tanh"] == "tensors made by tensor(1.0) have no tanh"
        failed = w.request(gradients(uses_tanh), timeout=5)["results"][0]["error"]
        assert (failed["type"], failed["phase"]) == ("AttributeError", "forward")
        assert all(r["error"] is None for r in w.request(gradients(ADD_EXP), timeout=5)["results"])


def test_monkeypatching_comparison_helpers_in_the_worker_changes_nothing_here():
    with worker("monkeypatch") as w:
        got = w.request(gradients(MUL_EXP), timeout=5)["results"][0]["grads"]["x"]
    want = torch_reply(gradients(MUL_EXP))["results"][0]["grads"]["x"]
    assert got == 2 * want  # the worker sends what the engine computed
    assert not math.isclose(got, want)
    with pytest.raises(AssertionError):
        numpy.testing.assert_allclose(got, want)
    assert got != pytest.approx(want)
    assert abs(-1.0) == 1.0


def test_a_submission_is_imported_under_its_own_name_unless_another_module_has_it():
    assert own_name("/course/alice/engine.py") == "engine"
    assert own_name("/course/alice/mypkg") == "mypkg"
    # a standard or installed module keeps its name; a file name that is no module name
    for taken in ("random.py", "numpy.py", "gradcheck", "my-engine.py", "2024_engine.py"):
        assert own_name(f"/course/alice/{taken}") == MODULE


def test_the_worker_sees_a_minimal_world():
    with worker("env_report") as w:
        w.request(INSPECT, timeout=5)
        home = w._home
        report = __import__("json").loads(w.output.splitlines()[1])
    assert report["cwd"] == str(home)
    assert report["env"] == ["HOME", "LANG", "PATH", "PYTHONHASHSEED", "TMPDIR"]
    assert report["path"][-1] == str(ENGINES)  # helpers beside it import; it shadows nothing
    assert str(ENGINES) not in report["path"][:-1]
    assert report["hash_randomization"] == 0
    assert report["stdin"] == ""
    heavy = {"numpy", "torch", "jax", "hypothesis", "pytest", "gradcheck.grading.compare",
             "gradcheck.oracles", "gradcheck.check"}
    assert heavy.isdisjoint(report["modules"])


def test_a_worker_forked_by_the_zygote_sees_the_same_world_and_nothing_of_the_last(
        tmp_path, zygote):
    # each worker is forked from the zygote, never from a worker: what a submission does to
    # the interpreter (a module patched, a module added) is gone for the next
    taint = tmp_path / "taint.py"
    taint.write_text(f"import sys\nsys.path.append({str(ENGINES)!r})\n"
                     "import gradcheck.engine.run as run\n"
                     "print('tainted before' if hasattr(run, 'TAINT') else 'clean', flush=True)\n"
                     "run.TAINT = True\nsys.modules['left_behind'] = run\n"
                     "from tiny import Tensor, no_grad, tensor\n")
    for _ in range(2):
        with Worker(taint, zygote=zygote) as w:
            w.request(INSPECT, timeout=5)
            assert forked(w)
            assert w.output.splitlines()[1] == "clean"
    reports = []
    for _ in range(2):
        with worker("env_report", zygote=zygote) as w:
            w.request(INSPECT, timeout=5)
            assert forked(w) and os.getsid(w.pid) == w.pid  # a session of its own
            fds = sorted(int(fd) for fd in os.listdir(f"/proc/{w.pid}/fd"))
            report = json.loads(w.output.splitlines()[1])
            assert report.pop("cwd") == str(w._home)
            reports.append(report)
    assert reports[0] == reports[1] and "left_behind" not in reports[0]["modules"]
    # the descriptors of a new interpreter's: stdin, stdout, stderr, its channel, its phase
    # file (and its cgroup's, where there is one), nothing of the zygote's
    assert len(fds) <= 6 and fds[:3] == [0, 1, 2]
    with worker("env_report") as w:  # a new interpreter's world, for comparison
        w.request(INSPECT, timeout=5)
        assert not forked(w)
        assert json.loads(w.output.splitlines()[1]) == {**reports[0], "cwd": str(w._home)}


def test_when_the_zygote_is_gone_workers_start_as_new_interpreters(zygote):
    with worker("tiny", zygote=zygote) as w:
        w.request(INSPECT, timeout=5)
        assert forked(w)
    os.kill(zygote._proc.pid, 9)
    with worker("tiny", zygote=zygote) as w:
        assert w.request(INSPECT, timeout=5)["missing"] == SCALAR_ONLY
        assert not forked(w)
    assert zygote._proc is None  # given up, and reaped


def test_a_request_with_anything_but_a_program_and_inputs_is_refused_before_sending():
    request = {**gradients(MUL_EXP), "answers": [{"x": 12.0}]}
    with worker("tiny") as w:
        with pytest.raises(wire.RequestError, match="keys"):
            w.request(request, timeout=5)
        assert w.starts == 0


@pytest.mark.parametrize("by_zygote", [False, True], ids=["", "forked by a zygote"])
def test_the_worker_dies_with_the_grader(by_zygote):
    script = textwrap.dedent(f"""
        import os
        from gradcheck.engine.sandbox import Worker, Zygote
        zygote = Zygote() if {by_zygote} else None
        w = Worker({str(ENGINES / 'tiny.py')!r}, zygote=zygote)
        w.request({{"kind": "inspect"}}, timeout=5)
        print(w.pid, w._dir, zygote._proc.pid if zygote else w.pid, flush=True)
        os._exit(0)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=30, check=True)
    pid, folder, zygote = out.stdout.split()
    shutil.rmtree(folder)  # the grader died before it could remove it
    assert gone_within(int(pid), 5) and gone_within(int(zygote), 5)


def running(w: Worker) -> list[int]:
    """Live processes started by this Worker: they run in its own temporary folder."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{name}/cwd").removesuffix(" (deleted)")  # after close()
            if cwd == str(w._home) and alive(int(name)):
                found.append(int(name))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("by_zygote", [False, True], ids=["", "forked by a zygote"])
def test_close_leaves_no_process_and_no_files(by_zygote, zygote):
    w = worker("fork_flood", max_tasks=1000, **({"zygote": zygote} if by_zygote else {}))
    try:
        reply = w.request(gradients(ADD_EXP), timeout=10)
        assert reply["results"][0]["error"] is None
        folder = w._dir
        assert len(running(w)) == 201  # half of them in sessions of their own
    finally:
        w.close()
    assert running(w) == []
    assert not folder.exists()


@pytest.mark.slow
def test_processes_started_in_a_quick_request_are_counted_after_it():
    """Between requests the grader rescans /proc only when a process id was handed out since
    its last scan; the 200 processes a backward() forks are such a case."""
    w = worker("fork_flood", max_tasks=1000)
    try:
        assert w.request(INSPECT, timeout=5)["missing"] == SCALAR_ONLY
        assert [pid for pid, *_ in w._census.processes(w.pid, w._since)] == [w.pid]
        reply = w.request(gradients(ADD_EXP), timeout=10)
        assert reply["results"][0]["error"] is None
        assert sorted(pid for pid, *_ in w._census.processes(w.pid, w._since)) == sorted(running(w))
        assert len(running(w)) == 201
    finally:
        w.close()


def test_the_census_looks_only_below_the_grader_and_finds_what_reading_every_process_finds(
        monkeypatch):
    """A worker's processes are found by walking the children the kernel lists below the grader
    (a grandchild in a session of its own too), reading nothing of the machine's other
    processes; a kernel that lists no children gets the same members by reading them all."""
    grandchild = ("import os, time; os.setsid(); time.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys, time; "
                              f"subprocess.Popen([sys.executable, '-c', {grandchild!r}]); "
                              "time.sleep(30)"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(census.below(child.pid)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        [second] = census.below(child.pid)
        read: list[int] = []
        stat = census._stat
        monkeypatch.setattr(census, "_stat", lambda pid: read.append(pid) or stat(pid))
        found = sorted(pid for pid, *_ in census.members(child.pid))
        assert found == sorted([child.pid, second])
        assert os.getppid() not in read and 1 not in read
        monkeypatch.setattr(census, "LISTS_CHILDREN", False)
        read.clear()
        assert sorted(pid for pid, *_ in census.members(child.pid)) == found
        assert os.getppid() in read
    finally:
        census.kill_all(child.pid)
        child.wait()
    assert gone_within(second, 5)


def test_memory_is_judged_as_by_the_proportional_set_size():
    """The PSS is read only when the resident sizes could reach the limit; the verdict is the
    one the PSS gives at any limit."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             start_new_session=True)
    try:
        time.sleep(0.3)
        members = census.members(child.pid)
        assert [pid for pid, *_ in members] == [child.pid]
        with open(f"/proc/{child.pid}/smaps_rollup") as f:
            pss = next(int(line.split()[1]) << 10 for line in f if line.startswith("Pss:"))
        for limit in (1, pss // 2, pss * 2 - 4096, pss * 2 + 4096, 1 << 40):
            assert census.uses_more_than(members, limit) == (pss > limit), limit
    finally:
        child.kill()
        child.wait()


def test_a_worker_started_ahead_has_parsed_the_programs_it_was_given(tmp_path):
    """`prestart(..., programs)`: the waiting interpreter parses them before the submission is
    imported (the submission finds them remembered), a program that does not parse is skipped,
    and the requests are answered as by any worker."""
    seen = tmp_path / "seen"
    submission = tmp_path / "engine.py"
    submission.write_text(
        "import sys\nfrom gradcheck.program import language\n"
        f"open({str(seen)!r}, 'w').write(repr(sorted(k[0] for k in language._KNOWN)))\n"
        f"sys.path.append({str(ENGINES)!r})\nfrom tiny import *\n")
    broken = {"source": "z = x +", "inputs": {"x": None}, "output": "z"}
    sandbox.prestart(1, programs=[broken, MUL_EXP, ADD_EXP])
    try:
        with Worker(submission, import_timeout=10) as w:
            assert w.request(gradients(ADD_EXP), timeout=10) == torch_reply(gradients(ADD_EXP))
        assert seen.read_text() == repr(sorted([MUL_EXP["source"], ADD_EXP["source"]]))
    finally:
        sandbox.discard_spares()


def test_torch_itself_runs_as_a_submission():
    path = Path(torch_engine.__file__)
    with Worker(path, memory_mb=1024) as w:
        for request in (gradients(MUL_EXP), INSPECT):
            assert w.request(request, timeout=60) == torch_reply(request)


def test_a_worker_started_ahead_imports_nothing_of_the_submission_until_its_start(tmp_path):
    """`prestart` (as `grade --watch` does while it waits): the interpreter waits, nothing of
    the submission's runs, the next Worker takes it, in its own fresh folder, and a discarded
    one leaves nothing behind."""
    marker = tmp_path / "imported"
    submission = tmp_path / "engine.py"
    submission.write_text(f"open({str(marker)!r}, 'a').write('x')\n"
                          f"import sys\nsys.path.append({str(ENGINES)!r})\nfrom tiny import *\n")
    sandbox.prestart(2)
    try:
        waiting = {spare.proc.pid: spare.folder for spare in sandbox._SPARES}
        assert len(waiting) == 2 and all(alive(pid) for pid in waiting)
        time.sleep(1)
        assert not marker.exists()  # started, but the submission not imported
        with Worker(submission, import_timeout=10) as w:
            assert w.request(gradients(MUL_EXP), timeout=10)["results"][0]["error"] is None
            assert w.pid in waiting and w._dir == waiting[w.pid] and w.starts == 1
            assert w._cgroup is None or w._cgroup.holds(w.pid)  # moved into its memory cgroup
            assert marker.read_text() == "x"
            os.kill(w.pid, 9)  # a restart after a crash takes the other one
            assert isinstance(w.request(gradients(MUL_EXP), timeout=10), Failure)
            w.request(gradients(MUL_EXP), timeout=10)
            assert w.pid in waiting and w.starts == 2 and marker.read_text() == "xx"
        assert sandbox._SPARES == []
        with Worker(submission, import_timeout=10) as w:  # none left: started afresh
            w.request(INSPECT, timeout=10)
            assert w.pid not in waiting
        sandbox.prestart(1)
        left = sandbox._SPARES[0]
    finally:
        sandbox.discard_spares()
    assert gone_within(left.proc.pid, 5) and not left.folder.exists()


def test_a_sealed_requests_frame_is_made_once_and_the_request_cannot_change():
    """A sealed request (what a grading's plan builds) is checked and packed once: it is sent
    ahead, then asked, and a batch's job slot packs it for every grading it forks. So nothing
    may change it once built; a plain dict is packed anew every time."""
    sealed = wire.Sealed({"kind": "inspect"})
    assert sandbox.frame(sealed) is sandbox.frame(sealed)
    for change in (lambda: sealed.__setitem__("kind", "gradients"), lambda: sealed.pop("kind"),
                   lambda: sealed.update(kind="trace"), lambda: sealed.clear(),
                   lambda: sealed.setdefault("points", []), lambda: sealed.__delitem__("kind")):
        with pytest.raises(TypeError, match="cannot change"):
            change()
    plain = {"kind": "inspect"}
    assert sandbox.frame(plain) == sandbox.frame(sealed)
    plain["kind"] = "nothing"
    with pytest.raises(wire.RequestError):
        sandbox.frame(plain)
