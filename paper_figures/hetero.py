"""The heterogeneity lab (issue 5): four measured answers to questions a survey of straggler
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
import math
import time

import jax
import numpy as np
from scipy import stats as sps

import algos
import sim
from paper_figures._output import pyplot, save_figure, write_outputs
from sim import schedules
from sim import telemetry as T
from sim.models import CNN, MLP

N = 8
FAST, SLOW = slice(0, 4), slice(4, 8)
LAYERS = ("Dense_0", "Dense_1")


@dataclasses.dataclass(frozen=True)
class Preset:
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
    "quick": Preset(train=8000, test=2000, pool=2, hidden=64, batch=32, seeds=5, events=3000, horizon=250.0,
                    probes=128, logs=40, cnn_ratios=(1, 4, 16)),
    "full": Preset(train=16000, test=5000, pool=1, hidden=128, batch=32, seeds=5, events=8000, horizon=600.0,
                   probes=256, logs=60),
}


def _progress(msg: str) -> None:
    print(f"[hetero {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --- set-up -----------------------------------------------------------------------------------

def _pool(x: np.ndarray, k: int) -> np.ndarray:
    if k == 1:
        return x
    n, h, w = x.shape
    return x[:, : h // k * k, : w // k * k].reshape(n, h // k, k, w // k, k).mean(axis=(2, 4))


def _images(p: Preset):
    """(dataset, training images and labels, test images and labels) of preset ``p``."""
    ds = sim.data.load_mnist_format()
    return (ds, _pool(ds.x_train[: p.train], p.pool), ds.y_train[: p.train],
            _pool(ds.x_test[: p.test], p.pool), ds.y_test[: p.test])


def setup(p: Preset):
    """(problem, probe inputs, probe labels, dataset name)."""
    ds, xtr, ytr, xte, yte = _images(p)
    prob = sim.models.mlp_classifier(xtr, ytr, num_workers=N, split="iid", hidden=p.hidden, batch_size=p.batch,
                                     seed=0, dtype=np.float32, test_images=xte, test_labels=yte)
    probe = ds.x_test[-p.probes:]  # disjoint from the test images above
    return prob, _pool(probe, p.pool).astype(np.float32), ds.y_test[-p.probes:], ds.name


def _module(p: Preset) -> MLP:
    return MLP(hidden=p.hidden, classes=10)


def _keys(p: Preset):
    return jax.random.split(jax.random.key(2026), p.seeds)


def two_speed_taus(ratio: float) -> np.ndarray:
    return np.r_[np.ones(4), np.full(4, float(ratio))]


def spread_taus(h: float) -> np.ndarray:
    """τ_i = e^{h z_i} with z_i the normal quantiles at (i + ½)/n, scaled so that Σ 1/τ_i = n."""
    z = sps.norm.ppf((np.arange(N) + 0.5) / N)
    t = np.exp(h * z)
    return t * np.sum(1.0 / t) / N


def _log_every(events: int, logs: int) -> int:
    return max(1, events // logs)


def _second_half(t: np.ndarray) -> np.ndarray:
    return t >= 0.5 * t[-1]


# --- 1. specialisation ------------------------------------------------------------------------

RATIOS = (1, 2, 4, 8, 16)


def setup_cnn(p: Preset):
    """(problem, module) of the CNN run of experiment 1: the same images, shards and probes as
    :func:`setup`, a :class:`sim.models.CNN` with ``p.cnn_channels`` and a ``p.cnn_hidden`` head."""
    _, xtr, ytr, xte, yte = _images(p)
    prob = sim.models.cnn_classifier(xtr, ytr, xte, yte, num_workers=N, split="iid", batch_size=p.batch,
                                     channels=p.cnn_channels, hidden=p.cnn_hidden, eval_size=p.test, seed=0,
                                     dtype=np.float32)
    return prob, CNN(classes=10, channels=p.cnn_channels, hidden=p.cnn_hidden)


def _layer_summary(res, mask, layers) -> dict:
    """Per layer, per seed: the mean over the given log points of 1 − CKA and of the gradient
    cosine, for the fast and the slow workers."""
    out = {}
    for layer in layers:
        div = 1.0 - res.metrics[f"telemetry/cka/{layer}"][0][:, mask]  # [S, logs, n]
        cos = res.metrics[f"telemetry/grad_cos/{layer}"][0][:, mask]
        for name, sl in (("fast", FAST), ("slow", SLOW)):
            out[f"div_{layer}_{name}"] = div[..., sl].mean(axis=(1, 2))
            out[f"cos_{layer}_{name}"] = cos[..., sl].mean(axis=(1, 2))
    return out


def _specialisation_runs(p: Preset, prob, module, px, py, ratios, runs: str) -> dict:
    tel = T.Representations(module, px, py)
    layers = tuple(sorted(jax.eval_shape(lambda: T.activations(module, prob.x0, px[:2]))))
    gamma = 0.05
    out = {"ratios": np.array(ratios, float), "gamma": gamma, "layers": layers}
    rows = {}
    for r in ratios:
        _progress(f"specialisation, {type(module).__name__}: R = {r}")
        sched = schedules.fixed_computation(two_speed_taus(r), num_events=p.events)
        res = sim.sweep(algos.asgd(stepsize=gamma), prob, sched, keys=_keys(p), telemetry=tel,
                        log_every=_log_every(p.events, p.logs), runs=runs)
        s = _layer_summary(res, _second_half(res.metrics["time"]), layers)
        s["accuracy"] = res.metrics["test_accuracy"][0][:, -1]
        for k, v in s.items():
            rows.setdefault(k, []).append(v)
    out.update({k: np.stack(v) for k, v in rows.items()})  # [ratios, seeds]

    # data-dependent durations: a job's time ∝ the ink of the images it draws
    _progress(f"specialisation, {type(module).__name__}: data-dependent durations")
    key = _keys(p)[0]
    X = np.asarray(prob.data["X"])
    ink = X.reshape(N, X.shape[1], -1).sum(axis=2)
    rate = 1.0 / (p.batch * ink.mean())
    timing = schedules.ExampleCostTiming(ink, batch_size=p.batch, key=key, time_per_cost=0.8 * rate, overhead=0.2)
    sched = schedules.asynchronous(timing, num_events=p.events)
    res = sim.run(algos.asgd(stepsize=gamma), prob, sched, key=key, telemetry=tel, log_every=_log_every(p.events, p.logs))
    params = res.params

    def losses(Xi, yi):
        import optax

        return optax.softmax_cross_entropy_with_integer_labels(module.apply({"params": params}, Xi), yi)

    per_example = np.stack([np.asarray(losses(prob.data["X"][i], prob.data["y"][i])) for i in range(N)])
    jobs = sched.job_number
    drawn = {i: timing.drawn_indices(i, int(jobs[sched.worker == i].max()) + 1) for i in range(N)}
    dur = sched.durations
    difficulty = np.array([per_example[w][drawn[w][k]].mean() for w, k in zip(sched.worker, jobs)])
    rho, pval = sps.spearmanr(dur, difficulty)
    mask = _second_half(res.metrics["time"])
    worker_dur = np.array([dur[sched.worker == i].mean() for i in range(N)])
    worker_div = {layer: (1 - res.metrics[f"telemetry/cka/{layer}"][mask]).mean(axis=0) for layer in layers}
    out.update(dd_duration=dur, dd_difficulty=difficulty, dd_rho=float(rho), dd_p=float(pval),
               dd_worker_duration=worker_dur,
               **{f"dd_worker_div_{layer}": v for layer, v in worker_div.items()},
               dd_worker_rho={layer: float(sps.spearmanr(worker_dur, v)[0]) for layer, v in worker_div.items()})
    return out


def compute_specialisation(p: Preset) -> dict:
    prob, px, py, dsname = setup(p)
    out = {"dataset": dsname, "models": {}}
    out["models"]["MLP"] = _specialisation_runs(p, prob, _module(p), px, py, RATIOS, "vmap")
    cprob, cnn = setup_cnn(p)
    # convolutions on CPU: runs one after another beat batched runs (benchmarks/RESULTS.md)
    out["models"]["CNN"] = _specialisation_runs(p, cprob, cnn, px, py, p.cnn_ratios, "map")
    return out


def _layer_label(layers, layer) -> str:
    return f"layer {layers.index(layer) + 1} ({layer})"


def _findings_one(model: str, d: dict, dataset: str) -> list[str]:
    layers = d["layers"]
    S = d[f"div_{layers[0]}_fast"].shape[1]
    lines = [f"{model} ({dataset}, n = 8 workers on i.i.d. shards, 4 fast at τ = 1 and 4 slow at τ = R, vanilla "
             f"ASGD γ = {d['gamma']}, {S} seeds; second half of training).",
             "R | " + " | ".join(f"1−CKA fast/slow, {L}" for L in layers) + " | "
             + " | ".join(f"grad cosine fast/slow, {L}" for L in layers) + " | test acc"]
    for j, r in enumerate(d["ratios"]):
        m = {k: float(np.mean(v[j])) for k, v in d.items() if isinstance(v, np.ndarray) and v.ndim == 2}
        lines.append(f"{r:>4g} | " + " | ".join(f"{m[f'div_{L}_fast']:.2e} / {m[f'div_{L}_slow']:.2e}" for L in layers)
                     + " | " + " | ".join(f"{m[f'cos_{L}_fast']:.3f} / {m[f'cos_{L}_slow']:.3f}" for L in layers)
                     + f" | {m['accuracy']:.3f}")
    hi = -1
    ratio = {L: d[f"div_{L}_slow"][hi] / d[f"div_{L}_fast"][hi] for L in layers}  # per seed
    order = np.stack([ratio[L] for L in layers])  # [layers, seeds]
    top = np.argmax(order, axis=0)
    if np.all(top == top[0]):
        which = f"largest in {_layer_label(layers, layers[top[0]])} in every seed"
    else:
        which = "largest in different layers in different seeds (" + ", ".join(
            f"{layers[t]}" for t in top) + ")"
    lines.append(f"At R = {d['ratios'][hi]:g}, the slow workers' representation divergence from the server "
                 "(1 − CKA) over the fast workers': " + ", ".join(
                     f"{ratio[L].mean():.1f}x ({ratio[L].min():.1f}–{ratio[L].max():.1f}) in {L}" for L in layers)
                 + f" (mean, seeds' range). In ASGD a worker's model is the server model it was last handed, so this "
                 f"divergence is staleness seen through the representations; the slow/fast ratio is {which}.")
    gap = {L: float(np.mean(d[f"cos_{L}_fast"][hi] - d[f"cos_{L}_slow"][hi])) for L in layers}
    signs = {np.sign(v) for v in gap.values()}
    lines.append("Gradient alignment with the server's current gradient, fast minus slow: "
                 + ", ".join(f"{v:+.3f} ({L})" for L, v in gap.items())
                 + ". A layer-specific role (fast workers as early-layer specialists) would show as gaps of opposite "
                 "sign in early and late layers; "
                 + ("the signs differ between layers." if len(signs) > 1 else
                    "the fast workers align better in every layer alike: no layer-specific specialisation found, only "
                    "uniform staleness." if signs == {1.0} else
                    "the slow workers align better in every layer alike: no layer-specific role found."))
    lines.append(f"Data-dependent durations (R = 1, job time ∝ ink of the drawn images): Spearman ρ between a "
                 f"job's duration and its batch's loss under the final model = {d['dd_rho']:+.3f} "
                 f"(p = {d['dd_p']:.2g}, {len(d['dd_duration'])} jobs). "
                 + ("Long jobs hold harder examples, clearly." if d['dd_rho'] >= 0.3 and d['dd_p'] < 0.01 else
                    "Long jobs hold somewhat harder examples: the link is statistically clear but weak." if d['dd_rho'] > 0 and d['dd_p'] < 0.01 else
                    "Long jobs hold easier examples." if d['dd_rho'] < 0 and d['dd_p'] < 0.01 else
                    "No link found between a job's duration and its examples' difficulty."))
    rl = ", ".join(f"{layer} {v:+.2f}" for layer, v in d["dd_worker_rho"].items())
    lines.append(f"Across the 8 workers (shards i.i.d., so no worker is a persistent straggler), Spearman ρ between "
                 f"a worker's mean job duration and its representation divergence: {rl}; with 8 points only "
                 "|ρ| > 0.74 would be significant at 5 %.")
    return lines


def findings_specialisation(d: dict) -> str:
    lines = ["Specialisation: do fast workers become early-layer specialists, and do stragglers hold harder examples?"]
    for model, md in d["models"].items():
        lines.append("")
        lines += _findings_one(model, md, d["dataset"])
    return "\n".join(lines) + "\n"


def plot_specialisation(d: dict, path: str) -> None:
    plt = pyplot()

    models = list(d["models"])
    fig, axes = plt.subplots(len(models), 3, figsize=(15, 4.2 * len(models)), dpi=110, squeeze=False)
    for ax, model in zip(axes, models):
        md = d["models"][model]
        r = md["ratios"]
        layers = md["layers"]
        colors = dict(zip(layers, plt.cm.viridis(np.linspace(0.0, 0.85, len(layers)))))
        for layer in layers:
            for grp, ls in (("fast", "-"), ("slow", "--")):
                for a, kind in ((ax[0], "div"), (ax[1], "cos")):
                    v = md[f"{kind}_{layer}_{grp}"]
                    a.plot(r, v.mean(axis=1), ls=ls, color=colors[layer], marker="o", ms=3, label=f"{layer}, {grp}")
                    a.fill_between(r, v.min(axis=1), v.max(axis=1), color=colors[layer], alpha=0.15)
        for a in ax[:2]:
            a.set_xscale("log", base=2)
            a.set_xlabel("compute ratio R = τ_slow / τ_fast")
            a.grid(alpha=0.3)
            a.legend(fontsize=6, ncol=2)
        ax[0].set_yscale("log")
        ax[0].set_ylabel("1 − CKA(worker, server)  (band: seeds' range)")
        ax[0].set_title(f"{model}: representation divergence from the server")
        ax[1].set_ylabel("cos(worker's probe gradient, server's)")
        ax[1].set_title(f"{model}: gradient alignment")
        ax[2].scatter(md["dd_duration"], md["dd_difficulty"], s=3, alpha=0.3)
        ax[2].set_xlabel("job duration (∝ ink of the drawn images)")
        ax[2].set_ylabel("batch loss under the final model")
        ax[2].set_title(f"{model}, data-dependent durations: Spearman ρ = {md['dd_rho']:+.2f}")
        ax[2].grid(alpha=0.3)
    save_figure(fig, path)


# --- 2. divergence ----------------------------------------------------------------------------

DIV_RATIOS = (1, 4, 16)


def compute_divergence(p: Preset) -> dict:
    prob, px, py, dsname = setup(p)
    tel = T.Representations(_module(p), px, py)
    gamma = 0.05
    out = {"ratios": np.array(DIV_RATIOS, float), "dataset": dsname, "gamma": gamma, "curves": {}, "summary": {},
           "matched": {}}
    for r in DIV_RATIOS:
        sched = schedules.fixed_computation(two_speed_taus(r), num_events=p.events)
        # the weighting also shrinks the mean step; the matched variant restores it: γ' = γ / mean s(δ)
        s_mean = float(np.mean(algos.staleness_weight("polynomial", sched.staleness, a=0.5)))
        out["matched"][r] = gamma / s_mean
        methods = {"ASGD": algos.asgd(stepsize=gamma),
                   "ASGD + staleness weighting": algos.staleness_weighted_asgd(stepsize=gamma, staleness="polynomial", a=0.5),
                   "ASGD + staleness weighting, mean step matched": algos.staleness_weighted_asgd(
                       stepsize=gamma / s_mean, staleness="polynomial", a=0.5)}
        for name, alg in methods.items():
            _progress(f"divergence: R = {r}, {name}")
            res = sim.sweep(alg, prob, sched, keys=_keys(p), telemetry=tel, log_every=_log_every(p.events, p.logs))
            t = res.metrics["time"]
            for layer in LAYERS:
                div = 1.0 - res.metrics[f"telemetry/cka/{layer}"][0]  # [S, logs, n]
                out["curves"][(r, name, layer)] = (t, div[..., SLOW].mean(axis=2), div[..., FAST].mean(axis=2))
                mask = _second_half(t)
                out["summary"][(r, name, layer)] = (div[:, mask][..., SLOW].mean(axis=(1, 2)),
                                                    div[:, mask][..., FAST].mean(axis=(1, 2)))
            out["summary"][(r, name, "accuracy")] = res.metrics["test_accuracy"][0][:, -1]
    return out


def findings_divergence(d: dict) -> str:
    names = list(dict.fromkeys(k[1] for k in d["summary"]))
    lines = [f"Divergence ({d['dataset']}, 4 fast workers at τ = 1, 4 slow at τ = R, γ = {d['gamma']}; "
             "slow workers' 1 − CKA with the server model, second half, mean over seeds)."]
    for r in d["ratios"]:
        for layer in LAYERS:
            vals = {nm: float(np.mean(d["summary"][(r, nm, layer)][0])) for nm in names}
            lines.append(f"R = {r:g}, {layer}: " + ", ".join(f"{nm} {v:.3e}" for nm, v in vals.items()))
        acc = {nm: float(np.mean(d["summary"][(r, nm, 'accuracy')])) for nm in names}
        lines.append(f"R = {r:g}, final test accuracy: " + ", ".join(f"{nm} {v:.3f}" for nm, v in acc.items()))
    r = d["ratios"][-1]
    lines.append(f"Matched γ' = γ / mean s(δ): " + ", ".join(f"R = {rr:g}: {g:.3f}" for rr, g in d["matched"].items()) + ".")

    def rel(nm, layer="Dense_0"):  # slow workers' divergence over the fast workers', per seed
        slow, fast = d["summary"][(r, nm, layer)]
        return slow / fast

    base = np.mean(d["summary"][(r, "ASGD", "Dense_0")][0])
    for nm in names[1:]:
        w = np.mean(d["summary"][(r, nm, "Dense_0")][0])
        lines.append(f"At R = {r:g}, {nm}: slow workers' first-layer divergence x{w / base:.2f} of vanilla's; "
                     f"slow/fast ratio {rel(nm).mean():.1f} (vanilla {rel('ASGD').mean():.1f}).")
    matched = "ASGD + staleness weighting, mean step matched"
    w = np.mean(d["summary"][(r, matched, "Dense_0")][0])
    slow_v, slow_m = d["summary"][(r, "ASGD", "Dense_0")][0], d["summary"][(r, matched, "Dense_0")][0]
    sep = abs(slow_m.mean() - slow_v.mean()) > 2 * max(slow_m.std(), slow_v.std())
    lines.append("Reading: the weighting multiplies every step by s(δ) < 1, and with 8 workers every gradient is a few "
                 "updates stale, so at the same γ the server simply moves less and every worker's copy diverges less, "
                 "even at R = 1; that is a step-size effect, not a staleness effect. At a matched mean step the "
                 f"slow workers' divergence is x{w / base:.2f} of vanilla's at R = {r:g}, "
                 + ("a difference clear of seed noise." if sep else "within seed noise: no effect of the weighting itself found."))
    return "\n".join(lines) + "\n"


def plot_divergence(d: dict, path: str) -> None:
    plt = pyplot()

    names = list(dict.fromkeys(k[1] for k in d["summary"]))
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.4), dpi=110)
    r = d["ratios"][-1]
    for nm, color in zip(names, ("tab:red", "tab:blue", "tab:green")):
        for layer, ls in zip(LAYERS, ("-", "--")):
            t, slow, _ = d["curves"][(r, nm, layer)]
            ax[0].plot(t, slow.mean(axis=0), color=color, ls=ls, label=f"{nm}, {layer}")
            ax[0].fill_between(t, slow.min(axis=0), slow.max(axis=0), color=color, alpha=0.15)
            ys = np.array([d["summary"][(rr, nm, layer)][0] for rr in d["ratios"]])
            ax[1].plot(d["ratios"], ys.mean(axis=1), color=color, ls=ls, marker="o", ms=3, label=f"{nm}, {layer}")
            ax[1].fill_between(d["ratios"], ys.min(axis=1), ys.max(axis=1), color=color, alpha=0.15)
    ax[0].set_title(f"slow workers' divergence over training, R = {r:g}")
    ax[0].set_xlabel("simulated time")
    ax[1].set_xscale("log", base=2)
    ax[1].set_xlabel("compute ratio R")
    ax[1].set_title("second-half mean against R")
    for a in ax:
        a.set_yscale("log")
        a.set_ylabel("1 − CKA(slow worker, server)")
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    save_figure(fig, path)


# --- 3. frontier ------------------------------------------------------------------------------

LEVELS_H = (0.0, 0.5, 1.0, 1.5, 2.0)
GAMMAS_ASYNC = np.array([0.025, 0.05, 0.1, 0.2])  # one gradient per step
GAMMAS_SYNC = np.array([0.1, 0.2, 0.4, 0.8])  # steps on the average of up to 8 gradients (or of 8 models)


def _grid(name: str) -> np.ndarray:
    if name.startswith("grouped"):  # GSP steps γ/n per push: the same per-push steps as ASGD's grid
        return GAMMAS_ASYNC * N
    return GAMMAS_ASYNC if "ASGD" in name else GAMMAS_SYNC


HIER = {2: 4, 4: 8}  # groups of 4 average every 2 steps, all 8 every 4
GSP_GROUPS, GSP_BOUND, GSP_FORWARD = 2, 2, 4  # two speed groups, SSP bound 2 within each, forward every 4 pushes


def _timing(taus: np.ndarray, seed: int = 0):
    return schedules.RandomTiming(taus, noise="exponential", scale=0.1 * taus, seed=seed)


def _until(build, horizon: float, guess: int) -> schedules.Schedule:
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


def frontier_methods(taus: np.ndarray, horizon: float, seed: int = 0) -> dict:
    """name -> (algorithm, schedule) for the frontier, all running to ``horizon``."""
    timing = _timing(taus, seed)
    rate = np.sum(1.0 / taus)
    per_round = float(np.max(taus) * 1.3)
    groups = algos.groups_by_speed(taus, GSP_GROUPS)
    return {
        "synchronous SGD": (algos.minibatch_sgd(stepsize=0.1),
                            _until(lambda c: schedules.barrier(timing, num_rounds=c), horizon, int(horizon / per_round))),
        "backup workers (b = 2)": (algos.minibatch_sgd(stepsize=0.1),
                                   _until(lambda c: schedules.backup_workers(timing, num_rounds=c, backups=2), horizon,
                                          int(horizon / per_round))),
        "vanilla ASGD": (algos.asgd(stepsize=0.1),
                         _until(lambda c: schedules.asynchronous(timing, num_events=c), horizon, int(horizon * rate))),
        "Rescaled ASGD": (algos.rescaled_asgd(stepsize=0.1, taus=timing.mean_durations),
                          _until(lambda c: schedules.asynchronous(timing, num_events=c), horizon, int(horizon * rate))),
        "hierarchical SGD": (algos.hierarchical_sgd(stepsize=0.1, levels=HIER),
                             _until(lambda c: schedules.hierarchical(timing, num_steps=c, levels=HIER), horizon,
                                    int(horizon / np.max(taus)))),
        "grouped (GSP)": (algos.gsp(stepsize=0.1, groups=groups, forward_every=GSP_FORWARD),
                          _until(lambda c: schedules.stale_synchronous(timing, num_jobs=c, groups=groups, bound=GSP_BOUND),
                                 horizon, int(horizon * rate))),
    }


def _time_to(t: np.ndarray, acc: np.ndarray, target: float) -> float:
    hit = np.flatnonzero(acc >= target)
    return float(t[hit[0]]) if hit.size else math.inf


def compute_frontier(p: Preset) -> dict:
    prob, _, _, dsname = setup(p)
    out = {"levels": np.array(LEVELS_H), "dataset": dsname, "horizon": p.horizon, "results": {}, "gammas": {}}
    for h in LEVELS_H:
        taus = spread_taus(h)
        for name, (alg, sched) in frontier_methods(taus, p.horizon).items():
            _progress(f"frontier: h = {h}, {name} ({sched.num_events} events)")
            out["gammas"][name] = _grid(name)
            res = sim.sweep(alg, prob, sched, keys=_keys(p), hparams={"stepsize": _grid(name)},
                            log_every=_log_every(sched.num_events, p.logs))
            acc = res.metrics["test_accuracy"]  # [G, S, logs]
            out["results"][(h, name)] = (res.metrics["time"], acc)
    # the target: 95 % of the best accuracy any method reached at h = 0
    best0 = max(float(np.max(np.mean(a, axis=1))) for (h, _), (_, a) in out["results"].items() if h == 0.0)
    out["target"] = round(0.95 * best0, 3)
    return out


def _frontier_table(d: dict) -> dict:
    """(h, method) -> (best γ, final accuracy per seed, time to target per seed), γ chosen by the
    mean final accuracy."""
    tab = {}
    for (h, name), (t, acc) in d["results"].items():
        final = acc[:, :, -1]
        g = int(np.argmax(final.mean(axis=1)))
        tt = np.array([_time_to(t, a, d["target"]) for a in acc[g]])
        tab[(h, name)] = (float(d["gammas"][name][g]), final[g], tt)
    return tab


def findings_frontier(d: dict) -> str:
    tab = _frontier_table(d)
    names = list(dict.fromkeys(k[1] for k in d["results"]))
    lines = [f"Frontier ({d['dataset']}, n = 8, τ_i = e^(h z_i) scaled to the same total compute, simulated time "
             f"budget {d['horizon']:g}, {next(iter(tab.values()))[1].shape[0]} seeds; each method at its best γ by "
             f"final accuracy, of {', '.join(f'{g:g}' for g in GAMMAS_ASYNC)} for ASGD and "
             f"{', '.join(f'{g:g}' for g in GAMMAS_SYNC)} for the synchronous schemes, "
             f"{', '.join(f'{g:g}' for g in GAMMAS_ASYNC * N)} for GSP, whose push steps γ/n). Target accuracy "
             f"{d['target']:.3f} (95 % of the best at h = 0).",
             "h | " + " | ".join(names) + "   (final accuracy / time to target; inf: not reached)"]
    for h in d["levels"]:
        cells = []
        for nm in names:
            g, fin, tt = tab[(h, nm)]
            cells.append(f"{fin.mean():.3f} / {np.median(tt):.4g} (γ={g:g})")
        lines.append(f"{h:g} | " + " | ".join(cells))
    for nm in names:
        per = [tab[(h, nm)][1] for h in d["levels"]]
        fins = np.array([v.mean() for v in per])
        sd = max(float(v.std()) for v in per)
        k = int(np.argmax(fins))
        edge_gap = fins[k] - max(fins[0], fins[-1])
        if k == 0:
            shape = "falls as heterogeneity grows: highest at h = 0"
        elif k < len(fins) - 1 and edge_gap > 2 * sd:
            shape = f"peaks at an intermediate level, h = {d['levels'][k]:g}"
        elif k == len(fins) - 1:
            shape = f"rises with heterogeneity: highest at h = {d['levels'][k]:g}"
        elif fins[-1] >= fins[k] - 2 * sd:
            shape = (f"rises with heterogeneity and levels off (highest at h = {d['levels'][k]:g}, within "
                     f"2 seed sd of h = {d['levels'][-1]:g})")
        else:
            shape = (f"is highest at an intermediate level, h = {d['levels'][k]:g}, but not clear of seed noise "
                     f"(within 2 seed sd of h = {d['levels'][0]:g})")
        lines.append(f"{nm}: final accuracy {shape} ({fins[k]:.3f}; h = 0: {fins[0]:.3f}, h = {d['levels'][-1]:g}: "
                     f"{fins[-1]:.3f}; largest seed sd {sd:.3f}).")
    edge = [f"{nm} at h = {h:g} (γ = {g:g})" for (h, nm), (g, _, _) in tab.items()
            if g in (float(d["gammas"][nm][0]), float(d["gammas"][nm][-1]))]
    if edge:
        lines.append("Best step size at an edge of the grid (a wider grid might do better): " + "; ".join(edge) + ".")
    lines.append("An 'optimal level of heterogeneity' would be an interior peak clear of seed noise. Synchronous "
                 "schemes lose accuracy as soon as speeds spread (they wait for the slowest); vanilla ASGD, with "
                 "i.i.d. shards, gains from a spread of speeds at fixed total compute (its fast workers deliver "
                 "fresher gradients and the bias toward them costs nothing when every shard has the same "
                 "distribution); Rescaled ASGD, which gives slow workers proportionally larger steps, needs a "
                 "smaller γ as the spread grows and loses. These statements hold for identical data distributions; "
                 "with non-i.i.d. shards vanilla ASGD's bias toward fast workers is a cost (see r1, r2, r5).")
    return "\n".join(lines) + "\n"


def plot_frontier(d: dict, path: str) -> None:
    plt = pyplot()

    tab = _frontier_table(d)
    names = list(dict.fromkeys(k[1] for k in d["results"]))
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.4), dpi=110)
    palette = ("k", "tab:purple", "tab:red", "tab:blue", "tab:green", "tab:orange", "tab:brown", "tab:olive")
    for nm, color in zip(names, palette[:len(names)] if len(names) <= len(palette) else plt.cm.tab20.colors):
        fin = np.array([tab[(h, nm)][1] for h in d["levels"]])
        tt = np.array([tab[(h, nm)][2] for h in d["levels"]])
        ax[0].plot(d["levels"], fin.mean(axis=1), marker="o", ms=3, color=color, label=nm)
        ax[0].fill_between(d["levels"], fin.min(axis=1), fin.max(axis=1), color=color, alpha=0.15)
        med = np.median(tt, axis=1)
        ax[1].plot(d["levels"], np.where(np.isfinite(med), med, np.nan), marker="o", ms=3, color=color, label=nm)
        lo, hi = np.min(tt, axis=1), np.max(tt, axis=1)
        ax[1].fill_between(d["levels"], np.where(np.isfinite(lo), lo, np.nan), np.where(np.isfinite(hi), hi, np.nan),
                           color=color, alpha=0.15)
    ax[0].set_ylabel(f"test accuracy at time {d['horizon']:g}")
    ax[1].set_ylabel(f"time to accuracy {d['target']:.3f} (median; gap: not reached)")
    for a in ax:
        a.set_xlabel("heterogeneity h  (τ_i = e^(h z_i), same total compute)")
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    save_figure(fig, path)


# --- 4. mitigation trade-off ------------------------------------------------------------------

STRAGGLERS = np.r_[np.ones(6), np.full(2, 8.0)]
LOCAL_H = 4


def mitigation_methods(horizon: float, seed: int = 0) -> dict:
    taus = STRAGGLERS
    timing = _timing(taus, seed)
    rate = np.sum(1.0 / taus)
    rounds = int(horizon / (taus.max() * 1.3))
    warm = timing.durations(10)  # a warm-up window of observed step times, for the predictor
    H_i = algos.dpro_sm_like_local_steps(warm, LOCAL_H)
    local_timing = _timing(taus * LOCAL_H, seed)
    pro_timing = _timing(taus * H_i, seed)
    return {
        "ASGD": ("staleness weighting", False, algos.asgd(stepsize=0.1),
                 _until(lambda c: schedules.asynchronous(timing, num_events=c), horizon, int(horizon * rate))),
        "ASGD + staleness weighting": ("staleness weighting", True,
                                       algos.staleness_weighted_asgd(stepsize=0.1, staleness="polynomial", a=0.5),
                                       _until(lambda c: schedules.asynchronous(timing, num_events=c), horizon,
                                              int(horizon * rate))),
        "synchronous SGD": ("backup workers", False, algos.minibatch_sgd(stepsize=0.1),
                            _until(lambda c: schedules.barrier(timing, num_rounds=c), horizon, rounds)),
        "synchronous + 2 backup workers": ("backup workers", True, algos.minibatch_sgd(stepsize=0.1),
                                           _until(lambda c: schedules.backup_workers(timing, num_rounds=c, backups=2),
                                                  horizon, rounds)),
        f"local SGD (H = {LOCAL_H})": ("proactive scheduling", False,
                                       algos.local_sgd(local_stepsize=0.1, local_steps=LOCAL_H),
                                       _until(lambda c: schedules.barrier(local_timing, num_rounds=c), horizon,
                                              int(rounds / LOCAL_H))),
        "local SGD + DPro-SM-like H_i": (
            "proactive scheduling", True, algos.local_sgd(local_stepsize=0.1, local_steps=H_i),
            _until(lambda c: schedules.barrier(pro_timing, num_rounds=c), horizon, int(rounds / LOCAL_H))),
    }, H_i


def compute_mitigation(p: Preset) -> dict:
    prob, px, py, dsname = setup(p)
    tel = T.Representations(_module(p), px, py)
    methods, H_i = mitigation_methods(p.horizon)
    out = {"dataset": dsname, "horizon": p.horizon, "H_i": H_i, "rows": {}}
    for name, (group, on, alg, sched) in methods.items():
        _progress(f"mitigation: {name} ({sched.num_events} events)")
        res = sim.sweep(alg, prob, sched, keys=_keys(p), telemetry=tel, log_every=_log_every(sched.num_events, p.logs))
        H = np.asarray(alg.hparams.get("local_steps", 1))
        steps = np.where(sched.delivered, H[sched.worker] if H.ndim else H, 0).sum()
        spec = np.mean([res.metrics[f"telemetry/specialisation/{layer}"][0][:, _second_half(res.metrics["time"])].mean(axis=1)
                        for layer in LAYERS], axis=0)  # [S]
        out["rows"][name] = {"group": group, "on": on, "throughput": steps / sched.end_time,
                             "loss": res.metrics["loss"][0][:, -1], "accuracy": res.metrics["test_accuracy"][0][:, -1],
                             "specialisation": spec, "time": res.metrics["time"], "loss_curve": res.metrics["loss"][0]}
    return out


def findings_mitigation(d: dict) -> str:
    lines = [f"Mitigation trade-off ({d['dataset']}, n = 8 with two 8x stragglers, exponential timing noise, "
             f"time budget {d['horizon']:g}, γ = 0.1, {len(next(iter(d['rows'].values()))['loss'])} seeds; "
             "specialisation index = 1 − mean pairwise CKA of the workers' models, second half, mean of the two layers). "
             f"DPro-SM-like: local steps per worker H_i = {list(map(int, d['H_i']))} from an EWMA of each worker's "
             f"first 10 step times (H = {LOCAL_H} for the fastest).",
             "method | applied gradient steps per unit time | final training loss | test accuracy | specialisation"]
    for name, r in d["rows"].items():
        lines.append(f"{name} | {r['throughput']:.2f} | {r['loss'].mean():.4f} ± {r['loss'].std():.4f} | "
                     f"{r['accuracy'].mean():.3f} | {r['specialisation'].mean():.2e}")
    groups = list(dict.fromkeys(r["group"] for r in d["rows"].values()))
    for g in groups:
        off = next((r for r in d["rows"].values() if r["group"] == g and not r["on"]), None)
        on = next((r for r in d["rows"].values() if r["group"] == g and r["on"]), None)
        if off is None or on is None:
            continue
        dl = on["loss"].mean() - off["loss"].mean()
        noise = max(on["loss"].std(), off["loss"].std())
        verdict = ("lowers" if dl < -2 * noise else "raises" if dl > 2 * noise else "does not change (within 2 sd)")
        ds = on["specialisation"].mean() - off["specialisation"].mean()
        lines.append(f"{g}: throughput {off['throughput']:.2f} → {on['throughput']:.2f}; {verdict} the final loss "
                     f"({off['loss'].mean():.4f} → {on['loss'].mean():.4f}); specialisation index "
                     f"{off['specialisation'].mean():.2e} → {on['specialisation'].mean():.2e} ({ds:+.2e}).")
    lines.append("Staleness weighting is compared at the same γ, so it also shrinks the mean step; hetero-divergence "
                 "separates the two (at a matched mean step it finds no effect on the slow workers' divergence).")
    lines.append("Synchronous methods hand every worker the same model each round, so their workers' models agree at "
                 "every log point and their specialisation index is 0 by construction (the ±1e-7 printed is float32 "
                 "rounding of CKA = 1); only asynchronous methods leave room for worker models to differ, and there "
                 "the difference is staleness.")
    return "\n".join(lines) + "\n"


def plot_mitigation(d: dict, path: str) -> None:
    plt = pyplot()

    names = list(d["rows"])
    fig, ax = plt.subplots(1, 4, figsize=(18, 4.6), dpi=100)
    colors = ["tab:red", "tab:orange", "k", "tab:gray", "tab:green", "tab:olive"]
    x = np.arange(len(names))
    for a, key, label in ((ax[1], "throughput", "applied gradient steps per unit time"),
                          (ax[2], "loss", "final training loss (mean, seeds' range)"),
                          (ax[3], "specialisation", "specialisation index (second half)")):
        vals = [np.atleast_1d(d["rows"][n][key]) for n in names]
        a.bar(x, [v.mean() for v in vals], color=colors[: len(names)])
        a.errorbar(x, [v.mean() for v in vals], yerr=[[v.mean() - v.min() for v in vals], [v.max() - v.mean() for v in vals]],
                   fmt="none", ecolor="k", capsize=3)
        a.set_xticks(x)
        a.set_xticklabels([n.replace(" + ", "\n+ ") for n in names], rotation=60, ha="right",
                          fontsize=7)
        a.set_title(label, fontsize=9)
        a.grid(alpha=0.3, axis="y")
    for n, c in zip(names, colors):
        r = d["rows"][n]
        ax[0].plot(r["time"], r["loss_curve"].mean(axis=0), color=c, label=n)
        ax[0].fill_between(r["time"], r["loss_curve"].min(axis=0), r["loss_curve"].max(axis=0), color=c, alpha=0.15)
    ax[0].set_xlabel("simulated time")
    ax[0].set_ylabel("training loss")
    ax[0].set_yscale("log")
    ax[0].legend(fontsize=6)
    ax[0].grid(alpha=0.3)
    save_figure(fig, path)


# --- entry points -----------------------------------------------------------------------------

EXPERIMENTS = {
    "specialisation": (compute_specialisation, findings_specialisation, plot_specialisation),
    "divergence": (compute_divergence, findings_divergence, plot_divergence),
    "frontier": (compute_frontier, findings_frontier, plot_frontier),
    "mitigation": (compute_mitigation, findings_mitigation, plot_mitigation),
}


def _rows(name: str, d: dict) -> list[dict]:
    if name == "specialisation":
        return [{"model": model, "ratio": float(r), "seed": s, "layer": layer, "group": grp,
                 "one_minus_cka": float(md[f"div_{layer}_{grp}"][j, s]), "grad_cos": float(md[f"cos_{layer}_{grp}"][j, s]),
                 "test_accuracy": float(md["accuracy"][j, s])}
                for model, md in d["models"].items() for j, r in enumerate(md["ratios"])
                for s in range(md["accuracy"].shape[1]) for layer in md["layers"] for grp in ("fast", "slow")]
    if name == "divergence":
        return [{"ratio": float(k[0]), "method": k[1], "quantity": k[2], "seed": s,
                 "slow": float(v[0][s]) if isinstance(v, tuple) else float(v[s]),
                 "fast": float(v[1][s]) if isinstance(v, tuple) else ""}
                for k, v in d["summary"].items() for s in range(len(v[0] if isinstance(v, tuple) else v))]
    if name == "frontier":
        tab = _frontier_table(d)
        return [{"h": h, "method": nm, "gamma": g, "seed": s, "final_accuracy": float(fin[s]), "time_to_target": float(tt[s])}
                for (h, nm), (g, fin, tt) in tab.items() for s in range(len(fin))]
    return [{"method": nm, "mitigation": r["group"], "on": r["on"], "seed": s, "throughput": float(r["throughput"]),
             "final_loss": float(r["loss"][s]), "test_accuracy": float(r["accuracy"][s]),
             "specialisation": float(r["specialisation"][s])}
            for nm, r in d["rows"].items() for s in range(len(r["loss"]))]


def make_write(name: str):
    compute, findings, plot = EXPERIMENTS[name]

    def write(out_dir: str, *, quick: bool = False, preset: str | None = None) -> str:
        p = PRESETS[preset or ("quick" if quick else "full")]
        t0 = time.time()
        d = compute(p)
        text = findings(d) + f"(preset {preset or ('quick' if quick else 'full')}, computed in {time.time() - t0:.0f} s)\n"
        return write_outputs(out_dir, f"hetero_{name}", d, plot, _rows(name, d), text)

    write.__name__ = f"write_{name}"
    return write
