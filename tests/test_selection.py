"""Choosing what to grade: `--exercises` paths, ids and modules, and `-k EXPR`, the same in
`grade`, `validate`, `key build` and the pytest plugin."""

import json

import pytest
from grading_samples import BROKEN, PRODUCT, write_bank

from gradcheck.bank.bundled import bank_dir
from gradcheck.bank.selection import SelectionError, keyword_matcher, selection
from gradcheck.cli import main

pytest_plugins = ["pytester"]


@pytest.fixture
def bank(tmp_path):
    folder = write_bank(tmp_path / "bank")
    (folder / "product.exercise.yaml").write_text(PRODUCT)
    return folder


def ids(chosen):
    return sorted(e.id for e in chosen.load().exercises)


def test_names_pick_exercises_by_id_and_modules_by_topic_or_folder(bank):
    assert ids(selection(["square"], None, lambda: bank)) == ["square"]
    assert ids(selection(["01-forward"], None, lambda: bank)) == ["product", "square"]
    assert ids(selection(["bank"], None, lambda: bank)) == ["product", "secret-cube", "square"]
    # a path given is the bank the names are looked up in
    assert ids(selection([str(bank), "02-backward"], None, bank_dir)) == ["secret-cube"]
    bundled = selection(["02-backward"], None, bank_dir).load().exercises
    assert {e.topic for e in bundled} == {"02-backward"} and len(bundled) > 5


def test_k_follows_pytests_grammar_on_ids():
    match = keyword_matcher("(SQU or prod) and not cube")
    assert [i for i in ("square", "product", "secret-cube", "line") if match(i)] == [
        "square", "product"]
    for bad, said in [("(pow", "not closed"), ("pow and", "at the end"), ("or x", "before 'or'"),
                      ("a b", "unexpected 'b'")]:
        with pytest.raises(SelectionError, match=said):
            keyword_matcher(bad)


def test_unknown_names_and_empty_selections_say_what_there_is(bank):
    with pytest.raises(SelectionError, match="did you mean 'square'.*modules are 01-forward, "
                                             "02-backward"):
        selection(["squares"], None, lambda: bank).load()
    with pytest.raises(SelectionError, match="no such file or folder"):
        selection([str(bank / "nope.exercise.yaml")], None, lambda: bank)
    with pytest.raises(SelectionError, match="selects none of the 3 exercises"):
        selection([], "nothing", lambda: bank).load()


def test_a_broken_file_stays_when_its_name_is_selected(bank):
    (bank / "broken.exercise.yaml").write_text(BROKEN)
    loaded = selection(["broken"], None, lambda: bank).load()
    assert loaded.exercises == [] and [p.name for p, _ in loaded.broken] == [
        "broken.exercise.yaml"]
    assert selection([], "square", lambda: bank).load().broken == []


def test_a_broken_file_is_selected_by_its_folder_its_id_and_its_topic(bank, capsys):
    module = bank / "07-m"
    module.mkdir()
    # its file name is not its id, and its topic is written in the folder's name only
    (module / "scratch.exercise.yaml").write_text(
        BROKEN.replace("id: broken", "id: m05-typo").replace("topic: 01-forward", "titel: x"))
    (bank / "elsewhere.exercise.yaml").write_text(BROKEN.replace("id: broken", "id: other"))

    def broken(items, keyword=None):
        return sorted(p.name for p, _ in selection(items, keyword, lambda: bank).load().broken)

    assert broken(["07-m"]) == ["scratch.exercise.yaml"]
    assert broken(["m05-typo"]) == ["scratch.exercise.yaml"]
    assert broken([], "m05") == ["scratch.exercise.yaml"]
    with pytest.raises(SelectionError, match="selects none"):  # -k reads the id, not the file
        broken([], "scratch")
    assert broken(["01-forward"]) == ["elsewhere.exercise.yaml"]
    assert main(["validate", "--static", str(bank), "07-m"]) == 1
    assert "scratch.exercise.yaml:3: titel: unknown key" in capsys.readouterr().out


def test_a_file_that_cannot_be_read_is_reported_in_its_folders_module(tmp_path, capsys):
    module = tmp_path / "90-mistakes"
    module.mkdir()
    (module / "m09-tabs.exercise.yaml").write_text(BROKEN.replace("\n  x:", "\n\tx:"))
    main(["grade", "reference", "--exercises", str(tmp_path)])
    out = capsys.readouterr().out
    assert "90-mistakes           0/0  1 exercise, none passed" in out
    assert "(no module)" not in out


def test_grade_grades_one_bundled_exercise_by_id(tmp_path):
    results = tmp_path / "results.json"
    assert main(["grade", "reference", "--exercises", "chain-rule-z", "--results-json",
                 str(results), "--quiet"]) == 0
    tests = json.loads(results.read_text())["tests"]
    assert {t["name"].rsplit("(", 1)[1] for t in tests} == {"chain-rule-z)"}


def test_grade_k_and_a_bad_name_exit_2_before_grading(bank, tmp_path, capsys):
    results = tmp_path / "results.json"
    assert main(["grade", "torch", "--exercises", str(bank), "-k", "prod or cube",
                 "--results-json", str(results), "--quiet"]) == 0
    names = {t["name"] for t in json.loads(results.read_text())["tests"]}
    assert names and all("(product)" in n or "(secret-cube)" in n for n in names)
    assert main(["grade", "torch", "--exercises", "no-such-exercise"]) == 2
    assert "no exercise or module of that name" in capsys.readouterr().err


def test_validate_and_key_build_select_the_same_way(bank, tmp_path, capsys):
    main(["validate", "--static", str(bank), "-k", "squ"])  # (the samples lack a schema line)
    captured = capsys.readouterr()
    assert "1 exercise file(s)" in captured.err and "product" not in captured.out
    assert main(["validate", "--static", "op-mul", "op-add"]) == 0
    assert "2 exercise file(s)" in capsys.readouterr().err
    assert main(["validate", "no-such-module"]) == 2
    key = tmp_path / "key.json"
    assert main(["key", "build", "--exercises", str(bank), "--exercises", "01-forward",
                 "-k", "not prod", "--out", str(key)]) == 0
    assert "1 exercise, seed" in capsys.readouterr().out


def test_the_plugin_takes_ids_and_modules_and_pytests_own_k(pytester, bank):
    result = pytester.runpytest_subprocess("--submission", "torch", "--collect-only", "-q",
                                           "--exercises", str(bank), "--exercises", "01-forward",
                                           "-k", "square")
    result.stdout.fnmatch_lines(["*square.exercise.yaml::gradients", "*3/5 tests collected*"])
    assert "product" not in result.stdout.str()
    result = pytester.runpytest_subprocess("--submission", "torch", "--collect-only", "-q",
                                           "--exercises", "chain-rule-z")
    result.stdout.fnmatch_lines(["*::behaviour", "5 tests collected*"])  # chain-rule-z's five


@pytest.mark.parametrize("command", ["grade", "key build", "validate"])
def test_a_missing_folder_or_a_file_that_is_no_exercise_is_a_usage_error(
        command, bank, tmp_path, capsys):
    command = {"grade": ["grade", "reference", "--quiet", "--exercises"],
               "key build": ["key", "build", "--out", str(tmp_path / "key.json"), "--exercises"],
               "validate": ["validate"]}[command]
    misspelt = str(bank.parent / "bnak")
    assert main([*command, misspelt]) == 2
    said = capsys.readouterr().err
    assert f"{misspelt}: no such file or folder (did you mean {str(bank)!r}?)" in said
    assert main([*command, str(bank / "squares.exercise.yaml")]) == 2
    assert f"(did you mean {str(bank / 'square.exercise.yaml')!r}?)" in capsys.readouterr().err
    notes = tmp_path / "notes.md"
    notes.write_text("# not an exercise\n")
    assert main([*command, str(notes)]) == 2
    assert "notes.md: not an exercise file" in capsys.readouterr().err
    assert main([*command, "chain-rule-zz"]) == 2
    assert "(did you mean 'chain-rule-z'?)" in capsys.readouterr().err


def test_the_plugin_refuses_an_unknown_name_as_a_usage_error(pytester):
    result = pytester.runpytest_subprocess("--submission", "torch", "--collect-only", "-q",
                                           "--exercises", "chain-rule-zz")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--exercises chain-rule-zz: no such file or folder*"
                                 "(did you mean 'chain-rule-z'?)*"])
