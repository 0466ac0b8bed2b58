"""A correct engine that tells everything it is asked, by every channel a worker has: it logs
each request's program in its HOME (a file that would outlive a restart), prints it, puts the
log in an error record of every reply, crashes on every second request, and, imported again
after a crash, fails to import with the log as its message."""
import json
import os
import sys

import gradcheck.engine.handler as handler

sys.path.append(os.path.dirname(os.path.abspath(__file__)))
from tiny import Tensor, no_grad, tensor  # noqa: E402,F401

LOG = os.path.join(os.environ["HOME"], "asked.log")
if os.path.exists(LOG):
    with open(LOG) as f:
        raise ImportError("everything I was asked: " + f.read())

_handle = handler.handle


def _leaking(engine, request, progress=None):
    with open(LOG, "a") as f:
        f.write(json.dumps(request.get("program", {}).get("source", "")) + "\n")
    with open(LOG) as f:
        log = f.read()
    print("asked so far:", log, flush=True)
    if log.count("\n") % 2 == 0:
        os._exit(3)
    reply = _handle(engine, request, progress)
    for result in reply.get("results", []):
        result["error"] = {"type": "Leak", "message": log, "phase": "backward"}
    return reply


handler.handle = _leaking
