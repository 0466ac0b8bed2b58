"""The `gradcheck` command.

Each subcommand is one function that adds its parser to the subparsers and sets `run`, the
function called with the parsed arguments, which returns the exit status. A new subcommand is one
more such function in SUBCOMMANDS.

Exit status of `grade`: 0 when grading completed, whatever the score; 1 when --fail-under is not
met; 2 when the grader itself could not run (bad arguments, an unreadable bank, a grader fault);
130 when interrupted (Ctrl-C). The results file is written in every one of these cases (after
Ctrl-C, as far as grading went, marked unfinished).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import shlex
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from gradcheck import __version__, watch
from gradcheck.bank import selection
from gradcheck.bank.course_file import CourseFileError, bank_default, describe, find_course
from gradcheck.bank.loader import Bank, misnamed_message
from gradcheck.bank.problems import ExerciseError
from gradcheck.course import batch, bundle, fuzz, mutation, scaffold, slots, validate
from gradcheck.engine import cgroup, uids
from gradcheck.grading import answer_key, fuzzing
from gradcheck.grading.grader import (
    DEFAULT_MEMORY_MB,
    DEFAULT_TOTAL_TIMEOUT,
    Grader,
    GraderError,
    prestart,
    resolve_submission,
    warm,
)
from gradcheck.grading.plan import convention_note, oracle_list
from gradcheck.grading.results import CheckResult, GradeReport
from gradcheck.reports import details_shown, explain, github, printable
from gradcheck.reports.gradescope import ResultsFile, write_results_json
from gradcheck.reports.html import write_html
from gradcheck.reports.junit import write_junit
from gradcheck.reports.markdown import write_markdown
from gradcheck.reports.progress import Progress
from gradcheck.reports.terminal import render_terminal, total_line

#: Exit status when the grader itself cannot run (argparse uses 2 for bad arguments too).
CANNOT_RUN = 2
#: Exit status when grading completed but the score is under --fail-under.
UNDER_THRESHOLD = 1
#: Exit status after Ctrl-C, as a shell gives a command killed by SIGINT.
INTERRUPTED = 130


def command() -> NoReturn:
    """The `gradcheck` command and `python -m gradcheck`: `main`, then the process ends. What is
    still loaded then (torch, jax, the bank, the key) is first moved out of the collector's
    reach: the interpreter's shutdown would otherwise walk every object of it once more, which
    took 0.6 s after a grading's last line (BENCHMARKS.md). Whatever cycles it holds end with
    the process. `main` itself leaves the collector alone: tests call it many times in one
    process."""
    status = main()
    gc.freeze()
    sys.exit(status)


def main(argv: Sequence[str] | None = None) -> int:
    """What `gradcheck` does with `argv`; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="gradcheck", description="Grade autograd engines against YAML exercises.")
    parser.add_argument("--version", action="version", version=f"gradcheck {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(subparsers)
    args = parser.parse_args(argv)
    # (signal.signal gives None for a handler not set from Python, which it cannot set back)
    main_thread = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, _interrupt) if main_thread else None
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warning_printer(args.command, warnings.showwarning)
            return args.run(args)
    except KeyboardInterrupt:  # Ctrl-C: the reports written so far stay, marked unfinished
        print(f"gradcheck {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


def _warning_printer(command: str, shown: Callable[..., None]) -> Callable[..., None]:
    """How a warning is printed: one of gradcheck's own (a stale answer key) as one line that
    says what to do, not Python's format with gradcheck's file and source line; another as
    Python prints it."""
    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        if issubclass(category, answer_key.StaleKeyWarning):
            print(f"gradcheck {command}: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)
    return show


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM (a CI job cancelled, `timeout`) ends a run as Ctrl-C does: its workers stopped
    and their folders removed, the reports so far kept and marked unfinished."""
    raise KeyboardInterrupt


def add_grade(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "grade", help="grade a submission against an exercise bank",
        description="Grade SUBMISSION: a module file, a package folder, 'reference' (the bundled "
                    "reference engine) or 'torch' (torch itself, float64).")
    p.add_argument("submission", metavar="SUBMISSION", nargs="?")
    selection.add_arguments(p)
    p.add_argument("--results-json", metavar="FILE", type=Path,
                   help="write Gradescope's results.json here (rewritten as grading goes, at "
                        "most a second behind)")
    p.add_argument("--junit", metavar="FILE", type=Path, help="write JUnit XML here")
    p.add_argument("--markdown", metavar="FILE", type=Path,
                   help="write a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY)")
    p.add_argument("--html", metavar="FILE", type=Path,
                   help="write an HTML report here: one self-contained page with the chain-rule "
                        "walk and the graph of each failed gradient check")
    p.add_argument("--seed", type=int, help="the seed of sampled points (default: a new one, "
                                            "printed in the report)")
    p.add_argument("--key", metavar="FILE", help="an answer key built by gradcheck")
    p.add_argument("--timeout", metavar="S", type=_positive, help="seconds per exercise, "
                                                                   "unless an exercise says")
    p.add_argument("--total-timeout", metavar="S", type=_positive,
                   default=DEFAULT_TOTAL_TIMEOUT,
                   help="seconds the whole submission's grading may take; past them every "
                        "check left fails at once (default: %(default)g)")
    p.add_argument("--memory-mb", metavar="MB", type=int, default=DEFAULT_MEMORY_MB,
                   help="memory limit of the worker (default: %(default)s)")
    p.add_argument("--worker-user", metavar="UID", type=batch.user_id,
                   help="run the submission's worker as this user and group id (any unused "
                        "uid; the grader must be root): then it cannot read files only root "
                        "may, such as the answer key (docs/security.md)")
    p.add_argument("--worker-python", metavar="PATH",
                   help="the Python the worker runs (default: the grader's own); with "
                        "--worker-user, one that user may run")
    p.add_argument("--oracles", type=oracle_list, metavar="fd,torch,jax",
                   help="restrict the oracles used (default: those each exercise lists)")
    p.add_argument("--fail-under", metavar="SCORE", type=float,
                   help=f"exit with status {UNDER_THRESHOLD} when the total is under SCORE points")
    p.add_argument("--show-hidden", action="store_true",
                   help="show hidden exercises' details in the terminal, JUnit and Markdown "
                        "reports (for instructors; results.json never shows them)")
    p.add_argument("--strict", action="store_true",
                   help="refuse to grade if any exercise file is broken (for instructors' CI)")
    p.add_argument("--quiet", action="store_true",
                   help="print only the total, and no progress on stderr")
    p.add_argument("--watch", action="store_true",
                   help="keep going: grade again whenever the submission (or an exercise file) "
                        "changes, in this one process with torch and jax imported, and say what "
                        "changed; Ctrl-C stops")
    p.add_argument("--github", action="store_true",
                   help="in GitHub Actions: print an ::error annotation per failed check and "
                        "append the Markdown summary to $GITHUB_STEP_SUMMARY")
    # grade-batch's long-lived grader of a job slot (gradcheck/course/slots.py), no SUBMISSION
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=run_grade)


def run_grade(args: argparse.Namespace) -> int:
    """Grade, write every requested report, print the summary."""
    if args.submission is None and not args.serve:
        print("gradcheck grade: give the SUBMISSION to grade: a .py file, a package folder, "
              "`reference` or `torch`", file=sys.stderr)
        return CANNOT_RUN
    problem = _argument_problem(args)
    if problem:
        return _cannot_run(args, problem)
    if args.worker_user is None or args.serve:  # a server's gradings run under a batch's uids
        return _grade_bank(args)
    try:
        with uids.held([args.worker_user]):
            return _grade_bank(args)
    except uids.InUse as error:
        return _cannot_run(args, f"--worker-user {args.worker_user}: {error}")


def _grade_bank(args: argparse.Namespace) -> int:
    """`run_grade` once its arguments are known to be sound: load the bank and grade."""
    try:
        course = find_course()
        chosen = selection.from_arguments(args, lambda: bank_default(course))
    except (CourseFileError, selection.SelectionError) as error:
        return _cannot_run(args, str(error))
    if args.watch:
        watch.warm_up(args.key, args.oracles)  # imported here once, for every grading
    elif not args.serve:  # a server's gradings each start their own helper
        prestart(args.key, args.oracles)  # grading live, jax's helper imports jax meanwhile
    try:
        bank = chosen.load(strict=args.strict)
    except (ExerciseError, OSError) as error:  # ExerciseError: only with --strict
        return _cannot_run(args, f"cannot load the exercise bank:\n{error}")
    except selection.SelectionError as error:
        return _cannot_run(args, str(error))
    for path in bank.misnamed:  # else an exercise misnamed is left out without a word
        print(f"gradcheck grade: warning: {path}: {misnamed_message(path)}", file=sys.stderr)
    if not bank.exercises and not bank.broken:
        return _cannot_run(args, "no *.exercise.yaml files in "
                                 + ", ".join(str(path) for path in chosen.paths))
    if not args.quiet:
        print(describe(chosen.paths, len(bank.exercises), course, len(bank.broken)),
              file=sys.stderr)
        print(cgroup.describe(args.memory_mb), file=sys.stderr)
        note = convention_note(bank.exercises, args.oracles)
        if note:
            print(f"gradcheck grade: {note}", file=sys.stderr)
    if args.watch:
        # the watch's own key stands for live oracles: the submission may import what it may
        # when graded live
        return watch.run(args, bank, chosen, lambda bank, seed, key, scored: grade_and_report(
            args, bank, seed, key, live=args.key is None, scored=scored)[1])
    if args.serve:
        return _serve(args, bank)
    return grade_and_report(args, bank, args.seed, args.key)[0]


def _serve(args: argparse.Namespace, bank: Bank) -> int:
    """`grade --serve`: with the bank and the key loaded once, grade each submission the batch
    sends in a process forked from this one (`slots.serve`), as `grade` would."""
    try:
        key = answer_key.load(args.key) if args.key else None
    except answer_key.KeyFileError as error:
        return _cannot_run(args, str(error))

    def grade(request: dict[str, Any]) -> int:
        args.submission, args.worker_user = request["submission"], request["worker_user"]
        args.results_json = Path(request["results"])
        args.junit = Path(request["junit"]) if request["junit"] else None
        problem = _argument_problem(args)
        if problem:
            return _cannot_run(args, problem)
        return grade_and_report(args, bank, args.seed, key)[0]

    # imported here once, not in every fork: what random programs run live and what a failed
    # one's shrinking needs, and numpy's generators, which draw the points; and the key's
    # answers decoded, with the oracles' agreement on them
    fuzzing.load_shrinking()
    importlib.import_module("numpy.random")
    if key is not None:
        key.prepare(bank, args.oracles)
        warm(bank, key)
    return slots.serve(grade)


def grade_and_report(args: argparse.Namespace, bank: Bank, seed: int | None,
                     key: str | answer_key.Key | None, live: bool = False,
                     scored: Callable[[GradeReport], None] | None = None
                     ) -> tuple[int, GradeReport | None]:
    """Grade `bank` at `seed` (None: a new one) with `key`, write every requested report and
    print the summary; the exit status, and the report when grading ran. `live`: the key only
    saves the oracles' work, so the submission is run as in a live grading. `scored`: given the
    report once every score is known, before the feedback of failed checks is worked out. With
    --github, no line printed meanwhile is taken for a workflow command but gradcheck's own
    annotations (`github.stop_commands`)."""
    if not args.github:
        return _grade_and_report(args, bank, seed, key, live, scored)
    github.stop_commands()
    try:
        return _grade_and_report(args, bank, seed, key, live, scored)
    finally:
        github.print_commands()


def _grade_and_report(args: argparse.Namespace, bank: Bank, seed: int | None,
                      key: str | answer_key.Key | None, live: bool,
                      scored: Callable[[GradeReport], None] | None
                      ) -> tuple[int, GradeReport | None]:
    so_far = GradeReport(submission=args.submission, seed=seed or 0)
    results_file = ResultsFile(args.results_json) if args.results_json else None
    shown = Progress(None if args.quiet else sys.stderr, len(bank.exercises))

    def progress(exercise_id: str, results: list[CheckResult]) -> None:
        so_far.results += results
        if results_file is not None:
            results_file.update(so_far)
        shown.exercise_done(exercise_id, results[0].topic if results else "",
                            args.show_hidden or all(details_shown(r) for r in results))

    shown.start(keyed=key is not None)
    try:
        try:
            with Grader(args.submission, seed=seed, key=key, oracles=args.oracles,
                        timeout=args.timeout, memory_mb=args.memory_mb,
                        worker={**_worker_options(args), **({"forbid": ()} if live else {})},
                        total_timeout=args.total_timeout,
                        hidden_feedback=args.show_hidden) as grader:
                so_far.seed = grader.seed
                if results_file is not None:
                    results_file.update(so_far)
                # Each side's scores first, then the feedback of its failed checks: the grading
                # then knows its requests ahead and sends them by the hundred (a sixth less of
                # the grader's CPU, BENCHMARKS.md). The watch shows every score first.
                report = grader.grade_bank(bank, progress, feedback_later=True,
                                           every_score_first=scored is not None,
                                           feedback_progress=shown.feedback)
                shown.withheld_done()
                if scored is not None:
                    shown.close()
                    scored(report)
                grader.give_feedback(report, None if scored is not None else shown.feedback)
        finally:  # before any other write of results.json
            shown.close()
            if results_file is not None:
                results_file.stop()
    except GraderError as error:
        return _cannot_run(args, str(error), so_far), None
    except Exception as error:  # a fault of gradcheck, not of the submission: keep the results
        traceback.print_exc()
        return _cannot_run(args, f"the grader failed ({type(error).__name__}: {error}); this is "
                                 "a fault of gradcheck, not of the submission", so_far), None
    if results_file is not None:
        results_file.finish(report)
    _write_other_reports(report, args, bank)
    _print_summary(report, args)
    _warn_ungraded(report, args)
    if args.github:
        github.append_step_summary(report, show_hidden=args.show_hidden)
        github.print_commands(github.annotate(report, resolve_submission(args.submission),
                                              show_hidden=args.show_hidden))
    faults = [result for result in report.results
              if result.status == "error" and result.check != "load"]  # not a broken file's
    if faults:  # never a 0 that reads as the submission's: a batch files it as not graded
        print(f"gradcheck grade: {len(faults)} check(s) could not be graded, a fault of "
              "gradcheck, not of the submission; their results say why", file=sys.stderr)
        return CANNOT_RUN, report
    if args.fail_under is not None and report.score < args.fail_under:
        return UNDER_THRESHOLD, report
    return 0, report


def add_validate(subparsers: argparse._SubParsersAction) -> None:
    # Everything after `validate` goes to gradcheck.course.validate, its own options and --help included.
    p = subparsers.add_parser("validate", help="check an exercise bank before publishing it",
                              add_help=False, prefix_chars="\0")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(run=lambda args: validate.main(args.argv))


SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    add_grade, add_validate, batch.add_parser, answer_key.add_parser, explain.add_parser,
    scaffold.add_parser, bundle.add_parser, mutation.add_parser, fuzz.add_parser)


def _argument_problem(args: argparse.Namespace) -> str:
    """What is wrong with `grade`'s paths, or "" (checked before any work starts; a server's
    submission, before each grading)."""
    if args.submission is not None:  # None: --serve, before its first submission
        try:
            resolve_submission(args.submission)
        except GraderError as error:
            return str(error)
    if args.key and not Path(args.key).is_file():
        return f"--key {args.key}: no such file"
    if args.submission is None:
        return ""
    return batch.worker_problem(resolve_submission(args.submission), args.worker_user,
                                args.worker_python)


def _worker_options(args: argparse.Namespace) -> dict[str, object]:
    """The options of the sandboxed worker that `grade` sets."""
    options: dict[str, object] = {}
    if args.worker_user is not None:
        options["user"] = args.worker_user
    if args.worker_python:
        options["python"] = args.worker_python
    return options


def _cannot_run(args: argparse.Namespace, problem: str, report: GradeReport | None = None) -> int:
    """Say why grading could not run, and still leave a results file that says so."""
    print(f"gradcheck grade: {problem}", file=sys.stderr)
    if args.github:
        github.print_commands(github.error_line("gradcheck could not grade", problem))
    if args.results_json:
        report = report or GradeReport(submission=args.submission, seed=args.seed or 0)
        write_results_json(report, args.results_json,
                           incomplete=f"The grader could not run: {problem}")
    return CANNOT_RUN


def _write_other_reports(report: GradeReport, args: argparse.Namespace, bank: Bank) -> None:
    if args.junit:
        write_junit(report, args.junit, show_hidden=args.show_hidden)
    if args.markdown:
        write_markdown(report, args.markdown, show_hidden=args.show_hidden,
                       command=reproduction(args, report.seed))
    if args.html:
        write_html(report, args.html, show_hidden=args.show_hidden,
                   command=reproduction(args, report.seed), graded=bank.exercises)


def _print_summary(report: GradeReport, args: argparse.Namespace) -> None:
    if args.quiet:
        sys.stdout.write(total_line(report))
    else:
        colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        sys.stdout.write(render_terminal(report, colour=colour, show_hidden=args.show_hidden,
                                         command=reproduction(args, report.seed)))


def _warn_ungraded(report: GradeReport, args: argparse.Namespace) -> None:
    """A warning on stderr for each check that graded nothing (it scores 0): for the exercise's
    author, as `validate` reports it too. A hidden exercise's reason is not shown."""
    for result in report.results:
        if result.status == "skipped":
            shown = details_shown(result, args.show_hidden)
            why = f": {result.message.splitlines()[0]}" if shown and result.message else ""
            print(f"gradcheck grade: warning: {result.name} was not graded and scores 0{why}",
                  file=sys.stderr)


def reproduction(args: argparse.Namespace, seed: int) -> str:
    """The `gradcheck grade` command that grades the same exercises the same way at `seed`."""
    words = ["gradcheck", "grade", args.submission]
    for item in args.exercises or []:
        words += ["--exercises", str(item)]
    if args.keyword:
        words += ["-k", args.keyword]
    if args.key:
        words += ["--key", str(args.key)]
    if args.oracles:
        words += ["--oracles", ",".join(args.oracles)]
    if args.timeout:
        words += ["--timeout", f"{args.timeout:g}"]
    return printable(shlex.join(words + ["--seed", str(seed)]), one_line=True)


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds > 0")
    return value
