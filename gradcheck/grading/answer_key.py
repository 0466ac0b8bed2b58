"""Answer keys: what the oracles answer for a bank, computed once, so grading needs none of them.

Importing torch and jax costs seconds and hundreds of megabytes for every submission, yet their
answers (and those of finite differences, which are as costly to repeat for every submission)
depend only on the exercises and the seed of the sampled points. `build` runs every oracle once
per exercise, at every point a check grades (the sampled ones drawn from the seed, as the grader
draws them; a hessian check's second derivatives too) and for every graph and behaviour request,
and writes it all as JSON. A grader given the key (`Grader(key=...)`, `gradcheck grade --key`)
takes the oracles' results and torch's records from it, and torch's chain-rule walk
(`gradcheck.grading.chain_rule`) for the feedback on a failing check, so a keyed grading imports
neither torch nor jax and runs no oracle itself. For a `random_programs` check it holds the
programs the grader's search draws at the key's seed for an engine that passes every one, each
with finite differences' and the reference engine's answers there (recorded from that search,
with the reference engine answering, which passes them all): a keyed grading judges those first,
in order, with no hypothesis drawing and no oracle running, and only from the first program the
submission fails draws and shrinks programs live, against the same two oracles
(`fuzzing.replayed` says why that gives the live verdict). Where the reference engine fails a
drawn program, or hypothesis is another version than the one that built the key, the check's
programs are all drawn live.

A key kept loaded for many gradings (the watch, a batch's job slot) decodes each stored answer
once and works out the oracles' agreement on it once (`Key.agreement`; a job slot does both
before its first grading, `Key.prepare`): derived from the stored answers alone, they are the
same at every grading.

Every entry carries the sha256 of its exercise file (`Exercise.digest`) and the key carries the
gradcheck version that built it. An entry is used only for the very file it was built from: an
exercise that changed since, or that the key lacks, is refused with a `StaleKeyWarning` and graded
live, as without a key (torch and jax imported then). Where they are not installed, its torch and
jax checks are skipped with a message that says the key is stale, as a live run without them
would skip them. A key built by another gradcheck version is refused as a whole (`KeyFileError`).

The file is JSON (non-finite numbers written as `NaN`, `Infinity`, as in the worker protocol),
gzip-compressed when its name ends in `.gz` or it is over 1 MB; `load` reads either form.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import importlib.metadata
import json
import os
import sys
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from gradcheck import __version__, oracles
from gradcheck.bank.course_file import (
    FILE_NAME,
    CourseFileError,
    bank_default,
    describe,
    find_course,
    key_seed,
)
from gradcheck.bank import selection
from gradcheck.bank.drawn_programs import Drawn, Session
from gradcheck.bank.loader import Bank
from gradcheck.bank.models import Exercise
from gradcheck.bank.problems import ExerciseError, Problem
from gradcheck.engine import handler
from gradcheck.engine.wire import Sealed
from gradcheck.grading import compare, score
from gradcheck.grading.chain_rule import Walk, WalkError, walk
from gradcheck.grading.plan import (
    GRADIENT_CHECKS,
    GraderError,
    jax_modules,
    oracle_problems,
    sample_seed,
    search_options,
    torch_request,
    wanted_oracles,
)
from gradcheck.oracles import OracleResult, Skipped, Unfit, second_order
from gradcheck.program.memo import Memo
from gradcheck.program.language import Program, parse

if TYPE_CHECKING:
    from gradcheck.grading.compare import Agreement
    from gradcheck.grading.fuzzing import Answered

#: computes oracles' results live, given their names (what the key does not hold)
Live = Callable[[list[str]], "dict[str, OracleResult | Skipped]"]

#: 2: finite differences and the hessian checks' second derivatives are in the key too.
#: 3: torch's behaviour records say which gradients a backward that raised changed first.
#: 4: an oracle that cannot answer for a check's program is stored as such (`Unfit`).
FORMAT = 4
#: Above this many bytes of JSON the key is written gzip-compressed whatever its name.
LARGE = 1 << 20
#: torch's chain-rule walk (for feedback that names the faulty operation) is stored at the
#: leading points of each gradient check, as many as hold at most this many nodes in all (every
#: point of a program of up to a hundred nodes), and at least at the first point. A check that
#: first fails at a point without a stored walk gets the plain comparison as its feedback: a
#: keyed grading never imports torch.
WALK_BUDGET = 4000
_GZIP_MAGIC = b"\x1f\x8b"


class KeyFileError(GraderError):
    """An answer key that cannot be used at all (unreadable, or built by another version)."""


class StaleKeyWarning(UserWarning):
    """An exercise the answer key does not hold as it is now; it is graded without the key."""


class UnstoredProgramsWarning(UserWarning):
    """A `random_programs` check whose programs a key cannot hold (the reference engine fails
    one): a grading with the key draws them all live."""


@dataclass
class Key:
    """A loaded answer key: per exercise id, its file's digest and each check's stored answers."""

    seed: int
    version: str
    exercises: dict[str, dict[str, Any]]
    path: str = ""
    _refused: dict[str, str] = field(default_factory=dict, repr=False)
    #: what `oracle_results` and `random_programs` decoded; and, by the id of each oracles'
    #: results in it, those results, the arguments of the agreement last worked out on them and
    #: that agreement (None until `agreement` is asked). Derived from the stored answers alone,
    #: which never change, so kept for every grading with this key, and shared by `anew`.
    _decoded: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False)
    _own: dict[int, tuple[Any, tuple[Any, ...] | None, Agreement | None]] = field(
        default_factory=dict, repr=False)
    #: torch's walks (`walk`), by the id of their stored record, with the record
    _walks: dict[int, tuple[Any, Walk]] = field(default_factory=dict, repr=False)

    def anew(self) -> Key:
        """The same key for another grading (`gradcheck grade --watch` keeps it loaded): its
        refusals are found again, as an exercise file may have changed, or changed back."""
        return replace(self, _refused={})

    def refusal(self, exercise: Exercise) -> str:
        """Why the key is not used for `exercise`, or '' when it holds this exact file."""
        if exercise.id in self._refused:
            return self._refused[exercise.id]
        why = _staleness(self.exercises.get(exercise.id), exercise)
        return self._refuse(exercise, why) if why else ""

    def points(self, exercise: Exercise, check: str) -> list[dict[str, Any]] | None:
        """The points the key holds answers at for a gradient or hessian check, or None if
        refused."""
        if self.refusal(exercise):
            return None
        stored = self.exercises[exercise.id]["checks"].get(check)
        if stored is None or "points" not in stored:
            self._refuse(exercise, f"has a {check} check the answer key does not hold")
            return None
        return stored["points"]

    def oracle_results(self, exercise: Exercise, check: str, points: list[dict[str, Any]],
                       wanted: Sequence[str], live: Live) -> dict[str, OracleResult | Skipped]:
        """`wanted` oracles' results for a check at `points`: from the key, or all computed by
        `live(names)` if the key is refused for this exercise."""
        stored = self._check_at(exercise, check, points)
        if stored is not None and any(name not in stored for name in wanted):
            self._refuse(exercise, "asks for an oracle the answer key does not hold")
            stored = None
        if stored is not None:
            return self._results(exercise, check, stored, wanted)
        found = live(list(wanted))
        for name, result in found.items():
            if isinstance(result, Skipped):
                found[name] = Skipped(f"skipped: {self.refusal(exercise)}; it cannot be "
                                      f"graded live: {result.reason.removeprefix('skipped: ')}")
        return found

    def walk(self, exercise: Exercise, check: str, points: list[dict[str, Any]], index: int
             ) -> Walk | None:
        """torch's stored walk at `points[index]` of a gradient check, or None (then there is
        none: torch could not walk it, or the key does not hold it)."""
        stored = self._check_at(exercise, check, points)
        walks = stored.get("walks", []) if stored is not None else []
        if index >= len(walks) or walks[index] is None:
            return None
        record = walks[index]
        # rebuilt once per record and program (a Walk is not changed by those who read it):
        # a deep chain's walk is 12,000 nodes, read again at every grading of a watch
        _, walk = self._walks.get(id(record), (None, None))
        if walk is None or walk.program is not exercise.program or walk.point != points[index]:
            walk = Walk.stored(exercise.program, points[index], record)
            self._walks[id(record)] = (record, walk)  # the record kept: its id stays its own
        return walk

    def random_programs(self, exercise: Exercise) -> list[Answered] | None:
        """The cases the key holds for the exercise's `random_programs` check, with the oracles'
        answers on each, or None: refused, not stored, or drawn by another hypothesis."""
        if self.refusal(exercise):
            return None
        stored = self.exercises[exercise.id]["checks"].get("random_programs")
        if stored is None or stored["hypothesis"] != _hypothesis_version():
            return None
        return self._cases(exercise, stored)

    def agreement(self, program: Program, results: Mapping[str, OracleResult | Skipped],
                  *args: Any) -> Agreement:
        """`compare.agree(program, results, *args)`, worked out once for results this key
        gave (`oracle_results`, or a case of `random_programs`) and the same arguments: those
        results are the same at every grading, and so is the oracles' agreement on them.
        Other results (an exercise graded live) are judged afresh."""
        own = self._own.get(id(results))
        if own is None or own[0] is not results:
            return compare.agree(program, results, *args)
        asked = (program, *args)
        if own[1] != asked:
            agreement = compare.agree(program, results, *args)
            agreement.settle()  # in a batch's job slot: once for every grading it forks
            self._own[id(results)] = (results, asked, agreement)
        return self._own[id(results)][2]

    def prepare(self, bank: Bank, chosen: Sequence[str] | None) -> None:
        """Decode the answers the key holds for `bank`, and work out the oracles' agreement
        on them, as the gradings of a run with `--oracles chosen` will ask for them: a batch's
        job slot does this once, and every grading it forks inherits them. Nothing is refused
        here (each grading finds its own refusals, and warns of them)."""
        for _ in self._agreements(bank, chosen):
            pass
        for exercise in bank.exercises:
            entry = self.exercises.get(exercise.id)
            if _staleness(entry, exercise):
                continue
            programs = entry["checks"].get("random_programs")
            if programs is not None and programs["hypothesis"] == _hypothesis_version():
                tolerance = search_options(exercise, self.seed)["tolerance"]
                for case in self._cases(exercise, programs):
                    drawn = case.session.drawn
                    self.agreement(drawn.program, case.expected, list(drawn.inputs),
                                   [drawn.point], tolerance, None, None)

    def ungraded(self, bank: Bank) -> list[Problem]:
        """A problem for each check of `bank` that grades nothing, whatever the engine answers:
        the oracles the key holds agree on no gradient at any of its points (a tolerance
        tighter than rounding, a kink or a pole at every point). Grading skips it and scores it
        0; `key build` and `bundle` say so before a student meets it."""
        return [exercise.problem(("checks", name), f"this check grades nothing: {why}")
                for exercise, name, agreement in self._agreements(bank, None)
                if (why := compare.nothing_graded(agreement))]

    def _agreements(self, bank: Bank, chosen: Sequence[str] | None
                    ) -> Iterator[tuple[Exercise, str, Agreement]]:
        """The oracles' agreement on each gradient check of `bank` the key holds, as the
        gradings of a run with `--oracles chosen` will judge it (remembered: `agreement`)."""
        chosen = tuple(chosen) if chosen else None  # as the Grader takes them
        for exercise in bank.exercises:
            entry = self.exercises.get(exercise.id)
            if _staleness(entry, exercise):
                continue
            for name, stored in entry["checks"].items():
                wanted = wanted_oracles(exercise, name, chosen) if name in GRADIENT_CHECKS else []
                if wanted and all(oracle in stored for oracle in wanted):
                    yield exercise, name, self.agreement(
                        exercise.program, self._results(exercise, name, stored, wanted),
                        exercise.grad_names, stored["points"], exercise.tolerance.pair(),
                        exercise.convention, None)

    def _results(self, exercise: Exercise, check: str, stored: dict[str, Any],
                 wanted: Sequence[str]) -> dict[str, OracleResult | Skipped]:
        return self._decode_once((exercise.id, check, *wanted), lambda: {
            name: _decode(name, stored[name]) for name in wanted}, lambda results: [results])

    def _cases(self, exercise: Exercise, stored: dict[str, Any]) -> list[Answered]:
        return self._decode_once((exercise.id, "random_programs"), lambda: [
            _answered(case) for case in stored["cases"]],
            lambda cases: [case.expected for case in cases])

    def _decode_once(self, key: tuple[Any, ...], decode: Callable[[], Any],
                     results_in: Callable[[Any], list[Any]]) -> Any:
        """What `decode` gives, the first time for `key`; the oracles' results `results_in`
        finds in it become the key's own (`agreement`)."""
        if key not in self._decoded:
            self._decoded[key] = decode()
            for results in results_in(self._decoded[key]):
                self._own[id(results)] = (results, None, None)
        return self._decoded[key]

    def torch_record(self, exercise: Exercise, request: dict[str, Any]) -> dict[str, Any] | None:
        """torch's stored reply to a graph or behaviour `request`, or None if refused."""
        if self.refusal(exercise):
            return None
        stored = self.exercises[exercise.id]["checks"].get(request["kind"])
        if stored is None or not _same_request(stored["request"], request):
            self._refuse(exercise, f"asks torch a {request['kind']} request the answer key does "
                                   "not hold")
            return None
        return stored["torch"]

    def stale(self, bank: Bank) -> list[str]:
        """A sentence for each exercise of `bank` the key will refuse (without warning)."""
        return [f"exercise {exercise.id} {why}" for exercise in bank.exercises
                if (why := _staleness(self.exercises.get(exercise.id), exercise))]

    def _check_at(self, exercise: Exercise, check: str, points: list[dict[str, Any]]
                  ) -> dict[str, Any] | None:
        if self.refusal(exercise):
            return None
        stored = self.exercises[exercise.id]["checks"].get(check)
        # a keyed grading asks at the very points the key gave it (`points`)
        if stored is not None and (stored.get("points") is points
                                   or _canonical(stored.get("points")) == _canonical(points)):
            return stored
        self._refuse(exercise, "is graded at points the answer key does not hold")
        return None

    def _refuse(self, exercise: Exercise, why: str) -> str:
        if exercise.id not in self._refused:
            self._refused[exercise.id] = (f"exercise {exercise.id} {why}, so the answer key is "
                                          "not used for it (rebuild the key with `gradcheck key "
                                          "build`)")
            warnings.warn(self._refused[exercise.id], StaleKeyWarning, stacklevel=2)
        return self._refused[exercise.id]


def _staleness(entry: dict[str, Any] | None, exercise: Exercise) -> str:
    if entry is None:
        return "is not in the answer key"
    if entry["digest"] != exercise.digest:
        return "changed since the answer key was built (its sha256 differs)"
    return ""


def build(bank: Bank, seed: int, out: str | Path) -> Key:
    """Run every oracle on every exercise of `bank` at the points `seed` fixes; write the key."""
    try:
        from gradcheck.engine import torch_engine
    except ImportError as exc:
        raise KeyFileError(f"building an answer key needs torch: {exc}") from exc
    exercises = {}
    #: the checks jax answers, compiled in modules as the grader does (`jax_modules`)
    jax_checks: list[tuple[int, tuple[dict[str, Any], oracles.Job]]] = []
    for number, exercise in enumerate(bank.exercises):
        checks: dict[str, Any] = {}
        for name in score.check_points(exercise):
            if name == "random_programs":
                stored = _random_programs(exercise, seed)
                if stored is not None:
                    checks[name] = stored
                continue
            if name in ("graph", "behaviour"):
                request = torch_request(exercise, name, sample_seed(seed, exercise.id))
                checks[name] = {"request": request,
                                "torch": handler.handle(torch_engine, request, touched=True)}
                continue
            points = exercise.check_points(name, sample_seed(seed, exercise.id))
            listed = wanted_oracles(exercise, name, None)
            if name == "hessian":
                checks[name] = {"points": points}
                _store(checks[name], second_order.compute(
                    exercise.program, points, exercise.grad_names,
                    exercise.checks.hessian.vector, listed))
                continue
            checks[name] = {"points": points, "walks": _walks(exercise, points)}
            if "jax" in listed:
                jax_checks.append((number, (checks[name], oracles.job(
                    exercise.program, points, exercise.grad_names))))
            _store(checks[name], oracles.compute(exercise.program, points, exercise.grad_names,
                                                 [o for o in listed if o != "jax"]))
        exercises[exercise.id] = {"digest": exercise.digest, "checks": checks}
    jax_grad = oracles.backend("jax") if jax_checks else None
    if isinstance(jax_grad, Skipped):
        raise KeyFileError(f"building an answer key needs torch and jax: {jax_grad}")
    for module in jax_modules(jax_checks):
        for (stored, _), result in zip(module, jax_grad.run_many([job for _, job in module])):
            stored["jax"] = _encode(result)
    key = Key(seed=seed, version=__version__, exercises=exercises, path=str(out))
    data = {"format": FORMAT, "gradcheck": __version__, "seed": seed, "exercises": exercises}
    text = json.dumps(data, separators=(",", ":")).encode()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Private (0600): the key holds the answers, and a submission run as another user must not
    # read it (docs/security.md).
    with os.fdopen(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(gzip.compress(text, mtime=0) if out.name.endswith(".gz") or len(text) > LARGE
                else text)
    return key


def _store(check: dict[str, Any], results: dict[str, OracleResult | Skipped]) -> None:
    """Each oracle's results in the key's entry for a check, or why it cannot answer for the
    check's program (`Unfit`), as live grading meets it; an oracle missing here is fatal."""
    for oracle, result in results.items():
        if isinstance(result, Unfit):
            check[oracle] = {"unfit": result.reason}
        elif isinstance(result, Skipped):
            raise KeyFileError(f"building an answer key needs torch and jax: {result}")
        else:
            check[oracle] = _encode(result)


def _random_programs(exercise: Exercise, seed: int) -> dict[str, Any] | None:
    """The cases a keyed grading's search draws for an engine that passes every one, with the
    oracles' answers: recorded from that very search with the reference engine answering,
    which passes them all; None, with a warning, where it does not."""
    from gradcheck.grading import fuzzing  # hypothesis, only for a bank that has such checks

    recorded: list[Answered] = []
    found = fuzzing.search(fuzzing.reference_reply, oracles=fuzzing.KEYED, record=recorded,
                           **search_options(exercise, seed)).found
    if found is not None:
        warnings.warn(f"exercise {exercise.id}: the reference engine fails one of its random "
                      "programs, so the answer key holds none of them and grading draws them "
                      f"all live. {found.describe()}", UnstoredProgramsWarning, stacklevel=3)
        return None
    return {"hypothesis": _hypothesis_version(),
            "cases": [_encoded_case(answered) for answered in recorded]}


def drawn_with(entries: dict[str, Any]) -> set[str]:
    """The versions of hypothesis that drew the random programs of a key's `entries` (its
    exercises): a grading replays them only under the same version, so an autograder's
    install pins it."""
    return {entry["checks"]["random_programs"]["hypothesis"] for entry in entries.values()
            if entry["checks"].get("random_programs") is not None}


@functools.cache
def _hypothesis_version() -> str:
    """The version of hypothesis, which draws the random programs: another may draw others.
    Read without importing it, which a keyed grading that passes every program never does;
    once a process (a metadata read is a search of sys.path, 1 ms)."""
    return importlib.metadata.version("hypothesis")


def _encoded_case(answered: Answered) -> dict[str, Any]:
    session = answered.session
    drawn = session.drawn
    encoded = {"source": drawn.source, "inputs": drawn.inputs, "point": drawn.point,
               "steps": list(session.steps), "requires_grad": list(session.requires_grad),
               "oracles": {name: _encode(result) for name, result in answered.expected.items()}}
    if answered.behaviour is not None:
        encoded["behaviour"] = answered.behaviour
    return encoded


def _answered(stored: dict[str, Any]) -> Answered:
    from gradcheck.grading.fuzzing import Answered

    drawn = Drawn(stored["source"], stored["inputs"], stored["point"],
                  parse(stored["source"], stored["inputs"]))
    return Answered(Session(drawn, tuple(stored["steps"]), tuple(stored["requires_grad"])),
                    {name: _decode(name, result) for name, result in stored["oracles"].items()},
                    stored.get("behaviour"))


def _walks(exercise: Exercise, points: list[dict[str, Any]]) -> list[list[Any] | None]:
    """torch's walk at the leading points, within WALK_BUDGET and at least at the first (None
    where torch cannot walk)."""
    nodes = sum(node.op != "const" for node in exercise.program.nodes)
    found: list[list[Any] | None] = []
    for point in points[:max(1, WALK_BUDGET // nodes)]:
        try:
            found.append(walk(exercise.program, point, exercise.grad_names).record())
        except WalkError:
            found.append(None)
    return found


def load(path: str | Path) -> Key:
    """Read a key written by `build`; refuse one that is unreadable or from another version."""
    try:
        raw = Path(path).read_bytes()
        data = json.loads(gzip.decompress(raw) if raw.startswith(_GZIP_MAGIC) else raw)
    except (OSError, ValueError, EOFError) as exc:  # json and gzip errors are ValueErrors
        raise KeyFileError(f"cannot read the answer key {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(
            data.get("seed"), int) or not isinstance(data.get("exercises"), dict) or not all(
            isinstance(entry, dict) and isinstance(entry.get("digest"), str)
            and isinstance(entry.get("checks"), dict) for entry in data["exercises"].values()):
        if isinstance(data, dict) and isinstance(data.get("format"), int):
            raise KeyFileError(f"the answer key {path} is in format {data['format']}, and this "
                               f"gradcheck reads format {FORMAT}; rebuild it with `gradcheck "
                               "key build`")
        raise KeyFileError(f"{path} is not an answer key written by `gradcheck key build`")
    if data.get("gradcheck") != __version__:
        raise KeyFileError(f"the answer key {path} was built by gradcheck "
                           f"{data.get('gradcheck')}, and this is gradcheck {__version__}; "
                           "rebuild it with `gradcheck key build`")
    return Key(seed=data["seed"], version=data["gradcheck"], exercises=data["exercises"],
               path=str(path))


def _encode(result: OracleResult) -> dict[str, Any]:
    """An oracle's result as JSON: its values and gradients, and finite differences' central
    estimates and crossings (which judge its agreement with the others)."""
    encoded = {"value": result.value.tolist(),
               "grads": {name: grad.tolist() for name, grad in result.grads.items()}}
    for extra in ("central", "crossing"):
        if getattr(result, extra) is not None:
            encoded[extra] = {name: array.tolist()
                              for name, array in getattr(result, extra).items()}
    return encoded


def _decode(oracle: str, stored: dict[str, Any]) -> OracleResult | Unfit:
    if "unfit" in stored:
        return Unfit(stored["unfit"])

    def arrays(field: str, dtype: type) -> dict[str, np.ndarray] | None:
        if field not in stored:
            return None
        return {name: np.asarray(values, dtype=dtype) for name, values in stored[field].items()}

    return OracleResult(oracle, np.asarray(stored["value"], dtype=np.float64),
                        arrays("grads", np.float64), central=arrays("central", np.float64),
                        crossing=arrays("crossing", np.int64))


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True)


def _same_request(stored: Any, request: Mapping[str, Any]) -> bool:
    """Whether the key's `stored` request is `request`. A sealed request found the same is not
    compared again: every grading a batch's job slot forks asks the same (`grader.warm`)."""
    if _MATCHED.get(request, stored):
        return True
    same = _canonical(stored) == _canonical(request)
    if same and type(request) is Sealed:
        _MATCHED.keep(True, request, stored)
    return same


#: the sealed requests `_same_request` found the same as a stored one
_MATCHED: Memo[bool] = Memo(1024)


# --- the command --------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """`gradcheck key build`."""
    key = subparsers.add_parser("key", help="answer keys: grade without torch and jax",
                                description="Answer keys hold the oracles' answers for a bank "
                                            "(torch's, jax's, finite differences'), so that "
                                            "grading needs none of them.")
    actions = key.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser(
        "build", help="run the oracles once on a bank and write its answer key",
        description="Run the oracles on every exercise at the points SEED fixes, and write the "
                    "key. Grade with `gradcheck grade --key FILE`; an exercise changed since is "
                    "refused by the key and graded live.")
    selection.add_arguments(p)
    p.add_argument("--seed", type=int,
                   help="the seed of the sampled points (default: the course's, in "
                        f"{FILE_NAME}, else a new one, said on stderr); grading with the key "
                        "uses it")
    p.add_argument("--out", metavar="FILE", type=Path, required=True,
                   help="where to write the key (gzip-compressed if FILE ends in .gz)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Build the key; 1 if some exercise files are broken (the others are in the key) or some
    check grades nothing (`oracle_problems`, `Key.ungraded`: the key holds it as live grading
    meets it)."""
    try:
        course = find_course()
        chosen = selection.from_arguments(args, lambda: bank_default(course))
        bank = chosen.load()
    except (CourseFileError, selection.SelectionError) as error:
        print(f"gradcheck key build: {error}", file=sys.stderr)
        return 2
    seed, why = key_seed(args.seed, course)
    if not bank.exercises:
        print("gradcheck key build: no exercise to build a key for in "
              + ", ".join(map(str, chosen.paths)), file=sys.stderr)
        return 2
    print(describe(chosen.paths, len(bank.exercises), course), file=sys.stderr)
    print(f"seed {seed}: {why}", file=sys.stderr)
    try:
        built = build(bank, seed, args.out)
    except KeyFileError as error:
        print(f"gradcheck key build: {error}", file=sys.stderr)
        return 2
    for _, error in bank.broken:
        print(f"left out of the key, broken: {_first(error)}", file=sys.stderr)
    problems = [problem for exercise in bank.exercises for problem in oracle_problems(exercise)]
    problems += built.ungraded(bank)
    for problem in problems:
        print(problem, file=sys.stderr)
    count = len(bank.exercises)
    print(f"wrote {args.out}: {count} exercise{'s' * (count != 1)}, seed {seed}, "
          f"gradcheck {__version__}")
    return 1 if bank.broken or problems else 0


def _first(error: ExerciseError) -> str:
    return str(error).splitlines()[0] if str(error) else repr(error)
