"""Background threads for the oracles that live as long as the process.

The grader runs torch and jax beside its worker, in threads. Those threads must never end: when a
thread that ran torch's autograd ends, torch destroys what its thread-local queue still holds
(graph nodes left by a backward that raised, as behaviour checks make it do), which needs the
GIL. A thread of a `ThreadPoolExecutor` ends at interpreter exit, just after Python joined it, so
that clean-up can race with Python's finalisation, and then the whole process aborts with
"terminate called without an active exception" after the grading has finished (about one run in
twenty on a loaded machine). A daemon thread that waits for work forever is never ended: the
process exits around it.
"""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable

_LANES: dict[str, Lane] = {}
_LOCK = threading.Lock()


class Lane:
    """One daemon thread that runs the calls submitted to it, in order."""

    def __init__(self, name: str) -> None:
        self.pid = os.getpid()
        self._calls: queue.SimpleQueue[tuple[Future, Callable[..., Any], tuple[Any, ...]]] = (
            queue.SimpleQueue())
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def submit(self, function: Callable[..., Any], *args: Any) -> Future:
        """`function(*args)` on this lane's thread; cancel the future to skip it if not begun."""
        future: Future = Future()
        self._calls.put((future, function, args))
        return future

    def _serve(self) -> None:
        while True:
            future, function, args = self._calls.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(function(*args))
                except BaseException as error:  # the caller sees it through the future
                    future.set_exception(error)
            del future, function, args  # hold no result or argument while idle


def lane(name: str) -> Lane:
    """The process's lane called `name`, started on first use (again in a forked child, whose
    copy of the thread does not run)."""
    with _LOCK:
        found = _LANES.get(name)
        if found is None or found.pid != os.getpid():
            found = _LANES[name] = Lane(name)
        return found
