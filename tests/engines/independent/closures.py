"""A small scalar/1-D autograd engine in the style of micrograd, behaving like
PyTorch's autograd in float64.

Every operation builds a result Tensor that keeps its parents in ``_prev`` and a
``_backward`` closure.  The closure maps the gradient of the result to the
gradients of the operands, written with Tensor operations, so that running it
with gradient recording switched on (``create_graph=True``) builds a graph of
the gradient itself (higher-order derivatives).

Written for gradcheck's tests from docs/protocol.md and torch alone, by hands that read
neither the grader nor the reference engine (tests/test_independent_engines.py).
"""
import heapq
import itertools
import math
import warnings

__all__ = ["Tensor", "tensor", "no_grad", "grad"]

_GRAD_ENABLED = [True]
_SEQ = itertools.count()
_INF, _NAN = float("inf"), float("nan")

_FREED_MSG = ("Trying to backward through the graph a second time (or directly access saved "
              "tensors after they have already been freed). Saved intermediate values of the "
              "graph are freed when you call .backward() or autograd.grad(). Specify "
              "retain_graph=True if you need to backward through the graph a second time or if "
              "you need to access saved tensors after calling backward.")
_NONLEAF_MSG = ("The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its "
                ".grad attribute won't be populated during autograd.backward(). If you indeed want "
                "the .grad field to be populated for a non-leaf Tensor, use .retain_grad() on the "
                "non-leaf Tensor. If you access the non-leaf Tensor by mistake, make sure you "
                "access the leaf Tensor instead. See github.com/pytorch/pytorch/pull/30531 for "
                "more information.")
_LEAF_FLAG_MSG = ("you can only change requires_grad flags of leaf variables. If you want to use a "
                  "computed variable in a subgraph that doesn't require differentiation use "
                  "var_no_grad = var.detach().")


class no_grad:
    """Context manager (and decorator) that switches gradient recording off."""

    def __enter__(self):
        self._prev_mode = _GRAD_ENABLED[0]
        _GRAD_ENABLED[0] = False
        return self

    def __exit__(self, *exc):
        _GRAD_ENABLED[0] = self._prev_mode
        return False


class _Fn:
    """What ``grad_fn`` holds: the name torch gives the operation."""
    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def name(self):
        return self._name

    def __repr__(self):
        return "<%s object>" % self._name


# ---------------------------------------------------------------- IEEE-safe scalar math
def _div(a, b):
    try:
        return a / b
    except ZeroDivisionError:
        if a != a or a == 0:
            return _NAN
        return math.copysign(_INF, a) * math.copysign(1.0, b)


def _odd_int(b):
    return b == b and abs(b) != _INF and b == int(b) and int(b) % 2 == 1


def _pow(a, b):
    try:
        return math.pow(a, b)
    except OverflowError:
        return -_INF if (a < 0 and _odd_int(b)) else _INF
    except ValueError:
        if a == 0:  # 0 ** negative
            return math.copysign(_INF, a) if _odd_int(b) else _INF
        return _NAN


def _pow_scalar(a, e):
    # torch's fast paths for a tensor raised to a Python number
    if e == 2:
        return a * a
    if e == 3:
        return a * a * a
    if e == 0.5:
        return _sqrt(a)
    if e == -0.5:
        return _div(1.0, _sqrt(a))
    if e == -1:
        return _div(1.0, a)
    if e == -2:
        return _div(1.0, a * a)
    return _pow(a, e)


def _exp(a):
    try:
        return math.exp(a)
    except OverflowError:
        return _INF


def _log(a):
    if a == 0:
        return -_INF
    if a != a or a < 0:
        return _NAN
    return math.log(a)


def _sqrt(a):
    return _NAN if (a != a or a < 0) else math.sqrt(a)


def _safe(f):
    def g(a):
        try:
            return f(a)
        except ValueError:
            return _NAN
    return g


_sin, _cos = _safe(math.sin), _safe(math.cos)


def _sigmoid(a):
    return _div(1.0, 1.0 + _exp(-a))


def _sgn(a):
    return 1.0 if a > 0 else (-1.0 if a < 0 else 0.0)


# ---------------------------------------------------------------- the Tensor
def _bshape(a, b):
    sa, sb = a.shape, b.shape
    if sa == sb or sb == ():
        return sa
    if sa == ():
        return sb
    if sa[0] == 1:
        return sb
    if sb[0] == 1:
        return sa
    raise RuntimeError("The size of tensor a (%d) must match the size of tensor b (%d) at "
                       "non-singleton dimension 0" % (sa[0], sb[0]))


def _vals(t, shape):
    n = shape[0] if shape else 1
    return t.data if len(t.data) == n else t.data * n


def _shape_str(shape):
    return "[%s]" % ", ".join(str(s) for s in shape)


def _lift(x):
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (int, float)):
        return Tensor([float(x)], ())
    return None


def _unb(g, shape):
    """Reduce a broadcast gradient back to an operand's shape."""
    if g.shape == shape:
        return g
    if len(g.data) == 1:
        return g._view(shape)
    s = g.sum()
    return s if shape == () else s._view(shape)


def _zeros(shape):
    z = Tensor([0.0] * (shape[0] if shape else 1), shape)
    z._zero = True
    return z


def _freed(g):
    raise RuntimeError(_FREED_MSG)


class Tensor:
    def __init__(self, data, shape, requires_grad=False):
        self.data = data              # list of floats (length 1 for a 0-d tensor)
        self.shape = shape            # () or (n,)
        self._requires_grad = requires_grad
        self._grad = None
        self.grad_fn = None
        self._prev = ()               # parents that are part of the graph
        self._backward = None
        self._saves = False
        self._retains_grad = False
        self._zero = False            # torch's "efficient zero tensor" (sgn's derivative)
        self._seq = next(_SEQ)

    # ------------------------------------------------------------ graph building
    def _result(self, data, shape, name, parents, saves=False):
        """Make the output of an operation; record it if grad mode is on."""
        out = Tensor(data, shape)
        if _GRAD_ENABLED[0] and any(p._requires_grad for p in parents):
            out._requires_grad = True
            out.grad_fn = _Fn(name)
            out._prev = tuple(p for p in parents if p._requires_grad)
            out._saves = saves
        return out

    def _unary(self, f, name, back, saves=True):
        out = self._result([f(a) for a in self.data], self.shape, name, (self,), saves)
        if out.grad_fn is not None:
            out._backward = lambda g: (back(g, out),)
        return out

    def _binary(self, other, f, name, back, saves):
        """back(g, a, b, out) returns the unreduced gradients (ga, gb) as thunks."""
        a, b = self, _lift(other)
        if b is None:
            return NotImplemented
        shape = _bshape(a, b)
        zero = (name == "MulBackward0" and (a._zero or b._zero)) or (name == "DivBackward0" and a._zero)
        if zero:    # a zero tensor times anything (even inf or nan) stays exactly zero
            data = [0.0] * (shape[0] if shape else 1)
        else:
            data = [f(x, y) for x, y in zip(_vals(a, shape), _vals(b, shape))]
        out = a._result(data, shape, name, (a, b), saves)
        out._zero = zero
        if out.grad_fn is not None:
            ra, rb = a._requires_grad, b._requires_grad

            def _backward(g):
                ga, gb = back(g, a, b, out)
                return tuple(r for r in ((_unb(ga(), a.shape) if ra else None),
                                         (_unb(gb(), b.shape) if rb else None)) if r is not None)
            out._backward = _backward
        return out

    # ------------------------------------------------------------ arithmetic
    def __add__(self, other):
        return self._binary(other, lambda x, y: x + y, "AddBackward0",
                            lambda g, a, b, o: (lambda: g, lambda: g), False)

    __radd__ = __add__

    def __sub__(self, other):
        return self._binary(other, lambda x, y: x - y, "SubBackward0",
                            lambda g, a, b, o: (lambda: g, lambda: -g), False)

    def __rsub__(self, other):
        o = _lift(other)
        if o is None:
            return NotImplemented
        return self._binary(o, lambda x, y: y - x, "RsubBackward1",
                            lambda g, a, b, out: (lambda: -g, lambda: g), False)

    def __mul__(self, other):
        return self._binary(other, lambda x, y: x * y, "MulBackward0",
                            lambda g, a, b, o: (lambda: g * b, lambda: g * a), True)

    __rmul__ = __mul__

    def __truediv__(self, other):
        return self._binary(other, _div, "DivBackward0",
                            lambda g, a, b, o: (lambda: g / b, lambda: -g * ((a / b) / b)), True)

    def __rtruediv__(self, other):
        if _lift(other) is None:
            return NotImplemented
        return self.reciprocal() * other        # torch: x.reciprocal() * 2

    def __neg__(self):
        return self._unary(lambda x: -x, "NegBackward0", lambda g, o: -g, saves=False)

    def __pow__(self, other):
        if isinstance(other, Tensor):            # x ** y
            def back(g, a, b, out):
                def gb():
                    keep = [not (x == 0 and y >= 0) for x, y in
                            zip(_vals(a, out.shape), _vals(b, out.shape))]
                    return g * (out * a.log())._mask(keep)
                return (lambda: (g * (b * a ** (b - 1)))._mask([y != 0 for y in _vals(b, out.shape)]),
                        gb)
            return self._binary(other, _pow, "PowBackward1", back, True)
        if not isinstance(other, (int, float)):
            return NotImplemented
        e = float(other)

        def back0(g, out):
            if e == 0:                            # torch: zeros_like, no history
                return Tensor([0.0] * len(g.data), g.shape)
            return g * (e * self ** (e - 1))
        return self._unary(lambda x: _pow_scalar(x, e), "PowBackward0", back0)

    def __rpow__(self, other):                    # 2 ** x
        if not isinstance(other, (int, float)):
            return NotImplemented
        c = float(other)
        lc = _log(c)

        def back2(g, out):
            if c == 0:
                return g * (out * lc)._mask([not (x >= 0) for x in self.data])
            return g * (out * lc)
        return self._unary(lambda x: _pow(c, x), "PowBackward2", back2)

    # ------------------------------------------------------------ elementwise functions
    def exp(self):
        return self._unary(_exp, "ExpBackward0", lambda g, o: g * o)

    def log(self):
        return self._unary(_log, "LogBackward0", lambda g, o: g / self)

    def tanh(self):
        return self._unary(math.tanh, "TanhBackward0", lambda g, o: g._tanh_backward(o))

    def sigmoid(self):
        return self._unary(_sigmoid, "SigmoidBackward0", lambda g, o: g._sigmoid_backward(o))

    # torch computes these two derivatives with their own functions, whose derivatives
    # (used by create_graph) are written as below
    def _tanh_backward(self, o):
        return self._binary(o, lambda g, y: g * (1 - y * y), "TanhBackwardBackward0",
                            lambda gg, g, o, out: (lambda: gg._tanh_backward(o),
                                                   lambda: gg * (-2 * o * g)), True)

    def _sigmoid_backward(self, o):
        return self._binary(o, lambda g, y: g * (1 - y) * y, "SigmoidBackwardBackward0",
                            lambda gg, g, o, out: (lambda: gg._sigmoid_backward(o),
                                                   lambda: gg * g * (-2 * o + 1)), True)

    def relu(self):
        return self._unary(lambda x: 0.0 if x < 0 else x, "ReluBackward0",
                           lambda g, o: g._mask([not y <= 0 for y in o.data], o))

    def sin(self):
        return self._unary(_sin, "SinBackward0", lambda g, o: g * self.cos())

    def cos(self):
        return self._unary(_cos, "CosBackward0", lambda g, o: g * -self.sin())

    def sqrt(self):
        return self._unary(_sqrt, "SqrtBackward0", lambda g, o: g / (2 * o))

    def abs(self):
        return self._unary(abs, "AbsBackward0", lambda g, o: g * self._sgn())

    def _sgn(self):                 # sign, with zero slope (torch: sgn(nan) = 0)
        out = self._result([_sgn(x) for x in self.data], self.shape, "SgnBackward0", (self,))
        if out.grad_fn is not None:
            out._backward = lambda g: (_zeros(g.shape),)
        return out

    def reciprocal(self):
        return self._unary(lambda x: _div(1.0, x), "ReciprocalBackward0",
                           lambda g, o: -g * (o * o))

    # ------------------------------------------------------------ reductions, indexing, views
    def sum(self):
        s = 0.0
        for x in self.data:
            s += x
        out = self._result([s], (), "SumBackward0", (self,))
        if out.grad_fn is not None:
            out._backward = lambda g: (g._expand(self.shape),)
        return out

    def mean(self):
        n, s = len(self.data), 0.0
        for x in self.data:
            s += x
        out = self._result([s / n], (), "MeanBackward0", (self,))
        if out.grad_fn is not None:
            out._backward = lambda g: (g._expand(self.shape) / n,)
        return out

    def __getitem__(self, i):
        if isinstance(i, bool) or not hasattr(i, "__index__"):
            raise IndexError("only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                             "Variables are valid indices (got %s)" % type(i).__name__)
        i = i.__index__()
        if self.shape == () and i == 0:
            raise IndexError("invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                             "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number")
        n = self.shape[0] if self.shape else 0
        if not -n <= i < n:
            raise IndexError("index %d is out of bounds for dimension 0 with size %d" % (i, n))
        j = i % n
        out = self._result([self.data[j]], (), "SelectBackward0", (self,))
        out._zero = self._zero
        if out.grad_fn is not None:
            out._backward = lambda g: (g._scatter(j, n),)
        return out

    def _scatter(self, j, n):       # 0-d -> zeros(n) with self at j (select's backward)
        data = [0.0] * n
        data[j] = self.data[0]
        out = self._result(data, (n,), "SelectBackwardBackward0", (self,))
        if out.grad_fn is not None:
            out._backward = lambda g: (g[j],)
        return out

    def _expand(self, shape):       # 0-d or length-1 -> shape
        n = shape[0] if shape else 1
        out = self._result(self.data * n, shape, "ExpandBackward0", (self,))
        out._zero = self._zero
        if out.grad_fn is not None:
            out._backward = lambda g: (_unb(g, self.shape),)
        return out

    def _view(self, shape):         # () <-> (1,)
        out = self._result(list(self.data), shape, "ViewBackward0", (self,))
        out._zero = self._zero
        if out.grad_fn is not None:
            out._backward = lambda g: (g._view(self.shape),)
        return out

    def _mask(self, keep, ref=None):
        """where(keep, self, 0).  ref: a tensor the mask was computed from; it becomes a parent
        with zero slope (torch's threshold_backward keeps such a link)."""
        keep = keep if len(keep) == len(self.data) else keep * len(self.data)
        parents = (self,) if ref is None else (self, ref)
        out = self._result([x if k else 0.0 for x, k in zip(self.data, keep)], self.shape,
                           "WhereBackward0", parents, True)
        if out.grad_fn is not None:
            need = [p._requires_grad for p in parents]
            out._backward = lambda g: tuple(
                g._mask(keep) if i == 0 else Tensor([0.0] * len(ref.data), ref.shape)
                for i in range(len(parents)) if need[i])
        return out

    def _clone(self):
        out = self._result(list(self.data), self.shape, "CloneBackward0", (self,))
        if out.grad_fn is not None:
            out._backward = lambda g: (g,)
        return out

    # ------------------------------------------------------------ values
    def tolist(self):
        return self.data[0] if self.shape == () else list(self.data)

    def item(self):
        if len(self.data) != 1:
            raise RuntimeError("a Tensor with %d elements cannot be converted to Scalar"
                               % len(self.data))
        return self.data[0]

    def __float__(self):
        return float(self.item())

    def __iter__(self):
        if self.shape == ():
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __len__(self):
        if self.shape == ():
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self):
        extra = ""
        if self.grad_fn is not None:
            extra = ", grad_fn=<%s>" % self.grad_fn.name()
        elif self._requires_grad:
            extra = ", requires_grad=True"
        return "tensor(%r%s)" % (self.tolist(), extra)

    # ------------------------------------------------------------ autograd attributes
    @property
    def is_leaf(self):
        return self.grad_fn is None

    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        if not self.is_leaf and flag:
            raise RuntimeError("you can only change requires_grad flags of leaf variables.")
        self.requires_grad_(flag)

    def requires_grad_(self, requires_grad=True):
        if not self.is_leaf:
            if not requires_grad:
                raise RuntimeError(_LEAF_FLAG_MSG)
            return self
        self._requires_grad = bool(requires_grad)
        return self

    def retain_grad(self):
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if not self.is_leaf:
            self._retains_grad = True

    @property
    def grad(self):
        if self._grad is None and not self.is_leaf and not self._retains_grad:
            warnings.warn(_NONLEAF_MSG, UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError("assigned grad expected to be a Tensor or None but got grad of "
                                "type %s" % type(value).__name__)
            if value.shape != self.shape:
                raise RuntimeError("attempting to assign a gradient of size '%s' to a tensor of "
                                   "size '%s'. Please ensure that the gradient and the tensor "
                                   "are the same size" % (_shape_str(value.shape),
                                                          _shape_str(self.shape)))
        self._grad = value

    def detach(self):
        return Tensor(self.data, self.shape)     # shares the values, like torch

    def backward(self, gradient=None, retain_graph=None, create_graph=False):
        outputs, grads = _make_grads((self,), _as_tuple(gradient))
        _run_engine(outputs, grads, retain_graph, create_graph)


def tensor(data, requires_grad=False):
    if isinstance(data, Tensor):
        data = data.tolist()
    if isinstance(data, (list, tuple)):
        t = Tensor([float(x) for x in data], (len(data),))
    else:
        t = Tensor([float(data)], ())
    t._requires_grad = bool(requires_grad)
    return t


# ---------------------------------------------------------------- the engine
def _make_grads(outputs, grad_outputs):
    outputs, grad_outputs = _as_tuple(outputs), _as_tuple(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError("grad_tensors has %d tensors but tensors has %d"
                           % (len(grad_outputs), len(outputs)))
    grads = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if isinstance(g, Tensor):
            if g.shape != out.shape:
                raise RuntimeError("Mismatch in shape: grad_output[%d] has a shape of torch.Size(%s) "
                                   "and output[%d] has a shape of torch.Size(%s)."
                                   % (i, _shape_str(g.shape), i, _shape_str(out.shape)))
        elif g is None:
            if out._requires_grad:
                if len(out.data) != 1:
                    raise RuntimeError("grad can be implicitly created only for scalar outputs")
                g = Tensor([1.0], out.shape)
        else:
            raise TypeError("gradients can be either Tensors or None, but got %s"
                            % type(g).__name__)
        grads.append(g)
    for i, out in enumerate(outputs):
        if not out._requires_grad:
            raise RuntimeError("element %d of tensors does not require grad and does not have a "
                               "grad_fn" % i)
    return outputs, grads


def _as_tuple(x):
    if isinstance(x, Tensor):
        return (x,)
    if x is None:
        return (None,)
    return tuple(x)


def _run_engine(outputs, grads, retain_graph, create_graph, inputs=None):
    """Backpropagate from outputs.  inputs=None: accumulate into the .grad of leaves (backward).
    Otherwise return the gradients that reach each input (autograd.grad)."""
    if retain_graph is None:
        retain_graph = create_graph

    # 1. topological order of the graph (parents before children), iterative DFS
    topo, seen = [], set()
    for root in outputs:
        if id(root) in seen:
            continue
        seen.add(id(root))
        stack = [(root, iter(root._prev))]
        while stack:
            node, it = stack[-1]
            for p in it:
                if id(p) not in seen:
                    seen.add(id(p))
                    stack.append((p, iter(p._prev)))
                    break
            else:
                stack.pop()
                topo.append(node)

    # 2. in grad() mode keep only the nodes that lead to an input
    input_ids = None
    if inputs is not None:
        input_ids = {id(t) for t in inputs}
        needed = set()
        for node in topo:
            if id(node) in input_ids or any(id(p) in needed for p in node._prev):
                needed.add(id(node))
        topo = [n for n in topo if id(n) in needed]
    keep = {id(n) for n in topo}

    # 3. the order to run in, as torch does: a node once all its consumers are done (Kahn),
    #    newest first, leaves (torch's AccumulateGrad) as soon as they are ready
    deps = {}
    for node in topo:
        for p in node._prev:
            if id(p) in keep:
                deps[id(p)] = deps.get(id(p), 0) + 1
    key = lambda n: (-_INF if n.is_leaf else -n._seq, n._seq, n)
    heap = [key(r) for r in {id(r): r for r in outputs if id(r) in keep}.values()
            if id(r) not in deps]
    heapq.heapify(heap)
    order = []
    while heap:
        node = heapq.heappop(heap)[-1]
        order.append(node)
        for p in node._prev:
            if id(p) in keep:
                deps[id(p)] -= 1
                if deps[id(p)] == 0:
                    heapq.heappush(heap, key(p))

    # 4. call each node's _backward closure in that order
    buf, captured = {}, {}

    def deliver(node, g):
        buf[id(node)] = g if id(node) not in buf else buf[id(node)] + g

    prev_mode = _GRAD_ENABLED[0]
    _GRAD_ENABLED[0] = bool(create_graph)
    try:
        for root, g in zip(outputs, grads):
            if id(root) in keep:
                deliver(root, g)
        for node in order:
            g = buf.pop(id(node))
            if input_ids is not None and id(node) in input_ids:
                captured[id(node)] = g
            if node._retains_grad:
                node._grad = g._clone() if node._grad is None else node._grad + g
            if node.is_leaf:
                if input_ids is None and node._requires_grad:
                    _accumulate(node, g, create_graph)
                continue
            if not any(id(p) in keep for p in node._prev):
                continue
            pgrads = node._backward(g)
            if not retain_graph and node._saves:
                node._backward = _freed       # saved values are gone
            for p, gp in zip(node._prev, pgrads):
                if id(p) in keep:
                    deliver(p, gp)
    finally:
        _GRAD_ENABLED[0] = prev_mode
    return captured


def _accumulate(leaf, g, create_graph):
    if leaf._grad is None:
        leaf._grad = g._clone() if create_graph else Tensor(list(g.data), g.shape)
    elif create_graph:
        leaf._grad = leaf._grad + g
    else:                                   # in place, like torch's `grad += new_grad`
        d = leaf._grad.data
        for i, x in enumerate(g.data):
            d[i] += x


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False):
    outputs = _as_tuple(outputs)
    inputs = _as_tuple(inputs)
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    outputs, grads = _make_grads(outputs, grad_outputs)
    for t in inputs:
        if not isinstance(t, Tensor):
            raise TypeError("inputs must be Tensors")
        if not t._requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    captured = _run_engine(outputs, grads, retain_graph, create_graph, inputs)
    result = []
    for i, t in enumerate(inputs):
        g = captured.get(id(t))
        if g is None and not allow_unused:
            raise RuntimeError("The differentiated Tensor at index %d appears to not have been used "
                               "in the graph. Set allow_unused=True if this is the desired "
                               "behavior." % i)
        result.append(g)
    return tuple(result)
