"""Heterogeneity lab, experiment ``specialisation``: see :mod:`paper_figures._hetero` for the set-up
the lab shares.

4 fast workers (τ = 1) and 4 slow ones (τ = R), R ∈ {1, 2, 4, 8, 16}, vanilla ASGD, for the MLP
and for a small CNN (two 5×5 convolutions with 8 and 16 channels, a 32-unit head; R ∈ {1, 4, 16}
in the quick preset). Per layer and over the second half of training: how far each worker's model
is from the server's in representation (1 − linear CKA on a fixed probe batch) and how well its
next gradient aligns with the server's current one (cosine), fast against slow. Then
data-dependent durations (R = 1, a job's time ∝ the ink of the images it draws): are the long
jobs the ones that drew hard examples (high loss under the final model)? The seeds vary the
minibatch draws only (one split, one initial model, one timing draw).

    delaylab figure hetero-specialisation --quick     # the quick preset
    delaylab figure hetero-specialisation             # the full preset
"""

from __future__ import annotations


import jax
import numpy as np
from scipy import stats as sps

from delaylab import algos, sim
from delaylab.paper_figures import _hetero as lab
from delaylab.paper_figures._figure import Figure
from delaylab.paper_figures._hetero import FAST, N, PRESETS, SLOW, Preset, seed_keys, log_every_for, mlp_module, progress, second_half
from delaylab.paper_figures._output import pyplot, save_figure
from delaylab.sim import schedules
from delaylab.sim import telemetry as T
from delaylab.sim.models import CNN


# --- 1. specialisation ------------------------------------------------------------------------

RATIOS = (1, 2, 4, 8, 16)


def setup_cnn(p: Preset):
    """(problem, module) of the CNN run of experiment 1: the same images, shards and probes as
    :func:`setup`, a :class:`sim.models.CNN` with ``p.cnn_channels`` and a ``p.cnn_hidden`` head."""
    _, xtr, ytr, xte, yte = lab.images(p)
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
        progress(f"specialisation, {type(module).__name__}: R = {r}")
        sched = schedules.fixed_computation(lab.two_speed_taus(r), num_events=p.events)
        res = sim.sweep(algos.asgd(stepsize=gamma), prob, sched, keys=seed_keys(p), telemetry=tel,
                        log_every=log_every_for(p.events, p.logs), runs=runs)
        s = _layer_summary(res, second_half(res.metrics["time"]), layers)
        s["accuracy"] = res.metrics["test_accuracy"][0][:, -1]
        for k, v in s.items():
            rows.setdefault(k, []).append(v)
    out.update({k: np.stack(v) for k, v in rows.items()})  # [ratios, seeds]

    # data-dependent durations: a job's time ∝ the ink of the images it draws
    progress(f"specialisation, {type(module).__name__}: data-dependent durations")
    key = seed_keys(p)[0]
    X = np.asarray(prob.data["X"])
    ink = X.reshape(N, X.shape[1], -1).sum(axis=2)
    rate = 1.0 / (p.batch * ink.mean())
    timing = schedules.ExampleCostTiming(ink, batch_size=p.batch, key=key, time_per_cost=0.8 * rate, overhead=0.2)
    sched = schedules.asynchronous(timing, num_events=p.events)
    res = sim.run(algos.asgd(stepsize=gamma), prob, sched, key=key, telemetry=tel, log_every=log_every_for(p.events, p.logs))
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
    mask = second_half(res.metrics["time"])
    worker_dur = np.array([dur[sched.worker == i].mean() for i in range(N)])
    worker_div = {layer: (1 - res.metrics[f"telemetry/cka/{layer}"][mask]).mean(axis=0) for layer in layers}
    out.update(dd_duration=dur, dd_difficulty=difficulty, dd_rho=float(rho), dd_p=float(pval),
               dd_worker_duration=worker_dur,
               **{f"dd_worker_div_{layer}": v for layer, v in worker_div.items()},
               dd_worker_rho={layer: float(sps.spearmanr(worker_dur, v)[0]) for layer, v in worker_div.items()})
    return out


def compute_specialisation(p: Preset) -> dict:
    prob, px, py, dsname = lab.setup(p)
    out = {"dataset": dsname, "models": {}}
    out["models"]["MLP"] = _specialisation_runs(p, prob, mlp_module(p), px, py, RATIOS, "vmap")
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
                 f"divergence is staleness seen through the representations, and a layer-uniform answer is the only "
                 f"one this set-up can give (true by construction: hetero-local-models asks the question of methods "
                 f"whose workers train models of their own); the slow/fast ratio is {which}.")
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
                 f"(p = {d['dd_p']:.2g}, {len(d['dd_duration'])} jobs). A job's duration is defined here from the ink "
                 "of its images, so this ρ measures how ink relates to difficulty in the data set, not anything "
                 "training does; hetero-difficulty draws durations independently of the images and reports the "
                 "ink–difficulty correlation apart, as a property of the data.")
    rl = ", ".join(f"{layer} {v:+.2f}" for layer, v in d["dd_worker_rho"].items())
    lines.append(f"Across the 8 workers (shards i.i.d., so no worker is a persistent straggler), Spearman ρ between "
                 f"a worker's mean job duration and its representation divergence: {rl}; with 8 points only "
                 "|ρ| > 0.74 would be significant at 5 %, so this test has almost no power (hetero-difficulty uses "
                 "32 workers and states its power).")
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


def rows(d: dict) -> list[dict]:
    return [{"model": model, "ratio": float(r), "seed": s, "layer": layer, "group": grp,
             "one_minus_cka": float(md[f"div_{layer}_{grp}"][j, s]), "grad_cos": float(md[f"cos_{layer}_{grp}"][j, s]),
             "test_accuracy": float(md["accuracy"][j, s])}
            for model, md in d["models"].items() for j, r in enumerate(md["ratios"])
            for s in range(md["accuracy"].shape[1]) for layer in md["layers"] for grp in ("fast", "slow")]


def compute(p: Preset, parts) -> dict:
    return lab.in_one_part(compute_specialisation, p, parts)


FIGURE = Figure("hetero-specialisation", "do fast workers specialise by layer? CKA / gradient alignment against the compute ratio", PRESETS, compute, plot_specialisation, lab.with_footer(findings_specialisation), rows,
                stem="hetero_specialisation", module=__file__, convolution=True)
