"""`gradcheck bundle`: a bank packaged for where students are graded.

`gradescope` writes the zip Gradescope takes as an autograder: `setup.sh` (run once when the
image is built: installs gradcheck in a virtual environment) and `run_autograder` (run for each
submission: grades it in the hardened way and always leaves `results/results.json`) at its root,
with the exercises, the answer key and `requirements.txt`, which names the gradcheck wheel the
zip carries: by default the wheel of the running gradcheck (gradcheck/course/wheel.py), the one
that built the key, so the package index serves only third-party packages; `--gradcheck` gives
another wheel or a pip requirement. Both scripts are in gradcheck/course/templates/.

`classroom` fills a student template (made by `gradcheck init`) with the exercises students may
see, those whose `visibility` is `visible`, and an answer key that holds those alone: the key
records every program it was built for, so a key with hidden exercises in it would show them.

Grading with a key needs neither torch nor jax, which is what makes an autograder image small and
a student's CI run fast. The key must hold every exercise bundled exactly as it is: one it would
refuse would be graded live, and where torch is not installed its torch checks would be skipped,
so a bundle is refused instead. Without `--key`, one is built (that needs torch and jax here).
Exercise files are copied byte for byte, since a key knows each file by its sha256.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata
import json
import re
import shutil
import sys
import tempfile
import zipfile
from collections import Counter
from pathlib import Path

from gradcheck.bank.course_file import (
    BANK_HELP,
    ENGINE,
    FILE_NAME,
    WORKER_USER,
    Course,
    CourseFileError,
    course_bank,
    describe,
    key_seed,
)
from gradcheck.bank.loader import Bank, exercise_files, load_bank, path_list
from gradcheck.bank.schema import COURSE_SCHEMA, SCHEMA_PATH
from gradcheck.course.scaffold import (
    TEMPLATES,
    CourseError,
    carries_wheel,
    check_requirement,
    write_requirement,
    write_student_template,
)
from gradcheck.course.wheel import WheelError, build_wheel
from gradcheck.grading import answer_key
from gradcheck.grading.grader import GraderError
from gradcheck.grading.plan import oracle_problems

#: Where run_autograder finds the key, beside the exercises, in the bundle's folder.
KEY_NAME = "key.json"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip entries carry no real date, so a bundle is reproducible
_PACKAGES = (".whl", ".tar.gz")


class BundleError(Exception):
    """A bundle cannot be made as asked; the message says why and what to do."""


def gradescope(paths: list[Path], out: Path, *, key: Path | None = None, seed: int | None = None,
               requirement: str | None = None, entry: str | None = None,
               course: Course | None = None) -> Path:
    """Write Gradescope's autograder zip for the bank at `paths`; return `out`. What is not
    given comes from `course` (the file students submit, the worker's user, the seed of a key
    built here), else from gradcheck's defaults."""
    entry = entry or (course.submission if course else ENGINE)
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.py", entry):
        raise BundleError(f"--entry {entry!r}: give the file name students submit, like {ENGINE}")
    user = course.worker_user if course else WORKER_USER
    values = {"@ENTRY@": entry, "@USER@": "none" if user is None else str(user)}
    with tempfile.TemporaryDirectory() as folder:
        install, package = _installation(requirement, Path(folder))
        bank = _load(paths, course)
        files = _relative_files(paths, bank)
        key_bytes, drawn_with = _key_for(bank, key, seed, course)
        # the hypothesis that drew the key's random programs: under another, they are drawn live
        pins = [f"hypothesis=={v}" for v in sorted(drawn_with)]
        if package is not None:  # this gradcheck's wheel: with the packages it runs with here
            pins += _pins(but={"hypothesis"} if drawn_with else set())
        install = "\n".join([install, *sorted(pins)])
        out.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for script in ("setup.sh", "run_autograder"):
                text = (TEMPLATES / script).read_text(encoding="utf-8")
                for name, value in values.items():
                    text = text.replace(name, value)
                _add(archive, script, text.encode(), executable=True)
            _add(archive, "requirements.txt", (install + "\n").encode())
            _add(archive, "README.md", (TEMPLATES / "autograder-README.md").read_bytes())
            if package is not None:
                _add(archive, package.name, package.read_bytes())
            _add(archive, KEY_NAME, key_bytes)
            for file, relative in files.items():
                _add(archive, f"exercises/{relative}", file.read_bytes())
    return out


def classroom(paths: list[Path], out: Path, *, key: Path | None = None, seed: int | None = None,
              course: Course | None = None) -> list[Path]:
    """Publish the visible exercises of the bank at `paths`, and their key, into the student
    template `out` (made first if `out` is new or empty); return the exercise files written.
    A key built here has the seed given, else `course`'s, else a new one."""
    bank = _load(paths, course)
    visible = Bank([e for e in bank.exercises if e.visibility == "visible"], [])
    if not visible.exercises:
        raise BundleError("no exercise of the bank is visible, so there is nothing to publish "
                          "to students; set `visibility: visible` on the practice exercises")
    files = _relative_files(paths, visible)
    key_bytes, _ = _key_for(visible, key, seed, course)
    if not out.exists() or not any(out.iterdir()):
        write_student_template(out)
    elif carries_wheel(out):
        write_requirement(out)  # the wheel of the gradcheck that built this key
    _remove_exercises(out / "exercises")
    written = []
    for file, relative in files.items():
        target = out / "exercises" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target)
        written.append(target)
    (out / KEY_NAME).write_bytes(key_bytes)
    (out / COURSE_SCHEMA).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SCHEMA_PATH, out / COURSE_SCHEMA)
    return written


def _load(paths: list[Path], course: Course | None) -> Bank:
    """The bank at `paths`, whole (a broken exercise, or a check that would grade nothing, is
    refused), said on stderr."""
    for path in paths:
        if not path.exists():
            raise BundleError(f"--exercises {path}: no such file or folder")
    bank = load_bank(paths)  # every broken file named at once, as validate names them
    if bank.broken:
        raise BundleError("a broken exercise cannot be bundled; fix it (see `gradcheck "
                          "validate`):\n" + "\n".join(str(problem) for _, error in bank.broken
                                                       for problem in error.problems))
    if not bank.exercises:
        raise BundleError("no *.exercise.yaml files in " + ", ".join(map(str, paths)))
    problems = [problem for exercise in bank.exercises for problem in oracle_problems(exercise)]
    if problems:
        raise BundleError("a check that grades nothing cannot be bundled; fix it (see "
                          "`gradcheck validate`):\n" + "\n".join(map(str, problems)))
    print(describe(paths, len(bank.exercises), course), file=sys.stderr)
    return bank


def _relative_files(paths: list[Path], bank: Bank) -> dict[Path, str]:
    """Each exercise file of `bank` and its path in the bundle: under the folder it was found
    in, as in the course, so that its first line still leads to the schema."""
    relative: dict[Path, str] = {}
    for root in path_list(paths):
        for file in exercise_files(root):
            relative.setdefault(file, (file.relative_to(root) if root.is_dir()
                                       else Path(file.name)).as_posix())
    wanted = {exercise.path: relative[exercise.path] for exercise in bank.exercises}
    clashes = [name for name, count in Counter(wanted.values()).items() if count > 1]
    if clashes:
        raise BundleError(f"two exercise files would both be exercises/{clashes[0]} in the "
                          "bundle; rename one of them")
    return wanted


def _key_for(bank: Bank, key: Path | None, seed: int | None, course: Course | None
             ) -> tuple[bytes, set[str]]:
    """The key file's bytes, holding exactly `bank`'s exercises: taken from `key` (whose seed
    must be `seed`, if one is given), or built with `seed`, else `course`'s, else a new one;
    and the versions of hypothesis that drew its random programs."""
    if key is None:
        built_seed, why = key_seed(seed, course)
        print(f"building an answer key for {len(bank.exercises)} "
              f"exercise{'s' * (len(bank.exercises) != 1)} (torch and jax run "
              "once per exercise; give --key to reuse one)", file=sys.stderr)
        print(f"seed {built_seed}: {why}", file=sys.stderr)
        with tempfile.TemporaryDirectory() as folder:
            built = answer_key.build(bank, built_seed, Path(folder) / KEY_NAME)
        ungraded = built.ungraded(bank)
        if ungraded:
            raise BundleError("a check that grades nothing cannot be bundled; fix it (see "
                              "`gradcheck validate`):\n" + "\n".join(map(str, ungraded)))
    else:
        built = answer_key.load(key)
        if seed is not None and seed != built.seed:
            raise BundleError(f"the answer key {key} was built with seed {built.seed}, not "
                              f"{seed}; leave out --seed or build a key with seed {seed}")
        stale = built.stale(bank)
        if stale:
            raise BundleError(f"the answer key {key} does not fit the exercises: {stale[0]}"
                              + (f" (and {len(stale) - 1} more)" if len(stale) > 1 else "")
                              + "; rebuild it with `gradcheck key build`")
    data = {"format": answer_key.FORMAT, "gradcheck": built.version, "seed": built.seed,
            "exercises": {e.id: built.exercises[e.id] for e in bank.exercises}}
    text = json.dumps(data, separators=(",", ":")).encode()
    packed = gzip.compress(text, mtime=0) if len(text) > answer_key.LARGE else text
    return packed, answer_key.drawn_with(data["exercises"])


def _installation(requirement: str | None, folder: Path) -> tuple[str, Path | None]:
    """The line of requirements.txt, and the package file the zip carries, if any: by default
    the wheel of this gradcheck, built in `folder`."""
    if requirement is None:
        try:
            wheel = build_wheel(folder)
        except WheelError as error:
            raise BundleError(str(error)) from error
        return f"./{wheel.name}", wheel
    path = Path(requirement)
    if requirement.endswith(_PACKAGES):
        if not path.is_file():
            raise BundleError(f"--gradcheck {requirement}: no such file")
        return f"./{path.name}", path
    try:
        return check_requirement(requirement), None
    except CourseError as error:
        raise BundleError(str(error)) from error


def _pins(but: set[str]) -> list[str]:
    """gradcheck's own dependencies (not its extras), each at the version this Python has, the
    one that built and checked the key: an autograder image built later, or built again,
    installs these and not whatever the index serves by then."""
    pins = []
    for requirement in importlib.metadata.requires("gradcheck") or []:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement)
        if name and "extra ==" not in requirement and name.group().lower() not in but:
            pins.append(f"{name.group()}=={importlib.metadata.version(name.group())}")
    return pins


def _remove_exercises(folder: Path) -> None:
    """Remove the exercises an earlier publication left (one since hidden must not stay)."""
    if not folder.is_dir():
        return
    for file in exercise_files(folder):
        file.unlink()
    for sub in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
        if not any(sub.iterdir()):
            sub.rmdir()


def _add(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


# --- the command --------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """`gradcheck bundle gradescope` and `gradcheck bundle classroom`."""
    bundle = subparsers.add_parser(
        "bundle", help="package a bank for Gradescope or for students' repositories",
        description="Package an exercise bank, with its answer key, for where students are "
                    "graded.")
    targets = bundle.add_subparsers(dest="target", required=True, metavar="TARGET")
    g = targets.add_parser(
        "gradescope", help="the autograder zip for a Gradescope assignment",
        description="Write the zip to upload as a Gradescope autograder: setup.sh installs "
                    "gradcheck, run_autograder grades /autograder/submission/ENTRY on every "
                    "exercise (hidden ones included) and always writes results.json.")
    c = targets.add_parser(
        "classroom", help="publish the visible exercises and their key to the student template",
        description="Copy the exercises whose visibility is `visible` into OUT/exercises (those "
                    "published before are replaced), with an answer key for them alone in "
                    f"OUT/{KEY_NAME}: OUT is the template of students' repositories, made by "
                    "`gradcheck init` (or here, if OUT is new).")
    for p in (g, c):
        p.add_argument("--exercises", metavar="DIR", type=Path, action="append",
                       help=BANK_HELP)
        p.add_argument("--key", metavar="FILE", type=Path,
                       help="the answer key (`gradcheck key build`); default: build one here, "
                            "which needs torch and jax")
        p.add_argument("--seed", type=int, help="the seed of a key built here (default: the "
                                                f"course's, in {FILE_NAME}, else a new one)")
    g.add_argument("--gradcheck", metavar="REQUIREMENT",
                   help="what setup.sh installs: a gradcheck wheel or sdist file, put in the "
                        "zip, or a pip requirement (default: the wheel of this gradcheck, put "
                        "in the zip)")
    g.add_argument("--entry",
                   help=f"the file students submit (default: the course's, in {FILE_NAME}, "
                        f"else {ENGINE}; a package folder of the same name without .py works "
                        "too)")
    g.add_argument("--out", metavar="FILE", type=Path, required=True, help="the zip to write")
    c.add_argument("--out", metavar="DIR", type=Path, required=True,
                   help="the student template (student/ in a course made by `gradcheck init`)")
    g.set_defaults(run=run)
    c.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Make the bundle; 2 when it cannot be made."""
    try:
        paths, course = course_bank(args.exercises)
        if args.target == "gradescope":
            gradescope(paths, args.out, key=args.key, seed=args.seed,
                       requirement=args.gradcheck, entry=args.entry, course=course)
            print(f"wrote {args.out}: upload it as the assignment's autograder")
        else:
            written = classroom(paths, args.out, key=args.key, seed=args.seed, course=course)
            print(f"published {len(written)} visible exercise(s) and their answer key to "
                  f"{args.out}")
    except (BundleError, CourseFileError, GraderError, OSError) as error:  # GraderError: a bad key
        print(f"gradcheck bundle {args.target}: {error}", file=sys.stderr)
        return 2
    return 0
