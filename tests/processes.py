"""Whether a process still runs, for the tests that a grader's children die with it, and a
gradcheck command that Ctrl-C reaches."""

import sys
import time


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def gone_within(pid: int, seconds: float) -> bool:
    """Whether `pid` stops running within `seconds`."""
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def gradcheck_command(*arguments: str) -> list[str]:
    """`python -m gradcheck ARGUMENTS` with Python's Ctrl-C handler set again: a shell's
    background job, as a test session may be, ignores SIGINT, and its children inherit that."""
    argv = ["gradcheck", *arguments]
    return [sys.executable, "-c", "import runpy, signal, sys; "
            "signal.signal(signal.SIGINT, signal.default_int_handler); "
            f"sys.argv = {argv!r}; runpy.run_module('gradcheck', run_name='__main__')"]
