"""The catalogue of classic engine bugs: each one a small, named edit of the reference engine.

A mutant is the reference engine with one bug put in, the kind students really write. Grading every
mutant against a bank (`gradcheck mutants`, gradcheck/course/mutation.py) shows which exercises catch
which bug, and which bugs no exercise catches. Each entry says the bug in a sentence a student
would understand (`bug`) and the kind of exercise that catches it (`catch`), which is the
suggestion printed when the bug survives a bank.

An edit names the definition it changes (`"MulBackward0.backward"`, `"_backward"`) and a text
found exactly once in it, so that a change to the reference engine that moves the text breaks the
catalogue loudly (tests/test_mutants.py) instead of making a mutant that is the reference itself.
An edit whose `old` is `WHOLE` replaces the whole definition.
"""

from __future__ import annotations

from dataclasses import dataclass

#: An `Edit.old` that stands for the whole definition named by `Edit.where`.
WHOLE = ""


@dataclass(frozen=True)
class Edit:
    """Replace `old`, found exactly once in the definition `where`, by `new`."""

    where: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    """One engine bug: its name, what is wrong, what would catch it, and how to put it in."""

    name: str
    bug: str
    catch: str
    edits: tuple[Edit, ...]


def _mutant(name: str, bug: str, catch: str, *edits: tuple[str, str, str]) -> Mutant:
    return Mutant(name, bug, catch, tuple(Edit(*edit) for edit in edits))


def _slope(name: str, op: str, old: str, new: str, bug: str, program: str) -> Mutant:
    """A wrong local derivative in the backward of operation `op`."""
    return _mutant(name, bug, f"an exercise whose program uses {program} and checks the "
                              "gradients at a few points of its domain",
                   (f"{op}.backward", old, new))


#: Every wrong local derivative: one per operation of gradcheck/program/ops.py (select is below).
SLOPES = (
    _slope("add-drops-second-operand", "AddBackward0",
           "return g, g", "return g, 0.0",
           "In a + b, b gets 0 instead of the incoming gradient: only a gets its share.",
           "a + b with two tensors"),
    _slope("sub-sign-error", "SubBackward0",
           "return g, -g", "return g, g",
           "In a - b, b gets +g instead of -g: a sign error.", "a - b with two tensors"),
    _slope("rsub-keeps-sign", "RsubBackward1",
           "return -g, None", "return g, None",
           "In 2 - x, x gets +g instead of -g: the minus sign is lost when the number comes "
           "first.", "a number minus a tensor (2 - x)"),
    _slope("mul-own-operand", "MulBackward0",
           "return g * _val(node._b), g * node._a._value",
           "return g * node._a._value, g * _val(node._b)",
           "In a * b, a gets g * a and b gets g * b: each slope uses the operand's own value "
           "instead of the other one's.",
           "a * b with two different tensors"),
    _slope("div-denominator-once", "DivBackward0",
           "-g * _div(_div(a, b), b)", "-g * _div(a, b)",
           "In a / b, b gets -g*a/b instead of -g*a/b**2: the denominator is divided by once.",
           "a / b with a tensor in the denominator"),
    _slope("reciprocal-slope-one-over-x", "ReciprocalBackward0",
           "-g * (r * r)", "-g * r",
           "In 2 / x, x gets -g/x instead of -g/x**2.", "a number divided by a tensor (2 / x)"),
    _slope("neg-passes-gradient", "NegBackward0",
           "return -g, None", "return g, None",
           "-x passes the gradient through unchanged, without the minus sign.", "-x"),
    _slope("pow-power-not-lowered", "PowBackward0",
           "_pow_number(node._a._value, e - 1.0)",
           "_pow_number(node._a._value, e)",
           "In x ** c, the slope is c * x**c instead of c * x**(c-1): the power is not lowered.",
           "x ** c with a number c other than 0 and 1"),
    _slope("pow-exponent-without-log", "PowBackward1",
           "node._value * _log(a)", "node._value",
           "In x ** y with a tensor y, y gets g * x**y, without the factor log(x).",
           "x ** y with two tensors"),
    _slope("pow-base-without-log", "PowBackward2",
           "node._value * _log(base)", "node._value",
           "In c ** x with a number c, x gets g * c**x, without the factor log(c).",
           "a number to the power of a tensor (2 ** x)"),
    _slope("exp-uses-input", "ExpBackward0",
           "g * node._value", "g * node._a._value",
           "exp(x) sends g * x instead of g * exp(x).", "x.exp()"),
    _slope("log-divides-by-output", "LogBackward0",
           "_div(g, node._a._value)", "_div(g, node._value)",
           "log(x) sends g / log(x) instead of g / x.", "x.log()"),
    _slope("tanh-forgets-square", "TanhBackward0",
           "1.0 - t * t", "1.0 - t",
           "tanh(x) sends g * (1 - t) instead of g * (1 - t**2).", "x.tanh()"),
    _slope("sigmoid-forgets-factor", "SigmoidBackward0",
           "g * (1.0 - s) * s", "g * (1.0 - s)",
           "sigmoid(x) sends g * (1 - s) instead of g * s * (1 - s).", "x.sigmoid()"),
    _slope("relu-skips-chain-rule", "ReluBackward0",
           "else g)", "else 1.0)",
           "relu(x) sends 1 instead of the incoming gradient: the chain rule is skipped.",
           "relu inside a larger expression (3 * x.relu())"),
    _slope("sin-sign-error", "SinBackward0",
           "g * _cos(node._a._value)", "-g * _cos(node._a._value)",
           "sin(x) sends -g * cos(x) instead of g * cos(x).", "x.sin()"),
    _slope("cos-sign-error", "CosBackward0",
           "g * -_sin(node._a._value)", "g * _sin(node._a._value)",
           "cos(x) sends g * sin(x) instead of -g * sin(x).", "x.cos()"),
    _slope("sqrt-forgets-half", "SqrtBackward0",
           "_div(g, 2.0 * node._value)", "_div(g, node._value)",
           "sqrt(x) sends g / sqrt(x) instead of g / (2 sqrt(x)): the 1/2 is forgotten.",
           "x.sqrt()"),
    _slope("abs-ignores-sign", "AbsBackward0",
           "g * _sign(node._a._value)", "g",
           "abs(x) passes the gradient unchanged, also where x is negative.",
           "x.abs() at negative x"),
    _slope("sum-divides-by-n", "SumBackward0",
           "return g, None", "return _div(g, float(len(node._a))), None",
           "v.sum() sends g / n to each element, as if it were the mean.",
           "v.sum() of a vector"),
    _slope("mean-forgets-1-over-n", "MeanBackward0",
           "_div(g, float(len(node._a)))", "g",
           "v.mean() sends g to each element instead of g / n: the 1/n is forgotten.",
           "v.mean() of a vector"),
)

#: Bugs in the graph, in backward's walk, and in the rules of .grad, no_grad and friends.
BEHAVIOUR = (
    _mutant("select-wrong-element",
            "v[i] sends its gradient to v[0], whatever i is.",
            "an exercise that selects an element other than v[0] and checks the vector's gradient",
            ("Vector.__getitem__", "SelectBackward0, item, None", "SelectBackward0, "
             "self._items[0], None")),
    _mutant("sub-as-add-neg",
            "a - b is built as a + (-b): values and gradients are right, but the graph has "
            "AddBackward0 and NegBackward0 where torch has SubBackward0.",
            "an exercise that checks grad_fn names of a - b (a graph check)",
            ("Tensor.__sub__", "return _binary(SubBackward0, self, other)",
             "return self + (-other)")),
    _mutant("grad-overwritten-between-backwards",
            "A second backward() replaces leaf.grad instead of adding to it.",
            "an exercise that calls backward() twice (retain_graph=True, or two graphs) and "
            "checks that .grad adds up",
            ("_accumulate", "g if leaf._grad is None else leaf._grad + g", "g")),
    _mutant("grad-overwritten-between-paths",
            "When a value is used twice, the gradient from the second path replaces the one "
            "from the first instead of adding to it.",
            "an exercise where one input reaches the output along two paths (x * x, x + x.exp())",
            ("_backward", "grads[p] = ga if s is None else s + ga", "grads[p] = ga"),
            ("_backward", "grads[a] = ga if s is None else s + ga", "grads[a] = ga"),
            ("_backward", "grads[b] = gb if s is None else s + gb", "grads[b] = gb")),
    _mutant("no-topological-order",
            "backward() walks the graph breadth-first from the output and passes each node's "
            "gradient on as soon as it gets there, so a node reached first by a short path "
            "passes on its gradient before the longer path's part has arrived.",
            "an exercise with a diamond whose short path is found first (a value used by a "
            "direct and by a longer path to the output)",
            ("_reachable", "node = stack.pop()", "node = stack.pop(0)"),
            ("_backward", "order.sort(key=_stamp, reverse=True)", "pass")),
    _mutant("recursive-topological-sort",
            "The graph is walked by a recursive function, so a long chain of operations "
            "overflows Python's recursion limit.",
            "an exercise with a chain of a few thousand operations",
            ("_reachable", WHOLE,
             "def _reachable(roots):\n"
             "    found, seen = [], set()\n\n"
             "    def visit(node):\n"
             "        if node._a is None or node in seen:\n"
             "            return\n"
             "        seen.add(node)\n"
             "        for p in _operands(node):\n"
             "            if isinstance(p, Scalar):\n"
             "                visit(p)\n"
             "        found.append(node)\n\n"
             "    for root in roots:\n"
             "        visit(root)\n"
             "    return found\n")),
    _mutant("grad-starts-at-zero",
            "x.grad is 0 before any backward() instead of None.",
            "an exercise that reads .grad of a leaf before calling backward()",
            ("Tensor.grad", "            return None\n",
             "            return self._like([0.0] * len(values))\n")),
    _mutant("grad-kept-on-non-leaves",
            "Every intermediate value keeps its .grad, as if retain_grad() had been called on "
            "each one.",
            "an exercise that reads .grad of a non-leaf without retain_grad()",
            ("_backward", "        if node._grad is not None:\n            _retain(node, g)\n",
             "        kept = node._grad\n"
             "        node._grad = kept + g if type(kept) is float else g\n")),
    _mutant("retain-grad-ignored",
            "retain_grad() does nothing, so a non-leaf never gets a .grad.",
            "an exercise that calls retain_grad() on an intermediate value and reads its .grad",
            ("Tensor.retain_grad", "if not self.is_leaf:", "if False:")),
    _mutant("retain-graph-ignored",
            "backward(retain_graph=True) frees the graph anyway, so a second backward() fails.",
            "an exercise that calls backward(retain_graph=True) and then backward() again",
            ("Tensor.backward", "_backward(self._nodes(), seeds, retain_graph, create_graph)",
             "_backward(self._nodes(), seeds, False, create_graph)")),
    _mutant("graph-never-freed",
            "The graph is never freed, so a second backward() through it works instead of "
            "raising torch's error.",
            "an exercise that calls backward() twice without retain_graph and expects the error",
            ("_backward", "    if not retain_graph:\n        for node in order:",
             "    if False:\n        for node in order:")),
    _mutant("no-grad-ignored",
            "Operations inside `with no_grad():` are still recorded.",
            "an exercise that computes inside no_grad() and checks that the result has no "
            "grad_fn",
            ("no_grad.__enter__", "_grad_enabled = False", "_grad_enabled = True")),
    _mutant("detach-keeps-history",
            "x.detach() returns x itself, so gradients still flow through the detached value.",
            "an exercise that uses x.detach() in the program and checks the gradients",
            ("Tensor.detach", "return self._like(_values(self))", "return self")),
    _mutant("reduction-of-0d-returns-self",
            "sum() and mean() of a 0-d tensor return the tensor itself: the value is right, but "
            "the result is a leaf with no grad_fn where torch makes a SumBackward0 (MeanBackward0) "
            "node.",
            "an exercise that sums a 0-d leaf and checks the result's grad_fn (a graph check)",
            ("Tensor.sum", "return _reduce(SumBackward0, self)",
             "return self if isinstance(self, Scalar) else _reduce(SumBackward0, self)"),
            ("Tensor.mean", "return _reduce(MeanBackward0, self)",
             "return self if isinstance(self, Scalar) else _reduce(MeanBackward0, self)")),
    _mutant("implicit-seed-for-vectors",
            "backward() on a vector without gradient= seeds every element with 1 instead of "
            "raising torch's error.",
            "an exercise that calls backward() on a vector output and expects the error",
            ("_seeds", "if t.requires_grad and len(nodes) != 1:", "if False:")),
    _mutant("gradient-argument-ignored",
            "backward(gradient=w) ignores w and seeds every element with 1.",
            "an exercise that calls backward(gradient=w) on a vector with w not all ones",
            ("_seeds", "else _values(gradient)", "else [1.0] * len(nodes)")),
    _mutant("backward-without-grad-allowed",
            "backward() on a value that does not require grad silently does nothing instead of "
            "raising torch's error.",
            "an exercise that calls backward() on a result of constants and expects the error",
            ("_seeds", "if not t.requires_grad or t._op is NoGradView:", "if False:")),
    _mutant("constants-recorded",
            "Operations on tensors that do not require grad are recorded anyway: results of "
            "constants get a grad_fn.",
            "an exercise that combines tensors without requires_grad and checks that the "
            "result has no grad_fn",
            ("_binary", "tracked = a._op is not None or b._op is not None", "tracked = True"),
            ("_binary", "tracked = a._op is not None\n", "tracked = True\n")),
    _mutant("non-leaf-requires-grad-off-allowed",
            "y.requires_grad = False on a computed value is accepted instead of raising torch's "
            "error.",
            "an exercise that switches requires_grad off on a non-leaf and expects the error",
            ("Tensor.requires_grad_", "raise RuntimeError(_NON_LEAF_FLAG)", "pass")),
)

#: Where the slope is undefined, torch picks a value; students often pick another.
KINKS = (
    _mutant("relu-kink-one",
            "relu'(0) is taken as 1; torch uses 0.",
            "an exercise that checks relu's gradient at exactly 0 against torch",
            ("ReluBackward0.backward", "node._value <= 0.0", "node._a._value < 0.0")),
    _mutant("abs-kink-one",
            "abs'(0) is taken as 1; torch uses 0.",
            "an exercise that checks abs's gradient at exactly 0 against torch",
            ("AbsBackward0.backward", "g * _sign(node._a._value)",
             "g * (1.0 if node._a._value >= 0.0 else -1.0)")),
    _mutant("sqrt-kink-zero",
            "sqrt'(0) is taken as 0 to avoid dividing by zero; torch gives inf.",
            "an exercise that checks sqrt's gradient at exactly 0 against torch",
            ("SqrtBackward0.backward", "_div(g, 2.0 * node._value)",
             "(0.0 if node._value == 0.0 else _div(g, 2.0 * node._value))")),
    _mutant("pow-zero-exponent-nan",
            "x ** 0 sends 0 * x**-1, which is nan at x = 0; torch sends 0.",
            "an exercise that checks the gradient of x ** 0 at x = 0 against torch",
            ("PowBackward0.backward", "(0.0 if e == 0.0 else g * (e * _pow_number(node._a._value, "
             "e - 1.0)))", "g * (e * _pow_number(node._a._value, e - 1.0))")),
)

#: Second order: gradients that cannot be differentiated again, or are differentiated wrongly.
SECOND_ORDER = (
    _mutant("pow-graph-on-floats",
            "With create_graph=True, x ** c computes its slope c * x**(c-1) on plain floats, so "
            "the gradient has no history: its own derivative is lost.",
            "an exercise that differentiates the gradient of x ** 2 again (create_graph=True), "
            "and checks that the gradient requires grad",
            ("PowBackward0.graph", "g * (e * node._a ** (e - 1.0))",
             "g * (e * _pow_number(node._a._value, e - 1.0))")),
    _mutant("relu-graph-on-floats",
            "With create_graph=True, relu's slope (0 or 1) is a float, so a gradient through "
            "relu alone has no history; torch's has one (its derivative is 0).",
            "an exercise that reads requires_grad of a gradient through relu after "
            "backward(create_graph=True)",
            ("ReluBackward0.graph", "g * _unary(StepBackward0, node)",
             "g * (1.0 if node._value > 0.0 else 0.0)")),
    _mutant("tanh-graph-half-detached",
            "With create_graph=True, tanh's slope 1 - t**2 is built as 1 - t * t.value: the value "
            "is right, but one factor of t has no history, so the second derivative is wrong.",
            "an exercise that checks the second derivative of tanh (a Hessian check)",
            ("TanhBackward0.graph", "g * (1.0 - node * node)", "g * (1.0 - node * node._value)")),
    _mutant("sigmoid-graph-sign-error",
            "With create_graph=True only, sigmoid sends g * (s - 1) * s instead of "
            "g * (1 - s) * s: first-order backward() is right, the graph version is not.",
            "an exercise that differentiates through sigmoid with create_graph=True",
            ("SigmoidBackward0.graph", "g * (1.0 - node) * node", "g * (node - 1.0) * node")),
    _mutant("create-graph-ignored",
            "backward(create_graph=True) computes the gradients on floats anyway, so .grad has "
            "no history and cannot be differentiated again.",
            "an exercise that calls backward(create_graph=True) and then backward on x.grad",
            ("Tensor.backward", "_seeds(self, gradient, create_graph, 0)",
             "_seeds(self, gradient, False, 0)"),
            ("Tensor.backward", "_backward(self._nodes(), seeds, retain_graph, create_graph)",
             "_backward(self._nodes(), seeds, retain_graph)")),
    _mutant("retain-graph-default-false",
            "retain_graph defaults to False even with create_graph=True, so the graph is freed "
            "and a second backward() through it raises.",
            "an exercise that calls backward(create_graph=True) and then backward() again",
            ("Tensor.backward", "retain_graph = create_graph", "retain_graph = False")),
    _mutant("grad-with-history-replaced",
            "A backward() into a leaf whose .grad has a history (after create_graph=True) "
            "replaces .grad instead of adding to it.",
            "an exercise that calls x.grad.backward() after backward(create_graph=True) and "
            "reads x.grad",
            ("_accumulate", "g if leaf._grad is None else leaf._grad + g",
             "g if leaf._grad is None or type(leaf._grad) is not float else leaf._grad + g")),
)

#: The whole catalogue, in the order the kill matrix lists it.
CATALOGUE: tuple[Mutant, ...] = SLOPES + BEHAVIOUR + KINKS + SECOND_ORDER
