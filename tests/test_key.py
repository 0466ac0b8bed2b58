"""Answer keys: grading with one gives the live results without importing torch or jax, and a key
that no longer matches an exercise is refused for that exercise only."""

import gzip
import json
import shutil
import subprocess
import sys
import textwrap
import warnings
from collections import Counter
from pathlib import Path

import pytest
from grading_samples import BROKEN, CUBE, DETACH_HESSIAN, PRODUCT, write_bank
from test_compare import MAX_TIE

from gradcheck.bank.bundled import bank_dir, reference_path, starter_path
from gradcheck.bank.loader import load_bank
from gradcheck.cli import main
from gradcheck.course.mutants import CATALOGUE
from gradcheck.course.mutation import mutate
from gradcheck.engine import handler
from gradcheck.engine.sandbox import Worker, frame
from gradcheck.grading import answer_key, fuzzing
from gradcheck.grading.grader import Grader, GraderError
from gradcheck.grading.plan import search_options

ENGINES = Path(__file__).parent / "engines"
SEED = 11
#: A 1-D input, a sampled check, a graph and a behaviour session whose third backward raises.
VECTOR = """\
id: vector-sum
title: A weighted sum, twice backward
topic: 03-vectors
points: 4
inputs:
  x: {value: 0.7, domain: {low: -2, high: 2}}
  v: {value: [1.0, -2.0, 0.5], domain: {low: -3, high: 3}}
program: |
  y = (v * x).tanh()
  z = y.sum() + x ** 2
checks:
  gradients: {points: [{x: -1.0, v: [0.5, 0.5, 0.5]}]}
  sampled: {count: 8}
  graph: {names: [x, v, y, z]}
  behaviour:
    steps:
      - backward: {retain_graph: true}
        expect: [grad.x, grad.v]
      - backward: {}
        expect: [grad.x]
      - backward: {}
"""


@pytest.fixture(scope="module")
def bank(tmp_path_factory):
    folder = write_bank(tmp_path_factory.mktemp("keyed") / "bank")
    (folder / "vector-sum.exercise.yaml").write_text(VECTOR)
    (folder / "product.exercise.yaml").write_text(PRODUCT)
    return folder


@pytest.fixture(scope="module")
def key(bank):
    path = bank.parent / "key.json"
    answer_key.build(load_bank(bank), SEED, path)
    return path


@pytest.fixture
def changed(bank, tmp_path):
    """The bank with square's program changed (dz/dx from 4x to 6x) and an exercise added."""
    folder = shutil.copytree(bank, tmp_path / "changed")
    square = folder / "square.exercise.yaml"
    square.write_text(square.read_text().replace("z = 2 * y + 1", "z = 3 * y + 1"))
    (folder / "new-cube.exercise.yaml").write_text(CUBE.replace("id: secret-cube", "id: new-cube"))
    return folder


def graded(submission, bank, **options):
    """Everything a grading run decides, per check (durations left out)."""
    with Grader(submission, seed=SEED, timeout=120, **options) as grader:
        report = grader.grade_bank(load_bank(bank))
    return [(r.exercise_id, r.check, r.status, r.score, r.message, r.author_notes)
            for r in report.results]


def mutant(name, folder):
    """The reference engine with the bug of mutant `name` (none for "reference")."""
    if name == "reference":
        return name
    submission = folder / f"{name}.py"
    submission.write_text(mutate((reference_path() / "__init__.py").read_text(),
                                 next(m for m in CATALOGUE if m.name == name)))
    return submission


def run_python(code):
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    return run


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["reference", ENGINES / "wrong_mul.py"])
def test_grading_with_a_key_gives_the_live_results(bank, key, engine):
    live = graded(engine, bank)
    assert graded(engine, bank, key=key) == live
    # wrong_mul fails checks, so messages and author notes are compared too
    assert {status for _, _, status, *_ in live} == (
        {"passed"} if engine == "reference" else {"passed", "failed"})


def test_the_key_holds_every_exercise_by_digest_and_the_seed(bank, key):
    data = json.loads(key.read_text())
    assert data["seed"] == SEED and data["gradcheck"] == answer_key.__version__
    assert {e.id: e.digest for e in load_bank(bank).exercises} == {
        name: entry["digest"] for name, entry in data["exercises"].items()}
    vector = data["exercises"]["vector-sum"]["checks"]
    assert len(vector["sampled"]["points"]) == 8
    assert set(vector["behaviour"]) == {"request", "torch"}
    # torch's record of the session: the third backward raises, the first two do not
    assert [bool(s["error"]) for s in vector["behaviour"]["torch"]["steps"]] == [
        False, False, True]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["reference", str(ENGINES / "wrong_mul.py")])
def test_grading_with_a_key_imports_neither_torch_nor_jax(bank, key, tmp_path, engine):
    """wrong_mul fails product's gradients: its feedback, which names the faulty operation from
    torch's chain-rule walk, comes from the key too."""
    probe = """\
        import json, sys
        from gradcheck.cli import main
        status = main(["grade", {engine!r}, "--exercises", {bank!r}, "--quiet",
                       "--results-json", {results!r}{key}])
        print(json.dumps([status, sorted(m for m in sys.modules
                                         if m.split(".")[0] in ("torch", "jax"))]))
    """
    results = tmp_path / "results.json"

    def grade(key: str) -> tuple[list[str], dict]:
        run = run_python(probe.format(engine=engine, bank=str(bank), results=str(results),
                                      key=key))
        status, imported = json.loads(run.stdout.splitlines()[-1])
        assert status == 0
        return imported, json.loads(results.read_text())

    imported, keyed = grade(f", '--key', {str(key)!r}")
    assert imported == []
    if engine == "reference":
        assert keyed["score"] == 11
    else:
        failed = {t["name"]: t for t in keyed["tests"]}[
            "A product of two inputs: gradients at the listed points (product)"]
        assert failed["score"] == 0 and "MulBackward0" in failed["output"].splitlines()[0]
    # the same run without the key imports torch (the check above can fail), runs jax in its
    # helper process (gradcheck.grading.helper_process), and says the same
    imported, live = grade(f", '--seed', {str(SEED)!r}")  # the key's seed: the same points
    assert "torch" in imported and "jax" not in imported
    assert [(t["name"], t["score"], t["output"]) for t in live["tests"]] == [
        (t["name"], t["score"], t["output"]) for t in keyed["tests"]]


@pytest.mark.slow
def test_a_stale_key_is_refused_for_the_changed_exercise_only(changed, key):
    with pytest.warns(answer_key.StaleKeyWarning) as caught:
        results = graded("reference", changed, key=key)
    assert sorted(str(w.message).split(" ")[1] for w in caught) == ["new-cube", "square"]
    assert "square changed since the answer key was built" in str(caught[0].message) + str(
        caught[1].message)
    # The key's stale answers (dz/dx = 4x) would fail the reference engine on 3 * y + 1.
    assert {status for _, _, status, *_ in results} == {"passed"}
    assert results == graded("reference", changed)


@pytest.mark.slow
def test_gradcheck_grade_says_a_stale_key_in_one_line_that_says_what_to_do(changed, key):
    """Not Python's warning format, which named gradcheck's own file and source line."""
    run = subprocess.run([sys.executable, "-m", "gradcheck", "grade", "reference", "--key",
                          str(key), "--exercises", str(changed), "--quiet"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    said = [line for line in run.stderr.splitlines() if "square" in line]
    assert said == ["gradcheck grade: warning: exercise square changed since the answer key was "
                    "built (its sha256 differs), so the answer key is not used for it (rebuild "
                    "the key with `gradcheck key build`)"]
    assert "answer_key.py" not in run.stderr and "StaleKeyWarning" not in run.stderr


@pytest.mark.slow
def test_without_torch_and_jax_a_stale_exercise_is_skipped_saying_why(changed, key):
    run = run_python(f"""\
        import json, sys
        sys.modules["torch"] = sys.modules["jax"] = None  # as on a machine without them
        from gradcheck.bank.bundled import bank_dir, reference_path, starter_path
        from gradcheck.bank.loader import load_bank
        from gradcheck.grading.grader import Grader
        with Grader("reference", key={str(key)!r}) as grader:
            report = grader.grade_bank(load_bank({str(changed)!r}))
        print(json.dumps([[r.exercise_id, r.check, r.status, r.message, r.author_notes]
                          for r in report.results]))
    """)
    results = {(eid, check): (status, message, notes)
               for eid, check, status, message, notes in json.loads(run.stdout)}
    status, message, _ = results["square", "graph"]
    assert status == "skipped" and message.startswith(
        "skipped: exercise square changed since the answer key was built")
    assert message.endswith("it cannot be graded live: torch is not installed")
    # its gradients are still graded, by finite differences; the notes say why torch is missing
    status, _, notes = results["square", "gradients"]
    assert status == "passed" and any("square changed since" in note for note in notes)
    assert {status for (eid, _), (status, _, _) in results.items()
            if eid in ("vector-sum", "secret-cube")} == {"passed"}
    assert "StaleKeyWarning: exercise square changed" in run.stderr


#: An exercise that jax does not check: it is graded before those jax checks, live or keyed.
GRAPH_ONLY = PRODUCT.replace("id: product", "id: zz-graph-only").replace(
    "  gradients: {}\n", "")


def test_with_a_key_a_submission_is_graded_in_the_live_order(tmp_path):
    folder = tmp_path / "bank"
    folder.mkdir()
    (folder / "product.exercise.yaml").write_text(PRODUCT)
    (folder / "zz-graph-only.exercise.yaml").write_text(GRAPH_ONLY)
    answer_key.build(load_bank(folder), SEED, tmp_path / "key.json")

    def order(**options):
        seen = []
        with Grader("reference", seed=SEED, **options) as grader:
            report = grader.grade_bank(load_bank(folder), lambda eid, _: seen.append(eid))
        assert [r.exercise_id for r in report.results] == [  # reports keep the bank's order
            "product", "product", "zz-graph-only"]
        return seen

    assert order() == order(key=tmp_path / "key.json") == ["zz-graph-only", "product"]


def test_a_key_from_another_version_or_for_another_seed_is_refused(key, tmp_path):
    with pytest.raises(GraderError, match=f"built with seed {SEED}; grade with --seed {SEED}"):
        Grader("reference", seed=SEED + 1, key=key)
    with pytest.raises(GraderError) as loaded:  # a key loaded already is named by its file
        Grader("reference", seed=SEED + 1, key=answer_key.load(key))
    assert str(loaded.value).startswith(f"the answer key {key} was built with seed {SEED};")
    assert len(str(loaded.value)) < 200 + len(str(key))
    data = json.loads(key.read_text())
    data["gradcheck"] = "0.0.1"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    with pytest.raises(answer_key.KeyFileError, match="built by gradcheck 0.0.1, and this is "
                                                      "gradcheck .*; rebuild it"):
        Grader("reference", key=other)
    data = json.loads(key.read_text())
    data["format"] = 1  # before finite differences and second derivatives were in the key
    other.write_text(json.dumps(data))
    with pytest.raises(answer_key.KeyFileError, match="is in format 1, and this gradcheck reads "
                                                      f"format {answer_key.FORMAT}; "
                                                      "rebuild it"):
        answer_key.load(other)
    other.write_text("{}")
    with pytest.raises(GraderError, match="is not an answer key written by `gradcheck key build`"):
        answer_key.load(other)


def test_key_build_writes_a_private_gzip_when_asked_and_leaves_broken_files_out(bank, key, tmp_path,
                                                                      capsys):
    folder = shutil.copytree(bank, tmp_path / "bank")
    (folder / "broken.exercise.yaml").write_text(BROKEN)
    out = tmp_path / "key.json.gz"
    status = main(["key", "build", "--exercises", str(folder), "--seed", str(SEED),
                   "--out", str(out)])
    assert status == 1
    streams = capsys.readouterr()
    assert "left out of the key, broken:" in streams.err and "broken.exercise.yaml:4" in streams.err
    assert f"wrote {out}: 4 exercises, seed {SEED}" in streams.out
    assert out.read_bytes().startswith(b"\x1f\x8b")
    assert out.stat().st_mode & 0o777 == 0o600  # the answers: for the grader's user alone
    assert json.loads(gzip.decompress(out.read_bytes())) == json.loads(key.read_text())
    assert answer_key.load(out).exercises == answer_key.load(key).exercises


def test_the_key_holds_torchs_walk_at_every_point_of_a_small_program(bank, key):
    """Feedback that names the faulty operation needs torch's chain-rule walk at the first
    failing point: the key holds it, as a live walk gives it, at every point of these checks."""
    from gradcheck.grading.chain_rule import walk

    loaded = answer_key.load(key)
    for exercise in load_bank(bank).exercises:
        for name in set(exercise.checks.present()) & {"gradients", "sampled", "answers"}:
            points = loaded.points(exercise, name)
            for index, point in enumerate(points):
                stored = loaded.walk(exercise, name, points, index)
                assert stored is not None, (exercise.id, name, index)
                live = walk(exercise.program, point, exercise.grad_names)
                assert json.dumps(stored.record()) == json.dumps(live.record())
                # built once per grading key and program: a later grading reads the same walk
                assert loaded.anew().walk(exercise, name, points, index) is stored
    # a bank loaded again (the watch, after a change) is walked on its own programs
    for exercise in load_bank(bank).exercises:
        for name in set(exercise.checks.present()) & {"gradients", "sampled", "answers"}:
            points = loaded.points(exercise, name)
            again = loaded.walk(exercise, name, points, 0)
            assert again.program is exercise.program


@pytest.fixture(scope="module")
def bundled_key(tmp_path_factory):
    """A key for the whole bundled bank, its hessian checks' second derivatives included."""
    path = tmp_path_factory.mktemp("bundled") / "key.json"
    answer_key.build(load_bank(bank_dir()), SEED, path)
    return path


@pytest.mark.slow
def test_a_keyed_grading_of_the_whole_bundled_bank_imports_neither_torch_nor_jax(bundled_key):
    """Every oracle's answers are in the key, the second derivatives of 08-higher-order's
    hessian checks too: the grader imports neither library, and the reference gets every point.
    It passes every random program the key holds, so hypothesis is not imported either."""
    run = run_python(f"""\
        import json, sys
        from gradcheck.grading.grader import grade
        report = grade("reference", key={str(bundled_key)!r})
        print(json.dumps([report.score, report.max_score,
                          sorted(r.check for r in report.results if r.status != "passed"),
                          sorted({{r.check for r in report.results}}),
                          sorted({{m.split(".")[0] for m in sys.modules}}
                                 & {{"torch", "jax", "hypothesis"}})]))
    """)
    score, max_score, not_passed, checks, imported = json.loads(run.stdout.splitlines()[-1])
    assert "hessian" in checks and "random_programs" in checks and not_passed == [] and score == max_score
    assert imported == [] and "StaleKeyWarning" not in run.stderr


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["reference", "tanh-graph-half-detached",
                                    "sigmoid-graph-sign-error"])
def test_second_derivatives_from_the_key_grade_as_live(bundled_key, engine, tmp_path):
    """The reference and two engines whose second derivatives are wrong, on the second-order
    exercises: the same statuses, points and messages with the key as live."""
    submission = mutant(engine, tmp_path)
    higher = bank_dir() / "08-higher-order"
    live = graded(submission, higher)
    assert graded(submission, higher, key=bundled_key) == live
    hessian = [status for _, check, status, *_ in live if check == "hessian"]
    assert len(hessian) >= 5 and (set(hessian) == {"passed"}) == (engine == "reference")


def asked(submission, folder, key, lookahead, feedback_later, monkeypatch):
    """A keyed grading's results, every request the grader asked its workers in order, how many
    had been sent ahead when asked (`then`), the requests sent ahead that were not asked after
    all (as `Worker.unasked` counts them), and the most sent ahead at once."""
    requests, sent_ahead, unasked, depth = [], [], [], [0]
    request, close, send_ahead = Worker.request, Worker.close, Worker._send_ahead

    def recorded(worker, sent, timeout, then=()):
        requests.append((json.dumps(sent, sort_keys=True), worker._is_ahead(frame(sent))))
        reply = request(worker, sent, timeout, then)
        depth[0] = max(depth[0], len(worker._ahead))
        return reply

    def recorded_ahead(worker, later):
        before = len(worker._ahead)
        send_ahead(worker, later)
        sent_ahead.extend(json.dumps(json.loads(frame[4:]), sort_keys=True)
                          for frame, _ in list(worker._ahead)[before:])

    monkeypatch.setattr(Worker, "request", recorded)
    monkeypatch.setattr(Worker, "_send_ahead", recorded_ahead)
    monkeypatch.setattr(Worker, "close", lambda worker: close(worker) or unasked.append(worker.unasked))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", answer_key.StaleKeyWarning)
        with Grader(submission, seed=SEED, timeout=120, key=key) as grader:
            grader.lookahead = lookahead
            report = grader.grade_bank(load_bank(folder), feedback_later=feedback_later)
            grader.give_feedback(report)
    monkeypatch.undo()
    results = [(r.exercise_id, r.check, r.status, r.score, r.message) for r in report.results]
    left = Counter(sent_ahead) - Counter(sent for sent, ahead in requests if ahead)
    assert left.total() == sum(unasked)
    return results, [sent for sent, _ in requests], sum(ahead for _, ahead in requests), left, \
        depth[0]


@pytest.mark.slow
@pytest.mark.parametrize("engine, feedback_later", [
    ("reference", True), ("wrong_mul", False), ("wrong_mul", True), ("odd_set_order", True),
    ("starter", False), ("changed", False)])
def test_a_request_sent_ahead_is_the_one_the_grading_sends_next(
        bundled_key, bank, key, changed, engine, feedback_later, monkeypatch):
    """Each check's last request goes with those of the next checks, as far as they are known
    (`Grader.lookahead`), so that the worker answers them while the grader judges. The grader
    asks exactly the requests of a grading without it, in the same order, and the only requests
    sent ahead that go unasked are a random programs replay's cases after one that differs: a
    passing and a failing engine, with the feedback of failed checks at once (which asks the
    engine more) or later (the watch: then what follows a gradient check is known, and
    hundreds of requests go ahead at once), a nondeterministic engine, the starter (no
    higher-order protocol: `inspect` decides what is asked), and a bank with an exercise
    changed since its key and one added, graded live."""
    folder, path = (changed, key) if engine == "changed" else (bank_dir(), bundled_key)
    submission = {"reference": "reference", "changed": "reference",
                  "starter": starter_path() / "engine.py"}.get(engine, ENGINES / f"{engine}.py")
    plain = asked(submission, folder, path, False, feedback_later, monkeypatch)
    ahead = asked(submission, folder, path, True, feedback_later, monkeypatch)
    assert ahead[:2] == plain[:2]
    assert ahead[2] > plain[2] and plain[4] == 1 and ahead[4] > (100 if feedback_later else 1)
    assert not plain[3]
    exercises = load_bank(folder).exercises
    loaded = answer_key.load(path)
    replays = {json.dumps(request, sort_keys=True) for exercise in exercises
               if exercise.checks.random_programs is not None
               and (cases := loaded.random_programs(exercise)) is not None
               for request in fuzzing.replay_requests(cases)}
    assert set(ahead[3]) <= replays
    differed = any(status == "failed" for _, check, status, *_ in ahead[0]
                   if check == "random_programs")
    assert differed or not ahead[3]


@pytest.mark.slow
def test_the_walks_of_failed_checks_are_asked_in_rounds_sent_ahead(bundled_key, monkeypatch):
    """`give_feedback`: after the random programs' shrinking, the first round asks the trace of
    one walk per exercise, each with the rest of the round sent ahead; the next rounds what the
    traces told the walks to run alone, and the exercises' next walks. (That the findings are
    those of walks one at a time: tests/test_watch.py.)"""
    kinds, ahead = [], []
    request = Worker.request

    def recorded(worker, sent, timeout, then=()):
        kinds.append(sent["kind"])
        ahead.append(worker._is_ahead(frame(sent)))
        return request(worker, sent, timeout, then)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", answer_key.StaleKeyWarning)
        with Grader(ENGINES / "wrong_mul.py", seed=SEED, key=bundled_key) as grader:
            report = grader.grade_bank(load_bank(bank_dir()), feedback_later=True,
                                       every_score_first=True)  # as the watch: all of it after
            monkeypatch.setattr(Worker, "request", recorded)
            grader.give_feedback(report)
    first = kinds.index("trace")  # after the shrinking
    one = next(n for n, kind in enumerate(kinds[first:]) if kind != "trace")  # round one
    assert one > 10 and not ahead[first] and all(ahead[first + 1:first + one])
    assert "behaviour" in kinds[first + one:] and any(ahead[first + one:])
    walked = [r for r in report.results if r.status == "failed" and r.detail.get("found")]
    assert len(walked) > 20


# --- random programs ----------------------------------------------------------------------------

#: the bundled exercises with a random_programs check
PROGRAMS = ("02-backward/mixed-arithmetic", "06-operations/mixed-operations",
            "07-graph-shapes/random-graphs")


@pytest.fixture(scope="module")
def programs_bank(tmp_path_factory):
    folder = tmp_path_factory.mktemp("programs") / "bank"
    folder.mkdir()
    for name in PROGRAMS:
        shutil.copy(bank_dir() / f"{name}.exercise.yaml", folder)
    return folder


@pytest.fixture(scope="module")
def programs_keys(programs_bank):
    """A key for those exercises, and the same key without their programs, as a key holds
    none where the reference engine failed one: grading with it draws them all live."""
    stored, unstored = programs_bank.parent / "key.json", programs_bank.parent / "unstored.json"
    answer_key.build(load_bank(programs_bank), SEED, stored)
    data = json.loads(stored.read_text())
    for entry in data["exercises"].values():
        del entry["checks"]["random_programs"]
    unstored.write_text(json.dumps(data))
    return stored, unstored


def answers(answered):
    """A case's oracle answers as comparable text (NaN included)."""
    return json.dumps({name: [result.value.tolist(),
                              {input: grad.tolist() for input, grad in result.grads.items()}]
                       for name, result in answered.expected.items()})


@pytest.mark.parametrize("oracles", [fuzzing.KEYED, ("fd", "torch")])
def test_the_key_holds_the_programs_a_search_draws_for_an_engine_that_passes_them(
        programs_bank, programs_keys, oracles):
    """hypothesis draws each case from the seed and the outcomes of the cases before it: the
    reference engine, answering in its worker, passes every case, so a live search at the
    grader's arguments draws the key's cases, whichever oracles judge them; with a keyed
    grading's oracles, their answers are the key's to the bit."""
    key = answer_key.load(programs_keys[0])
    with Worker(reference_path()) as worker:
        for exercise in load_bank(programs_bank).exercises:
            drawn: list[fuzzing.Answered] = []
            result = fuzzing.search(lambda request: worker.request(request, 60),
                                    oracles=oracles, record=drawn,
                                    **search_options(exercise, SEED))
            stored = key.random_programs(exercise)
            assert result.found is None and not result.stopped
            assert result.examples == len(stored) == exercise.checks.random_programs.count
            assert [case.session for case in drawn] == [case.session for case in stored]
            if oracles == fuzzing.KEYED:
                assert list(map(answers, drawn)) == list(map(answers, stored))


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["reference", "tanh-forgets-square", "mul-own-operand"])
def test_a_keyed_grading_with_the_stored_programs_gives_the_live_verdicts(
        programs_bank, programs_keys, engine, tmp_path):
    """At this seed, tanh-forgets-square passes the programs of two exercises and fails the
    15th of random-graphs; mul-own-operand fails the 8th, 23rd and 3rd programs of the three.
    From there the live search takes over and shrinks the difference, with the same message and
    notes as a search that drew every program live."""
    submission = mutant(engine, tmp_path)
    stored, unstored = programs_keys
    replayed = graded(submission, programs_bank, key=stored)
    assert replayed == graded(submission, programs_bank, key=unstored)
    verdicts = {eid: (status, message) for eid, check, status, _, message, _ in replayed
                if check == "random_programs"}
    failed = {"reference": set(), "tanh-forgets-square": {"random-graphs"},
              "mul-own-operand": set(verdicts)}[engine]
    assert {eid for eid, (status, _) in verdicts.items() if status == "failed"} == failed
    for eid, (status, message) in verdicts.items():
        assert message.startswith("The smallest program found where your engine differs from "
                                  "the oracles") if eid in failed else message == (
            "all 30 random programs match finite differences, the reference engine")


def test_feedback_later_leaves_the_shrink_for_later_and_says_the_same(
        programs_bank, programs_keys, tmp_path):
    """The watch asks for the scores first: a random-programs check that fails is scored at
    the first stored case that differs, and its smallest program is found with the feedback,
    the same as a grading that shrinks it at once."""
    submission = mutant("mul-own-operand", tmp_path)
    bank = load_bank(programs_bank)
    with Grader(submission, seed=SEED, key=programs_keys[0]) as grader:
        report = grader.grade_bank(bank, feedback_later=True, every_score_first=True)
        scored = {r.name: (r.status, r.score, r.message) for r in report.results}
        grader.give_feedback(report)
    now = graded(submission, programs_bank, key=programs_keys[0])
    assert [(r.exercise_id, r.check, r.status, r.score, r.message, r.author_notes)
            for r in report.results] == now
    for eid, check, status, score, message, _ in now:
        if check == "random_programs":
            assert status == "failed" and scored[f"{eid}::{check}"][:2] == (status, score)
            assert "(1 operation)" not in scored[f"{eid}::{check}"][2]  # not shrunk yet
            assert "(1 operation)" in message


def test_an_engine_meets_the_same_requests_with_the_stored_programs_as_without(
        programs_bank, programs_keys, tmp_path):
    """The replay asks the engine the stored programs; from the first that differs, the live
    search is given those replies, and asks only what a search without stored programs asks
    after them: the engine sees the very same requests, in order, and the finding is the same."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mul_own_operand",
                                                  mutant("mul-own-operand", tmp_path))
    engine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(engine)
    key = answer_key.load(programs_keys[0])
    for exercise in load_bank(programs_bank).exercises:
        asked = {"live": [], "replayed": []}

        def ask(way):
            return lambda request: asked[way].append(request) or handler.handle(engine, request)

        options = {"oracles": fuzzing.KEYED, **search_options(exercise, SEED)}
        live = fuzzing.search(ask("live"), **options)
        replayed = fuzzing.replayed(ask("replayed"), key.random_programs(exercise), **options)
        assert asked["replayed"] == asked["live"]
        assert replayed.found.describe() == live.found.describe()
        assert replayed.examples == live.examples < 30
        # the watch's way: the first case that differs decides the score at once; the shrink,
        # resumed later (on another worker), asks the rest and finds the same
        asked["replayed"] = []
        first = fuzzing.replayed(ask("replayed"), key.random_programs(exercise),
                                 shrink_later=True, **options)
        assert first.found is not None and first.examples == live.examples
        assert asked["replayed"] == asked["live"][:len(asked["replayed"])]
        shrunk = first.resume(ask("replayed"))
        assert asked["replayed"] == asked["live"]
        assert shrunk.found.describe() == live.found.describe()


def test_a_key_holds_no_programs_the_reference_fails_or_another_hypothesis_draws(
        programs_bank, programs_keys, tmp_path, monkeypatch):
    """Where the reference engine fails a drawn program (here one whose gradients are all
    doubled: no bundled exercise makes the real one fail), the key holds none of that check's
    programs and says so; a key built with another hypothesis version (which may draw others)
    is not replayed either: both are graded by the live search."""
    exercise = next(e for e in load_bank(programs_bank).exercises if e.id == "random-graphs")
    data = json.loads(programs_keys[0].read_text())
    data["exercises"][exercise.id]["checks"]["random_programs"]["hypothesis"] = "0.0.1"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    assert len(answer_key.load(programs_keys[0]).random_programs(exercise)) == 30
    assert answer_key.load(other).random_programs(exercise) is None

    reference = fuzzing.reference_reply

    def doubled(request):
        reply = reference(request)
        for result in reply["results"]:
            result["grads"] = {name: [2 * g for g in grad] if isinstance(grad, list) else 2 * grad
                               for name, grad in result["grads"].items()}
        return reply

    monkeypatch.setattr(fuzzing, "reference_reply", doubled)
    with pytest.warns(answer_key.UnstoredProgramsWarning,
                      match="exercise random-graphs: the reference engine fails one of its "
                            "random programs, so the answer key holds none of them"):
        answer_key.build(load_bank(programs_bank / "random-graphs.exercise.yaml"), SEED,
                         tmp_path / "key.json")
    key = answer_key.load(tmp_path / "key.json")
    assert "random_programs" not in key.exercises[exercise.id]["checks"]
    assert key.random_programs(exercise) is None


@pytest.mark.slow
@pytest.mark.parametrize("prepared", [False, True])
def test_a_key_kept_loaded_grades_each_submission_as_a_key_read_afresh(
        bank, key, changed, programs_bank, programs_keys, tmp_path, monkeypatch, prepared):
    """The watch and every job slot of grade-batch keep one key loaded for many gradings: it
    decodes its answers, and works out the oracles' agreement on them (`Key.agreement`), once,
    or beforehand (`Key.prepare`, as a job slot does before it forks a grading per submission).
    Each grading still equals one with the key read afresh: passing and failing engines, the
    stored random programs replayed and searched live from a difference, and an exercise changed
    since the key, graded live."""
    worked_out = []
    agree = answer_key.compare.agree
    monkeypatch.setattr(answer_key.compare, "agree",
                        lambda *args: worked_out.append(args[0]) or agree(*args))
    for path, runs in [(key, [("reference", bank), (ENGINES / "wrong_mul.py", bank),
                              ("reference", bank), ("reference", changed)]),
                       (programs_keys[0], [(mutant(name, tmp_path), programs_bank) for name in
                                           ("reference", "mul-own-operand", "reference")])]:
        kept = answer_key.load(path)
        if prepared:
            kept.prepare(load_bank(runs[0][1]), None)
        for number, (engine, folder) in enumerate(runs):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", answer_key.StaleKeyWarning)
                worked_out.clear()
                again = graded(engine, folder, key=kept.anew())
                if engine == "reference" and folder != changed and (prepared or number == 2):
                    assert worked_out == []  # every agreement was worked out before
                assert again == graded(engine, folder, key=path)


#: torch adds into y.grad before the second backward() finds a's saved values freed
PARTIAL = """\
id: partial-backward
title: A second backward raises after torch has run part of the graph
topic: 04-accumulation
points: 2
inputs:
  x: {value: 1.5}
  y: {value: -2.0}
program: |
  a = x * 2.0
  z = a + y
checks:
  behaviour:
    steps:
      - backward: {}
        expect: [grad.x, grad.y]
      - backward: {}
        expect: [grad.x, grad.y]
      - backward: {retain_graph: true}
        expect: [grad.x, grad.y]
      - zero_grad: [y]
        expect: [grad.y]
      - forward: {}
      - backward: {}
        expect: [grad.x, grad.y]
"""
#: ... then a step of gradient descent with that gradient: nothing after it is compared
PARTIAL_SGD = PARTIAL.split("      - backward: {retain_graph")[0].replace(
    "id: partial-backward", "id: partial-then-sgd") + """      - sgd: {lr: 0.1, params: [y]}
        expect: [value.y]
"""


def test_a_gradient_torch_changed_before_a_backward_raised_is_compared_only_once_reset(
        tmp_path):
    """torch's part of a backward that raises is no engine's to match (docs/protocol.md): an
    engine that raises before it runs any operation passes, live and with a key, as the
    reference does; the gradients are compared again once set to None, and an engine that
    does not raise, or adds up wrong after the reset, still fails."""
    folder = tmp_path / "bank"
    folder.mkdir()
    (folder / "partial.exercise.yaml").write_text(PARTIAL)
    (folder / "sgd.exercise.yaml").write_text(PARTIAL_SGD)
    key = tmp_path / "key.json"
    answer_key.build(load_bank(folder), SEED, key)
    stored = json.loads(key.read_text())["exercises"]["partial-backward"]["checks"]["behaviour"]
    assert [step.get("touched") for step in stored["torch"]["steps"]] == [
        None, ["y"], ["y"], None, None, None]
    source = (reference_path() / "__init__.py").read_text()
    walk = "    get = grads.get\n    found: dict[Scalar, Any] = {}\n"
    assert walk in source
    upfront = tmp_path / "upfront.py"
    upfront.write_text(source.replace(walk, "    if any(n._op.saves and n._freed() for n in "
                                            "order):\n        raise RuntimeError(_BACKWARD_TWICE)\n"
                                      + walk))
    never = tmp_path / "never_raises.py"
    never.write_text(source.replace("if op.saves and node._freed():", "if False:"))
    adding = "leaf._grad = g if leaf._grad is None else leaf._grad + g\n"
    assert adding in source
    twice = tmp_path / "twice.py"  # adds a gradient into a leaf's twice
    twice.write_text(source.replace(adding, adding.replace("+ g", "+ g + g")))
    for engine, partial, then_sgd in [("reference", "passed", "passed"),
                                      (upfront, "passed", "passed"),
                                      (never, "failed", "failed"),
                                      (twice, "failed", "passed")]:
        live = graded(engine, folder)
        assert graded(engine, folder, key=key) == live
        assert {(exercise, s) for exercise, check, s, *_ in live if check == "behaviour"} == {
            ("partial-backward", partial), ("partial-then-sgd", then_sgd)}, engine
    message = next(m for _, check, _, _, m, _ in graded(twice, folder) if check == "behaviour")
    assert "step 6" in message and "x.grad" in message, message


def test_a_key_holds_a_hessian_of_a_detach_as_live_grading_grades_it(tmp_path, capsys):
    """Live grading grades such a check by torch and jax, finite differences skipped; the key
    stores that skip, so a keyed grading is the live one, for the reference and for an engine
    whose detach keeps the history."""
    folder = tmp_path / "bank"
    folder.mkdir()
    (folder / "detach-hessian.exercise.yaml").write_text(DETACH_HESSIAN)
    (folder / "product.exercise.yaml").write_text(PRODUCT)
    key = tmp_path / "key.json"
    assert main(["key", "build", "--exercises", str(folder), "--seed", str(SEED),
                 "--out", str(key)]) == 0
    assert f"wrote {key}: 2 exercises" in capsys.readouterr().out
    stored = json.loads(key.read_text())["exercises"]["detach-hessian"]["checks"]["hessian"]
    assert stored["fd"] == {"unfit": "skipped: finite differences along a direction move a "
                                     "detached value with the point, so they cannot give its "
                                     "second derivatives"}
    assert {"torch", "jax"} <= set(stored)
    for engine, hessian in (("reference", "passed"), ("detach-keeps-history", "failed")):
        submission = mutant(engine, tmp_path)
        live = graded(submission, folder)
        with warnings.catch_warnings():
            warnings.simplefilter("error", answer_key.StaleKeyWarning)
            assert graded(submission, folder, key=key) == live
        (_, _, status, _, _, notes), = [r for r in live if r[:2] == ("detach-hessian", "hessian")]
        assert status == hessian and notes[0].startswith("fd skipped: finite differences")


def test_a_hessian_no_oracle_can_grade_is_reported_by_key_build_as_by_validate(tmp_path, capsys):
    """With finite differences its only oracle, a hessian check of a detach grades nothing:
    `key build` names its file, line and field and what to do, as `validate` does, and still
    writes the key for every exercise, that one as live grading meets it (the check skipped)."""
    from gradcheck.course.validate import validate

    folder = tmp_path / "bank"
    folder.mkdir()
    path = folder / "detach-hessian.exercise.yaml"
    path.write_text(DETACH_HESSIAN + "    oracles: [fd]\n")
    (folder / "product.exercise.yaml").write_text(PRODUCT)
    key = tmp_path / "key.json"
    assert main(["key", "build", "--exercises", str(folder), "--seed", str(SEED),
                 "--out", str(key)]) == 1
    streams = capsys.readouterr()
    problem = (f"{path}:16: checks.hessian.oracles: finite differences along a direction move a "
               "detached value with the point, so they cannot give its second derivatives, and "
               "no other oracle is listed, so this check grades nothing, live or with an answer "
               "key (it is skipped and scores 0); add torch and jax to `oracles`, or leave "
               "`oracles` out")
    assert problem in streams.err.splitlines()
    assert f"wrote {key}: 2 exercises" in streams.out
    assert problem in map(str, validate([folder], static=True))
    # said once: the reference's grading, which skips the check, does not say it again
    assert [str(p) for p in validate([folder]) if p.field.startswith("checks.")] == [problem]
    live = graded("reference", folder)
    assert graded("reference", folder, key=key) == live
    assert [status for exercise, check, status, *_ in live if check == "hessian"] == ["skipped"]


#: a tolerance tighter than rounding: the oracles' last digits differ at every sampled point
ZERO_TOLERANCE = """id: zero-tolerance
title: zero tolerance
topic: t
points: 1
tolerance:
  fd: {atol: 0.0, rtol: 0.0}
inputs:
  x: {value: 1.0, domain: {low: 0.5, high: 2}}
program: |
  f = x.exp() * x.sin()
checks:
  sampled: {count: 5}
"""


def test_a_check_that_grades_nothing_is_said_by_key_build_and_refused_by_the_bundle(
        tmp_path, capsys):
    """Seen only by `validate` before: `key build` wrote the key saying nothing, and the
    bundle carried a check every student would score 0 on. Both now name it, from the
    oracles' answers alone, with the reason grading would give."""
    from gradcheck.course import bundle

    folder = tmp_path / "bank"
    folder.mkdir()
    path = folder / "zero-tolerance.exercise.yaml"
    path.write_text(ZERO_TOLERANCE)
    (folder / "product.exercise.yaml").write_text(PRODUCT)
    key = tmp_path / "key.json"
    assert main(["key", "build", "--exercises", str(folder), "--seed", str(SEED),
                 "--out", str(key)]) == 1
    said = [line for line in capsys.readouterr().err.splitlines() if "grades nothing" in line]
    assert len(said) == 1 and said[0].startswith(
        f"{path}:12: checks.sampled: this check grades nothing: no gradient of this check "
        "could be graded, so it scores 0")
    assert "the exercise's tolerance is tighter than rounding" in said[0]
    with pytest.raises(bundle.BundleError, match="a check that grades nothing cannot be "
                       f"bundled; fix it \\(see `gradcheck validate`\\):\n{path}:12: "
                       "checks.sampled: this check grades nothing"):
        bundle.gradescope([folder], tmp_path / "a.zip", seed=SEED,
                          requirement="gradcheck @ git+https://example.org/g.git")
    path.write_text(ZERO_TOLERANCE.replace("{atol: 0.0, rtol: 0.0}", "{atol: 1e-6, rtol: 1e-5}"))
    assert main(["key", "build", "--exercises", str(folder), "--seed", str(SEED),
                 "--out", str(key)]) == 0
    assert "grades nothing" not in capsys.readouterr().err


def test_a_key_holds_torch_for_a_torch_convention_whatever_a_check_lists(tmp_path):
    """A check of a `convention: torch` exercise is graded by torch whatever its `oracles` say
    (here jax alone, whose abs'(0) is 1): the key holds torch's answers for it, and a keyed
    grading takes them from there as a live one computes them."""
    folder = tmp_path / "bank"
    folder.mkdir()
    # the exercise of tests/test_compare.py, its check asking jax alone
    (folder / "max-tie.exercise.yaml").write_text(
        MAX_TIE.replace("    points: [{a: 2.0, b: 1.0}]\n", "    oracles: [jax]\n"))
    key = tmp_path / "key.json"
    answer_key.build(load_bank(folder), SEED, key)
    held = json.loads(key.read_text())["exercises"]["max-tie-abs"]["checks"]["gradients"]
    assert {"jax", "torch"} <= set(held)
    live = graded("reference", folder)
    with warnings.catch_warnings():
        warnings.simplefilter("error", answer_key.StaleKeyWarning)
        assert graded("reference", folder, key=key) == live
    assert [status for _, _, status, *_ in live] == ["passed"]
