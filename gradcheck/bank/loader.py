"""Loading exercise files and banks: the YAML, the models, the cross-checks, in that order, with
each problem said as `file:line: field.path: message` for someone editing YAML; a bank with one
broken file still loads the others.
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from gradcheck.bank import yaml_reader
from gradcheck.bank.cross_checks import cross_check
from gradcheck.bank.models import SUFFIX, Exercise, PathArg, Visibility
from gradcheck.bank.problems import ExerciseError, Problem, listing, show, suggest
from gradcheck.bank.schema import schema_keys, schema_node


def load_exercise(path: str | os.PathLike[str]) -> Exercise:
    """Load and check one exercise file; raises :class:`ExerciseError` listing its problems."""
    file = str(path)
    repeated: list[Problem] = []
    try:
        raw = Path(path).read_bytes()
        source = yaml_reader.load(raw.decode("utf-8-sig"))  # a byte-order mark, as YAML allows
    except OSError as exc:
        raise ExerciseError([Problem(file, 0, "", f"cannot read the file: "
                                                  f"{exc.strerror or exc}")]) from None
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ExerciseError([Problem(file, line, "", f"not UTF-8 text (byte {exc.start}, "
                                                     f"{raw[exc.start:exc.start + 1]!r}); save the "
                                                     "file as UTF-8")]) from None
    except yaml_reader.YamlError as exc:
        repeated = [Problem(file, e.line, e.field, e.message) for e in (exc, *exc.more)]
        if exc.source is None:
            raise ExerciseError(repeated) from None
        source = exc.source  # only keys written twice: the rest is read on
    try:
        exercise = _build(source.data, source, file, hashlib.sha256(raw).hexdigest())
    except ExerciseError as error:
        raise ExerciseError(repeated + error.problems, error.exercise,
                            *_declared(source.data)) from None
    if repeated:
        raise ExerciseError(repeated, exercise, exercise.visibility, exercise.topic, exercise.id)
    return exercise


def _declared(data: Any) -> tuple[str | None, str, str]:
    """The visibility, topic and id a broken file gives itself, where it says them plainly.
    The visibility: no key is visible, the default; None when it cannot be told, and the file
    is then taken for one whose details are withheld. The topic and id: '' when not a text."""
    if not isinstance(data, dict):
        return None, "", ""
    said, topic, id = data.get("visibility", "visible"), data.get("topic"), data.get("id")
    return (said if isinstance(said, str) and said in get_args(Visibility) else None,
            topic if isinstance(topic, str) else "", id if isinstance(id, str) else "")


def from_data(data: Any, file: str = "<data>") -> Exercise:
    """Check plain data (say, built by a script) and build the exercise; lines are unknown (0)."""
    return _build(data, None, file, "")


def _build(data: Any, source: yaml_reader.Source | None, file: str, digest: str) -> Exercise:
    def line(path: yaml_reader.Path) -> int:
        return source.line_of(path) if source else 0

    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}, not a mapping"
        raise ExerciseError([Problem(file, line(()), "", f"the file is {what}; an exercise is a "
                                                         "mapping of keys such as id, title, "
                                                         "inputs, program")])
    problems: list[Problem] = []
    try:
        exercise = Exercise.model_validate(data)
    except ValidationError as exc:
        problems = [Problem(file, line(path), yaml_reader.format_path(path), text)
                    for path, text in _explain(exc, data)]
        exercise = _read_past(exc, data)
        if exercise is None:
            raise ExerciseError(problems) from None
    exercise._file, exercise._source, exercise._digest = file, source, digest
    program, issues = cross_check(exercise)
    problems += [_locate(exercise, *issue) for issue in issues]
    exercise._program = program
    if problems:  # read past the problems only when the rest is sound enough to check further
        raise ExerciseError(problems, None if issues else exercise)
    return exercise


def _read_past(exc: ValidationError, data: Any) -> Exercise | None:
    """The exercise with each YAML 1.1 boolean (`yes`, `off`) read as the boolean it meant and
    each unknown key left out, when that is all that is wrong: then the rest of the file can
    still be checked."""
    fixed = copy.deepcopy(data)
    for error in exc.errors():
        got = error.get("input")
        boolean = (error["type"] == "bool_type" and isinstance(got, str)
                   and got.lower() in _BOOL_WORDS)
        if not boolean and error["type"] != "extra_forbidden":
            return None
        *parents, last = _data_path(error["loc"], data, False)
        holder = fixed
        for step in parents:
            holder = holder[step]
        if boolean:
            holder[last] = got.lower() in _TRUE_WORDS
        else:
            del holder[last]
    try:
        return Exercise.model_validate(fixed)
    except ValidationError:
        return None


def _locate(exercise: Exercise, path: yaml_reader.Path, message: str,
            at: tuple[int, int] | None) -> Problem:
    if at is None or exercise._source is None:
        return exercise.problem(path, message)
    line, column = exercise._source.text_position(path, *at)
    node = exercise._source.nodes.get(tuple(path))
    if node is not None and node.style != "|" and node.start_mark.line != node.end_mark.line:
        # `program: >` (or a plain or quoted scalar over lines) joins the lines into one
        message += (f"; YAML joined the {yaml_reader.format_path(path)}'s lines into one line: "
                    f"write `{yaml_reader.format_path(path)}: |` to keep each line")
    return Problem(exercise._file, line, yaml_reader.format_path(path), f"column {column}: {message}")


@dataclass
class Bank:
    """The exercises that loaded, and the files that did not (each with its problems)."""

    exercises: list[Exercise]
    broken: list[tuple[Path, ExerciseError]]
    #: YAML files under its folders that are not named *.exercise.yaml, so not collected
    misnamed: list[Path] = field(default_factory=list)


def exercise_files(paths: PathArg) -> list[Path]:
    """Files named on the command line, and `*.exercise.yaml` files under folders, in order."""
    found: list[Path] = []
    for path in path_list(paths):
        found.extend(sorted(path.rglob("*" + SUFFIX)) if path.is_dir() else [path])
    return list(dict.fromkeys(found))


def misnamed_files(paths: PathArg) -> list[Path]:
    """YAML files under the folders in `paths` that the bank skips for their name
    (`addmul.yaml`, `addmul.exercise.yml`): most often an exercise misnamed, which would
    otherwise be left out without a word. Hidden folders (`.github`) are not searched."""
    return sorted(path for folder in path_list(paths) if folder.is_dir()
                  for path in folder.rglob("*")
                  if path.suffix.lower() in (".yaml", ".yml") and not path.name.endswith(SUFFIX)
                  and path.is_file()
                  and not any(part.startswith(".") for part in path.relative_to(folder).parts))


def misnamed_message(path: Path) -> str:
    """What to do about a file `misnamed_files` finds (or one named so and given directly)."""
    stem = path.name.rsplit(".", 1)[0].removesuffix(".exercise")
    return (f"a bank's folder is searched for *{SUFFIX} files only, so this file is not "
            f"graded; rename it {stem + SUFFIX}, or move it out of the bank if it is not an "
            "exercise")


def load_bank(paths: PathArg, strict: bool = False) -> Bank:
    """Load every exercise under `paths`. A broken file is set aside in `broken` (or, if
    `strict`, raised at once) and the others still load; ids must be unique in the bank."""
    bank = Bank([], [], misnamed_files(paths))
    in_bank = {file: str(file.relative_to(folder)) for folder in path_list(paths)
               if folder.is_dir() for file in exercise_files(folder)}
    for path in exercise_files(paths):
        try:
            bank.exercises.append(load_exercise(path))
            bank.exercises[-1]._bank_file = in_bank.get(path, path.name)
        except ExerciseError as exc:
            if strict:
                raise
            bank.broken.append((path, exc))
    first: dict[str, Exercise] = {}
    for exercise in bank.exercises:
        kept = first.setdefault(exercise.id, exercise)
        if kept is exercise:
            continue
        # the first file in the bank's order keeps its id and is graded: one broken file never
        # stops another (the later one is most often a copy whose id was not changed)
        error = ExerciseError([exercise.problem(
            "id", f"the id {exercise.id!r} is already used by {kept._file}:"
                  f"{kept.line_of('id')}; give this exercise an id of its own")],
            visibility=exercise.visibility, topic=exercise.topic, id=exercise.id)
        if strict:
            raise error
        bank.broken.append((Path(exercise._file), error))
    bank.exercises = [e for e in bank.exercises if first[e.id] is e]
    return bank


def path_list(paths: PathArg) -> list[Path]:
    """One path or many, as a list of paths."""
    if isinstance(paths, (str, os.PathLike)):
        return [Path(paths)]
    return [Path(p) for p in paths]


# --- pydantic's errors, said for someone editing YAML -------------------------------------------

_BOOL_WORDS = {"yes", "no", "on", "off", "y", "n"}
_TRUE_WORDS = {"yes", "on", "y"}


def _explain(exc: ValidationError, data: Any) -> list[tuple[yaml_reader.Path, str]]:
    seen: dict[tuple[yaml_reader.Path, str], None] = {}
    errors = [error for error in exc.errors()
              if error["type"] != "none_required"]  # the None branch of an optional field
    paths = [_data_path(error["loc"], data, error["type"] == "missing") for error in errors]
    # a boolean or one of some words (`no_grad: nested`): one message for both branches
    words = {path: error["ctx"]["expected"] for path, error in zip(paths, errors)
             if error["type"] == "literal_error"}
    both = words.keys() & {path for path, error in zip(paths, errors)
                           if error["type"] == "bool_type"}
    for path, error in zip(paths, errors):
        message = _message(error, path)
        if path in both:
            if error["type"] == "literal_error":
                continue
            if str(error.get("input")).lower() not in _BOOL_WORDS:
                message = f"give true, false, {words[path]}, not {show(error.get('input'))}"
        seen.setdefault((path, message), None)
    return list(seen)


def _data_path(loc: tuple[Any, ...], data: Any, missing: bool) -> yaml_reader.Path:
    """The path of `loc` in the data, without the parts that name pydantic's internals."""
    path: list[str | int] = []
    for i, step in enumerate(loc):
        in_dict = isinstance(data, dict) and step in data
        in_list = isinstance(data, list) and isinstance(step, int) and 0 <= step < len(data)
        if in_dict or in_list:
            path.append(step)
            data = data[step]
        elif missing and i == len(loc) - 1:
            path.append(step)
    return tuple(path)


#: a word pydantic quotes in a literal's expected values
_QUOTED = re.compile(r"'([^']*)'")
_BOUNDS = {"greater_than": "above", "greater_than_equal": "of at least",
           "less_than": "below", "less_than_equal": "of at most"}


def _length_message(ctx: dict[str, Any], path: yaml_reader.Path, short: bool) -> str:
    """A list or mapping of too few or too many items: how many to give, which items are
    allowed (where the schema lists them), and whether the key may be left out instead."""
    limit = ctx["min_length"] if short else ctx["max_length"]
    actual = ctx["actual_length"]
    what = "list" if ctx["field_type"] == "List" else "mapping"
    has = f"the {what} is empty" if actual == 0 else \
        f"the {what} has {actual} item{'s' * (actual != 1)}"
    text = f"{has}; give {'at least' if short else 'at most'} {limit}"
    choices, about = schema_node(path + (0,)).get("enum"), schema_node(path).get("description")
    if short and choices:
        text += f" of {listing(choices)}"
    else:
        text += f" item{'s' * (limit != 1)}" + (f" ({about.rstrip('.')})" if short and about else "")
    optional = bool(path) and path[-1] not in schema_node(path[:-1]).get("required", [])
    if short and actual == 0 and optional:
        text += f", or leave `{path[-1]}` out for its default"
    return text


def _message(error: Any, path: yaml_reader.Path) -> str:
    kind, text, got = error["type"], error["msg"], error.get("input")
    if kind == "missing":
        return f"the key {path[-1]!r} is required here; add it"
    if kind == "extra_forbidden":
        allowed = schema_keys(path[:-1])
        # `{value: 1,5}` reads as value 1 and a key 5
        comma = "; a decimal comma? write numbers with a point" if str(path[-1]).isdigit() else ""
        # `tolerance` under `checks`: a key of the file's top level, indented by mistake
        top = (f"; {path[-1]!r} is a key of the exercise itself, at the top of the file"
               if len(path) > 1 and path[-1] in schema_keys(()) else "")
        return (f"unknown key {path[-1]!r}{suggest(str(path[-1]), allowed)}; the keys here "
                f"are {listing(allowed)}{top}{comma}")
    if kind == "string_type" and type(got) in (int, float):  # `id: 1000`, `topic: 02`
        return f"{got!r} is read as a number here; put it in quotes to make it text"
    if kind == "model_type":
        return (f"write a mapping here, with keys among {listing(schema_keys(path))}; not "
                f"{show(got)}")
    if kind == "bool_type" and isinstance(got, str) and got.lower() in _BOOL_WORDS:
        return f"{got!r} is text here, not a boolean; write true or false"
    if kind in ("value_error", "assertion_error"):
        return text.split(", ", 1)[1]
    if kind in _BOUNDS:
        bound = next(iter(error["ctx"].values()))
        return f"give a number {_BOUNDS[kind]} {bound:g}, not {show(got)}"
    if kind == "string_too_short":
        return "the text is empty; write it"
    if kind in ("too_short", "too_long"):
        return _length_message(error["ctx"], path, kind == "too_short")
    if kind == "literal_error":  # pydantic's "Input should be" names no input of the file
        expected = error["ctx"]["expected"]
        return (f"give {expected}, not {show(got)}"
                f"{suggest(str(got), _QUOTED.findall(expected))}")
    if kind.endswith("_type") or kind == "finite_number":
        return f"{text}, not {show(got)}"
    return text
