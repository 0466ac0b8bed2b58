"""The committed JSON Schema: generated from the models, readable as draft-07, and in agreement
with the loader on what it accepts."""

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest

from gradcheck.bank import yaml_reader
from gradcheck.bank.loader import from_data, load_exercise
from gradcheck.bank.models import SUFFIX
from gradcheck.bank.problems import ExerciseError
from gradcheck.bank.schema import SCHEMA_PATH, json_schema

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "exercise-format.md"
GOOD = sorted((ROOT / "exercises").rglob("*" + SUFFIX)) + [
    ROOT / "tests" / "data" / "bank" / "good-two-inputs.exercise.yaml"]


@pytest.fixture(scope="module")
def validator():
    return jsonschema.Draft7Validator(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def test_committed_schema_is_up_to_date():
    committed = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert committed == json_schema(), (
        "the schema is out of date: run `python -m gradcheck.bank.schema --write-schema`")


def test_schema_is_valid_draft_07_with_local_references():
    schema = json_schema()
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)
    text = json.dumps(schema)
    assert "$defs" not in text and "prefixItems" not in text
    for ref in re.findall(r'"\$ref": "([^"]+)"', text):
        assert ref.startswith("#/definitions/") and ref.rsplit("/", 1)[1] in schema["definitions"]


def _objects(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from _objects(value)


def test_every_object_refuses_unknown_keys_and_ref_stands_alone():
    for node in _objects(json_schema()):
        if node.get("type") == "object":
            assert node.get("additionalProperties") is False, node
        if "$ref" in node:
            assert list(node) == ["$ref"], node  # draft-07 ignores keywords beside $ref


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_good_exercises_satisfy_the_schema(validator, path):
    load_exercise(path)
    data = yaml_reader.load(path.read_text(encoding="utf-8")).data
    assert list(validator.iter_errors(data)) == []


def _set(data, path, value):
    *parents, last = yaml_reader.parse_path(path)
    for step in parents:
        data = data[step] if isinstance(step, int) else data.setdefault(step, {})
    data[last] = value


#: Mistakes both the models and the schema must refuse: (field path, value written there).
MISTAKES = [
    ("checks.behaviour.steps[1].backward.retain_graf", True),
    ("inputs.x.value", "three"),
    ("inputs.x.value", []),
    ("inputs.x.requires_grad", "no"),
    ("points", 0),
    ("id", "Chain Rule"),
    ("visibility", "public"),
    ("convention", "numpy"),
    ("checks.gradients.oracles", ["fd", "tensorflow"]),
    ("checks.sampled.count", 0),
    ("checks.behaviour.steps[0]", {"backward": {}, "zero_grad": ["x"]}),
    ("checks.behaviour.steps[0]", {"expect": ["grad.x"]}),
    ("checks.behaviour.steps[0].expect", ["grad_x"]),
    ("checks.behaviour.steps[0].zero_grad", []),
    ("checks.graph.names", []),
    ("tolerance.fd", {"atol": 1e-6}),
    ("inputs.x.domain.avoid", [".5"]),
    ("timeout", -1),
]


@pytest.mark.parametrize("path, value", MISTAKES, ids=[f"{p}={v!r}" for p, v in MISTAKES])
def test_models_and_schema_refuse_the_same_mistakes(validator, path, value):
    source = ROOT / "exercises" / "02-backward" / "chain-rule.exercise.yaml"
    data = copy.deepcopy(yaml_reader.load(source.read_text(encoding="utf-8")).data)
    _set(data, path, value)
    with pytest.raises(ExerciseError):
        from_data(data)
    assert list(validator.iter_errors(data)), f"the schema accepts {path} = {value!r}"


def _property_names(schema):
    return {name for node in _objects(schema) for name in node.get("properties", {})}


def test_every_field_is_documented():
    doc = DOC.read_text(encoding="utf-8")
    missing = sorted(name for name in _property_names(json_schema()) if f"`{name}`" not in doc)
    assert not missing, f"{DOC.name} does not mention: {', '.join(missing)}"


def test_complete_examples_in_the_doc_load():
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    complete = [b for b in blocks if re.search(r"^id: ", b, re.M)]
    assert complete
    for block in complete:
        from_data(yaml_reader.load(block).data, file=DOC.name)
