"""Schedules: who arrives when, computed on the host before any model value exists.

The package splits along its seams: the type (:mod:`~sim.schedules.schedule`), the timing models
(:mod:`~sim.schedules.timing`), the dispatch policies (:mod:`~sim.schedules.dispatch`,
:mod:`~sim.schedules.time_bounded`), traces (:mod:`~sim.schedules.traces`) and failures
(:mod:`~sim.schedules.failures`); every public name is importable from ``sim.schedules``.

Timing never depends on the model's values (docs/theory.md §1), so a whole run's
event sequence is a handful of NumPy arrays. A :class:`Schedule` (whose docstring states the
conventions every schedule keeps) is built from a *timing model* (how long each job of each worker
takes) and a *dispatch policy* (asynchronous: a worker restarts the moment it reports; barrier:
synchronous rounds; backup workers: rounds that close at the N-th of N + b results; a server
that takes time to apply each update, :mod:`~sim.schedules.served`). Time-varying
speeds (slowdowns, stalls) wrap a timing model (:class:`SlowdownTiming`). Failures are a
transform that marks some arrivals as lost.
"""

from delaylab.sim.schedules.dispatch import (asynchronous, backup_workers, barrier, every_worker_rounds, fixed_computation,
                                    hierarchical, random_durations, stale_synchronous, synchronous)
from delaylab.sim.schedules.failures import outage_blocks, with_failures, with_outages
from delaylab.sim.schedules.schedule import Schedule
from delaylab.sim.schedules.served import SERVICE_KINDS, Fit, Server, fit, served, served_rounds
from delaylab.sim.schedules.time_bounded import time_bounded_rounds
from delaylab.sim.schedules.timing import (NOISE_KINDS, ExampleCostTiming, FixedTiming, RandomTiming, SlowdownTiming, Timing,
                                  TraceTiming, job_keys)
from delaylab.sim.schedules.traces import from_trace, read_trace

__all__ = ["NOISE_KINDS", "SERVICE_KINDS", "Fit", "Server", "fit", "served", "served_rounds", "ExampleCostTiming", "FixedTiming", "RandomTiming", "Schedule", "SlowdownTiming", "Timing",
           "TraceTiming", "asynchronous", "backup_workers", "barrier", "every_worker_rounds", "fixed_computation",
           "from_trace", "hierarchical", "job_keys", "random_durations", "read_trace", "stale_synchronous", "synchronous",
           "time_bounded_rounds", "with_failures", "with_outages", "outage_blocks"]
