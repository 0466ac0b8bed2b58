"""`gradcheck grade-batch`: a class's submissions, graded in parallel, gathered in a gradebook.

Each submission is graded by its own `gradcheck grade` process (with its own sandboxed worker),
`-j` at a time, so that nothing a submission does, not even a grader fault or a hang past every
timeout, can reach another one: a process still running after `--submission-timeout` seconds is
killed with everything it started, and the batch goes on. Each submission gets
`OUT/<name>/results.json` (Gradescope's format, written as grading goes) and `grader.log` (what
its grader printed); `OUT/gradebook.csv` has one row per submission, appended as each finishes
and in submission order once the batch is done.

torch and jax answer the same for every submission, so they run once for the whole batch: without
`--key`, an answer key is built first (`OUT/key.json`, see gradcheck/grading/answer_key.py) and every submission
is graded with it and its seed. Without torch or jax installed, submissions are graded live.

`--worker-user UID` runs each submission's worker as a user of its own (the batch must run as
root; docs/security.md): job slot k of `-j N` uses uid UID + k, so no two workers running at once
share a user, whose processes RLIMIT_NPROC counts together.

How one submission is graded, and the `OUT/<name>/grading.json` that says against which bank and
key (their sha256), is gradcheck/course/slots.py's; `--resume` keeps the results whose stamp
names this batch's bank, key and seed. `--scheduler ADDRESS` grades on a Dask cluster's workers
instead (gradcheck/course/cluster.py, the one module that imports Dask).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.util
import io
import os
import queue
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from gradcheck.bank.bundled import bank_dir
from gradcheck.bank.course_file import (BANK_HELP, ENGINE, Course, CourseFileError, course_bank,
                                        describe, key_seed)
from gradcheck.bank.loader import Bank, load_bank
from gradcheck.course.slots import (
    CANNOT_RUN,
    Options,
    Row,
    Running,
    Server,
    Stamp,
    bank_digest,
    file_digest,
    graded_within,
    not_graded,
    results_score,
)
from gradcheck.engine import census, trees, uids
from gradcheck.engine.sandbox import preflight
from gradcheck.grading import answer_key
from gradcheck.grading.grader import DEFAULT_TOTAL_TIMEOUT, GraderError
from gradcheck.grading.score import total
from gradcheck.reports import atomic_write, printable

GRADEBOOK = "gradebook.csv"
#: the answer key a batch builds, in OUT
BUILT_KEY = "key.json"
COLUMNS = ("submission", "score", "max", "status", "time")
#: Exit status when some submission could not be graded (timeout, grader error or crash).
NOT_ALL_GRADED = 1
#: Seconds after which a submission's grading is killed, unless --submission-timeout says.
SUBMISSION_TIMEOUT = 900.0
#: Statuses that --resume grades again: no verdict on the submission (the grader could not run,
#: or the cluster lost every worker that tried it).
REGRADED = ("error", "lost")


def submissions(folder: Path) -> list[Path]:
    """Every `*.py` file and every subfolder of `folder`, hidden ones and caches left out."""
    return sorted(path for path in folder.iterdir()
                  if not path.name.startswith((".", "__"))
                  and (path.is_dir() or path.suffix == ".py"))


def grade_batch(folder: Path, out: Path, *, jobs: int, exercises: list[Path],
                key: Path | None, seed: int | None, timeout: float | None,
                memory_mb: int | None, submission_timeout: float,
                junit: bool = False, worker_user: int | None = None,
                worker_python: str | None = None, course: Course | None = None,
                total_timeout: float | None = None, scheduler: str | None = None,
                resume: bool = False) -> list[Row]:
    """Grade every submission in `folder`; return the gradebook's rows in submission order.

    `junit`: also write `OUT/<name>/junit.xml`, hidden exercises' messages included (for an
    instructor's tools, such as `gradcheck mutants`). `worker_user`: the uid of job slot 0's
    workers (slot k's is `worker_user + k`); `worker_python`: the Python the workers run.
    `course`: the course whose folder the batch runs in, for the line that names the bank.
    `total_timeout`: each grader's `--total-timeout` (default: grade's own).
    `scheduler`: a Dask scheduler's address, whose workers grade instead of this machine
    (gradcheck/course/cluster.py). `resume`: keep the results in OUT that are complete and were
    graded against the same bank, key and seed.
    """
    bank = load_bank(exercises)
    if not bank.exercises:
        raise GraderError("no exercise to grade in " + ", ".join(map(str, exercises)))
    print(describe(exercises, len(bank.exercises), course), file=sys.stderr)
    max_score = total(exercise.points for exercise in bank.exercises)
    # made root's alone for workers of other users: it holds every submission's results
    out.mkdir(parents=True, exist_ok=True, mode=0o700 if worker_user is not None else 0o777)
    if worker_user is not None:
        secret = [*([key] if key else []), *(p for p in exercises if p != bank_dir())]
        _warn_if_open([path for path in secret if _readable_by_others(path)], worker_user,
                      None if scheduler else jobs, "copy answers from them")
        if scheduler is None:  # a Dask worker's machine has its own copies, root's alone
            _warn_if_open([*([folder] if _readable_by_others(folder) else []),
                           *([out] if _enterable_by_others(out) else [])], worker_user, jobs,
                          "read other submissions and their results there")
    key, seed = _answer_key(bank, out, exercises, key, seed, course, resume,
                            cluster=scheduler is not None)
    options = Options(seed=seed, exercises=exercises, key=key, timeout=timeout,
                      memory_mb=memory_mb, total_timeout=total_timeout,
                      submission_timeout=submission_timeout, junit=junit,
                      worker_python=worker_python)
    digests = (bank_digest(exercises), file_digest(key))
    entries = submissions(folder)
    engine = course.submission if course else ENGINE
    found = {entry.name: graded_within(entry, engine) for entry in entries}
    # OUT/<name>/ holds a submission's reports: one named as OUT's own files cannot have them
    refused = {entry.name: Row(entry.name, 0.0, max_score, "error", 0.0,
                               f"not graded: OUT/{entry.name} is the batch's own; rename it")
               for entry in entries if entry.name in (GRADEBOOK, BUILT_KEY)}
    refused |= {entry.name: Row(entry.name, 0.0, max_score, "error", 0.0,
                                f"not graded: a folder with neither __init__.py, {engine} nor "
                                f"{engine.removesuffix('.py')}/ (found: {_listing(entry)}); put "
                                f"the engine in {entry.name}/{engine}, or make the folder a "
                                "package")
                for entry in entries if found[entry.name] is None and entry.name not in refused}
    within = {name: graded for name, graded in found.items() if graded is not None}
    for row in refused.values():
        print(f"{shown_name(row.submission)}: {row.note}", file=sys.stderr)
        if row.submission not in (GRADEBOOK, BUILT_KEY):  # OUT/<name> is one of OUT's files
            (out / row.submission).mkdir(exist_ok=True)
            not_graded(row, out / row.submission, row.note)
    kept = (_complete([e for e in entries if e.name not in refused], out, digests, seed)
            if resume else {})
    rows = {**refused, **kept}
    todo = [entry for entry in entries if entry.name not in rows]
    where = f"on the cluster at {scheduler}" if scheduler else f"{jobs} at a time"
    print(f"grading {len(todo)} submission{'s' * (len(todo) != 1)} on {len(bank.exercises)} "
          f"exercise{'s' * (len(bank.exercises) != 1)}, seed {seed}, "
          f"{where}" + (f", answer key {key}" if key else ", oracles live")
          + (f"; {len(kept)} kept from {out}" if resume else ""), file=sys.stderr)
    with contextlib.ExitStack() as held:
        if scheduler:
            from gradcheck.course import cluster  # Dask is imported only for a cluster

            # connected, and the bank given to the workers, before OUT has a gradebook
            graded = cluster.grade(held.enter_context(cluster.session(scheduler, options)),
                                   todo, within, out, options, max_score, worker_user, digests)
        else:
            graded = _grade_here(todo, within, out, options, max_score, jobs, worker_user,
                                 digests)
        held.enter_context(contextlib.closing(graded))  # an interruption stops the graders
        # The rows kept, then each row as it comes, appended (rewriting the whole gradebook
        # for each would cost a batch of n submissions n^2 rows); in submission order at the end.
        _write_gradebook(out / GRADEBOOK, [rows[e.name] for e in entries if e.name in rows])
        with open(out / GRADEBOOK, "a", newline="") as book:
            for done, stamp in enumerate(graded, start=len(rows) + 1):
                row = stamp.row
                rows[row.submission] = row
                stamp.write(out / row.submission)
                book.write(_gradebook_lines([row]))
                book.flush()
                print(f"[{done}/{len(entries)}] {shown_name(row.submission)}: "
                      f"{row.score:g}/{row.max:g} {row.status} in {row.time:.1f} s"
                      + (f" ({row.note})" if row.note else ""), file=sys.stderr)
    _write_gradebook(out / GRADEBOOK, [rows[entry.name] for entry in entries])
    return [rows[entry.name] for entry in entries]


def _grade_here(entries: list[Path], within: dict[str, str], out: Path,
                options: Options, max_score: float, jobs: int, worker_user: int | None,
                digests: tuple[str, str]) -> Iterator[Stamp]:
    """Grade on this machine, `jobs` at a time, each job slot with a long-lived grader of its
    own (`slots.Server`); each result as it comes. `within`: what of each entry is graded."""
    running = Running()
    servers = [Server(options.command(), running) for _ in range(jobs)]
    free: queue.SimpleQueue[int] = queue.SimpleQueue()  # the job slots free now
    for slot in range(jobs):
        free.put(slot)

    def grade(entry: Path) -> Stamp:
        slot = free.get()
        try:
            user = None if worker_user is None else worker_user + slot
            try:
                row = servers[slot].grade(entry, out / entry.name, max_score, options, user,
                                          within=within[entry.name])
            except Exception as error:  # a fault of gradcheck's: this row only, not the batch
                row = Row(entry.name, 0.0, max_score, "error", 0.0,
                          f"not graded: the grader failed ({type(error).__name__}: {error})")
                (out / entry.name).mkdir(parents=True, exist_ok=True)
                not_graded(row, out / entry.name, row.note)
            return Stamp(row, *digests, seed=options.seed)
        finally:
            # the slot's uid serves the next submission only once nothing of it runs
            if worker_user is not None and not census.kill_user(worker_user + slot):
                print(f"warning: processes of uid {worker_user + slot} survive SIGKILL",
                      file=sys.stderr)
            free.put(slot)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(grade, entry) for entry in entries]
        try:
            for future in as_completed(futures):
                yield future.result()
        finally:  # on an interruption: start no more graders, kill those running
            for future in futures:
                future.cancel()
            running.stop()
            for server in servers:
                server.close()


def _complete(entries: list[Path], out: Path, digests: tuple[str, str],
              seed: int) -> dict[str, Row]:
    """The rows of the submissions that --resume keeps: graded to the end, against the same
    bank, key and seed, their results file still there and whole (its score the row's)."""
    kept = {}
    for entry in entries:
        stamp = Stamp.read(out / entry.name)
        if (stamp is not None and (stamp.bank_sha256, stamp.key_sha256) == digests
                and stamp.seed == seed and stamp.row.status not in REGRADED
                and stamp.row.submission == entry.name
                and results_score(out / entry.name / "results.json") == stamp.row.score):
            kept[entry.name] = stamp.row
    return kept


def _answer_key(bank: Bank, out: Path, exercises: list[Path], key: Path | None,
                seed: int | None, course: Course | None, resume: bool = False,
                cluster: bool = False) -> tuple[Path | None, int]:
    """The key to grade with and its seed: the given one, checked, or, resuming, the one an
    earlier run built if it still fits the bank, or one built now, with the seed `gradcheck key
    build` would take (--seed, else the course's, else a new one). On one machine, an exercise
    the given key does not hold as it is is graded live; a `cluster`'s workers grade with the
    key alone (they need neither torch nor jax), so there such a key is refused."""
    built = out / BUILT_KEY
    if key is None and resume and built.is_file():
        try:
            earlier = answer_key.load(built)
        except answer_key.KeyFileError:
            earlier = None
        if earlier and not earlier.stale(bank) and seed in (None, earlier.seed):
            print(f"resuming with the answer key {built}", file=sys.stderr)
            key = built
    if key is not None:
        loaded = answer_key.load(key)
        if seed is not None and seed != loaded.seed:
            raise GraderError(f"the answer key {key} was built with seed {loaded.seed}, not "
                              f"{seed}; leave out --seed or build a key with seed {seed}")
        stale = loaded.stale(bank)
        if stale:
            more = f" (and {len(stale) - 1} more)" if len(stale) > 1 else ""
            rebuild = ("gradcheck key build " + " ".join(f"--exercises {p}" for p in exercises)
                       + f" --seed {loaded.seed} --out {key}")
            if cluster:
                raise GraderError(f"{stale[0]}{more}: a cluster's workers grade with the answer "
                                  f"key alone, so build it again for this bank: {rebuild}")
            # one line, not one per exercise: a key built for another bank misses them all
            print(f"warning: {stale[0]}{more}: graded live, torch and jax imported by every "
                  f"grader; build the key again for this bank: {rebuild}", file=sys.stderr)
        return key, loaded.seed
    seed, why = key_seed(seed, course)
    command = [sys.executable, "-m", "gradcheck", "key", "build", "--seed", str(seed),
               "--out", str(built)]
    for path in exercises:
        command += ["--exercises", str(path)]
    print(f"running torch and jax once for the whole batch: building an answer key, seed {seed} "
          f"({why})", file=sys.stderr)
    built.unlink(missing_ok=True)
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if not built.is_file():  # torch or jax missing, or a fault: the graders run them themselves
        print(f"{done.stderr.strip()}\nno answer key: every submission is graded live",
              file=sys.stderr)
        return None, seed
    return built, seed


def _listing(folder: Path, most: int = 20, looked: int = 1000) -> str:
    """The files under `folder`, as a student would look for the one they meant to submit: the
    first `most` in order of the first `looked` found, caches and hidden files left out (links
    not followed); or "nothing"."""
    names: list[str] = []
    for top, folders, files in os.walk(folder):
        folders[:] = [name for name in folders if not name.startswith(".")
                      and name != "__pycache__"]
        names += [os.path.relpath(os.path.join(top, name), folder) for name in files
                  if not name.startswith(".")]
        if len(names) >= looked:
            break
    names.sort()
    shown = ", ".join(printable(name, one_line=True) for name in names[:most])
    return (shown + (", ..." if len(names) > most else "")) or "nothing"


def _warn_if_open(paths: list[Path], worker_user: int, jobs: int | None, risk: str) -> None:
    """Warn, once, that the workers' users may read `paths`, which a submission must not: the
    answer key and exercises; the submissions and their results. `jobs`: the job slots here, or
    None on a cluster, whose worker threads each claim a uid from `worker_user` up."""
    open_ = [str(path) for path in paths]
    if open_:
        users = (f"uid {worker_user} and up, one per Dask worker thread" if jobs is None else
                 f"uid {worker_user}" + (f" to {worker_user + jobs - 1}" if jobs > 1 else ""))
        print(f"warning: the workers' users ({users}) may read {', '.join(open_)}: a submission "
              f"could {risk}. Make them root's alone: chmod go-rwx {' '.join(open_)} "
              "(docs/security.md)", file=sys.stderr)


def _enterable_by_others(folder: Path) -> bool:
    """Whether a worker's user may enter `folder`, and so read the reports written into it."""
    folder = folder.resolve()
    return all(_mode(place) & stat.S_IXOTH for place in (folder, *folder.parents))


def _readable_by_others(path: Path) -> bool:
    """Whether a user who neither owns `path` nor is in its group (a worker's user) may read it,
    or a file under it: each folder on the way must let others in, the file let them read."""
    path = path.resolve()
    if not all(_mode(folder) & stat.S_IXOTH for folder in path.parents):
        return False
    if not path.is_dir():
        return bool(_mode(path) & stat.S_IROTH)
    for folder, subfolders, files in trees.walk(path):
        if not _mode(Path(folder)) & stat.S_IXOTH:
            subfolders.clear()  # others cannot enter it: nothing below it is theirs to read
        elif any(_mode(Path(folder, name)) & stat.S_IROTH for name in files):
            return True
    return False


def _mode(path: Path) -> int:
    try:
        return path.stat().st_mode
    except OSError:  # a broken link: nothing to read
        return 0


def _write_gradebook(path: Path, rows: list[Row]) -> None:
    atomic_write(path, _gradebook_lines([COLUMNS, *rows]))


def _gradebook_lines(rows: list[Row | tuple[str, ...]]) -> str:
    """CSV lines of the gradebook: rows, or the header (a tuple)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in rows:
        writer.writerow(row if isinstance(row, tuple) else [
            _cell(row.submission), f"{row.score:g}", f"{row.max:g}", row.status,
            f"{row.time:.2f}"])
    return buffer.getvalue()


def shown_name(name: str) -> str:
    """A submission's name on one line, escaped as `printable` escapes it (a name that is not
    UTF-8 could not be written at all), its own backslashes doubled first: two names never show
    alike (a newline and the four characters `\\x0a`)."""
    return printable(name.replace("\\", "\\\\"), one_line=True)


def _cell(name: str) -> str:
    """A submission's name as the gradebook holds it: shown as `shown_name` shows it, and never
    a formula. A spreadsheet runs a cell that begins with = + - or @ (`=HYPERLINK(...)`); a
    quote before it, as spreadsheets themselves write a text that looks like one, keeps it text.
    A semicolon is written `\\x3b`: a spreadsheet whose locale separates a CSV's fields with it
    would begin a cell after it, which the quote could not reach."""
    name = shown_name(name).replace(";", "\\x3b")
    return f"'{name}" if name.startswith(("=", "+", "-", "@")) else name


# --- the command --------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """`gradcheck grade-batch`."""
    p = subparsers.add_parser(
        "grade-batch", help="grade every submission in a folder, in parallel",
        description="Grade each *.py file and each subfolder (a package) of SUBMISSIONS_DIR as "
                    "one submission, JOBS at a time; write OUT/<submission>/results.json and "
                    "OUT/gradebook.csv (submission, score, max, status, time). Status is graded, "
                    "timeout, error (the grader could not run), crashed, or lost (on a "
                    "cluster: every worker that tried it was lost).")
    p.add_argument("folder", metavar="SUBMISSIONS_DIR", type=Path)
    p.add_argument("-j", "--jobs", type=job_count, default=len(os.sched_getaffinity(0)),
                   help="submissions graded at once (default: the number of CPUs)")
    p.add_argument("--out", metavar="DIR", type=Path, required=True,
                   help="where the results and the gradebook go")
    p.add_argument("--key", metavar="FILE", type=Path,
                   help="an answer key (default: one is built for the batch in OUT/key.json)")
    p.add_argument("--exercises", metavar="DIR", type=Path, action="append", help=BANK_HELP)
    p.add_argument("--seed", type=int, help="the seed of sampled points (default: the key's, or "
                                            "a new one)")
    p.add_argument("--timeout", metavar="S", type=float,
                   help="seconds per exercise, unless an exercise says")
    p.add_argument("--memory-mb", metavar="MB", type=int, help="memory limit of each worker")
    p.add_argument("--total-timeout", metavar="S", type=float,
                   help="seconds each submission's grading may take before every check left "
                        f"fails at once (default {DEFAULT_TOTAL_TIMEOUT:g}); keep it under "
                        "--submission-timeout, which kills the grader")
    p.add_argument("--submission-timeout", metavar="S", type=float,
                   default=SUBMISSION_TIMEOUT,
                   help="kill a submission's grading after S seconds (default %(default)g)")
    p.add_argument("--worker-user", metavar="UID", type=user_id,
                   help="run the workers as users of their own (the batch must run as root): "
                        "job slot k of -j N uses uid UID+k, as no two workers running at once "
                        "may share a user; keep the key and exercises unreadable by them "
                        "(docs/security.md)")
    p.add_argument("--worker-python", metavar="PATH",
                   help="the Python the workers run (default: the grader's own); with "
                        "--worker-user, one those users may run")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="grade on a Dask cluster: the scheduler's address (tcp://HOST:PORT); "
                        "each worker thread is a job slot and -j is not used. Needs "
                        "gradcheck[dask] here and on the workers (docs/instructors.md)")
    p.add_argument("--resume", action="store_true",
                   help="keep the results already in OUT that are complete and were graded "
                        "against the same bank, key and seed; grade the others")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the batch: 0 when every submission was graded, 1 when some were not, 2 on bad input."""
    problem = _argument_problem(args)
    if problem:
        print(f"gradcheck grade-batch: {problem}", file=sys.stderr)
        return CANNOT_RUN
    # A batch stopped by SIGTERM (a scheduler's time limit) stops its graders, as on Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    # a Dask worker's threads claim theirs on their machines
    local = args.worker_user is not None and not args.scheduler
    try:
        exercises, course = course_bank(args.exercises)
        with uids.held(range(args.worker_user, args.worker_user + args.jobs) if local else ()):
            rows = grade_batch(args.folder, args.out, jobs=args.jobs, exercises=exercises,
                               key=args.key, seed=args.seed, timeout=args.timeout,
                               memory_mb=args.memory_mb,
                               submission_timeout=args.submission_timeout,
                               worker_user=args.worker_user, worker_python=args.worker_python,
                               course=course, total_timeout=args.total_timeout,
                               scheduler=args.scheduler, resume=args.resume)
    except uids.InUse as error:
        print(f"gradcheck grade-batch: --worker-user {args.worker_user}: {error}",
              file=sys.stderr)
        return CANNOT_RUN
    except (CourseFileError, GraderError) as error:
        print(f"gradcheck grade-batch: {error}", file=sys.stderr)
        return CANNOT_RUN
    print(f"wrote {args.out / GRADEBOOK}: {len(rows)} submissions, "
          f"{sum(row.status == 'graded' for row in rows)} graded", file=sys.stderr)
    return 0 if all(row.status == "graded" for row in rows) else NOT_ALL_GRADED


def _argument_problem(args: argparse.Namespace) -> str:
    if not args.folder.is_dir():
        return f"{args.folder}: no such folder of submissions"
    for path in args.exercises or []:
        if not path.exists():
            return f"--exercises {path}: no such file or folder"
    if args.key is not None and not args.key.is_file():
        return f"--key {args.key}: no such file"
    if args.out.resolve().is_relative_to(args.folder.resolve()):
        return f"--out {args.out} is inside {args.folder}: its folders would be graded next time"
    if args.scheduler and importlib.util.find_spec("distributed") is None:
        return (f"--scheduler {args.scheduler} needs Dask, which is not installed: install "
                "gradcheck's dask extra (python -m pip install -c constraints.txt '.[dask]' in "
                "its checkout; docs/instructors.md)")
    if args.scheduler:  # the workers' machines, not this one, run the submissions
        return ""
    # each worker reads a copy of its submission made for its uid (slots.private_copy)
    return worker_problem(None, args.worker_user, args.worker_python)


def worker_problem(submission: Path | None, user: int | None, python: str | None) -> str:
    """What is wrong with --worker-user and --worker-python for a submission (None: for the
    worker alone), or "": checked once, before grading, rather than failing in every worker."""
    if python and not os.access(python, os.X_OK):
        return f"--worker-python {python}: no such program"
    if user is not None:
        return preflight(submission, user, python or sys.executable)
    return ""


def job_count(text: str) -> int:
    """A -j value: a whole number of jobs, at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of jobs >= 1")
    return value


def user_id(text: str) -> int:
    """A --worker-user value: a user id, not root's."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a user id >= 1 (not root's 0)")
    return value
