"""The bundled exercise bank and the student starter: what a course adopts on day one.

The bank must load whole, cover the eight course modules, pass `validate`, and give full marks to
the reference engine and to torch itself; the starter must score 0 without crashing, with
messages that tell a student what to write next.
"""

from collections import Counter
from pathlib import Path

import pytest

from gradcheck.bank.loader import load_bank
from gradcheck.course import validate
from gradcheck.grading.grader import grade

ROOT = Path(__file__).resolve().parent.parent
BANK = ROOT / "exercises"
STARTER = ROOT / "examples" / "starter" / "engine.py"
TOPICS = ["01-graph", "02-backward", "03-autograd-off", "04-accumulation", "05-training",
          "06-operations", "07-graph-shapes", "08-higher-order"]
SEED = 20240601


@pytest.fixture(scope="module")
def bank():
    return load_bank(BANK)


def test_every_exercise_file_loads(bank):
    assert not bank.broken, "\n".join(str(error) for _, error in bank.broken)
    assert len(bank.exercises) >= 60


def test_each_module_has_exercises_filed_under_its_own_folder(bank):
    per_topic = Counter(e.topic for e in bank.exercises)
    assert sorted(per_topic) == TOPICS
    assert min(per_topic.values()) >= 5, per_topic
    misfiled = [e.id for e in bank.exercises if e.path.parent.name != e.topic]
    assert not misfiled


def test_every_exercise_has_a_hint_and_sensible_points(bank):
    assert not [e.id for e in bank.exercises if len(e.hint.split()) < 8]
    assert not [e.id for e in bank.exercises if not 1 <= e.points <= 5]


def test_some_exercises_are_hidden_and_some_shown_after_the_due_date(bank):
    visibility = Counter(e.visibility for e in bank.exercises)
    assert 8 <= visibility["hidden"] <= len(bank.exercises) // 4
    assert visibility["after_due_date"] >= 2


def test_kinks_are_graded_by_a_convention_named_in_the_title(bank):
    by_convention = [e for e in bank.exercises if e.convention]
    assert len(by_convention) >= 3
    assert all(f"{e.convention}'s convention" in e.title for e in by_convention)


def test_the_seed_examples_are_in_the_bank(bank):
    """The course texts' worked examples, with their hand-derived answers."""
    answers = {e.id: e.checks.answers.cases for e in bank.exercises if e.checks.answers}
    assert answers["chain-rule-z"][0].grads == {"x": 12.0}
    assert answers["square-backward"][0].grads == {"x": 6.0}
    assert answers["two-inputs-loss"][0].grads == {"a": 4.0, "b": 10.0}
    assert answers["dot-product-weights"][0].grads == {"w": [1.0, 2.0, 3.0]}


@pytest.mark.slow
def test_the_bank_validates():
    problems = validate.validate([BANK])
    assert not problems, "\n".join(map(str, problems))


@pytest.fixture(scope="module")
def reference_report():
    return grade("reference", BANK, seed=SEED)


@pytest.fixture(scope="module")
def torch_report():
    return grade("torch", BANK, seed=SEED)


def _not_passed(report):
    return [f"{r.name}: {r.status}: {r.message}" for r in report.results if r.status != "passed"]


@pytest.mark.slow
def test_the_reference_engine_gets_full_marks(reference_report, bank):
    assert not _not_passed(reference_report), f"seed {reference_report.seed}"
    assert reference_report.score == reference_report.max_score == sum(e.points
                                                                      for e in bank.exercises)


@pytest.mark.slow
def test_torch_gets_full_marks(torch_report):
    assert not _not_passed(torch_report), f"seed {torch_report.seed}"
    assert torch_report.score == torch_report.max_score


def test_the_starter_scores_zero_and_says_to_write_tensor_first(bank):
    report = grade(STARTER, BANK, seed=SEED)
    assert not report.import_error
    assert report.score == 0 and report.max_score == sum(e.points for e in bank.exercises)
    assert {r.status for r in report.results} == {"failed"}
    vague = [r.name for r in report.results
             if "missing `tensor()`" not in r.message or "NotImplementedError" not in r.message]
    assert not vague


STAGE_ONE = '''\
"""The starter after its step 1: tensors hold values; every operation is still a stub."""
import starter
from starter import GradFn, no_grad  # noqa: F401


class Tensor(starter.Tensor):
    def __init__(self, data, requires_grad=False):
        self.data = [float(v) for v in data] if isinstance(data, list) else float(data)
        self.requires_grad = requires_grad
        self.grad = None
        self.grad_fn = None
        self.is_leaf = True

    def tolist(self):
        return self.data


def tensor(data, requires_grad=False):
    return Tensor(data, requires_grad)
'''


def test_after_step_one_every_message_names_the_next_stub(tmp_path):
    (tmp_path / "starter.py").write_text(STARTER.read_text())
    (tmp_path / "engine.py").write_text(STAGE_ONE)
    exercises = [BANK / "02-backward" / "chain-rule.exercise.yaml",
                 BANK / "06-operations" / "op-sin-cos.exercise.yaml",
                 BANK / "03-autograd-off" / "no-grad-forward.exercise.yaml"]
    report = grade(tmp_path / "engine.py", exercises, seed=SEED)
    assert report.score == 0 and {r.status for r in report.results} == {"failed"}
    messages = {r.name: r.message for r in report.results}
    assert all("is not written yet" in m for m in messages.values()), messages
    assert "step 2: Tensor.__pow__" in messages["chain-rule-z::gradients"]
    assert "step 4: Tensor.sin()" in messages["op-sin-cos::sampled"]
    assert "step 2: Tensor.__mul__" in messages["no-grad-forward::behaviour"]
