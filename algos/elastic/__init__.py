"""Elastic averaging (EASGD, EAMSGD; Zhang, Choromanska, LeCun 2015) with pluggable parts, and the
DEAHES-O family (Xu & Carr 2024, arXiv 2409.09242): docs/theory.md §9.

Three independent parts, composed by :func:`elastic_averaging` (which states the event model):

* the **local optimiser** (:class:`Local`): a recipe of :mod:`algos.local_steps` (SGD, EAMSGD's
  Nesterov step, AdaHessian, or any optax transformation) with the default values of the
  hyperparameters it reads; the worker's job is that module's :class:`~algos.local_steps.LocalSteps`;
* the **data split** (disjoint, or with a shared overlap ratio r): a property of the problem
  (:func:`sim.models.cnn_classifier` ``split=``), not of the algorithm;
* the **exchange rule** (:class:`Exchange`): the elastic weights (h1, h2) of each exchange, from
  the hyperparameters and the worker's :class:`ExchangeContext`: :func:`fixed_weights` (α, α),
  :func:`oracle_weights` (1, 0 after a failure, else α, α), DEAHES-O's :func:`dynamic_weights`
  (from the trend of the worker–master log-distance, :func:`dynamic`), or any function a user
  writes with the same signature.
"""

from __future__ import annotations

from typing import Optional

from delaylab.algos.base import Algorithm
from delaylab.algos.elastic.core import (
    SEMANTICS,
    EAState,
    WorkerState,
    elastic_averaging,
    master_params,
    sync_easgd,
    trend,
    worker_params,
)
from delaylab.algos.elastic.exchange import (
    DynamicWeights,
    Exchange,
    ExchangeContext,
    dynamic,
    dynamic_weights,
    fixed,
    fixed_weights,
    oracle,
    oracle_master_side_weights,
    oracle_weights,
    ramp_weights,
)
from delaylab.algos.elastic.local import (
    ElasticNesterov,
    Local,
    OptaxTransform,
    adahessian,
    nesterov,
    optax_local,
    sgd,
)

__all__ = ["SEMANTICS", "DynamicWeights", "EAState", "ElasticNesterov", "Exchange", "ExchangeContext", "Local",
           "OptaxTransform", "WorkerState", "adahessian", "deahes_o", "dynamic", "dynamic_weights", "eahes",
           "eahes_om", "eamsgd", "easgd", "elastic_averaging", "fixed", "fixed_weights", "master_params", "nesterov",
           "optax_local", "oracle", "oracle_master_side_weights", "oracle_weights", "ramp_weights", "sgd", "sync_easgd",
           "trend", "worker_params"]


# --- the paper's methods (docs/theory.md §9.4): each a composition of the three parts ------------------


def easgd(*, learning_rate: float = 0.01, alpha: float = 0.1, period: int = 1, failure: str = "suppressed",
          trace: int = 0) -> Algorithm:
    return elastic_averaging(sgd(learning_rate), alpha=alpha, period=period, failure=failure, trace=trace,
                             name="EASGD")


def eamsgd(*, learning_rate: float = 0.01, momentum: float = 0.5, alpha: float = 0.1, period: int = 1,
           failure: str = "suppressed", trace: int = 0) -> Algorithm:
    return elastic_averaging(nesterov(learning_rate, momentum), alpha=alpha, period=period, failure=failure,
                             trace=trace, name="EAMSGD")


def eahes(*, learning_rate: float = 0.01, alpha: float = 0.1, period: int = 1, failure: str = "suppressed",
          trace: int = 0, **adahessian_kw) -> Algorithm:
    """EASGD with AdaHessian workers. EAHES-O is the same algorithm on an overlapping split."""
    return elastic_averaging(adahessian(learning_rate, **adahessian_kw), alpha=alpha, period=period,
                             failure=failure, trace=trace, name="EAHES")


def eahes_om(*, learning_rate: float = 0.01, alpha: float = 0.1, period: int = 1, failure: str = "suppressed",
             trace: int = 0, **adahessian_kw) -> Algorithm:
    """The oracle: (h1, h2) = (1, 0) on an exchange that follows a failure (docs/theory.md §9.4; a reconstruction, §9.6)."""
    return elastic_averaging(adahessian(learning_rate, **adahessian_kw), alpha=alpha, period=period,
                             exchange=oracle(), failure=failure, trace=trace, name="EAHES-OM")


def deahes_o(*, learning_rate: float = 0.01, alpha: float = 0.1, a0: float = 1.0, a_start: Optional[float] = None,
             h1_cap: float = 0.5, history: int = 3, period: int = 1, failure: str = "suppressed", trace: int = 0,
             exchange: Optional[Exchange] = None, **adahessian_kw) -> Algorithm:
    """DEAHES-O: AdaHessian workers, dynamic weights (run it on an overlapping split). ``a0``,
    ``a_start`` and ``h1_cap`` are the weight map's readings (:class:`DynamicWeights`).

    Default reading [CHOICE]: the ramp starts at a = −a0 (``a_start=None``; a dead zone as wide as
    the ramp) and h1 rises to 0.5 at its end: the reading that passes the failure-free sanity
    check (without failures DEAHES-O must equal EAHES-O, mean h1 within 10% of α).
    `delaylab figure deahes-readings` compares the readings. The others fail the check: without
    a dead zone (ramp from a = 0, cap 1) the failure-free trend's ordinary dips fall inside the
    ramp when a0 is a couple of its standard deviations; with a dead zone of a0 and cap 1, a snap
    onto the master makes the worker's distance grow back, the trend dips, and the rule fires
    again.
    ``exchange`` replaces the dynamic rule by another."""
    if a_start is None:
        a_start = -a0
    if exchange is None:
        rule = dynamic(history, a0=a0, a_start=a_start, h1_cap=h1_cap)
        return elastic_averaging(adahessian(learning_rate, **adahessian_kw), alpha=alpha, period=period,
                                 exchange=rule, failure=failure, trace=trace, name="DEAHES-O")
    return elastic_averaging(adahessian(learning_rate, **adahessian_kw), alpha=alpha, period=period,
                             exchange=exchange, failure=failure, a0=a0 if "a0" in dict(exchange.defaults) else None,
                             trace=trace, name="DEAHES-O")
