"""R3 (docs/theory.md §12): stationary noise floors against the step size and the noise level.

Heterogeneous quadratic, n = 4, d = 5, τ = (1, 2, 3, 5). For each σ and γ, vanilla and Rescaled
ASGD run to stationarity; the σ-induced gap E F_q(x) − F_q(x_q) (the gap with noise minus the
same run's gap at σ = 0, which is the finite-step orbit's own O(γ²) part) is compared with
V σ²/(4Γ) (theory.noise_floor): γσ²/4 for vanilla, γσ²τ_A/(4τ_H) for Rescaled.
All step sizes of one σ run as one compiled sweep.
"""

from __future__ import annotations

import importlib
import dataclasses

import jax
import numpy as np

from delaylab import theory, claims
from delaylab.registry import ALGORITHMS
from delaylab.paper_figures import catalogue
from delaylab.paper_figures._figure import Figure, Parts
from delaylab.paper_figures._output import save_figure
from delaylab.sim import problems, schedules

TAUS = np.array([1.0, 2.0, 3.0, 5.0])


def _gaps(entry, problem, schedule, steps, q_of, A, b, seeds):
    alg = entry.make(float(steps[0]), schedule)
    keys = jax.random.split(jax.random.key(0), seeds)
    res = importlib.import_module("delaylab.sim").sweep(alg, problem, schedule, keys=keys, hparams={"stepsize": steps}, log_every=7,
                                  record_params=True)
    tail = res.metrics["time"] > 0.2 * res.metrics["time"][-1]
    out = np.empty((len(steps), seeds))
    for h, g in enumerate(steps):
        q = q_of(g)
        for s in range(seeds):
            out[h, s] = theory.quadratic_gaps(A, b, q, res.metrics["params"][h, s][tail]).mean()
    return out


def _compute(p: "Preset") -> dict:
    steps, sigmas, seeds, events = np.asarray(p.steps), p.sigmas, p.seeds, p.events
    schedule = schedules.fixed_computation(TAUS, num_events=events)
    exact = problems.random_quadratic(4, 5, condition=3.0, spread=1.0, noise=0.0, seed=3)
    A, b = exact.curvature
    rows = []
    for name in ("asgd", "rescaled_asgd"):
        entry = ALGORITHMS[name]

        def q_of(g, entry=entry):
            return theory.implicit_weights(entry.closed_form_steps(g, TAUS), TAUS)

        base = _gaps(entry, exact, schedule, steps, q_of, A, b, 1)[:, 0]
        for sigma in sigmas:
            noisy = problems.random_quadratic(4, 5, condition=3.0, spread=1.0, noise=sigma, seed=3)
            gaps = _gaps(entry, noisy, schedule, steps, q_of, A, b, seeds)
            for h, g in enumerate(steps):
                pred = theory.noise_floor(A, b, TAUS, entry.closed_form_steps(g, TAUS), sigma**2).gap_weighted
                rows.append({"rule": name, "sigma": sigma, "stepsize": float(g), "predicted": pred,
                             "measured": float(np.mean(gaps[h]) - base[h]), "orbit_part": float(base[h]),
                             "measured_seeds": (gaps[h] - base[h]).tolist()})
    return {"rows": rows, "events": events, "seeds": seeds}


def findings(data: dict) -> str:
    lines = [f"R3, noise floors (n = 4, τ = (1, 2, 3, 5), {data['events']} events, {data['seeds']} seeds).",
             "rule            σ     γ        predicted   measured    rel. error"]
    for r in data["rows"]:
        lines.append(f"{r['rule']:15s} {r['sigma']:<5g} {r['stepsize']:<8g} {r['predicted']:<11.4g} {r['measured']:<11.4g} "
                     f"{r['measured'] / r['predicted'] - 1:+.1%}")
    small = [abs(r["measured"] / r["predicted"] - 1) for r in data["rows"] if r["stepsize"] <= 0.004]
    large = [abs(r["measured"] / r["predicted"] - 1) for r in data["rows"] if r["stepsize"] > 0.004]
    lines.append(f"For γ ≤ 0.004 the small-step formula holds within {max(small):.1%}"
                 + (f"; for larger γ the error grows to {max(large):.1%} (staleness is no longer negligible)." if large else "."))
    ratios = [r2["measured"] / r1["measured"] for r1 in data["rows"] for r2 in data["rows"]
              if r1["rule"] == "asgd" and r2["rule"] == "rescaled_asgd" and r1["sigma"] == r2["sigma"]
              and r1["stepsize"] == r2["stepsize"] and r1["stepsize"] <= 0.004]
    lines.append("Rescaled's floor over vanilla's at equal mean step, γ ≤ 0.004: measured %.3f–%.3f, predicted "
                 "τ_A/τ_H = %.3f." % (min(ratios), max(ratios), theory.arithmetic_mean(TAUS) / theory.harmonic_mean(TAUS)))
    if "measured_seeds" in data["rows"][0]:
        lines.append("As equivalence claims over seeds (95% t intervals of the log ratio to the prediction, all inside "
                     f"±{MARGIN:.0%} to hold):")
        lines += [f"  {v['claim']}: {v['verdict']} ({v['evidence']})" for v in verdicts(data)]
    return "\n".join(lines) + "\n"


SMALL = 0.004  # "small step": the formula's regime, where staleness is negligible
MARGIN = 0.05  # the relative tolerance of the equivalence claims


def _claims(data: dict) -> list:
    """The two formula checks as equivalence claims over seeds (the seeds resample the gradient
    noise; the instance and the fixed computation times are the set-up): per (σ, γ ≤ SMALL), the
    measured/predicted ratio (per rule) and Rescaled's floor over vanilla's (paired: the two rules
    run on the same noise keys) within ±MARGIN of the prediction, judged on log ratios. Each
    entry: (catalogue id, the instance's words, parts (name, per-seed log ratio))."""
    small = [r for r in data["rows"] if r["stepsize"] <= SMALL]
    formula = [(f"{r['rule']} σ = {r['sigma']:g} γ = {r['stepsize']:g}",
                np.log(np.asarray(r["measured_seeds"]) / r["predicted"])) for r in small]
    pred = theory.arithmetic_mean(TAUS) / theory.harmonic_mean(TAUS)
    pairs = [(f"σ = {v['sigma']:g} γ = {v['stepsize']:g}",
              np.log(np.asarray(r["measured_seeds"]) / np.asarray(v["measured_seeds"]) / pred))
             for v in small if v["rule"] == "asgd" for r in small
             if r["rule"] == "rescaled_asgd" and r["sigma"] == v["sigma"] and r["stepsize"] == v["stepsize"]]
    return [("noise-floor-formula", "The small-step noise floor V σ²/(4Γ), vanilla and Rescaled, γ ≤ %g" % SMALL, formula),
            ("rescaled-floor-ratio",
             "Rescaled's floor is τ_A/τ_H = %.3f times vanilla's at equal mean step, γ ≤ %g" % (pred, SMALL), pairs)]


def verdicts(data: dict) -> list:
    out = []
    for cid, claim, parts in _claims(data):
        v = catalogue.verdict(cid, parts, margin=float(np.log1p(MARGIN)))
        got = v.parts
        worst = max(got, key=lambda p: max(abs(p.interval.lo), abs(p.interval.hi)))
        out.append(v.row(claim + f", within ±{MARGIN:.0%}",
                         f"{sum(p.verdict == claims.HOLDS for p in got)} of {len(got)} comparisons hold; widest: "
                         f"{worst.name}, ratio to predicted {np.exp(worst.interval.mean):.3f} "
                         f"[{np.exp(worst.interval.lo):.3f}, {np.exp(worst.interval.hi):.3f}]",
                         f"{data['events']} events, {data['seeds']} seeds (gradient noise; instance and fixed "
                         "computation times τ = (1, 2, 3, 5) held)"))
    return out


def plot(data: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2), dpi=120)
    sigmas = sorted({r["sigma"] for r in data["rows"]})
    for rule, color in (("asgd", "tab:red"), ("rescaled_asgd", "tab:blue")):
        for k, sigma in enumerate(sigmas):
            rs = [r for r in data["rows"] if r["rule"] == rule and r["sigma"] == sigma]
            g = [r["stepsize"] for r in rs]
            ax.plot(g, [r["predicted"] for r in rs], "-", color=color, alpha=0.4 + 0.2 * k, lw=1)
            ax.plot(g, [r["measured"] for r in rs], "o", color=color, alpha=0.4 + 0.2 * k, ms=4,
                    label=f"{rule}, σ = {sigma:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("γ (mean step per update)")
    ax.set_ylabel("σ-induced E F_q − F_q(x_q)")
    ax.set_title("Noise floors: dots measured, lines V σ²/(4Γ)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    save_figure(fig, path)


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    steps: tuple  # the step sizes γ
    sigmas: tuple  # the gradient-noise levels σ
    seeds: int
    events: int  # arrivals per run


PRESETS = {"quick": Preset("quick", (0.001, 0.002, 0.004, 0.008), (1.0,), seeds=2, events=150_000),
           "full": Preset("full", (0.0005, 0.001, 0.002, 0.004, 0.008, 0.016), (0.5, 1.0, 2.0), seeds=4, events=400_000)}


def compute(preset: Preset, parts: Parts) -> dict:
    return parts.get("all", dataclasses.asdict(preset), lambda: _compute(preset))[0]


def rows(data: dict) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "measured_seeds"} for r in data["rows"]]


FIGURE = Figure("r3", "noise floors against γ and σ, vanilla and Rescaled, with V σ²/(4Γ)", PRESETS, compute, plot, findings, rows,
                stem="r3_noise_floor", module=__file__, verdicts=verdicts)
