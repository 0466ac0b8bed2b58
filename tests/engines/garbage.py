"""backward() announces a 4 GB frame on the grader's channel, then sleeps."""
import os
import stat
import time

from tiny import Tensor, no_grad, tensor  # noqa: F401


def _garbage(self, gradient=None, retain_graph=False):
    for name in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                os.write(int(name), b"\xff\xff\xff\xff" + b"x" * 1000)
        except OSError:
            pass
    time.sleep(3600)


Tensor.backward = _garbage
