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
import queue
import subprocess
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Sequence

from gradcheck import oracles
from gradcheck.program import Program
from gradcheck.sampling import Point, Sampling
from gradcheck.worker import die_with_parent


@dataclass(frozen=True)
class Check:
    """One gradient check for jax: its points as listed, or how the helper draws them."""

    program: Program
    requires_grad: tuple[str, ...]
    points: list[Point] | Sampling


#: seconds the grader waits for one result of its helper before it stops the helper and
#: computes what is missing itself (the helper normally sends everything within seconds)
PATIENCE = 300.0


class HelperError(RuntimeError):
    """The helper could not deliver a result (it failed, or exited before sending it)."""


class Helper:
    """A helper process working on `modules` (lists of checks jax compiles together, as
    `gradcheck.grader.jax_modules` groups them). `points[i]` is the future of the i-th check's
    points (numbered across modules), `results[m]` of module m's jax results. Like the worker,
    the helper is killed when the thread that started it ends (PR_SET_PDEATHSIG)."""

    def __init__(self, modules: Sequence[Sequence[Check]]) -> None:
        count = sum(map(len, modules))
        self.points: list[Future[list[Point]]] = [Future() for _ in range(count)]
        self.results: list[Future[list[oracles.OracleResult]]] = [Future() for _ in modules]
        command = [sys.executable, "-m", "gradcheck.ahead", str(os.getpid())]
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL)
        assert self._proc.stdin is not None
        work = pickle.dumps([list(module) for module in modules])
        # written from a thread: the helper may start sending before it has read everything
        threading.Thread(target=_write, args=(self._proc.stdin, work), daemon=True).start()
        # a thread of its own: one helper that hangs cannot hold up another grader's
        self._reader = threading.Thread(target=self._read, name="gradcheck-ahead", daemon=True)
        self._reader.start()

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
        except Exception:  # the end of its output, or output it could not have sent
            pass
        finally:
            stream.close()
            gone = HelperError(f"the helper process exited ({self._proc.wait()}) before "
                               "sending this result")
            for future in [*self.points, *self.results]:
                if not future.done():
                    future.set_exception(gone)

    def close(self) -> None:
        """Stop the helper if it still works: every result not sent yet fails."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._reader.join()


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


def here(modules: Sequence[Sequence[Check]], submit: Callable[..., Future]
         ) -> tuple[list[Future[list[Point]]], list[Future[list[oracles.OracleResult]]]]:
    """The helper's work done in this process, which has jax imported already (a test session):
    the points drawn now, in order, and jax run by `submit(function, *args) -> Future` (on
    jax's thread), its interpreter compiled first. Futures as a Helper's."""
    submit(_warm_up)
    points: list[Future[list[Point]]] = []
    results: list[Future[list[oracles.OracleResult]]] = []
    for module in modules:
        drawn = [_draw(check) for check in module]
        for one in drawn:
            points.append(Future())
            if isinstance(one, HelperError):
                points[-1].set_exception(one)
            else:
                points[-1].set_result(one)
        results.append(submit(_run_module, module, drawn))
    return points, results


def _draw(check: Check) -> list[Point] | HelperError:
    """The check's points, or why they could not be drawn (the grader draws them again, and
    reports the error)."""
    try:
        return check.points.draw() if isinstance(check.points, Sampling) else check.points
    except Exception as error:
        return HelperError(f"{type(error).__name__}: {error}")


def _run_module(module: Sequence[Check], drawn: Sequence[list[Point] | HelperError]
                ) -> list[oracles.OracleResult]:
    """jax's results of a module's checks, compiled together (`jax_grad.run_many`)."""
    jax_grad = oracles.backend("jax")
    if isinstance(jax_grad, oracles.Skipped):
        raise HelperError(str(jax_grad))
    if any(isinstance(points, HelperError) for points in drawn):
        raise HelperError("a check's points could not be drawn")
    return jax_grad.run_many([oracles.job(check.program, points, check.requires_grad)
                              for check, points in zip(module, drawn)])


def _warm_up() -> None:
    jax_grad = oracles.backend("jax")
    if not isinstance(jax_grad, oracles.Skipped):
        jax_grad.warm_up()


def _serve(modules: list[list[Check]], out: BinaryIO) -> None:
    """The helper process's work: jax imported, then each module's points drawn, in order,
    while a second thread compiles jax's interpreter (XLA, without the GIL) and then runs jax
    on each module as soon as its points are drawn."""
    oracles.backend("jax")
    lock = threading.Lock()

    def send(kind: str, index: int, payload: Any) -> None:
        with lock:
            pickle.dump((kind, index, payload), out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()

    drawn: queue.SimpleQueue[tuple[int, list[Check], list[list[Point] | HelperError]] | None] = (
        queue.SimpleQueue())
    runner = threading.Thread(target=_run_jax, args=(drawn, send), daemon=True)
    runner.start()
    index = 0
    for number, module in enumerate(modules):
        points = [_draw(check) for check in module]
        for one in points:
            send("points", index, one)
            index += 1
        drawn.put((number, module, points))
    drawn.put(None)
    runner.join()


def _run_jax(drawn: queue.SimpleQueue, send: Callable[[str, int, Any], None]) -> None:
    try:
        _warm_up()
    except Exception:  # each module's run says what went wrong
        pass
    while (item := drawn.get()) is not None:
        number, module, points = item
        try:
            send("jax", number, _run_module(module, points))
        except Exception as error:
            send("jax", number, error if isinstance(error, HelperError)
                 else HelperError(f"{type(error).__name__}: {error}"))


def main() -> None:
    """The helper process, killed if the grader dies: results go to a copy of its standard
    output, and anything else written there (a library's warning) to its standard error, so
    that it cannot spoil them."""
    die_with_parent(int(sys.argv[1]))
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    _serve(pickle.load(sys.stdin.buffer), out)


if __name__ == "__main__":
    from gradcheck import ahead  # pickles name gradcheck.ahead's classes, not __main__'s

    ahead.main()
