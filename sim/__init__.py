"""The virtual cluster: schedules, problems, the event engine and sweeps; ``sim.real`` runs the
same algorithms on real workers (Ray) and records traces the engine replays."""

from delaylab.sim import problems, real, schedules
from delaylab.sim.engine import Divergence, RunResult, run, sweep

__all__ = ["Divergence", "RunResult", "problems", "real", "run", "schedules", "sweep"]
