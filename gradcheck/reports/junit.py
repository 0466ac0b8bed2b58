"""JUnit XML, for CI systems that show test results: one testcase per check.

A failed check is a `<failure>` whose text is the student-facing message; an `error` result (the
engine crashed or timed out, a broken exercise file) is an `<error>`. Exercises that are not
visible keep their pass/fail status but lose their message.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET

from gradcheck.grading.results import CheckResult, GradeReport
from gradcheck.reports import (
    atomic_write,
    details_shown,
    shown_duration,
    shown_message,
    shown_output,
)

# Characters XML 1.0 cannot carry at all; an engine's exception message may contain them.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def junit_xml(report: GradeReport, *, show_hidden: bool = False) -> str:
    """The JUnit XML document for `report`."""
    results = report.results
    suite = ET.Element("testsuite", {
        "name": "gradcheck",
        "tests": str(len(results)),
        "failures": str(sum(r.status == "failed" for r in results)),
        "errors": str(sum(r.status == "error" for r in results)),
        "skipped": str(sum(r.status == "skipped" for r in results)),
        "time": f"{shown_duration(report, show_hidden):.3f}",
    })
    properties = ET.SubElement(suite, "properties")
    for name, value in (("submission", report.submission), ("seed", str(report.seed)),
                        ("score", f"{report.score:g}"), ("max_score", f"{report.max_score:g}")):
        ET.SubElement(properties, "property", name=name, value=_clean(value))
    for r in results:
        suite.append(_testcase(r, show_hidden))
    output = shown_output(report, show_hidden)
    if output:
        ET.SubElement(suite, "system-out").text = _clean(output)
    if report.import_error:
        ET.SubElement(suite, "system-err").text = _clean(report.import_error)
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(report: GradeReport, path: str | os.PathLike[str], *,
                show_hidden: bool = False) -> None:
    """Write the JUnit XML file atomically."""
    atomic_write(path, junit_xml(report, show_hidden=show_hidden))


def _testcase(r: CheckResult, show_hidden: bool) -> ET.Element:
    case = ET.Element("testcase", classname=r.exercise_id, name=r.check,
                      time=f"{r.duration if details_shown(r, show_hidden) else 0:.3f}")
    if r.file:
        case.set("file", r.file)
        case.set("line", str(r.line))
    if r.status in ("failed", "error", "skipped"):
        text = _clean(shown_message(r, show_hidden))
        tag = "failure" if r.status == "failed" else r.status
        outcome = ET.SubElement(case, tag, message=text.partition("\n")[0])
        if tag != "skipped":
            outcome.text = text
    return case


def _clean(text: str) -> str:
    return _NOT_XML.sub("\N{REPLACEMENT CHARACTER}", text)
