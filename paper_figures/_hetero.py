"""What the heterogeneity lab's four figures share (issue 5): four measured answers to questions a survey of straggler
handling leaves open (spec mitigation.md, "Where the list comes from").

All four train the same MLP (pixels → hidden → 10, ReLU) on MNIST-format data
(``sim.data.load_mnist_format``: Fashion-MNIST from Debian's package here; scikit-learn's digits
where none is installed), n = 8 workers holding i.i.d. shards (identical data distributions:
any difference between workers comes from timing alone), float32. The quick preset uses the
first 8,000 training images average-pooled to 14×14; both presets use 5 seeds; the full preset 28×28 images,
16,000 of them. Seeds vary the minibatch draws (and the timing noise where there is
some), not the initial model.

1. ``specialisation``: 4 fast workers (τ = 1) and 4 slow ones (τ = R), R ∈ {1, 2, 4, 8, 16},
   vanilla ASGD, for the MLP and for a small CNN (two 5×5 convolutions with 8 and 16 channels,
   a 32-unit head; R ∈ {1, 4, 16} in the quick preset). Per layer and over the second half of training: how far each worker's model is
   from the server's in representation (1 − linear CKA on a fixed probe batch) and how well its
   next gradient aligns with the server's current one (cosine), fast against slow. Then
   data-dependent durations (R = 1, a job's time ∝ the ink of the images it draws): are the
   long jobs the ones that drew hard examples (high loss under the final model)?
2. ``divergence``: the slow workers' representation divergence over training, with and without
   staleness weighting (FedAsync's polynomial s(δ) = (1 + δ)^(−1/2) on ASGD's step), R ∈ {1, 4, 16}.
3. ``frontier``: test accuracy reached within a fixed simulated time, and time to a target
   accuracy, against the heterogeneity level h (τ_i = e^{h z_i}, z_i evenly spaced normal
   quantiles, scaled so that Σ 1/τ_i = n: the same total compute at every h), for synchronous
   SGD, backup workers (b = 2), vanilla and Rescaled ASGD, hierarchical SGD, and grouped
   synchronisation (GSP: two groups by speed, SSP bound 2 within each, a group forwards its
   gradients every 4 pushes); each method at its best step size of a small grid.
4. ``mitigation``: two 8× stragglers among 8 workers; each mitigation switched on against its own
   baseline: staleness weighting on ASGD, backup workers on synchronous SGD, and proactive
   scheduling (DPro-SM-like: per-worker local steps from predicted step times) on local SGD;
   throughput, final loss and the specialisation index, 5 seeds, bands shown.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np
from scipy import stats as sps

import sim
from paper_figures._figure import Parts
from sim import schedules
from sim.models import MLP

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
    probe = ds.x_test[-p.probes:]  # disjoint from the test images above
    return prob, pool(probe, p.pool).astype(np.float32), ds.y_test[-p.probes:], ds.name


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
    return build(min(need, count))



def in_one_part(compute, p: Preset, parts: Parts) -> dict:
    """An experiment as one part of its figure (resumable as a whole), its data marked with the
    preset's name."""
    return parts.get("all", p, lambda: {**compute(p), "preset": p.name})[0]


def with_footer(findings):
    """The findings text, then the preset and the computing time."""

    def text(d: dict) -> str:
        return findings(d) + f"(preset {d['preset']}, computed in {float(d['seconds']):.0f} s)\n"

    return text
