"""Work done ahead of live grading, in a helper process: the sampled points and jax's results.

Grading a bank live, the grader's process spends seconds importing torch and running it, all of
it under one GIL. hypothesis drawing the sampled points, and jax (imported, its interpreter
compiled, then run on every gradient check), take about as long again, so they run in a helper
process on another core, started before the grader imports torch. The helper runs gradcheck's own
code only, never a submission: it is started with the grader's interpreter, reads its work as a
pickle on its standard input and sends each result as a pickle on its standard output, as soon as
it has it. It gives the same points and the same results, to the bit, as the grader's own process
would (the same functions at the same seeds), and the grader computes in its own process anything
the helper did not deliver.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, BinaryIO, Sequence

from gradcheck import lanes, oracles
from gradcheck.program import Program
from gradcheck.sampling import Point, Sampling


@dataclass(frozen=True)
class Check:
    """One gradient check for jax: its points as listed, or how the helper draws them."""

    program: Program
    requires_grad: tuple[str, ...]
    points: list[Point] | Sampling


class HelperError(RuntimeError):
    """The helper could not deliver a result (it failed, or exited before sending it)."""


class Helper:
    """A helper process working on `modules` (lists of checks jax compiles together, as
    `gradcheck.grader.jax_modules` groups them). `points[i]` is the future of the i-th check's
    points (numbered across modules), `results[m]` of module m's jax results."""

    def __init__(self, modules: Sequence[Sequence[Check]]) -> None:
        count = sum(map(len, modules))
        self.points: list[Future[list[Point]]] = [Future() for _ in range(count)]
        self.results: list[Future[list[oracles.OracleResult]]] = [Future() for _ in modules]
        self._proc = subprocess.Popen([sys.executable, "-m", "gradcheck.ahead"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL)
        assert self._proc.stdin is not None
        work = pickle.dumps([list(module) for module in modules])
        # written from a thread: the helper may start sending before it has read everything
        threading.Thread(target=_write, args=(self._proc.stdin, work), daemon=True).start()
        self._done = lanes.lane("gradcheck-ahead").submit(self._read)

    def _read(self) -> None:
        """Settle each future as its result arrives; at the end, fail the ones never sent."""
        stream = self._proc.stdout
        assert stream is not None
        try:
            while True:
                kind, index, payload = pickle.load(stream)
                future = (self.points if kind == "points" else self.results)[index]
                if isinstance(payload, HelperError):
                    future.set_exception(payload)
                else:
                    future.set_result(payload)
        except (EOFError, OSError, pickle.UnpicklingError):
            pass
        finally:
            stream.close()
            gone = HelperError(f"the helper process exited ({self._proc.wait()}) before "
                               "sending this result")
            for future in [*self.points, *self.results]:
                if not future.done():
                    future.set_exception(gone)

    def close(self) -> None:
        """Stop the helper if it still works, and wait for its last results to be read."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._done.result()


def available() -> bool:
    """Whether a helper is worth starting: jax is installed and not imported here yet (a process
    that has jax already, as a test session does, runs it in its own threads)."""
    import importlib.util

    return "jax" not in sys.modules and importlib.util.find_spec("jax") is not None


def _write(stream: BinaryIO, data: bytes) -> None:
    try:
        stream.write(data)
        stream.close()
    except OSError:  # the helper is gone; the reader reports it
        pass


def _send(stream: BinaryIO, kind: str, index: int, payload: Any) -> None:
    pickle.dump((kind, index, payload), stream, protocol=pickle.HIGHEST_PROTOCOL)
    stream.flush()


def _serve(modules: list[list[Check]], out: BinaryIO) -> None:
    """The helper's work: jax imported, then every check's points in order while jax's
    interpreter is compiled, then jax's results module by module."""
    jax_grad = oracles.backend("jax")
    warm = threading.Thread(target=_warm_up, args=(jax_grad,), daemon=True)
    warm.start()  # XLA compiles without the GIL, while hypothesis draws
    checks = [check for module in modules for check in module]
    drawn: list[list[Point] | None] = []
    for index, check in enumerate(checks):
        try:
            points = (check.points.draw() if isinstance(check.points, Sampling)
                      else check.points)
        except Exception as error:  # the grader draws it again, and reports the error
            drawn.append(None)
            _send(out, "points", index, HelperError(f"{type(error).__name__}: {error}"))
            continue
        drawn.append(points)
        _send(out, "points", index, points)
    warm.join()
    start = 0
    for number, module in enumerate(modules):
        points = drawn[start:start + len(module)]
        start += len(module)
        try:
            if isinstance(jax_grad, oracles.Skipped):
                raise HelperError(str(jax_grad))
            if any(p is None for p in points):
                raise HelperError("a check's points could not be drawn")
            jobs = [oracles.job(c.program, p, c.requires_grad) for c, p in zip(module, points)]
            _send(out, "jax", number, jax_grad.run_many(jobs))
        except Exception as error:
            _send(out, "jax", number, HelperError(f"{type(error).__name__}: {error}"))


def _warm_up(jax_grad: Any) -> None:
    if not isinstance(jax_grad, oracles.Skipped):
        jax_grad.warm_up()


def main() -> None:
    """The helper process: results go to a copy of its standard output, and anything else
    written there (a library's warning) to its standard error, so that it cannot spoil them."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    _serve(pickle.load(sys.stdin.buffer), out)


if __name__ == "__main__":
    from gradcheck import ahead  # pickles name gradcheck.ahead's classes, not __main__'s

    ahead.main()
