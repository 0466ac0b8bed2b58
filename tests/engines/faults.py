"""tiny, with one named fault that strikes only where tanh is used, for whole grading runs.

`arm(name)` installs a fault of FAULTS on tiny's Tensor and returns `(tensor, no_grad)`. The
worker passes no settings to a submission, so a test writes a small submission file:

    import sys; sys.path.append(ENGINES)
    from faults import arm
    tensor, no_grad = arm("segfault")

A fault strikes in `tanh()` itself (forward faults), in `backward()` of a graph that has a tanh
node, or in what such a graph's tensors return (`tolist()`, `.grad`). An exercise whose program
has no tanh meets a correct engine, so it must be graded exactly as tiny is.
"""

import ctypes
import math
import os
import sys
import threading
import time

from liar import Liar
from tiny import Tensor, no_grad, tensor

_backward = Tensor.backward
_tanh = Tensor.tanh
_tolist = Tensor.tolist


def uses_tanh(node):
    """Whether `node` is a tanh or was computed from one."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.grad_fn is not None and n.grad_fn.name() == "TanhBackward0":
            return True
        stack.extend(n._parents)
    return False


def _leaves(node):
    stack, seen, found = [node], set(), []
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            if n.is_leaf:
                found.append(n)
            stack.extend(n._parents)
    return found


# --- what a fault does --------------------------------------------------------------------------


def _spin():
    while True:
        pass


def _hoard_memory():
    hoard = []
    while True:  # until RLIMIT_DATA answers MemoryError
        hoard.append(bytearray(16 << 20))


def _flood_output():
    chunk = "flood " * 170_000  # about 1 MB
    for _ in range(100):  # 100 MB to each stream (RLIMIT_FSIZE stops it long before)
        sys.stdout.write(chunk)
        os.write(2, chunk.encode())


def _fork_flood():
    """100 sleeping children, half in sessions of their own; bounded, so a broken sandbox still
    leaves the machine alive (each exits after 30 s). backward() then waits a second with them,
    so that the grader's poll (every 50 ms) finds them while it is still in backward()."""
    for i in range(100):
        if os.fork() == 0:
            if i % 2:
                os.setsid()
            time.sleep(30)
            os._exit(0)
    time.sleep(1)


def _thread_flood():
    for _ in range(300):
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()


def _escape():
    """Daemonise the classic way (fork, setsid, fork, parent exits): the grandchild is orphaned
    in a session of its own. After 3 s it writes a marker beside the submission, which a test
    looks for; then it exits, so it never outlives the test by much."""
    marker = os.path.join(os.path.dirname(os.path.abspath(_armed["by"])), "escaped.marker")
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(3)
            with open(marker, "w") as f:
                f.write(str(os.getpid()))
            os._exit(0)
        os._exit(0)
    os.wait()


class _LyingList(list):
    """A list whose every element compares equal to anything."""

    def __eq__(self, other):
        return True

    def __len__(self):
        return 1


class _RaisingList:
    def tolist(self):
        raise RuntimeError("this gradient cannot be read")


#: faults in backward() of a graph with tanh: what happens instead of (or after) backward
BACKWARD = {
    "hang_backward": lambda node: time.sleep(3600),
    "spin_backward": lambda node: _spin(),
    "os_exit": lambda node: os._exit(3),
    "sys_exit": lambda node: sys.exit(3),
    "system_exit": lambda node: (_ for _ in ()).throw(SystemExit("grading is over")),
    "keyboard_interrupt": lambda node: (_ for _ in ()).throw(KeyboardInterrupt()),
    "segfault": lambda node: ctypes.string_at(0),
    "memory": lambda node: _hoard_memory(),
    "output_flood": lambda node: _flood_output(),
    "fork_flood": lambda node: _fork_flood(),
    "thread_flood": lambda node: _thread_flood(),
    "escape": lambda node: _escape(),
}
#: faults in the leaves' .grad after a correct backward() of a graph with tanh
GRADS = {
    "nan_grad": lambda g: math.nan,
    "inf_grad": lambda g: math.inf,
    "liar_grad": Liar,
    "string_grad": str,
    "huge_grad": lambda g: [g] * 1_000_000,
    "lying_list_grad": lambda g: _LyingList([g + 1.0]),
    "raising_grad": lambda g: _RaisingList(),
    "bool_grad": lambda g: True,
}
#: faults in tolist() of a tensor computed from tanh
TOLIST = {
    "tolist_raises": lambda t: (_ for _ in ()).throw(ValueError("no list for you")),
    "tolist_liar": lambda t: Liar(t.data),
    "tolist_nan": lambda t: math.nan,
    "tolist_string": lambda t: str(t.data),
    "tolist_list": lambda t: [t.data],  # a list for a scalar
}
#: faults in tanh() itself
FORWARD = {
    "hang_forward": lambda x: _spin(),
    "forward_raises": lambda x: (_ for _ in ()).throw(KeyboardInterrupt()),
}
FAULTS = {**BACKWARD, **GRADS, **TOLIST, **FORWARD}


#: the file of the submission that armed the fault (`arm`)
_armed = {"by": __file__}


def arm(name, by=__file__):
    """Install the fault `name`, for the submission in the file `by`; returns the engine's
    `tensor` and `no_grad`."""
    _armed["by"] = by
    if name in BACKWARD:
        strike = BACKWARD[name]

        def backward(self, gradient=None, retain_graph=False):
            if uses_tanh(self):
                strike(self)
            return _backward(self, gradient, retain_graph)

        Tensor.backward = backward
    elif name in GRADS:
        spoil = GRADS[name]

        def backward(self, gradient=None, retain_graph=False):
            _backward(self, gradient, retain_graph)
            if uses_tanh(self):
                for leaf in _leaves(self):
                    if leaf.grad is not None:
                        leaf.grad = spoil(leaf.grad)

        Tensor.backward = backward
    elif name in TOLIST:
        lie = TOLIST[name]
        Tensor.tolist = lambda self: lie(self) if uses_tanh(self) else _tolist(self)
    else:
        strike = FORWARD[name]
        Tensor.tanh = lambda self: strike(self) or _tanh(self)
    return tensor, no_grad
