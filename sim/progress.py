"""Progress of runs and sweeps that go in segments, reported from the host between segments.

The engine calls a progress callback with a :class:`Progress` after every segment (nothing is
added to the compiled program). :class:`ProgressBar` is the one the command line uses: it writes
to stderr only, and only once a run has taken longer than a few seconds.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from typing import Optional, TextIO


@dataclasses.dataclass(frozen=True)
class Progress:
    """Where a run stands after a segment.

    Attributes:
      segment, segments: segments finished, and in all.
      events, num_events: events processed, and in the schedule.
      time, end_time: simulated time reached, and the schedule's end.
      loss: the latest logged loss (a sweep: the median over its runs; NaN if none is finite).
      elapsed: wall-clock seconds since this process started the run (a resumed run counts from
        the resume).
      events_per_second: events processed in this process per wall-clock second.
      resumed_from: segments that were already done when this process started (0 if none).
    """

    segment: int
    segments: int
    events: int
    num_events: int
    time: float
    end_time: float
    loss: float
    elapsed: float
    events_per_second: float
    resumed_from: int = 0

    @property
    def fraction(self) -> float:
        return self.events / max(self.num_events, 1)


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class ProgressBar:
    """A one-line progress bar on ``stream`` (stderr by default).

    Nothing is shown for runs that finish within ``after`` seconds (default: the environment's
    ``DELAYLAB_PROGRESS_AFTER``, else 3). On a terminal the line is
    redrawn in place; elsewhere (a log file, CI) a new line is written at most every ``every``
    seconds, and at the end.
    """

    def __init__(self, label: str = "run", *, stream: Optional[TextIO] = None, after: Optional[float] = None,
                 every: float = 10.0, width: int = 24):
        if after is None:
            after = float(os.environ.get("DELAYLAB_PROGRESS_AFTER", 3.0))
        self.label, self.stream, self.after, self.every, self.width = label, stream, after, every, width
        self._last = -math.inf
        self._shown = False

    def line(self, p: Progress) -> str:
        done = int(round(self.width * p.fraction))
        bar = "#" * done + "-" * (self.width - done)
        done_here = p.segment - p.resumed_from  # segments run by this process, in p.elapsed
        remaining = p.elapsed / done_here * (p.segments - p.segment) if done_here > 0 else math.inf
        return (f"{self.label} [{bar}] {100 * p.fraction:3.0f}%  t {p.time:.6g}/{p.end_time:.6g}  "
                f"events {p.events:,}/{p.num_events:,}  {p.events_per_second:.3g} ev/s  loss {p.loss:.4g}  "
                f"elapsed {_clock(p.elapsed)}  left {_clock(remaining)}")

    def __call__(self, p: Progress) -> None:
        stream = self.stream or sys.stderr
        final = p.segment == p.segments
        if p.elapsed < self.after and not (final and self._shown):
            return
        tty = hasattr(stream, "isatty") and stream.isatty()
        now = time.monotonic()
        if not tty and not final and now - self._last < self.every:
            return
        self._last, self._shown = now, True
        end = "\n" if (final or not tty) else ""
        stream.write(("\r\x1b[2K" if tty else "") + self.line(p) + end)
        stream.flush()
