"""Heterogeneity lab, experiment ``mitigation``: see :mod:`paper_figures._hetero` for what the lab
measures and how.

Two 8× stragglers among 8 workers; each mitigation against its own baseline: staleness weighting
on ASGD, backup workers on synchronous SGD, proactive scheduling (DPro-SM-like: per-worker local
steps from the step times predicted from that seed's first jobs) on local SGD; measured:
throughput, training loss at the budget and the specialisation index. Every scheme runs at its own
step, bracketed by :func:`claims.bracket` on tuning seeds disjoint from the reported ones by the
training loss at the budget; a seed draws its own split (:data:`SPLITS`), initial model, job-time
noise and minibatches (:data:`paper_figures._hetero.SOURCES`). The claim per mitigation, "it
lowers the training loss at the budget", is judged on the paired differences over the reported
seeds (95% Student-t interval), inconclusive when either step sits at a grid's edge.

    delaylab figure hetero-mitigation --quick     # the quick preset
    delaylab figure hetero-mitigation             # the full preset
"""

from __future__ import annotations

import numpy as np

from delaylab import algos, claims
from delaylab.paper_figures import _hetero as lab
from delaylab.paper_figures import catalogue
from delaylab.paper_figures._figure import Figure
from delaylab.paper_figures._hetero import LAYERS, PRESETS, Preset, mlp_module, second_half
from delaylab.paper_figures._output import pyplot, save_figure
from delaylab.sim import schedules
from delaylab.sim import telemetry as T


# --- 4. mitigation trade-off ------------------------------------------------------------------

STRAGGLERS = np.r_[np.ones(6), np.full(2, 8.0)]
LOCAL_H = 4
WARM_UP = 10  # observed job times per worker that the DPro-SM-like predictor reads


def local_steps(seed: int) -> np.ndarray:
    """DPro-SM-like H_i from an EWMA of each worker's job times in a warm-up of its own: drawn
    with the job-time model of job-time seed ``seed`` but from a stream of its own, so that the
    predictor sees the workers' speeds, not the very draws that time the run's first jobs."""
    warm = claims.seed_sources(seed, ("warm-up",))["warm-up"]
    return algos.dpro_sm_like_local_steps(lab.timing_noise(STRAGGLERS, warm).durations(WARM_UP), LOCAL_H)


def mitigation_schemes(horizon: float) -> dict:
    """name -> (mitigation, switched on, scheme); a scheme's ``build(timing_seed, count)`` makes
    that seed's schedule (the DPro-SM-like one with that seed's H_i)."""
    taus = STRAGGLERS
    rate = np.sum(1.0 / taus)
    rounds = int(horizon / (taus.max() * 1.3))
    tm = lambda seed, scale=1.0: lab.timing_noise(taus * scale, seed)  # noqa: E731
    asynchronous = lambda seed, c: schedules.asynchronous(tm(seed), num_events=c)  # noqa: E731
    grid_async, grid_sync = (0.05, 0.1, 0.2), (0.2, 0.4, 0.8)
    return {
        "ASGD": ("staleness weighting", False,
                 lab.Scheme(lambda g: algos.asgd(stepsize=g), asynchronous, int(horizon * rate), grid_async)),
        "ASGD + staleness weighting": (
            "staleness weighting", True,
            # (1 + δ)^(−½) shrinks the steps of stale gradients: its grid starts twice as high
            lab.Scheme(lambda g: algos.staleness_weighted_asgd(stepsize=g, staleness="polynomial", a=0.5),
                       asynchronous, int(horizon * rate), tuple(2 * g for g in grid_async))),
        "synchronous SGD": ("backup workers", False,
                            lab.Scheme(lambda g: algos.minibatch_sgd(stepsize=g),
                                       lambda seed, c: schedules.barrier(tm(seed), num_rounds=c), rounds, grid_sync)),
        "synchronous + 2 backup workers": (
            "backup workers", True,
            lab.Scheme(lambda g: algos.minibatch_sgd(stepsize=g),
                       lambda seed, c: schedules.backup_workers(tm(seed), num_rounds=c, backups=2), rounds, grid_sync)),
        f"local SGD (H = {LOCAL_H})": (
            "proactive scheduling", False,
            lab.Scheme(lambda g: algos.local_sgd(local_stepsize=g, local_steps=LOCAL_H),
                       lambda seed, c: schedules.barrier(tm(seed, LOCAL_H), num_rounds=c), rounds // LOCAL_H,
                       grid_async, hparam="local_stepsize")),
        "local SGD + DPro-SM-like H_i": (
            "proactive scheduling", True,
            # the algorithm's H_i are overridden per seed by make_run (they are a hyperparameter)
            lab.Scheme(lambda g: algos.local_sgd(local_stepsize=g, local_steps=local_steps(0)),
                       lambda seed, c: schedules.barrier(tm(seed, local_steps(seed)), num_rounds=c),
                       rounds // LOCAL_H, grid_async, hparam="local_stepsize")),
    }


SPLITS = ("iid", "dirichlet 1")


def held_models(tel, name: str, seed: int = 0):
    """The telemetry that reads the models the workers hold: local SGD's workers hold their model
    after their local steps (:class:`sim.telemetry.AfterLocalSteps`, which reruns the algorithm's
    own job with the run's step size and H_i, on minibatches keyed by ``seed``); ASGD's and
    synchronous SGD's hold the model they were handed (``tel`` itself)."""
    if "local SGD" not in name:
        return tel
    return T.AfterLocalSteps(tel, seed=int(seed))


def _pairs(names: dict) -> dict:
    """mitigation -> (baseline's name, mitigated scheme's name)."""
    out: dict = {}
    for name, (group, on, _) in names.items():
        off_on = out.setdefault(group, [None, None])
        off_on[int(on)] = name
    return {g: tuple(v) for g, v in out.items()}


ALONG = ("proactive scheduling",)  # pairs compared along the step range (the specialisation index)


def compute(p: Preset, parts) -> dict:
    """Every split and scheme: its step bracketed on the tuning seeds (training loss at the budget);
    then per mitigation, the baseline and the mitigated scheme on the reported seeds at every step
    setting the verdict needs (:func:`delaylab.claims.step_settings`: the tuned steps, the common
    step, the tuned steps' grid neighbours; for proactive scheduling also every step both brackets
    evaluated within the neighbours' span, to compare the specialisation index along the step
    range), on ``p.more_seeds`` reported seeds where a verdict at any setting is marginal on
    ``p.seeds`` (:func:`delaylab.claims.needs_seeds`). A run reads the models the workers hold
    (local SGD: after their local steps)."""
    tune, report = claims.disjoint_seeds(p.tune_seeds, p.seeds)
    _, px, py, dsname = lab.setup(p)
    tel = T.Representations(mlp_module(p), px, py)
    _, report_more = claims.disjoint_seeds(p.tune_seeds, p.more_seeds)
    out = {"preset": p.name, "dataset": dsname, "horizon": p.horizon, "tune_seeds": tune, "report_seeds": report,
           "tie": p.tie, "refine": p.refine, "more_seeds": p.more_seeds,
           "H_i": {int(s): local_steps(claims.seed_sources(s, lab.SOURCES)["timing"]) for s in report_more},
           "rows": {}, "pairs": {}, "window": "time"}
    schemes = mitigation_schemes(p.horizon)
    for split in SPLITS:
        cells, brackets = {}, {}
        for name, (group, on, sc) in schemes.items():
            count = lab.with_margin(lab.count_until(lambda c, sc=sc: sc.build(0, c), p.horizon, sc.guess))

            def make_run(g, seed, validation, sc=sc, count=count, name=name, split=split):
                prob, timing_seed, key = lab.seeded_problem(p, seed, validation=validation, split=split)
                sched = sc.build(timing_seed, count)
                scheme = sc
                if "DPro" in name:  # this seed's own H_i
                    H = local_steps(timing_seed)
                    scheme = lab.Scheme(lambda g: algos.local_sgd(local_stepsize=g, local_steps=H), sc.build, sc.guess,
                                        sc.grid, sc.hparam)
                H = np.asarray(scheme.make(g).hparams.get("local_steps", 1))
                by_budget = lab.applied_by(sched, p.horizon)
                steps = float(np.where(by_budget, H[sched.worker] if H.ndim else H, 0).sum())

                def extract(res):
                    t = np.asarray(res.metrics["time"])
                    window = (t > 0.5 * p.horizon) & (t <= p.horizon)  # the budget's second half, for every scheme
                    spec = np.mean([np.asarray(res.metrics[f"telemetry/specialisation/{layer}"])[0, 0][window].mean()
                                    for layer in LAYERS])
                    return {"specialisation": float(spec)}

                # tuning runs read the handed models (one program per scheme for all its steps); the reported
                # runs read the models the workers hold (local SGD: after their local steps, on minibatches
                # drawn from the seed's own minibatch source)
                telemetry = tel if validation else held_models(
                    tel, name, claims.seed_sources(seed, lab.SOURCES)["minibatches"])
                run = lab.one_run(scheme, g, prob, sched, key, p, telemetry=telemetry, extract=extract)
                return {**run, "throughput": steps / p.horizon}

            cells[name] = lab.Cell(parts, p, f"{split}: {name}", {"method": name, "count": count, "split": split},
                                   make_run)
            brackets[name] = cells[name].tune(sc, score=lambda r: lab.tail(r, "loss", p.horizon))
            lab.progress(f"mitigation, {split}: {name}: {brackets[name].note()}")

        def value(r):
            return {"loss": lab.tail(r, "loss", p.horizon), "accuracy": lab.tail(r, "accuracy", p.horizon),
                    "specialisation": r["specialisation"], "throughput": r["throughput"],
                    "read_at": lab.read_time(r, p.horizon)}

        out["rows"][split], out["pairs"][split] = {}, {}
        for group, (off, on) in _pairs(schemes).items():
            members = {n: brackets[n] for n in (off, on) if n is not None}
            paired = len(members) == 2  # a scheme without its counterpart (a reduced set) is only reported
            settings = (claims.step_settings(members, along=group in ALONG) if paired
                        else {"tuned": {n: b.best for n, b in members.items()}})
            seeds = p.seeds
            values = lab.at_settings(cells, settings, value, seeds)
            if paired and p.more_seeds > seeds and claims.needs_seeds(_pair_verdict(values, off, on).readings,
                                                                      seeds=p.more_seeds):
                seeds = p.more_seeds
                values = lab.at_settings(cells, settings, value, seeds)
            if paired:
                out["pairs"][split][group] = {"off": off, "on": on, "settings": settings, "values": values,
                                              "seeds": seeds}
            _, report_n = claims.disjoint_seeds(p.tune_seeds, seeds)
            for name in members:
                runs = cells[name].report(brackets[name].best, seeds)
                out["rows"][split][name] = {
                    "group": group, "on": name == on, "bracket": lab.stored_bracket(brackets[name]),
                    **values["tuned"][name], "seeds": report_n,
                    "time": np.median(np.stack([r["time"] for r in runs]), axis=0),
                    "loss_curve": np.stack([r["loss"] for r in runs])}
        out["rows"][split] = {n: out["rows"][split][n] for n in schemes if n in out["rows"][split]}  # their order
        out["rows"][split] = {n: {**r, "seconds": float(sum(cells[n].seconds.values()))}
                              for n, r in out["rows"][split].items()}
    out["seconds"] = sum(r["seconds"] for rows in out["rows"].values() for r in rows.values())
    return out


def _loss_parts(at: dict, off: str, on: str) -> list:
    return [(f"loss: {on} − {off}", at[on]["loss"] - at[off]["loss"])]


def _pair_verdict(values: dict, off: str, on: str, gate=()):
    """The verdict on "the mitigation lowers the loss" (catalogue ``mitigation-lowers-loss``) from
    the pair's values at every step setting (label -> cell -> values)."""
    tuned, steps = claims.split_settings(values)
    as_parts = {kind: {label: _loss_parts(at, off, on) for label, at in by.items()} for kind, by in steps.items()}
    return catalogue.verdict("mitigation-lowers-loss", _loss_parts(tuned, off, on), steps=as_parts, gate=gate)


def claims_of(d: dict, split: str) -> list:
    """Per mitigation: "it lowers the training loss at the budget", judged at the tuned steps, at
    the common step and at the tuned steps' grid neighbours."""
    out = []
    rows_ = d["rows"][split]
    for g, pair in d["pairs"][split].items():
        off, on = pair["off"], pair["on"]
        v = _pair_verdict(pair["values"], off, on, gate=[claims.Bracket.from_stored(rows_[n]["bracket"]) for n in (off, on)])
        tuned = pair["values"]["tuned"]
        acc = claims.paired_interval(tuned[on]["accuracy"] - tuned[off]["accuracy"])
        tp = (float(np.median(tuned[off]["throughput"])), float(np.median(tuned[on]["throughput"])))
        why = ""
        if tp[1] > 1.5 * tp[0]:  # could it have come out otherwise? the set-up moves the throughput: say so
            why = (f"the schedule raises the throughput {tp[0]:.2f} → {tp[1]:.2f} (the baseline waits for the "
                   "stragglers every round), so a lower loss could hardly have come out otherwise")
        out.append({"mitigation": g, "off": off, "on": on, "verdict": v, "accuracy": acc, "why": why,
                    "throughput": tp, "split": split, "seeds": pair["seeds"], "settings": pair["settings"]})
    return out


def specialisation_along(d: dict, split: str) -> dict:
    """label -> 95% interval of the specialisation index, mitigated − baseline, for the pairs
    compared along the step range (both arms at one step: the common step and the steps along
    the neighbours' span that every bracket evaluated)."""
    out = {}
    for g in ALONG:
        pair = d["pairs"][split].get(g)
        if pair is None:
            continue
        off, on = pair["off"], pair["on"]
        steps = {}
        for label, at in pair["values"].items():
            if label.startswith(("common ", "along ")):
                steps.setdefault(float(pair["settings"][label][off]), at)
        out[g] = {step: claims.paired_interval(at[on]["specialisation"] - at[off]["specialisation"])
                  for step, at in sorted(steps.items())}
    return out


def _iv(iv, f: str = "+.4f") -> str:
    return f"{iv.mean:{f}} [{iv.lo:{f}}, {iv.hi:{f}}]"


def _signs(ivs) -> str:
    """How many intervals lie above 0, below 0, and across it."""
    ivs = list(ivs)
    up, down = sum(iv.lo > 0 for iv in ivs), sum(iv.hi < 0 for iv in ivs)
    return f"above 0 at {up}, below 0 at {down}, across 0 at {len(ivs) - up - down} of {len(ivs)}"


def findings_mitigation(d: dict) -> str:
    H = np.array(list(d["H_i"].values()))
    same = bool(np.all(H == H[0]))
    lines = [f"Mitigation trade-off ({d['dataset']}, n = 8 with two 8x stragglers, exponential timing noise, time "
             f"budget {d['horizon']:g}; i.i.d. shards and Dirichlet α = 1 shards). Each scheme at its own step, "
             f"bracketed per split on tuning seeds "
             f"{d['tune_seeds']} by the training loss at the budget (scores within {d['tie']:.0%} of the best count "
             f"as tied, and a tie at an edge extends the grid; refined {d['refine']} time(s)); reported seeds {d['report_seeds']} "
             f"({d['more_seeds']} where a verdict at the tuned steps is decided within two half-widths), each "
             f"drawing its own {', '.join(lab.SOURCES)} of the fixed training images. Every verdict is judged at the "
             "tuned steps, at the common step (of the steps both brackets evaluated, the one whose tuning scores "
             "are jointly nearest each arm's best), and at the tuned steps' grid neighbours; it is holds or does "
             "not hold only where all agree. Specialisation index = 1 − mean "
             "pairwise CKA of the models the workers hold, second half, mean of the two layers: for local SGD the "
             "model after its local steps (sim.telemetry.AfterLocalSteps: the job recomputed from the round's start "
             "with minibatches of its own), for ASGD the (stale) model it was handed, for synchronous SGD the "
             "round's model. DPro-SM-like: local steps per worker H_i from an EWMA of the "
             f"seed's first {WARM_UP} job times per worker (H = {LOCAL_H} for the fastest): "
             + (f"H_i = {list(map(int, H[0]))} on every reported seed." if same else
                "; ".join(f"seed {s}: {list(map(int, h))}" for s, h in d["H_i"].items()) + ".")]
    slow = np.flatnonzero(STRAGGLERS > STRAGGLERS.min())
    fast = np.flatnonzero(STRAGGLERS == STRAGGLERS.min())
    seeds = list(d["H_i"])
    odd = {s: [int(i) for i in fast if d["H_i"][s][i] != LOCAL_H] for s in seeds}
    lines.append(f"So the stragglers (workers {', '.join(map(str, slow))}, τ = {STRAGGLERS[slow[0]]:g}) take H_i = "
                 f"{sorted({int(d['H_i'][s][i]) for s in seeds for i in slow})} local steps instead of {LOCAL_H}; the "
                 f"fast workers take H = {LOCAL_H} in both arms on {sum(not v for v in odd.values())} of {len(seeds)} "
                 "seeds" + ("".join(f"; on seed {s} workers {', '.join(map(str, v))} take "
                                    f"{sorted({int(d['H_i'][s][i]) for i in v})}" for s, v in odd.items() if v)) + ".")
    for split, rows_ in d["rows"].items():
        lines += ["", f"{split} shards:", "method | γ (bracket; runner-up) | applied gradient steps per unit time | "
                  "training loss at the budget | test accuracy | specialisation"]
        for name, r in rows_.items():
            b = claims.Bracket.from_stored(r["bracket"])
            second, rel = b.resolution()
            early = np.median(r["read_at"]) < 0.9 * d["horizon"]
            lines.append(f"{name} | {b.best:.3g}{'' if b.interior else ' (edge)'} ({b.steps[0]:.3g}–{b.steps[-1]:.3g}; "
                         f"{second:.3g} scores {rel:+.1%}) | {np.median(r['throughput']):.2f} | "
                         f"{r['loss'].mean():.4f} ± {r['loss'].std():.4f}"
                         + (f" (read at t = {np.median(r['read_at']):.0f}, its last round before the budget)"
                            if early else "")
                         + f" | {r['accuracy'].mean():.3f} | {r['specialisation'].mean():.2e}")
        k = catalogue.claim("mitigation-lowers-loss").family_size
        lines.append("Claims (paired differences, mitigated − baseline, over the reported seeds; each comparison "
                     f"with the interval that decides its word: holds at level 1 − 0.05/{k}, the family of {k} "
                     "verdicts (mitigations × splits), does not hold at that level's Bonferroni correction; at every "
                     "step setting):")
        for c in claims_of(d, split):
            v = c["verdict"]
            lines.append(f"  {c['mitigation']}: lowers the training loss at the budget: {v.verdict} ({c['seeds']} "
                         f"seeds; throughput {c['throughput'][0]:.2f} → {c['throughput'][1]:.2f})"
                         + (f"; {v.reason}" if v.reason else "") + (f"; {c['why']}" if c["why"] else ""))
            lines += v.setting_lines(c["settings"], lambda st, c=c: f"{c['off']} γ = {st[c['off']]:.3g}, "
                                                                    f"{c['on']} γ = {st[c['on']]:.3g}")
            a = c["accuracy"]
            lines.append(f"    test accuracy at the tuned steps (descriptive: 95%, no family level, no step check): "
                         f"{_iv(a, '+.3f')}")
        for g, ivs in specialisation_along(d, split).items():
            pair = d["pairs"][split][g]
            at_step = {float(pair["settings"][label][pair["off"]]): at for label, at in pair["values"].items()
                       if label.startswith(("common ", "along "))}
            lines.append(f"  specialisation index, {pair['on']} − {pair['off']}, both arms at one step (the models "
                         f"after the local steps, read over the budget's second half; 95% intervals, descriptive): "
                         + "; ".join(f"γ = {step:.3g}: {_iv(iv, '+.2e')}" for step, iv in ivs.items())
                         + f"; {_signs(ivs.values())} steps. Each arm's mean index at those steps: "
                         + "; ".join(f"{name}: " + ", ".join(f"{np.mean(at_step[step][name]['specialisation']):.2e}"
                                                             for step in ivs)
                                     for name in (pair["off"], pair["on"])) + ".")
    lines.append("")
    sync = [v for split, rows_ in d["rows"].items() for n, r in rows_.items() if "synchronous" in n
            for v in np.abs(r["specialisation"])]
    lines.append("Could these have come out otherwise? Where the schedule raises the throughput (the baselines wait "
                 "for two 8x stragglers every round), a lower loss at the budget is set by the set-up; the "
                 "measurement is how much lower, at each scheme's best step. Staleness weighting leaves the "
                 "throughput as it is; its claim is the open one. Two schemes on different schedules share a "
                 "seed's split, initial model and job-time draws, but their minibatches are keyed by event, so "
                 "they are paired less closely than runs on one schedule.")
    lines.append("Synchronous methods hand every worker the same model each round and compute one gradient there, so "
                 f"their specialisation index is 0 by construction (the largest |value| printed, {max(sync, default=0):.1e}, "
                 "is float32 rounding of CKA = 1); in ASGD the index measures how stale the workers' copies are, not "
                 "specialisation; local SGD's is how far its workers' own local steps take their models apart (on "
                 "Dirichlet shards, their data differ), which depends on the step, so the two local SGD arms are "
                 "compared at common steps. Under DPro-SM-like H_i the stragglers take fewer local steps (above): "
                 "the two arms differ in that, not only in throughput.")
    return "\n".join(lines) + "\n"


def verdicts(d: dict) -> list:
    return [c["verdict"].row(
        f"{c['mitigation']} ({c['on']} against {c['off']}) lowers the training loss at the time budget",
        f"at the tuned steps {c['verdict'].evidence()}" + (f"; {c['why']}" if c["why"] else ""),
        f"{d['preset']}: {d['dataset']}, n = 8 with two 8x stragglers, {c['split']} shards, budget "
        f"{d['horizon']:g}, each scheme's step bracketed on {len(d['tune_seeds'])} tuning seeds, {c['seeds']} "
        f"reported seeds (each resampling {', '.join(lab.SOURCES)})")
        for split in d["rows"] for c in claims_of(d, split)]


def plot_mitigation(d: dict, path: str) -> None:
    plt = pyplot()

    splits = list(d["rows"])
    fig, axes = plt.subplots(len(splits), 4, figsize=(18, 4.6 * len(splits)), dpi=100, squeeze=False)
    colors = ["tab:red", "tab:orange", "k", "tab:gray", "tab:green", "tab:olive"]
    for ax, split in zip(axes, splits):
        rows_ = d["rows"][split]
        names = list(rows_)
        x = np.arange(len(names))
        for a, key, label in ((ax[1], "throughput", "applied gradient steps per unit time"),
                              (ax[2], "loss", "training loss at the budget (mean, seeds' range)"),
                              (ax[3], "specialisation", "specialisation index of the models held (second half)")):
            vals = [np.atleast_1d(rows_[n][key]) for n in names]
            a.bar(x, [v.mean() for v in vals], color=colors[: len(names)])
            a.errorbar(x, [v.mean() for v in vals], yerr=[[v.mean() - v.min() for v in vals],
                                                          [v.max() - v.mean() for v in vals]],
                       fmt="none", ecolor="k", capsize=3)
            a.set_xticks(x)
            a.set_xticklabels([n.replace(" + ", "\n+ ") for n in names], rotation=60, ha="right", fontsize=7)
            a.set_title(f"{split}: {label}", fontsize=9)
            a.grid(alpha=0.3, axis="y")
        for n, c in zip(names, colors):
            r = rows_[n]
            ax[0].plot(r["time"], r["loss_curve"].mean(axis=0), color=c, label=f"{n} (γ = {r['bracket']['best']:.3g})")
            ax[0].fill_between(r["time"], r["loss_curve"].min(axis=0), r["loss_curve"].max(axis=0), color=c, alpha=0.15)
        ax[0].set_xlabel("simulated time")
        ax[0].set_ylabel(f"training loss ({split} shards)")
        ax[0].set_yscale("log")
        ax[0].legend(fontsize=6)
        ax[0].grid(alpha=0.3)
    fig.suptitle(f"each scheme at its own step, bracketed on tuning seeds; {len(d['report_seeds'])} reported seeds "
                 f"resampling {', '.join(lab.SOURCES)} ({d['preset']} preset)", fontsize=9)
    save_figure(fig, path)


def rows(d: dict) -> list[dict]:
    """One row per (split, scheme, step setting, reported seed): each scheme at its tuned step, and
    the schemes of a pair at the pair's other step settings."""
    def row(split, g, label, nm, gamma, v, i):  # reported seeds are 0, 1, …: seed i is the i-th value
        return {"split": split, "mitigation": g, "setting": label, "method": nm, "gamma": float(gamma), "seed": i,
                "throughput": float(v["throughput"][i]), "final_loss": float(v["loss"][i]),
                "test_accuracy": float(v["accuracy"][i]), "specialisation": float(v["specialisation"][i])}

    out = []
    for split, rows_ in d["rows"].items():
        for nm, r in rows_.items():
            out += [row(split, r["group"], "tuned", nm, r["bracket"]["best"], r, i) for i in range(len(r["loss"]))]
        for g, pair in d["pairs"][split].items():
            out += [row(split, g, label, nm, pair["settings"][label][nm], v, i)
                    for label, at in pair["values"].items() if label != "tuned"
                    for nm, v in at.items() for i in range(len(v["loss"]))]
    return out


FIGURE = Figure("hetero-mitigation", "one mitigation at a time, each scheme at its bracketed step: throughput, loss, "
                "specialisation index", PRESETS, compute, plot_mitigation, lab.with_footer(findings_mitigation), rows,
                stem="hetero_mitigation", module=__file__, convolution=False, verdicts=verdicts)
