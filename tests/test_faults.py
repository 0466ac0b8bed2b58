"""Whole grading runs of misbehaving engines: a fault costs only the points it should, is named in
the report, and never stops the report from being written or the rest of the bank from being
graded, within a bounded time.

The bank has three small exercises; only `b-tanh` uses tanh. Most engines are tiny with one fault
that strikes only where tanh is used (tests/engines/faults.py), so `a-product` and the hidden
`c-quotient` must come out exactly as they do for tiny itself, graded live in the same session,
and `b-tanh` must lose exactly the checks the fault reaches. docs/security.md says what each of
these tests stands for.
"""

import builtins
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from xml.etree import ElementTree

import numpy
import pytest
from another_user import PYTHON, UID, as_another_user, key_reader, open_folder, private_copy  # noqa: F401
from grading_samples import read_results

from gradcheck.bank.loader import load_bank
from gradcheck.engine import trees
from gradcheck.engine.sandbox import Worker
from gradcheck.grading import answer_key
from gradcheck.grading.grader import Grader
from gradcheck.reports import WITHHELD
from gradcheck.reports.gradescope import write_results_json

ENGINES = Path(__file__).parent / "engines"
SEED = 11
TIMEOUT = 2  # seconds per exercise in these runs
MEMORY_MB = 256
BOUND = 60  # seconds any one grading run may take here, cold start and a loaded machine included
#: what inspect reports of a scalar test engine: no 1-D tensors, no higher-order protocol
SCALAR_ONLY = ["select", "create_graph", "grad()"]

BANK = {
    "a-product": """\
id: a-product
title: A product and an exponential
topic: 02-backward
points: 4
inputs:
  x: {value: 0.5, domain: {low: -2, high: 2}}
  y: {value: -1.5, domain: {low: -2, high: 2}}
program: |
  z = x * y + x.exp()
checks:
  gradients: {points: [{x: 1.0, y: 2.0}]}
  sampled: {count: 5}
  graph: {names: [x, y, z]}
  behaviour:
    steps:
      - backward: {retain_graph: true}
        expect: [grad.x, grad.y]
      - backward: {}
        expect: [grad.x]
""",
    "b-tanh": """\
id: b-tanh
title: A tanh
topic: 02-backward
points: 3
inputs:
  x: {value: 0.3, domain: {low: -2, high: 2}}
  y: {value: 0.8, domain: {low: -2, high: 2}}
program: |
  t = (x * y).tanh()
  z = t + x
checks:
  gradients: {}
  sampled: {count: 5}
  graph: {names: [x, y, t, z]}
""",
    "c-quotient": """\
id: c-quotient
title: A quotient
topic: 02-backward
points: 2
visibility: hidden
inputs:
  x: {value: 1.5, domain: {low: 0.5, high: 3}}
  y: {value: 2.0, domain: {low: 0.5, high: 3}}
program: |
  z = x / y - y
checks:
  gradients: {}
  sampled: {count: 5}
""",
}


BANK_PROGRAM = {"source": "t = (x * y).tanh()\nz = t + x\n", "inputs": {"x": None, "y": None},
                "output": "z"}


def write_bank(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in BANK.items():
        (folder / f"{name}.exercise.yaml").write_text(text)
    return folder


@pytest.fixture(scope="module")
def bank_dir(tmp_path_factory):
    return write_bank(tmp_path_factory.mktemp("fault-bank"))


@pytest.fixture(scope="module")
def bank(bank_dir):
    loaded = load_bank(bank_dir)
    assert not loaded.broken
    return loaded


def armed(folder: Path, fault: str) -> Path:
    """A submission: tiny with the fault `fault` of tests/engines/faults.py."""
    path = folder / f"{fault}.py"
    path.write_text(f"import sys\nsys.path.append({str(ENGINES)!r})\nfrom faults import arm\n"
                    f"tensor, no_grad = arm({fault!r}, __file__)\n")
    return path


def leftovers(folder: Path) -> list[int]:
    """Live processes of the workers whose folders were made in `folder` (`run` makes them
    there: their HOME is in every worker's environment, and forks keep it), after giving killed
    ones a moment to go."""
    found: list[int] = []
    home = b"HOME=" + str(folder).encode() + b"/"
    for _ in range(40):
        found = []
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
                state = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            except OSError:
                continue
            if any(item.startswith(home) for item in environ) and state != b"Z":
                found.append(int(name))
        if not found:
            break
        time.sleep(0.05)
    return found


def run(submission: Path, bank, tmp_path: Path, **options):
    """Grade; returns (report, seconds, results.json as read back and validated)."""
    options = {"seed": SEED, "timeout": TIMEOUT, "memory_mb": MEMORY_MB, **options}
    start = time.monotonic()
    made_in, tempfile.tempdir = tempfile.tempdir, str(tmp_path)  # the workers' folders: leftovers
    try:
        with Grader(submission, **options) as grader:
            report = grader.grade_bank(bank)
    finally:
        tempfile.tempdir = made_in
    elapsed = time.monotonic() - start
    results = tmp_path / "results.json"
    write_results_json(report, results)
    return report, elapsed, read_results(results)


def outcome(report) -> dict[tuple[str, str], tuple[str, float]]:
    return {(r.exercise_id, r.check): (r.status, r.score) for r in report.results}


@pytest.fixture(scope="module")
def honest(bank, tmp_path_factory):
    """tiny itself, graded live: what every check earns without a fault."""
    report, _, _ = run(ENGINES / "tiny.py", bank, tmp_path_factory.mktemp("honest"))
    assert all(r.status == "passed" for r in report.results), report.results
    return report


ALL = ("gradients", "sampled", "graph")
GRADS = ("gradients", "sampled")
FAULTS = [
    # fault, the checks of b-tanh it costs, what the first of them says
    ("hang_forward", ALL, "timed out after 2 s in the forward pass"),
    ("hang_backward", ALL, "timed out after 2 s in backward()"),
    ("spin_backward", ALL, "timed out after 2 s in backward()"),
    ("os_exit", GRADS, "the engine exited with code 3 in backward()"),
    ("sys_exit", GRADS, "the engine called sys.exit(3) in backward()"),
    ("system_exit", GRADS, "the engine called sys.exit(grading is over) in backward()"),
    ("keyboard_interrupt", GRADS, "the engine raised KeyboardInterrupt in backward()"),
    ("forward_raises", ALL, "the engine raised KeyboardInterrupt in the forward pass"),
    ("segfault", GRADS, "the engine crashed with signal SIGSEGV in backward()"),
    ("memory", GRADS, f"the engine ran out of memory (limit {MEMORY_MB} MB) in backward()"),
    ("output_flood", GRADS, "the engine printed more than 1 MB in backward()"),
    ("fork_flood", GRADS, "the engine started more than 64 processes or threads in backward()"),
    # thread stacks count against the memory limit, so (with 8 MB stacks) the 33rd thread cannot
    # start: "can't start new thread"; with smaller ones the count of threads stops it first
    ("thread_flood", GRADS, "thread"),
    ("nan_grad", GRADS, "nan"),
    ("inf_grad", GRADS, "inf"),
    ("liar_grad", GRADS, ""),
    ("string_grad", GRADS, "backward left x.grad as a str"),
    ("bool_grad", GRADS, "backward left x.grad as a bool"),
    ("huge_grad", GRADS, "x.grad has 1000000 elements; at most 100000 are expected"),
    ("lying_list_grad", GRADS, "should be a number, not list"),
    ("raising_grad", GRADS, "RuntimeError reading `x.grad` after backward() (this gradient "
                            "cannot be read)"),
    ("tolist_raises", ALL, "your engine raised ValueError in `z.tolist()` (`tolist()`): no list "
                              "for you"),
    ("tolist_liar", ALL, ""),
    ("tolist_nan", ALL, "nan"),
    ("tolist_string", ALL, "z.tolist() is a str, not a number"),
    ("tolist_list", ALL, "should be a number, not list"),
]


@pytest.mark.parametrize("fault, costs, says", FAULTS, ids=[f[0] for f in FAULTS])
def test_a_fault_costs_only_the_checks_it_reaches(fault, costs, says, bank, honest, tmp_path):
    submission = armed(tmp_path, fault)
    report, elapsed, data = run(submission, bank, tmp_path, worker={"max_tasks": 64})
    expected = outcome(honest)
    for check in costs:
        expected[("b-tanh", check)] = ("failed", 0.0)
    assert outcome(report) == expected
    lost = sum(r.max_score for r in honest.results
               if r.exercise_id == "b-tanh" and r.check in costs)
    assert report.score == pytest.approx(honest.score - lost)
    first = next(r for r in report.results if r.status == "failed")
    assert says in first.message
    # the report is complete: every check is a test, the hidden exercise's details withheld
    assert data["score"] == pytest.approx(report.score) and len(data["tests"]) == 9
    assert says in next(t["output"] for t in data["tests"] if t["status"] == "failed")
    assert {t["output"] for t in data["tests"] if t["visibility"] == "hidden"} == {WITHHELD}
    assert elapsed < BOUND
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("source, says", [
    ("import time\ntime.sleep(3600)\n", "timed out after 2 s while importing the submission"),
    ("import os\nos._exit(0)\n", "the engine exited with code 0 while importing the submission"),
    ("import ctypes\nctypes.string_at(0)\n", "the engine crashed with signal SIGSEGV while "
                                              "importing the submission"),
    ("raise SystemExit(0)\n", "the submission could not be imported: SystemExit: 0"),
], ids=["hang", "os_exit", "segfault", "system_exit"])
def test_a_submission_that_dies_while_imported_gets_a_report_that_says_so(source, says, bank,
                                                                          tmp_path):
    submission = tmp_path / "engine.py"
    submission.write_text(source)
    report, elapsed, data = run(submission, bank, tmp_path, worker={"import_timeout": 2})
    assert len(report.results) == 9 and report.score == 0
    assert {r.message for r in report.results} == {says}
    assert report.import_error  # the traceback, or what happened instead
    assert ("Your submission could not be imported:\n\n" + report.import_error) in data["output"]
    assert data["score"] == 0
    assert elapsed < 2 + 10  # the import is tried once, not once per exercise
    assert leftovers(tmp_path) == []


def test_a_daemon_the_engine_leaves_behind_is_killed_with_it(bank, honest, tmp_path):
    """The engine daemonises a process the classic way (double fork, setsid) in b-tanh's
    backward; it would write a marker 3 s later. It does not outlive the grading run."""
    submission = armed(tmp_path, "escape")
    report, _, _ = run(submission, bank, tmp_path)
    assert outcome(report) == outcome(honest)  # nothing else is wrong with this engine
    assert leftovers(tmp_path) == []
    time.sleep(3.5)
    assert not (tmp_path / "escaped.marker").exists()


def test_a_derivative_right_only_at_the_listed_points_is_caught_by_sampled_points(bank, honest,
                                                                                  tmp_path):
    expected = outcome(honest)
    expected[("b-tanh", "sampled")] = ("failed", 0.0)
    for seed in (1, 2, 3):  # whichever points are drawn
        report, _, _ = run(ENGINES / "listed_only.py", bank, tmp_path, seed=seed)
        assert outcome(report) == expected


def test_monkeypatched_comparison_helpers_gain_no_point(bank, honest, tmp_path):
    """D's monkeypatch engine doubles every gradient and patches math.isclose, numpy's allclose
    and testing, pytest.approx, abs and round in its own process."""
    report, _, _ = run(ENGINES / "monkeypatch.py", bank, tmp_path)
    expected = {key: ("passed", score) if key[1] == "graph" else ("failed", 0.0)
                for key, (_, score) in outcome(honest).items()}
    assert outcome(report) == expected
    assert not math.isclose(1.0, 2.0) and not numpy.allclose(1.0, 2.0)
    assert builtins.abs(-1.0) == 1.0 and builtins.round(1.4) == 1
    assert 2.0 != pytest.approx(1.0)


@pytest.mark.slow
def test_monkeypatching_torch_in_the_worker_gains_no_point(bank, honest, tmp_path):
    submission = tmp_path / "engine.py"
    submission.write_text(f"import sys\nsys.path.append({str(ENGINES)!r})\n"
                          "from monkeypatch import tensor, no_grad\n"
                          "import torch, torch.testing\n"
                          "torch.allclose = torch.equal = lambda *args, **kwargs: True\n"
                          "torch.testing.assert_close = lambda *args, **kwargs: None\n"
                          "torch.Tensor.__eq__ = lambda self, other: torch.tensor(True)\n")
    report, _, _ = run(submission, bank, tmp_path, memory_mb=1024, timeout=30)
    expected = {key: ("passed", score) if key[1] == "graph" else ("failed", 0.0)
                for key, (_, score) in outcome(honest).items()}
    assert outcome(report) == expected
    import torch

    assert not torch.allclose(torch.tensor(1.0), torch.tensor(2.0))


# --- answer keys: a worker without torch and jax -----------------------------------------------


@pytest.fixture(scope="module")
def key_file(bank, tmp_path_factory):
    path = tmp_path_factory.mktemp("key") / "key.json"
    answer_key.build(bank, SEED, path)
    return path


@pytest.mark.parametrize("statement, module", [
    ("import torch", "torch"), ("from jax import numpy", "jax"),
    ("import jaxlib.xla_client", "jaxlib")])
def test_a_submission_graded_from_a_key_cannot_import_torch_or_jax(statement, module, bank,
                                                                   key_file, tmp_path):
    submission = tmp_path / "engine.py"
    submission.write_text(statement + "\n")
    report, _, data = run(submission, bank, tmp_path, key=key_file)
    assert report.score == 0
    assert report.results[0].message.startswith(
        f"the submission could not be imported: ModuleNotFoundError: a submission cannot import "
        f"{module} here")
    assert "write the engine without them" in data["output"]


def test_an_engine_without_torch_is_graded_from_a_key_as_live(bank, honest, key_file, tmp_path):
    report, _, _ = run(ENGINES / "tiny.py", bank, tmp_path, key=key_file)
    assert outcome(report) == outcome(honest)


@pytest.mark.parametrize("field", ["torch", "points"])
def test_a_fault_of_the_grader_costs_only_its_check(bank, honest, key_file, tmp_path, field):
    """A corrupted entry in the answer key makes the grader itself fail on one check: that
    check is an error that says whose fault it is, and the rest is graded. Corrupted points
    break the plan of the requests sent ahead (`Grader._plan`) too, made at the first check:
    that costs nothing but the corrupted check either."""
    data = json.loads(key_file.read_text())
    if field == "torch":
        data["exercises"]["b-tanh"]["checks"]["gradients"]["torch"]["value"] = "garbage"
    else:
        data["exercises"]["b-tanh"]["checks"]["gradients"]["points"] = []
    corrupted = tmp_path / "key.json"
    corrupted.write_text(json.dumps(data))
    report, _, data = run(ENGINES / "tiny.py", bank, tmp_path, key=corrupted)
    expected = outcome(honest)
    expected[("b-tanh", "gradients")] = ("error", 0.0)
    assert outcome(report) == expected
    error = next(r for r in report.results if r.status == "error")
    assert error.message.startswith("gradcheck could not grade this check (")
    assert error.message.endswith("this is a fault of the grader, not of the submission")
    assert "Traceback" in error.author_notes[0]
    assert len(data["tests"]) == 9


def test_a_grading_with_a_fault_of_the_grader_exits_2_and_blames_no_one_in_fix_first(
        bank_dir, key_file, tmp_path):
    """A check gradcheck could not grade is never a 0 that reads as the submission's: `grade`
    exits 2 (a batch files the submission as not graded, to grade again), says so on stderr,
    and the report's "fix first" lines leave it out."""
    data = json.loads(key_file.read_text())
    data["exercises"]["b-tanh"]["checks"]["gradients"]["torch"]["value"] = "garbage"
    corrupted = tmp_path / "key.json"
    corrupted.write_text(json.dumps(data))
    results = tmp_path / "results.json"
    done = subprocess.run(grade_command(ENGINES / "tiny.py", bank_dir, results, "--key",
                                        str(corrupted)), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr
    assert "1 check(s) could not be graded, a fault of gradcheck" in done.stderr
    errors = [t for t in read_results(results)["tests"] if "fault of the grader" in t["output"]]
    assert len(errors) == 1


#: at import: a folder 1,500 deep (deeper than Python recurses) in /dev/shm, which every poll of
#: the worker's memory walks, and one in the worker's own home
_DEEP = """import os, sys
sys.path.append({engines!r})
from tiny import tensor, no_grad
for top in ({shared!r}, os.path.join(os.environ["HOME"], "deep")):
    os.makedirs(top)
    os.chdir(top)
    for _ in range(1500):
        os.mkdir("d")
        os.chdir("d")
"""


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_a_folder_deeper_than_python_recurses_costs_no_grading_a_point(bank, honest, tmp_path):
    """The poll of the worker's memory and the clean-up after it walked folders by recursion:
    a submission's folder 1,500 deep raised a RecursionError in the grader, and, left in
    /dev/shm, scored every later grading on the machine 0. Both gradings earn what tiny earns,
    and the folders are gone."""
    shared = f"/dev/shm/gradcheck-test-deep-{os.getpid()}"
    submission = tmp_path / "deep.py"
    submission.write_text(_DEEP.format(engines=str(ENGINES), shared=shared))
    (tmp_path / "deep").mkdir()
    (tmp_path / "next").mkdir()
    try:
        report, _, _ = run(submission, bank, tmp_path / "deep")
        assert outcome(report) == outcome(honest)
        assert not os.path.lexists(shared) and os.listdir(tmp_path / "deep") == ["results.json"]
        report, _, _ = run(ENGINES / "tiny.py", bank, tmp_path / "next")
        assert outcome(report) == outcome(honest)
    finally:
        trees.remove(shared)


# --- the grader's own files ---------------------------------------------------------------------

VANDAL = """\
import json, os, sys
sys.path.append({engines!r})
from monkeypatch import tensor, no_grad  # doubles every gradient

# What a submission can learn of the grader: its command line.
argv = open(f"/proc/{{os.getppid()}}/cmdline", "rb").read().decode().split("\\0")
results = argv[argv.index("--results-json") + 1]
bank = argv[argv.index("--exercises") + 1]
FORGED = {{"score": 1000, "output": "forged", "tests": []}}


def vandalise():
    with open(results, "w") as f:
        json.dump(FORGED, f)
    for name in os.listdir(bank):
        with open(os.path.join(bank, name), "w") as f:
            f.write("id: forged\\npoints: 1000\\n")


vandalise()  # while being imported
_backward = tensor(1.0).__class__.backward


def backward(self, gradient=None, retain_graph=False):
    vandalise()  # and in every backward
    return _backward(self, gradient, retain_graph)


tensor(1.0).__class__.backward = backward
"""


def grade_command(submission: Path, bank_dir: Path, results: Path, *more: str) -> list[str]:
    return [sys.executable, "-m", "gradcheck", "grade", str(submission), "--exercises",
            str(bank_dir), "--results-json", str(results), "--seed", str(SEED), "--quiet", *more]


@pytest.mark.slow
def test_writing_the_results_file_or_the_bank_changes_nothing_in_the_run(honest, tmp_path):
    """The engine learns the results path and the bank from the grader's command line and
    overwrites both, while being imported and in every backward. The bank was read before the
    submission ran, and results.json is written last, by the grader."""
    bank_dir = write_bank(tmp_path / "bank")
    submission = tmp_path / "vandal.py"
    submission.write_text(VANDAL.format(engines=str(ENGINES)))
    results = tmp_path / "out" / "results.json"
    results.parent.mkdir()
    run = subprocess.run(grade_command(submission, bank_dir, results), capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    data = read_results(results)
    # what monkeypatch earns: the graph checks, nothing that reads a gradient
    graph = sum(r.score for r in honest.results if r.check == "graph")
    assert data["score"] == pytest.approx(graph) and "forged" not in data["output"]
    assert sum(t["max_score"] for t in data["tests"]) == pytest.approx(honest.max_score)
    # The vandalism itself happened: a later run would read the forged files (docs/security.md)
    assert (bank_dir / "a-product.exercise.yaml").read_text().startswith("id: forged")


def stopped_in_a_hang(tmp_path: Path, signum: int) -> tuple[subprocess.Popen, dict]:
    """`gradcheck grade` sent `signum` while b-tanh hangs, once a-product is in results.json
    (each worker's folder is made in TMPDIR, tmp_path); the ended process and its results."""
    bank_dir = write_bank(tmp_path / "bank")
    submission = armed(tmp_path, "hang_backward")
    results = tmp_path / "results.json"
    # Ctrl-C's SIGINT stops it even when the tests run in a background job, which ignores
    # SIGINT and passes that on (processes.gradcheck_command)
    grader = subprocess.Popen(grade_command(submission, bank_dir, results, "--timeout", "60"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env={**os.environ, "TMPDIR": str(tmp_path)},
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if results.exists() and any(t["name"].endswith("(a-product)")
                                        for t in json.loads(results.read_text())["tests"]):
                break
            time.sleep(0.1)
        time.sleep(1)  # well inside b-tanh's hanging backward
        assert grader.poll() is None
        grader.send_signal(signum)
        grader.wait(timeout=60)
    finally:
        grader.kill()
    data = read_results(results)
    assert data["output"].startswith("Grading did not finish")
    assert {t["name"].rsplit("(", 1)[1] for t in data["tests"]} == {"a-product)"}
    assert all(t["status"] == "passed" for t in data["tests"])
    return grader, data


@pytest.mark.slow
def test_killing_the_grader_mid_run_leaves_valid_results_so_far(tmp_path):
    """SIGKILL `gradcheck grade` while b-tanh hangs: results.json holds a-product, marked
    unfinished, and the worker dies with the grader. Its folders, which a SIGKILL leaves no
    time to remove, are removed by the next grading on the machine, and only they: the
    folder of a grading still running is left alone."""
    stopped_in_a_hang(tmp_path, signal.SIGKILL)
    assert leftovers(tmp_path) == []
    left = set(tmp_path.glob("gradcheck-worker-*"))
    assert left and all(path.is_dir() for path in left)
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    hanging = subprocess.Popen(grade_command(armed(tmp_path, "hang_backward"), tmp_path / "bank",
                                             tmp_path / "hanging.json", "--timeout", "60"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        while not set(tmp_path.glob("gradcheck-worker-*")) - left:  # its worker started
            assert hanging.poll() is None
            time.sleep(0.1)
        running = set(tmp_path.glob("gradcheck-worker-*")) - left
        done = subprocess.run(grade_command(ENGINES / "tiny.py", tmp_path / "bank",
                                            tmp_path / "next.json"),
                              capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr
        assert set(tmp_path.glob("gradcheck-worker-*")) == running
    finally:
        hanging.kill()
        hanging.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_grader_stopped_by_sigterm_or_ctrl_c_cleans_up_and_keeps_its_results(tmp_path, signum):
    """SIGTERM (a CI job cancelled, `timeout`) ends `gradcheck grade` as Ctrl-C does, while
    b-tanh hangs: exit status 130, results.json as after a SIGKILL, and neither a worker process
    nor a worker's folder is left behind (a SIGKILL removes none)."""
    grader, _ = stopped_in_a_hang(tmp_path, signum)
    assert grader.returncode == 130
    assert grader.stderr.read().decode().rstrip().endswith("gradcheck grade: interrupted")
    assert leftovers(tmp_path) == []
    assert list(tmp_path.glob("gradcheck-worker-*")) == []


# --- the worker as another user (tests/another_user.py) -----------------------------------------


def processes_of(uid: int) -> list[int]:
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        real = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1]
        state = next(line for line in status.splitlines() if line.startswith("State:")).split()[1]
        if int(real) == uid and state != "Z":
            found.append(int(name))
    return found


SNOOP = """\
import json, os, sys
sys.path.append({engines!r})
from tiny import tensor, no_grad

done = {{}}


def attempt(what, action):
    try:
        action()
        done[what] = True
    except OSError:
        done[what] = False


attempt("read the answer key", lambda: open({key!r}).read())
attempt("list the hidden exercises", lambda: os.listdir({bank!r}))
attempt("write the results", lambda: open({results!r}, "w").write("{{}}"))
attempt("signal the grader", lambda: os.kill(os.getppid(), 0))
attempt("read the grader's environment",
        lambda: open(f"/proc/{{os.getppid()}}/environ", "rb").read())
attempt("open the grader's memory", lambda: open(f"/proc/{{os.getppid()}}/mem", "rb").close())
print(json.dumps(done))
"""


@as_another_user
def test_a_worker_of_another_user_cannot_reach_the_graders_files_or_process(open_folder):
    """What a submission can do to the grader as the grader's own user, and cannot as another:
    files are protected by their modes (key 0600, bank 0700, results folder 0755, all root's)."""
    key = open_folder / "key.json"
    key.write_text("{}")
    key.chmod(0o600)
    bank = open_folder / "hidden"
    bank.mkdir(mode=0o700)
    results = open_folder / "results" / "results.json"
    results.parent.mkdir(mode=0o755)
    results.write_text("{}")
    submission = open_folder / "snoop.py"
    submission.write_text(SNOOP.format(engines=str(ENGINES), key=str(key), bank=str(bank),
                                       results=str(results)))
    seen = {}
    for label, options in (("same", {}), ("other", {"user": UID, "python": PYTHON})):
        with Worker(submission, **options) as worker:
            assert worker.request({"kind": "inspect"}, timeout=10)["missing"] == SCALAR_ONLY
            seen[label] = json.loads(worker.output.splitlines()[1])
    assert set(seen["same"].values()) == {True}  # docs/security.md: why the platform matters
    assert set(seen["other"].values()) == {False}
    assert results.read_text() == "{}"


@as_another_user
def test_a_real_fork_bomb_is_capped_by_the_kernel_and_killed(open_folder):
    import threading

    peak, running = [0], [True]

    def watch():
        while running[0]:
            peak[0] = max(peak[0], len(processes_of(UID)))
            time.sleep(0.01)

    assert processes_of(UID) == []
    watcher = threading.Thread(target=watch)
    with Worker(ENGINES / "fork_bomb.py", user=UID, python=PYTHON, max_tasks=64) as worker:
        watcher.start()
        request = {"kind": "gradients", "program": BANK_PROGRAM, "points": [{"x": 1.0, "y": 2.0}],
                   "requires_grad": ["x", "y"]}
        failure = worker.request(request, timeout=2)
        running[0] = False
        watcher.join()
        assert (failure.kind, failure.message) == ("timeout", "timed out after 2 s in backward()")
        assert worker.request({"kind": "inspect"}, timeout=10)["missing"] == SCALAR_ONLY
    assert 1 < peak[0] <= 64
    assert processes_of(UID) == []


@as_another_user
def test_a_grader_with_a_worker_of_another_user_grades_as_before(bank, honest, tmp_path):
    report, _, _ = run(ENGINES / "tiny.py", bank, tmp_path, worker={"user": UID,
                                                                   "python": PYTHON})
    assert outcome(report) == outcome(honest)


@pytest.fixture
def private_key(key_file, open_folder):
    return private_copy(key_file, open_folder)


@as_another_user
def test_an_engine_that_reads_the_answer_key_gains_points_only_from_a_key_it_may_read(
        bank, private_key, open_folder):
    """Run as the grader's user it gains the gradient checks; as another user, with the key
    root's and private, it earns exactly what it earns with no key to read."""

    def graded(path: Path, **worker) -> dict:
        report, _, _ = run(key_reader(open_folder / "engine.py", path), bank, open_folder,
                           key=private_key, worker=worker)
        return outcome(report)

    blind = graded(open_folder / "no-such-key.json")
    other = graded(private_key, user=UID, python=PYTHON)
    same = graded(private_key)
    assert other == blind
    gained = {check for check, (status, _) in same.items() if status == "passed"} - {
        check for check, (status, _) in blind.items() if status == "passed"}
    assert {check for _, check in gained} == {"gradients", "sampled"}


@as_another_user
def test_gradcheck_grade_worker_user_keeps_a_private_key_from_the_submission(
        bank_dir, private_key, open_folder):
    """The same from the command line: `--worker-user` (and `--worker-python`, as the test run's
    own Python lies under /root, where no other user may go)."""
    submission = key_reader(open_folder / "engine.py", private_key)

    def passed(*options: str) -> set[tuple[str, str]]:
        junit = open_folder / "junit.xml"
        done = subprocess.run(
            [sys.executable, "-m", "gradcheck", "grade", str(submission), "--exercises",
             str(bank_dir), "--key", str(private_key), "--junit", str(junit), *options],
            capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        cases = ElementTree.parse(junit).getroot().iter("testcase")
        return {(case.get("classname"), case.get("name")) for case in cases if len(case) == 0}

    same = passed()
    other = passed("--worker-user", str(UID), "--worker-python", PYTHON)
    assert other < same
    assert {check for _, check in same - other} == {"gradients", "sampled"}
