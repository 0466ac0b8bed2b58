"""Progress while grading, on stderr: exercise n of N, its module, the time so far.

On a terminal one line is rewritten in place; elsewhere (a CI log, a file) each exercise is one
plain line, so the log shows how far a run got; the exercises whose details are withheld are
one line together, once they are all graded. Written with two ANSI controls (carriage return,
erase line) rather than rich or tqdm: one line is all there is to draw, and either library
would be one more dependency, and its import time, in every grading run for it.
"""

from __future__ import annotations

import shutil
import time
from typing import TextIO

_ERASE = "\r\033[K"  # back to the start of the line, and clear it


class Progress:
    """Says how far grading is; `stream` None (for --quiet) says nothing."""

    def __init__(self, stream: TextIO | None, total: int) -> None:
        self.stream = stream
        self.total = total
        self.count = 0
        #: the exercises whose details are withheld graded since the last line about them
        self.withheld = 0
        self.started = time.monotonic()
        self.live = stream is not None and stream.isatty()

    def start(self, keyed: bool = False) -> None:
        """Before the first exercise: starting the worker and the oracles takes a few seconds;
        with an answer key (`keyed`) no oracle runs."""
        self._say(f"grading {self.total} exercise{'s' * (self.total != 1)}: starting the "
                  + ("worker (the oracles' answers come from the answer key)" if keyed
                     else "worker and the oracles"))

    def exercise_done(self, exercise_id: str, module: str, shown: bool = True) -> None:
        """`shown` False for an exercise whose details are withheld: it is counted, and said
        nothing of until `withheld_done`. Its worker chooses how long it takes, which could spell
        out what it saw (`reports.shown_duration`), and a line at its end would time it in a log
        that stamps each line (a CI job's)."""
        self.count += 1
        if not shown:
            self.withheld += 1
            return
        self._say(f"[{self.count}/{self.total}] {module + ': ' if module else ''}{exercise_id}"
                  f" graded, {time.monotonic() - self.started:.1f} s")

    def withheld_done(self) -> None:
        """Once every exercise is graded: those whose details are withheld, together, without a
        time (the line's own is when the last of them ended, as the run's end tells anyway)."""
        if self.withheld:
            self._say(f"[{self.count}/{self.total}] {self.withheld} exercise"
                      f"{'s' * (self.withheld != 1)} whose details are withheld graded")
            self.withheld = 0

    def feedback(self, checks: int) -> None:
        """The feedback of `checks` failed checks is worked out next: the visible exercises',
        before those whose details are withheld are graded, then any of those."""
        if checks:
            spent = time.monotonic() - self.started
            self._say(f"[{self.count}/{self.total}] scored, {spent:.1f} s: working out the "
                      f"feedback of {checks} failed check{'s' * (checks != 1)}")

    def close(self) -> None:
        """Clear the line on a terminal, so the report starts on a clean one."""
        if self.live:
            self.stream.write(_ERASE)
            self.stream.flush()

    def _say(self, text: str) -> None:
        if self.stream is None:
            return
        if self.live:
            width = shutil.get_terminal_size().columns - 1  # a wrapped line cannot be rewritten
            self.stream.write(_ERASE + text[:width])
        else:
            self.stream.write(f"gradcheck: {text}\n")
        self.stream.flush()
