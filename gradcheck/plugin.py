"""The pytest plugin (registered through the `pytest11` entry point): exercises as pytest items.

Without `--submission` it collects nothing, so it never touches an ordinary test run. With it,
every `*.exercise.yaml` file becomes one item per check (a broken file, one failing item), graded
by one Grader per session: each exercise is graded once, when its first item runs (those whose
details are withheld all at once, at the first of theirs), and its items read their results.
The submission runs in the Grader's worker process, never in pytest's.

docs/grading.md gives the hardened command for official grading.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gradcheck.grading.results import CheckResult, GradeReport
from gradcheck.grading.score import check_points
from gradcheck.reports import details_shown, points, printable, shown_message
from gradcheck.reports.gradescope import UNFINISHED, write_results_json
from gradcheck.reports.terminal import total_line

if TYPE_CHECKING:
    from gradcheck.bank.models import Exercise
    from gradcheck.bank.problems import ExerciseError
    from gradcheck.grading.grader import Grader


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gradcheck", "grading autograd engines (gradcheck)")
    group.addoption("--submission", metavar="PATH",
                    help="grade this submission: a module file, a package folder, 'reference' "
                         "or 'torch'; without it gradcheck collects nothing")
    group.addoption("--exercises", metavar="DIR", action="append", default=[],
                    help="exercise files or folders, exercise ids or module names to grade "
                         "(repeatable; default without test paths: the course's bank, named by "
                         "gradcheck.toml here or above, else the bundled bank)")
    group.addoption("--results-json", metavar="FILE",
                    help="write Gradescope's results.json here (rewritten after each exercise)")
    group.addoption("--gradcheck-seed", metavar="N", type=int,
                    help="seed of sampled points (default: a new one, shown in the summary)")
    group.addoption("--gradcheck-key", metavar="FILE", help="an answer key built by gradcheck")
    group.addoption("--gradcheck-strict", action="store_true",
                    help="stop before grading if any exercise file is broken")
    group.addoption("--gradcheck-show-hidden", action="store_true",
                    help="show the details of hidden exercises' failures (instructors)")


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("submission"):
        return
    exercises = config.getoption("exercises")
    if exercises or config.args_source != pytest.Config.ArgsSource.ARGS:
        # Grade what --exercises names (paths, exercise ids, modules), else the bank of the
        # course pytest runs in (gradcheck.toml), else the bundled bank, instead of the
        # configured testpaths. pytest's own -k selects by id already: an exercise file's node
        # name holds its id.
        from gradcheck.bank import selection  # the loader, for grading runs only
        from gradcheck.bank.course_file import CourseFileError, bank_default, describe, find_course
        from gradcheck.bank.loader import exercise_files

        try:
            course = find_course(config.invocation_params.dir)
            chosen = selection.selection(exercises, None, lambda: bank_default(course))
            files = chosen.files() if chosen.narrowed else chosen.paths
        except (CourseFileError, selection.SelectionError) as error:
            raise pytest.UsageError(str(error)) from None
        config.stash[_BANK] = describe(chosen.paths, len(exercise_files(files)), course)
        explicit = config.args if config.args_source == pytest.Config.ArgsSource.ARGS else []
        config.args = [*explicit, *map(str, files)]
    config.stash[_SESSION] = GradingSession(config)


def pytest_report_header(config: pytest.Config) -> str | None:
    """Which bank a grading run reads, when pytest was not given its files."""
    return config.stash.get(_BANK, None)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if _SESSION not in parent.config.stash:
        return None
    # Imported here: every pytest run loads this plugin, only grading runs need the loader.
    from gradcheck.bank.models import SUFFIX

    if file_path.name.endswith(SUFFIX):
        return ExerciseFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(tryfirst=True)  # before the terminal lists the items (--collect-only)
def pytest_collection_finish(session: pytest.Session) -> None:
    """The checks of exercises whose details are withheld run last, in their order. A worker
    that saw a hidden program can leave it where the next worker finds it (docs/security.md),
    so no worker whose words reach the student may start after one: as `gradcheck grade`
    grades the visible exercises first, whatever the bank's order. Done once collection is
    finished, not in pytest_collection_modifyitems: a plugin may reorder there after any hook
    of ours (the cache provider's wrapper does, for --ff, --nf and --lf)."""
    items = session.items
    checks = [item for item in items if isinstance(item, CheckItem) and item.exercise]
    if not checks:  # not a grading run
        return
    from gradcheck.grading.workers import details_shown

    withheld = [item for item in checks if not details_shown(item.exercise)]
    session.config.stash[_SESSION].withheld = {item.path: item.exercise for item in withheld}
    if withheld:
        last = set(map(id, withheld))
        items[:] = [item for item in items if id(item) not in last] + withheld


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A check's time is 0 in every report pytest writes (JUnit, --durations) unless its
    result is known and shown: a worker that saw a hidden exercise chooses how long its checks
    take, and could spell out so what it saw (a delay per character of its program)."""
    report = yield
    if isinstance(item, CheckItem) and not item.details_shown():
        report.duration = 0.0
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    grading = session.config.stash.get(_SESSION, None)
    if grading is not None:
        grading.finish([item.path for item in session.items if isinstance(item, CheckItem)])


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    grading = config.stash.get(_SESSION, None)
    if grading is not None and grading.graded:
        terminalreporter.write_sep("=", "gradcheck score")
        terminalreporter.write(total_line(grading.report()))


class GradingSession:
    """The session's Grader (started on first use) and the results of each exercise graded."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.show_hidden: bool = config.getoption("gradcheck_show_hidden")
        self.results_json: str | None = config.getoption("results_json")
        self.graded: dict[Path, list[CheckResult]] = {}  # in the order graded
        #: the exercises whose details are withheld, graded together (`results`)
        self.withheld: dict[Path, Exercise] = {}
        self._grader: Grader | None = None
        self.submission = config.getoption("submission")
        self._stack = ExitStack()
        self._started = time.perf_counter()

    def results(self, path: Path, exercise: Exercise | None = None,
                error: ExerciseError | None = None) -> list[CheckResult]:
        """The results of the exercise in `path` (graded on first call), or of its load error.
        The first of the exercises whose details are withheld grades them all: pytest prints a
        line as each item ends, and a worker that saw a hidden exercise chooses how long it
        takes, which could spell out what it saw; so only their time together shows, as in
        `gradcheck grade`'s progress."""
        if path in self.graded:
            return self.graded[path]
        grader = self._get_grader()
        if error is not None:
            self.graded[path] = [grader.broken_result(path, error)]
            self._save(UNFINISHED)
        for each, its in (self.withheld if path in self.withheld else {path: exercise}).items():
            if each not in self.graded:
                self.graded[each] = grader.grade_exercise(its)
                self._save(UNFINISHED)
        return self.graded[path]

    def report(self) -> GradeReport:
        """The results so far, with what the latest grading learnt of the submission."""
        grader = self._grader
        return GradeReport(
            submission=self.submission, seed=grader.seed if grader else 0,
            results=[r for results in self.graded.values() for r in results],
            import_error=grader.import_error if grader else "",
            output=grader.output if grader else "",
            withheld=grader.withheld if grader else "",
            duration=time.perf_counter() - self._started)

    def finish(self, selected: list[Path]) -> None:
        """Write the final results and stop the worker."""
        complete = set(selected) <= set(self.graded)
        self._save("" if complete else UNFINISHED)
        self._stack.close()

    def _get_grader(self) -> Grader:
        if self._grader is None:
            from gradcheck.grading.grader import Grader  # only a grading run pays for the grader

            self._grader = self._stack.enter_context(Grader(
                self.config.getoption("submission"), seed=self.config.getoption("gradcheck_seed"),
                key=self.config.getoption("gradcheck_key"), hidden_feedback=self.show_hidden))
        return self._grader

    def _save(self, incomplete: str) -> None:
        if self.results_json:
            write_results_json(self.report(), self.results_json, incomplete=incomplete)


_SESSION = pytest.StashKey[GradingSession]()
#: the line that names the bank a grading run reads (for pytest's header)
_BANK = pytest.StashKey[str]()


class CheckFailed(Exception):
    """A check that did not pass; pytest shows its student-facing message, not a traceback."""

    def __init__(self, result: CheckResult, message: str) -> None:
        super().__init__(message)
        self.result = result


class ExerciseFile(pytest.File):
    """One exercise file: an item per check, or one failing item if the file is broken."""

    def collect(self) -> list[pytest.Item]:
        from gradcheck.bank.loader import load_exercise
        from gradcheck.bank.problems import ExerciseError

        try:
            exercise = load_exercise(self.path)
        except ExerciseError as error:
            if self.config.getoption("gradcheck_strict"):
                raise self.CollectError(str(error)) from None
            return [CheckItem.from_parent(self, name="load", error=error)]
        return [CheckItem.from_parent(self, name=check, exercise=exercise)
                for check in check_points(exercise)]


class CheckItem(pytest.Item):
    """One check of one exercise; it passes, fails or is skipped as its CheckResult says."""

    def __init__(self, *, exercise: Exercise | None = None, error: ExerciseError | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.exercise = exercise
        self.error = error
        self.result: CheckResult | None = None  # once graded

    def details_shown(self) -> bool:
        """Whether students may see this check's details, its time included: only once it is
        graded, as its result says (`reports.details_shown`)."""
        return self.result is not None and details_shown(
            self.result, self.config.stash[_SESSION].show_hidden)

    def runtest(self) -> None:
        grading = self.config.stash[_SESSION]
        results = grading.results(self.path, self.exercise, self.error)
        self.result = result = {r.check: r for r in results}[self.name]
        # what the engine said, escaped: pytest prints it raw, in the summary's line too
        message = printable(shown_message(result, grading.show_hidden))
        if result.status == "skipped":
            pytest.skip(message)
        if result.status != "passed":
            raise CheckFailed(result, message)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, CheckFailed):
            r = excinfo.value.result
            score = f"{points(r.score)}/{points(r.max_score)} points"
            return f"{excinfo.value}\n({score} for {r.title or r.name})"
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        if self.error is not None:
            line = self.error.problems[0].line
        else:
            line = self.exercise.line_of(("checks", self.name))
        return self.path, line - 1 if line else None, f"{self.parent.name}::{self.name}"
