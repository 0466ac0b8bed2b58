"""The reference engine with one deliberate bug (or a few), for tests of the feedback.

`load(*names)` reads reference/__init__.py, applies the named mutations and returns the result as
a new module. Each mutation is a textual change inside one class or function of the reference
(its region); the text to change must be there, so a reference that moves on breaks this file
loudly rather than silently testing a correct engine. The worker passes no settings to a
submission, so a test writes a small submission file that calls `load` with its bug's name.
"""

import types
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[2] / "reference" / "__init__.py"

_TORCH_ORDER = "order.sort(key=_stamp, reverse=True)  # newest first: torch's order"
_BREADTH_FIRST = """def _breadth_first(roots):
    order = [r for r in roots if r._a is not None]
    seen = set(order)
    for node in order:
        for p in _operands(node):
            if isinstance(p, Scalar) and p._a is not None and p not in seen:
                seen.add(p)
                order.append(p)
    return order


"""
#: micrograd's order: depth first from the output, each node's operands taken as a set (its
#: `_prev`), so the order in which a node's consumers add their gradients changes with the
#: set's, from run to run
_SET_DEPTH_FIRST = """def _set_depth_first(roots):
    order, seen = [], set()
    stack = [(r, False) for r in roots if r._a is not None]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
        elif node not in seen:
            seen.add(node)
            stack.append((node, True))
            stack.extend((p, False) for p in set(_operands(node))
                         if isinstance(p, Scalar) and p._a is not None and p not in seen)
    return order[::-1]


"""

#: name -> [(region header, text, replacement), ...]
MUTANTS = {
    # wrong local derivatives, one per operation
    "add": [("class AddBackward0", "return g, g", "return g, 0.0")],
    "sub": [("class SubBackward0", "return g, -g", "return g, g")],
    "rsub": [("class RsubBackward1", "return -g, None", "return g, None")],
    "mul": [("class MulBackward0", "return g * _val(node._b),", "return g * node._a._value,")],
    "div": [("class DivBackward0", "-g * _div(_div(a, b), b)", "g * _div(_div(a, b), b)")],
    "reciprocal": [("class ReciprocalBackward0", "-g * (r * r)", "-g * r")],
    "neg": [("class NegBackward0", "return -g, None", "return g, None")],
    "pow": [("class PowBackward0", "node._a._value, e - 1.0", "node._a._value, e")],
    "pow_tensor": [("class PowBackward1", "node._value * _log(a)", "_log(a)")],
    "pow_base": [("class PowBackward2", "node._value * _log(base)", "node._value")],
    "exp": [("class ExpBackward0", "return g * node._value, None", "return g, None")],
    "log": [("class LogBackward0", "_div(g, node._a._value)", "g * node._a._value")],
    "tanh": [("class TanhBackward0", "1.0 - t * t", "1.0 - t")],
    "sigmoid": [("class SigmoidBackward0", "g * (1.0 - s) * s", "g * s")],
    "relu": [("class ReluBackward0", "0.0 if node._value <= 0.0 else g",
              "g if node._value <= 0.0 else 0.0")],
    "sin": [("class SinBackward0", "g * _cos(node._a._value)", "g * _sin(node._a._value)")],
    "cos": [("class CosBackward0", "g * -_sin(node._a._value)", "g * _sin(node._a._value)")],
    "sqrt": [("class SqrtBackward0", "_div(g, 2.0 * node._value)", "_div(g, node._value)")],
    "abs": [("class AbsBackward0", "g * _sign(node._a._value)", "g")],
    "sum": [("class SumBackward0", "return g, None", "return g * len(node._a), None")],
    "mean": [("class MeanBackward0", "_div(g, float(len(node._a)))", "g")],  # forgot 1/n
    "select": [("class SelectBackward0", "return g, None", "return 0.0, None")],
    # `=` instead of `+=`: a node used twice keeps only the last gradient it receives
    "overwrite": [("def _backward", " if s is None else s + ga", ""),
                  ("def _backward", " if s is None else s + gb", "")],
    # `=` instead of `+=` in .grad: a second backward pass replaces the first one's gradient
    "overwrite_grad": [("def _accumulate", "g if leaf._grad is None else leaf._grad + g", "g")],
    # a wrong forward
    "sigmoid_forward": [("class SigmoidBackward0", "_exp(-a)", "_exp(a)")],
    # no retain_grad(): the gradients inside the graph cannot be read
    "no_retain_grad": [("    def retain_grad", "def retain_grad(", "def _retain_grad(")],
    # breadth-first from the output, each node once: += is right, but a node reached first by a
    # short path passes its gradient on before the longer paths' share has arrived
    "breadth_first": [("def _stamp", "def _stamp(", _BREADTH_FIRST + "def _stamp("),
                      ("def _backward", _TORCH_ORDER, "order = _breadth_first(roots)")],
    # the order of a set: it changes from one backward to the next (here: every other call is
    # breadth-first), so the same backward gives different gradients
    "set_order": [("def _stamp", "def _stamp(", _BREADTH_FIRST + "_calls = [0]\n\n\ndef _stamp("),
                  ("def _backward", _TORCH_ORDER, _TORCH_ORDER + "\n    _calls[0] += 1\n"
                   "    if _calls[0] % 2 == 0:\n        order = _breadth_first(roots)")],
    "set_depth_first": [("def _stamp", "def _stamp(", _SET_DEPTH_FIRST + "def _stamp("),
                        ("def _backward", _TORCH_ORDER, "order = _set_depth_first(roots)")],
}


def _region(source: str, header: str) -> tuple[int, int]:
    """The span of the class or function whose definition line starts with `header`: up to the
    next line indented no deeper than that line (a signature's closing parenthesis aside)."""
    start = source.index("\n" + header) + 1
    indent = len(header) - len(header.lstrip())
    lines = source[start:].splitlines(keepends=True)
    end = start + len(lines[0])
    for line in lines[1:]:
        body = line.strip()
        if body and len(line) - len(line.lstrip()) <= indent and not body.startswith(")"):
            break
        end += len(line)
    return start, end


def source(*names: str) -> str:
    """The reference's source with the named mutations applied."""
    text = REFERENCE.read_text()
    for name in names:
        for header, old, new in MUTANTS[name]:
            start, end = _region(text, header)
            part = text[start:end]
            if old not in part:
                raise ValueError(f"mutation {name}: {old!r} is not in {header}")
            text = text[:start] + part.replace(old, new) + text[end:]
    return text


def load(*names: str) -> types.ModuleType:
    """The reference engine with the named mutations, as a module."""
    module = types.ModuleType("mutant_" + "_".join(names))
    module.__file__ = str(REFERENCE)
    exec(compile(source(*names), str(REFERENCE), "exec"), module.__dict__)
    return module
