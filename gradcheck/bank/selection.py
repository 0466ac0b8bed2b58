"""Which exercises a command works on: `--exercises` items (paths, exercise ids, module names)
and `-k EXPR`, pytest's keyword expression over exercise ids.

`gradcheck grade`, `validate`, `key build` and the pytest plugin all select through here, so
`--exercises chain-rule-z`, `--exercises 02-backward` and `-k "pow and not tensor"` mean the same
everywhere. An item that exists on disk is a path; any other item names an exercise (its id) or
a module (its `topic`, or the name of the folder it is in) of the bank under the paths given, or
of the bundled bank when no path is given.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gradcheck.bank.loader import Bank, exercise_files, load_bank
from gradcheck.bank.models import SUFFIX, Exercise
from gradcheck.bank.problems import ExerciseError, listing, suggest


class SelectionError(Exception):
    """The selection names nothing, or something that is not there; the message says what is."""


@dataclass
class Selection:
    """What to grade: the paths to load, then the names and keyword that narrow them."""

    paths: list[Path]
    names: list[str] = field(default_factory=list)
    keyword: str | None = None
    #: how the command takes the items, for messages: "--exercises", or "" for PATH arguments
    option: str = "--exercises"

    @property
    def narrowed(self) -> bool:
        return bool(self.names or self.keyword)

    def load(self, strict: bool = False) -> Bank:
        """The bank under `paths`, narrowed to the names and keyword (a broken file stays in
        when it belongs to them, so that its problems are shown, not skipped)."""
        return self.narrow(load_bank(self.paths, strict=strict))

    def narrow(self, bank: Bank) -> Bank:
        """`bank`'s exercises that the names and keyword select, and its broken files that
        belong to them: by their folder, or by the id and topic they say, or else their file
        name, as far as these can be read."""
        if not self.narrowed:
            return bank
        unknown = [name for name in self.names
                   if not any(_named(e, name) for e in bank.exercises)
                   and not any(_broken_named(path, error, name) for path, error in bank.broken)]
        if unknown:
            modules = ({e.topic for e in bank.exercises if e.topic}
                       | {error.topic for _, error in bank.broken if error.topic})
            ids = {e.id for e in bank.exercises} | {error.id for _, error in bank.broken
                                                   if error.id}
            raise SelectionError(
                f"{_item(self.option, unknown[0])}: no such file or folder, and no exercise or "
                f"module of that name in {listing(str(p) for p in self.paths)}"
                f"{suggest(unknown[0], ids | modules)}; the modules are {listing(modules)}; "
                "-k WORD selects the exercises whose id contains WORD")
        match = keyword_matcher(self.keyword) if self.keyword else (lambda text: True)
        kept = [e for e in bank.exercises
                if (not self.names or any(_named(e, name) for name in self.names))
                and match(e.id)]
        broken = [(path, error) for path, error in bank.broken
                  if (not self.names or any(_broken_named(path, error, name)
                                            for name in self.names))
                  and match(error.id or _stem(path))]
        if not kept and not broken:
            count = len(bank.exercises) + len(bank.broken)
            raise SelectionError(f"-k {self.keyword}: selects none of the {count} "
                                 f"exercise{'s' * (count != 1)}")
        return Bank(kept, broken, bank.misnamed)

    def files(self) -> list[Path]:
        """The exercise files selected (for commands that read files themselves)."""
        if not self.narrowed:
            return exercise_files(self.paths)
        bank = self.load()
        chosen = {Path(e.path) for e in bank.exercises} | {path for path, _ in bank.broken}
        return [path for path in exercise_files(self.paths) if path in chosen]


def selection(items: Sequence[str | Path] | None, keyword: str | None,
              default: Callable[[], Path], option: str = "--exercises") -> Selection:
    """Split `--exercises` items into paths and names; `default()` gives the bank to look names
    up in when no item is a path. An item that looks like a path (a `/`, or the exercise
    suffix) but is not there is an error, not a name. `option`: how the command takes the
    items, for messages ("" for PATH arguments)."""
    paths: list[Path] = []
    names: list[str] = []
    for item in items or []:
        text = str(item)
        if Path(text).is_file() and not text.endswith((".yaml", ".yml")):
            raise SelectionError(f"{_item(option, text)}: not an exercise file; give files named "
                                 f"*{SUFFIX}, folders of them, exercise ids or module names")
        if Path(text).exists():
            paths.append(Path(text))
        elif "/" in text or text.endswith((SUFFIX, ".yaml", ".yml")):
            raise SelectionError(f"{_item(option, text)}: no such file or folder"
                                 f"{_near(Path(text))}")
        else:
            names.append(text)
    if keyword is not None:
        keyword_matcher(keyword)  # a bad expression is refused before any work starts
    return Selection(paths or [default()], names, keyword, option)


def _item(option: str, text: str) -> str:
    return f"{option} {text}" if option else text


def _near(path: Path) -> str:
    """" (did you mean 'exercises/02-backward'?)": the path with its first missing part
    replaced by the closest name in the folder above it, when one is close."""
    parts = path.parts
    for depth in range(len(parts) - 1, -1, -1):
        above = Path(*parts[:depth]) if depth else Path(".")
        if not above.is_dir():
            continue
        try:
            names = [entry.name for entry in above.iterdir()]
        except OSError:
            return ""
        close = difflib.get_close_matches(parts[depth], names, n=1)
        return (f" (did you mean {str(Path(*parts[:depth], close[0], *parts[depth + 1:]))!r}?)"
                if close else "")
    return ""


def add_arguments(parser: argparse.ArgumentParser, *, positional: bool = False) -> None:
    """`--exercises` (or, with `positional`, PATH arguments) and `-k`, as every command has them."""
    what = ("exercise files or folders, exercise ids or module names (default: the course's "
            "bank, named by gradcheck.toml in this folder or above, else the bundled bank)")
    if positional:
        parser.add_argument("exercises", nargs="*", metavar="PATH", help=what)
    else:
        parser.add_argument("--exercises", metavar="PATH|ID|MODULE", action="append",
                            help=what + "; repeatable")
    parser.add_argument("-k", dest="keyword", metavar="EXPR",
                        help="only the exercises whose id matches EXPR, as pytest's -k: words "
                             "(substrings of the id) with and, or, not, parentheses")


def from_arguments(args: argparse.Namespace, default: Callable[[], Path],
                   option: str = "--exercises") -> Selection:
    """The selection that `add_arguments`' options give (`option`: "" if they are PATHs)."""
    return selection(args.exercises, args.keyword, default, option)


def _named(exercise: Exercise, name: str) -> bool:
    folder = exercise.path.parent.name if exercise.path else ""
    return name in (exercise.id, exercise.topic, folder)


def _broken_named(path: Path, error: ExerciseError, name: str) -> bool:
    """Whether a file that did not load belongs to `name`: its folder is a module whatever the
    file says; its id and topic count where it says them, its file name where no id is read."""
    return name in (path.parent.name, error.topic, error.id or _stem(path))


def _stem(path: Path) -> str:
    return path.name.removesuffix(SUFFIX)


# --- -k EXPR ------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


def keyword_matcher(expression: str) -> Callable[[str], bool]:
    """pytest's `-k` grammar: words matched as case-insensitive substrings of the id, combined
    with `and`, `or`, `not` and parentheses (`-k "pow and not tensor"`)."""
    tokens = _TOKEN.findall(expression)
    if not tokens:
        raise SelectionError("-k: give a word or an expression such as 'pow and not tensor'")
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        position += 1
        return tokens[position - 1]

    def either() -> Callable[[str], bool]:
        parts = [both()]
        while peek() == "or":
            take()
            parts.append(both())
        return lambda text: any(part(text) for part in parts)

    def both() -> Callable[[str], bool]:
        parts = [negation()]
        while peek() == "and":
            take()
            parts.append(negation())
        return lambda text: all(part(text) for part in parts)

    def negation() -> Callable[[str], bool]:
        token = peek()
        if token == "not":
            take()
            inner = negation()
            return lambda text: not inner(text)
        if token == "(":
            take()
            inner = either()
            if peek() != ")":
                raise SelectionError(f"-k {expression}: a '(' is not closed")
            take()
            return inner
        if token is None or token in ("and", "or", ")"):
            raise SelectionError(f"-k {expression}: expected a word "
                                 f"{'at the end' if token is None else f'before {token!r}'}")
        word = take().lower()
        return lambda text: word in text.lower()

    matcher = either()
    if peek() is not None:
        raise SelectionError(f"-k {expression}: unexpected {peek()!r}")
    return matcher
