"""Fuzzing the two readers of instructor-written text: the YAML exercise loader and the program
parser. Random and mutated inputs (mutations of the bundled bank's files and programs) must give
either a result or one of the project's own errors with a position, never another exception,
never a hang, and never run any code they contain.

A bounded run by default (about 250 examples, the same every run); set GRADCHECK_FUZZ_EXAMPLES
to run that many examples per test, with fresh random inputs each time (a nightly job):

    GRADCHECK_FUZZ_EXAMPLES=20000 python -m pytest tests/test_fuzz.py
"""

import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_yamlsrc import outcome

from gradcheck.bank import yaml_reader
from gradcheck.bank.bundled import bank_dir
from gradcheck.bank.loader import load_exercise
from gradcheck.bank.problems import ExerciseError
from gradcheck.program.language import ProgramError, parse

NIGHTLY = int(os.environ.get("GRADCHECK_FUZZ_EXAMPLES", "0"))
HANG = 20  # seconds after which one example counts as a hang


def budget(examples: int) -> settings:
    """`examples` in CI (derandomized by the repository's profile); GRADCHECK_FUZZ_EXAMPLES new
    random ones per test when set."""
    if NIGHTLY:
        return settings(max_examples=NIGHTLY, derandomize=False, deadline=None,
                        suppress_health_check=list(HealthCheck))
    return settings(max_examples=examples, suppress_health_check=list(HealthCheck))


FILES = sorted(bank_dir().rglob("*.exercise.yaml"))
TEXTS = [path.read_text() for path in FILES]
PROGRAMS = [(e.program.source, dict(e.program.inputs)) for e in map(load_exercise, FILES)]


# --- watching for code execution and hangs ------------------------------------------------------

#: What reading a file or a program must never do (audit events, see sys.addaudithook).
FORBIDDEN = ("exec", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
             "subprocess.Popen", "ctypes.dlopen", "pty.spawn")
_watching = [False]
_seen: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if _watching[0] and (event in FORBIDDEN or event == "open" and "MARKER" in str(args[0])):
        _seen.append(event)


sys.addaudithook(_audit)  # cannot be removed; it records nothing outside `reading()`


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang(f"one input took more than {HANG} s")


@contextmanager
def reading():
    """Fail if the code inside runs any code it reads or does not finish in HANG seconds."""
    _seen.clear()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG)
    _watching[0] = True
    try:
        yield
    finally:
        _watching[0] = False
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert _seen == [], f"reading the input ran code: {_seen}"


def test_the_watch_sees_code_being_run(tmp_path):
    """The audit hook is not asleep: running code the way an unsafe loader would is seen."""
    with pytest.raises(AssertionError, match="ran code"):
        with reading():
            exec("1 + 1")
    with pytest.raises(AssertionError, match="ran code"):
        with reading():
            open(tmp_path / "MARKER", "w").close()


# --- checking what comes out --------------------------------------------------------------------


def yaml_outcome(text: str) -> None:
    try:
        with reading():
            yaml_reader.load(text)
    except yaml_reader.YamlError as error:
        assert error.line >= 1 and error.message, repr(error)
    if yaml_reader._FastLoader is not None:  # libyaml's parser reads it as PyYAML's alone would
        assert outcome(text, fast=True) == outcome(text, fast=False)


def exercise_outcome(text: str, path: Path) -> ExerciseError | None:
    """The error loading `text` gives (checked: every problem has a line), or None."""
    path.write_text(text, encoding="utf-8")
    try:
        with reading():
            load_exercise(path)
    except ExerciseError as error:
        assert error.problems
        for problem in error.problems:
            assert problem.line >= 1 and problem.message, str(problem)
            assert str(problem).startswith(f"{path}:{problem.line}: ")
        return error
    return None


def program_outcome(source: str, inputs: dict) -> None:
    try:
        with reading():
            parse(source, inputs)
    except ProgramError as error:
        assert error.line >= 1 and error.column >= 1 and error.message, repr(error)


# --- inputs -------------------------------------------------------------------------------------

#: Code that would leave a marker behind if anything ran it.
RUN_ME = [
    "__import__('os').system('touch MARKER')",
    "open('MARKER', 'w')",
    "exec(\"open('MARKER', 'w')\")",
    "eval(\"__import__('subprocess').Popen(['touch', 'MARKER'])\")",
    "(lambda: open('MARKER', 'w'))()",
    "[open('MARKER', 'w') for _ in range(1)]",
    "x.__class__.__init__.__globals__['os'].system('touch MARKER')",
]
#: YAML values that are hostile, huge, deep or odd.
YAML_VALUES = [
    "!!python/object/apply:os.system ['touch MARKER']",
    "!!python/name:os.system",
    "!!python/object/new:subprocess.Popen [['touch', 'MARKER']]",
    "!!binary aGVsbG8=", "!!set {a, b}", "!custom 1", "!!str 1", "!!float 1",
    "&anchor [*anchor]", "*undefined", "<<: *undefined", "? [complex, key]\n  : 1",
    "[" * 200 + "]" * 200, "{a: " * 150 + "1" + "}" * 150,
    "9" * 5000, "1e999", "-1e999", ".nan", ".inf", "-.inf", "0x7fffffffffffffff", "0o17",
    "1_000", "yes", "no", "~", "null", "", "[]", "{}", "'\\0'", '"\\x00"', '"\\ud800"',
    "x" * 100_000, "|\n  " + "\n  ".join(RUN_ME), "[1, 2, 3" * 50,
]
#: Program fragments, joined at random into a program.
TOKENS = [
    "x", "y", "v", "z", "w", "_", "__import__", "os", "1", "0", "-1", "2.5", "1e300", "1e999",
    "9" * 30, "0x10", "1j", "True", "None", "'text'", "+", "-", "*", "/", "**", "//", "%", "@",
    "(", ")", "[", "]", "{", "}", ",", ":", ".", "=", "==", "+=", ":=", "->", ";", " ", "\n",
    "\n    ", "\t", "\\", "#", "exp", "log", "tanh", "relu", "sum", "mean", "sigmoid", "abs",
    "sqrt", ".exp()", ".sum()", "v[0]", "v[-1]", "v[9]", "for _ in range(", "range(10**9)",
    "for _ in range(200000):\n    for _ in range(200000):\n        y = x\n", "lambda", "if",
    "else", "while True:", "import", "from", "def", "class", "return", "yield", "await",
    "global", "del", "pass", "async", "with", "raise", "assert", "f'{x}'", "b''", "...",
    "*x", "**x", "x if y else v", "not", "and", "or", "is", "in", "\x00", "\r", "\x0c",
    "é", "ｘ", "\u2028", *RUN_ME,
]
INPUTS = {"x": None, "y": None, "v": 3}


@st.composite
def yaml_texts(draw) -> str:
    """YAML-looking text: lines of keys, values, list items and indentation."""
    pieces = st.sampled_from(["key: ", "- ", "  ", "    ", ":", "-", "[", "]", "{", "}", ",",
                              "&a ", "*a", "!!", "!tag ", "|", ">", "'", '"', "#", "\n", "---\n",
                              "...\n", "? ", "%YAML 1.2\n", "\t", "\x00", "\ufeff",
                              *YAML_VALUES[:24]])
    return "".join(draw(st.lists(st.one_of(pieces, st.text(max_size=8)), max_size=60)))


def mutate(text: str, draw, extra: list[str]) -> str:
    """One to four random edits of `text`: lines deleted, repeated, swapped, re-indented, cut
    short; characters inserted or replaced; a value replaced by one of `extra`."""
    for _ in range(draw(st.integers(1, 4))):
        lines = text.split("\n")
        i = draw(st.integers(0, len(lines) - 1))
        j = draw(st.integers(0, len(lines) - 1))
        at = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["delete", "repeat", "swap", "indent", "dedent", "cut",
                                     "insert", "replace", "value", "value", "value"]))
        if kind == "delete":
            del lines[i]
        elif kind == "repeat":
            lines.insert(i, lines[j])
        elif kind == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "indent":
            lines[i] = "  " + lines[i]
        elif kind == "dedent":
            lines[i] = lines[i][2:]
        elif kind == "cut":
            text = text[:at]
            continue
        elif kind == "insert":
            text = text[:at] + draw(st.text(max_size=10)) + text[at:]
            continue
        elif kind == "replace":
            end = draw(st.integers(at, min(len(text), at + 20)))
            text = text[:at] + draw(st.sampled_from(extra)) + text[end:]
            continue
        else:  # the value after the first ": " of a line, or the whole line
            head, sep, _ = lines[i].partition(": ")
            lines[i] = head + sep + draw(st.sampled_from(extra)) if sep else draw(
                st.sampled_from(extra))
        text = "\n".join(lines)
    return text


# --- the tests ----------------------------------------------------------------------------------


@budget(60)
@given(yaml_texts())
def test_random_yaml_gives_data_or_a_yaml_error_with_a_line(text):
    yaml_outcome(text)


@budget(100)
@given(st.data())
def test_mutated_exercise_files_load_or_give_exercise_errors_with_lines(tmp_path_factory, data):
    source = data.draw(st.sampled_from(TEXTS))
    text = mutate(source, data.draw, YAML_VALUES + RUN_ME)
    exercise_outcome(text, tmp_path_factory.getbasetemp() / "fuzz.exercise.yaml")


@budget(50)
@given(st.lists(st.sampled_from(TOKENS), max_size=40))
def test_random_programs_parse_or_give_a_program_error_with_a_position(tokens):
    program_outcome("".join(tokens), INPUTS)


@budget(50)
@given(st.data())
def test_mutated_programs_parse_or_give_a_program_error_with_a_position(data):
    source, inputs = data.draw(st.sampled_from(PROGRAMS))
    program_outcome(mutate(source, data.draw, TOKENS), inputs)


HOSTILE_FILES = [
    # every one of these would run code, or write MARKER, if a loader obeyed it
    "id: !!python/object/apply:os.system ['touch MARKER']\n",
    "!!python/object/new:subprocess.Popen [['touch', 'MARKER']]\n",
    "id: x\nprogram: !!python/name:os.system\n",
    "id: x\ntitle: t\ntopic: t\npoints: 1\ninputs: {x: {value: 1.0}}\nchecks: {gradients: {}}\n"
    "program: |\n  y = __import__('os').system('touch MARKER')\n",
    "id: x\ntitle: t\ntopic: t\npoints: 1\ninputs: {x: {value: 1.0}}\nchecks: {gradients: {}}\n"
    "program: |\n  y = x\n  open('MARKER', 'w')\n",
    "id: x\ntitle: t\ntopic: t\npoints: 1\ninputs: {x: {value: 1.0}}\nchecks: {gradients: {}}\n"
    "program: |\n  import os\n  y = x\n",
    "id: x\ntitle: t\ntopic: t\npoints: 1\ninputs: {x: {value: 1.0}}\nchecks: {gradients: {}}\n"
    "program: |\n  for _ in range(10**9):\n      y = x\n",
    "id: x\ntitle: t\ntopic: t\npoints: 1\ninputs: {x: {value: 1.0}}\nchecks: {gradients: {}}\n"
    "program: |\n  for _ in range(200000):\n    for _ in range(200000):\n      y = x\n",
    "a: " + "[" * 5000 + "]" * 5000 + "\n",
    "".join(" " * i + "- \n" for i in range(300)),
    "a0: &a0 [1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 300)),
    "id: x\ntitle: t\ntopic: t\npoints: 1\ninputs: {x: {value: 1.0}}\nchecks: {gradients: {}}\n"
    "program: |\n  y = " + "+".join(["x"] * 3000) + "\n",
    "id: x\ntitle: t\ntopic: t\npoints: 1\ninputs: {x: {value: 1.0}}\nchecks: {gradients: {}}\n"
    "program: |\n  y = " + "-" * 5000 + "x\n",
]


@pytest.mark.parametrize("text", HOSTILE_FILES, ids=range(len(HOSTILE_FILES)))
def test_hostile_files_are_refused_with_a_line_and_run_nothing(text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where MARKER would appear
    assert exercise_outcome(text, tmp_path / "hostile.exercise.yaml") is not None
    assert not (tmp_path / "MARKER").exists()
