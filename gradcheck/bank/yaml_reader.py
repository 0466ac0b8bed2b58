"""YAML for hand-written files: plain data that remembers where each field was written.

PyYAML alone reads YAML 1.1: `1e-6` becomes a string, `no` becomes False, and a repeated key
silently keeps its last value. Here scalars are resolved by the YAML 1.2 core schema (`true`,
`false`, `null`, decimal and `0x`/`0o` integers, floats with or without a dot, `.inf`, `.nan`;
everything else is a string), a repeated key is an error naming both lines, and every tag
(`!!float 2`, `!custom`) is an error at its line, so no file can ask for a Python object and a
value means what it plainly says.

Fields are addressed by paths: a tuple such as `("checks", "behaviour", "steps", 2, "backward")`,
written `checks.behaviour.steps[2].backward`.

Speed: PyYAML's pure-Python scanner and parser take most of the time of loading a bank, so when
PyYAML has libyaml, libyaml's parser (`CParser`) produces the events and the same Python composer
as before builds the nodes from them, depth guard included. Nothing else changes: the nodes and
their marks are the same (but for where a mapping or list that closes the file ends, which nothing
reads), and a file that libyaml refuses, or that holds characters PyYAML's reader refuses, is read
again by PyYAML's own parser, so that every error is PyYAML's, worded as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

import yaml
from yaml.composer import Composer
from yaml.emitter import Emitter
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.representer import SafeRepresenter
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner
from yaml.serializer import Serializer

Path = tuple[str | int, ...]

#: A file that unrolls (through aliases) into more nodes than this is refused.
MAX_NODES = 200_000
#: Lists and mappings nested deeper than this are refused (reading them recurses).
MAX_DEPTH = 100

_TAG = "tag:yaml.org,2002:"
_TOO_DEEP = f"values are nested more than {MAX_DEPTH} deep; flatten the file"
_INT = re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")


class Resolver12(BaseResolver):
    """Implicit tags of plain scalars by the YAML 1.2 core schema (shared by loader and dumper)."""

    yaml_implicit_resolvers: dict = {}


for _tag, _regexp, _first in [
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("int", rf"^(?:{_INT.pattern})$", list("-+0123456789")),
    ("float", rf"^(?:{_FLOAT.pattern})$", list("-+.0123456789")),
]:
    Resolver12.add_implicit_resolver(_TAG + _tag, re.compile(_regexp), _first)


class _GuardedComposer(Composer):
    """PyYAML's composer, refusing nesting deeper than MAX_DEPTH (it recurses once per level).

    A tag is noted in `tagged` (by the id of its node) and dropped, so that the node is read as
    its plain value: the tag is then reported without hiding the problems after it."""

    depth = 0

    def __init__(self) -> None:
        super().__init__()
        self.tagged: dict[int, str] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self.depth += 1
        try:
            event = self.peek_event()
            if self.depth > MAX_DEPTH:
                raise YamlError(_TOO_DEEP, event.start_mark.line + 1, event.start_mark.column + 1)
            tag = getattr(event, "tag", None)  # aliases have none
            if tag is not None:
                event.tag = None
                if isinstance(event, yaml.ScalarEvent):  # resolved as if written untagged
                    event.implicit = (not event.style, bool(event.style))
            node = super().compose_node(parent, index)
            if tag is not None:
                self.tagged[id(node)] = tag
            return node
        finally:
            self.depth -= 1


class _Loader(Reader, Scanner, Parser, _GuardedComposer, Resolver12):
    """All in Python: slow, and the source of every error message."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        _GuardedComposer.__init__(self)
        Resolver12.__init__(self)


_FastLoader: type | None = None
if getattr(yaml, "__with_libyaml__", False):
    from yaml.cyaml import CParser

    class _FastLoader(_GuardedComposer, CParser, Resolver12):  # type: ignore[no-redef]
        """libyaml's events, composed in Python (the composer comes first in the MRO, so
        CParser's own composing in C, which has no depth guard, is never used)."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _GuardedComposer.__init__(self)
            Resolver12.__init__(self)

        def compose_scalar_node(self, anchor: str | None) -> yaml.ScalarNode:
            node = super().compose_scalar_node(anchor)
            node.style = node.style or None  # libyaml's events say '' for plain, PyYAML None
            return node


class YamlError(ValueError):
    """A file that is not acceptable YAML; `line` and `column` are 1-based (0 when unknown).

    Repeated keys and tags do not stop the reading: the first problem is raised with the others
    in `more`, and `source` holds the data read with each key's first value and each tagged
    value read as written without its tag, so that the rest of the file can still be checked."""

    def __init__(self, message: str, line: int = 0, column: int = 0, field: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.field = field  # the path of the key written twice or the tagged value, else ""
        self.more: list[YamlError] = []
        self.source: Source | None = None


@dataclass
class Source:
    """The data of one YAML document and where each part of it was written."""

    data: Any
    text: str
    #: path -> (line, column), 1-based: of the key for a mapping entry, of the item for a list item.
    marks: dict[Path, tuple[int, int]] = field(default_factory=dict)
    #: path -> the YAML node of the value (for positions inside a string such as a program).
    nodes: dict[Path, yaml.Node] = field(default_factory=dict)

    def line_of(self, path: Path | str) -> int:
        """The line of `path`, or of its nearest ancestor that was written (1 for the root)."""
        steps = parse_path(path) if isinstance(path, str) else tuple(path)
        while steps:
            if steps in self.marks:
                return self.marks[steps][0]
            steps = steps[:-1]
        return 1

    def text_position(self, path: Path, line: int, column: int) -> tuple[int, int]:
        """Where line/column (1-based) of the string at `path` stands in the file.

        Exact for literal blocks (`|`) and one-line strings; the value's first line otherwise.
        """
        node = self.nodes.get(tuple(path))
        if node is None:
            return self.line_of(path), 0
        start = node.start_mark
        if node.style == "|":
            first = start.line + 1  # 0-based line of the block's first content line
            return first + line, _block_indent(self.text, first) + column
        if start.line == node.end_mark.line:
            quoted = 1 if node.style in ("'", '"') else 0
            return start.line + 1, start.column + quoted + column
        return start.line + 1, start.column + 1


def _block_indent(text: str, first: int) -> int:
    for line in text.splitlines()[first:]:
        if line.strip():
            return len(line) - len(line.lstrip(" "))
    return 0


def parse_path(path: str) -> Path:
    """`checks.behaviour.steps[2].backward` -> ("checks", "behaviour", "steps", 2, "backward")."""
    return tuple(int(index) if index else key
                 for key, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path))


def format_path(path: Iterable[str | int]) -> str:
    """The inverse of :func:`parse_path`."""
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else str(step))
    return text


def load(text: str) -> Source:
    """Read one YAML document; raises :class:`YamlError` with the line of the problem."""
    try:
        root, tagged = _compose(text)
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc) from None
    except yaml.YAMLError as exc:  # reader errors: bad characters or encodings
        raise YamlError(f"not readable as YAML: {exc}", 1, 1) from None
    source = Source(None, text)
    builder = _Builder(source, tagged)
    source.data = builder.value(root, ()) if root is not None else None
    if builder.problems:
        first, *others = sorted(builder.problems, key=lambda e: (e.line, e.column))
        first.more, first.source = others, source
        raise first
    return source


def _compose(text: str, fast: bool = True) -> tuple[yaml.Node | None, dict[int, str]]:
    """The document's root node and its tags (see `_GuardedComposer`): by libyaml's parser when
    it is there and accepts the text (the same nodes and marks), else by PyYAML's, whose errors
    are the ones reported."""
    if fast and _FastLoader is not None and not Reader.NON_PRINTABLE.search(text):
        try:
            return _compose_with(_FastLoader, text)
        except yaml.YAMLError:
            pass  # libyaml words its errors differently: PyYAML's parser reports this file
    return _compose_with(_Loader, text)


def _compose_with(loader_class: type, text: str) -> tuple[yaml.Node | None, dict[int, str]]:
    loader = loader_class(text)
    try:
        return loader.get_single_node(), loader.tagged
    finally:
        loader.dispose()


def _syntax_error(exc: yaml.MarkedYAMLError) -> YamlError:
    mark = exc.problem_mark or exc.context_mark
    line, column = (mark.line + 1, mark.column + 1) if mark else (0, 0)
    if "expected a single document" in str(exc.context):
        return YamlError("the file holds several documents (`---`); keep one exercise per file",
                         line, column)
    problem = exc.problem or exc.context or "not valid YAML"
    if "'\\t'" in problem:  # PyYAML's words for it: "found character '\t' that cannot start..."
        return YamlError(f"YAML syntax: a tab (column {column}); indent with spaces, not tabs "
                         "(YAML does not allow tabs there)", line, column)
    if exc.problem and exc.context and exc.context_mark:
        problem += f" {exc.context} that starts at line {exc.context_mark.line + 1}"
    return YamlError(f"YAML syntax: {problem} (column {column}); check the indentation, and quote "
                     "values that contain ': ' or start with a special character", line, column)


class _Builder:
    """Turns composed nodes into plain data, recording marks and refusing what is not wanted."""

    def __init__(self, source: Source, tagged: dict[int, str]) -> None:
        self.source = source
        self.tagged = tagged
        self.count = 0
        self.open: set[int] = set()  # nodes being built: an alias back to one of them is a cycle
        self.problems: list[YamlError] = []  # keys written twice in one mapping, and tags

    def refuse_tag(self, node: yaml.Node, path: Path) -> None:
        """Report the tag of `node`, if it had one, once (an alias visits the node again)."""
        tag = self.tagged.pop(id(node), None)
        if tag is None:
            return
        written = "!!" + tag[len(_TAG):] if tag.startswith(_TAG) else tag
        self.problems.append(YamlError(
            f"the tag {written!r} is not allowed; remove it and write the plain value (in quotes, "
            "as '1.0', for text that would read as a number)",
            *_position(node), format_path(path)))

    def value(self, node: yaml.Node, path: Path) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise _error(node, f"the file unrolls to more than {MAX_NODES} values; "
                               "use fewer aliases (*name)")
        self.source.nodes[path] = node
        self.refuse_tag(node, path)
        if isinstance(node, yaml.ScalarNode):
            return _scalar(node)
        if id(node) in self.open:
            raise _error(node, "an alias refers to a value that contains it; remove the cycle")
        if len(self.open) >= MAX_DEPTH:  # aliases can nest deeper than the text does
            raise _error(node, _TOO_DEEP)
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                items = []
                for index, item in enumerate(node.value):
                    self.source.marks[path + (index,)] = _position(item)
                    items.append(self.value(item, path + (index,)))
                return items
            return self.mapping(node, path)
        finally:
            self.open.discard(id(node))

    def mapping(self, node: yaml.MappingNode, path: Path) -> dict[str, Any]:
        result: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise _error(key_node, "a key must be a plain name, not a list or a mapping")
            if key_node.value == "<<" and key_node.style is None:
                raise _error(key_node, "merge keys (<<) are not supported; write the keys out")
            key = str(key_node.value)
            self.refuse_tag(key_node, path + (key,))
            line, column = _position(key_node)
            if key in first_line:  # reported; the first value is kept, the rest still read
                self.problems.append(YamlError(f"duplicate key {key!r} (first at line "
                                               f"{first_line[key]}); keep one of them", line,
                                               column, format_path(path + (key,))))
                continue
            first_line[key] = line
            self.source.marks[path + (key,)] = (line, column)
            result[key] = self.value(value_node, path + (key,))
        return result


def _scalar(node: yaml.ScalarNode) -> Any:
    kind = node.tag[len(_TAG):]  # one of the core schema's, the composer dropped every other
    text = node.value
    try:
        if kind == "null":
            if text not in ("", "~", "null", "Null", "NULL"):
                raise ValueError
            return None
        if kind == "bool":
            return {"true": True, "false": False}[text.lower()]
        if kind == "int":
            return int(text, 0) if text[:2] in ("0o", "0x") else int(text, 10)
        if kind == "float":
            lowered = text.lower()
            if lowered.endswith((".inf", ".nan")):
                return float(lowered.replace(".", ""))
            return float(text)
    except (ValueError, KeyError):
        raise _error(node, f"{text!r} is not a valid {kind}") from None
    return text


def _position(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _error(node: yaml.Node, message: str) -> YamlError:
    return YamlError(message, *_position(node))


# --- writing ------------------------------------------------------------------------------------


class _Dumper(Emitter, Serializer, SafeRepresenter, Resolver12):
    """Writes YAML that :func:`load` reads back to the same data (strings quoted when needed)."""

    def __init__(self, stream: Any, **_options: Any) -> None:
        Emitter.__init__(self, stream, allow_unicode=True, width=100)
        Serializer.__init__(self)
        SafeRepresenter.__init__(self, default_flow_style=False, sort_keys=False)
        Resolver12.__init__(self)


def _represent_str(dumper: _Dumper, text: str) -> yaml.ScalarNode:
    if any(c in text for c in "\r\x85\u2028\u2029"):
        style: str | None = '"'  # PyYAML writes these line breaks raw in other styles
    else:
        style = "|" if "\n" in text else None  # a line that ends its text too: a program's
    return dumper.represent_scalar(_TAG + "str", text, style=style)


_Dumper.add_representer(str, _represent_str)


def dump(data: Any) -> str:
    """YAML text for plain data (mappings keep their order; text of lines as `|` blocks)."""
    return yaml.dump(data, Dumper=_Dumper)
