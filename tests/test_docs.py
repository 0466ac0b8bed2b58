"""The docs' examples run as written.

A fenced block preceded by `<!-- test -->` runs (```bash in bash, ```python in Python); a block
preceded by `<!-- test: write PATH -->` is saved to PATH. The blocks of one page run in order, in
one bash process, so `cd` and files carry over from block to block:

- docs/instructors.md in a new temporary folder;
- docs/students.md in the student template that instructors.md publishes (`mycourse/student`);
- docs/exercise-format.md at the repository's root, on the bank it describes.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gradcheck.bank.loader import load_exercise
from gradcheck.bank.schema import json_schema

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MARKED = re.compile(r"^<!-- test(?:: write (?P<path>\S+))? -->\n"
                    r"```(?P<lang>\w+)\n(?P<body>.*?)^```$", re.M | re.S)
_END = "GRADCHECK_DOC_BLOCK_END"


def runnable(page: Path) -> list[tuple[str, str, str]]:
    """The page's marked blocks as (language, body, path to write or '')."""
    return [(m["lang"], m["body"], m["path"] or "") for m in MARKED.finditer(page.read_text())]


def script(page: Path) -> str:
    """One bash script that writes and runs the page's marked blocks, in order."""
    lines = ["set -euxo pipefail"]
    for lang, body, path in runnable(page):
        assert _END not in body
        if path:
            lines += [f'mkdir -p "$(dirname {path})"', f"cat > {path} <<'{_END}'", body + _END]
        elif lang == "bash":
            lines.append(body)
        elif lang == "python":
            lines += [f"python - <<'{_END}'", body + _END]
        else:
            raise AssertionError(f"{page.name}: a block marked to run is ```{lang}, not bash or "
                                 "python")
    return "\n".join(lines) + "\n"


def run_page(page: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "NO_COLOR": "1"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    done = subprocess.run(["bash", "-c", script(page)], cwd=cwd, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (f"{page.name}: an example failed (exit {done.returncode})\n"
                                  f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The course instructors.md builds, and the output of its commands."""
    folder = tmp_path_factory.mktemp("docs")
    done = run_page(DOCS / "instructors.md", folder)
    return folder / "mycourse", done.stdout


def test_every_readers_page_has_runnable_examples():
    for name in ("instructors.md", "students.md", "exercise-format.md"):
        assert runnable(DOCS / name), f"{name} has no example marked <!-- test -->"


@pytest.mark.slow
def test_instructors_walkthrough_runs_and_publishes(course):
    folder, output = course
    reference, starter, *_ = re.findall(r"^total (\S+)/(\S+) ", output, re.M)
    assert reference[0] == reference[1] and starter[0] == "0", output
    assert (folder / "autograder.zip").is_file()
    assert '"score": 0' in output  # results.json of the starter, tried as Gradescope would
    if os.geteuid() == 0:  # setup.sh checked the worker's user, and run_autograder used it
        assert "setup.sh: the worker starts as uid 61000" in output
    assert "cannot run" not in output and "could not grade" not in output
    published = {p.name for p in (folder / "student" / "exercises").rglob("*.yaml")}
    assert "product-rule.exercise.yaml" in published
    assert "product-rule-hidden.exercise.yaml" not in published
    assert "::error file=exercises/08-mine/product-rule.exercise.yaml,line=" in output


@pytest.mark.slow
def test_students_page_runs_in_the_published_template(course):
    folder, _ = course
    run_page(DOCS / "students.md", folder / "student")


@pytest.mark.slow
def test_exercise_format_examples_run_on_the_bank():
    run_page(DOCS / "exercise-format.md", ROOT)


def test_exercise_format_example_is_the_file_it_names():
    doc = (DOCS / "exercise-format.md").read_text()
    named = re.search(r"^`(exercises/\S+\.exercise\.yaml)`:\n\n```yaml\n(.*?)^```$", doc,
                      re.M | re.S)
    assert named, "exercise-format.md no longer shows a complete file of the bank"
    path, text = ROOT / named[1], named[2]
    assert text == path.read_text(), (
        f"the complete example of exercise-format.md differs from {named[1]}: copy the file "
        "into the page again")
    load_exercise(path)


def _schema_values(node):
    """(property name, value) for every scalar default and maximum the schema states."""
    if isinstance(node, dict):
        for name, prop in node.get("properties", {}).items():
            for word in ("default", "maximum"):
                value = prop.get(word)
                if isinstance(value, dict):  # a tolerance pair, or both pairs
                    yield from ((pair, part) for pair, tol in value.items()
                                for part in (tol.values() if isinstance(tol, dict) else []))
                    yield from ((name, part) for part in value.values()
                                if not isinstance(part, dict))
                elif isinstance(value, (bool, int, float)) or value and isinstance(value, str):
                    yield name, value
        for value in node.values():
            yield from _schema_values(value)


def test_exercise_format_states_every_default_and_limit_of_the_schema():
    doc = (DOCS / "exercise-format.md").read_text().splitlines()
    for name, value in set(_schema_values(json_schema())):
        lines = [line for line in doc if f"`{name}`" in line or f"{name}: " in line]
        if isinstance(value, bool):
            found = any(re.search(rf"\b{str(value).lower()}\b", line) for line in lines)
        elif isinstance(value, str):
            found = any(f"`{value}`" in line for line in lines)
        else:
            found = any(float(number) == value for line in lines
                        for number in re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?", line))
        assert found, f"exercise-format.md does not give {name}'s {value!r} on a line about it"
