"""`gradcheck grade-batch`: every submission gets a gradebook row and a results file, whatever it
does (crash, hang, fail to import), and the batch carries on."""

import csv
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from another_user import (PYTHON, UID, as_another_user, key_reader, open_folder,  # noqa: F401
                          private_copy, record_uids, uids_recorded)
from engine_packages import package
from grading_samples import PRODUCT, read_results, write_bank

from gradcheck.bank.bundled import reference_path
from gradcheck.bank.loader import load_bank
from gradcheck.cli import main
from gradcheck.course.batch import submissions
from gradcheck.grading import answer_key

ENGINES = Path(__file__).parent / "engines"


@pytest.fixture
def folder(tmp_path):
    """Six submissions: the reference (a package), a correct module, a buggy package, one that
    segfaults in backward, one whose import never ends, a folder that is not a package."""
    subs = tmp_path / "submissions"
    shutil.copytree(reference_path(), subs / "ref", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("tiny", "hang_import"):
        shutil.copy(ENGINES / f"{name}.py", subs / f"{name}.py")
    for engine in ("wrong_mul", "segfault"):
        package(subs / engine, engine)
    (subs / "notes").mkdir()
    (subs / "notes" / "draft.py").write_text("print('no __init__.py, no engine.py here')\n")
    (subs / "__pycache__").mkdir()
    (subs / "README.txt").write_text("not a submission\n")
    return subs


def test_each_module_and_folder_is_one_submission(folder):
    assert [p.name for p in submissions(folder)] == [
        "hang_import.py", "notes", "ref", "segfault", "tiny.py", "wrong_mul"]


@pytest.mark.slow
def test_a_batch_with_crashing_and_hanging_engines_completes_with_every_row(folder, tmp_path):
    bank = write_bank(tmp_path / "bank")  # square (3 points), a hidden cube (2), product (2)
    (bank / "product.exercise.yaml").write_text(PRODUCT)
    out = tmp_path / "out"
    scratch = tmp_path / "tmp"  # the temporary folder of this batch alone
    scratch.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "gradcheck", "grade-batch", str(folder), "-j", "2", "--out",
         str(out), "--exercises", str(bank), "--seed", "5", "--submission-timeout", "40"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "TMPDIR": str(scratch)})
    assert run.returncode == 1, run.stderr  # some submissions could not be graded
    # the workers' folders of the grading killed at its timeout too (its job slot's server)
    assert list(scratch.iterdir()) == []
    with open(out / "gradebook.csv", newline="") as f:
        rows = {row["submission"]: row for row in csv.DictReader(f)}
    assert list(rows) == [p.name for p in submissions(folder)]
    assert {name: (row["status"], float(row["score"]), float(row["max"]))
            for name, row in rows.items() if name not in ("wrong_mul", "segfault")} == {
        "hang_import.py": ("timeout", 0, 7), "notes": ("error", 0, 7), "ref": ("graded", 7, 7),
        "tiny.py": ("graded", 7, 7)}
    for buggy in ("wrong_mul", "segfault"):
        assert rows[buggy]["status"] == "graded" and float(rows[buggy]["score"]) < 7
    assert float(rows["hang_import.py"]["time"]) >= 40
    for name in rows:  # a Gradescope file for every submission, even those never graded
        assert "score" in read_results(out / name / "results.json")
    assert "did not finish" in read_results(out / "hang_import.py" / "results.json")["output"]
    assert "a folder with neither __init__.py, engine.py nor engine/ (found: " in read_results(
        out / "notes" / "results.json")["output"]
    # torch and jax ran once, into a key the graders used; progress: a line per submission
    assert (out / "key.json").is_file() and "answer key" in run.stderr
    assert stat.S_IMODE((out / "key.json").stat().st_mode) == 0o600  # root's alone
    # a line per submission: notes refused at once, the five others as each is graded
    assert "notes: not graded: a folder with neither __init__.py, engine.py nor engine/" in (
        run.stderr)
    assert sorted(line.split("]")[0] for line in run.stderr.splitlines()
                  if line.startswith("[")) == [f"[{i}/6" for i in range(2, 7)]


def test_a_submission_of_a_batch_imports_none_of_the_others(tmp_path):
    """Each submission is graded alone in a folder of its own, as on a cluster's worker: the
    batch's folder, which holds the others, is not on its import path, so a copycat that
    imports a classmate's engine gets no points for it, here as on a cluster."""
    subs = tmp_path / "submissions"
    subs.mkdir()
    shutil.copy(ENGINES / "tiny.py", subs / "tiny.py")
    (subs / "copycat.py").write_text("from tiny import Tensor, no_grad, tensor  # noqa: F401\n")
    bank = write_bank(tmp_path / "bank")
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "gradcheck", "grade-batch", str(subs), "-j", "2",
                    "--out", str(out), "--exercises", str(bank), "--seed", "5"],
                   capture_output=True, text=True, timeout=600, check=True)
    assert gradebook(out) == {"copycat.py": 0, "tiny.py": 5}
    assert "No module named 'tiny'" in read_results(out / "copycat.py" / "results.json")["output"]


def test_a_folder_per_student_is_graded_by_its_engine_file_with_its_other_modules(tmp_path):
    """Gradescope and GitHub Classroom download a folder per student, not a package: the
    course's submission file in it is graded (engine.py, or what gradcheck.toml names), or a
    package of its name, and it may import the folder's other modules. A folder with neither is
    refused, named as the batch's folder holds it, with what it holds."""
    (tmp_path / "gradcheck.toml").write_text('exercises = "bank"\nsubmission = "autograd.py"\n')
    write_bank(tmp_path / "bank")
    subs = tmp_path / "submissions"
    (subs / "dave").mkdir(parents=True)
    shutil.copy(ENGINES / "tiny.py", subs / "dave" / "ops.py")
    (subs / "dave" / "autograd.py").write_text("from ops import Tensor, no_grad, tensor\n")
    (subs / "erin").mkdir()
    shutil.copy(ENGINES / "tiny.py", subs / "erin" / "engine.py")  # not the course's name
    (subs / "fred" / "autograd").mkdir(parents=True)  # a package of the course's name
    shutil.copy(ENGINES / "tiny.py", subs / "fred" / "autograd" / "__init__.py")
    run = subprocess.run([sys.executable, "-m", "gradcheck", "grade-batch", str(subs), "--out",
                          str(tmp_path / "out"), "-j", "1", "--seed", "5"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stderr
    with open(tmp_path / "out" / "gradebook.csv", newline="") as f:
        rows = {row["submission"]: (row["status"], float(row["score"])) for row in csv.DictReader(f)}
    assert rows == {"dave": ("graded", 5.0), "erin": ("error", 0.0), "fred": ("graded", 5.0)}
    said = ("not graded: a folder with neither __init__.py, autograd.py nor autograd/ (found: "
            "engine.py); put the engine in erin/autograd.py, or make the folder a package")
    assert f"erin: {said}" in run.stderr
    assert said in read_results(tmp_path / "out" / "erin" / "results.json")["output"]


def test_a_submission_named_as_a_formula_or_not_in_utf8_gets_its_row(tmp_path):
    """Submissions are files students name. The gradebook keeps every name as text: a spreadsheet
    would run one that begins with = (here, a link that scores 100), or one after a semicolon
    where its locale splits a CSV's fields there, and a name that is not UTF-8 stopped the
    batch. The progress line shows a name's control characters escaped, and no two names alike
    (a newline and the four characters of its escape showed the same before)."""
    subs = tmp_path / "submissions"
    subs.mkdir()
    shown = {'=HYPERLINK("evil.example","0")+100.py': '\'=HYPERLINK("evil.example","0")+100.py',
             "bob\udcff.py": "bob\\xff.py",
             "ok\033[2J\r[9 of 9] forged.py": "ok\\x1b[2J\\x0d[9 of 9] forged.py",
             "x;=HYPERLINK(1);.py": "x\\x3b=HYPERLINK(1)\\x3b.py",
             "victim\nb.py": "victim\\x0ab.py", "victim\\x0ab.py": "victim\\\\x0ab.py"}
    names = sorted(shown)
    for name in names:
        shutil.copy(ENGINES / "tiny.py", subs / name)
    bank = write_bank(tmp_path / "bank")
    run = subprocess.run(
        [sys.executable, "-m", "gradcheck", "grade-batch", str(subs), "-j", "1", "--out",
         str(tmp_path / "out"), "--exercises", str(bank), "--seed", "5"],
        capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    with open(tmp_path / "out" / "gradebook.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row["submission"] for row in rows] == [shown[name] for name in names]
    assert all(row["status"] == "graded" and float(row["score"]) == 5 for row in rows)
    assert "\033" not in run.stderr and "\r" not in run.stderr


def test_bad_arguments_are_refused_before_any_grading(folder, tmp_path, capsys):
    assert main(["grade-batch", str(folder), "--out", str(folder / "out")]) == 2
    assert "is inside" in capsys.readouterr().err
    assert main(["grade-batch", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 2
    assert "no such folder of submissions" in capsys.readouterr().err
    assert main(["grade-batch", str(folder), "--out", str(tmp_path / "o"), "--key",
                 str(tmp_path / "nokey.json")]) == 2
    assert "--key" in capsys.readouterr().err and not (tmp_path / "o").exists()


# --- workers as users of their own --------------------------------------------------------------


@pytest.fixture(scope="module")
def bank_and_key(tmp_path_factory):
    """The small bank (square, a hidden cube) and its answer key."""
    folder = tmp_path_factory.mktemp("batch-key")
    bank = write_bank(folder / "bank")
    answer_key.build(load_bank(bank), 5, folder / "key.json")
    return bank, folder / "key.json"


def gradebook(out: Path) -> dict[str, float]:
    with open(out / "gradebook.csv", newline="") as f:
        return {row["submission"]: float(row["score"]) for row in csv.DictReader(f)
                if row["status"] == "graded"}


def grade_batch(folder: Path, out: Path, *options) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gradcheck", "grade-batch", str(folder), "--out", str(out),
         "--worker-user", str(UID), "--worker-python", PYTHON, *map(str, options)],
        capture_output=True, text=True, timeout=300)


@as_another_user
@pytest.mark.slow
def test_each_job_slot_grades_as_its_own_user_and_a_private_key_stays_private(bank_and_key,
                                                                              open_folder):
    """-j 2: the workers run as UID and UID + 1. The key-reading engine, which gains the
    gradient checks from a key it may read (tests/test_faults.py), earns here what the same
    engine earns with no key at all; an honest engine still earns every point."""
    bank, key = bank_and_key
    key = private_copy(key, open_folder)
    shutil.copytree(bank, key.parent / "bank")  # hidden exercises beside the key, root's alone
    folder = open_folder / "submissions"
    folder.mkdir()
    key_reader(folder / "reader.py", key)
    key_reader(folder / "blind.py", open_folder / "no-such-key.json")
    (folder / "honest.py").write_text(f"import sys\nsys.path.append({str(ENGINES)!r})\n"
                                      "from tiny import tensor, no_grad\n")
    record_uids(folder, open_folder / "uids")
    folder.chmod(0o700)  # root's alone: each worker reads a copy of its own submission
    run = grade_batch(folder, open_folder / "out", "-j", 2, "--key", key, "--exercises",
                      key.parent / "bank", "--submission-timeout", 120)
    assert run.returncode == 0, run.stderr
    scores = gradebook(open_folder / "out")
    assert scores["reader.py"] == scores["blind.py"] < scores["honest.py"] == 5
    seen = uids_recorded(open_folder / "uids")
    assert sorted(seen) == ["blind.py", "honest.py", "reader.py"] and all(seen.values())
    assert set().union(*seen.values()) == {UID, UID + 1}
    assert "warning" not in run.stderr


#: at import, for 2.5 s: every other submission's folder a job slot made in the grader's
#: temporary folder, and what of the victim's code it could read there or in the batch's folder
_SNOOP = """import glob, json, os, time
seen, read = set(), []
end = time.monotonic() + 2.5
while time.monotonic() < end:
    for place in glob.glob({temporary!r} + "/gradcheck-submission-*"):
        if os.path.realpath(__file__).startswith(os.path.realpath(place) + os.sep):
            continue  # its own
        seen.add(place)
        for path in (*glob.glob(place + "/in/*"), place + "/in/a_victim.py",
                     *glob.glob({submissions!r} + "/*")):
            try:
                with open(path) as f:
                    if "SECRET-OF-THE-VICTIM" in f.read():
                        read.append(path)
            except OSError:
                pass
    time.sleep(0.05)
with open({mark!r}, "a") as f:
    f.write(json.dumps([sorted(seen), sorted(set(read))]) + "\\n")
"""


@as_another_user
@pytest.mark.slow
def test_no_submission_reads_another_while_they_grade_side_by_side(bank_and_key, tmp_path,
                                                                  open_folder):
    """-j 2: each worker reads a copy of its own submission that only its uid may read, so the
    submissions' folder may be root's alone. The snoop, which looks for its neighbour while the
    neighbour's import sleeps, finds its folder and reads nothing of it."""
    bank, key = bank_and_key
    folder = tmp_path / "submissions"  # root's alone: no worker may read it
    folder.mkdir()
    mark = open_folder / "snoop.txt"
    mark.touch()
    mark.chmod(0o666)
    honest = f"import sys\nsys.path.append({str(ENGINES)!r})\nfrom tiny import tensor, no_grad\n"
    (folder / "a_victim.py").write_text("# SECRET-OF-THE-VICTIM\nimport time\ntime.sleep(3)\n"
                                        + honest)
    (folder / "b_snoop.py").write_text(_SNOOP.format(
        temporary=tempfile.gettempdir(), submissions=str(folder), mark=str(mark)) + honest)
    run = grade_batch(folder, open_folder / "out", "-j", 2, "--key", key, "--exercises", bank,
                      "--submission-timeout", 120)
    assert run.returncode == 0, run.stderr
    assert gradebook(open_folder / "out") == {"a_victim.py": 5, "b_snoop.py": 5}
    looks = [json.loads(line) for line in mark.read_text().splitlines()]
    assert looks and any(seen for seen, _ in looks), looks  # it ran beside the victim
    assert all(read == [] for _, read in looks), looks


#: at import, as the worker's user: a folder 1,500 deep in the temporary folder (deeper than
#: Python recurses), and a file to tell whether the uid's files outlive the grading
_DEEP = """import os
top = os.path.join({temporary!r}, "deep-of-the-worker")
os.makedirs(top)
os.chdir(top)
for _ in range(1500):
    os.mkdir("d")
    os.chdir("d")
os.chdir("/")
"""


@as_another_user
@pytest.mark.slow
def test_a_submission_the_batch_cannot_copy_or_keep_gets_its_row_and_the_rest_are_graded(
        bank_and_key, tmp_path, open_folder):
    """A hardened batch copies each submission for its worker: one nested deeper than the copy
    goes, one larger than it copies (a sparse file claims 200 MB), a FIFO, and a folder named
    as the gradebook each get a row that says why they were not graded, and the batch goes on.
    A worker that leaves a folder 1,500 deep in /tmp (a RecursionError stopped the clean-up
    before, and every later grading as that uid scored 0) is graded, and so is the next one
    as its uid, and nothing of the uid is left in /tmp."""
    bank, key = bank_and_key
    folder = tmp_path / "submissions"
    folder.mkdir()
    honest = f"import sys\nsys.path.append({str(ENGINES)!r})\nfrom tiny import tensor, no_grad\n"
    (folder / "a_deep_tmp.py").write_text(_DEEP.format(temporary=tempfile.gettempdir()) + honest)
    (folder / "b_honest.py").write_text(honest)
    nested = folder / "c_nested"
    nested.mkdir()
    (nested / "__init__.py").write_text(honest)
    os.makedirs(nested / os.path.join(*["d"] * 70))
    sparse = folder / "d_sparse"
    sparse.mkdir()
    (sparse / "__init__.py").write_text(honest)
    with open(sparse / "weights.bin", "wb") as f:
        f.truncate(200 << 20)
    os.mkfifo(folder / "e_fifo.py")
    (folder / "gradebook.csv").mkdir()
    (folder / "gradebook.csv" / "__init__.py").write_text(honest)
    run = grade_batch(folder, open_folder / "out", "-j", 1, "--key", key, "--exercises", bank,
                      "--submission-timeout", 120)
    assert run.returncode == 1, run.stderr  # not every submission was graded
    with open(open_folder / "out" / "gradebook.csv", newline="") as f:
        rows = {row["submission"]: row for row in csv.DictReader(f)}
    assert {name: float(row["score"]) for name, row in rows.items() if row["status"] == "graded"
            } == {"a_deep_tmp.py": 5, "b_honest.py": 5}
    assert {name: row["status"] for name, row in rows.items()} == {
        "a_deep_tmp.py": "graded", "b_honest.py": "graded", "c_nested": "error",
        "d_sparse": "error", "e_fifo.py": "error", "gradebook.csv": "error"}
    says = {name: read_results(open_folder / "out" / name / "results.json")["output"]
            for name in ("c_nested", "d_sparse", "e_fifo.py")}
    assert "it nests folders more than 64 deep" in says["c_nested"]
    assert "its files are larger than 100 MB in all" in says["d_sparse"]
    assert "e_fifo.py is not a file or a folder" in says["e_fifo.py"]
    assert "OUT/gradebook.csv is the batch's own; rename it" in run.stderr
    left = [name for name in os.listdir(tempfile.gettempdir())
            if os.lstat(os.path.join(tempfile.gettempdir(), name)).st_uid == UID]
    assert left == []


@as_another_user
def test_a_key_or_exercises_the_workers_could_read_are_named_once_with_the_fix(bank_and_key,
                                                                               open_folder):
    bank, key = bank_and_key
    key = Path(shutil.copy(key, open_folder / "key.json"))
    key.chmod(0o644)  # gradcheck writes keys 0600; this one was made readable since
    bank = Path(shutil.copytree(bank, open_folder / "bank"))
    submissions, out = open_folder / "submissions", open_folder / "out"
    submissions.mkdir()
    (submissions / "honest.py").write_text(f"import sys\nsys.path.append({str(ENGINES)!r})\n"
                                           "from tiny import tensor, no_grad\n")
    out.mkdir()  # as the submissions' folder, readable by all
    run = grade_batch(submissions, out, "-j", 2, "--key", key, "--exercises", bank)
    assert run.returncode == 0, run.stderr
    warnings = [line for line in run.stderr.splitlines() if line.startswith("warning")]
    assert warnings == [
        f"warning: the workers' users (uid {UID} to {UID + 1}) may read {key}, {bank}: a "
        f"submission could copy answers from them. Make them root's alone: chmod go-rwx {key} "
        f"{bank} (docs/security.md)",
        f"warning: the workers' users (uid {UID} to {UID + 1}) may read {submissions}, {out}: a "
        f"submission could read other submissions and their results there. Make them root's "
        f"alone: chmod go-rwx {submissions} {out} (docs/security.md)"]
    subprocess.run(["chmod", "go-rwx", str(key), str(bank), str(submissions), str(out)],
                   check=True)
    run = grade_batch(submissions, out, "--key", key, "--exercises", bank)
    assert run.returncode == 0 and "warning" not in run.stderr, run.stderr
    assert gradebook(out) == {"honest.py": 5}  # its worker read its own copy
    new = open_folder / "new-out"  # a results folder the batch makes is root's alone
    run = grade_batch(submissions, new, "--key", key, "--exercises", bank)
    assert run.returncode == 0 and "warning" not in run.stderr, run.stderr
    assert stat.S_IMODE(new.stat().st_mode) == 0o700


def test_on_a_cluster_the_warning_names_the_uids_its_worker_threads_claim(bank_and_key,
                                                                          open_folder):
    """A cluster's worker threads each claim a uid from --worker-user up, however many cores
    this machine has; the submissions and OUT stay here, where no worker reads them."""
    pytest.importorskip("distributed")
    bank, key = bank_and_key
    key = Path(shutil.copy(key, open_folder / "key.json"))
    key.chmod(0o644)
    submissions = open_folder / "submissions"
    submissions.mkdir()
    shutil.copy(ENGINES / "tiny.py", submissions / "tiny.py")
    with socket.socket() as closed:  # no scheduler: the batch warns, then stops
        closed.bind(("127.0.0.1", 0))
        nobody = f"tcp://127.0.0.1:{closed.getsockname()[1]}"
    run = grade_batch(submissions, open_folder / "out", "--key", key, "--exercises", bank,
                      "--scheduler", nobody)
    assert run.returncode == 2, run.stderr
    assert [line for line in run.stderr.splitlines() if line.startswith("warning")] == [
        f"warning: the workers' users (uid {UID} and up, one per Dask worker thread) may read "
        f"{key}: a submission could copy answers from them. Make them root's alone: chmod "
        f"go-rwx {key} (docs/security.md)"]


# --- resuming -----------------------------------------------------------------------------------


def test_a_batch_that_builds_its_key_takes_the_courses_seed(tmp_path):
    """Without --key, the key the batch builds has the seed `gradcheck key build` would take:
    the course's, so that a regrade samples the same points as the course's other keys."""
    (tmp_path / "gradcheck.toml").write_text('exercises = "bank"\nseed = 4242\n')
    write_bank(tmp_path / "bank")
    subs = tmp_path / "submissions"
    subs.mkdir()
    shutil.copy(ENGINES / "tiny.py", subs / "tiny.py")
    run = subprocess.run([sys.executable, "-m", "gradcheck", "grade-batch", str(subs), "--out",
                          str(tmp_path / "out"), "-j", "1"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "seed 4242 (the course's, in" in run.stderr
    assert answer_key.load(tmp_path / "out" / "key.json").seed == 4242
    assert json.loads((tmp_path / "out" / "tiny.py" / "grading.json").read_text())["seed"] == 4242


def test_a_key_that_misses_exercises_is_one_warning_and_they_are_graded_live(bank_and_key,
                                                                             tmp_path):
    """A key built for another version of the bank (or another bank) would warn once per
    exercise, a screenful in a large bank; it is one line, with the command that builds it
    again, and every exercise it misses is still graded, live."""
    bank, key = bank_and_key
    bank = Path(shutil.copytree(bank, tmp_path / "bank"))
    for name in ("square", "secret-cube"):
        path = bank / f"{name}.exercise.yaml"
        path.write_text(path.read_text() + "# fixed after the deadline\n")
    subs = tmp_path / "submissions"
    subs.mkdir()
    shutil.copy(ENGINES / "tiny.py", subs / "tiny.py")
    run = subprocess.run([sys.executable, "-m", "gradcheck", "grade-batch", str(subs), "--out",
                          str(tmp_path / "out"), "--exercises", str(bank), "--key", str(key),
                          "-j", "1"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    warned = [line for line in run.stderr.splitlines() if line.startswith("warning:")]
    assert warned == [
        "warning: exercise secret-cube changed since the answer key was built (its sha256 differs) "
        "(and 1 more): graded live, torch and jax imported by every grader; build the key again "
        f"for this bank: gradcheck key build --exercises {bank} --seed 5 --out {key}"]
    assert gradebook(tmp_path / "out") == {"tiny.py": 5.0}


@pytest.mark.slow
def test_resume_keeps_complete_results_of_the_same_bank_and_key_and_grades_the_rest(
        bank_and_key, tmp_path):
    bank, key = bank_and_key
    bank = Path(shutil.copytree(bank, tmp_path / "bank"))  # changed below
    folder = tmp_path / "submissions"
    folder.mkdir()
    shutil.copy(ENGINES / "tiny.py", folder / "tiny.py")
    package(folder / "wrong_mul", "wrong_mul")
    shutil.copytree(reference_path(), folder / "ref", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "out"

    def run(*options):
        done = subprocess.run([sys.executable, "-m", "gradcheck", "grade-batch", str(folder),
                               "--out", str(out), "--exercises", str(bank), "-j", "2",
                               *map(str, options)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return [line.split("]")[1].split(":")[0].strip() for line in done.stderr.splitlines()
                if line.startswith("[")]

    assert sorted(run("--key", key)) == ["ref", "tiny.py", "wrong_mul"]
    first = gradebook(out)
    stamp = json.loads((out / "ref" / "grading.json").read_text())
    assert stamp["key_sha256"] == hashlib.sha256(key.read_bytes()).hexdigest()
    assert stamp["row"]["score"] == 5 and stamp["seed"] == 5
    # an interrupted run: one submission's grading never finished, so it has no stamp
    (out / "tiny.py" / "grading.json").unlink()
    assert run("--key", key, "--resume") == ["tiny.py"]
    assert gradebook(out) == first
    # a results file cut short (a disk full, a copy stopped) is not one to upload
    results = out / "ref" / "results.json"
    results.write_bytes(results.read_bytes()[:1000])
    assert run("--key", key, "--resume") == ["ref"]
    assert gradebook(out) == first and read_results(results)["score"] == 5
    assert run("--key", key, "--resume") == []
    # without --key, with the key the batch builds (another one): all graded again; then a
    # resumed run reuses the key the batch built, while it fits the bank
    assert len(run("--resume")) == 3 and (out / "key.json").is_file()
    assert run("--resume") == []
    square = bank / "square.exercise.yaml"
    square.write_text(square.read_text().replace("title:", "title: Changed,", 1))
    assert len(run("--resume")) == 3  # a changed exercise: another bank, another key
    assert gradebook(out) == first


@pytest.mark.slow
def test_an_interrupted_batch_leaves_a_gradebook_of_the_rows_graded_so_far(bank_and_key,
                                                                           tmp_path):
    """Rows are appended as they come, so a batch stopped while one submission hangs leaves a
    gradebook of every submission graded before it, and a complete results file for each."""
    bank, key = bank_and_key
    folder = tmp_path / "submissions"
    folder.mkdir()
    shutil.copy(ENGINES / "tiny.py", folder / "a_tiny.py")
    package(folder / "b_hang", "hang_backward")
    shutil.copy(ENGINES / "tiny.py", folder / "tiny.py")
    out = tmp_path / "out"
    scratch = tmp_path / "tmp"  # the temporary folder of this batch alone
    scratch.mkdir()
    batch = subprocess.Popen(
        [sys.executable, "-m", "gradcheck", "grade-batch", str(folder), "--out", str(out),
         "--exercises", str(bank), "--key", str(key), "-j", "1", "--timeout", "600"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(scratch)})
    try:
        book = out / "gradebook.csv"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (
                book.is_file() and len(book.read_text().splitlines()) == 2):
            time.sleep(0.1)
        time.sleep(1.0)  # b_hang's backward hangs now
        batch.terminate()
        err = batch.communicate(timeout=60)[1]
    finally:
        batch.kill()
    assert batch.returncode == 128 + signal.SIGTERM, err
    assert gradebook(out) == {"a_tiny.py": 5.0}
    assert len(book.read_text().splitlines()) == 2  # the header and a_tiny's row
    assert list(scratch.iterdir()) == []  # the folders of b_hang's workers too
    assert "b_hang" not in {p.name for p in out.iterdir() if (p / "grading.json").is_file()}
