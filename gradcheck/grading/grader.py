"""The grader: every check of every exercise, for one submission.

The submission runs only in its worker process (:mod:`gradcheck.engine.sandbox`) and answers with plain
JSON. Everything that decides a grade happens here: the oracles run in this process, torch's
behaviour is observed here through the same probe the worker uses, and the comparison reads only
the numbers the worker sent.

Threads and a helper process save time on two cores without changing any result: a check's
oracles (or torch's record of a graph or behaviour check) are computed while the worker answers
the same check, and, grading a bank live, jax works ahead on the exercises to come, a dozen
exercises at a time: in a helper process that also draws the sampled points
(`gradcheck.grading.helper_process`), or, in a process that has jax imported already, in a thread. Every result
still comes from the same oracle at the same points. Grading with a key, the worker is sent the
requests that follow a check with the check's last one, as far as they are known before its
reply (`Grader.lookahead`, `_plan`), so it answers them while this process judges; it still
meets the same requests in the same order.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import secrets
import time
import traceback
from concurrent.futures import Future, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, NamedTuple, Sequence

from gradcheck import oracles
from gradcheck.oracles import second_order
from gradcheck.bank import bundled
from gradcheck.bank.loader import Bank, load_bank
from gradcheck.bank.models import Exercise
from gradcheck.bank.problems import ExerciseError
from gradcheck.bank.tolerances import Tolerance, Tolerances
from gradcheck.engine import handler
from gradcheck.engine.sandbox import Failure, frame
from gradcheck.grading import (
    answer_key,
    compare,
    helper_process,
    localise,
    oracle_threads,
    score,
    verdicts,
)
from gradcheck.grading.chain_rule import trace_request
from gradcheck.grading.digits import number_text
from gradcheck.grading.plan import (
    GRADIENT_CHECKS,
    GraderError,
    check_requests,
    gradients_request,
    hessian_request,
    jax_modules,
    probe_request,
    probed_check,
    sample_seed,
    search_options,
    torch_request,
    wanted_oracles,
)
from gradcheck.grading.results import CheckResult, GradeReport
from gradcheck.grading.workers import Workers, details_shown
from gradcheck.program.ops import CREATE_GRAPH_CALL

if TYPE_CHECKING:  # imported where a check asks for it: it brings hypothesis
    from gradcheck.grading import fuzzing

DEFAULT_MEMORY_MB = 1024
#: seconds a whole submission's grading may take (`--total-timeout`): past it, every check left
#: fails at once, and the reports are written well within the ten minutes a platform such as
#: Gradescope gives by default
DEFAULT_TOTAL_TIMEOUT = 480.0
#: what a submission graded from an answer key cannot import (docs/security.md)
FRAMEWORKS = ("torch", "jax", "jaxlib")
Progress = Callable[[str, list[CheckResult]], None]


def resolve_submission(submission: str | Path) -> Path:
    """A submission's module file or package folder; `reference` and `torch` name bundled ones."""
    if str(submission) == "reference":
        return bundled.reference_path()
    if str(submission) == "torch":
        # Found without importing it: the module imports torch.
        return Path(importlib.util.find_spec("gradcheck.engine.torch_engine").origin)
    path = Path(submission)
    if path.is_file() and path.suffix == ".py":
        return path
    if path.is_dir() and (path / "__init__.py").is_file():
        return path
    if path.is_dir():
        raise GraderError(f"{path} is a folder without __init__.py; give the engine's module "
                          "file, or make the folder a package")
    raise GraderError(f"no submission at {path}: give a .py file, a package folder, "
                      "`reference` or `torch`")


class Grader:
    """Grades one submission. Owns its worker process and the oracles' results for the run."""

    def __init__(self, submission: str | Path, *, seed: int | None = None,
                 key: str | Path | answer_key.Key | None = None,
                 oracles: Sequence[str] | None = None,
                 timeout: float | None = None, memory_mb: int | None = DEFAULT_MEMORY_MB,
                 worker: Mapping[str, Any] | None = None,
                 total_timeout: float | None = DEFAULT_TOTAL_TIMEOUT,
                 records: bool = False, hidden_feedback: bool = True) -> None:
        self.label = str(submission)
        self.path = resolve_submission(submission)
        #: the answer key: torch's and jax's results come from it, for the exercises it holds.
        self.key = key if isinstance(key, answer_key.Key) else _load_key(key) if key else None
        if self.key is not None and seed is not None and int(seed) != self.key.seed:
            named = self.key.path or "given"  # a loaded Key's text would be all its answers
            raise GraderError(f"the answer key {named} was built with seed {self.key.seed}; grade "
                              f"with --seed {self.key.seed} (or no --seed), or build a key with "
                              f"seed {seed}")
        if self.key is not None:
            seed = self.key.seed
        self.seed = secrets.randbelow(2**32) if seed is None else int(seed)
        self.oracles = tuple(oracles) if oracles else None
        self.timeout = timeout
        #: the seconds all of the submission's requests may take, counted from the first
        self.total_timeout = total_timeout
        # Grading from a key needs neither torch nor jax, so the submission may not use them
        # either (the bundled `torch` submission is torch itself).
        forbid = FRAMEWORKS if self.key is not None and self.label != "torch" else ()
        # `worker`: more options of gradcheck.engine.sandbox.Worker (import_timeout, max_tasks, user...)
        #: the worker of the visible exercises, and a fresh one for the others
        #: (gradcheck.grading.workers)
        self.workers = Workers(self.path, {"memory_mb": memory_mb, "forbid": forbid,
                                           **(worker or {})})
        self._torch_records: dict[str, Future[dict[str, Any]] | str] = {}
        #: what this grader gave the oracle threads (gradcheck.grading.oracle_threads), cancelled when it closes
        self._submitted: list[Future] = []
        #: (exercise id, check) -> its points, drawn ahead, and jax's results there, when ready
        self._ahead: dict[tuple[str, str], tuple[Future, Future, int]] = {}
        #: what the check being graded leaves for reports besides its message
        #: (CheckResult.detail)
        self._detail: dict[str, Any] = {}
        #: the check being graded: its hint, if it has one, is shown instead of the exercise's
        self._check = ""
        #: keep torch's and the engine's records of graph and behaviour checks that pass too
        #: (`gradcheck explain` shows them; reports show those of failed checks only)
        self.records = records
        #: work out the feedback of failed checks in exercises whose details are withheld
        #: (`details_shown`); a student-facing grading (`gradcheck grade` without
        #: --show-hidden) does not, as no report of it would show that feedback
        self.hidden_feedback = hidden_feedback
        #: what `inspect` says the engine lacks of the higher-order protocol, asked once per
        #: worker side (visible, or not)
        self._missing: dict[bool, dict[str, str]] = {}
        #: the helper process working ahead, if one was started (gradcheck.grading.helper_process)
        self._helper: helper_process.Helper | None = None
        #: with `grade_bank(..., feedback_later=True)`: the failed gradient checks whose
        #: feedback `give_feedback` works out, each with what works it out
        self._later: list[tuple[Exercise, CheckResult, Later]] = []
        #: the chain-rule walks' findings so far, by exercise and point (`localise.diagnose`)
        self._located: dict[str, dict[str, localise.Finding]] = {}
        #: by exercise: what its determinism probe found ('' for nothing), once it has run
        self._unsteady: dict[str, str] = {}
        self._feedback_later = False
        #: send the requests that follow a check's last one with it, as far as they are known
        #: (`_plan`), so that the worker answers them while this process judges the replies
        #: before: on two cores the two then work at once, and the engine meets the same
        #: requests in the same order
        self.lookahead = True
        #: while `grade_bank` grades: its exercises, in the order it grades them
        self._order: list[Exercise] | None = None
        #: per side, the plan of its requests (`_side_plan`) and what it was made knowing
        self._side_plans: dict[bool, tuple[Any, list[Any], dict[tuple[str, str], range]]] = {}
        #: `_requests` of each check whose engine has what it needs, made once a grading (a
        #: side's plan is made again once `inspect` has told what the engine lacks)
        self._check_requests: dict[tuple[str, str], tuple[tuple[dict[str, Any], ...], bool]] = {}
        #: the ids of the visible exercises graded after a worker of the withheld side started:
        #: graded as those (`shown`)
        self._after_withheld: set[str] = set()

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.workers.close()
        if self._helper is not None:
            self._helper.close()
            self._helper = None
        # what has not begun is dropped; what has is waited for, so no work outlives the grader
        wait([future for future in self._submitted if not future.cancel()])
        self._submitted.clear()

    def _in_background(self, lane: str, function: Callable[..., Any], *args: Any) -> Future:
        """`function(*args)` on one of the process's oracle threads (gradcheck.grading.oracle_threads)."""
        self._submitted = [future for future in self._submitted if not future.done()]
        self._submitted.append(oracle_threads.lane(lane).submit(function, *args))
        return self._submitted[-1]

    def _oracles_meanwhile(self, exercise: Exercise, function: Callable[..., Any], *args: Any
                           ) -> Future:
        """`function(*args)`, the oracles' answers for a check of `exercise`, worked out while
        the worker answers the check: on an oracle thread; or here, now, when the answer key
        holds the exercise, as reading them costs less than the thread's hand-offs."""
        if self.key is None or self.key.refusal(exercise):
            return self._in_background("gradcheck-oracles", function, *args)
        read: Future = Future()
        try:
            read.set_result(function(*args))
        except Exception as error:  # raised where the thread's would be: at `result()`
            read.set_exception(error)
        return read

    @property
    def import_error(self) -> str:
        """Why the submission could not be imported in the worker of the visible exercises (its
        traceback), or ''."""
        return self.workers.import_error()

    @property
    def output(self) -> str:
        """What the submission printed so far in the worker of the visible exercises, truncated."""
        return self.workers.output()

    @property
    def withheld(self) -> str:
        """What the worker of the other exercises said: for the instructor's reports only."""
        return self.workers.withheld()

    # --- one exercise ---------------------------------------------------------------------------

    def shown(self, exercise: Exercise) -> bool:
        """Whether what the worker says of `exercise` may reach a student, on the shown side's
        worker: its details are shown (`details_shown`), and it was not graded after a worker
        of the withheld side started, which could have left their programs where any later
        worker finds them (pytest's items reordered as they run, a caller of `grade_exercise`).
        Such an exercise is graded as a hidden one, by that side's worker."""
        return details_shown(exercise) and exercise.id not in self._after_withheld

    def grade_exercise(self, exercise: Exercise) -> list[CheckResult]:
        """One result per check of `exercise`; a fault costs only the checks it touches."""
        if self.workers.withheld_started and details_shown(exercise):
            self._after_withheld.add(exercise.id)
        shares = score.check_points(exercise)
        budget = _Budget(self.timeout or exercise.timeout)
        self._unsteady.pop(exercise.id, None)  # its probe runs again, in its first gradient check
        results = []
        for name, max_score in shares.items():
            started = time.monotonic()
            self._detail, self._check = {}, name
            absent, blocked_by = self._absent_higher_order(exercise, name, budget)
            later = None
            try:
                status, message, notes, blocked_by, later = (
                    Outcome("failed", absent, [], blocked_by) if absent
                    else self._run_check(exercise, name, budget))
            except Exception as error:  # gradcheck's fault (or the key's): this check only
                status, notes, blocked_by = "error", [traceback.format_exc()], ""
                message = (f"gradcheck could not grade this check ({type(error).__name__}: "
                           f"{error}); this is a fault of the grader, not of the submission")
            results.append(CheckResult(
                exercise_id=exercise.id, check=name,
                title=f"{exercise.title}: {CHECK_TITLES[name]}",
                score=max_score if status == "passed" else 0.0,  # skipped is never a pass
                max_score=max_score, status=status, message=message, topic=exercise.topic,
                visibility=exercise.visibility, file=str(exercise.path or ""),
                line=exercise.line_of(f"checks.{name}"), duration=time.monotonic() - started,
                author_notes=notes, blocked_by=blocked_by,
                after_withheld=exercise.id in self._after_withheld, detail=self._detail))
            if later is not None:
                self._later.append((exercise, results[-1], later))
        return results

    def grade_point(self, exercise: Exercise, point: dict[str, Any]
                    ) -> tuple[Outcome, dict[str, Any]]:
        """The exercise's gradients at one point, graded as a `gradients` check grades each of
        its points (the determinism probe, the oracles, the diagnosis), and what the diagnosis
        read: the detail of a failed gradients check, with the engine's trace records there
        (`found`) whenever the engine is deterministic. `gradcheck explain` shows its walk so."""
        self._detail, self._check = {}, "gradients"
        budget = _Budget(self.timeout or exercise.timeout)
        outcome = self._gradients(exercise, "gradients", [point],
                                  self._wanted(exercise, "gradients"), budget, probe=True)
        detail = {**self._detail, "point": dict(point)}
        if "found" not in detail and not detail.get("nondeterministic"):
            reply = self._ask(exercise, trace_request(exercise.program, point,
                                                      exercise.grad_names), budget)
            if isinstance(reply, dict) and reply.get("nodes"):
                detail["found"] = reply["nodes"]
        return outcome, detail

    def broken_result(self, path: str | Path, error: ExerciseError) -> CheckResult:
        """A broken exercise file: one failing result that shows where and what, to students
        only when the file is visible (its problems quote its program and hints): one whose
        visibility cannot be read is taken for hidden. Its module is the topic it says, else
        its folder, as selecting by module counts it (gradcheck.bank.selection)."""
        problem = error.problems[0] if error.problems else None
        return CheckResult(exercise_id=Path(path).name.removesuffix(".exercise.yaml"),
                           check="load", title=f"{Path(path).name} could not be loaded",
                           score=0.0, max_score=0.0, status="error", message=str(error),
                           file=str(path), line=problem.line if problem else 0,
                           visibility=error.visibility or "hidden",
                           topic=error.topic or Path(path).parent.name)

    def grade_bank(self, bank: Bank, progress: Progress | None = None,
                   feedback_later: bool = False, every_score_first: bool = False,
                   feedback_progress: Callable[[int], None] | None = None) -> GradeReport:
        """Every exercise of `bank`, in order; broken files become failing "load" results.
        `feedback_later`: each side's scores first (`gradcheck grade`: the requests are then
        known ahead), then the feedback of its failed checks that asks the engine for more (the
        finding of the chain-rule walk; the shrinking of a random program that differs, replayed
        from an answer key): the visible exercises' by their own worker, before any exercise
        whose details are withheld is graded, since no worker whose words reach a student may
        come after one that saw such an exercise (gradcheck.grading.workers); the rest by
        `give_feedback`. `every_score_first` (`gradcheck grade --watch`, on a bank its student
        has): the visible exercises' feedback too waits for every score, so that the scores can
        be shown first, and is worked out by a new worker after the withheld side's.
        `feedback_progress` is told how many failed checks' feedback is worked out next."""
        started = time.monotonic()
        self._feedback_later, self._later, self._located = feedback_later, [], {}
        report = GradeReport(submission=self.label, seed=self.seed)
        self.workers.deadline = None  # each grading of a bank has its --total-timeout
        for path, error in bank.broken:
            report.results.append(self.broken_result(path, error))
        self._jax_ahead(bank.exercises)
        # The visible exercises first, then the others in a fresh worker whose words are withheld
        # (gradcheck.grading.workers); on each side, while jax works ahead, the exercises that do
        # not wait for it first. The order is the same with a key, so that a submission meets the
        # same sequence of requests in every run, live or keyed.
        order = sorted(range(len(bank.exercises)),
                       key=lambda number: (not self.shown(bank.exercises[number]),
                                           bool(self._jax_checks(bank.exercises[number]))))
        graded: dict[int, list[CheckResult]] = {}
        self._order, self._side_plans = [bank.exercises[number] for number in order], {}
        self._check_requests = {}
        try:
            for number in order:
                exercise = bank.exercises[number]
                if not (every_score_first or self.shown(exercise)):
                    self._give_side(True, feedback_progress)
                graded[number] = self.grade_exercise(exercise)
                report.duration = time.monotonic() - started
                if progress:
                    progress(exercise.id, graded[number])
        finally:
            self._order = None
        report.results += [result for number in sorted(graded) for result in graded[number]]
        self._finish(report, started)
        return report

    def give_feedback(self, report: GradeReport,
                      feedback_progress: Callable[[int], None] | None = None) -> None:
        """The feedback `grade_bank(..., feedback_later=True)` left out, written into its
        results: asked of new workers, the visible exercises' first, each side's apart as in
        grading (gradcheck.grading.workers); no score changes."""
        started = time.monotonic() - report.duration
        for shown in (True, False):
            self._give_side(shown, feedback_progress)
        self._finish(report, started)

    def _give_side(self, shown: bool, feedback_progress: Callable[[int], None] | None) -> None:
        """Work out the feedback left for the failed checks of one side (shown: the visible
        exercises), the chain-rule walks in rounds (`_in_rounds`)."""
        side = [item for item in self._later if self.shown(item[0]) == shown]
        if not side:
            return
        self._later = [item for item in self._later if self.shown(item[0]) != shown]
        if feedback_progress is not None:
            feedback_progress(len(side))
        for _, result, later in side:
            if later.give is not None:
                try:
                    result.message, result.detail = later.give()
                except Exception:
                    _fault(result)
        self._in_rounds([item for item in side if item[2].steps is not None])

    def _in_rounds(self, walks: list[tuple[Exercise, CheckResult, Later]]) -> None:
        """Work out the chain-rule walks of one side's failed checks together, in rounds: each
        walk's next request (its trace first, then what the trace tells it to run alone) is
        asked in one round with the other walks', which go to the worker ahead of their turn
        (`Worker.request(then=...)`), so that the worker traces the next programs while this
        process walks the last trace. A walk of an exercise with one under way waits for it,
        which may leave it nothing to ask (`localise.diagnose`, `located`)."""
        waiting: dict[str, list[tuple[Exercise, CheckResult, Later]]] = {}
        for item in walks:
            waiting.setdefault(item[0].id, []).append(item)
        under_way: list[tuple[Exercise, CheckResult, Later, localise.Steps, dict[str, Any]]] = []

        def advance(exercise: Exercise, result: CheckResult, later: Later,
                    steps: localise.Steps, reply: Callable[[], Any]) -> None:
            """The walk is sent `reply()` and its next request joins the next round; a walk
            that is done, or met a fault of gradcheck's, is written into its result, and the
            next walk of its exercise begins."""
            try:
                under_way.append((exercise, result, later, steps, steps.send(reply())))
                return
            except StopIteration as done:
                result.message, result.detail = done.value
            except Exception:
                _fault(result)
            begin(exercise.id)

        def begin(exercise_id: str) -> None:
            if waiting[exercise_id]:
                exercise, result, later = waiting[exercise_id].pop(0)
                assert later.steps is not None
                advance(exercise, result, later, later.steps(), lambda: None)

        for exercise_id in list(waiting):
            begin(exercise_id)
        while under_way:
            this_round, under_way = under_way, []
            for number, (exercise, result, later, steps, request) in enumerate(this_round):
                then = [asked for *_, asked in this_round[number + 1:]] if self.lookahead else []
                advance(exercise, result, later, steps, lambda: self._ask(
                    exercise, request, later.budget, then=then))

    def _finish(self, report: GradeReport, started: float) -> None:
        self.workers.close()  # the last worker's output is complete only once it is dead
        report.import_error = self.import_error
        report.output = self.output
        report.withheld = self.withheld
        report.duration = time.monotonic() - started

    # --- checks ---------------------------------------------------------------------------------

    def _run_check(self, exercise: Exercise, name: str, budget: _Budget
                   ) -> Outcome:
        if name in GRADIENT_CHECKS:
            points, jax_ahead = self._drawn(exercise, name)
            return self._gradients(exercise, name, points, self._wanted(exercise, name),
                                   budget, name == probed_check(exercise), jax_ahead)
        if name == "hessian":
            return self._hessian(exercise, budget)
        if name == "random_programs":
            return self._random_programs(exercise, budget)
        verdict = verdicts.graph if name == "graph" else _behaviour_verdict
        return self._against_torch(exercise, torch_request(
            exercise, name, sample_seed(self.seed, exercise.id)), budget, verdict)

    def _random_programs(self, exercise: Exercise, budget: _Budget) -> Outcome:
        """Programs drawn from this run's seed, graded as a sampled check: live against the
        check's oracles; with an answer key against finite differences and the reference
        engine, the key's cases first (those the search draws for an engine that passes them
        all: `fuzzing.replayed`), the live search from the first that differs."""
        from gradcheck.grading import fuzzing  # hypothesis, only for the exercises that ask

        check = exercise.checks.random_programs
        wanted = (fuzzing.KEYED if self.key is not None
                  else fuzzing.available(self._wanted(exercise, "random_programs")))
        if not wanted:
            return Outcome("skipped", "skipped: no oracle was asked", [])
        options = search_options(exercise, self.seed)
        stored = self.key.random_programs(exercise) if self.key is not None else None
        ask = self._replay_ask(exercise, budget)
        result = (fuzzing.search(ask, oracles=wanted, **options) if stored is None
                  else fuzzing.replayed(ask, stored, oracles=wanted, agreed=self.key.agreement,
                                        shrink_later=self._feedback_later, **options))
        notes = [f"compared with {result.oracle_text}"]
        found = result.found
        if found is not None:
            def said(finding: fuzzing.Finding, run_alone: bool = True) -> str:
                """The finding's message; of the program it ends at (`run_alone`), also
                whether that program passes alone."""
                alone = run_alone and self._passes_alone(exercise, finding, result.oracles,
                                                         options["tolerance"], budget.seconds)
                text = finding.describe() + (f"\n\n{fuzzing.NOT_ALONE}" if alone else "")
                return _with_hint(text, exercise, "random_programs")

            later = None
            if result.resume is not None:  # feedback later: the finding is shrunk then
                resume, spare = result.resume, _Budget(budget.seconds)

                def shrunk() -> tuple[str, dict[str, Any]]:
                    final = resume(lambda request: self._ask(exercise, request, spare)).found
                    return said(final or found), {}

                later = Later(spare, give=shrunk)
            return Outcome("failed", said(found, run_alone=later is None), notes,
                           found.blocked_by, later)
        if result.stopped:
            return Outcome("failed", f"timed out: {result.stopped}, after {result.examples} of "
                                     f"{check.count} random programs", notes)
        many = result.examples != 1
        return Outcome("passed", f"{'all' if many else 'the'} {result.examples} random "
                                 f"program{'s match' if many else ' matches'} "
                                 f"{result.oracle_text}", notes)

    def _passes_alone(self, exercise: Exercise, finding: fuzzing.Finding,
                      oracles: Sequence[str], tolerance: Tolerances, seconds: float) -> bool:
        """Whether the program a random programs check found passes in a worker of its own,
        where no program ran before it (`fuzzing.reproduces`, as `gradcheck fuzz` asks): then
        the engine keeps something from one program to the next, and the message says so
        rather than point at a program the student would see pass. Asked for a visible
        exercise only, and not once a worker of the withheld side has started
        (`Workers.fresh`); of the fresh worker only whether the program differed is kept."""
        from gradcheck.grading import fuzzing

        fresh = self.workers.fresh() if self.shown(exercise) else None
        if fresh is None:
            return False
        with fresh:
            return not fuzzing.reproduces(lambda request: fresh.request(request, seconds),
                                          finding, oracles, tolerance)

    def _replay_ask(self, exercise: Exercise, budget: _Budget) -> Callable[[dict[str, Any]], Any]:
        """How a random programs check asks the engine: a keyed replay's requests, as long as
        they are those its plan foresaw (`fuzzing.replay_requests`), each with those planned
        after it (`_plan`)."""
        foreseen = self._plan(exercise, 0)
        asked = 0

        def ask(request: dict[str, Any]) -> Any:
            nonlocal asked
            if asked < len(foreseen) and request == foreseen[asked]:
                asked += 1
                return self._ask(exercise, request, budget, then=foreseen[asked:])
            asked = len(foreseen)  # the replay went its own way: nothing more is foreseen
            return self._ask(exercise, request, budget)

        return ask

    def _wanted(self, exercise: Exercise, name: str) -> list[str]:
        """The oracles a gradient check is graded against in this run."""
        return wanted_oracles(exercise, name, self.oracles)

    def _jax_checks(self, exercise: Exercise) -> list[str]:
        """The exercise's gradient and second-order checks that jax grades in this run."""
        return [name for name in exercise.checks.present()
                if name in (*GRADIENT_CHECKS, "hessian") and "jax" in self._wanted(exercise, name)]

    def _points(self, exercise: Exercise, name: str) -> list[dict[str, Any]]:
        """Where a gradient or hessian check is graded: the key's points, or the exercise's for
        this seed."""
        stored = self.key.points(exercise, name) if self.key is not None else None
        if stored is not None:
            return stored
        return exercise.check_points(name, sample_seed(self.seed, exercise.id))

    def _drawn(self, exercise: Exercise, name: str
               ) -> tuple[list[dict[str, Any]], tuple[Future, int] | None]:
        """A gradient check's points, and where jax's results there come from if they were
        worked out ahead; else the points drawn now (again, if the helper could not)."""
        early = self._ahead.pop((exercise.id, name), None)
        if early is not None:
            points, future, index = early
            try:
                return points.result(helper_process.PATIENCE), (future, index)
            except (helper_process.HelperError, TimeoutError):
                if self._helper is not None:  # a helper that hangs fails all it has not sent
                    self._helper.close()
        return self._points(exercise, name), None

    def _jax_ahead(self, exercises: list[Exercise]) -> None:
        """Start the points of every gradient check that asks jax, and jax's results there,
        JAX_CHUNK exercises to a call (live grading only): in a helper process
        (gradcheck.grading.helper_process) that works on another core while this one imports and runs torch, or,
        if this process has jax already, the points drawn now and jax run on jax's thread."""
        checks = [(number, (exercise, name)) for number, exercise in enumerate(exercises)
                  for name in self._jax_checks(exercise)]
        if self.key is not None or not checks:
            helper_process.discard()  # a helper prestarted for nothing
            return
        work: list[list[tuple[helper_process.Check, tuple[str, str]]]] = []
        for module in jax_modules(checks):
            work.append([])
            for exercise, name in module:
                try:
                    points = (exercise.sampling(sample_seed(self.seed, exercise.id))
                              if name == "sampled" else self._points(exercise, name))
                    check = helper_process.Check(
                        exercise.program, tuple(exercise.grad_names), points, name == "hessian",
                        exercise.checks.hessian.vector if name == "hessian" else None)
                except Exception:  # the check, graded as before, reports what is wrong
                    continue
                work[-1].append((check, (exercise.id, name)))
        modules = [[check for check, _ in part] for part in work]
        if helper_process.available():
            self._helper = helper_process.Helper(modules)
            points, results = self._helper.points, self._helper.results
            if any(name not in GRADIENT_CHECKS or "torch" in self._wanted(exercise, name)
                   for exercise in exercises for name in exercise.checks.present()):
                # meanwhile this process has nothing to do but import torch
                self._in_background("gradcheck-oracles", oracles.backend, "torch")
        else:  # jax is imported here already: a prestarted helper would only repeat that
            helper_process.discard()
            points, results = helper_process.here(
                modules, lambda function, *args: self._in_background("gradcheck-jax", function,
                                                                     *args))
        number = 0
        for index, part in enumerate(work):
            for place, (_, key) in enumerate(part):
                self._ahead[key] = (points[number], results[index], place)
                number += 1

    def _gradients(self, exercise: Exercise, check: str, points: list[dict[str, Any]],
                   wanted: list[str], budget: _Budget, probe: bool,
                   early: tuple[Future, int] | None = None) -> Outcome:
        """A gradient check at `points`; `probe`: with the determinism probe (`probed_check`)."""
        program = exercise.program
        # The oracles work while the worker does: on two cores, neither waits for the other.
        expected = self._oracles_meanwhile(exercise, self._oracle_results, exercise,
                                       check, points, wanted, early)
        probing = [probe_request(exercise, points)] if probe else []
        reply = self._ask(exercise, gradients_request(exercise, points), budget, then=probing,
                          last=self._feedback_waits(exercise))
        if isinstance(reply, Failure):
            return Outcome("failed", reply.message, [])
        # judged while the worker runs the probe, which it was sent with the request
        grading = compare.grade(program, points, exercise.grad_names, expected.result(),
                                reply["results"], exercise.tolerance.pair(), exercise.convention,
                                agreed=self.key.agreement if self.key is not None else None)
        skipped = grading.count("skipped") == len(points) or grading.nothing_graded
        feedback_shown = self.hidden_feedback or self.shown(exercise)
        # the probe is the check's last request unless its feedback asks for more now
        last = skipped or grading.passed or grading.float32 or self._feedback_waits(exercise)
        if probing:
            unsteady = self._unsteady[exercise.id] = self._nondeterminism(
                exercise, probing[0], reply["results"][0], budget, last)
        else:  # an earlier check's probe, said where this check's answers are wrong too: a
            # diagnosis would read yet another run
            unsteady = "" if skipped or grading.passed else self._unsteady.get(exercise.id, "")
        if unsteady:
            self._detail = {"point": dict(points[0]), "nondeterministic": True}
            return Outcome("failed", _with_hint(f"{unsteady}\n{grading.message}", exercise, self._check),
                           grading.author_notes)
        if skipped:
            return Outcome("skipped", grading.message, grading.author_notes)
        if grading.passed:
            return Outcome("passed", grading.message, grading.author_notes)
        if grading.float32 or not feedback_shown:  # no operation is at fault, or none is named
            return Outcome("failed", _with_hint(grading.message, exercise, self._check,
                                                grading.unreadable),
                           grading.author_notes, grading.blocked_by)
        spare = _Budget(budget.seconds)  # its own: feedback never costs a later check its time
        key = self.key

        def feedback() -> localise.Steps[tuple[str, dict[str, Any]]]:
            message, detail = yield from localise.diagnose(
                grading, program, points, exercise.grad_names, exercise.tolerance.pair().analytic,
                # torch's walk from the key, which a keyed grading never walks itself
                None if key is None else lambda index: key.walk(exercise, check, points, index),
                self._located.setdefault(exercise.id, {}))
            return _with_hint(message, exercise, check, grading.unreadable), detail

        if self._feedback_later:
            return Outcome("failed", _with_hint(grading.message, exercise, check,
                                                grading.unreadable),
                           grading.author_notes, grading.blocked_by,
                           Later(spare, steps=feedback))
        message, self._detail = localise.run(
            feedback(), lambda request: self._ask(exercise, request, spare))
        return Outcome("failed", message, grading.author_notes, grading.blocked_by)

    def _second_order_results(self, exercise: Exercise, points: list[dict[str, Any]],
                              early: tuple[Future, Future, int] | None
                              ) -> dict[str, oracles.OracleResult | oracles.Skipped]:
        """The oracles' second derivatives at `points`: from the answer key, if there is one
        that holds this exercise; else jax's from the helper's work ahead when it succeeded,
        everything else (and jax otherwise) computed here."""
        wanted = self._wanted(exercise, "hessian")
        check = exercise.checks.hessian

        def live(names: list[str]) -> dict[str, oracles.OracleResult | oracles.Skipped]:
            return second_order.compute(exercise.program, points, exercise.grad_names,
                                        check.vector, names)

        if self.key is not None:
            return self.key.oracle_results(exercise, "hessian", points, wanted, live)
        done: dict[str, oracles.OracleResult | oracles.Skipped] = {}
        if early is not None and "jax" in wanted:
            _, future, index = early
            try:
                done["jax"] = future.result(helper_process.PATIENCE)[index]
            except Exception:  # the helper failed or is gone: jax runs here instead
                pass
        found = live([name for name in wanted if name not in done])
        return {name: done[name] if name in done else found[name] for name in wanted}

    def _hessian(self, exercise: Exercise, budget: _Budget) -> Outcome:
        """Second derivatives by double backward against the oracles' (from the answer key, or
        computed live: torch and jax where installed)."""
        check = exercise.checks.hessian
        points = self._points(exercise, "hessian")
        names = exercise.grad_names
        rows, _, labels = second_order.expand(points, second_order.directions(
            exercise.program, names, check.vector))
        expected = self._oracles_meanwhile(exercise, self._second_order_results,
                                       exercise, points, self._ahead.pop((exercise.id,
                                                                          "hessian"), None))
        reply = self._ask(exercise, hessian_request(exercise, points), budget, last=True)
        if isinstance(reply, Failure):
            return Outcome("failed", reply.message, [])
        grading = compare.grade(exercise.program, rows, names, expected.result(),
                                reply["results"], exercise.tolerance.pair(), exercise.convention,
                                labels)
        if grading.count("skipped") == len(labels):
            return Outcome("skipped", grading.message, grading.author_notes)
        if grading.passed:
            return Outcome("passed", grading.message, grading.author_notes)
        message = f"{grading.message}\n({_directions_legend(exercise, names)})"
        return Outcome("failed", _with_hint(message, exercise, self._check), grading.author_notes,
                       grading.blocked_by)

    def _oracle_results(self, exercise: Exercise, check: str, points: list[dict[str, Any]],
                        wanted: list[str], early: tuple[Future, int] | None = None
                        ) -> dict[str, oracles.OracleResult | oracles.Skipped]:
        """The oracles' values and gradients of the exercise's program at `points` (from the
        answer key, if there is one that holds this exercise; jax's from the work done ahead,
        if it succeeded, else computed here as without it)."""
        def live(names: list[str]) -> dict[str, oracles.OracleResult | oracles.Skipped]:
            return oracles.compute(exercise.program, points, exercise.grad_names, names)

        if self.key is not None:
            return self.key.oracle_results(exercise, check, points, wanted, live)
        done: dict[str, oracles.OracleResult | oracles.Skipped] = {}
        if early is not None and "jax" in wanted:
            future, index = early
            try:
                done["jax"] = future.result()[index]
            except Exception:  # one program jax cannot run spoils its module: its check says so
                pass
        found = live([name for name in wanted if name not in done])
        return {name: done[name] if name in done else found[name] for name in wanted}

    def _against_torch(self, exercise: Exercise, request: dict[str, Any], budget: _Budget,
                       verdict: Callable[[dict[str, Any], dict[str, Any], Exercise],
                                         verdicts.Verdict]
                       ) -> Outcome:
        record = self._torch_record(exercise, request)
        if isinstance(record, str):
            return Outcome("skipped", record, [record])
        reply = self._ask(exercise, request, budget, last=True)
        expected = record.result()  # torch ran while the worker did
        if isinstance(reply, Failure):
            return Outcome("failed", reply.message, [])
        found = verdict(expected, reply, exercise)
        if found.message or self.records:
            self._detail = {"torch": expected, "engine": reply}
            if request["kind"] == "behaviour":
                self._detail["steps"] = [
                    localise.step_code(step, exercise.program.output_name)
                    for step in exercise.checks.behaviour.steps]
                self._detail["step"] = found.step
        if found.message:
            return Outcome("failed", _with_hint(found.message, exercise, self._check,
                                                found.unreadable), [], found.blocked_by)
        return Outcome("passed", "", [])

    def _torch_record(self, exercise: Exercise, request: dict[str, Any]
                      ) -> Future[dict[str, Any]] | str:
        """torch's answer to `request`: from the answer key, or observed in this process (torch is
        trusted), in the oracles' thread; or why there is none."""
        if self.key is not None:
            stored = self.key.torch_record(exercise, request)
            if stored is not None:
                return _done(stored)
        cache_key = json.dumps(request, sort_keys=True)
        if cache_key not in self._torch_records:
            if importlib.util.find_spec("torch") is None:
                why = "torch is not installed"
                self._torch_records[cache_key] = (
                    f"skipped: {self.key.refusal(exercise)}; it cannot be graded live: {why}"
                    if self.key is not None else f"skipped: {why}")
            else:  # torch is imported there too, so the worker can answer meanwhile
                self._torch_records[cache_key] = self._in_background(
                    "gradcheck-oracles", torch_answer, request)
        return self._torch_records[cache_key]

    def _ask(self, exercise: Exercise, request: dict[str, Any], budget: _Budget,
             then: Sequence[dict[str, Any]] = (), last: bool = False
             ) -> dict[str, Any] | Failure:
        """The worker's reply to `request` within the exercise's `budget`; `then`: the requests
        sent next whatever the reply (`Worker.request`); `last`: the check sends no other request
        after those, whatever the replies, so those of the next checks go with them, as far as
        they are known (`_plan`)."""
        remaining = budget.seconds - budget.spent
        if remaining <= 0:
            return Failure("timeout", f"not run: the exercise's {budget.seconds:g} s ran out "
                                      "in an earlier check", "")
        worker = self.workers.for_exercise(exercise, self.shown(exercise))
        if self.total_timeout is not None and self.workers.deadline is None:
            self.workers.deadline = worker.deadline = time.monotonic() + self.total_timeout
        started, importing = time.monotonic(), worker.import_seconds
        reply = worker.request(request, timeout=remaining,
                               then=[*then, *self._plan(exercise)] if last else then)
        budget.spent += time.monotonic() - started - (worker.import_seconds - importing)
        if isinstance(reply, Failure) and reply.kind == "deadline":
            return dataclasses.replace(reply, message=(
                f"{reply.message}: grading it may take {self.total_timeout:g} s in all "
                "(--total-timeout); this check and those after it are not graded"))
        if isinstance(reply, Failure) and reply.kind == "timeout" and reply.phase != "import":
            where = handler.PHASES.get(reply.phase, f"in {reply.phase}")
            return dataclasses.replace(reply, message=f"timed out after {budget.seconds:g} s "
                                                      f"{where}")
        return reply

    def _plan(self, exercise: Exercise, asked: int | None = None) -> list[dict[str, Any]]:
        """The requests this grading sends after the check being graded, in order, as far as
        they are known before its reply is read (after its first `asked` requests, if given):
        those of the next checks, in this exercise and the next ones on the same worker, up to
        one whose requests after its first depend on a reply (an `inspect` whose reply decides
        what is asked; a gradient check whose feedback, if it fails, asks the engine more at
        once). A random programs replay's cases are planned as an engine that passes them asks
        them: should one differ, the replay stops there and the engine's replies to the cases
        after it are dropped unread (`Worker.unasked`). Nothing outside a keyed grading of a
        bank (live, each check's oracles and torch records are worked out as it comes) or
        with `lookahead` off."""
        if not self.lookahead or self.key is None or self._order is None:
            return []
        planned, spans = self._side_plan(self.shown(exercise))
        span = spans[(exercise.id, self._check)]
        start = span.stop if asked is None else span.start + asked
        try:
            return planned[start:planned.index(_UNKNOWN, start)]
        except ValueError:
            return planned[start:]

    def _side_plan(self, side: bool) -> tuple[list[Any], dict[tuple[str, str], range]]:
        """The requests of every check on the `side` worker, in grading order, with _UNKNOWN
        after those of each check whose next requests depend on its replies; and, by check,
        where its requests are. Made once a grading, and again once `inspect` has told what
        the engine lacks: `_plan`, asked at every check, is a slice of it."""
        known = self._missing.get(side)
        kept = self._side_plans.get(side)
        if kept is not None and kept[0] is known:
            return kept[1], kept[2]
        assert self._order is not None
        planned: list[Any] = []
        spans: dict[tuple[str, str], range] = {}
        for exercise in self._order:
            if self.shown(exercise) != side:
                continue
            for name in exercise.checks.present():
                try:
                    requests, known_after = self._requests(exercise, name)
                except Exception:  # the check says what, when it is graded; nothing past it
                    requests, known_after = (), False
                spans[(exercise.id, name)] = range(len(planned), len(planned) + len(requests))
                planned += requests if known_after else [*requests, _UNKNOWN]
        self._side_plans[side] = (known, planned, spans)
        return planned, spans

    def _requests(self, exercise: Exercise, name: str) -> tuple[tuple[dict[str, Any], ...], bool]:
        """The requests the check `name` of `exercise` sends whatever the replies, built as the
        check builds them, and whether what follows them is known before their replies are read
        (`_side_plan`)."""
        absent = self._absent(exercise, name)
        if absent is None:
            return ({"kind": "inspect"},), False  # `_absent_higher_order` asks first
        if absent:
            return (), True
        made = self._check_requests.get((exercise.id, name))
        if made is None:
            made = self._check_requests[(exercise.id, name)] = self._first_requests(exercise,
                                                                                     name)
        return made

    def _first_requests(self, exercise: Exercise, name: str
                        ) -> tuple[tuple[dict[str, Any], ...], bool]:
        """`_requests` of a check whose engine has what it needs."""
        seed = sample_seed(self.seed, exercise.id)
        if name in GRADIENT_CHECKS:
            return (check_requests(exercise, name, self._points(exercise, name), seed),
                    self._feedback_waits(exercise))
        if name == "hessian":
            return check_requests(exercise, name, self._points(exercise, name), seed), True
        if name in ("graph", "behaviour"):
            requests = check_requests(exercise, name, None, seed)
            silent = isinstance(self._torch_record(exercise, requests[0]), str)
            return (() if silent else requests), True
        if name == "random_programs" and self.key is not None:
            from gradcheck.grading import fuzzing

            stored = self.key.random_programs(exercise)
            if stored is not None:  # what follows a case that differs: its shrinking, or later
                return tuple(fuzzing.replay_requests(stored)), self._feedback_later
        return (), False

    def _feedback_waits(self, exercise: Exercise) -> bool:
        """Whether a failed gradient check of `exercise` asks the engine nothing more now: its
        feedback comes later (`grade_bank(feedback_later=True)`) or is never shown."""
        return self._feedback_later or not (self.hidden_feedback or self.shown(exercise))

    def _nondeterminism(self, exercise: Exercise, probe: dict[str, Any], first: Any,
                        budget: _Budget, last: bool) -> str:
        """The determinism probe (like torch's reentrancy check, with the check's own tolerance
        as nondet_tol): the same backward at the check's first point, twice more, must give the
        same numbers as the first time, within the tolerance the check holds the engine to
        against torch; else a sentence saying what it gave. A difference the check could not
        see is no difference: an engine that sums what a node's consumers pass in the order of a
        set (micrograd's `_prev`) differs from run to run in the last bits only, as it differs
        from torch. Its time is not the check's. `last`: the check asks nothing after it
        (`_ask`)."""
        point = probe["points"][0]
        again = self._ask(exercise, probe, _Budget(budget.seconds), last=last)
        if isinstance(again, Failure) or first.get("error"):
            return ""
        tol = exercise.tolerance.pair().analytic
        out = exercise.program.output_name
        for result in again["results"]:
            if result.get("error"):
                continue
            for name in exercise.grad_names:
                shown = _unsteady(first["grads"].get(name), result["grads"].get(name), tol)
                if shown is not None:
                    at = compare.point_text(point)
                    return (f"your engine is not deterministic: the same backward gave "
                            f"{shown[0]} and {shown[1]} for {shown[2]}d{out}/d{name} at {at}; "
                            "visit the nodes in an order that does not change from run to run "
                            "(not the order of a set)")
        return ""

    def _absent_higher_order(self, exercise: Exercise, check: str, budget: _Budget
                             ) -> tuple[str, str]:
        """What of the higher-order protocol a check needs (`higher_order_needs`) and the
        engine lacks, as a message, or ''; and the piece as reports name it (`blocked_by`).
        Everything else an engine lacks is found by use (gradcheck.grading.uses)."""
        side = self.shown(exercise)
        absent = self._absent(exercise, check)
        if absent is None:
            reply = self._ask(exercise, {"kind": "inspect"}, budget)
            if isinstance(reply, Failure):
                return reply.message, ""
            self._missing[side] = dict(reply.get("details", {}))
            absent = self._absent(exercise, check)
        if not absent:
            return "", ""
        details = "; ".join(self._missing[side][name] for name in absent)
        return (f"your engine is missing {', '.join(absent)}, which this check uses "
                f"({details}). Implement it to earn these points.", _piece(absent[0]))

    def _absent(self, exercise: Exercise, check: str) -> list[str] | None:
        """What of the higher-order protocol the check needs and the engine lacks (none: []);
        None while the engine's worker side has not been asked (`inspect`)."""
        needed = higher_order_needs(exercise, check)
        if not needed:
            return []
        missing = self._missing.get(self.shown(exercise))
        return None if missing is None else [name for name in missing if name in needed]



class Outcome(NamedTuple):
    """A check's status, its student message, notes for the author, and the protocol piece
    whose failed use decided it, when the engine lacks that piece (`CheckResult.blocked_by`)."""

    status: str
    message: str
    notes: list[str]
    blocked_by: str = ""
    #: the feedback left for `Grader.give_feedback`
    later: Later | None = None


class Later(NamedTuple):
    """Feedback left for `Grader.give_feedback`, within its own `budget`: its message and
    detail, worked out by `steps`, a walk that yields the requests it asks (answered in rounds
    with the other walks': `Grader._in_rounds`), or by `give`, which asks them itself."""

    budget: _Budget
    steps: Callable[[], localise.Steps[tuple[str, dict[str, Any]]]] | None = None
    give: Callable[[], tuple[str, dict[str, Any]]] | None = None


def _fault(result: CheckResult) -> None:
    """A fault of gradcheck's while it worked out the feedback of `result`, which keeps its
    plain comparison: the traceback is for the author."""
    result.author_notes = [*result.author_notes, traceback.format_exc()]


def higher_order_needs(exercise: Exercise, check: str) -> set[str]:
    """What of the higher-order protocol a check uses: backward's create_graph (a Hessian
    check, or a backward step that creates a graph) and the module's grad() (a grad step, with
    or without create_graph: that is grad()'s own keyword, which a backward() without one
    leaves working)."""
    if check == "hessian":
        return {handler.CREATE_GRAPH}
    if check != "behaviour":
        return set()
    needs = set()
    for step in exercise.checks.behaviour.steps:
        if step.backward is not None and step.backward.create_graph:
            needs.add(handler.CREATE_GRAPH)
        if step.grad is not None:
            needs.add(handler.GRAD_FUNCTION)
    return needs


class _Budget:
    """An exercise's time limit, spent only while the worker works on a request: the grader's
    own work (oracles, torch, feedback) and the import of a restarted worker never count
    against a submission, so a slow or cold grader cannot fail a correct engine."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.spent = 0.0


#: in `Grader._side_plan`, where what a check sends next depends on its replies
_UNKNOWN = object()


CHECK_TITLES = {
    "gradients": "gradients at the listed points",
    "sampled": "gradients at sampled points",
    "answers": "hand-derived answers",
    "graph": "the graph (grad_fn, leaves)",
    "behaviour": "autograd behaviour, step by step",
    "hessian": "second derivatives (double backward)",
    "random_programs": "random programs",
}



def prestart(key: object, oracles: Sequence[str] | None) -> None:
    """Before the bank is loaded for grading, start the helper process a live grading gives
    jax's work to (`gradcheck.grading.helper_process.prestart`): it imports jax meanwhile, on the other core."""
    if key is None and (oracles is None or "jax" in oracles):
        helper_process.prestart()


def warm(bank: Bank, key: answer_key.Key) -> None:
    """Work out what every keyed grading of `bank` works out alike, whatever the submission:
    each exercise's shares of its points, and the requests its checks send first, built,
    checked and packed (`plan.check_requests`, `sandbox.frame`). A batch's job slot does this
    once, after `Key.prepare`, and every grading it forks finds them made (a tenth of the
    grader's CPU, BENCHMARKS.md). The key's refusals are left to each grading to find."""
    from gradcheck.grading import fuzzing  # hypothesis: a job slot has it loaded already

    lookup = key.anew()
    for exercise in bank.exercises:
        score.check_points(exercise)
        if lookup.refusal(exercise):
            continue
        seed = sample_seed(key.seed, exercise.id)
        for name in exercise.checks.present():
            if name == "random_programs":
                cases = lookup.random_programs(exercise)
                requests = () if cases is None else fuzzing.replay_requests(cases)
            elif name in (*GRADIENT_CHECKS, "hessian"):
                points = lookup.points(exercise, name)
                requests = () if points is None else check_requests(exercise, name, points, seed)
            else:
                requests = check_requests(exercise, name, None, seed)
            for request in requests:
                frame(request)


def _piece(name: str) -> str:
    """A higher-order piece `inspect` reports missing, as the code a student writes."""
    return CREATE_GRAPH_CALL if name == handler.CREATE_GRAPH else name


def _done(result: Any) -> Future:
    """A future that has `result` already."""
    done: Future = Future()
    done.set_result(result)
    return done


def torch_answer(request: dict[str, Any]) -> dict[str, Any]:
    """torch's answer to a request, observed in this process through the probe (torch is
    trusted), with the gradients a backward that raised changed first."""
    from gradcheck.engine import torch_engine

    return handler.handle(torch_engine, request, touched=True)


def _unsteady(first: Any, again: Any, tol: Tolerance) -> tuple[str, str, str] | None:
    """How a gradient read twice differs beyond `tol` (`Grader._nondeterminism`): the two
    values as shown, and of a vector, the element that differs first ("element 2 of "), which
    a long vector's text would not show; or None if they are the same within `tol`. Two
    numbers that read the same at 10 digits (a tolerance tighter than the default) are told
    apart by their difference."""
    if first == again or localise.same_numbers(again, first, tol):
        return None
    where = ""
    if isinstance(first, list) and isinstance(again, list) and len(first) == len(again):
        index = next((i for i, (a, b) in enumerate(zip(first, again))
                      if not (a == b or localise.same_numbers(b, a, tol))), None)
        if index is not None:
            first, again, where = first[index], again[index], f"element {index} of "
    shown = number_text(first), number_text(again)
    if shown[0] == shown[1] and isinstance(first, float) and isinstance(again, float):
        shown = shown[0], f"{shown[1]} (a difference of {number_text(again - first)})"
    return shown[0], shown[1], where


def _with_hint(message: str, exercise: Exercise, check: str, unreadable: bool = False) -> str:
    """The message and the check's own hint, or else the exercise's; none after a value the
    protocol does not allow (`unreadable`), a matter of types the hint does not speak to."""
    hint = getattr(getattr(exercise.checks, check, None), "hint", "") or exercise.hint
    return f"{message}\nHint: {hint}" if hint and not unreadable else message


def _behaviour_verdict(torch: dict[str, Any], found: dict[str, Any], exercise: Exercise
                       ) -> verdicts.Verdict:
    """The first step of the exercise's behaviour check where the engine departs from torch."""
    return verdicts.behaviour(torch, found, exercise.checks.behaviour.steps,
                              exercise.program, exercise.tolerance.pair().analytic,
                              lambda number: exercise.where(f"checks.behaviour.steps[{number}]"))


def _load_key(path: str | Path) -> Any:
    return answer_key.load(path)


def grade(submission: str | Path, exercises: str | Path | Iterable[str | Path] | None = None,
          *, strict: bool = False, progress: Progress | None = None, **options: Any
          ) -> GradeReport:
    """Grade `submission` on a bank (default: the bundled one), each side's scores first and
    then the feedback of its failed checks, as `gradcheck grade` does: `progress` gets each
    exercise's results as they are scored, and their messages gain their feedback after."""
    prestart(options.get("key"), options.get("oracles"))
    try:
        try:
            bank = load_bank(exercises if exercises is not None else bundled.bank_dir(),
                             strict=strict)
        except OSError as exc:
            raise GraderError(f"cannot read the exercises: {exc}") from exc
        with Grader(submission, **options) as grader:
            report = grader.grade_bank(bank, progress, feedback_later=True)
            grader.give_feedback(report)
            return report
    finally:  # a helper no grading took (a bad bank or submission) must not outlive the call
        helper_process.discard()


def _directions_legend(exercise: Exercise, names: Sequence[str]) -> str:
    """How to read a failed second derivative's label, in the exercise's own input names."""
    out, first = exercise.program.output_name, names[0]
    if exercise.checks.hessian.vector:
        return (f"direction vector is the check's vector v: d{out}/d(direction) is the gradient "
                f"dotted with v, and d2{out}/d(direction) d{first} is the derivative of that "
                f"product with respect to {first}, from a backward of it: the Hessian-vector "
                "product")
    other = names[1] if len(names) > 1 else first
    return (f"direction e({first}) is the row of input {first}: d{out}/d(direction) is then "
            f"d{out}/d{first}, as backward(create_graph=True) leaves it in {first}.grad, and "
            f"d2{out}/d(direction) d{other} is its derivative with respect to {other}, from a "
            "backward of that gradient")
