"""The worker process: imports one submission and answers the grader's requests with plain JSON.

Started by :mod:`gradcheck.engine.sandbox` as `python -s -P -B -c BOOTSTRAP GRADCHECK_DIR
CONFIG`, or forked by a zygote started as `... ZYGOTE ...` (`zygote`), which then runs `main` as
the new process would. It talks over a private socket (an inherited file descriptor) in frames:
a 4-byte big-endian length, then a JSON object. The first frame it receives names the
submission, its limits and the modules it may not import (an interpreter started ahead may
first be sent the bank's programs to parse, and the submission's files to compile: compiling
runs none of their code); it imports nothing of the submission's before that frame. stdin is
empty and stdout/stderr go to files the grader reads, so nothing the submission prints can pass
for a reply. The worker never receives an expected value.

Where the engine is (a phase of `gradcheck.engine.handler.PHASES`, so that a timeout can say "in
backward()") is written, on each change, into a file the grader reads when it needs it (through a
shared mapping of it: no system call), not sent.

Frames the worker sends: `{"ready": true}` once imported; `{"import_error": record}` (with a
`traceback`) then exit; `{"reply": ...}` per request (`{"request_error": str}` if it is malformed,
which the grader's own check prevents); `{"fatal": record}` when the engine raised
something no request survives (SystemExit, KeyboardInterrupt, another BaseException, MemoryError),
then exit.
"""

from __future__ import annotations

import gc
import importlib.machinery
import importlib.util
import json
import mmap
import os
import resource
import signal
import stat
import struct
import sys
import time
import traceback
from types import CodeType, ModuleType
from typing import Any

from gradcheck.engine import handler, keyrings, run, syscalls, wire
from gradcheck.program import language

HEADER = struct.Struct(">I")
MAX_FRAME = 64 << 20  # bytes of JSON in one frame
#: bytes of the phase file that hold the phase, padded with spaces
PHASE_WIDTH = 16
#: the name a submission is imported under where its own is taken (`own_name`)
MODULE = "submission"
#: how every program the sandbox runs with `python -c` starts, given the gradcheck folder: the
#: grader's own gradcheck, and only the modules the worker needs (the package's __init__ would
#: import the grader's API, numpy and hypothesis), without putting the grader's folders on sys.path.
PACKAGE = ("import sys, types; package = types.ModuleType('gradcheck'); "
           "package.__path__ = [sys.argv[1]]; sys.modules['gradcheck'] = package; ")
#: the worker's program.
BOOTSTRAP = PACKAGE + "import gradcheck.engine.worker; gradcheck.engine.worker.main(sys.argv[2])"
#: the zygote's program (`zygote`): the same modules, then a worker forked on each order
ZYGOTE = PACKAGE + "import gradcheck.engine.worker; gradcheck.engine.worker.zygote(sys.argv[2])"
#: seconds a worker forked by the zygote waits to become the grader's child
ADOPTION = 5.0
#: allocations between two collections of the youngest generation in a worker (Python's: 700)
YOUNG = 10_000
#: the files, and bytes a file, an interpreter started ahead compiles of a submission
MAX_AHEAD_FILES = 100
MAX_AHEAD = 1 << 20


def pack(message: dict[str, Any]) -> bytes:
    """One frame: the length, then the JSON (NaN and infinities allowed: gradients can be inf)."""
    data = json.dumps(message, separators=(",", ":")).encode()
    return HEADER.pack(len(data)) + data


def main(config_json: str) -> None:
    """Run the worker: limits, import, then one reply per request until the grader hangs up."""
    config = json.loads(config_json)
    if config.get("cgroup") is not None:
        _join_cgroup(config["cgroup"])
    die_with_parent(config["parent"])
    adopt_orphans()
    channel = _Channel(config["fd"])
    # The submission and the limits come in the first frame: a worker may be started ahead,
    # before the submission is saved (gradcheck.engine.sandbox.prestart).
    job = channel.receive()
    compiled: dict[str, tuple[bytes, CodeType]] = {}
    while job is not None and ("warm" in job or "compile" in job):  # while it waits
        if "warm" in job:  # the bank's programs, parsed ahead
            _parse_ahead(job["warm"])
        else:  # the submission as saved, compiled ahead (sandbox.precompile)
            compiled = _compile_ahead(job["compile"])
        job = channel.receive()
    if job is None:  # the grader discarded it unused
        os._exit(0)
    _apply_limits(job["limits"])
    syscalls.forbid()  # where it cannot be set, preflight refuses a worker of another user
    _forbid(job["forbid"])
    keyrings.new_session()  # its session keys go with it, not into the grader's
    config.update(job)
    path = config["submission"]
    # A collection of the youngest objects every YOUNG allocations, not every 700: a request on
    # a deep graph keeps thousands of nodes alive while it builds them, and Python's default
    # walked them over and over (deep-recurrence's trace took 61 ms, not 44, BENCHMARKS.md).
    # Garbage in cycles waits a little longer, a few megabytes at most. Set before the import:
    # an engine that sets its own thresholds keeps them.
    gc.set_threshold(YOUNG, *gc.get_threshold()[1:])
    used = _use_compiled(compiled)
    try:
        engine = load_submission(path)
    except BaseException as exc:  # SyntaxError, SystemExit, KeyboardInterrupt: "cannot import"
        record = run.error_record(exc, "import")
        record["traceback"] = _traceback(exc, path)
        _flush()
        channel.send({"import_error": record})
        os._exit(0)
    gc.freeze()  # what the import made lives as long as the worker: no collection walks it
    _flush()
    channel.send({"ready": True, "precompiled": len(used)})
    phase = "import"

    # written through a shared mapping of the file, not a write each: a request passes through
    # a few phases per point, thousands of times a grading
    phase_file = mmap.mmap(config["phase_fd"], PHASE_WIDTH)

    def progress(name: str) -> None:
        nonlocal phase
        phase = name
        phase_file[:PHASE_WIDTH] = name.ljust(PHASE_WIDTH).encode("ascii")

    while (request := channel.receive()) is not None:
        progress("start")  # the grader does not write it for a request it sent ahead
        try:
            reply = handler.handle(engine, request, progress)
        except wire.RequestError as exc:
            channel.send({"request_error": str(exc)})
            continue
        except BaseException as exc:  # the engine left the request in a state no one should trust
            _flush()
            channel.send({"fatal": run.error_record(exc, phase)})
            os._exit(0)
        _flush()
        channel.send({"reply": reply})
    os._exit(0)  # no atexit handlers or thread joins of the submission's


def zygote(config_json: str) -> None:
    """Fork a worker for each order the grader sends (gradcheck.engine.sandbox.Zygote), until it
    hangs up. This process imports the worker's modules and nothing else; it never runs a
    submission, parses a program or reads a reply, so each worker forked from it starts as
    clean as a new interpreter, without the cost of one. A worker is forked twice, the middle
    process exiting at once, so that it is reparented to the grader (a child subreaper): the
    grader then waits for it, counts and kills it as any worker it started itself."""
    worker_modules = set(sys.modules)
    import socket

    config = json.loads(config_json)
    die_with_parent(config["parent"])
    control = socket.socket(fileno=config["fd"])
    while True:
        try:
            order, fds, _, _ = socket.recv_fds(control, 1 << 16, 8)
        except OSError:
            os._exit(0)
        if not order:  # the grader closed its end
            os._exit(0)
        read, write = os.pipe()
        middle = os.fork()
        if middle == 0:
            try:
                os.close(read)
                pid = os.fork()
                if pid == 0:
                    os.close(write)
                    control.close()
                    for name in set(sys.modules) - worker_modules:  # the zygote's, as socket
                        del sys.modules[name]
                    _become_worker(json.loads(order), fds)
                os.write(write, str(pid).encode())
            finally:  # the middle process never goes back to the loop, whatever happened
                os._exit(0)
        os.close(write)
        said = os.read(read, 32)
        os.close(read)
        os.waitpid(middle, 0)
        for fd in fds:
            os.close(fd)
        control.send(said or b"0")


def _become_worker(order: dict[str, Any], fds: list[int]) -> None:
    """In a process forked by the zygote: what a new worker process is given (its channel and
    phase file, its output files, its home, environment and session, only those descriptors),
    once it is the grader's child; then the worker's own start (`main`). Never returns."""
    try:
        channel, phase, stdout, stderr, *join = fds
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        keep = sorted({channel, phase, *join})
        first = 3
        for fd in keep:
            os.closerange(first, fd)
            first = fd + 1
        bound = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        os.closerange(first, 1 << 20 if bound == resource.RLIM_INFINITY else bound)
        os.chdir(order["home"])
        os.environ.clear()
        os.environ.update(order["env"])
        waited = time.monotonic() + ADOPTION
        while os.getppid() != order["parent"]:  # until the middle process has exited
            if time.monotonic() > waited:
                os._exit(1)
            time.sleep(0.0005)
        os.setsid()
        config = {"fd": channel, "phase_fd": phase, "parent": order["parent"],
                  "cgroup": join[0] if join else None}
        sys.argv[2:] = [json.dumps(config)]
    except BaseException:
        os._exit(1)
    try:
        main(sys.argv[2])  # it ends the process itself
    except BaseException:  # as the interpreter would have ended: the traceback, then status 1
        traceback.print_exc()
        _flush()
    os._exit(1)


def _parse_ahead(specs: list[dict[str, Any]]) -> None:
    """Parse the programs the grader will send (`sandbox.prestart`), before any code of the
    submission's runs, so that its requests find them parsed (a looped one unrolls to thousands
    of nodes); one that does not parse is left for its request to refuse."""
    for spec in specs:
        try:
            language.spec_program(spec)
        except Exception:  # noqa: BLE001 - the request that sends it says what is wrong
            continue


def _compile_ahead(paths: list[str]) -> dict[str, tuple[bytes, CodeType]]:
    """Each file of `paths` (a regular file of at most MAX_AHEAD bytes), compiled as the import
    would compile it, with the bytes it was compiled from; a file that cannot be read or
    compiled is left to the import, which says what is wrong with it."""
    compiled = {}
    for name in paths[:MAX_AHEAD_FILES]:
        try:  # never waiting: a FIFO named like a module would hold the worker's start
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
            with open(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                data = f.read(MAX_AHEAD + 1)
            if len(data) <= MAX_AHEAD:
                compiled[name] = (data, compile(data, name, "exec", dont_inherit=True))
        except Exception:  # noqa: BLE001 - SyntaxError, a file removed: the import's to say
            continue
    return compiled


def _use_compiled(compiled: dict[str, tuple[bytes, CodeType]]) -> set[str]:
    """Have the import take a module's code from `compiled` when the source it reads is the
    bytes that code was compiled from (the same code the import would compile), else compile
    it as ever. The paths of the files that took it are added to the set returned."""
    used: set[str] = set()
    if not compiled:
        return used
    loader = importlib.machinery.SourceFileLoader
    compile_source = loader.source_to_code

    def source_to_code(self: Any, data: bytes, path: str, *, _optimize: int = -1) -> CodeType:
        kept = compiled.get(path)
        if kept is not None and kept[0] == data and _optimize == -1:
            used.add(path)
            return kept[1]
        return compile_source(self, data, path, _optimize=_optimize)

    loader.source_to_code = source_to_code  # type: ignore[method-assign]
    return used


def load_submission(path: str | os.PathLike[str]) -> ModuleType:
    """Import a module file or a package directory under its own name (`own_name`).

    Its folder goes at the end of sys.path, so helper modules beside it import, but a file there
    named like a standard or installed module (numpy.py, gradcheck/) shadows nothing. (os.path,
    not pathlib: the worker imports only what it needs, and pathlib brings four more modules.)"""
    path = os.path.realpath(path)
    package = os.path.isdir(path)
    entry = os.path.join(path, "__init__.py") if package else path
    spec = importlib.util.spec_from_file_location(
        own_name(path), entry, submodule_search_locations=[path] if package else None)
    if spec is None or spec.loader is None or not os.path.isfile(entry):
        raise ImportError(f"{path} is not a .py file or a package directory with __init__.py")
    sys.path.append(os.path.dirname(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def own_name(path: str) -> str:
    """The name a submission is imported under: its file's or folder's (engine.py as `engine`),
    so that a helper beside it that imports it by that name (`from engine import Tensor`, or
    `from mypackage.core import ...` inside the package) is given this module, not a second copy
    whose classes the grader's tensors are not of; `submission` where that name cannot be its
    own: not a name, or a module's already loaded or installed (numpy.py, random.py)."""
    name = os.path.basename(path).removesuffix(".py")
    if not name.isidentifier() or name in sys.modules:
        return MODULE
    try:
        installed = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        installed = True
    return MODULE if installed else name


class _Channel:
    """Frames over the inherited socket, with plain os.read/os.write (no socket module needed)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, message: dict[str, Any]) -> None:
        data = memoryview(pack(message))
        while data:
            data = data[os.write(self.fd, data):]

    def receive(self) -> dict[str, Any] | None:
        header = self._read(HEADER.size)
        if header is None:
            return None
        (size,) = HEADER.unpack(header)
        if size > MAX_FRAME:
            raise ValueError(f"a request of {size} bytes is over the {MAX_FRAME} byte limit")
        body = self._read(size)
        return None if body is None else json.loads(body)

    def _read(self, size: int) -> bytes | None:
        chunks, left = [], size
        while left:
            chunk = os.read(self.fd, min(left, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


def _apply_limits(limits: dict[str, list[int]]) -> None:
    """Resource limits (soft, hard) for this process and what it starts; gradcheck.engine.sandbox says
    why these and what the grader enforces itself."""
    names = {"data": resource.RLIMIT_DATA, "cpu": resource.RLIMIT_CPU,
             "fsize": resource.RLIMIT_FSIZE, "core": resource.RLIMIT_CORE,
             "nproc": resource.RLIMIT_NPROC, "nofile": resource.RLIMIT_NOFILE,
             "msgqueue": resource.RLIMIT_MSGQUEUE}
    for name, (soft, hard) in limits.items():
        resource.setrlimit(names[name], (soft, hard))
    # Python ignores SIGXFSZ; restored, a write past RLIMIT_FSIZE ends the worker at that write.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)


def _join_cgroup(fd: int) -> None:
    """Move into the memory cgroup whose cgroup.procs the grader opened as `fd` (the kernel
    checks the opener's rights), then close it: the submission never holds it. The grader sees
    whether this worked (gradcheck.engine.cgroup)."""
    try:
        os.write(fd, str(os.getpid()).encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def _forbid(names: list[str]) -> None:
    """Make `import NAME` (and its submodules) fail for each top-level module in `names`."""
    if not names:
        return
    import importlib.abc

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
            if fullname.partition(".")[0] in names:
                raise ModuleNotFoundError(
                    f"a submission cannot import {fullname} here: this grading run refuses "
                    f"{', '.join(names)}; write the engine without them", name=fullname)

    sys.meta_path.insert(0, Refuse())


def die_with_parent(parent: int) -> None:
    """Be killed when the grader dies, so no orphaned worker (or helper, gradcheck.grading.helper_process) spins
    on."""
    import ctypes

    pr_set_pdeathsig, sigkill = 1, 9
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, sigkill)
    if os.getppid() != parent:  # the grader died before prctl took effect
        os._exit(1)


def adopt_orphans() -> None:
    """Become a child subreaper: a process the submission daemonises (double fork, setsid) is
    reparented here rather than to init, so the grader still finds it and kills it."""
    import ctypes

    pr_set_child_subreaper = 36
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1)


def _traceback(exc: BaseException, path: str) -> str:
    """The traceback from the first frame in the submission's folder (the worker's are noise)."""
    home = os.path.realpath(path)
    if os.path.isfile(home):
        home = os.path.dirname(home)
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith(home):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _flush() -> None:
    """Flush the submission's output so it is counted for the request that printed it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # a replaced or broken stream is the submission's business
            pass
