"""The YAML reader: YAML 1.2 scalars, refused duplicates and tags, and line numbers of fields."""

import math

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gradcheck.bank import yaml_reader
from gradcheck.bank.yaml_reader import YamlError, format_path, load, parse_path


@pytest.mark.parametrize("text", ["1e-6", "1E-5", "-2.5e3", "+1e+2", ".5", "3.", "0.0", "-0.25"])
def test_floats_in_every_spelling_are_numbers(text):
    value = load(f"a: {text}").data["a"]
    assert isinstance(value, float) and value == float(text)


def test_pyyaml_alone_reads_1e_minus_6_as_text_and_we_do_not():
    assert yaml.safe_load("a: 1e-6")["a"] == "1e-6"
    assert load("a: 1e-6").data["a"] == 1e-6


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "y", "n", "Yes", "NO", "On"])
def test_yaml_1_1_boolean_words_stay_text(word):
    assert load(f"a: {word}").data["a"] == word


@pytest.mark.parametrize("text, value", [
    ("true", True), ("False", False), ("TRUE", True), ("~", None), ("null", None), ("", None),
    ("012", 12), ("0x1f", 31), ("0o17", 15), ("-7", -7), ("'1e-6'", "1e-6"), ('"no"', "no"),
    ('"true"', "true"), ("1_000", "1_000"), ("2001-12-14", "2001-12-14"),
])
def test_core_schema_scalars(text, value):
    assert load(f"a: {text}").data["a"] == value
    assert type(load(f"a: {text}").data["a"]) is type(value)


def test_infinity_and_nan_are_floats():
    data = load("a: .inf\nb: -.Inf\nc: .nan").data
    assert data["a"] == math.inf and data["b"] == -math.inf and math.isnan(data["c"])


def test_duplicate_key_names_both_lines():
    with pytest.raises(YamlError) as info:
        load("a: 1\nb:\n  c: 1\n  d: 2\n  c: 3\n")
    assert info.value.line == 5
    assert "duplicate key 'c' (first at line 3)" in info.value.message


def test_every_repeated_key_is_found_and_the_first_values_kept():
    with pytest.raises(YamlError) as info:
        load("a: 1\na: 2\nb:\n  c: 1\n  c: 3\n")
    assert [(e.line, e.field, e.message) for e in (info.value, *info.value.more)] == [
        (2, "a", "duplicate key 'a' (first at line 1); keep one of them"),
        (5, "b.c", "duplicate key 'c' (first at line 4); keep one of them")]
    assert info.value.source.data == {"a": 1, "b": {"c": 1}}


def test_same_key_in_different_mappings_is_fine():
    assert load("a: {x: 1}\nb: {x: 2}").data == {"a": {"x": 1}, "b": {"x": 2}}


@pytest.mark.parametrize("text, line", [
    ("a: 1\nb: !!python/object/apply:os.system ['true']\n", 2),
    ("a: !!binary aGVsbG8=\n", 1),
    ("!!python/name:os.system a: 1\n", 1),
    ("a: !custom 1\n", 1),
])
def test_tags_other_than_plain_data_are_refused(text, line):
    with pytest.raises(YamlError) as info:
        load(text)
    assert info.value.line == line and "not allowed" in info.value.message


def test_core_tags_are_refused_too_each_at_its_line_and_the_plain_values_read_on():
    with pytest.raises(YamlError) as info:
        load("a: !!str 12\nb:\n  c: !!float 3\n  d: !!map {e: 1}\nf: 1\nf: 2\n")
    assert [(e.line, e.field, e.message.split(";")[0]) for e in (info.value, *info.value.more)] == [
        (1, "a", "the tag '!!str' is not allowed"), (3, "b.c", "the tag '!!float' is not allowed"),
        (4, "b.d", "the tag '!!map' is not allowed"), (6, "f", "duplicate key 'f' (first at line 5)")]
    assert "write the plain value" in info.value.message
    assert info.value.source.data == {"a": 12, "b": {"c": 3, "d": {"e": 1}}, "f": 1}


def test_a_tag_behind_an_alias_is_reported_once():
    with pytest.raises(YamlError) as info:
        load("a: &x !!str 1\nb: *x\n")
    assert (info.value.line, info.value.more) == (1, [])


def test_syntax_error_gives_line_and_where_the_bracket_opened():
    with pytest.raises(YamlError) as info:
        load("a: 1\nb: [1, 2\nc: 3\n")
    assert info.value.line == 3
    assert "starts at line 2" in info.value.message


@pytest.mark.parametrize("text, column", [("a:\n\tb: 1\n", 1), ("a: |\n\tx = 1\n", 1)])
def test_a_tab_says_to_indent_with_spaces(text, column):
    with pytest.raises(YamlError) as info:
        load(text)
    assert (info.value.line, info.value.column) == (2, column)
    assert info.value.message == (f"YAML syntax: a tab (column {column}); indent with spaces, "
                                  "not tabs (YAML does not allow tabs there)")


@pytest.mark.parametrize("text, message", [
    ("a: 1\n---\nb: 2\n", "several documents"),
    ("a: &x [1, *x]\n", "cycle"),
    ("base: &b {x: 1}\nother:\n  <<: *b\n", "merge keys"),
    ("? [1, 2]\n: 3\n", "plain name"),
])
def test_refused_constructs(text, message):
    with pytest.raises(YamlError, match=message):
        load(text)


def test_alias_expansion_is_bounded(monkeypatch):
    monkeypatch.setattr(yaml_reader, "MAX_NODES", 5000)  # the mechanism, at a size quick to reach
    levels = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 5)]
    with pytest.raises(YamlError, match="aliases"):
        load("\n".join(levels))


def test_marks_of_keys_and_items():
    source = load("# comment\nchecks:\n  behaviour:\n    steps:\n      - backward: {}\n"
                  "      - zero_grad: [x]\n        expect: [grad.x]\n")
    assert source.line_of("checks") == 2
    assert source.line_of("checks.behaviour.steps[1]") == 6
    assert source.line_of(("checks", "behaviour", "steps", 1, "expect")) == 7
    assert source.marks[("checks", "behaviour", "steps", 1, "zero_grad", 0)] == (6, 21)
    # a field that is not written falls back to its nearest written parent
    assert source.line_of("checks.behaviour.steps[0].backward.retain_graph") == 5
    assert source.line_of("nowhere.at.all") == 1


def test_position_inside_a_literal_block():
    source = load("a: 1\nprogram: |\n    y = x\n    z = q\n")
    assert source.text_position(("program",), 2, 5) == (4, 9)


def test_position_inside_a_one_line_string():
    source = load('program: "z = q"\n')
    assert source.text_position(("program",), 1, 5) == (1, 15)


@pytest.mark.parametrize("path", ["a", "a.b", "a[0]", "checks.behaviour.steps[12].backward.of"])
def test_paths_round_trip(path):
    assert format_path(parse_path(path)) == path


#: Characters that YAML treats specially, mixed into arbitrary text.
_TRICKY = st.sampled_from(list("\n\r\x85\u2028\u2029\t :#'\"-?{}[]!&*|>%@`,\ufeff\x00"))


@given(st.text(_TRICKY | st.characters(blacklist_categories=("Cs",)), max_size=60))
def test_dumped_text_loads_back_unchanged(text):
    data = {"text": text, "program": text + "\n" + text}
    assert load(yaml_reader.dump(data)).data == data


@given(st.floats(allow_nan=False) | st.integers() | st.booleans() | st.none())
def test_dumped_scalars_load_back_unchanged(value):
    assert load(yaml_reader.dump({"a": value})).data == {"a": value}


# --- libyaml's parser, when PyYAML has it ------------------------------------------------------

needs_libyaml = pytest.mark.skipif(yaml_reader._FastLoader is None, reason="PyYAML without libyaml")


def outcome(text: str, fast: bool):
    """Everything `load` keeps of `text` when its nodes come from one parser: the data, every
    mark, each node's style and start (and a scalar's end), or the error."""
    try:
        root, tagged = yaml_reader._compose(text, fast)
        source = yaml_reader.Source(None, text)
        builder = yaml_reader._Builder(source, tagged)
        source.data = builder.value(root, ()) if root is not None else None
        if builder.problems:
            return ("problems", [(e.message, e.line, e.column) for e in builder.problems],
                    repr(source.data))
    except YamlError as error:
        return ("error", error.message, error.line, error.column)
    except yaml.YAMLError as error:
        return ("syntax", str(error))
    # A mapping's or list's end mark is never used (libyaml ends one at the next line's start).
    nodes = {path: (getattr(node, "style", None), getattr(node, "flow_style", None),
                    node.start_mark.line, node.start_mark.column,
                    (node.end_mark.line, node.end_mark.column)
                    if isinstance(node, yaml.ScalarNode) else None)
             for path, node in source.nodes.items()}
    return (repr(source.data), source.marks, nodes)


@needs_libyaml
def test_libyaml_and_pyyaml_read_every_bundled_file_alike():
    from gradcheck.bank.bundled import bank_dir

    files = sorted(bank_dir().rglob("*.exercise.yaml"))
    assert files
    for path in files:
        text = path.read_text()
        assert outcome(text, fast=True) == outcome(text, fast=False), path


@needs_libyaml
@pytest.mark.parametrize("text", [
    "a: 1\nb: [1, 2\nc: 3\n",  # libyaml's own words would differ
    "a: 1\n---\nb: 2\n",
    "a: *nowhere\n",
    "a: \x07\n",  # PyYAML's reader refuses it
    "a: " + "[" * 200 + "]" * 200 + "\n",  # the depth guard, on libyaml's events
    "key: 'quoted'\nblock: |\n  two\n  lines\nplain: x\n",
    "a: !!float 2\nb: !!str 1.0\nc: !custom [1]\n",  # tags, dropped alike
])
def test_libyaml_gives_pyyamls_data_marks_and_errors(text):
    assert outcome(text, fast=True) == outcome(text, fast=False)
