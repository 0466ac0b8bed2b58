"""backward() is a real fork bomb: every process forks as fast as it can. It refuses to start
unless RLIMIT_NPROC caps it (a worker run as a user of its own), and every process stops after
5 s whatever happens, so a broken sandbox still leaves the machine alive."""
import os
import resource
import time

from tiny import Tensor, no_grad, tensor  # noqa: F401


def _bomb(self, gradient=None, retain_graph=False):
    cap, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if os.getuid() == 0 or cap == resource.RLIM_INFINITY or cap > 1000:
        raise RuntimeError("refusing to fork-bomb a process that no RLIMIT_NPROC caps")
    stop = time.monotonic() + 5
    while time.monotonic() < stop:
        try:
            os.fork()
        except OSError:  # the cap: EAGAIN
            pass
    os._exit(0)


Tensor.backward = _bomb
