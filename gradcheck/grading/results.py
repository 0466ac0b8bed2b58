"""What grading produces: one result per check, gathered in a report that every format writes.

Plain data only, so that reports, the pytest plugin and the CLI never depend on how a result was
computed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from gradcheck.grading.score import total

Status = Literal["passed", "failed", "skipped", "error"]
Visibility = Literal["visible", "hidden", "after_due_date", "after_published"]


@dataclass
class CheckResult:
    """One graded check of one exercise (a pytest item, a Gradescope test, a JUnit testcase)."""

    exercise_id: str
    check: str  # "gradients", "sampled", "answers", "graph", "behaviour", or "load" for a broken file
    title: str  # e.g. "The chain rule, node by node: gradients at the listed points"
    score: float
    max_score: float
    status: Status
    message: str = ""  # student-facing: what went wrong and where to look
    topic: str = ""
    visibility: Visibility = "visible"
    #: a visible exercise graded after a worker of the exercises not visible had started
    #: (`Grader.shown`): its details are withheld as theirs are, since that worker could have
    #: left their programs where the worker of this one found them
    after_withheld: bool = False
    file: str = ""
    line: int = 0
    duration: float = 0.0
    #: notes for the exercise's author (ungraded points and why); never shown to students.
    author_notes: list[str] = field(default_factory=list)
    #: the protocol piece the engine lacks whose use failed this check ("__rpow__", "exp()",
    #: "tensor()", "tensor([...])", "backward()"...; gradcheck.grading.uses), or "": reports
    #: group failed checks by it.
    blocked_by: str = ""
    #: plain data for reports that show more than the message (the HTML report): a failed
    #: gradient check's first failing `point`, and there the engine's trace records (`found`)
    #: and the `node` (and operand, `arg`) at fault; a failed graph or behaviour check's
    #: records of `torch` and of the `engine` (and a behaviour check's `steps` as code).
    #: Shown only where the message is.
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.exercise_id}::{self.check}"


@dataclass
class GradeReport:
    """Everything about grading one submission against a bank."""

    submission: str
    seed: int
    results: list[CheckResult] = field(default_factory=list)
    #: set when the submission could not be imported at all (its traceback, for the student).
    import_error: str = ""
    duration: float = 0.0
    #: the submission's captured stdout/stderr, truncated (the worker of the visible exercises).
    output: str = ""
    #: what the worker of the exercises not visible said (its import failure, its output):
    #: for the instructor only (gradcheck.grading.workers, gradcheck.reports.shown_output).
    withheld: str = ""

    @property
    def score(self) -> float:
        return total(r.score for r in self.results)

    @property
    def max_score(self) -> float:
        return total(r.max_score for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["score"] = self.score
        data["max_score"] = self.max_score
        return data
