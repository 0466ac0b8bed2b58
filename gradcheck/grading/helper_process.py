"""Work done ahead of live grading, in a helper process: the sampled points and jax's results.

Grading a bank live, the grader's process spends seconds importing torch and running it, all of
it under one GIL. hypothesis drawing the sampled points, and jax (imported, its interpreter
compiled, then run on every gradient check), take about as long again, so they run in a helper
process on another core, started before the grader loads the bank (`prestart`) or, at the
latest, before it imports torch. The helper runs gradcheck's own code only, never a submission:
it is started with the grader's interpreter, imports jax at once, reads its work as a pickle on
its standard input and sends each result as a pickle on its standard output, as soon as it has
it. It gives the same points and the same results, to the bit, as the grader's own process
would (the same functions at the same seeds), and the grader computes in its own process anything
the helper did not deliver.
"""

from __future__ import annotations

import ctypes
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
from gradcheck.bank.sampling import Point, Sampling
from gradcheck.oracles import second_order
from gradcheck.engine.worker import die_with_parent
from gradcheck.program.language import Program


@dataclass(frozen=True)
class Check:
    """One gradient check for jax: its points as listed, or how the helper draws them; or a
    second-order check (`second`), whose rows jax gives by jvp of grad (with `vector`, H v)."""

    program: Program
    requires_grad: tuple[str, ...]
    points: list[Point] | Sampling
    second: bool = False
    vector: Point | None = None


#: seconds the grader waits for one result of its helper before it stops the helper and
#: computes what is missing itself (the helper normally sends everything within seconds)
PATIENCE = 300.0


class HelperError(RuntimeError):
    """The helper could not deliver a result (it failed, or exited before sending it)."""


class Helper:
    """A helper process working on `modules` (lists of checks jax compiles together, as
    `gradcheck.grading.plan.jax_modules` groups them). `points[i]` is the future of the i-th check's
    points (numbered across modules), `results[m]` of module m's jax results. It takes the
    process `prestart` started, if there is one, or starts its own. Like the worker, the helper
    is killed when the thread that started it ends (PR_SET_PDEATHSIG)."""

    def __init__(self, modules: Sequence[Sequence[Check]]) -> None:
        count = sum(map(len, modules))
        self.points: list[Future[list[Point]]] = [Future() for _ in range(count)]
        self.results: list[Future[list[oracles.OracleResult]]] = [Future() for _ in modules]
        spare = _SPARE.pop() if _SPARE else None
        self._proc = spare if spare is not None and spare.poll() is None else _spawn()
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


def prestart() -> None:
    """Start a helper process now, before there is work for it, if one is worth starting: it
    imports jax and compiles jax's interpreter while this process loads the bank. The next
    `Helper` gives it its work; `discard` stops it if there is none. Like a Helper's, it is
    killed when the thread that started it ends."""
    if not _SPARE and available():
        _SPARE.append(_spawn())


def discard() -> None:
    """Stop the helper `prestart` started, if no Helper took it (a bank that jax checks not)."""
    while _SPARE:
        spare = _SPARE.pop()
        spare.kill()
        spare.wait()


#: the helper process started ahead of its work, until a Helper takes it
_SPARE: list[subprocess.Popen[bytes]] = []


def _spawn() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "gradcheck.grading.helper_process", str(os.getpid())],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)


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
    first = [i for i, check in enumerate(module) if not check.second]
    results: list[Any] = [None] * len(module)
    for i, result in zip(first, jax_grad.run_many([
            oracles.job(module[i].program, drawn[i], module[i].requires_grad) for i in first])):
        results[i] = result
    for i, check in enumerate(module):
        if check.second:
            results[i] = second_order.compute(check.program, drawn[i], check.requires_grad,
                                              check.vector, ("jax",))["jax"]
    return results


def _warm_up() -> None:
    jax_grad = oracles.backend("jax")
    if not isinstance(jax_grad, oracles.Skipped):
        jax_grad.warm_up()


def _warm_up_quietly(imported: threading.Event) -> None:
    """jax imported, then `imported` set (also if that failed), then its interpreter compiled."""
    try:
        oracles.backend("jax")
        imported.set()
        _warm_up()
    except Exception:  # each module's run says what went wrong
        pass
    finally:
        imported.set()


def _serve(modules: list[list[Check]], out: BinaryIO, warm: threading.Thread) -> None:
    """The helper process's work, once `warm` has begun importing jax and compiling its
    interpreter (XLA, without the GIL): each module's points drawn, in order, while a second
    thread runs jax on each module as soon as its points are drawn and the interpreter is
    ready."""
    lock = threading.Lock()

    def send(kind: str, index: int, payload: Any) -> None:
        with lock:
            pickle.dump((kind, index, payload), out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()

    drawn: queue.SimpleQueue[tuple[int, list[Check], list[list[Point] | HelperError]] | None] = (
        queue.SimpleQueue())
    runner = threading.Thread(target=_run_jax, args=(warm, drawn, send), daemon=True)
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


def _run_jax(warm: threading.Thread, drawn: queue.SimpleQueue,
             send: Callable[[str, int, Any], None]) -> None:
    warm.join()
    _give_back_memory()
    while (item := drawn.get()) is not None:
        number, module, points = item
        try:
            send("jax", number, _run_module(module, points))
        except Exception as error:
            send("jax", number, error if isinstance(error, HelperError)
                 else HelperError(f"{type(error).__name__}: {error}"))
        _give_back_memory()


def _give_back_memory() -> None:
    """Return to the system the heap that XLA's compiles freed (about 60 MB after the
    interpreter's), which glibc's malloc would otherwise keep: the helper lives beside a grader
    that has torch imported, in containers of 768 MB."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def main() -> None:
    """The helper process, killed if the grader dies: results go to a copy of its standard
    output, and anything else written there (a library's warning) to its standard error, so
    that it cannot spoil them. jax is imported, and its interpreter compiled, while it waits
    for its work (which a prestarted helper gets once the bank is loaded)."""
    die_with_parent(int(sys.argv[1]))
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    imported = threading.Event()
    warm = threading.Thread(target=_warm_up_quietly, args=(imported,), daemon=True)
    warm.start()
    try:
        modules = pickle.load(sys.stdin.buffer)
    except EOFError:  # a prestarted helper given no work: its grader has finished
        os._exit(0)  # at once, with jax's import perhaps half done in the other thread
    imported.wait()  # hypothesis's draws would slow jax's import, which XLA's compile cannot
    _serve(modules, out, warm)
    os._exit(0)  # everything is sent: no need to wait for jax's teardown


if __name__ == "__main__":
    # pickles name gradcheck.grading.helper_process's classes, not __main__'s
    from gradcheck.grading import helper_process

    helper_process.main()
