"""Reports written from a GradeReport: Gradescope results.json, JUnit XML, terminal, Markdown."""

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
import unicodedata
import xml.etree.ElementTree as ET

import jsonschema
import pytest
from grading_samples import SCHEMA

from gradcheck.grading.results import CheckResult, GradeReport
from gradcheck.reports import WITHHELD, atomic_write, printable, root_causes
from gradcheck.reports.gradescope import (
    UNFINISHED,
    ResultsFile,
    results_json,
    write_results_json,
)
from gradcheck.reports.junit import junit_xml, write_junit
from gradcheck.reports.html import render_html
from gradcheck.reports.markdown import render_markdown
from gradcheck.reports.terminal import render_terminal, total_line

SECRET = "hidden program: y = x ** 3 at x = 0.7"  # the details a hidden exercise must not show
LATER = "after the due date: grad.x is 2.0, torch says 3.0"
NOTE = "3 sampled points sat on a kink and were not graded"


def result(exercise_id, check, status, score, max_score, message="", **fields):
    return CheckResult(exercise_id=exercise_id, check=check, title=f"{exercise_id} {check}",
                       score=score, max_score=max_score, status=status, message=message,
                       topic=fields.pop("topic", "02-backward"), **fields)


def make_report(output="", import_error="", withheld=""):
    return GradeReport(submission="student/engine.py", seed=1234, duration=2.5, output=output,
                       import_error=import_error, withheld=withheld, results=[
        result("chain-rule", "gradients", "passed", 1.34, 1.34, line=5, duration=1.0),
        result("chain-rule", "sampled", "failed", 0.0, 1.33,
               "x.grad is 11.0 at x = 3.0; torch says 12.0 | use `x.grad += ...`\n"
               "bad byte \x00 and ```fence```", file="exercises/chain.exercise.yaml", line=7),
        result("chain-rule", "graph", "passed", 1.33, 1.33, duration=0.5),
        result("secret-cube", "gradients", "failed", 0.0, 2.0, SECRET, visibility="hidden",
               topic="03-graph", author_notes=[NOTE], duration=0.75),
        result("secret-cube", "behaviour", "error", 0.0, 1.0, SECRET, visibility="hidden",
               topic="03-graph"),
        result("late-one", "gradients", "failed", 0.0, 1.5, LATER, visibility="after_due_date"),
        result("skipper", "answers", "skipped", 0.0, 0.5, "jax is not installed"),
        result("broken", "load", "error", 0.0, 0.0,
               "exercises/broken.exercise.yaml:4: points: give a number, not 'four'"),
    ])


# --- results.json ------------------------------------------------------------------------------


def test_results_json_validates_against_gradescopes_schema():
    data = results_json(make_report(output="hello from the engine\n", import_error="Traceback"))
    jsonschema.Draft7Validator(SCHEMA).validate(data)
    assert data["score"] == 1.34 + 1.33
    assert data["visibility"] == "visible" and data["stdout_visibility"] == "hidden"
    # what the engine printed is shown as text, whatever Gradescope's default format
    assert data["output_format"] == data["test_output_format"] == "text"
    # the report has hidden checks: the time given is the visible checks' alone
    assert data["execution_time"] == 1.5


def test_results_json_has_one_test_per_check_numbered_by_exercise():
    report = make_report()
    tests = results_json(report)["tests"]
    assert [t["number"] for t in tests] == ["1.1", "1.2", "1.3", "2.1", "2.2", "3.1", "4.1", "5.1"]
    assert [(t["score"], t["max_score"]) for t in tests] == [
        (r.score, r.max_score) for r in report.results]
    assert [t.get("status") for t in tests] == [
        "passed", "failed", "passed", "failed", "failed", "failed", None, "failed"]
    assert tests[0]["tags"] == ["02-backward"] and tests[3]["tags"] == ["03-graph"]
    assert "chain-rule" in tests[0]["name"]


def test_hidden_tests_count_but_reveal_nothing():
    data = results_json(make_report(output="visible: built 3 nodes\n",
                                    withheld="forward x=0.7 y=x**3\n"))
    hidden = [t for t in data["tests"] if t["visibility"] == "hidden"]
    assert [t["max_score"] for t in hidden] == [2.0, 1.0]
    assert all(t["output"] == WITHHELD for t in hidden)
    text = json.dumps(data)
    assert SECRET not in text and NOTE not in text
    # What the worker of the hidden exercises printed may describe their programs: withheld;
    # what the worker of the visible ones printed is shown.
    assert "x**3" not in text and "visible: built 3 nodes" in data["output"]


def test_after_due_date_tests_show_their_score_but_not_their_message():
    """Their worker had seen the hidden exercises too: its words could carry them."""
    tests = results_json(make_report())["tests"]
    late = next(t for t in tests if t["visibility"] == "after_due_date")
    assert late["output"] == WITHHELD and late["max_score"] == 1.5


def test_output_says_import_failure_seed_and_what_the_engine_printed():
    report = make_report(output="debug: built 3 nodes\n",
                         import_error="Traceback ...\nSyntaxError: invalid syntax")
    report.results = [r for r in report.results if r.visibility == "visible"]
    output = results_json(report)["output"]
    assert "could not be imported" in output and "SyntaxError: invalid syntax" in output
    assert "--seed 1234" in output
    assert "debug: built 3 nodes" in output


def test_unfinished_results_say_so_and_final_ones_do_not(tmp_path):
    path = tmp_path / "results" / "results.json"
    report = make_report()
    write_results_json(report, path, incomplete=UNFINISHED)
    assert json.loads(path.read_text())["output"].startswith(UNFINISHED)
    write_results_json(report, path)
    final = json.loads(path.read_text())
    assert UNFINISHED not in final["output"]
    jsonschema.Draft7Validator(SCHEMA).validate(final)
    assert os.listdir(path.parent) == ["results.json"]  # no temporary file left behind


def test_the_results_file_is_written_at_most_once_a_second_and_never_more_behind(tmp_path):
    """A grading's updates come faster than once a second: the first is written at once, the
    others by a timer a second after it, as the report is then; the last write is final."""
    path = tmp_path / "results.json"
    report = make_report()
    written = lambda: json.loads(path.read_text())  # noqa: E731
    results = ResultsFile(path, every=1.0)
    everything, report.results = report.results, report.results[:1]
    results.update(report)
    assert len(written()["tests"]) == 1 and written()["output"].startswith(UNFINISHED)
    # the grader's alone while a worker runs: one of another user would read the expected
    # values of the checks graded so far there; readable once grading is done
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    report.results.append(everything[1])
    results.update(report)
    report.results.append(everything[2])
    results.update(report)
    assert len(written()["tests"]) == 1  # not yet: the timer writes both
    deadline = time.monotonic() + 30
    while len(written()["tests"]) == 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(written()["tests"]) == 3 and written()["output"].startswith(UNFINISHED)
    report.results.append(everything[3])
    results.update(report)  # its timer is cancelled by the final write
    results.finish(report)
    time.sleep(1.5)
    assert UNFINISHED not in written()["output"] and len(written()["tests"]) == 4
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_an_empty_report_is_valid():
    data = results_json(GradeReport(submission="s.py", seed=1),
                        incomplete="The grader could not run: no such bank")
    jsonschema.Draft7Validator(SCHEMA).validate(data)
    assert data["score"] == 0 and data["tests"] == []


WRITER = textwrap.dedent("""
    import sys
    from gradcheck.reports.gradescope import UNFINISHED, write_results_json
    from gradcheck.grading.results import CheckResult, GradeReport
    report = GradeReport(submission="s.py", seed=7)
    n = 0
    while True:
        n += 1
        report.results.append(CheckResult(exercise_id=f"e{n}", check="gradients",
                                          title="x" * 2000, score=1.0, max_score=1.0,
                                          status="passed"))
        write_results_json(report, sys.argv[1], incomplete=UNFINISHED)
        if n == 1:
            print("first", flush=True)
""")


def test_a_writer_killed_at_any_moment_leaves_valid_json(tmp_path):
    # A real process rewrites a growing results.json as fast as it can while we read it, then
    # is killed with SIGKILL: every read, and the file left behind, must be complete JSON.
    path = tmp_path / "results.json"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE)
    try:
        assert writer.stdout.readline() == b"first\n"
        sizes = set()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            sizes.add(len(json.loads(path.read_text())["tests"]))
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert len(sizes) > 3  # the file really changed under our reads
    data = json.loads(path.read_text())
    jsonschema.Draft7Validator(SCHEMA).validate(data)
    assert len(data["tests"]) >= max(sizes)


def test_atomic_write_keeps_the_old_content_when_writing_fails(tmp_path):
    path = tmp_path / "out.txt"
    atomic_write(path, "old\n")
    with pytest.raises(UnicodeEncodeError):
        atomic_write(path, "new \ud800 unpaired surrogate")  # fails half-way through writing
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.txt"]


# --- JUnit XML ---------------------------------------------------------------------------------


def test_junit_has_one_testcase_per_check_and_parses(tmp_path):
    report = make_report(output="printed \x07 bell", import_error="Traceback: boom")
    path = tmp_path / "junit.xml"
    write_junit(report, path)
    suite = ET.parse(path).getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        (r.exercise_id, r.check) for r in report.results]
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"),
            suite.get("skipped")) == ("8", "3", "2", "1")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["seed"] == "1234" and props["score"] == "2.67"
    assert suite.find("system-err").text == "Traceback: boom"


def test_junit_failures_carry_the_message_with_unprintable_characters_replaced():
    cases = ET.fromstring(junit_xml(make_report())).find("testsuite").findall("testcase")
    failure = cases[1].find("failure")
    assert failure.get("message").startswith("x.grad is 11.0 at x = 3.0")
    assert "bad byte \N{REPLACEMENT CHARACTER} and" in failure.text
    assert cases[1].get("file") == "exercises/chain.exercise.yaml" and cases[1].get("line") == "7"
    assert cases[0].find("failure") is None
    assert cases[4].find("error") is not None and cases[6].find("skipped") is not None


def test_junit_withholds_details_of_exercises_that_are_not_visible_unless_asked():
    text = junit_xml(make_report(withheld="forward x=0.7 y=x**3"))
    assert SECRET not in text and LATER not in text and "x**3" not in text
    hidden_case = ET.fromstring(text).find("testsuite").findall("testcase")[3]
    assert hidden_case.find("failure").text == WITHHELD
    revealed = junit_xml(make_report(withheld="forward x=0.7 y=x**3"), show_hidden=True)
    assert SECRET in revealed and LATER in revealed and "x**3" in revealed


# --- terminal ----------------------------------------------------------------------------------


def test_terminal_table_groups_exercises_by_module_with_subtotals_then_the_total():
    text = render_terminal(make_report())
    lines = text.splitlines()
    assert lines[0].split() == ["module", "/", "exercise", "points", "status"]
    assert lines[1].split() == ["02-backward", "2.67/6"]  # a mixed module lists its exercises
    assert lines[2].split() == ["chain-rule", "2.67/4", "partial"]
    assert lines[3].split() == ["late-one", "0/1.5", "failed"]
    assert lines[4].split() == ["skipper", "0/0.5", "skipped"]  # never a pass
    # a module whose exercises all failed (or all passed) is its subtotal alone
    assert lines[6].split() == ["03-graph", "0/3", "1", "exercise,", "none", "passed"]
    assert "total 2.67/9  (5 exercises in 2 modules, seed 1234, 1.5 s)" in text
    assert "\033[" not in text
    assert total_line(make_report()) == "2.67/9 (seed 1234)\n"
    passing = GradeReport(submission="e.py", seed=1, results=[
        result(f"ex{i}", "gradients", "passed", 1.0, 1.0, topic=f"0{i % 2}") for i in range(4)])
    assert [line.split() for line in render_terminal(passing).splitlines()[1:3]] == [
        ["00", "2/2", "all", "2", "passed"], ["01", "2/2", "all", "2", "passed"]]


def test_one_root_cause_is_said_once_at_the_top_and_fixes_are_ordered_by_points():
    blocked = [result(f"ex{i}", "gradients", "failed", 0.0, 2.0, f"tensor() raised {i}\nmore",
                      blocked_by="tensor()") for i in range(5)]
    blocked += [result("ex9", "gradients", "failed", 0.0, 4.0, "no exp", blocked_by="exp()"),
                result("ex8", "gradients", "failed", 0.0, 1.0, "the same first line\n1"),
                result("ex7", "gradients", "failed", 0.0, 1.0, "the same first line\n2"),
                result("ex6", "gradients", "failed", 0.0, 1.0, "the same first line\n3"),
                result("ex5", "gradients", "failed", 0.0, 1.0, "another line"),
                result("hid", "gradients", "failed", 0.0, 4.0, SECRET, visibility="hidden",
                       blocked_by="tanh()")]
    text = render_terminal(GradeReport(submission="e.py", seed=7, results=blocked))
    lines = text.splitlines()
    assert lines[:7] == [
        "What to fix first, by the points each fix would unblock:",
        "  1. Implement `tensor()` first: 5 checks need it (10 points).",
        "       tensor() raised 0",
        "  2. Implement `exp()`: 1 check needs it (4 points).",
        "       no exp",
        "  3. 3 checks fail the same way (3 points).",
        "       the same first line"]
    # the checks a cause blocks are not listed again; a hidden one takes no part in any cause
    assert text.count("tensor() raised") == 1 and "more" not in text
    assert "Failed checks:\nex5::gradients: ex5 gradients\n    another line\n" in text
    assert "tanh" not in text and SECRET not in text
    assert "1 failed check belongs to exercises whose details are not shown." in text
    markdown = render_markdown(GradeReport(submission="e.py", seed=7, results=blocked))
    assert ("<summary>1. Implement <code>tensor()</code> first: 5 checks need it (10 points)"
            "</summary>") in markdown
    assert "The checks: ex0::gradients, ex1::gradients" in markdown and "tanh" not in markdown


def test_checks_gradcheck_could_not_grade_are_no_cause_for_the_student_to_fix():
    """Five checks that met the same fault of gradcheck's share their lead, but "fix first"
    would tell the student to fix the grader: they are listed as they are, with no cause."""
    faults = [result(f"ex{i}", "gradients", "error", 0.0, 1.0,
                     "gradcheck could not grade this check (RecursionError: too deep); this is "
                     "a fault of the grader, not of the submission") for i in range(5)]
    report = GradeReport(submission="e.py", seed=7, results=faults)
    assert root_causes(report) == []
    text = render_terminal(report)
    assert "fix first" not in text and text.count("could not grade this check") == 5


MUL = "the backward of `*` (MulBackward0)"


def mul_bug(i, cause=MUL, **fields):
    """A failed check whose feedback found a wrong MulBackward0, as the grader writes it."""
    return result(f"mul{i}", "gradients", "failed", 0.0, 1.0,
                  f"At x={i}, the backward of `x * y` (MulBackward0) passed 1 to x; it should "
                  f"pass 2.\nThe gradient arriving at `x * y` is 1 (that part is right).\n"
                  f"dz/dx at x={i}: expected 2, found 1", detail={"cause": cause}, **fields)


def test_checks_whose_feedback_blames_one_operation_are_one_cause_named_by_it():
    checks = [mul_bug(i) for i in range(4)]
    checks += [mul_bug(7, "the forward of `.exp()`"), mul_bug(8, "the forward of `.exp()`"),
               mul_bug(9, visibility="hidden"),
               result("piece", "gradients", "failed", 0.0, 0.5, "no tanh", blocked_by="tanh()")]
    report = GradeReport(submission="e.py", seed=7, results=checks)
    text = render_terminal(report)
    assert text.splitlines()[:6] == [
        "What to fix first, by the points each fix would unblock:",
        f"  1. Fix {MUL} first: 4 checks point at it (4 points).",
        "       At x=0, the backward of `x * y` (MulBackward0) passed 1 to x; it should pass 2.",
        "       The gradient arriving at `x * y` is 1 (that part is right).",
        "  2. Implement `tanh()`: 1 check needs it (0.5 points).",
        "       no tanh"]
    # the four are not listed again; two with another cause are fewer than a cause needs; the
    # hidden one takes no part
    assert "mul1::" not in text and "mul7::gradients" in text and "mul8::gradients" in text
    assert "x=9" not in text and "expected 2, found 1" not in text.split("Failed checks")[0]
    markdown = render_markdown(report)
    assert ("<summary>1. Fix the backward of <code>*</code> (MulBackward0) first: 4 checks "
            "point at it (4 points)</summary>") in markdown
    assert "The checks: mul0::gradients, mul1::gradients, mul2::gradients, mul3::gradients" in markdown
    # the HTML page names the cause at the top and keeps each of its checks whole (its walk
    # and graph are drawn there), while a check a missing piece blocks is only named
    page = render_html(report)
    assert "Fix the backward of <code>*</code> (MulBackward0) first" in page
    assert page.count("dz/dx at x=") == 6 and "x=9" not in page
    assert "Blocked by what to fix first: no tanh" in page


def test_a_shared_lead_that_introduces_a_program_takes_the_program_with_it():
    found = ("The smallest program found where your engine differs from the oracles "
             "(1 operation):\n\n    a = x * 2\n\nat x = 0.0:\nda/dx at x=0.0: expected 2.0, found "
             "0.0\nHint: {}")
    report = GradeReport(submission="e.py", seed=7, results=[
        result(f"ex{i}", "random_programs", "failed", 0.0, 2.0, found.format(i))
        for i in range(3)])
    lines = render_terminal(report).splitlines()
    assert lines[1:8] == [
        "  1. 3 checks fail the same way (6 points).",
        "       The smallest program found where your engine differs from the oracles "
        "(1 operation):", "",
        "           a = x * 2", "",
        "       at x = 0.0:",
        "       da/dx at x=0.0: expected 2.0, found 0.0"]
    assert "Hint" not in "\n".join(lines)


def test_leads_that_differ_only_in_a_variables_name_are_one_cause():
    """An engine whose `.grad` is a numpy array fails alike wherever a vector's gradient is
    read, whatever the variable is called: one cause, not one per name."""
    said = ("your engine's `{0}.grad` gave what the protocol does not allow: "
            "{0}.grad.tolist() is a numpy.ndarray, not a number or a list of numbers")
    report = GradeReport(submission="e.py", seed=7, results=[
        result(f"ex{i}", "gradients", "failed", 0.0, 1.0, said.format(name))
        for i, name in enumerate(["v", "w", "weights", "v"])] + [
        result(f"other{i}", "answers", "failed", 0.0, 1.0, f"{name} should be {value}")
        for i, (name, value) in enumerate([("x", 1), ("y", 1), ("x", 2)])])
    causes = root_causes(report)
    assert [(len(cause.checks), cause.lead) for cause in causes] == [(4, said.format("v"))]
    assert render_terminal(report).splitlines()[1] == "  1. 4 checks fail the same way (4 points)."


def test_the_reproduction_command_is_the_last_line():
    assert render_terminal(make_report()).splitlines()[-1] == (
        "Reproduce: gradcheck grade student/engine.py --seed 1234")
    assert render_markdown(make_report(), command="gradcheck grade 'a b.py' --seed 3"
                           ).splitlines()[-1] == "Reproduce: `gradcheck grade 'a b.py' --seed 3`"


def test_terminal_colours_only_when_asked():
    text = render_terminal(make_report(), colour=True)
    assert "\033[33mpartial\033[0m" in text and "\033[31mfailed\033[0m" in text


def test_terminal_escapes_control_characters_an_engine_put_in_its_messages():
    report = make_report(output="\033[2J\033[31mfake all passed")
    report.results = [r for r in report.results if r.visibility == "visible"]
    text = render_terminal(report)
    assert "bad byte \\x00 and" in text
    assert "\\x1b[2J\\x1b[31mfake all passed" in text and "\033" not in text


def test_terminal_shows_failure_messages_but_not_hidden_ones_unless_instructor():
    report = make_report(import_error="Traceback (most recent call last):\nImportError: nope")
    text = render_terminal(report)
    assert "x.grad is 11.0 at x = 3.0" in text and "ImportError: nope" in text
    assert SECRET not in text and LATER not in text and NOTE not in text
    assert "3 failed checks belong to exercises whose details are not shown" in text
    instructor = render_terminal(report, show_hidden=True)
    assert SECRET in instructor and LATER in instructor and NOTE in instructor


def test_a_course_file_that_could_not_be_loaded_is_told_apart_without_its_problems():
    # a broken file whose visibility cannot be read is withheld: its problems quote its program
    report = make_report()
    report.results.append(result("lost", "load", "error", 0.0, 0.0, SECRET, visibility="hidden"))
    for text in (render_terminal(report), render_markdown(report), render_html(report),
                 json.dumps(results_json(report))):
        assert SECRET not in text
        assert "could not be loaded, so it was not graded: this is not your engine" in text
    assert ("3 failed checks belong to exercises whose details are not shown. 1 exercise file "
            "of the course could not be loaded, so it was not graded") in render_terminal(report)
    report.results.append(result("lost2", "load", "error", 0.0, 0.0, SECRET, visibility="hidden"))
    assert "2 exercise files of the course could not be loaded, so they were not graded" in (
        render_terminal(report))


# --- Markdown ----------------------------------------------------------------------------------


def test_one_exercise_is_counted_in_the_singular():
    report = GradeReport(submission="engine.py", seed=1, duration=1.0, results=[
        result("chain-rule", "gradients", "passed", 1.0, 1.0)])
    assert "· 1 exercise, 0 not fully passed ·" in render_markdown(report)
    assert "1 exercise, passed" in render_terminal(report) and "all 1" not in (
        render_terminal(report))


def test_markdown_summary_has_totals_a_table_and_folded_failures():
    text = render_markdown(make_report())
    assert text.startswith("## gradcheck: 2.67 / 9 points\n")
    assert "seed 1234" in text and "5 exercises, 5 not fully passed" in text
    assert "| `skipper` | 0 / 0.5 | ⚪ skipped |" in text  # a check not graded is never a pass
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[1:4] == ["| **02-backward** | **2.67 / 6** | |",
                         "| `chain-rule` | 2.67 / 4 | 🟡 partial |",
                         "| `late-one` | 0 / 1.5 | ❌ failed |"]
    assert rows[6:] == ["| **03-graph** | **0 / 3** | |", "| `secret-cube` | 0 / 3 | ❌ failed |",
                        "| **Total** | **2.67 / 9** | |"]
    assert text.count("<details>") == 2  # the failed and errored checks whose details show
    assert "3 failed checks belong to exercises whose details are not shown." in text
    assert ("<code>chain-rule::sampled</code> chain-rule sampled "
            "(<code>exercises/chain.exercise.yaml:7</code>)") in text


def test_printable_writes_out_what_could_drive_a_terminal_or_hide_text():
    said = "a\tb\nc\033[2J\r\x9b\x7f\u202edessap\u2066\u200b\u2028" + b"bob\xff".decode(
        "utf-8", "surrogateescape")
    assert printable(said) == ("a\tb\nc\\x1b[2J\\x0d\\x9b\\x7f\\u202edessap\\u2066\\u200b"
                               "\\u2028bob\\xff")
    assert printable("a\tb\nc", one_line=True) == "a\\x09b\\x0ac"
    assert printable("naïve → ∂z/∂x, 勾配") == "naïve → ∂z/∂x, 勾配"  # text, not controls
    # every format character, not a list of the known ones: the Arabic letter mark reorders
    # "14 / 274" in a bidi-aware page; the byte order mark, the word joiner, invisible times
    # and tag characters hide text
    assert printable("14\u061c / 274\ufeff\u2060\u2062\U000e0041") == (
        "14\\u061c / 274\\ufeff\\u2060\\u2062\\U000e0041")
    assert not [c for c in map(chr, range(0x110000))
                if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs")
                and c not in "\t\n" and printable(c) == c]


def test_a_submission_named_to_forge_a_line_stays_in_its_own(tmp_path):
    """A file name can hold anything but / and NUL: a return, a heading, bytes that are not
    UTF-8. Every report names the submission on one line, and can be written at all; no report
    holds a control character the engine printed, even in a file only a browser should read."""
    name = "evil\r## gradcheck: 9 / 9 points\r\033[2J" + b"\xff.py".decode("utf-8",
                                                                          "surrogateescape")
    report = make_report(output="\033[2J printed\n")
    report.submission = name
    markdown = render_markdown(report)
    assert not [line for line in markdown.splitlines() if line.startswith("## gradcheck: 9")]
    assert "evil\\x0d## gradcheck: 9 / 9 points\\x0d\\x1b[2J\\xff.py" in markdown
    for text in (markdown, render_html(report), render_terminal(report)):
        text.encode("utf-8")  # no surrogate left in
        assert not {"\r", "\033"} & set(text)
        assert "\\x1b[2J printed" in text  # and what it printed, escaped in every format


def test_markdown_keeps_a_message_with_backticks_and_pipes_intact():
    text = render_markdown(make_report())
    message = make_report().results[1].message
    # The message holds a run of three backticks, so the block is fenced with four; its NUL
    # byte is written out.
    assert f"````text\n{message}\n````".replace("\x00", "\\x00") in text


def test_markdown_withholds_hidden_details_unless_asked():
    text = render_markdown(make_report(withheld="forward x=0.7 y=x**3"))
    assert SECRET not in text and LATER not in text and "x**3" not in text
    assert "<code>secret-cube::gradients</code>" not in text  # counted, not listed
    assert SECRET in render_markdown(make_report(), show_hidden=True)


def test_results_json_shows_a_behaviour_failure_as_an_html_table_unless_hidden():
    detail = {"steps": ["z.backward()"],
              "torch": {"error": None, "steps": [{"error": None, "observed": {"grad.x": 12.0}}]},
              "engine": {"error": None, "steps": [{"error": None, "observed": {"grad.x": 6.0}}]}}
    shown = result("twice", "behaviour", "failed", 0.0, 1.0, "step 1 <differs>", detail=detail)
    hidden = result("twice", "behaviour", "failed", 0.0, 1.0, SECRET, detail=detail,
                    visibility="hidden")
    late = result("twice", "behaviour", "failed", 0.0, 1.0, LATER, detail=detail,
                  visibility="after_due_date")
    data = results_json(GradeReport(submission="e.py", seed=1, results=[shown, hidden, late]))
    jsonschema.Draft7Validator(SCHEMA).validate(data)
    first, second, third = data["tests"]
    assert third == {**third, "output": WITHHELD} and "output_format" not in third
    assert first["output_format"] == "html"
    assert first["output"].startswith("<pre>step 1 &lt;differs&gt;</pre>")
    assert ("<td>1. <code>z.backward()</code></td><td>x.grad = 12.0</td>"
            "<td class=\"differs\">x.grad = 6.0</td>") in first["output"]
    assert second["output"] == WITHHELD and "output_format" not in second


def test_a_behaviour_table_too_long_for_its_share_of_results_json_is_left_out():
    """The table holds what the engine raised at each step, escaped (a quote is six
    characters): 300 steps of 990 quotes made one test's output 1.8 MB, past the file's
    1 MB. A table longer than MAX_TABLE, or than the room the tests' outputs leave, gives way
    to the plain message."""
    raised = {"type": "ValueError", "message": '"' * 990, "phase": "backward"}
    steps = [f"z.backward()  # {i}" for i in range(300)]
    detail = {"steps": steps,
              "torch": {"error": None, "steps": [{"error": None, "observed": {"grad.x": 1.0}}
                                                 for _ in steps]},
              "engine": {"error": None, "steps": [{"error": raised, "observed": {}}
                                                  for _ in steps]}}
    shown = result("many", "behaviour", "failed", 0.0, 1.0, "step 1 raised", detail=detail)
    data = results_json(GradeReport(submission="e.py", seed=1, results=[shown]))
    test, = data["tests"]
    assert "output_format" not in test and test["output"] == "step 1 raised"
    assert len(json.dumps(data)) < 10_000


def test_results_json_says_what_to_fix_first_in_its_output():
    blocked = [result(f"ex{i}", "gradients", "failed", 0.0, 2.0, f"tensor() raised\nline {i}",
                      blocked_by="tensor()") for i in range(3)]
    blocked.append(result("hid", "gradients", "failed", 0.0, 4.0, SECRET, visibility="hidden",
                          blocked_by="tanh()"))
    output = results_json(GradeReport(submission="e.py", seed=1, results=blocked))["output"]
    assert ("What to fix first, by the points each fix would unblock:\n"
            "1. Implement `tensor()` first: 3 checks need it (6 points). tensor() raised"
            ) in output
    assert "tanh" not in output and SECRET not in output
