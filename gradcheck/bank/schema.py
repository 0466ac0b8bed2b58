"""The format as files: the JSON Schema that editors use, generated from the models, the schema
line an exercise file starts with, and an exercise written back as YAML.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

from gradcheck.bank import yaml_reader
from gradcheck.bank.course_file import FILE_NAME
from gradcheck.bank.models import Exercise

SCHEMA_PATH = Path(__file__).parent / "schema" / "exercise.schema.json"
SCHEMA_COMMENT = "# yaml-language-server: $schema="
#: Where a course keeps its copy of the schema, from its folder (`gradcheck init` writes it).
COURSE_SCHEMA = Path("schema") / "exercise.schema.json"



@functools.cache
def json_schema() -> dict[str, Any]:
    """The draft-07 JSON Schema of an exercise file, for editors (yaml-language-server)."""
    generated = Exercise.model_json_schema(ref_template="#/definitions/{model}")
    definitions = generated.pop("$defs", {})
    schema = {"$schema": "http://json-schema.org/draft-07/schema#",
              "$comment": "Generated from gradcheck/bank/models.py by `python -m gradcheck.bank.schema "
                          "--write-schema`; do not edit.",
              **generated, "definitions": definitions}
    return _draft07(schema)


def _draft07(node: Any) -> Any:
    """Tidy pydantic's output for draft-07 readers: `$ref` stands alone there, and a mapping whose
    keys are checked by a pattern admits no other keys."""
    if isinstance(node, list):
        return [_draft07(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _draft07(value) for key, value in node.items()
            if not (key == "default" and value is None)}
    if "patternProperties" in node:
        node.setdefault("additionalProperties", False)
    if isinstance(node.get("properties"), dict):
        node["properties"] = {key: {k: v for k, v in value.items() if k != "title"}
                              for key, value in node["properties"].items()}
    if "$ref" in node and len(node) > 1:
        node = {"allOf": [{"$ref": node.pop("$ref")}], **node}
    return node


def schema_keys(path: yaml_reader.Path) -> list[str]:
    """The keys the schema allows in the mapping at `path` of an exercise."""
    return list(schema_node(path).get("properties", {}))


def schema_node(path: yaml_reader.Path) -> dict[str, Any]:
    """The schema of the value at `path` of an exercise, references resolved (of a choice, the
    branch that is a mapping or a list), so that messages can say what belongs there."""
    schema = json_schema()
    node: Any = schema
    for step in (*path, None):
        while True:  # resolve references and pick the object/array branch of a choice
            if "$ref" in node:
                node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
            elif "allOf" in node or "anyOf" in node:
                branches = node.get("allOf") or node["anyOf"]
                node = next((b for b in branches if "$ref" in b or "properties" in b
                             or "items" in b), branches[0])
            else:
                break
        if step is None:
            break
        if isinstance(step, int):
            node = node.get("items", {})
        else:
            node = node.get("properties", {}).get(step) or next(
                iter(node.get("patternProperties", {}).values()), {})
    return node


def write_schema(path: Path = SCHEMA_PATH) -> Path:
    """Write the JSON Schema file (committed, and shipped with the package)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(json_schema(), indent=2) + "\n", encoding="utf-8")
    return path


def schema_comment(exercise_file: Path) -> str:
    """The first line of an exercise file at `exercise_file`: the schema, by a relative path;
    in a course that keeps a copy of it, that copy, which moves with the course (a path into
    this machine's gradcheck would break in a teammate's clone or the course's CI)."""
    folder = Path(exercise_file).resolve().parent
    schema = next((course / COURSE_SCHEMA for course in (folder, *folder.parents)
                   if (course / FILE_NAME).is_file() and (course / COURSE_SCHEMA).is_file()),
                  SCHEMA_PATH)
    return SCHEMA_COMMENT + Path(os.path.relpath(schema, folder)).as_posix()


def main(argv: list[str] | None = None) -> int:
    """`python -m gradcheck.bank.schema --write-schema`."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["--write-schema"]:
        print("usage: python -m gradcheck.bank.schema --write-schema", file=sys.stderr)
        return 2
    print(f"wrote {write_schema()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
