"""The computational graph as a picture: values and gradients on the nodes, slopes on the edges.

Drawn with the `graphviz` Python package, which writes graphviz's language; turning that into an
.svg or .png needs graphviz's `dot` program (Debian: `apt-get install graphviz`). A .dot file
needs only the Python package, so it can be written anywhere and rendered elsewhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from gradcheck.grading.chain_rule import Walk
from gradcheck.grading.digits import number_text
from gradcheck.grading.localise import Finding, observed_text

FORMATS = {".svg": "svg", ".png": "png", ".dot": None}
MAX_NODES = 400  # larger graphs make pictures no one can read
NO_DOT = ("graphviz's `dot` program is not installed; install it (apt-get install graphviz) or "
          "write a .dot file")
_WRONG = "#c0392b"


class DrawingError(Exception):
    """The picture cannot be made; the message says what to do."""


def dot_source(w: Walk, found: Mapping[int, Any] | None = None,
               finding: Finding | None = None) -> str:
    """The graph in graphviz's language. `found` holds a submission's trace records by node id;
    `finding` marks the node (and edge) where it departs from torch."""
    try:
        import graphviz
    except ImportError:
        raise DrawingError("the graphviz Python package is not installed (pip install graphviz, "
                           "or gradcheck[graph])") from None
    shown = w.needed()
    if len(shown) > MAX_NODES:
        raise DrawingError(f"the graph has {len(shown)} nodes; pictures are drawn up to "
                           f"{MAX_NODES}")
    graph = graphviz.Digraph("gradcheck", graph_attr={"rankdir": "LR"},
                             node_attr={"fontname": "Helvetica", "fontsize": "11"},
                             edge_attr={"fontname": "Helvetica", "fontsize": "9"})
    bad_node = finding.node if finding else None
    bad_edge = (finding.node, finding.arg) if finding and finding.arg is not None else None
    for i in shown:
        node = w.node(i)
        lines = [node.name if node.op == "input" else
                 f"{node.name} = {node.text}" if node.name else node.text,
                 w.grad_fn(i) or "input",
                 f"value {number_text(w.values[i])}", f"grad {number_text(w.grads[i])}"]
        if found is not None:
            lines += [f"yours: value {observed_text(found[i]['value'])}",
                      f"yours: grad {observed_text(found[i]['grad'])}"]
        style = {"shape": "ellipse"} if node.op == "input" else {"shape": "box",
                                                                  "style": "rounded"}
        if i == bad_node:
            lines.append("the submission departs here")
            # `class` names the node in an SVG (the HTML report's page finds it by it)
            style = {**style, "class": "faulty", "color": _WRONG, "penwidth": "2.5",
                     "fillcolor": "#fdecea",
                     "style": ",".join(filter(None, [style.get("style"), "filled"]))}
        graph.node(f"n{i}", "\\n".join(lines), **style)
        edges = {e.slot: e for e in w.edges(i)}
        for slot, a in enumerate(node.args):
            if w.node(a).op == "const":
                graph.node(f"n{a}", w.node(a).text, shape="plaintext")
                graph.edge(f"n{a}", f"n{i}")
                continue
            e = edges.get(slot)
            label = f"slope {number_text(e.slope)}\\npasses {number_text(e.passed)}" if e else ""
            mark = {"color": _WRONG, "penwidth": "2"} if bad_edge == (i, a) else {}
            graph.edge(f"n{a}", f"n{i}", label, **mark)
    return graph.source


def draw(w: Walk, path: str | Path, found: Mapping[int, Any] | None = None,
         finding: Finding | None = None) -> Path:
    """Write the graph to `path`: .svg or .png (rendered by `dot`) or .dot (the source)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise DrawingError(f"{path}: give a file ending in .svg, .png or .dot")
    source = dot_source(w, found, finding)
    if FORMATS[suffix] is None:
        path.write_text(source)
        return path
    path.write_bytes(_render(source, FORMATS[suffix]))
    return path


def svg(w: Walk, found: Mapping[int, Any] | None = None, finding: Finding | None = None) -> str:
    """The picture as an `<svg>` element to put inside a page (no XML prologue, no DOCTYPE)."""
    text = _render(dot_source(w, found, finding), "svg").decode("utf-8")
    return text[text.index("<svg"):]


def _render(source: str, format: str) -> bytes:
    import graphviz

    try:
        return graphviz.Source(source).pipe(format=format)
    except graphviz.ExecutableNotFound:
        raise DrawingError(NO_DOT) from None
    except graphviz.CalledProcessError as exc:
        raise DrawingError(f"graphviz's dot failed: {exc.stderr!r:.300}") from None

