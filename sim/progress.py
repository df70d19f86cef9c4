"""Progress of runs and sweeps that go in segments, reported from the host between segments.

The engine calls a progress callback with a :class:`Progress` after every segment (nothing is
added to the compiled program). :class:`ProgressBar`, tqdm's bar, is the one the command line uses:
it writes to stderr only, and only once a run has taken longer than a few seconds.
"""

from __future__ import annotations

import dataclasses
import os
import sys
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


class ProgressBar:
    """A progress bar on ``stream`` (stderr by default): tqdm's, fed by the engine's reports.

    Nothing is shown for runs that finish within ``after`` seconds (default: the environment's
    ``DELAYLAB_PROGRESS_AFTER``, else 3). The bar counts events; its postfix carries the simulated
    time and the latest loss. On a terminal tqdm redraws the line in place; in a log file each
    update is a carriage-return-separated redraw, at most every ``every`` seconds, and the last one
    ends the line. (tqdm replaces a hand-written bar: it also handles terminal width, rates and the
    time left, and it is what users of the scientific Python stack already read.)
    """

    def __init__(self, label: str = "run", *, stream: Optional[TextIO] = None, after: Optional[float] = None,
                 every: float = 10.0):
        if after is None:
            after = float(os.environ.get("DELAYLAB_PROGRESS_AFTER", 3.0))
        self.label, self.stream, self.after, self.every = label, stream, float(after), float(every)
        self._bar = None

    def __call__(self, p: Progress) -> None:
        from tqdm.auto import tqdm

        stream = self.stream or sys.stderr
        if self._bar is None:
            tty = hasattr(stream, "isatty") and stream.isatty()
            # counted from this process's start of the run: a resumed run's bar starts where it resumed
            start = p.events - round(p.events_per_second * p.elapsed)
            self._bar = tqdm(total=p.num_events, initial=max(start, 0), desc=self.label, unit="ev", file=stream,
                             delay=max(self.after - p.elapsed, 0.0), mininterval=0.1 if tty else self.every,
                             dynamic_ncols=tty, smoothing=0.0, leave=True)
        self._bar.set_postfix_str(f"t {p.time:.6g}/{p.end_time:.6g}, loss {p.loss:.4g}", refresh=False)
        self._bar.update(p.events - self._bar.n)
        if p.segment == p.segments:
            self._bar.close()
