"""A search for the smallest random program where an engine differs from the oracles.

hypothesis draws whole programs, each with a point and sometimes a behaviour session
(:mod:`gradcheck.bank.random_programs`; imported only where programs are drawn). Each one is
asked of the engine through `ask`, the same requests the grader sends its sandboxed worker, and
judged as the grader judges a gradients check
(:func:`gradcheck.grading.compare.grade`: the oracles must agree first, and a value they disagree
on is never held against the engine) and a behaviour check (:func:`verdicts.behaviour`, against
torch run here). The first difference found is shrunk by trying the simpler cases
`random_programs.shrinks` and `smaller_sessions` list (a session's program too), keeping each
that still differs, until none does: towards fewer operations, steps and inputs, then simpler
numbers, then points nearer small integers. hypothesis only draws; its own shrinker, which
draws the case again choice by choice, is not run: it took most of a failing grading's
feedback time and ended no smaller (BENCHMARKS.md, "Shrinking without hypothesis's
shrinker").

Oracles: finite differences, torch and jax, those that are installed. Where torch cannot be used
(grading with an answer key, which imports neither torch nor jax; or torch not installed) the
reference engine takes its place, here in this process: the test suite proves it
agrees with torch on every operation and behaviour rule, and finite differences check it again.

An answer key holds the cases a search draws when the engine passes every one, with the
oracles' answers on each (`Answered`, recorded by `search(record=...)`): `replayed` judges
those first, with neither hypothesis drawing nor an oracle running. hypothesis draws each case
from the seed and the outcomes of the cases before it, so for an engine that passes them all a
live search draws exactly these, and the replay's verdict is the live one. The first case that
differs is the one the live search stops at, and it is shrunk as the live search shrinks it, so
the engine meets the very requests of a live search, and the finding is the live one. When the
engine's time runs out, the live search takes over: it draws the same cases again and is given
the engine's replies to them.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from gradcheck import oracles as oracle_modules
from gradcheck.bank import bundled
from gradcheck.bank.drawn_programs import Drawn, Session, unused_inputs
from gradcheck.bank.models import Step
from gradcheck.bank.tolerances import Tolerances
from gradcheck.engine import handler
from gradcheck.engine.sandbox import Failure
from gradcheck.engine.wire import Sealed
from gradcheck.grading import compare, localise, verdicts
from gradcheck.grading.compare import ORACLE_LABELS, Grading
from gradcheck.grading.digits import number_text
from gradcheck.grading.plan import built

#: The oracles of a live search, when installed.
LIVE = ("fd", "torch", "jax")
#: The oracles when torch cannot be used: finite differences and the reference engine.
KEYED = ("fd", "reference")
Ask = Callable[[dict[str, Any]], "dict[str, Any] | Failure"]


@dataclass
class Finding:
    """A difference between the engine and the oracles, on a drawn program."""

    kind: str  # value, gradient or behaviour
    message: str
    session: Session
    grading: Grading | None = field(default=None, repr=False)
    against: str = "the oracles"  # what the engine was compared with
    #: the protocol piece the engine lacks, whose use in the program failed (`CheckResult`'s)
    blocked_by: str = ""

    @property
    def drawn(self) -> Drawn:
        return self.session.drawn

    @property
    def operations(self) -> int:
        return self.drawn.operations

    def program_text(self) -> str:
        """The program, one line per operation, indented for a message."""
        return "".join(f"    {line}\n" for line in self.drawn.source.splitlines())

    def describe(self) -> str:
        """The finding as feedback: the program, the point, the steps, and what differs. A
        missing piece comes first, naming the form that needs it, as in every other check's
        message (reports group checks by that line)."""
        point = ", ".join(f"{name} = {number_text(value)}"
                          for name, value in self.drawn.point.items())
        lead, message = "", self.message
        if self.blocked_by:
            lead, _, message = message.partition("\n")
            lead += "\n"
        text = (f"{lead}The smallest program found where your engine differs from {self.against} "
                f"({self.operations} operation{'s' * (self.operations != 1)}):\n\n"
                f"{self.program_text()}\nat {point}")
        unused = unused_inputs(self.drawn)
        if unused:
            text += (f" ({', '.join(unused)}: {'an input' if len(unused) == 1 else 'inputs'} "
                     "no operation uses)")
        if self.kind == "behaviour":
            output = self.drawn.output
            frozen = [name for name in self.drawn.inputs if name not in self.session.requires_grad]
            if frozen:
                text += (f" ({', '.join(frozen)} made without requires_grad, "
                         f"{', '.join(self.session.requires_grad) or 'no input'} with it)")
            codes = [localise.step_code(Step.model_validate(step), output)
                     for step in self.session.steps]
            text += ", after one forward pass, then:\n" + "".join(
                f"    {number}. {code}\n" for number, code in enumerate(codes, start=1))
        else:
            text += ":\n"
        return text + message


@dataclass(frozen=True)
class Answered:
    """A drawn case and what the oracles answer on it: all a judge compares the engine with."""

    session: Session
    expected: dict[str, oracle_modules.OracleResult]  # per oracle, at the case's point
    #: the behaviour oracle's record of the session's steps (None for a case without steps)
    behaviour: dict[str, Any] | None = None


@dataclass
class Search:
    """What a search tried and found."""

    found: Finding | None
    examples: int  # programs tried until the first difference (or all of them)
    seconds: float
    oracles: tuple[str, ...]  # those the gradients were compared with
    behaviour_oracle: str  # torch, or the reference engine, for behaviour sessions
    #: why the search stopped before its examples were done ("" when it did not)
    stopped: str = ""
    #: with `replayed(..., shrink_later=True)`, once a case differs: the search from there,
    #: given the engine to ask then, which shrinks `found` as the search would have
    resume: Callable[[Ask], Search] | None = field(default=None, compare=False, repr=False)

    @property
    def oracle_text(self) -> str:
        return ", ".join(ORACLE_LABELS[name] for name in self.oracles)


def available(wanted: Sequence[str] = LIVE) -> tuple[str, ...]:
    """The oracles of `wanted` that can run here; the reference engine stands in for torch when
    torch is wanted but not installed."""
    ready = [name for name in wanted if name == "reference"
             or not isinstance(oracle_modules.backend(name), oracle_modules.Skipped)]
    if "torch" in wanted and "torch" not in ready and "reference" not in ready:
        ready.append("reference")
    return tuple(ready)


def load_shrinking() -> None:
    """Import now what drawing or shrinking a random program needs (hypothesis's strategies,
    about 0.2 s, and finite differences, which judge each smaller case): a process that grades
    one submission after another (the watch, a job slot's server) pays it once, before its
    first grading, not in the first one that fails."""
    importlib.import_module("gradcheck.bank.random_programs")
    oracle_modules.backend("fd")


def search(ask: Ask, *, at_seed: int, examples: int = 200, ops: Sequence[str] | None = None,
           max_operations: int = 6, max_steps: int = 4, oracles: Sequence[str] = LIVE,
           tolerance: Tolerances = Tolerances(), seconds: float | None = None,
           localise_finding: bool = True, record: list[Answered] | None = None) -> Search:
    """Try up to `examples` drawn programs (with behaviour sessions of up to `max_steps` steps)
    on the engine `ask` reaches, reproducibly from `at_seed`; shrink the first difference.
    `seconds` bounds the whole search; a search stopped early keeps what it found. `record`
    gets every case judged, in order, with the oracles' answers (what an answer key holds)."""
    # hypothesis only where programs are drawn: a replay that passes imports none of it
    from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings

    from gradcheck.bank.domains import cache_outside_cwd
    from gradcheck.bank.random_programs import sessions

    started = time.monotonic()
    judge = _Judge(ask, tuple(oracles), tolerance, record)
    strategy = sessions(ops, max_operations, max_steps)
    found: list[Finding] = []
    state = {"tried": 0, "stopped": ""}

    @seed(at_seed)
    @settings(max_examples=examples, database=None, derandomize=False, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck),
              report_multiple_bugs=False, verbosity=Verbosity.quiet, print_blob=False)
    @given(strategy)
    def attempt(case: Session) -> None:
        if found:  # hypothesis runs the case that differed once more, to report it
            raise _Differs
        if state["stopped"]:
            return
        if seconds is not None and time.monotonic() - started > seconds:
            state["stopped"] = f"the search's {seconds:g} s ran out"
            return
        if not found:
            state["tried"] += 1
        try:
            finding = judge(case)
        except _OutOfTime as stop:
            state["stopped"] = str(stop)
            return
        if finding is not None:
            found.append(finding)
            raise _Differs

    try:
        with cache_outside_cwd():
            attempt()
    except _Differs:
        pass
    except Exception:  # hypothesis's own complaint (a flaky engine): the findings stand
        if not found:
            raise
    best = _shrunk(found[0], judge, localise_finding) if found else None
    return Search(best, state["tried"], time.monotonic() - started, judge.oracles,
                  judge.behaviour_oracle, state["stopped"])


#: what a finding's message adds when its program passes in a worker of its own (`reproduces`)
NOT_ALONE = ("In a worker of its own, where no program ran before it, this program passes: it "
             "fails only after the programs tried before it, so your engine keeps something "
             "from one program to the next (a global tape, a cache, a counter). Look for state "
             "that outlives a backward(); the program above is where it showed, not its cause.")


def reproduces(ask: Ask, found: Finding, oracles: Sequence[str],
               tolerance: Tolerances = Tolerances()) -> bool:
    """Whether `found` still differs on the engine `ask` reaches: a fresh worker, where no
    program ran before it, tells an engine that keeps state from one program to the next (a
    global tape) from one that is wrong on this program alone."""
    return _Judge(ask, tuple(oracles), tolerance)(found.session) is not None


def _shrunk(found: Finding, judge: _Judge, localise_finding: bool = True) -> Finding:
    """The smallest case `_reduce` reaches from `found`, with the grader's feedback on it
    where torch can walk it."""
    best = _reduce(found, judge)
    if localise_finding and best.grading is not None and "torch" in judge.oracles:
        best = judge.localised(best)
    return best


def replayed(ask: Ask, cases: Sequence[Answered], *, oracles: Sequence[str],
             tolerance: Tolerances, agreed: Callable[..., Any] | None = None,
             shrink_later: bool = False, **search_options: Any) -> Search:
    """`search(ask, oracles=oracles, tolerance=tolerance, **search_options)` where `cases` are
    the cases that search draws for an engine that passes every one (module docstring): each
    judged in order against its stored answers (the oracles' agreement on them judged by
    `agreed`, as `compare.grade` takes it); the first that differs is the live search's
    first difference (a live search draws no further: `search`), shrunk as it shrinks it; when
    the engine's time runs out, the live search, given the replies the engine has made.
    `shrink_later`: the first case that differs is the finding, as it was drawn, and its
    shrinking is left to the Search's `resume` (the check's score is known: the watch prints
    it before the feedback)."""
    started = time.monotonic()
    asked: list[tuple[dict[str, Any], dict[str, Any] | Failure]] = []

    def recording(request: dict[str, Any]) -> dict[str, Any] | Failure:
        asked.append((request, ask(request)))
        return asked[-1][1]

    judge = _Judge(recording, tuple(oracles), tolerance, agreed=agreed)
    try:
        for tried, case in enumerate(cases, start=1):
            differs = judge.judge(case)
            if differs is None:
                continue

            def resume(then: Ask) -> Search:
                best = _shrunk(differs, _Judge(then, tuple(oracles), tolerance),
                               search_options.get("localise_finding", True))
                return Search(best, tried, time.monotonic() - started, judge.oracles,
                              judge.behaviour_oracle)

            if shrink_later:
                return Search(differs, tried, time.monotonic() - started, judge.oracles,
                              judge.behaviour_oracle, resume=resume)
            return resume(ask)
        return Search(None, len(cases), time.monotonic() - started, judge.oracles,
                      judge.behaviour_oracle)
    except _OutOfTime:  # the live search, which meets the same end where the replay met it
        return search(_answering(asked, ask), oracles=oracles, tolerance=tolerance,
                      **search_options)


def _answering(asked: list[tuple[dict[str, Any], dict[str, Any] | Failure]], ask: Ask) -> Ask:
    """`ask`, but the requests of `asked` get the replies recorded there, as long as they come
    in that order: the engine is asked nothing twice, and meets a live search's requests."""
    pending = list(reversed(asked))

    def answer(request: dict[str, Any]) -> dict[str, Any] | Failure:
        if pending and pending[-1][0] == request:
            return pending.pop()[1]
        pending.clear()
        return ask(request)

    return answer


def _reduce(best: Finding, judge: _Judge) -> Finding:
    """Try the programs `smaller` than the finding, keeping each simpler one that still differs,
    until none does (each step is simpler, so this ends)."""
    improved = True
    while improved:
        improved = False
        for session in _simpler(best.session):
            if _size(session) >= _size(best.session):
                continue
            try:
                finding = judge(session)
            except _OutOfTime:
                return best
            if finding is not None:
                best, improved = finding, True
                break
    return best


def _simpler(case: Session) -> list[Session]:
    """Cases simpler than `case`: a plain program `smaller` than it; a session on a smaller
    program, with one step fewer (also with every input made without requires_grad), or with
    one frozen input fewer."""
    from gradcheck.bank.random_programs import looks_at_views, smaller, smaller_sessions

    if not case.steps:
        return [Session(drawn, (), tuple(drawn.inputs)) for drawn in smaller(case.drawn)]
    # a step fewer; and with no input made with requires_grad, which may stand for a step that
    # took the gradients away (the program again under no_grad(), a detach)
    fewer = [Session(case.drawn, case.steps[:i] + case.steps[i + 1:], requires_grad)
             for i in range(len(case.steps))
             for requires_grad in dict.fromkeys((case.requires_grad, ()))]
    thawed = [Session(case.drawn, case.steps, (*case.requires_grad, name))
              for name in case.drawn.inputs if name not in case.requires_grad]
    return smaller_sessions(case) + fewer + [s for s in thawed if not looks_at_views(s)]


class _Differs(Exception):
    """Raised inside the hypothesis test when the engine differs: the draw stops there."""


class _OutOfTime(Exception):
    """The engine's time ran out; nothing after this is a finding of the engine's."""


class _Judge:
    """One drawn case run on the engine and on the oracles, compared."""

    def __init__(self, ask: Ask, oracles: tuple[str, ...], tolerance: Tolerances,
                 record: list[Answered] | None = None,
                 agreed: Callable[..., Any] | None = None) -> None:
        self.ask = ask
        self.agreed = agreed
        self.oracles = oracles
        self.tolerance = tolerance
        self.behaviour_oracle = "torch" if "torch" in oracles else "reference"
        self.behaviour_label = ORACLE_LABELS[self.behaviour_oracle]
        self.record = record

    def __call__(self, case: Session) -> Finding | None:
        return self.judge(self.answered(case))

    def answered(self, case: Session) -> Answered:
        """The oracles' answers on `case`, recorded if asked to."""
        behaviour = (handler.handle(_engine(self.behaviour_oracle), _behaviour_request(case),
                                    touched=True)
                     if case.steps else None)
        answered = Answered(case, self._oracle_results(case.drawn), behaviour)
        if self.record is not None:
            self.record.append(answered)
        return answered

    def judge(self, answered: Answered) -> Finding | None:
        """The engine's answers on a case against the oracles'; the difference, or None."""
        case = answered.session
        drawn = case.drawn
        program, names = drawn.program, list(drawn.inputs)
        reply = self._ask(_gradients_request(drawn))
        if isinstance(reply, Failure):
            return Finding("value" if reply.phase == "forward" else "gradient", reply.message,
                           case)
        grading = compare.grade(program, [drawn.point], names, answered.expected,
                                reply["results"], self.tolerance, agreed=self.agreed)
        if not grading.passed:
            return Finding(_kind(grading, reply["results"][0], program.output_name),
                           grading.message, case, grading, blocked_by=grading.blocked_by)
        want = answered.behaviour
        if want is None or want.get("error"):
            return None  # no steps, or not a program torch runs: nothing to compare with
        got = self._ask(_behaviour_request(case))
        if isinstance(got, Failure):
            return Finding("behaviour", got.message, case, against=self.behaviour_label)
        verdict = verdicts.behaviour(want, got, [Step.model_validate(s) for s in case.steps],
                                     program, self.tolerance.analytic)
        return Finding("behaviour", verdict.message, case, against=self.behaviour_label,
                       blocked_by=verdict.blocked_by) if verdict.message else None

    def localised(self, finding: Finding) -> Finding:
        """The finding with the grader's feedback: the first operation that goes wrong."""
        drawn = finding.drawn
        assert finding.grading is not None
        try:
            message = localise.feedback(finding.grading, drawn.program, [drawn.point],
                                        list(drawn.inputs), self._ask, self.tolerance.analytic)
        except _OutOfTime:
            return finding
        return Finding(finding.kind, message, finding.session, finding.grading,
                       blocked_by=finding.blocked_by)

    def _ask(self, request: dict[str, Any]) -> dict[str, Any] | Failure:
        reply = self.ask(request)
        if isinstance(reply, Failure) and reply.kind == "timeout" \
                and reply.message.startswith("not run"):
            raise _OutOfTime(reply.message)
        return reply

    def _oracle_results(self, drawn: Drawn) -> dict[str, Any]:
        program, names, points = drawn.program, list(drawn.inputs), [drawn.point]
        results: dict[str, Any] = oracle_modules.compute(
            program, points, names, [o for o in self.oracles if o in ("fd", "torch")])
        if "jax" in self.oracles:  # the compiled interpreter: one compilation for every program
            jax_grad = oracle_modules.backend("jax")
            results["jax"] = (jax_grad if isinstance(jax_grad, oracle_modules.Skipped) else
                              jax_grad.run_many([oracle_modules.job(program, points, names)])[0])
        if "reference" in self.oracles:
            results["reference"] = reference_result(drawn)
        return results


def replay_requests(cases: Sequence[Answered]) -> list[dict[str, Any]]:
    """What `replayed` asks an engine that passes every one of `cases`, in order: each case's
    gradients, then its session's steps where the behaviour oracle ran them. The grader sends
    them ahead of their turn (`Grader._plan`)."""
    asked = []
    for case in cases:
        asked.append(_gradients_request(case.session.drawn))
        if case.behaviour is not None and not case.behaviour.get("error"):
            asked.append(_behaviour_request(case.session))
    return asked


def _gradients_request(drawn: Drawn) -> Sealed:
    return built(("case gradients", drawn), lambda: {
        "kind": "gradients", "program": drawn.program.spec(), "points": [drawn.point],
        "requires_grad": list(drawn.inputs)})


def _behaviour_request(case: Session) -> Sealed:
    drawn = case.drawn
    return built(("case behaviour", case), lambda: {
        "kind": "behaviour", "program": drawn.program.spec(), "point": drawn.point,
        "requires_grad": list(case.requires_grad), "steps": [dict(step) for step in case.steps]})


def reference_reply(request: dict[str, Any]) -> dict[str, Any]:
    """The reference engine's reply to a request, answered in this process (an answer key's
    cases are those it passes)."""
    return handler.handle(_engine("reference"), request)


def reference_result(drawn: Drawn) -> oracle_modules.OracleResult:
    """The reference engine's value and gradients at the drawn point, as an oracle's result."""
    import numpy as np

    names = list(drawn.inputs)
    reply = handler.handle(_engine("reference"), {
        "kind": "gradients", "program": drawn.program.spec(), "points": [drawn.point],
        "requires_grad": names})["results"][0]
    if reply["error"]:
        nan = float("nan")
        value: Any = nan
        grads = {name: [nan] * (size or 1) for name, size in drawn.inputs.items()}
    else:
        value = reply["value"]
        grads = {name: reply["grads"].get(name) for name in names}
        # as the other oracles: zeros where the output ignores an input (torch's None)
        grads = {name: g if g is not None else [0.0] * (drawn.inputs[name] or 1)
                 for name, g in grads.items()}
    return oracle_modules.OracleResult(
        "reference", np.array([value], np.float64),
        {name: np.array([g], np.float64).reshape((1,) if drawn.inputs[name] is None
                                                 else (1, drawn.inputs[name]))
         for name, g in grads.items()})


@functools.cache
def _engine(name: str) -> Any:
    """torch behind the protocol, or the bundled reference engine, imported here (both are
    gradcheck's own, trusted code)."""
    if name == "torch":
        from gradcheck.engine import torch_engine

        return torch_engine
    spec = importlib.util.spec_from_file_location("gradcheck_reference_oracle",
                                                  bundled.reference_path() / "__init__.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kind(grading: Grading, reply: Mapping[str, Any], output: str) -> str:
    """value when the engine's value is wrong or it failed computing it, else gradient."""
    error = reply.get("error") if isinstance(reply, dict) else None
    if error:
        return "value" if error.get("phase") == "forward" else "gradient"
    return "value" if grading.mismatches and grading.mismatches[0].label == output \
        else "gradient"


def _size(case: Session) -> tuple[float, ...]:
    """How simple a case is: operations, steps, inputs, then its numbers, then its point."""
    from gradcheck.bank.random_programs import simplicity

    nodes = case.drawn.program.nodes
    constants = [simplicity(n.value) for n in nodes if n.op == "const"]
    values = [float(v) for value in case.drawn.point.values()
              for v in (value if isinstance(value, list) else [value])]
    return (case.drawn.operations, len(case.steps),
            len(case.drawn.inputs) - len(case.requires_grad) if case.steps else 0,
            len(case.drawn.inputs),
            len(constants), sum(constants),
            sum(abs(v - round(v)) for v in values), sum(abs(v) for v in values))
