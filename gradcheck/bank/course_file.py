"""The course file, `gradcheck.toml`: which bank a course's commands read, and their defaults.

`gradcheck init` writes it at the course's root. Every command that reads a bank (grade,
validate, key build, bundle, grade-batch, mutants) looks for it in the current folder and the
folders above, as git looks for .git, and then reads the course's bank instead of the bundled
one unless given `--exercises`. It also names the file students submit, the user the Gradescope
autograder runs their code as, and the seed of the course's answer keys. Each command says which
bank it read and how many exercises it holds (`describe`), so a bank left out is never silent.
"""

from __future__ import annotations

import secrets
import tomllib
from dataclasses import dataclass
from pathlib import Path

from gradcheck.bank.bundled import bank_dir

FILE_NAME = "gradcheck.toml"
#: The student's module, unless the course file says: as the starter names it, and the workflow,
#: the autograder and a batch's folder per student grade it.
ENGINE = "engine.py"
#: The user id the autograder runs a submission's worker as, unless the course file says.
WORKER_USER = 61000
#: How --exercises is described in each command's help.
BANK_HELP = (f"exercise files or folders (repeatable; default: the course's bank, named by "
             f"{FILE_NAME} in this folder or above, else the bundled bank)")
_KEYS = ("exercises", "submission", "worker_user", "seed")


class CourseFileError(Exception):
    """gradcheck.toml cannot be used; the message names the file, the key and what to give."""


@dataclass(frozen=True)
class Course:
    """What a course file says, its paths made absolute."""

    file: Path
    #: the exercise bank, a folder
    exercises: Path
    #: the file students submit (a package folder of the same name without .py works too)
    submission: str = ENGINE
    #: the uid the autograder runs a submission's worker as; None: as root
    worker_user: int | None = WORKER_USER
    #: the seed of the answer keys built in the course; None (`"random"`, or none set): a new
    #: one for each key
    seed: int | None = None


def course_text(seed: int) -> str:
    """The course file `gradcheck init` writes, with `seed` for the course's answer keys."""
    return f"""\
# The course file of gradcheck, written by `gradcheck init`. gradcheck's commands run in this
# folder or below it read it: they grade against this bank unless given --exercises.

# The exercise bank, a folder relative to this file.
exercises = "exercises"
# The file students submit; a package folder of the same name without .py works too.
submission = "engine.py"
# The user id the Gradescope autograder runs students' code as ("none": as root, which can then
# read the answer key).
worker_user = {WORKER_USER}
# The seed of the sampled points of the answer keys built here, or "random" for a new one each
# time. Students graded with one key all meet the same points: give each term its own seed.
seed = {seed}
"""


def find_course(start: Path | None = None) -> Course | None:
    """The course file in `start` (default: the current folder) or the nearest folder above it,
    read; None when there is none."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / FILE_NAME).is_file():
            return read_course(folder / FILE_NAME)
    return None


def read_course(path: Path) -> Course:
    """Read and check the course file at `path`."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise CourseFileError(f"{path}: {error}") from error
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise CourseFileError(f"{path}: {unknown[0]}: not a key of the course file; the keys "
                              f"are {', '.join(_KEYS)}")
    exercises = _get(path, data, "exercises", str, "exercises", "a folder, such as "
                     '"exercises"')
    submission = _get(path, data, "submission", str, ENGINE, 'a file name, such as '
                      '"engine.py"')
    if not submission.endswith(".py") or "/" in submission:
        raise CourseFileError(f'{path}: submission: {submission!r}: give a file name ending in '
                              '.py, such as "engine.py"')
    user = data.get("worker_user", WORKER_USER)
    if not (user == "none" or (type(user) is int and user > 0)):
        raise CourseFileError(f'{path}: worker_user: {user!r}: give a user id above 0, or "none"')
    seed = data.get("seed", "random")
    if not (seed == "random" or (type(seed) is int and 0 <= seed < 2**32)):
        raise CourseFileError(f'{path}: seed: {seed!r}: give a whole number from 0 to 2**32 - 1, '
                              'or "random"')
    folder = (path.parent / exercises).resolve()
    if not folder.is_dir():
        raise CourseFileError(f"{path}: exercises: {exercises!r}: there is no folder {folder}; "
                              "give the bank's folder, relative to this file")
    return Course(file=path.resolve(), exercises=folder, submission=submission,
                  worker_user=None if user == "none" else user,
                  seed=None if seed == "random" else seed)


def course_bank(given: list[Path] | None, start: Path | None = None
                ) -> tuple[list[Path], Course | None]:
    """What a command run in `start` (default: the current folder) reads: the paths given, else
    the bank of the course it is in, else the bundled bank; and that course, if any."""
    course = find_course(start)
    return (list(given) if given else [bank_default(course)]), course


def bank_default(course: Course | None) -> Path:
    """The bank a command reads when given none: the course's, else the bundled one."""
    return course.exercises if course else bank_dir()


def key_seed(given: int | None, course: Course | None) -> tuple[int, str]:
    """The seed of an answer key built now, and why it is that one (said on stderr): the one
    given, else the course's, else a new one. Never a fixed default: every course that skips
    `init` would share its sampled points without being told (grading with the key reads the
    seed from it, so a new seed costs nothing)."""
    if given is not None:
        return given, "given by --seed"
    if course and course.seed is not None:
        return course.seed, f"the course's, in {course.file}"
    where = (f"{course.file} sets no fixed seed" if course else
             f"no --seed is given, and no {FILE_NAME} here or above sets one")
    seed = secrets.randbelow(2**32)
    return seed, f"drawn at random, as {where}; give --seed {seed} to build the same key again"


def describe(paths: list[Path], count: int, course: Course | None, broken: int = 0) -> str:
    """The line each command prints to say which bank it read and how many exercises it holds
    (and how many of its files cannot be loaded, each of them one failing check of 0 points)."""
    exercises = f"{count} exercise{'' if count == 1 else 's'}"
    if broken:
        exercises += f" and {broken} file{'' if broken == 1 else 's'} that cannot be loaded"
    if course and paths == [course.exercises]:
        where = f"{course.exercises}, the course's bank ({course.file})"
    elif paths == [bank_dir()]:
        where = f"gradcheck's bundled bank (no {FILE_NAME} here or above)"
    else:
        where = ", ".join(map(str, paths))
    return f"bank: {where}: {exercises}"


def _get(path: Path, data: dict, key: str, kind: type, default: object, what: str) -> object:
    value = data.get(key, default)
    if not isinstance(value, kind) or not value:
        raise CourseFileError(f"{path}: {key}: {value!r}: give {what}")
    return value
