"""The DEAHES-O experiment's set-up (docs/theory.md §9, §12): its presets, methods, data,
problems and schedules, and how one part of it runs. ``paper_figures.deahes`` draws the figure from
it; ``benchmarks/deahes_full`` times its parts; both import it from here (figures and benchmarks
do not import each other)."""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional, Sequence

import numpy as np

from delaylab import claims, sim
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
    outage_lengths: tuple = (5, 20)  # rounds, for failures = "outages" (sim.schedules.outage_blocks)
    outage_fraction: float = 1.0 / 3.0
    pool: int = 1  # images averaged over pool × pool pixel blocks (2: Fashion-MNIST's 28×28 as 14×14)
    # η bracketed per optimiser family (FAMILIES) on this many tuning seeds, disjoint from the reported
    # ones (claims.disjoint_seeds); 0: the paper's η = LR alone
    tune_seeds: int = 0
    tune_workers: tuple = ()  # the numbers of workers P the tuning runs at (empty: every P of WORKERS)
    refine: int = 1  # claims.bracket's refinement rounds once the best η is interior
    max_extend: int = 3  # η added past a grid's edge at most, on each side
    # [CHOICE] tuning scores within 2% of the best count as tied with it (claims.bracket's tie): on 3
    # tuning seeds the best and the runner-up can differ by less than the seeds' spread
    tie: float = 0.02
    oracles: tuple = ("full reset", "master side", "reset where stale")  # the oracle readings run (ORACLES)


# Every seed draws its own split, initial model, evaluation subset, minibatches, probes and failures
# (one sweep per seed and method); a0 and η are fitted on tuning seeds, disjoint from the reported ones.
_QUICK = Preset("quick", data="digits", rounds=20, seeds=3, train_size=None, eval_size=720, test_size=None,
                log_rounds=1, batching="vmap", tune_seeds=3, tune_workers=(4,))
_FULL = Preset("full", data="mnist-format", rounds=150, seeds=3, train_size=None, eval_size=10000, test_size=None,
               log_rounds=5, batching="map", tune_seeds=3)
# medium: the deciding preset of Figures 4-5 on a 2-core CPU, under the paper's failure model
# (suppressed exchanges, each lost with probability 1/3). Fashion-MNIST (or MNIST) averaged to 14×14
# (the CNN unchanged: at 28×28 the worker steps dominate the cost, benchmarks/RESULTS.md), F on 1,000
# class-stratified training images and accuracy on the first 1,000 test images (the same for every
# seed) every 10 rounds. τ = 1 alone, for 200 rounds: a round at τ = 4 costs four at τ = 1, and at 100
# rounds a tuned EASGD's curve at τ = 1 still fell by more than the short-run rule allows over its
# last fifth (benchmarks/RESULTS.md), so the budget goes to rounds rather than to a second period.
_MEDIUM = Preset("medium", data="mnist-format", rounds=200, seeds=3, train_size=None, eval_size=1000, test_size=1000,
                 log_rounds=10, batching="vmap", periods=(1,), pool=2, tune_seeds=3, tune_workers=(4,))
# medium-outages: the earlier medium preset, 100 rounds at τ ∈ {1, 4} under long outages with stale
# semantics, a failure model chosen after deahes-readings (i.i.d. losses of a third of the exchanges
# cost EAHES-O little there, and stale outages were the one setting where the oracle's mean led)
_MEDIUM_OUTAGES = dataclasses.replace(_MEDIUM, name="medium-outages", rounds=100, semantics="stale", periods=(1, 4),
                                      failures="outages")
PRESETS = {p.name: p for p in (
    # quick: 20 rounds and F on 720 of the 1,437 training images; η is tuned at P = 4 alone, whose
    # runs cost about half of P = 8's (benchmarks/RESULTS.md has the preset's timings)
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
    _MEDIUM_OUTAGES,
)}
WORKERS = (4, 8)
LR, MOMENTUM, ALPHA, FAILURE_P, BATCH, KAPPA = 0.01, 0.5, 0.1, 1.0 / 3.0, 64, 2.0
CALIBRATION_SEED = 10_000  # a0's failure-free run: the first tuning seed, disjoint from the reported seeds 0, 1, …
DEAD_ZONE = 1.0  # DEAHES-O's ramp starts at a = −DEAD_ZONE·a0 [CHOICE] (algos.elastic.deahes_o)
METHODS = ("EASGD", "EAMSGD", "EAHES", "EAHES-O", "EAHES-OM", "DEAHES-O")
HESSIAN = ("EAHES", "EAHES-O", "EAHES-OM", "DEAHES-O")
# the optimiser families that share one η (the local optimiser's), and the grids their brackets start from
FAMILIES = {"SGD": ("EASGD", "EAMSGD"), "AdaHessian": HESSIAN}
GRIDS = {"SGD": (0.03, 0.1, 0.3), "AdaHessian": (0.03, 0.1, 0.3)}
# the oracle's readings (docs/theory.md §9.6): the rule on an exchange that follows a failure
ORACLES = ("full reset", "master side", "reset where stale")


def family(method: str) -> str:
    """The optimiser family of a method (an oracle reading, "EAHES-OM (…)", is AdaHessian's)."""
    return "SGD" if method in FAMILIES["SGD"] else "AdaHessian"


def oracle_name(reading: str) -> str:
    """The method's name for an oracle reading: "EAHES-OM" for the full reset, else "EAHES-OM (reading)"."""
    return "EAHES-OM" if reading == "full reset" else f"EAHES-OM ({reading})"


@dataclasses.dataclass(frozen=True)
class StaleReset:
    """The oracle reading "reset where stale": (h1, h2) = (1, 0) on an exchange that follows a
    failure only where the returning worker's parameters are stale, else (α, α). Under "stale"
    failures the worker made no progress and carries its parameters from before the failure, so
    every such exchange resets (the full reset); under "suppressed" failures the worker trained on
    and its parameters are current, so none does and the worker keeps its progress (EASGD's rule).
    Either way its runs are another method's (:func:`same_runs`)."""

    stale: bool

    def __call__(self, hparams, ctx) -> tuple:
        return ea.oracle_weights(hparams, ctx) if self.stale else ea.fixed_weights(hparams, ctx)


def oracle_exchange(reading: str, failure: str) -> ea.Exchange:
    """The exchange rule of an oracle reading under failure semantics ``failure``."""
    if reading not in ORACLES:
        raise ValueError(f"oracle reading must be one of {ORACLES}; got {reading!r}")
    if reading == "reset where stale":
        return ea.Exchange(StaleReset(failure == "stale"))
    return ea.oracle(master_side_only=reading == "master side")


def same_runs(method: str, failure: str) -> Optional[str]:
    """The method whose runs ``method``'s are, where its algorithm is that method's on the same
    split and draws, else None: "reset where stale" is EAHES-O under suppressed failures (it never
    resets) and the full-reset oracle, EAHES-OM, under stale failures (it resets every returning worker)."""
    if method != oracle_name("reset where stale"):
        return None
    return "EAHES-O" if failure == "suppressed" else "EAHES-OM"


def algorithms(trace: int, failure: str = "suppressed", oracles: Optional[tuple] = None) -> dict:
    """name -> (algorithm, split); each a composition of local optimiser × split × exchange rule, at
    the default η = ``LR`` (a sweep's ``learning_rate`` overrides it).

    ``trace``: exchanges recorded by EAHES-O and DEAHES-O (for the detector's score; recording
    changes no number). ``oracles``: the oracle readings (:data:`ORACLES`) run, each named by
    :func:`oracle_name`; default: the full reset alone, "EAHES-OM"."""
    f = dict(alpha=ALPHA, failure=failure)
    om = {oracle_name(r): (ea.elastic_averaging(ea.adahessian(LR), exchange=oracle_exchange(r, failure),
                                                name="EAHES-OM", **f), "overlap")
          for r in (oracles if oracles is not None else ("full reset",))}
    return {
        "EASGD": (ea.easgd(learning_rate=LR, **f), "iid"),
        "EAMSGD": (ea.eamsgd(learning_rate=LR, momentum=MOMENTUM, **f), "iid"),
        "EAHES": (ea.eahes(learning_rate=LR, **f), "iid"),
        "EAHES-O": (ea.eahes(learning_rate=LR, trace=trace, **f), "overlap"),
        **om,
        "DEAHES-O": (ea.deahes_o(learning_rate=LR, trace=trace, **f), "overlap"),
    }


def sweep_hparams(periods, learning_rate: float, a0=None) -> dict:
    """A sweep's hyperparameters: one run per period τ at step ``learning_rate`` (traced, so every
    step shares one compiled program); with ``a0`` (one per τ), DEAHES-O's default reading."""
    periods = np.asarray(periods, np.int32)
    hp = {"period": periods, "learning_rate": np.full(periods.shape, learning_rate, np.float32)}
    if a0 is not None:
        a0 = np.asarray(a0, np.float64)
        hp.update(a0=a0.astype(np.float32), a_start=(-DEAD_ZONE * a0).astype(np.float32))
    return hp


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


# The random sources of one seed, each its own stream (claims.seed_sources): the shards, the
# class-stratified subset F is evaluated on, the initial model, the root key of the minibatches and
# Hutchinson probes, and each failure model's draws at each number of workers P. Changing the seed
# changes every source; no two share a stream (the initial model and the minibatch keys, or the
# split and the evaluation subset, would otherwise come from one seed, and with one failure stream
# for every P the i.i.d. losses at P = 4 would be the first draws of those at P = 8). Within a seed,
# the split, evaluation subset, initial model and keys are the same for every P.
SOURCES = ("split", "evaluation subset", "initial model", "minibatches and probes")
FAILURE_KINDS = ("iid", "outages")


def failure_source(kind: str, P: int) -> str:
    """The name of the source of failure model ``kind``'s draws at P workers."""
    return f"{kind} failures at P = {P}"


def sources(seed: int, P: Optional[int] = None) -> dict:
    """Source name -> its seed, for the run seed ``seed``: :data:`SOURCES`, and with ``P`` each
    failure model's at P workers (:func:`failure_source`)."""
    extra = () if P is None else tuple(failure_source(k, P) for k in FAILURE_KINDS)
    return claims.seed_sources(seed, SOURCES + extra)


def problems(P: int, cfg, Xtr, ytr, Xte, yte, seed: int = 0) -> dict:
    """split -> the CNN problem for P workers: "iid" (disjoint shards) and "overlap" (r = 1/P),
    with seed ``seed``'s split, evaluation subset and initial model (:func:`sources`)."""
    src = sources(seed)
    return {split: cnn_classifier(Xtr, ytr, Xte, yte, num_workers=P, split=split,
                                  overlap=(1.0 / P if split == "overlap" else 0.0), batch_size=BATCH,
                                  eval_size=cfg.eval_size, seed=src["split"], eval_seed=src["evaluation subset"],
                                  init_seed=src["initial model"], dtype=np.float32)
            for split in ("iid", "overlap")}


def keys(seed: int):
    """The one-run batch of root keys of seed ``seed``'s minibatches and probes (:func:`sources`)."""
    import jax

    return jax.random.key(sources(seed)["minibatches and probes"])[None]


def schedules_for(P: int, cfg, rounds: Optional[int] = None, seed: int = 0, failures: Optional[str] = None):
    """(failure-free, failing) schedules of ``rounds`` (default: the preset's) communication rounds:
    equal job durations, and the failures ``failures`` (default: the preset's), drawn from seed
    ``seed``'s stream of that failure model at P workers (:func:`sources`): "iid" loses each
    exchange with probability ``FAILURE_P``; "outages" loses blocks of ``cfg.outage_lengths``
    rounds covering ``cfg.outage_fraction`` of each worker's exchanges
    (:func:`sim.schedules.with_outages`)."""
    kind = failures or cfg.failures
    if kind not in FAILURE_KINDS:
        raise ValueError(f"preset {cfg.name!r}: failures must be one of {FAILURE_KINDS}; got {kind!r}")
    clean = schedules.fixed_computation(np.ones(P), num_events=P * (rounds or cfg.rounds))
    seed = sources(seed, P)[failure_source(kind, P)]
    if kind == "iid":
        return clean, schedules.with_failures(clean, probability=FAILURE_P, seed=seed)
    return clean, schedules.with_outages(clean, fraction=cfg.outage_fraction, lengths=cfg.outage_lengths, seed=seed)


def sweep(alg, problem, schedule, keys, hparams: dict, P: int, cfg: Preset):
    """One part's compiled sweep over τ × seeds, logged and batched as the preset says (the figure
    and ``benchmarks/deahes_full`` both run their parts through this)."""
    return sim.sweep(alg, problem, schedule, keys=keys, hparams=hparams, log_every=P * cfg.log_rounds, runs="map",
                     batching=cfg.batching)


def tune(fam: str, seed_scores: Callable[[float], Sequence[float]], cfg) -> tuple[claims.Bracket, dict]:
    """Family ``fam``'s η, bracketed from ``GRIDS[fam]`` by the mean over the tuning seeds of
    ``seed_scores(η)`` (one score per tuning seed, lower is better; NaN, a divergence, counts as
    inf): :func:`claims.bracket` with the preset's ``refine``, ``max_extend`` and ``tie``. Returns
    the bracket and η -> the per-seed scores (for :func:`stored_bracket`)."""
    per_seed: dict = {}

    def finite(eta: float) -> float:
        v = np.asarray(seed_scores(eta), np.float64)
        per_seed[float(eta)] = [float(x) for x in v]
        m = float(v.mean())
        return m if math.isfinite(m) else math.inf

    return claims.bracket(finite, GRIDS[fam], max_extend=cfg.max_extend, refine=cfg.refine, tie=cfg.tie), per_seed


def stored_bracket(b: claims.Bracket, per_seed: Optional[dict] = None, tie: Optional[float] = None) -> dict:
    """A bracket as plain data (:meth:`claims.Bracket.from_stored` reads it back), with each step's
    per-seed tuning scores where ``per_seed`` (η -> scores, from :func:`tune`) is given, and the tie
    rule it was bracketed with where ``tie`` is."""
    out = {"steps": list(b.steps), "scores": list(b.scores), "best": b.best, "interior": b.interior, "edge": b.edge,
           "extended": b.extended}
    if per_seed is not None:
        out["seed_scores"] = [list(per_seed[float(s)]) for s in b.steps]
    if tie is not None:
        out["tie"] = float(tie)
    return out


def step_settings(brackets: dict) -> dict:
    """The η settings the tuned verdicts are judged at (``paper_figures.catalogue.verdict``):
    "tuned" (each family at its best η) and "neighbours −" / "+" (each family one step of its
    refined grid below / above its best; a family at that edge of its grid has none there, and a
    claim comparing its methods is inconclusive anyway, :func:`claims.gated`). No common η: the two
    families' steps share no scale, and within a family the tuned η is already common."""
    out = {"tuned": {f: b.best for f, b in brackets.items()}}
    for side, i in (("−", 0), ("+", 1)):
        nb = {f: b.neighbours()[i] for f, b in brackets.items() if b.neighbours()[i] is not None}
        if nb:
            out[f"neighbours {side}"] = nb
    return out


def resolution(b: dict) -> str:
    """How well the tuning told the steps apart: the best step's score against the second best's,
    and, where the per-seed scores are stored, their paired difference over the tuning seeds (mean
    ± the 95% half-width: an interval that reaches 0 means the seeds did not order the two)."""
    (i, j) = sorted(range(len(b["steps"])), key=lambda k: (b["scores"][k], b["steps"][k]))[:2]
    s1, s2 = b["scores"][i], b["scores"][j]
    out = (f"best η {b['steps'][i]:.4g} scores {s1:.4f}, the second best, η {b['steps'][j]:.4g}, {s2:.4f} "
           f"({(s2 - s1) / abs(s1):.2%} apart")
    if "seed_scores" in b:
        d = np.asarray(b["seed_scores"][j], np.float64) - np.asarray(b["seed_scores"][i], np.float64)
        iv = claims.paired_interval(d)
        out += f"; per tuning seed {iv} over {d.size} seeds" + (", which do not order the two" if iv.lo <= 0 else "")
    if "tie" in b:
        out += f"; scores within {b['tie']:.0%} of the best count as tied, and no tied step may sit at an edge"
    return out + ")"
