"""The DEAHES-O experiment's set-up (docs/theory.md §9, §12): its presets, methods, data,
problems and schedules, and how one part of it runs. ``paper_figures.deahes`` draws the figure from
it; ``benchmarks/deahes_full`` times its parts; both import it from here (figures and benchmarks
do not import each other)."""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from delaylab import sim
from delaylab.algos import elastic as ea
from delaylab.sim import schedules
from delaylab.sim.data import digits, load_mnist_format
from delaylab.sim.models import cnn_classifier

@dataclasses.dataclass(frozen=True)
class Preset:
    """One configuration of the experiment (see the figure's docstring)."""

    name: str
    data: str  # "digits" (scikit-learn's 8×8) or "mnist-format" (sim.data.load_mnist_format)
    rounds: int  # communication rounds
    seeds: int
    train_size: Optional[int]  # training images (None: all)
    eval_size: Optional[int]  # F over this many training images (None: all)
    test_size: Optional[int]  # test images (None: all)
    log_rounds: int  # rounds between evaluations of the master
    batching: str  # how a round's P jobs run: "vmap" or "map"
    semantics: str = "suppressed"  # how a lost exchange is read (algos.elastic: "suppressed" or "stale")
    periods: tuple = (1, 2, 4)  # communication periods τ (local steps per exchange)
    failures: str = "iid"  # "iid": each exchange lost with probability FAILURE_P; "outages": long outages
    # True: every seed draws its own split, initial model, evaluation subset, minibatches, probes and
    # failures (one sweep per seed); False: one sweep over the seeds, which then vary minibatches and
    # probes only (the split, the initial model and the failure draws are shared)
    resample: bool = False
    outage_lengths: tuple = (5, 20)  # rounds, for failures = "outages" (sim.schedules.outage_blocks)
    outage_fraction: float = 1.0 / 3.0
    pool: int = 1  # images averaged over pool × pool pixel blocks (2: Fashion-MNIST's 28×28 as 14×14)


_QUICK = Preset("quick", data="digits", rounds=20, seeds=3, train_size=None, eval_size=720, test_size=None,
                log_rounds=1, batching="vmap")
_FULL = Preset("full", data="mnist-format", rounds=150, seeds=3, train_size=None, eval_size=10000, test_size=None,
               log_rounds=5, batching="map")
# medium: the deciding preset of Figures 4-5 on this CPU (see the figure's docstring for its sizing)
_MEDIUM = Preset("medium", data="mnist-format", rounds=100, seeds=3, train_size=None, eval_size=1000, test_size=1000,
                 log_rounds=10, batching="vmap", semantics="stale", periods=(1, 4), failures="outages", resample=True,
                 pool=2)
PRESETS = {p.name: p for p in (
    # quick: 20 rounds and F on 720 of the 1,437 training images keep it under 15 minutes on 2 cores
    # (25 rounds and all 1,437: 16.7 min alone on the machine with the evaluation in chunks of 128,
    # and on course for about 15.5 min with today's one pass)
    _QUICK,
    # full: the master is evaluated (10,000 training and 10,000 test images) every 5 rounds (every
    # round, that evaluation took over half of a round's time on the 2-core CPU); the workers' jobs
    # run one after another (lax.map), 1.5x faster than vmap on 28×28 (benchmarks/workers.py), while
    # on 8×8 digits vmap is as fast or faster (benchmarks/RESULTS.md)
    _FULL,
    # The same runs with the other failure semantics of docs/theory.md §9.6: a failed worker is crashed (no
    # progress) and its first exchange after recovery carries its old parameters.
    dataclasses.replace(_QUICK, name="quick-stale", semantics="stale"),
    dataclasses.replace(_FULL, name="full-stale", semantics="stale"),
    _MEDIUM,
)}
WORKERS = (4, 8)
LR, MOMENTUM, ALPHA, FAILURE_P, BATCH, KAPPA = 0.01, 0.5, 0.1, 1.0 / 3.0, 64, 2.0
CALIBRATION_SEED = 10_000  # where seeds resample: a0's failure-free run, disjoint from the reported seeds 0, 1, …
DEAD_ZONE = 1.0  # DEAHES-O's ramp starts at a = −DEAD_ZONE·a0 [CHOICE] (algos.elastic.deahes_o)
METHODS = ("EASGD", "EAMSGD", "EAHES", "EAHES-O", "EAHES-OM", "DEAHES-O")
HESSIAN = ("EAHES", "EAHES-O", "EAHES-OM", "DEAHES-O")


def algorithms(trace: int, failure: str = "suppressed", oracles: Optional[dict] = None) -> dict:
    """name -> (algorithm, split); each a composition of local optimiser × split × exchange rule.

    ``trace``: exchanges recorded by EAHES-O and DEAHES-O (for the detector's score; recording
    changes no number). ``oracles``: {label: master_side_only} gives one oracle per reading, named
    "EAHES-OM (label)" (:func:`algos.elastic.oracle`); default: the full reset alone, "EAHES-OM"."""
    f = dict(alpha=ALPHA, failure=failure)
    if oracles is None:
        om = {"EAHES-OM": (ea.eahes_om(learning_rate=LR, **f), "overlap")}
    else:
        om = {f"EAHES-OM ({label})": (ea.elastic_averaging(ea.adahessian(LR), exchange=ea.oracle(side), name="EAHES-OM",
                                                            **f), "overlap") for label, side in oracles.items()}
    return {
        "EASGD": (ea.easgd(learning_rate=LR, **f), "iid"),
        "EAMSGD": (ea.eamsgd(learning_rate=LR, momentum=MOMENTUM, **f), "iid"),
        "EAHES": (ea.eahes(learning_rate=LR, **f), "iid"),
        "EAHES-O": (ea.eahes(learning_rate=LR, trace=trace, **f), "overlap"),
        **om,
        "DEAHES-O": (ea.deahes_o(learning_rate=LR, trace=trace, **f), "overlap"),
    }


def dataset(cfg: Preset, data_path: Optional[str]):
    ds = digits() if cfg.data == "digits" else load_mnist_format(data_path)
    n_tr = cfg.train_size or len(ds.y_train)
    n_te = cfg.test_size or len(ds.y_test)
    name, Xtr, Xte = ds.name, ds.x_train[:n_tr], ds.x_test[:n_te]
    if cfg.pool > 1:
        Xtr, Xte = _pool(Xtr, cfg.pool), _pool(Xte, cfg.pool)
        name = f"{name} {Xtr.shape[1]}×{Xtr.shape[2]}"
    return name, Xtr, ds.y_train[:n_tr], Xte, ds.y_test[:n_te]


def _pool(x: np.ndarray, k: int) -> np.ndarray:
    """[N, H, W] images averaged over k × k blocks (H and W multiples of k), in float32."""
    n, h, w = x.shape
    if h % k or w % k:
        raise ValueError(f"pool {k} must divide the image size {h}×{w}")
    return x.reshape(n, h // k, k, w // k, k).mean(axis=(2, 4), dtype=np.float32)


def trend_spread(state) -> np.ndarray:
    """Standard deviation of the recorded trends a (a = 0 entries, before p values, left out), per τ."""
    a = np.asarray(state.trace_a, np.float64)  # [τ, seeds, K]
    out = []
    for t in range(a.shape[0]):
        v = a[t][(a[t] != 0.0)]
        out.append(float(np.std(v)) if v.size else 1.0)
    return np.asarray(out)


def problems(P: int, cfg: Preset, Xtr, ytr, Xte, yte, seed: int = 0) -> dict:
    """split -> the CNN problem for P workers: "iid" (disjoint shards) and "overlap" (r = 1/P)."""
    return {split: cnn_classifier(Xtr, ytr, Xte, yte, num_workers=P, split=split,
                                  overlap=(1.0 / P if split == "overlap" else 0.0), batch_size=BATCH,
                                  eval_size=cfg.eval_size, seed=seed, dtype=np.float32)
            for split in ("iid", "overlap")}


def schedules_for(P: int, cfg: Preset, rounds: Optional[int] = None, seed: int = 0):
    """(failure-free, failing) schedules of ``rounds`` (default: the preset's) communication rounds:
    equal job durations, and the preset's failures: "iid" loses each exchange with probability
    ``FAILURE_P``, drawn from P alone when the preset does not resample (shared by all seeds), else
    from (P, seed); "outages" loses blocks of ``outage_lengths`` rounds covering ``outage_fraction``
    of each worker's exchanges (:func:`sim.schedules.with_outages`), drawn from (P, seed)."""
    clean = schedules.fixed_computation(np.ones(P), num_events=P * (rounds or cfg.rounds))
    if cfg.failures == "iid":
        return clean, schedules.with_failures(clean, probability=FAILURE_P,
                                              seed=1000 * P + seed if cfg.resample else P)
    if cfg.failures == "outages":
        return clean, schedules.with_outages(clean, fraction=cfg.outage_fraction, lengths=cfg.outage_lengths,
                                             seed=2000 * P + seed)
    raise ValueError(f"preset {cfg.name!r}: failures must be 'iid' or 'outages'; got {cfg.failures!r}")


def sweep(alg, problem, schedule, keys, hparams: dict, P: int, cfg: Preset):
    """One part's compiled sweep over τ × seeds, logged and batched as the preset says (the figure
    and ``benchmarks/deahes_full`` both run their parts through this)."""
    return sim.sweep(alg, problem, schedule, keys=keys, hparams=hparams, log_every=P * cfg.log_rounds, runs="map",
                     batching=cfg.batching)
