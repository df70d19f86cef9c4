"""Heterogeneity lab, experiment ``mitigation``: see :mod:`paper_figures._hetero` for what the lab
measures and how.

    delaylab figure hetero-mitigation --quick     # the quick preset
    delaylab figure hetero-mitigation             # the full preset
"""

from __future__ import annotations


import numpy as np

import algos
import sim
from paper_figures import _hetero as lab
from paper_figures._figure import Figure
from paper_figures._hetero import LAYERS, PRESETS, Preset, seed_keys, log_every_for, mlp_module, progress, second_half
from paper_figures._output import pyplot, save_figure
from sim import schedules
from sim import telemetry as T


# --- 4. mitigation trade-off ------------------------------------------------------------------

STRAGGLERS = np.r_[np.ones(6), np.full(2, 8.0)]
LOCAL_H = 4


def mitigation_methods(horizon: float, seed: int = 0) -> dict:
    taus = STRAGGLERS
    timing = lab.timing_noise(taus, seed)
    rate = np.sum(1.0 / taus)
    rounds = int(horizon / (taus.max() * 1.3))
    warm = timing.durations(10)  # a warm-up window of observed step times, for the predictor
    H_i = algos.dpro_sm_like_local_steps(warm, LOCAL_H)
    local_timing = lab.timing_noise(taus * LOCAL_H, seed)
    pro_timing = lab.timing_noise(taus * H_i, seed)
    return {
        "ASGD": ("staleness weighting", False, algos.asgd(stepsize=0.1),
                 lab.until(lambda c: schedules.asynchronous(timing, num_events=c), horizon, int(horizon * rate))),
        "ASGD + staleness weighting": ("staleness weighting", True,
                                       algos.staleness_weighted_asgd(stepsize=0.1, staleness="polynomial", a=0.5),
                                       lab.until(lambda c: schedules.asynchronous(timing, num_events=c), horizon,
                                              int(horizon * rate))),
        "synchronous SGD": ("backup workers", False, algos.minibatch_sgd(stepsize=0.1),
                            lab.until(lambda c: schedules.barrier(timing, num_rounds=c), horizon, rounds)),
        "synchronous + 2 backup workers": ("backup workers", True, algos.minibatch_sgd(stepsize=0.1),
                                           lab.until(lambda c: schedules.backup_workers(timing, num_rounds=c, backups=2),
                                                  horizon, rounds)),
        f"local SGD (H = {LOCAL_H})": ("proactive scheduling", False,
                                       algos.local_sgd(local_stepsize=0.1, local_steps=LOCAL_H),
                                       lab.until(lambda c: schedules.barrier(local_timing, num_rounds=c), horizon,
                                              int(rounds / LOCAL_H))),
        "local SGD + DPro-SM-like H_i": (
            "proactive scheduling", True, algos.local_sgd(local_stepsize=0.1, local_steps=H_i),
            lab.until(lambda c: schedules.barrier(pro_timing, num_rounds=c), horizon, int(rounds / LOCAL_H))),
    }, H_i


def compute_mitigation(p: Preset) -> dict:
    prob, px, py, dsname = lab.setup(p)
    tel = T.Representations(mlp_module(p), px, py)
    methods, H_i = mitigation_methods(p.horizon)
    out = {"dataset": dsname, "horizon": p.horizon, "H_i": H_i, "rows": {}}
    for name, (group, on, alg, sched) in methods.items():
        progress(f"mitigation: {name} ({sched.num_events} events)")
        res = sim.sweep(alg, prob, sched, keys=seed_keys(p), telemetry=tel, log_every=log_every_for(sched.num_events, p.logs))
        H = np.asarray(alg.hparams.get("local_steps", 1))
        steps = np.where(sched.delivered, H[sched.worker] if H.ndim else H, 0).sum()
        spec = np.mean([res.metrics[f"telemetry/specialisation/{layer}"][0][:, second_half(res.metrics["time"])].mean(axis=1)
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


def rows(d: dict) -> list[dict]:
    return [{"method": nm, "mitigation": r["group"], "on": r["on"], "seed": s, "throughput": float(r["throughput"]),
             "final_loss": float(r["loss"][s]), "test_accuracy": float(r["accuracy"][s]),
             "specialisation": float(r["specialisation"][s])}
            for nm, r in d["rows"].items() for s in range(len(r["loss"]))]


def compute(p: Preset, parts) -> dict:
    return lab.in_one_part(compute_mitigation, p, parts)


FIGURE = Figure("hetero-mitigation", "one mitigation at a time: throughput, final loss, specialisation index", PRESETS, compute, plot_mitigation, lab.with_footer(findings_mitigation), rows,
                stem="hetero_mitigation", module=__file__, convolution=False)
