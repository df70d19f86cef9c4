"""What the heterogeneity lab's four figures share: four measured answers to questions a survey of
straggler handling leaves open (the straggler-mitigation survey behind docs/theory.md §10).

All four train the same MLP (pixels → hidden → 10, ReLU) on MNIST-format data
(``sim.data.load_mnist_format``: Fashion-MNIST from Debian's package here; scikit-learn's digits
where none is installed), n = 8 workers holding i.i.d. shards (identical data distributions: any
difference between workers comes from timing alone), float32, 5 seeds (experiment 2:
``divergence_seeds``). The quick preset uses the first 8,000 training images average-pooled to
14×14, the full preset 16,000 at 28×28. Experiments 3 and 4 use the claims harness
(:mod:`delaylab.claims`): each seed draws its own split, initial model, job-time noise and
minibatches (:data:`SOURCES`), and every scheme runs at its own step, bracketed on tuning seeds
disjoint from the reported ones (:func:`tuned`). Each experiment's module says what it measures:
1. :mod:`~paper_figures.hetero_specialisation`, 2. :mod:`~paper_figures.hetero_divergence`,
3. :mod:`~paper_figures.hetero_frontier`, 4. :mod:`~paper_figures.hetero_mitigation`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import time
from typing import Callable, Optional

import jax
import numpy as np
from scipy import stats as sps

from delaylab import sim, claims
from delaylab.paper_figures._figure import Parts
from delaylab.sim import schedules
from delaylab.sim.models import MLP

N = 8
FAST, SLOW = slice(0, 4), slice(4, 8)
LAYERS = ("Dense_0", "Dense_1")


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    train: int
    test: int
    pool: int  # average-pooling factor of the images
    hidden: int
    batch: int
    seeds: int
    events: int  # ASGD events per run (experiments 1, 2)
    horizon: float  # simulated time budget (experiments 3, 4)
    probes: int
    logs: int
    cnn_channels: tuple = (8, 16)  # experiment 1's CNN
    cnn_hidden: int = 32
    cnn_ratios: tuple = (1, 2, 4, 8, 16)
    tune_seeds: int = 3  # experiments 3, 4: steps bracketed on these seeds (claims.disjoint_seeds)
    max_extend: int = 3  # steps added past a starting grid's edge, per side
    tie: float = 0.02  # experiments 3, 4: tuning scores within 2% of the best are tied (claims.bracket)
    refine: int = 1  # experiments 3, 4: bracket refinements once the best is interior
    # experiments 3, 4: a step whose first tuning seed scores this much (relative) worse than the best
    # step's is not run on the other tuning seeds (claims.bracket's screen; 0: off)
    screen: float = 0.0
    more_seeds: int = 10  # experiments 3, 4: reported seeds of a claim whose verdict is marginal on `seeds`
    divergence_seeds: int = 12  # experiment 2: its straggler effect is a difference of differences (more seeds)
    split: str = "iid"  # experiment 3's shards: "iid" or "dirichlet α" (:func:`seeded_problem`)


PRESETS = {
    "quick": Preset("quick", train=8000, test=2000, pool=2, hidden=64, batch=32, seeds=5, events=3000, horizon=250.0,
                    probes=128, logs=40, cnn_ratios=(1, 4, 16)),
    "full": Preset("full", train=16000, test=5000, pool=1, hidden=128, batch=32, seeds=5, events=8000, horizon=600.0,
                   probes=256, logs=60),
}


def progress(msg: str) -> None:
    print(f"[hetero {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --- set-up -----------------------------------------------------------------------------------

def pool(x: np.ndarray, k: int) -> np.ndarray:
    if k == 1:
        return x
    n, h, w = x.shape
    return x[:, : h // k * k, : w // k * k].reshape(n, h // k, k, w // k, k).mean(axis=(2, 4))


def images(p: Preset):
    """(dataset, training images and labels, test images and labels) of preset ``p``."""
    ds = sim.data.load_mnist_format()
    return (ds, pool(ds.x_train[: p.train], p.pool), ds.y_train[: p.train],
            pool(ds.x_test[: p.test], p.pool), ds.y_test[: p.test])


def setup(p: Preset):
    """(problem, probe inputs, probe labels, dataset name)."""
    ds, xtr, ytr, xte, yte = images(p)
    prob = sim.models.mlp_classifier(xtr, ytr, num_workers=N, split="iid", hidden=p.hidden, batch_size=p.batch,
                                     seed=0, dtype=np.float32, test_images=xte, test_labels=yte)
    _, px, py = probes(p)
    return prob, px, py, ds.name


@functools.lru_cache(maxsize=4)
def probes(p: Preset):
    """(dataset name, probe images, probe labels): the last ``p.probes`` test images, pooled as the
    preset's images (disjoint from the first ``p.test`` test images the runs are evaluated on).
    Read once per preset (every run of a figure asks for them)."""
    ds = sim.data.load_mnist_format()
    return ds.name, pool(ds.x_test[-p.probes:], p.pool).astype(np.float32), ds.y_test[-p.probes:]


def mlp_module(p: Preset) -> MLP:
    return MLP(hidden=p.hidden, classes=10)


def seed_keys(p: Preset):
    return jax.random.split(jax.random.key(2026), p.seeds)


def two_speed_taus(ratio: float) -> np.ndarray:
    return np.r_[np.ones(4), np.full(4, float(ratio))]


def spread_taus(h: float) -> np.ndarray:
    """τ_i = e^{h z_i} with z_i the normal quantiles at (i + ½)/n, scaled so that Σ 1/τ_i = n."""
    z = sps.norm.ppf((np.arange(N) + 0.5) / N)
    t = np.exp(h * z)
    return t * np.sum(1.0 / t) / N


def log_every_for(events: int, logs: int) -> int:
    return max(1, events // logs)


def second_half(t: np.ndarray) -> np.ndarray:
    return t >= 0.5 * t[-1]


def timing_noise(taus: np.ndarray, seed: int = 0):
    return schedules.RandomTiming(taus, noise="exponential", scale=0.1 * taus, seed=seed)


def until(build, horizon: float, guess: int) -> schedules.Schedule:
    """The shortest schedule from ``build(count)`` that reaches simulated time ``horizon``."""
    return build(count_until(build, horizon, guess))


def count_until(build, horizon: float, guess: int) -> int:
    """The smallest count (events, rounds, steps or reports, whatever ``build`` counts) whose
    schedule ``build(count)`` reaches simulated time ``horizon``."""
    count = max(guess, 2)
    while True:
        s = build(count)
        if s.end_time >= horizon:
            break
        count *= 2
    if s.policy == "barrier":
        ends = np.array([s.finish[s.round == r].max() for r in range(int(s.round.max()) + 1)])
        need = int(np.searchsorted(ends, horizon)) + 1
    else:
        need = int(np.searchsorted(s.finish, horizon)) + 1
        if s.pull_only is not None:  # counts are of reports; releases are events of their own
            need = int(np.sum(~s.pull_only[:need]))
    return min(need, count)


def with_margin(count: int) -> int:
    """A count that takes every seed past the budget, not only the reference seed the count was
    sized on: 15% and two more (a round-based run at high h has only a few rounds)."""
    return int(math.ceil(1.15 * count)) + 2


def in_one_part(compute, p: Preset, parts: Parts) -> dict:
    """An experiment as one part of its figure (resumable as a whole), its data marked with the
    preset's name."""
    return parts.get("all", p, lambda: {**compute(p), "preset": p.name})[0]


def with_footer(findings):
    """The findings text, then the preset and the computing time."""

    def text(d: dict) -> str:
        return findings(d) + f"(preset {d['preset']}, computed in {float(d['seconds']):.0f} s)\n"

    return text


# --- experiments 3 and 4: every scheme at its bracketed step, seeds that resample every source ----

SOURCES = ("split", "init", "timing", "minibatches")  # what one seed of experiments 3 and 4 draws


@dataclasses.dataclass(frozen=True)
class Scheme:
    """One scheme of experiments 3 and 4: its algorithm at a step, its schedule on a timing with a
    count of events (or rounds, steps, reports), the swept hyperparameter and the starting grid
    that :func:`claims.bracket` extends."""

    make: Callable  # step -> algorithm
    build: Callable  # (timing, count) -> schedule
    guess: int  # a first count for count_until
    grid: tuple
    hparam: str = "stepsize"


@functools.lru_cache(maxsize=4)
def tuning_images(p: Preset):
    """(dataset name, training images and labels, held-out images and labels of each kind) for
    experiments 3 and 4: ``{"test": ..., "validation": ...}``. The validation images are as many
    training-split images as the test images, outside the training set: tuning reads them, so that
    no step is chosen on the test images. On a small data set (scikit-learn's digits) the
    training set is shortened to leave room for them."""
    ds = sim.data.load_mnist_format()
    xte, yte = pool(ds.x_test[: p.test], p.pool), ds.y_test[: p.test]
    n_val = len(yte)
    n_tr = min(p.train, len(ds.y_train) - n_val)
    if n_tr < 10 * N:
        raise ValueError(f"{ds.name} has {len(ds.y_train)} training images: too few for {N} workers and "
                         f"{n_val} validation images")
    held = {"test": (xte, yte),
            "validation": (pool(ds.x_train[n_tr: n_tr + n_val], p.pool), ds.y_train[n_tr: n_tr + n_val])}
    return ds.name, pool(ds.x_train[:n_tr], p.pool), ds.y_train[:n_tr], held


def seeded_problem(p: Preset, seed: int, *, validation: bool = False, split: str = "iid"):
    """Seed ``seed``'s problem: its own split of the training images (``split``: "iid" or
    "dirichlet α") and its own initial model (:func:`claims.seed_sources`), logging the accuracy
    on the test images (on the validation images with ``validation``). Returns (problem, the seed
    of its job times, its minibatch key)."""
    src = claims.seed_sources(seed, SOURCES)
    _, xtr, ytr, held = tuning_images(p)
    xe, ye = held["validation" if validation else "test"]
    if split == "iid":
        kind, alpha = "iid", 1.0
    elif split.startswith("dirichlet "):
        kind, alpha = "dirichlet", float(split.split()[1])
    else:
        raise ValueError(f"split must be 'iid' or 'dirichlet α'; got {split!r}")
    prob = sim.models.mlp_classifier(xtr, ytr, num_workers=N, split=kind, alpha=alpha, hidden=p.hidden,
                                     batch_size=p.batch, seed=src["split"], init_seed=src["init"], dtype=np.float32,
                                     test_images=xe, test_labels=ye)
    return prob, src["timing"], jax.random.key(src["minibatches"])


def one_run(scheme: Scheme, step: float, problem, schedule, key, p: Preset, *, telemetry=None,
            extract: Optional[Callable] = None) -> dict:
    """One run of ``scheme`` at ``step``: its log times, training loss and accuracy (NaN from a
    divergence on), the event it diverged at (−1: none), its end time, the gradients applied by
    the budget (:func:`applied_by`), and ``extract(result)``."""
    res = sim.sweep(scheme.make(float(step)), problem, schedule, keys=key[None],
                    hparams={scheme.hparam: np.asarray([step], np.float32)}, telemetry=telemetry,
                    log_every=log_every_for(schedule.num_events, p.logs))
    m = res.metrics
    out = {"time": np.asarray(m["time"], np.float64), "loss": np.asarray(m["loss"], np.float64)[0, 0],
           "accuracy": np.asarray(m["test_accuracy"], np.float64)[0, 0],
           "diverged_at": int(np.asarray(res.diverged_at)[0, 0]), "end_time": float(schedule.end_time),
           "applied": int(np.sum(applied_by(schedule, p.horizon)))}
    if extract is not None:
        out.update(extract(res))
    return out


def applied_by(schedule, horizon: float) -> np.ndarray:
    """Per event: whether the server has applied its result by ``horizon``: delivered, and applied
    by then (in rounds, when its round closed; where the schedule records it, ``applied_at``),
    so a round still open at the budget counts for nothing."""
    t = np.asarray(schedule.finish if schedule.applied_at is None else schedule.applied_at, np.float64)
    r = np.asarray(schedule.round)
    if np.any(r >= 0):
        ends = schedule.round_end
        close = dict(zip(r[ends].tolist(), np.asarray(schedule.finish)[ends].tolist()))
        t = np.where(r >= 0, np.array([close.get(x, np.inf) for x in r.tolist()]), t)
    return np.asarray(schedule.delivered) & (t <= float(horizon))


def tail(run: dict, key: str, horizon: float, weight: str = "time") -> float:
    """``run[key]`` at the time budget ``horizon``, steadied over a few log points: averaged over
    (0.9 T, T], T the budget or the run's end if it ends first (the last log point at or before T if
    none falls there); NaN if the run diverged. Tuning and verdicts read runs this one way
    (:func:`claims.window_mean` with ``weight``: an output's own reading, :func:`claims.reading`)."""
    end = min(float(horizon), float(np.asarray(run["time"])[-1]))
    return float(claims.window_mean(run["time"], run[key], end, end, weight=weight))


def read_time(run: dict, horizon: float) -> float:
    """The time of the last log point at or before the budget: when the run is read (:func:`tail`)."""
    t = np.asarray(run["time"], np.float64)
    return float(t[max(int(np.sum(t <= float(horizon) + 1e-9)) - 1, 0)])


def slug(cell: str) -> str:
    """A cell's name as a part's file name (:func:`tuned`'s runs are ``<slug>_g<step>_s<seed>``)."""
    return re.sub(r"[^A-Za-z0-9.]+", "_", cell).strip("_")


class Cell:
    """One cell of experiment 3 or 4: a scheme under one condition, its runs one part each
    (named ``<slug(cell)>_g<step>_s<seed>``), tuned and reported on disjoint seeds.
    ``make_run(step, seed, validation)`` computes one run."""

    def __init__(self, parts: Parts, p: Preset, cell: str, inputs: dict, make_run: Callable):
        self.parts, self.p, self.cell, self.inputs, self.make_run = parts, p, cell, inputs, make_run
        self.seconds: dict = {}

    def run(self, g: float, seed: int, validation: bool) -> dict:
        part, reused = self.parts.get(f"{slug(self.cell)}_g{g:.6g}_s{seed}",
                                      {**self.inputs, "preset": self.p, "step": float(g), "seed": int(seed),
                                       "validation": validation},
                                      lambda: self.make_run(float(g), int(seed), validation))
        if not reused:
            progress(f"{self.cell}, γ = {g:.4g}, seed {seed}: {part['seconds']:.1f} s")
        self.seconds[g, seed, validation] = float(part["seconds"])
        return part

    def tune(self, scheme: Scheme, score: Callable) -> claims.Bracket:
        """The step bracketed (:func:`claims.bracket` from ``scheme.grid``, up to ``p.max_extend``
        steps past an edge, refined ``p.refine`` times, scores within ``p.tie`` of the best tied
        with it: a few tuning seeds of a chaotic training run leave that much noise) on the tuning
        seeds, each run logging the validation accuracy, by the mean of ``score(run)`` (lower is
        better; NaN, a divergence, is the worst)."""
        tune, _ = claims.disjoint_seeds(self.p.tune_seeds, self.p.seeds)

        def mean_score(g: float) -> float:
            v = float(np.mean([score(self.run(g, s, True)) for s in tune]))
            return v if math.isfinite(v) else math.inf

        return claims.bracket(mean_score, scheme.grid, max_extend=self.p.max_extend, tie=self.p.tie,
                              refine=self.p.refine, screen=getattr(self.p, "screen", 0.0),  # other labs' presets: none
                              first=lambda g: score(self.run(g, tune[0], True)))

    def report(self, g: float, seeds: Optional[int] = None) -> list:
        """The runs of the first ``seeds`` reported seeds (default: the preset's) at step ``g``."""
        _, report = claims.disjoint_seeds(self.p.tune_seeds, seeds or self.p.seeds)
        return [self.run(g, s, False) for s in report]


def stored_bracket(b: claims.Bracket) -> dict:
    return {"steps": list(b.steps), "scores": list(b.scores), "best": b.best, "interior": b.interior, "edge": b.edge,
            "extended": b.extended, "screened": list(b.screened)}


def tuned(parts: Parts, p: Preset, cell: str, inputs: dict, make_run: Callable, scheme: Scheme,
          score: Callable) -> dict:
    """One cell (:class:`Cell`) tuned, then its reported seeds at the best step. Returns
    ``{"bracket": {steps, scores, best, interior, edge, extended}, "runs": [...], "seconds"}``
    with the reported seeds' runs in the order of ``claims.disjoint_seeds`` and the computing time
    of all the cell's runs (as stored with them, whichever process computed them)."""
    c = Cell(parts, p, cell, inputs, make_run)
    b = c.tune(scheme, score)
    runs = c.report(b.best)
    return {"bracket": stored_bracket(b), "runs": runs, "seconds": sum(c.seconds.values())}


def at_settings(cells: dict, settings: dict, value: Callable, seeds: int, parts=None) -> dict:
    """label -> {cell: {name: the first ``seeds`` reported seeds' values}} at that setting's steps,
    ``value(run)`` giving a run's named values. With ``parts``, each (setting, cell) is a unit of
    :meth:`paper_figures._figure.Parts.order` (helper processes share them)."""
    pairs = [(label, k) for label, steps in settings.items() for k in steps]
    got = {}
    for label, k in (pairs if parts is None else parts.order(pairs)):
        vals = [value(r) for r in cells[k].report(settings[label][k], seeds)]
        got[label, k] = {name: np.array([v[name] for v in vals]) for name in vals[0]}
    return {label: {k: got[label, k] for k in steps} for label, steps in settings.items()}
