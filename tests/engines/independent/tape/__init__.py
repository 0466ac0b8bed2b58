"""tape: a small autograd engine that behaves like PyTorch's autograd (float64).

Design
------
* A ``Tensor`` keeps its values in a plain Python list of floats and a shape that
  is ``()`` (a 0-d tensor, one float) or ``(n,)``.
* Every operation is a ``Node`` subclass named like torch's grad_fn class
  (``MulBackward0`` ...).  ``forward(ctx, *inputs)`` computes the values from lists
  and saves what backward needs on the node; ``backward(ctx, g)`` returns one
  gradient per input.  Backward formulas are written with Tensor operations, so
  running them with recording switched on (``create_graph=True``) builds the graph
  of the gradient itself (higher-order gradients for free).
* ``backward()`` orders the graph with Kahn's algorithm: each node counts its
  consumers and runs only when all of them have delivered their gradient.
  Gradients wait in a dict keyed by node.  No recursion anywhere.

Written for gradcheck's tests from docs/protocol.md and torch alone, by hands that read
neither the grader nor the reference engine (tests/test_independent_engines.py).
"""
import heapq
import itertools
import math
import operator
import warnings
import weakref

try:
    from . import _fmath as F
except ImportError:                  # loaded as a plain file, outside its package
    import importlib.util as _ilu
    import os as _os
    _spec = _ilu.spec_from_file_location(
        "_tape_fmath", _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "_fmath.py"))
    F = _ilu.module_from_spec(_spec)
    _spec.loader.exec_module(F)

__all__ = ["Tensor", "tensor", "no_grad", "enable_grad", "is_grad_enabled", "grad", "Node"]

_GRAD_MODE = [True]              # global "record operations" switch
_SEQ = itertools.count()         # creation order of nodes (torch's sequence_nr)

FREED_MSG = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed when "
    "you call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward "
    "through the graph a second time or if you need to access saved tensors after calling backward.")
NONLEAF_GRAD_MSG = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
    "attribute won't be populated during autograd.backward(). If you indeed want the .grad field "
    "to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. If you "
    "access the non-leaf Tensor by mistake, make sure you access the leaf Tensor instead. See "
    "github.com/pytorch/pytorch/pull/30531 for more information.")
LEAF_FLAG_MSG = "you can only change requires_grad flags of leaf variables."
LEAF_FLAG_HINT = (" If you want to use a computed variable in a subgraph that doesn't require "
                  "differentiation use var_no_grad = var.detach().")

# ----------------------------------------------------------------------------- grad mode
def is_grad_enabled(): return _GRAD_MODE[0]

class _GradMode:
    """Context manager (and decorator) that sets the recording mode and always restores it."""
    enabled = True

    def __init__(self):
        self._prev = []

    def __enter__(self):
        self._prev.append(_GRAD_MODE[0])
        _GRAD_MODE[0] = self.enabled
        return self

    def __exit__(self, *exc):
        _GRAD_MODE[0] = self._prev.pop()
        return False

    def __call__(self, fn):
        def wrapper(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)
        return wrapper

class no_grad(_GradMode):
    enabled = False

class enable_grad(_GradMode):
    enabled = True

# ----------------------------------------------------------------------------- helpers
def _size(shape): return "torch.Size([%s])" % ", ".join(str(n) for n in shape)
def _numel(shape): return shape[0] if shape else 1
def _map(f, a): return [f(x) for x in a.data], a.shape
def _const(data, shape): return Tensor._new(list(data), shape)
def _is_number(x): return isinstance(x, (int, float)) and not isinstance(x, Tensor)
def _ok(o): return isinstance(o, Tensor) or _is_number(o)

def _values(x):
    """(list of floats, shape) of a tensor or a Python number (a 0-d constant)."""
    if isinstance(x, Tensor):
        return x.data, x.shape
    return [float(x)], ()

def _broadcast_shape(sa, sb):
    if sa == sb or sb == ():
        return sa
    if sa == ():
        return sb
    if sa == (1,):
        return sb
    if sb == (1,):
        return sa
    raise RuntimeError("The size of tensor a (%d) must match the size of tensor b (%d) at "
                       "non-singleton dimension 0" % (sa[0], sb[0]))

def _spread(data, shape):
    """Repeat a one-element list to the length of shape (broadcasting)."""
    n = _numel(shape)
    return data if len(data) == n else data * n

def _zip(f, a, b):
    (da, sa), (db, sb) = _values(a), _values(b)
    shape = _broadcast_shape(sa, sb)
    return [f(x, y) for x, y in zip(_spread(da, shape), _spread(db, shape))], shape


# ----------------------------------------------------------------------------- nodes
class Node:
    """One recorded operation.  Subclasses define forward/backward as static methods."""
    saves_values = False         # does torch save tensors for this backward? (rule 5)
    saves_result = False         # does backward need the output tensor?
    zero_rule = None             # 'any'/'first'/'all': when a symbolic-zero input gives a zero out

    def __init__(self, **consts):
        self.__dict__.update(consts)
        self.next_nodes = ()     # per input: the producing Node (or AccumulateGrad), or None
        self.in_shapes = ()
        self.seq = 0
        self.retained = None     # weakref to the output tensor if retain_grad() was called
        self._saved = ()

    def name(self): return type(self).__name__
    def __repr__(self): return "<%s object at %#x>" % (self.name(), id(self))
    def save(self, *values): self._saved = values
    def needs(self, i): return self.next_nodes[i] is not None
    next_functions = property(lambda self: tuple((n, 0) for n in self.next_nodes))

    @property
    def saved(self):
        if self._saved is None:
            raise RuntimeError(FREED_MSG)
        return self._saved

    def release(self):
        if self.saves_values:
            self._saved = None

    def apply(self, g):
        """Run backward and reduce each gradient to its input's shape (undo broadcasting)."""
        grads = type(self).backward(self, g)
        out = []
        for gi, nxt, shape in zip(grads, self.next_nodes, self.in_shapes):
            if nxt is None or gi is None:
                out.append(None)
            else:
                out.append(gi if gi.shape == shape else _sum_to(gi, shape))
        return out


class AccumulateGrad(Node):
    """The node of a leaf that requires grad: it adds the incoming gradient into .grad."""

    def __init__(self, variable):
        super().__init__()
        self.variable = variable
        self.seq = math.inf      # runs as soon as it is ready, like torch

    def accumulate(self, g):
        t = self.variable
        if not t._requires_grad:
            return
        if t._grad is None:
            t._grad = _apply(CloneBackward0, g) if _GRAD_MODE[0] else _const(g.data, g.shape)
        elif _GRAD_MODE[0]:
            t._grad = t._grad + g            # create_graph: out of place, recorded
        else:
            buf = t._grad.data               # in place, as torch's `grad += new_grad`
            buf[:] = [a + b for a, b in zip(buf, _spread(g.data, t._grad.shape))]


# --- arithmetic
class AddBackward0(Node):
    zero_rule = 'all'
    @staticmethod
    def forward(ctx, a, b): return _zip(F.add, a, b)
    @staticmethod
    def backward(ctx, g): return g, g

class SubBackward0(Node):
    zero_rule = 'all'
    @staticmethod
    def forward(ctx, a, b): return _zip(F.sub, a, b)
    @staticmethod
    def backward(ctx, g): return g, (-g if ctx.needs(1) else None)

class RsubBackward1(Node):           # number - tensor
    @staticmethod
    def forward(ctx, a, b): return _zip(F.sub, b, a)
    @staticmethod
    def backward(ctx, g): return -g, None

class NegBackward0(Node):
    @staticmethod
    def forward(ctx, a): return _map(lambda x: -x, a)
    @staticmethod
    def backward(ctx, g): return (-g,)

class MulBackward0(Node):
    zero_rule = 'any'
    saves_values = True
    @staticmethod
    def forward(ctx, a, b):
        ctx.save(a, b)
        return _zip(F.mul, a, b)
    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved
        return (g * b if ctx.needs(0) else None), (g * a if ctx.needs(1) else None)

class DivBackward0(Node):
    zero_rule = 'first'
    saves_values = True
    @staticmethod
    def forward(ctx, a, b):
        ctx.save(a, b)
        return _zip(F.div, a, b)
    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved
        ga = g / b if ctx.needs(0) else None
        gb = -g * ((a / b) / b) if ctx.needs(1) else None
        return ga, gb

class ReciprocalBackward0(Node):
    saves_values = saves_result = True
    @staticmethod
    def forward(ctx, a): return _map(lambda x: F.div(1.0, x), a)
    @staticmethod
    def backward(ctx, g):
        (r,) = ctx.saved
        return (-g * (r * r),)

class PowBackward0(Node):            # tensor ** number
    saves_values = True
    @staticmethod
    def forward(ctx, a):
        ctx.save(a)
        e = ctx.exponent
        return _map(lambda x: F.pow_scalar(x, e), a)
    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved
        e = ctx.exponent
        if e == 0:
            return (_const([0.0] * len(a.data), a.shape),)
        return (g * (e * a ** (e - 1)),)

class PowBackward1(Node):            # tensor ** tensor
    saves_values = saves_result = True
    @staticmethod
    def forward(ctx, a, b):
        ctx.save(a, b)
        return _zip(F.pow_, a, b)
    @staticmethod
    def backward(ctx, g):
        a, b, r = ctx.saved
        shape = r.shape
        ga = gb = None
        if ctx.needs(0):
            keep = [e != 0 for e in _spread(b.data, shape)]
            ga = _where(g * (b * a ** (b - 1)), keep)
        if ctx.needs(1):
            keep = [not (x == 0 and e >= 0)
                    for x, e in zip(_spread(a.data, shape), _spread(b.data, shape))]
            gb = g * _where(r * a.log(), keep)
        return ga, gb

class PowBackward2(Node):            # number ** tensor
    saves_values = saves_result = True
    @staticmethod
    def forward(ctx, b):
        ctx.save(b)
        base = ctx.base
        return _map(lambda e: F.pow_(base, e), b)
    @staticmethod
    def backward(ctx, g):
        b, r = ctx.saved
        keep = [not (ctx.base == 0 and e >= 0) for e in b.data]
        return (g * _where(r * F.log(ctx.base), keep),)

# --- elementwise functions
class ExpBackward0(Node):
    saves_values = saves_result = True
    @staticmethod
    def forward(ctx, a): return _map(F.exp, a)
    @staticmethod
    def backward(ctx, g): return (g * ctx.saved[0],)

class LogBackward0(Node):
    saves_values = True
    @staticmethod
    def forward(ctx, a):
        ctx.save(a)
        return _map(F.log, a)
    @staticmethod
    def backward(ctx, g): return (g / ctx.saved[0],)

class TanhBackward0(Node):
    saves_values = saves_result = True
    @staticmethod
    def forward(ctx, a): return _map(F.tanh, a)
    @staticmethod
    def backward(ctx, g):
        return (_apply(TanhBackwardBackward0, g, ctx.saved[0]),)

class SigmoidBackward0(Node):
    saves_values = saves_result = True
    @staticmethod
    def forward(ctx, a): return _map(F.sigmoid, a)
    @staticmethod
    def backward(ctx, g):
        return (_apply(SigmoidBackwardBackward0, g, ctx.saved[0]),)

class ReluBackward0(Node):
    saves_values = saves_result = True
    @staticmethod
    def forward(ctx, a): return _map(F.relu, a)
    @staticmethod
    def backward(ctx, g):
        return (_apply(ThresholdBackwardBackward0, g, ctx.saved[0]),)   # relu'(0) = 0

class ThresholdBackwardBackward0(Node):  # g where result > 0, else 0 (zero slope in result)
    zero_rule = 'first'
    saves_values = True
    @staticmethod
    def forward(ctx, g, r):
        ctx.save(r)
        return _zip(lambda gv, rv: 0.0 if rv <= 0 else gv, g, r)
    @staticmethod
    def backward(ctx, gg):
        (r,) = ctx.saved
        zeros = _const([0.0] * len(gg.data), gg.shape) if ctx.needs(1) else None
        return (_apply(ThresholdBackwardBackward0, gg, r) if ctx.needs(0) else None), zeros

class TanhBackwardBackward0(Node):     # torch's tanh_backward(g, y) = g * (1 - y*y)
    zero_rule = 'first'
    saves_values = True
    @staticmethod
    def forward(ctx, g, r):
        ctx.save(g, r)
        return _zip(lambda gv, rv: gv * (1 - rv * rv), g, r)
    @staticmethod
    def backward(ctx, gg):
        g, r = ctx.saved
        return ((_apply(TanhBackwardBackward0, gg, r) if ctx.needs(0) else None),
                (gg * (-2 * r * g) if ctx.needs(1) else None))

class SigmoidBackwardBackward0(Node):  # torch's sigmoid_backward(g, y) = g * (1 - y) * y
    zero_rule = 'first'
    saves_values = True
    @staticmethod
    def forward(ctx, g, r):
        ctx.save(g, r)
        return _zip(lambda gv, rv: gv * (1 - rv) * rv, g, r)
    @staticmethod
    def backward(ctx, gg):
        g, r = ctx.saved
        return ((_apply(SigmoidBackwardBackward0, gg, r) if ctx.needs(0) else None),
                (gg * g * (-2 * r + 1) if ctx.needs(1) else None))

class SinBackward0(Node):
    saves_values = True
    @staticmethod
    def forward(ctx, a):
        ctx.save(a)
        return _map(F.sin, a)
    @staticmethod
    def backward(ctx, g): return (g * ctx.saved[0].cos(),)

class CosBackward0(Node):
    saves_values = True
    @staticmethod
    def forward(ctx, a):
        ctx.save(a)
        return _map(F.cos, a)
    @staticmethod
    def backward(ctx, g): return (g * -ctx.saved[0].sin(),)

class SqrtBackward0(Node):
    saves_values = saves_result = True
    @staticmethod
    def forward(ctx, a): return _map(F.sqrt, a)
    @staticmethod
    def backward(ctx, g): return (g / (2 * ctx.saved[0]),)       # sqrt'(0) = inf

class AbsBackward0(Node):
    saves_values = True
    @staticmethod
    def forward(ctx, a):
        ctx.save(a)
        return _map(abs, a)
    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved
        return (g * _apply(SgnBackward0, a),)                      # abs'(0) = 0

class SgnBackward0(Node):             # sign, whose own derivative is zero
    @staticmethod
    def forward(ctx, a): return _map(F.sgn, a)
    @staticmethod
    def backward(ctx, g):
        zero = _const([0.0] * len(g.data), g.shape)
        zero._zero = True            # like torch's efficient zero tensor: 0 * inf stays 0
        return (zero,)

# --- reductions and indexing
class SumBackward0(Node):
    @staticmethod
    def forward(ctx, a): return [sum(a.data)], ()
    @staticmethod
    def backward(ctx, g): return (_expand(g, ctx.in_shapes[0]),)

class MeanBackward0(Node):
    @staticmethod
    def forward(ctx, a): return [sum(a.data) / len(a.data)], ()
    @staticmethod
    def backward(ctx, g):
        shape = ctx.in_shapes[0]
        return (_expand(g, shape) / _numel(shape),)

class SelectBackward0(Node):
    zero_rule = 'first'
    @staticmethod
    def forward(ctx, a): return [a.data[ctx.index]], ()
    @staticmethod
    def backward(ctx, g):
        return (_apply(SelectBackwardBackward0, g, index=ctx.index, size=_numel(ctx.in_shapes[0])),)

# --- internal operations used by backward formulas (so that they can be differentiated too)
class SelectBackwardBackward0(Node):  # scatter one value into a vector of zeros
    zero_rule = 'first'
    @staticmethod
    def forward(ctx, g):
        data = [0.0] * ctx.size
        data[ctx.index] = g.data[0]
        return data, (ctx.size,)
    @staticmethod
    def backward(ctx, gg): return (_apply(SelectBackward0, gg, index=ctx.index),)

class ExpandBackward0(Node):          # broadcast () or (1,) to a shape
    zero_rule = 'first'
    @staticmethod
    def forward(ctx, a): return list(_spread(a.data, ctx.shape)), ctx.shape
    @staticmethod
    def backward(ctx, g): return (_sum_to(g, ctx.in_shapes[0]),)

class SumToSizeBackward0(Node):       # sum a vector down to () or (1,)
    zero_rule = 'first'
    @staticmethod
    def forward(ctx, a): return [sum(a.data)], ctx.shape
    @staticmethod
    def backward(ctx, g): return (_expand(g, ctx.in_shapes[0]),)

class WhereBackward0(Node):           # where(keep, a, 0): a mask that never multiplies
    zero_rule = 'first'
    @staticmethod
    def forward(ctx, a): return [x if k else 0.0 for x, k in zip(a.data, ctx.keep)], a.shape
    @staticmethod
    def backward(ctx, g): return (_where(g, ctx.keep),)

class CloneBackward0(Node):
    zero_rule = 'first'
    @staticmethod
    def forward(ctx, a): return list(a.data), a.shape
    @staticmethod
    def backward(ctx, g): return (g,)


def _expand(t, shape):
    return t if t.shape == shape else _apply(ExpandBackward0, t, shape=shape)

def _sum_to(t, shape):
    return t if t.shape == shape else _apply(SumToSizeBackward0, t, shape=shape)

def _where(t, keep):
    return t if all(keep) else _apply(WhereBackward0, t, keep=keep)

def _apply(cls, *inputs, **consts):
    """Run cls.forward and, if recording, hang the node on the result."""
    ctx = cls(**consts)
    ctx.in_shapes = tuple(x.shape if isinstance(x, Tensor) else () for x in inputs)
    data, shape = cls.forward(ctx, *inputs)
    zeros = [isinstance(x, Tensor) and x._zero for x in inputs]
    rule = cls.zero_rule
    zero = rule is not None and any(zeros) and (all(zeros) if rule == "all" else (rule == "any" or zeros[0]))
    out = Tensor._new([0.0] * len(data) if zero else data, shape)
    out._zero = zero
    if _GRAD_MODE[0] and any(isinstance(x, Tensor) and x.requires_grad for x in inputs):
        ctx.next_nodes = tuple(x._edge() if isinstance(x, Tensor) and x.requires_grad else None
                               for x in inputs)
        ctx.seq = next(_SEQ)
        if cls.saves_result:
            ctx.save(*ctx._saved, out)
        out.grad_fn = ctx
    return out

# ----------------------------------------------------------------------------- tensor
class Tensor:
    def __init__(self, data, requires_grad=False):
        if isinstance(data, Tensor):
            data = data.tolist()
        if isinstance(data, (list, tuple)):
            if not data:
                raise ValueError("tensor() needs at least one number")
            self.data, self.shape = [float(v) for v in data], (len(data),)
        else:
            self.data, self.shape = [float(data)], ()
        self._init(requires_grad)

    @classmethod
    def _new(cls, data, shape):
        t = cls.__new__(cls)
        t.data, t.shape = data, shape
        t._init(False)
        return t

    def _init(self, requires_grad):
        self._requires_grad = bool(requires_grad)   # only meaningful for leaves
        self.grad_fn = None
        self._grad = None
        self._retains_grad = False
        self._accumulator = None
        self._zero = False       # a gradient known to be exactly zero (torch's ZeroTensor)

    def _edge(self):
        """The node that receives this tensor's gradient during backward."""
        if self.grad_fn is not None:
            return self.grad_fn
        if self._accumulator is None:
            self._accumulator = AccumulateGrad(self)
        return self._accumulator

    # --- autograd attributes
    @property
    def requires_grad(self):
        return self.grad_fn is not None or self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        if self.grad_fn is not None:
            raise RuntimeError(LEAF_FLAG_MSG + ("" if flag else LEAF_FLAG_HINT))
        self._requires_grad = bool(flag)

    def requires_grad_(self, requires_grad=True):
        if self.grad_fn is not None:
            if not requires_grad:
                raise RuntimeError(LEAF_FLAG_MSG + LEAF_FLAG_HINT)
            return self
        self._requires_grad = bool(requires_grad)
        return self

    is_leaf = property(lambda self: self.grad_fn is None)
    retains_grad = property(lambda self: self._retains_grad)

    @property
    def grad(self):
        if self.grad_fn is not None and not self._retains_grad and self._grad is None:
            warnings.warn(NONLEAF_GRAD_MSG, UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError("assigned grad expected to be a Tensor or None but got grad of type "
                                + type(value).__name__)
            if value is self:
                raise RuntimeError("can't assign Variable as its own grad")
            if value.shape != self.shape:
                raise RuntimeError("attempting to assign a gradient of size '%s' to a tensor of size "
                                   "'%s'. Please ensure that the gradient and the tensor are the same "
                                   "size" % (list(value.shape), list(self.shape)))
        self._grad = value

    def retain_grad(self):
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.grad_fn is not None and not self._retains_grad:
            self._retains_grad = True
            self.grad_fn.retained = weakref.ref(self)

    def _retain(self, g):
        # torch's retain_grad hook: clone the first time, then out-of-place sums
        self._grad = _apply(CloneBackward0, g) if self._grad is None else self._grad + g

    def detach(self):
        return Tensor._new(self.data, self.shape)     # shares the values, like torch

    def backward(self, gradient=None, retain_graph=None, create_graph=False):
        if retain_graph is None:
            retain_graph = create_graph
        grads = _make_grads([self], [gradient])
        _run_engine([self._edge()], grads, retain_graph, create_graph)

    # --- values
    def tolist(self):
        return self.data[0] if self.shape == () else list(self.data)

    def item(self):
        if len(self.data) != 1:
            raise RuntimeError("a Tensor with %d elements cannot be converted to Scalar" % len(self.data))
        return self.data[0]

    __float__ = item

    def numel(self): return len(self.data)
    def dim(self): return len(self.shape)
    def size(self): return self.shape

    def __len__(self):
        if self.shape == ():
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self):
        extra = (", grad_fn=<%s>" % self.grad_fn.name() if self.grad_fn is not None
                 else ", requires_grad=True" if self._requires_grad else "")
        return "tensor(%r%s)" % (self.tolist(), extra)

    # --- arithmetic
    def __add__(self, o): return _apply(AddBackward0, self, o) if _ok(o) else NotImplemented
    def __radd__(self, o): return _apply(AddBackward0, self, o) if _ok(o) else NotImplemented
    def __sub__(self, o): return _apply(SubBackward0, self, o) if _ok(o) else NotImplemented
    def __rsub__(self, o): return _apply(RsubBackward1, self, o) if _ok(o) else NotImplemented
    def __mul__(self, o): return _apply(MulBackward0, self, o) if _ok(o) else NotImplemented
    def __rmul__(self, o): return _apply(MulBackward0, self, o) if _ok(o) else NotImplemented
    def __truediv__(self, o): return _apply(DivBackward0, self, o) if _ok(o) else NotImplemented
    def __neg__(self): return _apply(NegBackward0, self)

    def __rtruediv__(self, o):           # torch: 2 / x == x.reciprocal() * 2
        if not _ok(o):
            return NotImplemented
        return _apply(MulBackward0, _apply(ReciprocalBackward0, self), o)

    def __pow__(self, o):
        if isinstance(o, Tensor):
            return _apply(PowBackward1, self, o)
        if _is_number(o):
            return _apply(PowBackward0, self, exponent=float(o))
        return NotImplemented

    def __rpow__(self, o):
        return _apply(PowBackward2, self, base=float(o)) if _is_number(o) else NotImplemented

    # --- functions
    def exp(self): return _apply(ExpBackward0, self)
    def log(self): return _apply(LogBackward0, self)
    def tanh(self): return _apply(TanhBackward0, self)
    def sigmoid(self): return _apply(SigmoidBackward0, self)
    def relu(self): return _apply(ReluBackward0, self)
    def sin(self): return _apply(SinBackward0, self)
    def cos(self): return _apply(CosBackward0, self)
    def sqrt(self): return _apply(SqrtBackward0, self)
    def abs(self): return _apply(AbsBackward0, self)
    def reciprocal(self): return _apply(ReciprocalBackward0, self)
    __abs__ = abs

    def sum(self): return _apply(SumBackward0, self)
    def mean(self): return _apply(MeanBackward0, self)

    def __getitem__(self, i):
        if self.shape == ():
            raise IndexError("invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                             "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number")
        if isinstance(i, bool) or not hasattr(i, "__index__"):
            raise IndexError("only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                             "Variables are valid indices (got %s)" % type(i).__name__)
        i = operator.index(i)
        n = self.shape[0]
        if not -n <= i < n:
            raise IndexError("index %d is out of bounds for dimension 0 with size %d" % (i, n))
        return _apply(SelectBackward0, self, index=i % n)

def tensor(data, requires_grad=False):
    return Tensor(data, requires_grad=requires_grad)

# ----------------------------------------------------------------------------- the engine
def _make_grads(outputs, grads):
    result = []
    for i, (out, g) in enumerate(zip(outputs, grads)):
        if g is not None:
            if not isinstance(g, Tensor):
                raise TypeError("gradients can be either Tensors or None, but got " + type(g).__name__)
            if g.shape != out.shape:
                raise RuntimeError("Mismatch in shape: grad_output[%d] has a shape of %s and "
                                   "output[%d] has a shape of %s." % (i, _size(g.shape), i, _size(out.shape)))
        elif out.requires_grad:
            if len(out.data) != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = _const([1.0], out.shape)
        result.append(g)
    for i, out in enumerate(outputs):
        if not out.requires_grad:
            raise RuntimeError("element %d of tensors does not require grad and does not have a "
                               "grad_fn" % i)
    return result

def _run_engine(roots, root_grads, retain_graph, create_graph, targets=None):
    """Backpropagate root_grads from the root nodes.

    Without targets (backward()): every reachable node runs and leaves accumulate .grad.
    With targets (grad()): only nodes on a path to a target run; the gradients arriving
    at the targets are returned in a dict {node: gradient} and no .grad changes.
    """
    # 1. Kahn's in-degrees: how many consumers each node has inside this graph.
    deps = dict.fromkeys(roots, 0)
    stack = list(deps)
    seen = set(stack)
    while stack:
        node = stack.pop()
        for child in node.next_nodes:
            if child is not None:
                deps[child] = deps.get(child, 0) + 1
                if child not in seen:
                    seen.add(child)
                    stack.append(child)

    # 2. For grad(): the nodes from which some target can be reached (reverse topological order).
    reach = None
    if targets is not None:
        target_set = set(targets)
        left = dict(deps)
        order = [n for n in left if left[n] == 0]
        for node in order:                      # `order` grows while we walk it
            for child in node.next_nodes:
                if child is not None:
                    left[child] -= 1
                    if left[child] == 0:
                        order.append(child)
        reach = set()
        for node in reversed(order):
            if node in target_set or any(c in reach for c in node.next_nodes):
                reach.add(node)

    # 3. Run nodes once all their consumers are done; newest node first among the ready ones.
    buffers = {}
    for r, g in zip(roots, root_grads):
        buffers[r] = g if r not in buffers else buffers[r] + g
    tie = itertools.count()
    ready = [(-r.seq, next(tie), r) for r in dict.fromkeys(roots) if deps[r] == 0]
    heapq.heapify(ready)
    captured = {}
    previous = _GRAD_MODE[0]
    _GRAD_MODE[0] = bool(create_graph)
    try:
        while ready:
            node = heapq.heappop(ready)[2]
            g = buffers.pop(node)
            if node.retained is not None and node.retained() is not None:
                node.retained()._retain(g)
            if reach is not None:
                if node in target_set:
                    captured[node] = g
                if not any(c in reach for c in node.next_nodes):
                    continue                    # nothing upstream is wanted: do not run it
            if isinstance(node, AccumulateGrad):
                node.accumulate(g)
                continue
            grads = node.apply(g)
            if not retain_graph:
                node.release()
            for child, gi in zip(node.next_nodes, grads):
                if child is None or (reach is not None and child not in reach):
                    continue
                buffers[child] = gi if child not in buffers else buffers[child] + gi
                deps[child] -= 1
                if deps[child] == 0:
                    heapq.heappush(ready, (-child.seq, next(tie), child))
    finally:
        _GRAD_MODE[0] = previous
    return captured

def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)

def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=None, materialize_grads=False):
    """d(outputs)/d(inputs) as a tuple, like torch.autograd.grad.  No .grad changes."""
    outputs, inputs = _as_tuple(outputs), _as_tuple(inputs)
    if not inputs:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    grad_outputs = (None,) * len(outputs) if grad_outputs is None else _as_tuple(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError("grad requires one grad_output per output: got %d grad_outputs and %d "
                           "outputs" % (len(grad_outputs), len(outputs)))
    if retain_graph is None:
        retain_graph = create_graph
    if allow_unused is None:
        allow_unused = materialize_grads
    grads = _make_grads(outputs, grad_outputs)
    for t in inputs:
        if not isinstance(t, Tensor):
            raise TypeError("inputs must be Tensors, got " + type(t).__name__)
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    targets = [t._edge() for t in inputs]
    captured = _run_engine([o._edge() for o in outputs], grads, retain_graph, create_graph, targets)
    result = []
    for i, (t, node) in enumerate(zip(inputs, targets)):
        g = captured.get(node)
        if g is None:
            if not allow_unused:
                raise RuntimeError("The differentiated Tensor at index %d appears to not have been "
                                   "used in the graph. Set allow_unused=True if this is the desired "
                                   "behavior." % i)
            if materialize_grads:
                g = _const([0.0] * len(t.data), t.shape)
        result.append(g)
    return tuple(result)
