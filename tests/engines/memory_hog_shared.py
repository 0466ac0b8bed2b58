"""backward() fills shared memory, which RLIMIT_DATA does not count, slowly enough that the
grader's poll of resident memory sees it; it stops at 2 GB so that a broken poll cannot hurt the
machine."""
import mmap
import time

from tiny import Tensor, no_grad, tensor  # noqa: F401

_hoard = []


def _hog(self, gradient=None, retain_graph=False):
    while len(_hoard) < 128:
        block = mmap.mmap(-1, 16 << 20)  # MAP_SHARED | MAP_ANONYMOUS
        block.write(b"x" * (16 << 20))  # touched: resident
        _hoard.append(block)
        time.sleep(0.01)
    time.sleep(3600)


Tensor.backward = _hog
