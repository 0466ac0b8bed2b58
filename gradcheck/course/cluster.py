"""`gradcheck grade-batch --scheduler ADDRESS`: a batch graded by a Dask cluster's workers.

Dask is imported here and nowhere else, and this module only when `--scheduler` is given, so a
batch on one machine neither needs nor imports it (`pip install 'gradcheck[dask]'` adds it).

The client (the machine that runs `grade-batch`) loads the bank, builds or checks the answer key
as on one machine, then sends the cluster the bytes of every exercise file and of the key once
(a worker plugin, which the scheduler keeps and gives every worker, those that join later too,
until the batch ends: then each worker removes its copy) and one task per submission, which
carries the submission's files (a tar archive: the workers need not share a file system with
the client). On a worker, a task writes the bank and key into a private folder named for their
digests and the batch (one per worker machine, batch and bank, 0700, the key 0600), grades the
submission as on one machine (`slots.Server`: a `gradcheck grade` process forked for it by the
worker thread's long-lived grader, with its own sandboxed worker and the same limits; the Dask
worker's own process never imports a submission, nor even gradcheck's grader) and returns its
reports' bytes with the sha256 of the bank and key it read there. The client writes the reports
into OUT and refuses a result graded against other bytes. (Scattered data would be lost for good
with the last worker that held it; a task's result is computed again.)

A batch that stops (Ctrl-C) cancels its tasks: those waiting never start, and a grading that
runs sees its task cancelled within a second and is killed, as at its timeout, so that it does
not hold its worker thread. Faults are Dask's to handle: a task whose worker is lost is run
again on another one (up to the scheduler's `distributed.scheduler.allowed-failures`, 3 by
default); a task that fails on every
try is reported "not graded (worker lost)" with status `lost`, never as a silent 0. Each
submission is one Dask future, so it has exactly one row, whichever try's result the client got.
With `--worker-user UID`, each Dask worker thread claims a uid of its own from UID up, with a
lock file that the other workers of its machine see, so no two gradings running at once on one
machine share a user.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import io
import os
import shutil
import socket
import sys
import tarfile
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from distributed import Client, WorkerPlugin, as_completed, get_worker
from distributed.scheduler import KilledWorker

import gradcheck
from gradcheck import __version__
from gradcheck.bank.loader import exercise_files
from gradcheck.course import slots
from gradcheck.course.slots import Options, Row, Stamp
from gradcheck.engine import scratch, trees, uids
from gradcheck.grading.plan import GraderError

#: Seconds to wait for the scheduler to answer when the batch starts.
CONNECT_TIMEOUT = 30
#: Seconds between two looks at how many workers the cluster has, while the batch waits.
WATCH = 2.0
#: Retries of a task that raised (not of one whose worker was lost: the scheduler decides those).
RETRIES = 1
#: The most bytes of one submission's archive; a larger submission is not sent.
LARGEST = 20 * 2**20
#: How many uids above --worker-user the worker threads of one machine may claim.
UIDS = 4096


@dataclasses.dataclass
class Session:
    """A batch's hold on the cluster: its client, and the bank it gave the workers."""

    client: Client
    batch: str
    bank: dict[str, Any]


@contextlib.contextmanager
def session(address: str, options: Options) -> Iterator[Session]:
    """Connect to the scheduler at `address` and give every worker the bank and key, or raise a
    GraderError that says what to do, before any submission is sent (and before the batch
    writes a gradebook); at the end, take the bank back and let the scheduler go."""
    client = _connect(address)
    finished = threading.Event()
    plugin: BankPlugin | None = None
    try:
        workers = len(client.scheduler_info().get("workers", {}))
        print(f"the cluster at {address} has {workers} workers now" +
              ("; the tasks wait for the first to join" if not workers else ""), file=sys.stderr)
        threading.Thread(target=_watch_workers, args=(client, address, workers, finished),
                         name="gradcheck-workers", daemon=True).start()
        batch = uuid.uuid4().hex[:8]
        payload = _bank_payload(options, batch)
        plugin = BankPlugin(payload)
        try:
            client.register_plugin(plugin)
        except Exception as error:  # a worker could not unpickle it: it lacks gradcheck
            raise GraderError(
                f"a Dask worker of {address} could not take the bank ({error}); install "
                "gradcheck[dask], this version, in the Python every `dask worker` runs (the "
                "worker's log says what it lacked)") from error
        yield Session(client, batch, _reference(payload))
    finally:
        finished.set()
        _forget(client, plugin)
        client.close()


def grade(cluster: Session, entries: list[Path], within: dict[str, str], out: Path,
          options: Options, max_score: float, worker_user: int | None,
          digests: tuple[str, str]) -> Iterator[Stamp]:
    """Grade `entries` (of each, the file `within` it names, if any) on the `cluster` a session
    holds; each submission's stamp as its result comes in, its reports in OUT/<name>/ by then."""
    futures: dict[Any, Path] = {}
    try:
        for entry in entries:
            try:
                archive = _archive(entry)
            except (trees.CopyRefused, OSError) as error:
                why = (str(error) if isinstance(error, trees.CopyRefused)
                       else error.strerror or str(error))
                row = Row(entry.name, 0.0, max_score, "error", 0.0,
                          f"not sent to the cluster: {why}")
                (out / entry.name).mkdir(parents=True, exist_ok=True)
                slots.not_graded(row, out / entry.name, row.note)
                yield Stamp(row, *digests, seed=options.seed)
                continue
            future = cluster.client.submit(
                grade_task, entry.name, within[entry.name], archive, cluster.bank,
                options, max_score, worker_user, key=f"gradcheck-{cluster.batch}-{entry.name}",
                pure=False, retries=RETRIES)
            futures[future] = entry
        for future in as_completed(futures):
            yield _collect(future, futures[future], out, options, max_score, digests)
    finally:  # on an interruption nothing more starts, and what runs stops (`_cancelled`)
        cluster.client.cancel(list(futures))


def _forget(client: Client, plugin: BankPlugin | None) -> None:
    """Take the bank back from the cluster once the batch ends: the scheduler no longer keeps
    it for workers to come, and each worker removes its machine's copy (`teardown`), so that no
    hidden exercise or answer key stays on a worker machine after the batch."""
    if plugin is None:
        return
    try:
        client.unregister_worker_plugin(plugin.name)
    except Exception:  # the scheduler is gone: its workers, and what it kept, with it
        pass


def _watch_workers(client: Client, address: str, workers: int,
                   finished: threading.Event) -> None:
    """Say when the cluster is left with no worker while the batch waits (its tasks wait for
    one to join, and nothing else would show), and when workers join again."""
    while not finished.wait(WATCH):
        try:
            now = len(client.scheduler_info().get("workers", {}))
        except Exception:  # the batch is closing its client, or the scheduler is gone
            return
        if workers and not now:
            print(f"the cluster at {address} has no worker now: the tasks wait for one to join "
                  f"(python -m dask worker {address})", file=sys.stderr)
        elif now and not workers:
            print(f"the cluster at {address} has {now} workers again", file=sys.stderr)
        workers = now


def _connect(address: str) -> Client:
    """The batch's client of the scheduler at `address`, or a GraderError that says what to do.
    A Dask client waits without end on a port where another server answers (the scheduler's
    dashboard, next to it), so the connection is given CONNECT_TIMEOUT and a little more."""
    made: dict[str, Any] = {}

    def connect() -> None:
        try:
            made["client"] = Client(address, timeout=CONNECT_TIMEOUT)
        except Exception as error:  # each kind is told apart below
            made["error"] = error

    attempt = threading.Thread(target=connect, name="gradcheck-connect", daemon=True)
    attempt.start()
    attempt.join(CONNECT_TIMEOUT + 5)
    error = made.get("error")
    if "client" in made:
        return made["client"]
    what = "give the address `dask scheduler` prints, such as tcp://HOST:8786"
    if attempt.is_alive():
        raise GraderError(f"--scheduler {address}: nothing there answered as a Dask scheduler "
                          f"within {CONNECT_TIMEOUT} s (the dashboard's port, or another "
                          f"server's?); {what}")
    if isinstance(error, ValueError):
        raise GraderError(f"--scheduler {address}: not the address of a Dask scheduler "
                          f"({error}); {what}") from error
    if isinstance(error, (OSError, TimeoutError)):
        raise GraderError(f"--scheduler {address}: cannot reach the Dask scheduler ({error}); "
                          "start it with `dask scheduler`, then give the address it prints, "
                          "such as tcp://HOST:8786") from error
    raise GraderError(f"--scheduler {address}: what answers there is not a Dask scheduler "
                      f"({type(error).__name__}: {error}); {what}") from error


def _collect(future: Any, entry: Path, out: Path, options: Options, max_score: float,
             digests: tuple[str, str]) -> Stamp:
    """A task's result written into OUT/<name>/, as a stamp; a lost or failed task's row."""
    folder = out / entry.name
    folder.mkdir(parents=True, exist_ok=True)
    for name in (*slots.REPORTS, slots.STAMP):
        (folder / name).unlink(missing_ok=True)
    try:
        result = future.result()
    except KilledWorker as error:
        return _not_graded(entry, folder, max_score, "lost", "not graded (worker lost)",
                           "it was not graded (worker lost): every Dask worker that took it "
                           f"was lost ({str(error).split('. ')[0]})", digests, options)
    except Exception as error:  # the task raised on every try: a fault of the worker's machine
        return _not_graded(entry, folder, max_score, "error",
                           f"not graded: the task failed ({type(error).__name__}: {error})",
                           "the task failed on the cluster", digests, options)
    for name, data in result["files"].items():
        (folder / name).write_bytes(data)
    row = Row(**result["row"])
    if (result["bank_sha256"], result["key_sha256"]) != digests:
        row.status, row.score = "error", 0.0
        row.note = (f"graded on {result['host']} against another bank or key than this one's "
                    "(their sha256 differ); not counted")
        slots.not_graded(row, folder, row.note)
    elif result["gradcheck"] != __version__:
        row.status, row.score = "error", 0.0
        row.note = (f"graded by gradcheck {result['gradcheck']} on {result['host']}, not "
                    f"{__version__}; install the same version on every worker")
        slots.not_graded(row, folder, row.note)
    elif result.get("code_sha256") != code_digest():
        row.status, row.score = "error", 0.0
        row.note = (f"graded on {result['host']} by a gradcheck {__version__} whose code is not "
                    "this one's (a checkout or a patch on one side?); install the same gradcheck "
                    "on every worker")
        slots.not_graded(row, folder, row.note)
    return Stamp(row, result["bank_sha256"], result["key_sha256"], options.seed, result["host"])


def _not_graded(entry: Path, folder: Path, max_score: float, status: str, note: str, why: str,
                digests: tuple[str, str], options: Options) -> Stamp:
    row = Row(entry.name, 0.0, max_score, status, 0.0, note)
    slots.not_graded(row, folder, why)
    return Stamp(row, *digests, seed=options.seed)


class BankPlugin(WorkerPlugin):
    """The bank and key's bytes, given to every worker, present or to come, by the scheduler,
    which keeps them: each writes them on its machine as it starts (`setup`)."""

    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = payload
        self.name = f"gradcheck-bank-{payload['name']}"

    def setup(self, worker: Any) -> None:
        _materialise(self.payload)

    def teardown(self, worker: Any) -> None:
        _let_go(self.payload["name"])
        shutil.rmtree(_private_folder() / self.payload["name"], ignore_errors=True)


def _reference(payload: dict[str, Any]) -> dict[str, Any]:
    """What a task needs to find the bank on its worker: the payload without its bytes."""
    return {"name": payload["name"], "key": payload["key"] is not None,
            "roots": [{"folder": root["folder"], "files": dict.fromkeys(root["files"], b"")}
                      for root in payload["roots"]]}


def _bank_payload(options: Options, batch: str) -> dict[str, Any]:
    """The exercise files and the key, as bytes, with the places the bank's digest counts; named
    for their digests and the `batch`, so that a batch that ends removes its own copy only."""
    roots = []
    for root in options.exercises:
        files = {(path.relative_to(root) if root.is_dir() else Path(path.name)).as_posix():
                 path.read_bytes() for path in exercise_files([root])}
        roots.append({"folder": root.is_dir(), "files": files})
    key = options.key.read_bytes() if options.key else None
    return {"roots": roots, "key": key,
            "name": (slots.bank_digest(options.exercises)[:16]
                     + slots.file_digest(options.key)[:16] + f"-{batch}")}


def _archive(entry: Path) -> bytes:
    """A submission's file or folder as a gzip-compressed tar, caches and special files left
    out. Raises `trees.CopyRefused` for one over `LARGEST` bytes (counted before any is read: a
    sparse file can claim terabytes), nested deeper than `trees.COPY_DEPTH` (tarfile recurses),
    or that is no file or folder."""
    if not (entry.is_file() or entry.is_dir()):
        raise trees.CopyRefused(f"{entry.name} is not a file or a folder")
    room = [LARGEST]

    def kept(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = info.name.split("/")
        if "__pycache__" in parts or not (info.isreg() or info.isdir() or info.issym()
                                          or info.islnk()):
            return None  # caches; and FIFOs, sockets and devices, as slots.private_copy does
        if len(parts) > trees.COPY_DEPTH:
            raise trees.CopyRefused(f"it nests folders more than {trees.COPY_DEPTH} deep")
        room[0] -= info.size + tarfile.BLOCKSIZE
        if room[0] < 0:
            raise trees.CopyRefused(f"it is over {LARGEST // 2**20} MB: too large to send")
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(entry, arcname=entry.name, filter=kept)
    return buffer.getvalue()


# --- on a worker --------------------------------------------------------------------------------


def grade_task(name: str, within: str, archive: bytes, payload: dict[str, Any],
               options: Options, max_score: float, worker_user: int | None) -> dict[str, Any]:
    """Grade one submission (the file `within` it, if given) on this Dask worker's machine;
    its reports' bytes and the digests of the bank and key it was graded against, read back
    from the files the grader read."""
    exercises, key = _places(payload)
    if not all(path.exists() for path in exercises):
        raise GraderError(f"the bank {payload['name']} is not on this worker: its plugin failed")
    here = dataclasses.replace(options, exercises=exercises, key=key)
    user = None if worker_user is None else _claimed_uid(worker_user)
    scratch.sweep(scratch.SUBMISSIONS)  # those of a Dask worker of this machine lost mid-task
    work = scratch.make(scratch.SUBMISSIONS)
    try:  # root's alone: a worker of another user grades a copy of its own (slots.Server)
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            tar.extractall(work / "in", filter="data")
        reports = work / "out"
        row = _server(here.command(), payload["name"]).grade(
            work / "in" / name, reports, max_score, here, user, _cancelled(), within)
        files = {report: (reports / report).read_bytes() for report in slots.REPORTS
                 if (reports / report).is_file()}
    finally:
        scratch.remove(work)
    return {"row": dataclasses.asdict(row), "files": files,
            "bank_sha256": slots.bank_digest(exercises), "key_sha256": slots.file_digest(key),
            "host": _host(), "gradcheck": __version__, "code_sha256": code_digest()}


def _cancelled() -> Callable[[], bool]:
    """Whether the client let this task go while it runs (the batch was interrupted, or it
    ended): Dask cannot stop a running task, so its grading asks, and stops itself, rather
    than hold the worker thread a resumed batch waits for until its submission timeout."""
    worker = get_worker()
    key = worker.get_current_task()

    def cancelled() -> bool:
        task = worker.state.tasks.get(key)  # one read of the worker's table, safe off its loop
        return task is None or task.state in ("cancelled", "released", "forgotten")
    return cancelled


@functools.cache
def code_digest() -> str:
    """The sha256 of this gradcheck's code: each .py and .json file of the package, and its
    place in it. A worker whose gradcheck has the same version but other code (a checkout, a
    patch) may grade otherwise, so its results are refused as another version's are."""
    package = Path(gradcheck.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.suffix in (".py", ".json") and "__pycache__" not in path.parts:
            digest.update(f"{path.relative_to(package).as_posix()}\0"
                          f"{slots.file_digest(path)}\n".encode())
    return digest.hexdigest()


_servers = threading.local()
_running = slots.Running()
#: the servers of each batch on this worker, by the bank's name, let go when the batch ends
_of_batch: dict[str, list[slots.Server]] = {}
_batches = threading.Lock()


def _server(command: list[str], batch: str) -> slots.Server:
    """This worker thread's long-lived grader for `command` (the options and bank of `batch`):
    the same from one task to the next of a batch; another batch's is let go."""
    server = getattr(_servers, "server", None)
    if server is None or server.command[:-1] != command:
        if server is not None:
            server.close()
        server = _servers.server = slots.Server(command, _running)
        with _batches:
            _of_batch.setdefault(batch, []).append(server)
    return server


def _let_go(batch: str) -> None:
    """Let the servers of a batch that ended go, without waiting for them: each holds gradcheck,
    the bank and the key loaded (tens of MB), and would otherwise live on until its thread's
    next batch. A grading one of them still runs (a task the batch let go) is killed."""
    with _batches:
        servers = _of_batch.pop(batch, [])
    for server in servers:
        server.let_go()


def _private_folder() -> Path:
    """This machine's folder of banks for this user's Dask workers (0700)."""
    try:
        return scratch.own_folder(f"gradcheck-cluster-{os.getuid()}")
    except PermissionError as error:
        raise GraderError(str(error)) from None


_writing = threading.Lock()


def _materialise(payload: dict[str, Any]) -> None:
    """Write the bank and key of `payload` as files on this machine, once per machine."""
    place = _private_folder() / payload["name"]
    with _writing:
        if not place.is_dir():
            part = Path(tempfile.mkdtemp(dir=place.parent, prefix=".part-"))
            for number, root in enumerate(payload["roots"]):
                for relative, data in root["files"].items():
                    path = part / "exercises" / str(number) / relative
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(data)
            if payload["key"] is not None:
                with os.fdopen(os.open(part / "key.json", os.O_WRONLY | os.O_CREAT, 0o600),
                               "wb") as f:
                    f.write(payload["key"])
            try:
                part.rename(place)  # another worker process of this machine may have won
            except OSError:
                shutil.rmtree(part, ignore_errors=True)


def _places(payload: dict[str, Any]) -> tuple[list[Path], Path | None]:
    """Where `_materialise` wrote the exercises and the key of `payload` on this machine."""
    place = _private_folder() / payload["name"]
    roots = []
    for number, root in enumerate(payload["roots"]):
        folder = place / "exercises" / str(number)
        roots.append(folder if root["folder"] else folder / next(iter(root["files"])))
    return roots, (place / "key.json" if payload["key"] is not None else None)


_claims = threading.local()


def _claimed_uid(base: int) -> int:
    """A uid from `base` up that no other grading thread or gradcheck of this machine holds:
    each worker thread keeps the lock of its own (`gradcheck.engine.uids.take`) for as long as
    it lives."""
    if getattr(_claims, "uid", None) is None:
        for uid in range(base, base + UIDS):
            lock = uids.take(uid)
            if lock is not None:
                _claims.uid, _claims.lock = uid, lock
                break
        else:
            raise GraderError(f"every uid from {base} to {base + UIDS - 1} is in use here")
    return _claims.uid


def _host() -> str:
    try:
        return get_worker().address
    except ValueError:  # not in a worker (a test calling the task directly)
        return socket.gethostname()
