"""The HTML report, opened in a real headless browser (Debian's chromium, driven by playwright):
it renders without a console error and loads nothing, the node a known bug is at is marked and
visible in the graph, behaviour steps read torch against the engine, and a hidden exercise shows
no detail."""

import sys
from pathlib import Path

import pytest

from gradcheck.cli import main
from gradcheck.reports import WITHHELD

sys.path.insert(0, str(Path(__file__).parent / "engines"))
import mutant  # noqa: E402  (tests/engines: the reference engine with a bug put in)

pytestmark = pytest.mark.slow  # a grading with torch and jax, then a browser

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]

PRODUCT = """\
id: {id}
title: A product and a square
topic: {topic}
points: 3
visibility: {visibility}
inputs:
  x: {{value: 1.5}}
  y: {{value: -0.5}}
program: |
  p = x * y
  f = p + y ** 2
checks:
  gradients: {{}}
  behaviour:
    steps:
      - backward: {{}}
        expect: [grad.x, grad.y]
"""


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    """The report of the reference engine with `__mul__` sending y the slope y instead of x, on
    a visible exercise and a hidden one."""
    folder = tmp_path_factory.mktemp("html")
    bank = folder / "bank"
    bank.mkdir()
    (bank / "product.exercise.yaml").write_text(
        PRODUCT.format(id="product", topic="01-forward", visibility="visible"))
    (bank / "secret.exercise.yaml").write_text(
        PRODUCT.format(id="secret-product", topic="02-hidden", visibility="hidden"))
    engine = folder / "engine.py"
    engine.write_text(mutant.source("mul"))
    page = folder / "report.html"
    assert main(["grade", str(engine), "--exercises", str(bank), "--seed", "1", "--quiet",
                 "--html", str(page)]) == 0
    return page


def test_the_page_is_one_file_that_names_no_other(page_file):
    text = page_file.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<svg" in text
    for outside in ("<script", "<link", "<img", "src=", "@import", "url("):
        assert outside not in text


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")
def test_in_a_browser_the_faulty_node_shows_and_the_hidden_exercise_does_not(page_file,
                                                                             tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors, requests = [], []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("request", lambda request: requests.append(request.url))
            page.goto(page_file.as_uri())
            page.wait_for_load_state("load")

            visible = page.locator("#product")
            node = visible.locator("svg g.node.faulty")
            assert node.count() == 1
            node.scroll_into_view_if_needed()
            assert node.is_visible()
            box = node.bounding_box()
            assert box["width"] > 20 and box["height"] > 20
            label = node.text_content()  # (SVG text: no inner_text)
            assert "p = x * y" in label and "departs here" in label
            # the walk table marks the same node, and the steps read torch against the engine
            assert "p = x * y" in visible.locator("table.walk tr.departs").inner_text()
            steps = visible.locator("table.steps")
            assert steps.locator("th").all_inner_texts() == ["step", "torch", "your engine"]
            assert steps.locator("td.differs").count() == 1
            page.screenshot(path=str(tmp_path / "report.png"))  # the test's artefact

            hidden = page.locator("#secret-product")
            assert hidden.is_visible()
            # opened where there is something to read: not the hidden one, whose checks say only
            # that their details are withheld
            assert visible.get_attribute("open") is not None
            assert hidden.get_attribute("open") is None
            assert hidden.locator(".withheld").all_text_contents() == [WITHHELD, WITHHELD]
            assert hidden.locator("svg, table, pre").count() == 0
            assert "x * y" not in hidden.text_content()
            assert errors == [] and requests == [page_file.as_uri()]
        finally:
            browser.close()
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_the_page_draws_the_exercise_as_graded_not_as_the_submission_left_its_file(tmp_path):
    """In default mode the worker may rewrite the bank's files (docs/security.md): the page read
    each exercise again after grading, so a submission could change the walk it shows, or hang
    the report on a FIFO. It draws the exercises as the grading read them."""
    bank = tmp_path / "bank"
    bank.mkdir()
    exercise = bank / "product.exercise.yaml"
    exercise.write_text(PRODUCT.format(id="product", topic="01-forward", visibility="visible"))
    engine = tmp_path / "engine.py"
    engine.write_text(mutant.source("mul") + f"\nopen({str(exercise)!r}, 'w').write('id: [')\n")
    page = tmp_path / "report.html"
    assert main(["grade", str(engine), "--exercises", str(bank), "--seed", "1", "--quiet",
                 "--html", str(page)]) == 0
    assert exercise.read_text() == "id: ["  # the vandalism happened
    text = page.read_text()
    assert "could not be read again" not in text and "<svg" in text
