"""GitHub Actions: an `::error` annotation per failed check, and the summary on the job's page.

GitHub turns a line `::error file=F,line=N,title=T::message` printed by a step into an annotation
on line N of file F (paths relative to the repository's root, the job's working folder), and
shows the Markdown appended to the file named by $GITHUB_STEP_SUMMARY on the run's page.

The runner reads every line of the step's output for a command: one that begins with `::` once
its leading blanks are gone, or holds `##[` anywhere. So while gradcheck grades and prints its
summary, where an engine's words appear (what it printed, its exceptions' messages, its grad_fn
names), commands are stopped with a token made for the run and printed nowhere else
(`stop_commands`); they resume just before gradcheck's own annotations (`print_commands`). Each
annotation is one line, its newlines and control characters escaped, so that no message can
start a command of its own either.
"""

from __future__ import annotations

import os
import re
import secrets
import sys
from pathlib import Path

from gradcheck.grading.results import GradeReport
from gradcheck.reports import failures, printable, shown_message
from gradcheck.reports.markdown import render_markdown

_FRAME = re.compile(r'File "([^"\n]+)", line (\d{1,9})\b')


def annotate(report: GradeReport, submission: Path | None = None, *,
                show_hidden: bool = False) -> str:
    """One `::error` line per failed check, at its exercise file and line.

    A submission that cannot be imported gets one annotation at the line of its own file where
    the import failed, instead of one per check that all say the same.
    """
    if report.import_error:
        file, line = _import_site(report.import_error, submission)
        return error_line("your engine could not be imported", report.import_error.rstrip(),
                          file, line)
    return "".join(error_line(f"{r.title} ({r.exercise_id})", shown_message(r, show_hidden),
                              _relative(r.file), r.line)
                   for r in failures(report))


#: the token that resumes workflow commands, while they are stopped (`stop_commands`)
_stopped: list[str] = []


def stop_commands() -> None:
    """Have the runner take no line for a command until `print_commands` (`::stop-commands::`)."""
    if not _stopped:
        _stopped.append(secrets.token_hex(16))
        _write(f"::stop-commands::{_stopped[0]}\n")


def print_commands(text: str = "") -> None:
    """Print gradcheck's own workflow commands, resuming commands first if they are stopped."""
    if _stopped:
        text = f"::{_stopped.pop()}::\n{text}"
    if text:
        _write(text)


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()  # before anything the grading prints on stderr


def error_line(title: str, message: str, file: str = "", line: int = 0) -> str:
    """A GitHub `::error` workflow command, escaped as GitHub's own toolkit escapes it."""
    properties = [f"file={_property(file)}"] if file else []
    if file and line:
        properties.append(f"line={line}")
    properties.append(f"title={_property(title)}")
    return f"::error {','.join(properties)}::{_data(message or title)}\n"


def append_step_summary(report: GradeReport, *, show_hidden: bool = False) -> bool:
    """Append the Markdown summary to $GITHUB_STEP_SUMMARY; False when it is not set."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return False
    with open(path, "a", encoding="utf-8") as summary:
        summary.write(render_markdown(report, show_hidden=show_hidden))
    return True


def _import_site(traceback: str, submission: Path | None) -> tuple[str, int]:
    """The last frame of the traceback in the submission's own files, as (path, line)."""
    if submission is None:
        return "", 0
    root = submission.resolve()
    for path, line in reversed(_FRAME.findall(traceback)):
        try:  # the submission writes its own traceback: a NUL in a path, a line of 5,000 digits
            resolved = Path(path).resolve()
            number = int(line)
        except (ValueError, OSError):
            continue
        if resolved == root or root in resolved.parents:
            return _relative(str(resolved)), number
    return "", 0


def _relative(file: str) -> str:
    """A path as GitHub wants it: relative to the working folder, when it lies inside it."""
    if not file:
        return ""
    path = Path(file)
    if path.is_absolute():
        try:
            return path.relative_to(Path.cwd().resolve()).as_posix()
        except ValueError:
            return path.as_posix()
    return path.as_posix()


def _data(text: str) -> str:
    return printable(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")
