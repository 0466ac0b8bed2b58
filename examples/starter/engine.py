"""My autograd engine: a small, scalar mirror of torch's autograd.

This file is the starter. Every function and method of the engine protocol is here (see
docs/protocol.md), with a docstring that says what it must do, and a body that raises
NotImplementedError. Replace the bodies one step at a time, in the order of the steps below, and
grade after each step:

    gradcheck grade engine.py

The grader's messages quote the NotImplementedError of the first thing an exercise needs that is
still missing, so they tell you what to write next. The steps follow the course's modules:

    step 1  tensor(), Tensor.__init__, tolist(), the four autograd attributes  (01-graph)
    step 2  + - * / ** and unary minus, each recording a node with a grad_fn   (01-graph)
    step 3  backward() on a scalar output                                      (02-backward)
    step 4  the functions exp log tanh sigmoid relu sin cos sqrt abs           (06-operations)
    step 5  1-D tensors: sum(), mean(), v[i], a number with a vector           (02, 06)
    step 6  no_grad(), detach(), requires_grad_()                              (03-autograd-off)
    step 7  retain_grad(), retain_graph, backward(gradient=...), the errors    (02, 04, 05)
    step 8  create_graph=True and grad(): gradients you can differentiate      (08-higher-order)

Whenever you wonder what the right behaviour is, ask torch: the grader compares your engine with
torch in float64, step by step. You may organise the inside as you like (helper classes, other
modules next to this file); only the names below are part of the protocol.
"""

from __future__ import annotations

from typing import Any


def _todo(step: int, what: str) -> NotImplementedError:
    """The error every stub raises: it names the step, which the grader's message shows."""
    return NotImplementedError(f"step {step}: {what} is not written yet (see its docstring in "
                               "engine.py)")


# --- step 1: tensors and their values ------------------------------------------------------------


def tensor(data: float | list[float], requires_grad: bool = False) -> Tensor:
    """A new leaf tensor, like torch.tensor(data, dtype=torch.float64, requires_grad=...).

    `data` is a number (a 0-d tensor) or a flat list of at least one number (a 1-D tensor).
    Most engines just return Tensor(data, requires_grad).
    """
    raise _todo(1, "tensor(data, requires_grad)")


class Tensor:
    """A value (a float, or a list of floats for a 1-D tensor) and what autograd knows of it.

    Attributes every tensor has (plain attributes or properties), as in torch:

    - requires_grad: whether operations on it are recorded.
    - grad: None until a backward pass reaches it; then its gradient, as a tensor without
      history (or a float, or a list of floats). Assignable: `t.grad = None` resets it.
    - grad_fn: None for a leaf; for a result of a recorded operation, a GradFn.
    - is_leaf: True for tensors made by tensor(), detach() or under no_grad(), and for anything
      that does not require grad; False for results of recorded operations.
    """

    def __init__(self, data: float | list[float], requires_grad: bool = False) -> None:
        """Store the value as float(s), and set the four attributes above for a new leaf."""
        raise _todo(1, "Tensor.__init__")

    def tolist(self) -> float | list[float]:
        """The value as a Python float (0-d tensor) or a list of floats (1-D tensor)."""
        raise _todo(1, "Tensor.tolist()")

    # --- step 2: arithmetic, recorded --------------------------------------------------------
    #
    # Each operation computes its value and, if an operand requires grad (and recording is on,
    # see step 6), returns a non-leaf whose grad_fn remembers the operands and whatever the
    # backward pass will need to compute the local slopes. The other operand may be a Python
    # number: a constant, which gets no gradient and leaves no node.

    def __add__(self, other: Tensor | float) -> Tensor:
        """self + other (AddBackward0)."""
        raise _todo(2, "Tensor.__add__ (a + b)")

    def __radd__(self, other: float) -> Tensor:
        """other + self, when other is a number (AddBackward0)."""
        raise _todo(2, "Tensor.__radd__ (2 + x)")

    def __sub__(self, other: Tensor | float) -> Tensor:
        """self - other (SubBackward0)."""
        raise _todo(2, "Tensor.__sub__ (a - b)")

    def __rsub__(self, other: float) -> Tensor:
        """other - self, when other is a number (torch names it RsubBackward1)."""
        raise _todo(2, "Tensor.__rsub__ (2 - x)")

    def __mul__(self, other: Tensor | float) -> Tensor:
        """self * other (MulBackward0)."""
        raise _todo(2, "Tensor.__mul__ (a * b)")

    def __rmul__(self, other: float) -> Tensor:
        """other * self, when other is a number (MulBackward0)."""
        raise _todo(2, "Tensor.__rmul__ (2 * x)")

    def __truediv__(self, other: Tensor | float) -> Tensor:
        """self / other (DivBackward0)."""
        raise _todo(2, "Tensor.__truediv__ (a / b)")

    def __rtruediv__(self, other: float) -> Tensor:
        """other / self, when other is a number (torch records MulBackward0: other * 1/self)."""
        raise _todo(2, "Tensor.__rtruediv__ (2 / x)")

    def __pow__(self, other: Tensor | float) -> Tensor:
        """self ** other: PowBackward0 for a number exponent, PowBackward1 for a tensor one."""
        raise _todo(2, "Tensor.__pow__ (a ** b)")

    def __rpow__(self, other: float) -> Tensor:
        """other ** self, when other is a number (PowBackward2)."""
        raise _todo(2, "Tensor.__rpow__ (2 ** x)")

    def __neg__(self) -> Tensor:
        """-self (NegBackward0)."""
        raise _todo(2, "Tensor.__neg__ (-x)")

    # --- step 3: the backward pass -----------------------------------------------------------

    def backward(self, gradient: Tensor | None = None, retain_graph: bool | None = None,
                 create_graph: bool = False) -> None:
        """Add d(self)/d(leaf) into the .grad of every leaf that requires grad and that self
        depends on.

        Start with gradient 1 at self, then visit the graph's nodes in reverse topological
        order (each node after every node that uses it), without recursion: graphs can be
        thousands of nodes deep. Each node multiplies the gradient it received by its local
        slopes and adds the results into its operands' gradients. Leaves add into .grad
        (None means nothing yet); non-leaves keep no .grad (until step 7's retain_grad()).

        Step 7 adds the rest: `gradient` (a vector-Jacobian product for a 1-D output),
        `retain_graph` (None means False, until step 8), and the errors torch raises.

        Step 8 adds `create_graph`: when it is True, compute every local slope and every sum of
        gradients with your tensor operations instead of floats, so that the .grad that comes
        out is a tensor with a history of its own (requires_grad True, is_leaf False wherever
        it depends on a leaf that requires grad), which backward() can differentiate again.
        `retain_graph` then defaults to True.
        """
        raise _todo(3, "Tensor.backward()")

    # --- step 4: functions -------------------------------------------------------------------
    #
    # Each is elementwise and recorded like the arithmetic of step 2, with its own local slope.
    # At a kink or the edge of a domain, give what torch gives (try it), not a Python exception.

    def exp(self) -> Tensor:
        """e ** self (ExpBackward0)."""
        raise _todo(4, "Tensor.exp()")

    def log(self) -> Tensor:
        """Natural logarithm (LogBackward0)."""
        raise _todo(4, "Tensor.log()")

    def tanh(self) -> Tensor:
        """Hyperbolic tangent (TanhBackward0)."""
        raise _todo(4, "Tensor.tanh()")

    def sigmoid(self) -> Tensor:
        """1 / (1 + e ** -self) (SigmoidBackward0)."""
        raise _todo(4, "Tensor.sigmoid()")

    def relu(self) -> Tensor:
        """max(self, 0) (ReluBackward0)."""
        raise _todo(4, "Tensor.relu()")

    def sin(self) -> Tensor:
        """Sine (SinBackward0)."""
        raise _todo(4, "Tensor.sin()")

    def cos(self) -> Tensor:
        """Cosine (CosBackward0)."""
        raise _todo(4, "Tensor.cos()")

    def sqrt(self) -> Tensor:
        """Square root (SqrtBackward0)."""
        raise _todo(4, "Tensor.sqrt()")

    def abs(self) -> Tensor:
        """Absolute value (AbsBackward0)."""
        raise _todo(4, "Tensor.abs()")

    # --- step 5: 1-D tensors -----------------------------------------------------------------
    #
    # Step 2's operations must also combine a 1-D tensor with a number, a 0-d tensor or a 1-D
    # tensor of the same length, elementwise.

    def sum(self) -> Tensor:
        """The sum of the elements, a 0-d tensor (SumBackward0). One node, however long."""
        raise _todo(5, "Tensor.sum()")

    def mean(self) -> Tensor:
        """The mean of the elements, a 0-d tensor (MeanBackward0)."""
        raise _todo(5, "Tensor.mean()")

    def __getitem__(self, index: int) -> Tensor:
        """Element `index` of a 1-D tensor, negative indices from the end (SelectBackward0)."""
        raise _todo(5, "Tensor.__getitem__ (v[i])")

    # --- step 6: turning autograd off --------------------------------------------------------

    def detach(self) -> Tensor:
        """A new leaf with the same value, requires_grad False, no history."""
        raise _todo(6, "Tensor.detach()")

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set requires_grad of a leaf in place and return self. On a non-leaf, raise
        RuntimeError (torch's message: "you can only change requires_grad flags of leaf
        variables. ...")."""
        raise _todo(6, "Tensor.requires_grad_()")

    # --- step 7: the rest of autograd --------------------------------------------------------

    def retain_grad(self) -> None:
        """Make backward() fill this non-leaf's .grad too (a no-op on a leaf)."""
        raise _todo(7, "Tensor.retain_grad()")


# --- step 8: higher-order gradients -----------------------------------------------------------


def grad(outputs: Tensor | tuple[Tensor, ...], inputs: Tensor | tuple[Tensor, ...],
         grad_outputs: Tensor | tuple[Tensor, ...] | None = None,
         retain_graph: bool | None = None, create_graph: bool = False,
         allow_unused: bool = False) -> tuple[Tensor | None, ...]:
    """d(outputs)/d(inputs), like torch.autograd.grad: a tuple with one gradient per input,
    and no .grad is changed.

    `grad_outputs` plays the part of backward's `gradient`. With `create_graph` the results
    have a history (see backward's step 8) and `retain_graph` defaults to True. An input the
    outputs do not depend on raises RuntimeError ("The differentiated Tensor at index 0
    appears to not have been used in the graph. ..."), or gives None with `allow_unused=True`.
    """
    raise _todo(8, "grad(outputs, inputs, ...)")


class GradFn:
    """What a non-leaf's .grad_fn holds: the record of the operation that made it."""

    def name(self) -> str:
        """torch's name for the operation, such as "MulBackward0" (docs/protocol.md has the
        table)."""
        raise _todo(2, "GradFn.name()")


class no_grad:
    """`with no_grad():` computes without recording: results have requires_grad False, no
    grad_fn, and are leaves. On exit, recording goes back to what it was before, even if the
    block raised."""

    def __enter__(self) -> no_grad:
        raise _todo(6, "no_grad.__enter__")

    def __exit__(self, *exc_info: Any) -> None:
        raise _todo(6, "no_grad.__exit__")
