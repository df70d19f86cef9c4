"""Heterogeneity lab, experiment ``divergence``: see :mod:`paper_figures._hetero` for what the lab
measures and how.

    delaylab figure hetero-divergence --quick     # the quick preset
    delaylab figure hetero-divergence             # the full preset
"""

from __future__ import annotations


import numpy as np

import algos
import sim
from paper_figures import _hetero as lab
from paper_figures._figure import Figure
from paper_figures._hetero import FAST, LAYERS, PRESETS, SLOW, Preset, seed_keys, log_every_for, mlp_module, progress, second_half
from paper_figures._output import pyplot, save_figure
from sim import schedules
from sim import telemetry as T


# --- 2. divergence ----------------------------------------------------------------------------

DIV_RATIOS = (1, 4, 16)


def compute_divergence(p: Preset) -> dict:
    prob, px, py, dsname = lab.setup(p)
    tel = T.Representations(mlp_module(p), px, py)
    gamma = 0.05
    out = {"ratios": np.array(DIV_RATIOS, float), "dataset": dsname, "gamma": gamma, "curves": {}, "summary": {},
           "matched": {}}
    for r in DIV_RATIOS:
        sched = schedules.fixed_computation(lab.two_speed_taus(r), num_events=p.events)
        # the weighting also shrinks the mean step; the matched variant restores it: γ' = γ / mean s(δ)
        s_mean = float(np.mean(algos.staleness_weight("polynomial", sched.staleness, a=0.5)))
        out["matched"][r] = gamma / s_mean
        methods = {"ASGD": algos.asgd(stepsize=gamma),
                   "ASGD + staleness weighting": algos.staleness_weighted_asgd(stepsize=gamma, staleness="polynomial", a=0.5),
                   "ASGD + staleness weighting, mean step matched": algos.staleness_weighted_asgd(
                       stepsize=gamma / s_mean, staleness="polynomial", a=0.5)}
        for name, alg in methods.items():
            progress(f"divergence: R = {r}, {name}")
            res = sim.sweep(alg, prob, sched, keys=seed_keys(p), telemetry=tel, log_every=log_every_for(p.events, p.logs))
            t = res.metrics["time"]
            for layer in LAYERS:
                div = 1.0 - res.metrics[f"telemetry/cka/{layer}"][0]  # [S, logs, n]
                out["curves"][(r, name, layer)] = (t, div[..., SLOW].mean(axis=2), div[..., FAST].mean(axis=2))
                mask = second_half(t)
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
    lines.append("Matched γ' = γ / mean s(δ): " + ", ".join(f"R = {rr:g}: {g:.3f}" for rr, g in d["matched"].items()) + ".")

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


def rows(d: dict) -> list[dict]:
    return [{"ratio": float(k[0]), "method": k[1], "quantity": k[2], "seed": s,
             "slow": float(v[0][s]) if isinstance(v, tuple) else float(v[s]),
             "fast": float(v[1][s]) if isinstance(v, tuple) else ""}
            for k, v in d["summary"].items() for s in range(len(v[0] if isinstance(v, tuple) else v))]


def compute(p: Preset, parts) -> dict:
    return lab.in_one_part(compute_divergence, p, parts)


FIGURE = Figure("hetero-divergence", "stragglers' representation divergence, with and without staleness weighting", PRESETS, compute, plot_divergence, lab.with_footer(findings_divergence), rows,
                stem="hetero_divergence", module=__file__, convolution=False)
