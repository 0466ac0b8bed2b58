"""`gradcheck grade-batch --scheduler`: a real Dask cluster on the loopback address (a
`dask scheduler` and two `dask worker` processes), one of its workers killed mid-batch; and,
without --scheduler, a batch that never imports Dask."""

import csv
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from another_user import (PYTHON, UID, as_another_user, key_reader, open_folder,  # noqa: F401
                          record_uids, uids_recorded)
from engine_packages import package
from grading_samples import keyed_bank, read_results
from processes import alive

from gradcheck.bank.bundled import reference_path
from gradcheck.course.slots import bank_digest, file_digest

ENGINES = Path(__file__).parent / "engines"
#: the `dask` command of this interpreter (a `dask` found on PATH may be another Python's, which
#: would grade with another gradcheck), or None without gradcheck[dask]
DASK = ([sys.executable, "-m", "dask"] if importlib.util.find_spec("distributed") is not None
        else None)
#: buggy engines of tests/engines, each made a package of its own with tiny.py beside it
BUGGY = ("wrong_mul", "string_grads", "segfault", "lying_floats", "hang_backward")


@pytest.fixture
def twelve(tmp_path):
    """12 submissions: the reference and five correct ones (one a folder per student, its
    engine.py beside the module it imports), five buggy ones (one of them hangs in backward),
    and one whose import never ends."""
    subs = tmp_path / "submissions"
    shutil.copytree(reference_path(), subs / "ref", ignore=shutil.ignore_patterns("__pycache__"))
    for number in range(4):
        shutil.copy(ENGINES / "tiny.py", subs / f"good{number}.py")
    (subs / "good4").mkdir()
    shutil.copy(ENGINES / "tiny.py", subs / "good4" / "ops.py")
    (subs / "good4" / "engine.py").write_text("from ops import Tensor, no_grad, tensor\n")
    for engine in BUGGY:
        package(subs / engine, engine)
    shutil.copy(ENGINES / "hang_import.py", subs / "hang_import.py")
    assert len(os.listdir(subs)) == 12
    return subs


@pytest.fixture(scope="module")
def bank_and_key(tmp_path_factory):
    """Three exercises (square, a hidden cube, product: 7 points) and their answer key."""
    return keyed_bank(tmp_path_factory.mktemp("cluster-bank"))


class Cluster:
    """A scheduler and workers started as subprocesses, each in a session of its own."""

    def __init__(self, folder: Path, allowed_failures: int | None = None) -> None:
        self.folder, self.procs, self.workers = folder, [], {}
        self.env = {**os.environ}
        if allowed_failures is not None:
            self.env["DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES"] = str(allowed_failures)
        file = folder / "scheduler.json"
        self.start("scheduler", [*DASK, "scheduler", "--host", "127.0.0.1", "--port", "0",
                                 "--no-dashboard", "--scheduler-file", str(file)])
        self.address = json.loads(self.wait_for(file).read_text())["address"]

    def start(self, name: str, command: list[str]) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "wb")
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                cwd=self.folder, start_new_session=True)
        log.close()
        self.procs.append(proc)
        return proc

    def add_worker(self, name: str) -> None:
        self.workers[name] = self.start(name, [
            *DASK, "worker", self.address, "--name", name, "--nthreads", "1", "--no-nanny",
            "--no-dashboard", "--host", "127.0.0.1", "--local-directory", str(self.folder / name)])

    def wait_for(self, path: Path, seconds: float = 30) -> Path:
        deadline = time.monotonic() + seconds
        while not path.is_file() or not path.read_text().strip():
            assert time.monotonic() < deadline, f"no {path} after {seconds} s"
            assert all(proc.poll() is None for proc in self.procs), self.logs()
            time.sleep(0.1)
        time.sleep(0.2)  # written whole
        return path

    def client(self):
        from distributed import Client

        return Client(self.address, timeout=30)

    def kill(self, name: str) -> None:
        os.killpg(self.workers[name].pid, signal.SIGKILL)
        self.workers[name].wait()

    def logs(self) -> str:
        return "\n".join(path.read_text(errors="replace")[-3000:]
                         for path in self.folder.glob("*.log"))

    def stop(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


@pytest.fixture
def cluster(tmp_path):
    folder = tmp_path / "cluster"
    folder.mkdir()
    started = Cluster(folder)
    try:
        yield started
    finally:
        started.stop()


def gradebook(out: Path) -> list[dict[str, str]]:
    with open(out / "gradebook.csv", newline="") as f:
        return list(csv.DictReader(f))


def batch(folder: Path, out: Path, bank: Path, key: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "gradcheck", "grade-batch", str(folder), "--out", str(out),
            "--exercises", str(bank), "--key", str(key), "--timeout", "2",
            "--submission-timeout", "12", *options]


def batch_of_tiny(tmp_path: Path, bank: Path, key: Path,
                  *options: str) -> subprocess.CompletedProcess:
    """A batch of one submission, tests/engines/tiny.py, into tmp_path/out."""
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(ENGINES / "tiny.py", subs / "tiny.py")
    return subprocess.run(batch(subs, tmp_path / "out", bank, key, *options),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.skipif(DASK is None, reason="needs gradcheck[dask]")
def test_a_cluster_that_loses_a_worker_grades_every_submission_once_as_locally(
        twelve, bank_and_key, cluster, tmp_path):
    bank, key = bank_and_key
    scratch = tmp_path / "tmp"  # the workers' temporary folder
    scratch.mkdir()
    cluster.env["TMPDIR"] = str(scratch)
    cluster.add_worker("worker-a")
    cluster.add_worker("worker-b")
    with cluster.client() as client:
        client.wait_for_workers(2, timeout=30)
        names = {address: info["name"]
                 for address, info in client.scheduler_info()["workers"].items()}
        run = subprocess.Popen(batch(twelve, tmp_path / "out", bank, key, "--scheduler",
                                     cluster.address),
                               stderr=subprocess.PIPE, text=True)
        progress = []
        for line in run.stderr:  # after two results, kill a worker while it grades
            progress.append(line)
            if sum(line.startswith("[") for line in progress) == 2:
                break
        deadline = time.monotonic() + 20
        while not (running := {a: keys for a, keys in client.processing().items()
                               if any(not key.endswith("-bank") for key in keys)}):
            assert time.monotonic() < deadline, "no task running"
            time.sleep(0.05)
        lost, keys = next(iter(running.items()))
        interrupted = {key.split("-", 2)[2] for key in keys if not key.endswith("-bank")}
        cluster.kill(names[lost])
    progress += run.stderr.readlines()
    assert run.wait(timeout=120) == 1, "".join(progress)  # hang_import is not graded
    rows = gradebook(tmp_path / "out")
    assert sorted(row["submission"] for row in rows) == sorted(os.listdir(twelve))  # once each
    stamps = {row["submission"]: json.loads(
        (tmp_path / "out" / row["submission"] / "grading.json").read_text()) for row in rows}
    survivor = ({stamp["host"] for stamp in stamps.values()} - {lost}).pop()
    for name in interrupted:  # what the lost worker was grading was graded again elsewhere
        assert stamps[name]["host"] == survivor and stamps[name]["row"]["status"] != "lost"
    assert len({(s["bank_sha256"], s["key_sha256"]) for s in stamps.values()}) == 1
    for row in rows:
        assert "score" in read_results(tmp_path / "out" / row["submission"] / "results.json")
    # nothing left of what the lost worker graded: the submission unpacked and its workers'
    # folders (the bank and key the workers keep stay, in gradcheck-cluster-UID)
    assert [path.name for path in scratch.iterdir()] == [f"gradcheck-cluster-{os.getuid()}"]

    local = subprocess.run(batch(twelve, tmp_path / "local", bank, key, "-j", "2"),
                           capture_output=True, text=True, timeout=300)
    assert local.returncode == 1, local.stderr
    scores = {row["submission"]: (row["status"], row["score"]) for row in rows}
    assert scores == {row["submission"]: (row["status"], row["score"])
                      for row in gradebook(tmp_path / "local")}
    assert scores["ref"] == scores["good0.py"] == scores["good4"] == ("graded", "7")
    assert scores["hang_import.py"] == ("timeout", "0")
    assert all(status == "graded" and float(score) < 7
               for name, (status, score) in scores.items() if name in BUGGY), scores


def engines_below(pid: int) -> list[int]:
    """The engine workers (sandboxed processes that import a submission) below `pid`."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            for task in os.listdir(f"/proc/{parent}/task"):
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    todo += [int(child) for child in f.read().split()]
            with open(f"/proc/{parent}/cmdline", "rb") as f:
                if b"gradcheck.engine.worker" in f.read() and alive(parent):
                    found.append(parent)
        except (FileNotFoundError, ProcessLookupError):  # it ended meanwhile
            continue
    return found


@pytest.mark.slow
@pytest.mark.skipif(DASK is None, reason="needs gradcheck[dask]")
def test_an_interrupted_batch_stops_what_its_workers_were_grading(tmp_path, bank_and_key,
                                                                  cluster):
    """Dask cannot stop a task that runs; the task's grading sees that the client let it go and
    stops itself, rather than hold its worker thread (which a resumed batch waits for) until
    the submission timeout."""
    bank, key = bank_and_key
    cluster.add_worker("w")
    hanging = tmp_path / "hanging"
    hanging.mkdir()
    shutil.copy(ENGINES / "hang_import.py", hanging / "hang_import.py")
    run = subprocess.Popen(batch(hanging, tmp_path / "stopped", bank, key, "--scheduler",
                                 cluster.address, "--submission-timeout", "600"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not engines_below(cluster.workers["w"].pid):
            assert time.monotonic() < deadline and run.poll() is None, cluster.logs()
            time.sleep(0.2)
        run.terminate()
        err = run.communicate(timeout=60)[1]
    finally:
        run.kill()
    assert run.returncode == 128 + signal.SIGTERM, err
    deadline = time.monotonic() + 30  # 600 s had the grading gone on to its timeout
    while engines_below(cluster.workers["w"].pid):
        assert time.monotonic() < deadline, cluster.logs()
        time.sleep(0.2)
    done = batch_of_tiny(tmp_path, bank, key, "--scheduler", cluster.address)
    assert done.returncode == 0 and gradebook(tmp_path / "out")[0]["status"] == "graded", (
        done.stderr)


@pytest.mark.slow
@pytest.mark.skipif(DASK is None, reason="needs gradcheck[dask]")
def test_a_submission_whose_every_worker_is_lost_is_reported_not_graded(
        twelve, bank_and_key, tmp_path):
    """With no retry allowed, killing the only worker while it grades loses that submission:
    its row says so (status lost, exit status 1); the batch says it waits for a worker, and a
    new worker grades the rest."""
    bank, key = bank_and_key
    (tmp_path / "strict").mkdir()
    started = Cluster(tmp_path / "strict", allowed_failures=0)
    try:
        started.add_worker("only")
        with started.client() as client:
            client.wait_for_workers(1, timeout=30)
            run = subprocess.Popen(batch(twelve, tmp_path / "out", bank, key, "--scheduler",
                                         started.address), stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 60
            while not (running := [k for keys in client.processing().values() for k in keys
                                   if not k.endswith("-bank")]):
                assert time.monotonic() < deadline, "no task running"
                time.sleep(0.05)
            started.kill("only")
            said = []  # the batch says the cluster has no worker left, then that one joined
            silent = threading.Timer(120, run.kill)  # should it wait without a word for ever
            silent.start()
            for line in run.stderr:
                said.append(line)
                if "has no worker now: the tasks wait for one to join" in line:
                    break
            started.add_worker("second")
        err = "".join(said) + run.communicate(timeout=120)[1]
        silent.cancel()
    finally:
        started.stop()
    assert run.returncode == 1, err
    assert f"the cluster at {started.address} has 1 workers again" in err
    rows = {row["submission"]: row for row in gradebook(tmp_path / "out")}
    assert len(rows) == 12
    lost = [name for name, row in rows.items() if row["status"] == "lost"]
    # what the worker held when it died: the grading it ran, and those queued behind it
    assert running[0].split("-", 2)[2] in lost and len(lost) <= 3, err
    for name in lost:
        assert rows[name]["score"] == "0"
        assert "not graded (worker lost)" in read_results(
            tmp_path / "out" / name / "results.json")["output"]
    assert "not graded (worker lost)" in err
    assert {row["status"] for name, row in rows.items() if name not in lost} == {
        "graded", "timeout"}


def test_a_batch_without_a_scheduler_never_imports_dask(tmp_path, bank_and_key):
    bank, key = bank_and_key
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(ENGINES / "tiny.py", subs / "tiny.py")
    script = ("import sys\nfrom gradcheck.cli import main\n"
              f"code = main({batch(subs, tmp_path / 'out', bank, key)[3:]!r})\n"
              "assert code == 0, code\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert gradebook(tmp_path / "out")[0]["status"] == "graded"


@as_another_user
@pytest.mark.slow
@pytest.mark.skipif(DASK is None, reason="needs gradcheck[dask]")
def test_on_a_cluster_each_worker_thread_grades_as_a_user_of_its_own(bank_and_key, cluster,
                                                                    open_folder):
    """--worker-user on two Dask workers: each submission's worker runs as a uid from UID up,
    never root, the two worker threads as two users; the engine that reads the answer key from
    where the workers keep it earns what the same engine earns with no key at all, and an
    honest one every point."""
    bank, key = bank_and_key
    folder = open_folder / "submissions"
    folder.mkdir()
    place = (Path(tempfile.gettempdir()) / f"gradcheck-cluster-{os.getuid()}"
             / (bank_digest([bank])[:16] + file_digest(key)[:16]))  # cluster._places
    key_reader(folder / "reader.py", place / "key.json")
    key_reader(folder / "blind.py", open_folder / "no-such-key.json")
    for number in range(4):
        (folder / f"honest{number}.py").write_text(
            f"import sys\nsys.path.append({str(ENGINES)!r})\nfrom tiny import tensor, no_grad\n")
    record_uids(folder, open_folder / "uids")
    cluster.add_worker("worker-a")
    cluster.add_worker("worker-b")
    with cluster.client() as client:
        client.wait_for_workers(2, timeout=30)
    run = subprocess.run(batch(folder, open_folder / "out", bank, key, "--scheduler",
                               cluster.address, "--worker-user", str(UID), "--worker-python",
                               PYTHON), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr + cluster.logs()
    scores = {row["submission"]: float(row["score"]) for row in gradebook(open_folder / "out")}
    assert scores["reader.py"] == scores["blind.py"] < 7
    assert all(scores[f"honest{number}.py"] == 7 for number in range(4)), scores
    assert (place / "key.json").is_file()  # where the reader looked: the key was there
    seen = uids_recorded(open_folder / "uids")
    assert sorted(seen) == sorted(os.listdir(folder)) and all(seen.values())
    uids = set().union(*seen.values())
    hosts = {json.loads((open_folder / "out" / name / "grading.json").read_text())["host"]
             for name in os.listdir(folder)}
    assert len(uids) == len(hosts) and min(uids) >= UID, uids  # a uid per worker thread


@pytest.mark.skipif(DASK is None, reason="needs gradcheck[dask]")
def test_an_address_where_no_scheduler_answers_is_refused_with_what_to_give(monkeypatch):
    """A malformed address, a closed port, and a port where another server listens (the
    dashboard's, next to the scheduler's) each end the batch with the address to give: a Dask
    client raised a traceback for the first, and waited without end on the last."""
    from gradcheck.course import cluster
    from gradcheck.grading.plan import GraderError

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 1)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = f"tcp://127.0.0.1:{closed.getsockname()[1]}"
    with socket.socket() as silent:  # accepts connections, never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        other = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        for address, why in [("garbage", "not the address of a Dask scheduler"),
                             ("http://127.0.0.1:8786", "not the address of a Dask scheduler"),
                             (nobody, "cannot reach the Dask scheduler"),
                             (other, "nothing there answered as a Dask scheduler within 1 s")]:
            with pytest.raises(GraderError, match="tcp://HOST:8786") as refused:
                cluster._connect(address)
            assert f"--scheduler {address}: {why}" in str(refused.value)


@pytest.mark.skipif(DASK is None, reason="needs gradcheck[dask]")
def test_a_batch_that_cannot_reach_its_scheduler_writes_no_gradebook(tmp_path, bank_and_key):
    """A batch that stops before any submission is graded leaves no gradebook of no row, which
    an instructor could upload as everyone's grade."""
    bank, key = bank_and_key
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = f"tcp://127.0.0.1:{closed.getsockname()[1]}"
    done = batch_of_tiny(tmp_path, bank, key, "--scheduler", nobody)
    assert done.returncode == 2 and "cannot reach the Dask scheduler" in done.stderr, done.stderr
    assert not (tmp_path / "out" / "gradebook.csv").exists()


def test_a_key_that_does_not_hold_an_exercise_as_it_is_is_refused_for_a_cluster(tmp_path,
                                                                                bank_and_key):
    """On one machine an exercise changed since the key was built is graded live; a cluster's
    workers need neither torch nor jax, and would grade it without them, so the batch stops
    before anything is sent and says how to build the key again."""
    bank, key = bank_and_key
    bank = Path(shutil.copytree(bank, tmp_path / "bank"))
    square = bank / "square.exercise.yaml"
    square.write_text(square.read_text() + "# fixed after the deadline\n")
    done = batch_of_tiny(tmp_path, bank, key, "--scheduler", "tcp://127.0.0.1:9")
    assert done.returncode == 2, done.stderr
    assert "exercise square changed since the answer key was built" in done.stderr
    assert f"gradcheck key build --exercises {bank} --seed " in done.stderr


@pytest.mark.skipif(DASK is None, reason="needs gradcheck[dask]")
def test_a_worker_without_gradcheck_stops_the_batch_saying_where_to_install_it(
        tmp_path, bank_and_key, cluster):
    """A `dask worker` run by a Python where gradcheck does not import cannot take the bank;
    the batch stops before it sends a submission and says so, not with Dask's traceback."""
    bank, key = bank_and_key
    missing = tmp_path / "elsewhere" / "gradcheck"
    missing.mkdir(parents=True)
    (missing / "__init__.py").write_text("raise ImportError('not installed here')\n")
    cluster.env["PYTHONPATH"] = str(missing.parent)
    cluster.add_worker("bare")
    with cluster.client() as client:
        client.wait_for_workers(1, timeout=60)
    done = batch_of_tiny(tmp_path, bank, key, "--scheduler", cluster.address)
    assert done.returncode == 2, done.stderr
    assert "could not take the bank (ImportError('not installed here'))" in done.stderr
    assert "install gradcheck[dask], this version, in the Python every `dask worker` runs" in (
        done.stderr)
    assert not (tmp_path / "out" / "gradebook.csv").exists()  # no gradebook of no row


@pytest.mark.skipif(DASK is None, reason="needs gradcheck[dask]")
def test_once_a_batch_ends_no_worker_keeps_its_bank_or_key(tmp_path, bank_and_key, cluster):
    """The bank and key go to the workers as a plugin the scheduler keeps for workers to come;
    once the batch ends the scheduler drops it and each worker removes its machine's copy, so
    that no hidden exercise or answer key is left on a worker machine."""
    bank, key = bank_and_key
    machine = tmp_path / "machine"  # the worker machine's temporary folder
    machine.mkdir()
    cluster.env["TMPDIR"] = str(machine)
    cluster.add_worker("w")
    done = batch_of_tiny(tmp_path, bank, key, "--scheduler", cluster.address)
    assert done.returncode == 0, done.stderr
    assert gradebook(tmp_path / "out")[0]["status"] == "graded"
    with cluster.client() as client:
        kept = client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.worker_plugins))
    assert not [name for name in kept if name.startswith("gradcheck-bank-")]
    private = machine / f"gradcheck-cluster-{os.getuid()}"
    assert private.is_dir()  # the worker wrote the bank there while it graded
    assert not [path for path in private.iterdir() if (path / "exercises").exists()]
    # nor the job slot's server that had the bank loaded, which lived on until the next batch
    deadline = time.monotonic() + 10
    while _servers_of(private) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _servers_of(private) == []


def _servers_of(folder: Path) -> list[int]:
    """The running `gradcheck grade --serve` processes of a bank under `folder`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--serve" in argv and any(str(folder).encode() in arg for arg in argv) and (
                alive(int(pid))):
            found.append(int(pid))
    return found


@pytest.mark.skipif(DASK is None, reason="needs gradcheck[dask]")
def test_a_worker_whose_gradcheck_is_other_code_of_the_same_version_is_not_counted(
        tmp_path, bank_and_key, cluster):
    """The version string alone lets a checkout or a patched copy pass for the client's
    gradcheck; each result carries the sha256 of the code that graded it, and one graded by
    other code is refused (status error), as one of another version is."""
    bank, key = bank_and_key
    import gradcheck

    patched = tmp_path / "elsewhere" / "gradcheck"
    shutil.copytree(Path(gradcheck.__file__).parent, patched,
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(patched / "reports" / "markdown.py", "a") as f:
        f.write("# patched on this worker\n")
    cluster.env["PYTHONPATH"] = str(patched.parent)
    cluster.add_worker("patched")
    done = batch_of_tiny(tmp_path, bank, key, "--scheduler", cluster.address)
    assert done.returncode == 1, done.stderr
    [row] = gradebook(tmp_path / "out")
    assert row["status"] == "error" and row["score"] == "0"
    assert "whose code is not this one's" in read_results(
        tmp_path / "out" / "tiny.py" / "results.json")["output"]
