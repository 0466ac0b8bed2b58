"""`gradcheck init DIR`: a course folder that works in its first hour.

    DIR/gradcheck.toml                the course file (gradcheck/bank/course_file.py): the bank,
                                      the file students submit, the worker's user, the keys' seed
    DIR/README.md                     the course's commands, for its instructors
    DIR/exercises/                    the bundled bank (or, with --empty, one example exercise)
    DIR/schema/exercise.schema.json   what each exercise's first line points editors to
    DIR/student/                      the template of the students' repositories:
        engine.py ...                 the starter engine (examples/starter/ in gradcheck)
        README.md                     for students: write, grade, read the feedback, push
        .github/workflows/grade.yml   grades engine.py on every push
        .github/gradcheck-requirements.txt   the gradcheck that the workflow installs: by
                                      default the wheel of this gradcheck, beside it

The student template gets its exercises and answer key from `gradcheck bundle classroom`
(gradcheck/course/bundle.py), which publishes the visible exercises only: hidden ones never leave the
instructors' folder except inside the Gradescope autograder.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import sys
from pathlib import Path

from gradcheck import __version__
from gradcheck.bank.bundled import bank_dir, starter_path
from gradcheck.bank.course_file import ENGINE, FILE_NAME, course_text
from gradcheck.bank.loader import exercise_files
from gradcheck.bank.schema import COURSE_SCHEMA, SCHEMA_COMMENT, SCHEMA_PATH
from gradcheck.course.wheel import WheelError, build_wheel

#: The exercise of the bundled bank that `init --empty` copies, as a model to write others by.
EXAMPLE = Path("02-backward") / "chain-rule.exercise.yaml"
TEMPLATES = Path(__file__).with_name("templates")
WORKFLOW = Path(".github") / "workflows" / "grade.yml"
REQUIREMENTS = Path(".github") / "gradcheck-requirements.txt"


class CourseError(Exception):
    """A course folder cannot be made as asked; the message says why and what to do."""


def init_course(folder: Path, *, empty: bool = False, requirement: str | None = None
                ) -> list[Path]:
    """Lay out a new course in `folder` (absent or empty); return the files written."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise CourseError(f"{folder} already exists and is not an empty folder; give a new one")
    if requirement is not None:
        requirement = check_requirement(requirement)
    bank = bank_dir()
    files = [bank / EXAMPLE] if empty else exercise_files(bank)
    written = copy_exercises(files, bank, folder / "exercises", schema=folder / COURSE_SCHEMA)
    written.append(_write(folder / COURSE_SCHEMA, SCHEMA_PATH.read_text(encoding="utf-8")))
    readme = _template("course-README.md").replace("@TITLE@", folder.resolve().name)
    written.append(_write(folder / "README.md", readme))
    written.append(_write(folder / FILE_NAME, course_text(secrets.randbelow(2**32))))
    written.append(_write(folder / ".gitignore", "__pycache__/\nautograder.zip\n"))
    written += write_student_template(folder / "student", requirement)
    return written


def write_student_template(folder: Path, requirement: str | None = None) -> list[Path]:
    """The starter engine, the students' README and the grading workflow, in `folder`; the
    workflow installs `requirement`, or by default the wheel of this gradcheck, put beside it."""
    starter = starter_path()
    written = []
    for file in sorted(starter.rglob("*")):
        if file.is_file() and "__pycache__" not in file.parts:
            written.append(_write(folder / file.relative_to(starter), file.read_text("utf-8")))
    if not (folder / ENGINE).is_file():
        raise CourseError(f"the starter in {starter} has no {ENGINE}; gradcheck is incomplete")
    written.append(_write(folder / "README.md", _template("student-README.md")))
    written.append(_write(folder / WORKFLOW, _template("grade.yml")))
    written += write_requirement(folder, requirement)
    written.append(_write(folder / ".gitignore", "__pycache__/\n"))
    return written


def write_requirement(folder: Path, requirement: str | None = None) -> list[Path]:
    """The student template's `.github/gradcheck-requirements.txt`, and the wheel it names when
    `requirement` is None; the files written. A wheel an earlier gradcheck put there goes: the
    workflow must install the gradcheck that built the key."""
    github = folder / REQUIREMENTS.parent
    for old in github.glob("gradcheck-*.whl"):
        old.unlink()
    written = []
    if requirement is None:
        try:
            wheel = build_wheel(github)
        except WheelError as error:
            raise CourseError(str(error)) from error
        written.append(wheel)
        requirement = f"./{(REQUIREMENTS.parent / wheel.name).as_posix()}"
    written.append(_write(folder / REQUIREMENTS, requirement + "\n"))
    return written


def carries_wheel(folder: Path) -> bool:
    """Whether the student template in `folder` installs a wheel it carries (which `bundle
    classroom` then replaces by this gradcheck's), not a requirement its instructor gave."""
    path = folder / REQUIREMENTS
    return path.is_file() and bool(re.fullmatch(r"\./\.github/gradcheck-\S+\.whl\s*",
                                                path.read_text(encoding="utf-8")))


def check_requirement(requirement: str) -> str:
    """A pip requirement on one line (a name with a version, or `name @ URL`), without the
    extras that bring torch: grading with a key needs neither torch nor jax, and a torch that
    pip resolves from the index is a CUDA build of several GB."""
    requirement = requirement.strip()
    if not requirement or "\n" in requirement or requirement.startswith("-"):
        raise CourseError(f"--gradcheck {requirement!r}: give one pip requirement, such as "
                          f"gradcheck=={__version__} or 'gradcheck @ git+https://...'")
    extras = re.match(r"[^\[@;]*\[([^\]]*)\]", requirement)
    if extras and {e.strip() for e in extras[1].split(",")} & {"torch", "jax", "all"}:
        raise CourseError(f"--gradcheck {requirement!r}: leave out the extras torch, jax and "
                          "all: grading with the answer key needs neither, and pip would fetch "
                          "a CUDA build of torch of several GB")
    return requirement


def copy_exercises(files: list[Path], source: Path, target: Path, *, schema: Path
                   ) -> list[Path]:
    """Copy exercise files from under `source` to the same places under `target`, their first
    line pointing to `schema` (the file a course keeps) by a path relative to each copy."""
    written = []
    for file in files:
        copy = target / file.relative_to(source)
        text = file.read_text(encoding="utf-8")
        first, newline, rest = text.partition("\n")
        if not first.startswith(SCHEMA_COMMENT):
            rest, newline = text, "\n"
        line = SCHEMA_COMMENT + Path(os.path.relpath(schema, copy.parent)).as_posix()
        written.append(_write(copy, line + newline + rest))
    return written


def _template(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8").replace("@VERSION@", __version__)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# --- the command --------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """`gradcheck init`."""
    p = subparsers.add_parser(
        "init", help="start a course: exercises, the student starter, CI for students",
        description="Make a course folder: the bundled exercise bank (or one example exercise), "
                    "its schema, a README of the course's commands, and student/, the template "
                    "of students' repositories (the starter engine, a README for students and a "
                    "GitHub Actions workflow that grades engine.py on every push).")
    p.add_argument("folder", metavar="DIR", type=Path, help="a new or empty folder")
    p.add_argument("--empty", action="store_true",
                   help="start with one example exercise instead of the whole bundled bank")
    p.add_argument("--gradcheck", metavar="REQUIREMENT",
                   help="the pip requirement the students' workflow installs (default: the "
                        "wheel of this gradcheck, which builds your answer keys, put in "
                        "student/.github/)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Make the course; 2 when it cannot be made."""
    try:
        written = init_course(args.folder, empty=args.empty, requirement=args.gradcheck)
    except (CourseError, OSError) as error:
        print(f"gradcheck init: {error}", file=sys.stderr)
        return 2
    exercises = sum(path.name.endswith(".exercise.yaml") for path in written)
    print(f"made {args.folder}: {exercises} exercise(s), the student template in "
          f"{args.folder / 'student'}. Next, from {args.folder}: see README.md, or run\n"
          "  gradcheck validate\n"
          "  gradcheck key build --out key.json\n"
          "  gradcheck bundle classroom --key key.json --out student")
    return 0
