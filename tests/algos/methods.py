"""Every algorithm the project implements, with a small setting it runs in.

tests/algos/test_registry.py runs every entry of :data:`METHODS` through the same checks (in the
manner of optax's alias tests): rebuilding it with new hyperparameter values reuses the compiled
program, its hyperparameters sweep in one sim.sweep, it runs in float32 and float64, its
degenerate case equals the plainer method it reduces to, and an out-of-domain value is refused,
naming the argument, before anything compiles. An algorithm added here is covered without a new test.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np

from delaylab import algos

SETTING_TAUS = (1.0, 2.0, 3.0, 5.0)  # the four workers' job durations of every setting below
SCHEDULE_KINDS = ("async", "barrier", "hierarchical", "ssp", "time_bounded")


@dataclasses.dataclass(frozen=True)
class Reduction:
    """A degenerate case: the method built with ``overrides`` of its arguments equals method
    ``to`` built with ``to_kwargs``, on the same setting with ``workers`` workers (None: the
    method's own four) and, if ``equal_speeds``, all job durations 1. ``rtol``: the relative
    difference allowed between the two final models (0: bit for bit)."""

    overrides: dict
    to: str
    to_kwargs: dict
    workers: Optional[int] = None
    equal_speeds: bool = False
    rtol: float = 1e-12


@dataclasses.dataclass(frozen=True)
class Method:
    """A registered algorithm.

    Attributes:
      name: the registry name.
      factory: the public constructor (``algos.*``).
      kwargs: a valid construction for the setting (four workers with job durations ``SETTING_TAUS``).
      vary: other values of some of its hyperparameters (factory arguments that are also entries
        of ``Algorithm.hparams``): rebuilding with them must not compile again.
      bad: ``(argument, value)`` pairs outside the argument's domain.
      schedule: the dispatch the method runs on, one of ``SCHEDULE_KINDS``.
      network: True for methods that act per layer (EDiT): run on a small MLP, not a quadratic.
      reduces_to: its degenerate case, where one exists.
    """

    name: str
    factory: Callable[..., algos.Algorithm]
    kwargs: dict
    vary: dict
    bad: tuple
    schedule: str = "async"
    network: bool = False
    reduces_to: Optional[Reduction] = None

    def build(self, **overrides) -> algos.Algorithm:
        return self.factory(**{**self.kwargs, **overrides})


def _methods() -> dict:
    from delaylab.algos import elastic as ea

    taus = np.asarray(SETTING_TAUS)
    sgd1 = dict(to="minibatch_sgd", workers=1)  # one worker: plain SGD (a barrier round of one)
    entries = [
        Method("asgd", algos.asgd, dict(stepsize=0.05), dict(stepsize=0.08), (("stepsize", -0.1),),
               reduces_to=Reduction({}, **sgd1, to_kwargs=dict(stepsize=0.05))),
        Method("rescaled_asgd", algos.rescaled_asgd, dict(stepsize=0.05, taus=taus), dict(stepsize=0.08),
               (("stepsize", np.nan), ("taus", [1.0, 0.0, 2.0, 3.0])),
               reduces_to=Reduction(dict(taus=np.ones(4)), "asgd", dict(stepsize=0.05), equal_speeds=True)),
        Method("inverse_tau_asgd", algos.inverse_tau_asgd, dict(stepsize=0.05, taus=taus), dict(stepsize=0.08),
               (("taus", [1.0, -1.0, 2.0, 3.0]),),
               reduces_to=Reduction(dict(taus=np.ones(4)), "asgd", dict(stepsize=0.05), equal_speeds=True)),
        Method("delay_adaptive_asgd", algos.delay_adaptive_asgd, dict(stepsize=0.05, num_workers=4), dict(stepsize=0.08),
               (("num_workers", 0),),
               # equal speeds: every delay is n − 1 < n, so every step is γ
               reduces_to=Reduction({}, "asgd", dict(stepsize=0.05), equal_speeds=True)),
        Method("staleness_aware_asgd", algos.staleness_aware_asgd, dict(stepsize=0.05), dict(stepsize=0.08),
               (("stepsize", -1.0),), reduces_to=Reduction({}, "asgd", dict(stepsize=0.05), workers=1)),
        Method("clipped_asgd", algos.clipped_asgd, dict(stepsize=0.05, threshold=1.0), dict(stepsize=0.08, threshold=0.5),
               (("threshold", 0.0),), reduces_to=Reduction(dict(threshold=1e30), "asgd", dict(stepsize=0.05))),
        Method("staleness_weighted_asgd", algos.staleness_weighted_asgd, dict(stepsize=0.05, staleness="hinge"),
               dict(stepsize=0.08, a=0.3), (("a", -1.0), ("staleness", "linear")),
               reduces_to=Reduction(dict(staleness="constant"), "asgd", dict(stepsize=0.05))),
        Method("rennala_sgd", algos.rennala_sgd, dict(stepsize=0.05, batch=3), dict(stepsize=0.08), (("batch", 0),),
               reduces_to=Reduction(dict(batch=1), **sgd1, to_kwargs=dict(stepsize=0.05))),
        Method("malenia_sgd", algos.malenia_sgd, dict(stepsize=0.05, batch=6), dict(stepsize=0.08), (("batch", 1.5),),
               reduces_to=Reduction(dict(batch=1), **sgd1, to_kwargs=dict(stepsize=0.05))),
        Method("ringleader_asgd", algos.ringleader_asgd, dict(stepsize=0.05), dict(stepsize=0.08), (("stepsize", -0.05),),
               reduces_to=Reduction({}, **sgd1, to_kwargs=dict(stepsize=0.05))),
        Method("ringmaster_asgd", algos.ringmaster_asgd, dict(stepsize=0.05, threshold=4), dict(stepsize=0.08),
               (("threshold", 0),), reduces_to=Reduction(dict(threshold=10**6), "asgd", dict(stepsize=0.05))),
        Method("ia2sgd", algos.ia2sgd, dict(stepsize=0.05), dict(stepsize=0.08), (("stepsize", np.inf),),
               reduces_to=Reduction({}, **sgd1, to_kwargs=dict(stepsize=0.05))),
        Method("fedbuff_asgd", algos.fedbuff_asgd, dict(local_stepsize=0.05, buffer_size=2),
               dict(local_stepsize=0.08, server_stepsize=0.5), (("buffer_size", 0), ("staleness_exponent", -1.0)),
               reduces_to=Reduction(dict(buffer_size=1, staleness_exponent=0.0), "asgd", dict(stepsize=0.05))),
        Method("fedasync", algos.fedasync, dict(mixing=0.6, local_stepsize=0.05, local_steps=2, prox=0.1),
               dict(mixing=0.4, local_stepsize=0.08), (("mixing", 0.0), ("staleness", "none")),
               reduces_to=Reduction(dict(mixing=1.0, local_steps=1, prox=0.0), **sgd1, to_kwargs=dict(stepsize=0.05))),
        Method("async_local_sgd", algos.async_local_sgd,
               dict(stepsize=0.7, local_stepsize=0.05, local_steps=3, momentum=0.5, delay=2),
               dict(stepsize=0.5, local_stepsize=0.08, momentum=0.3), (("momentum", 1.0), ("delay", 0)),
               reduces_to=Reduction(dict(stepsize=1.0, local_steps=1, momentum=0.0, delay=1), "asgd",
                                    dict(stepsize=0.05))),
        Method("wbsp", algos.wbsp, dict(stepsize=0.05, slowest=3), dict(stepsize=0.08), (("slowest", -1),),
               reduces_to=Reduction(dict(slowest=0), **sgd1, to_kwargs=dict(stepsize=0.05))),
        Method("gsp", algos.gsp, dict(stepsize=0.2, groups=[0, 0, 1, 1], forward_every=2), dict(stepsize=0.3),
               (("forward_every", 0), ("groups", [0, 0, 2, 2])),
               # one group: vanilla ASGD with step γ/n
               reduces_to=Reduction(dict(groups=[0, 0, 0, 0]), "asgd", dict(stepsize=0.05))),
        Method("minibatch_sgd", algos.minibatch_sgd, dict(stepsize=0.1), dict(stepsize=0.15), (("stepsize", -0.1),),
               schedule="barrier"),
        Method("local_sgd", algos.local_sgd, dict(stepsize=0.7, local_stepsize=0.05, local_steps=[3, 2, 2, 1], momentum=0.5),
               dict(stepsize=0.5, local_stepsize=0.08, momentum=0.3), (("momentum", 1.2), ("local_steps", 0)),
               schedule="barrier",
               reduces_to=Reduction(dict(stepsize=1.0, local_steps=1, momentum=0.0), "minibatch_sgd", dict(stepsize=0.05))),
        Method("local_sgd_adamw", lambda **kw: algos.local_sgd(inner="adamw", **kw),
               dict(local_stepsize=0.05, local_steps=2, weight_decay=0.01), dict(local_stepsize=0.08, b2=0.99),
               (("weight_decay", -0.1), ("b1", 1.0)), schedule="barrier"),
        Method("palsgd", algos.palsgd, dict(stepsize=0.8, local_stepsize=0.05, local_steps=4, probability=0.3),
               dict(probability=0.2, pull=0.5), (("probability", 1.0), ("coin", "sometimes")), schedule="barrier",
               reduces_to=Reduction(dict(probability=0.0), "local_sgd", dict(stepsize=0.8, local_stepsize=0.05,
                                                                             local_steps=4), rtol=1e-13)),
        Method("edit", algos.edit, dict(stepsize=0.8, local_stepsize=0.05, local_steps=3, momentum=0.3,
                                        detector_warmup=2, clip=1.0, step_weight=0.3),
               dict(stepsize=0.5, temperature=2.0, clip=0.5), (("ewma", 1.5), ("reducer", "median")),
               schedule="barrier", network=True,
               reduces_to=Reduction(dict(reducer="uniform", threshold=np.inf, clip=None, step_weight=0.0), "local_sgd",
                                    dict(stepsize=0.8, local_stepsize=0.05, local_steps=3, momentum=0.3), rtol=1e-6)),
        Method("fedshift", algos.fedshift, dict(local_stepsize=0.05, local_steps=2, quantised=[False, False, True, True]),
               dict(local_stepsize=0.08), (("bits", 0), ("quantised", [0, 1, 0, 1])), schedule="barrier",
               reduces_to=Reduction(dict(quantised=[False] * 4), "local_sgd", dict(local_stepsize=0.05, local_steps=2))),
        Method("hierarchical_sgd", algos.hierarchical_sgd, dict(stepsize=0.1, levels={2: 2, 4: 4}, warmup=2),
               dict(stepsize=0.15), (("levels", {2: 3, 4: 4}), ("warmup", -1)), schedule="hierarchical",
               # averaging all n after every step: synchronous minibatch SGD
               reduces_to=Reduction(dict(levels={1: 4}, warmup=0), "minibatch_sgd", dict(stepsize=0.1))),
        Method("fedstrag", algos.fedstrag, dict(local_stepsize=0.05, history=8, local_steps=2),
               dict(local_stepsize=0.08, local_steps=3), (("history", 0), ("weighting", "linear")),
               schedule="time_bounded"),
        Method("easgd", ea.easgd, dict(learning_rate=0.05, alpha=0.2, period=2), dict(learning_rate=0.08, alpha=0.1),
               (("alpha", 0.5), ("period", 0)),
               reduces_to=Reduction(dict(), "eamsgd", dict(learning_rate=0.05, alpha=0.2, period=2, momentum=0.0))),
        Method("eamsgd", ea.eamsgd, dict(learning_rate=0.05, momentum=0.5, alpha=0.2, period=2),
               dict(learning_rate=0.08, momentum=0.3), (("momentum", 1.0), ("alpha", 0.0))),
        Method("eahes", ea.eahes, dict(learning_rate=0.05, alpha=0.2, period=2), dict(learning_rate=0.08, period=3),
               (("learning_rate", -0.01), ("b2", 1.0))),
        Method("eahes_om", ea.eahes_om, dict(learning_rate=0.05, alpha=0.2, period=2), dict(learning_rate=0.08),
               (("alpha", 0.7),),
               # without failures the oracle never fires: EAHES
               reduces_to=Reduction({}, "eahes", dict(learning_rate=0.05, alpha=0.2, period=2))),
        Method("deahes_o", ea.deahes_o, dict(learning_rate=0.05, alpha=0.2, period=2, a0=0.3),
               dict(learning_rate=0.08, a0=0.5, a_start=-0.2, h1_cap=0.5),
               (("a0", 0.0), ("history", 1), ("a_start", 0.1), ("h1_cap", 0.1), ("h1_cap", 1.5)),
               # an unreachable ramp (a0 → ∞) leaves (h1, h2) = (α, α): EAHES
               reduces_to=Reduction(dict(a0=1e300), "eahes", dict(learning_rate=0.05, alpha=0.2, period=2))),
        Method("sync_easgd", ea.sync_easgd, dict(learning_rate=0.05, alpha=0.2, period=2), dict(learning_rate=0.08),
               (("alpha", 0.3),), schedule="barrier"),  # n·α = 1.2 ≥ 1 with four workers
    ]
    return {m.name: m for m in entries}


METHODS: dict[str, Method] = _methods()
