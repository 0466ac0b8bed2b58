"""`gradcheck grade SUBMISSION --watch`: grade again whenever the submission changes, and say what
changed since the last grading ("+3 points: op-mul now passes").

One process does every grading, with torch and jax imported once (`warm_up`): the first
grading runs the oracles in this process's threads (not in a helper process that would import
jax each time); then an answer key of the bank at that grading's seed is built in memory, and
every later grading takes torch's and jax's answers from it, so that a grading after a save
costs only the submission's own work; all that is loaded then is put out of the collector's
reach (`settle`); and while it waits for a change, the next grading's worker
interpreters are started, and they compile the submission as soon as a save is seen, so that
only running it is left of their start. What
changed in points is printed as soon as every score is known, and the report once the feedback
of the failed checks is worked out (`Grader.give_feedback`). Every grading uses the first one's
seed, so that a change in points is a change in the submission, never in the sampled points.
The submission's files (its module, or every .py file of its package) and the exercise files are
polled: a poll of a few files' times costs nothing, and no platform-specific notifier is
needed.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from gradcheck.bank.loader import Bank, exercise_files
from gradcheck.bank.models import SUFFIX
from gradcheck.bank.problems import ExerciseError
from gradcheck.bank.selection import Selection, SelectionError
from gradcheck.engine import sandbox, scratch
from gradcheck.grading import answer_key, fuzzing
from gradcheck.grading.grader import resolve_submission
from gradcheck.grading.results import GradeReport
from gradcheck.grading.workers import details_shown
from gradcheck.reports import by_exercise, points

#: seconds between two looks at the submission's files (a stat each, a few microseconds: a
#: hundred looks a second cost nothing, and a save waits half a look on average)
POLL = 0.01
#: the exercise files too, every this many looks (0.25 s): a bank is a hundred files and more,
#: which change seldom, while a save of the submission waits for the next look
BANK_LOOKS = 25
#: seconds the files must stay the same before grading: an editor may write a file in parts,
#: a few writes within a millisecond (a save in place that truncates first, whose write can
#: come much later, is waited for apart: EMPTIED); a file caught half written all the same is
#: graded again once the rest is written
SETTLE = 0.02
#: seconds a file that was emptied is given to be written: an editor that saves in place
#: truncates the file first, and on a busy machine the write can come a while after that
EMPTIED = 2.0

#: grades a bank at a seed (None: a new one) with an answer key (or None), prints the report;
#: given a function, calls it with the report once the scores are known, before the feedback
Grade = Callable[[Bank, "int | None", "answer_key.Key | None",
                  "Callable[[GradeReport], None] | None"], "GradeReport | None"]


def warm_up(key: object, oracles: Sequence[str] | None) -> None:
    """Import now, once, for every grading to come: what the feedback of a failed random
    program needs (`fuzzing.load_shrinking`; the first failing save would wait for it), and
    torch and jax, those installed that the gradings use (none with an answer key; jax only if
    its oracle is used)."""
    fuzzing.load_shrinking()
    if key is not None:
        return
    for name in ("torch", "jax"):
        used = name == "torch" or oracles is None or name in oracles
        if used and importlib.util.find_spec(name) is not None:
            importlib.import_module(name)


def run(args: argparse.Namespace, bank: Bank, chosen: Selection, grade: Grade,
        out: TextIO = sys.stdout) -> int:
    """Grade now, then again after every change, until Ctrl-C (which `gradcheck` turns into its
    exit status 130)."""
    submission = resolve_submission(args.submission)
    seen = _snapshot(submission, chosen)  # before grading: a save meanwhile is graded next
    report = grade(bank, args.seed, args.key, None)
    seed = report.seed if report is not None else args.seed
    with scratch.folder(scratch.WATCH) as folder:
        oracles = set(args.oracles or ("torch", "jax"))
        try:  # loaded once, for every grading
            key = (answer_key.load(args.key) if args.key else
                   _key(bank, seed, folder / "key.json", out)
                   if oracles & {"torch", "jax"} else None)
        except answer_key.KeyFileError:  # the first grading said why
            return 2
        if key is not None:  # its answers decoded now, not in the first save's grading
            key.prepare(bank, args.oracles)
        settle()
        while True:
            _say(out, f"watching {args.submission} for changes (Ctrl-C stops)")
            _prestart(args, bank)
            seen, changed = _wait_for_change(submission, chosen, seen,
                                             lambda: _precompile(args, submission))
            started = time.monotonic()
            if any(path.name.endswith(SUFFIX) for path in changed):
                try:  # an exercise changed: read the bank again
                    bank = chosen.load(strict=args.strict)
                except (ExerciseError, SelectionError) as error:
                    _say(out, f"cannot load the exercise bank:\n{error}")
                    continue
            _say(out, f"\n{args.submission} changed: grading again (seed {seed})")

            def scored(latest: GradeReport) -> None:
                """The changes in points first: the report follows once its feedback is in."""
                _say(out, "\n".join(changes(report, latest)) + f"\n(scored "
                     f"{time.monotonic() - started:.1f} s after the change; the report follows)")

            latest = grade(bank, seed, key.anew() if key is not None else None, scored)
            if latest is None:  # the grader could not run; it said why
                continue
            _say(out, f"(graded {time.monotonic() - started:.1f} s after the change)")
            report = latest


def settle() -> None:
    """Collect the garbage of the start, then move everything loaded (torch, jax, the bank, the
    answer key: millions of objects) out of the collector's reach for good: a full collection
    would otherwise walk all of it, 0.3 s at a moment no one chooses, in the middle of a
    grading after a save (BENCHMARKS.md). What the gradings make is collected as ever; what is
    frozen and later dropped is freed by its count of references, as any object is."""
    gc.collect()
    gc.freeze()


def _prestart(args: argparse.Namespace, bank: Bank) -> None:
    """Start the next grading's worker interpreters now, while waiting
    (`gradcheck.engine.sandbox.prestart`), so that after a save only the submission's import is
    left of each worker's start: one for the visible exercises and one for the others, if
    there are any, to score them; as many again for the feedback of failed checks. Each parses
    the programs of the exercises whose details are shown meanwhile: any of them may become the
    worker of those, which must never see a hidden exercise."""
    if args.worker_user is None:
        sides = {details_shown(exercise) for exercise in bank.exercises}
        sandbox.prestart(2 * len(sides), args.worker_python or sys.executable,
                         [e.program.spec() for e in bank.exercises if details_shown(e)])


def _precompile(args: argparse.Namespace, submission: Path) -> None:
    """Have the interpreters started ahead compile the submission as it is now, while the
    save settles (`gradcheck.engine.sandbox.precompile`): a worker's import then has only to
    run it."""
    if args.worker_user is None:
        sandbox.precompile([path.resolve() for path in _submission_files(submission)])


def _key(bank: Bank, seed: int | None, path: Path, out: TextIO) -> answer_key.Key | None:
    """An answer key of the bank at `seed`, built once: every grading after the first takes
    torch's and jax's answers from it (an exercise changed since is graded live, as with any
    key), so that only the submission's own work is done again. None if it cannot be built."""
    if seed is None or not bank.exercises:
        return None
    _say(out, "building an answer key in memory, for faster gradings after each change ...")
    try:
        return answer_key.build(bank, seed, path)
    except answer_key.KeyFileError as error:
        _say(out, f"no answer key ({error}); each grading runs the oracles")
        return None


def changes(before: GradeReport | None, after: GradeReport) -> list[str]:
    """What changed in points, exercise by exercise, the largest changes first, then the
    total: "+3 points: op-mul now passes"."""
    old = {e.exercise_id: e for e in by_exercise(before)} if before is not None else {}
    lines: list[tuple[float, str]] = []
    for exercise in by_exercise(after):
        previous = old.get(exercise.exercise_id)
        delta = exercise.score - (previous.score if previous else 0.0)
        if previous is not None and abs(delta) < 1e-9:
            continue
        if previous is None:
            what = f"{exercise.exercise_id} is new, {points(exercise.score)}/" \
                   f"{points(exercise.max_score)}"
        elif exercise.status == "passed":
            what = f"{exercise.exercise_id} now passes"
        elif exercise.score == 0:
            what = f"{exercise.exercise_id} now fails"
        else:
            what = (f"{exercise.exercise_id} now has {points(exercise.score)}/"
                    f"{points(exercise.max_score)}")
        lines.append((delta, f"{'+' if delta >= 0 else '-'}{points(abs(delta))} points: {what}"))
    lines.sort(key=lambda line: -abs(line[0]))
    total = after.score - (before.score if before is not None else 0.0)
    summary = (f"total {points(after.score)}/{points(after.max_score)}, "
               + (f"{'+' if total >= 0 else '-'}{points(abs(total))} points"
                  if abs(total) >= 1e-9 else "no change in points"))
    return [text for _, text in lines] + [summary]


def _snapshot(submission: Path, chosen: Selection) -> dict[Path, tuple[int, int]]:
    """The modification time and size of every file watched."""
    return _stamps(_submission_files(submission) + exercise_files(chosen.paths))


def _submission_files(submission: Path) -> list[Path]:
    return sorted(submission.rglob("*.py")) if submission.is_dir() else [submission]


def _stamps(files: list[Path]) -> dict[Path, tuple[int, int]]:
    stamps: dict[Path, tuple[int, int]] = {}
    for path in files:
        try:
            stat = path.stat()
        except OSError:  # removed, or being replaced: a change
            stamps[path] = (-1, -1)
        else:
            stamps[path] = (stat.st_mtime_ns, stat.st_size)
    return stamps


def _wait_for_change(submission: Path, chosen: Selection, seen: dict[Path, tuple[int, int]],
                     changing: Callable[[], None] = lambda: None
                     ) -> tuple[dict[Path, tuple[int, int]], set[Path]]:
    """Poll until a file watched changes and then stays the same for SETTLE seconds: the new
    stamps, and the files added, removed or changed. `changing()` is called once a change is
    seen, before the wait for the writing to settle."""
    bank = set(exercise_files(chosen.paths))
    own = {path: stamp for path, stamp in seen.items() if path not in bank}
    looks = 0
    while True:
        time.sleep(POLL)
        looks += 1
        if looks % BANK_LOOKS and _stamps(_submission_files(submission)) == own:
            continue
        now = _snapshot(submission, chosen)
        if now == seen:
            continue
        changing()
        patience = time.monotonic() + EMPTIED
        while True:  # let the writing finish
            time.sleep(SETTLE)
            settled = _snapshot(submission, chosen)
            if settled == now and not (_emptied(seen, settled) and time.monotonic() < patience):
                return settled, {path for path in settled.keys() | seen.keys()
                                 if settled.get(path) != seen.get(path)}
            now = settled


def _emptied(seen: dict[Path, tuple[int, int]], now: dict[Path, tuple[int, int]]) -> bool:
    """Whether a file that had something in it is empty now: most likely a save in place under
    way, not yet written (grading it would report everything lost, then grade again)."""
    return any(size == 0 and seen.get(path, (0, 0))[1] > 0 for path, (_, size) in now.items())


def _say(out: TextIO, text: str) -> None:
    out.write(text + "\n")
    out.flush()
