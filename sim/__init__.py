"""The virtual cluster: schedules, problems, the event engine and sweeps."""

from sim import problems, schedules
from sim.engine import Divergence, RunResult, run, sweep

__all__ = ["Divergence", "RunResult", "problems", "run", "schedules", "sweep"]
