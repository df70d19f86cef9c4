"""DEAHES-O, Figures 4 and 5 (docs/theory.md §9, §12): elastic averaging under worker failures.

Setting (docs/theory.md §9.4, §9.6): P ∈ {4, 8} workers, communication period τ ∈ {1, 2, 4} local
steps, the two-convolution CNN (sim.models.CNN), minibatch 64; each worker's exchange with the
master is lost with probability 1/3 per communication round. Both failure semantics of §9.6 are
presets: "suppressed" (the default; the worker trains on without the exchange) and "stale"
(``quick-stale``, ``full-stale``, written as ``deahes_stale.*``: the failed worker makes no
progress and its first exchange after recovery carries its old parameters). Six methods
(docs/theory.md §9.4): EASGD, EAMSGD (δ = 0.5), EAHES, EAHES-O, EAHES-OM (oracle) and DEAHES-O;
η = 0.01 for every local optimiser, α = 0.1, AdaHessian with β = (0.9, 0.999), one Hutchinson
probe, spatial averaging, the authors' optimiser's ε = 1e-4 and weight decay 0 (the paper states
none); the -O methods use the overlapping split with r = 1/P, the others disjoint shards. How a0
is calibrated, how the runs are compiled and seeded, and the presets (``quick``, ``full``, and
``medium``, written as ``deahes_medium.*``): :func:`compute`.
"""

from __future__ import annotations

import dataclasses
import fractions
from typing import Optional

import jax
import numpy as np

from delaylab.algos import metrics
from delaylab.deahes import (CALIBRATION_SEED, DEAD_ZONE, FAILURE_P, HESSIAN, KAPPA, METHODS, PRESETS, WORKERS, Preset, algorithms, dataset,
                             problems, schedules_for, sweep, trend_spread)
from delaylab.paper_figures._figure import Figure, Parts
from delaylab.paper_figures._output import save_figure
from delaylab.paper_figures import catalogue
from delaylab.claims import FAILS, HOLDS

EQUAL_MARGIN = 0.02  # "close": 2% of the oracle's loss, the margin of deahes-readings' sanity check


def _units(cfg: Preset) -> list:
    """The seed groups that share one sweep: all seeds at once, or (``resample``) each seed alone."""
    return [None] if not cfg.resample else list(range(cfg.seeds))


def compute(preset: Preset, parts: Parts, *, data_path: Optional[str] = None, progress: bool = True) -> dict:
    """Every (P, method) as one compiled sweep over τ × seeds (with ``resample``, one sweep per
    seed, each on that seed's split, initial model and failures), and one part per sweep (each a0
    calibration too), so that a stopped run resumes where it was.

    DEAHES-O's scale a0 [CHOICE]: for each (P, τ), EAHES-O is first run without failures, and a0 is
    ``KAPPA`` = 2 standard deviations of the trend a observed there (a = 0 before a worker holds p = 3
    values is left out), the ramp of the weight map starts at a = −``DEAD_ZONE``·a0 and h1 rises to
    0.5 at its end (the reading that passes the failure-free sanity check: ``algos.elastic.deahes_o``). The detector is then scored on the failing runs: the ROC AUC of −a for
    "this exchange follows a failure", on EAHES-O (whose weights ignore a) and on DEAHES-O.

    Each (P, method) is one compiled :func:`sim.sweep` over τ × seeds (the period is a traced
    hyperparameter; runs one after another inside the call, which on CPU is as fast as batching
    them and compiles sooner; a round's P worker jobs are batched by the preset's ``batching``, the
    faster on its image size). One schedule per P: equal job durations (one time unit per
    communication period), so rounds are the x-axis for every τ. In ``quick`` and ``full`` the failure
    draws, the split and the initial model are shared by all methods and seeds, and the seeds vary
    minibatches and Hutchinson probes; in ``medium`` each seed draws all of them anew. Either way the
    methods of a seed share every draw, so the claims are judged on paired differences over seeds.
    Training loss: the master's loss over ``eval_size`` training examples (each once); test accuracy
    over the test set; both every ``log_rounds`` rounds.

    Presets: ``quick`` uses scikit-learn's 8×8 digits (the CNN unchanged, its convolutions on 8×8 and
    4×4 images) and 20 rounds; ``full`` uses MNIST where present, else Fashion-MNIST (Debian), and
    150 rounds; it is sized for an accelerator. ``medium`` is the deciding preset of this CPU: Fashion-MNIST
    (or MNIST) averaged to 14×14 (2×2 blocks; the CNN unchanged), F on 1,000 class-stratified training
    images and accuracy on the first 1,000 test images every 10 rounds, 100 rounds, τ ∈ {1, 4}, 3 seeds,
    long outages (blocks of 5–20 rounds covering a third of each worker's exchanges) with stale
    semantics (a stalled worker restarts from its model at the outage's start). That failure model is
    a choice made after ``deahes-readings``, where i.i.d. losses of a third of the exchanges cost
    EAHES-O little and left the detector nothing to find, and stale outages were the one setting where
    the oracle's mean led (inconclusively); the paper's own reading (docs/theory.md §9.6) is suppressed exchanges,
    which this preset does not run. Every seed resamples every random source but the test subset (the
    first 1,000 test images for every seed): its split, initial
    model, evaluation subset, minibatches, probes and outages (one sweep per seed and method); a0 is
    calibrated once per P on a failure-free run of its own seed (``CALIBRATION_SEED``), disjoint from
    the reported seeds. At 28×28 the worker steps dominate its cost on 2 cores and it would take about
    8 h (benchmarks/RESULTS.md), hence the 14×14 images. Each finished (P, method) sweep is stored under
    ``<out>/.parts/deahes_<preset>/`` and reused when a stopped run is restarted with the same
    configuration and code; the parts are deleted once the figure is written. Every curve is kept in
    ``deahes.npz``, from which ``delaylab figure deahes --redraw`` redraws the figure and text."""
    cfg = preset
    semantics = cfg.semantics
    data_name, Xtr, ytr, Xte, yte = dataset(cfg, data_path)
    periods = np.asarray(cfg.periods, np.int32)
    out = {"preset": cfg.name, "dataset": data_name, "rounds": cfg.rounds, "seeds": cfg.seeds, "train_size": len(ytr),
           "test_size": len(yte), "semantics": semantics, "periods": list(cfg.periods), "workers": list(WORKERS),
           "failures": cfg.failures, "resample": bool(cfg.resample), "runs": {}}
    total, done = len(WORKERS) * (1 + len(_units(cfg)) * len(METHODS)), 0

    def part(P, label, seed, key_extra, fn):
        nonlocal done
        inputs = dict(preset=cfg, dataset=data_name, train=len(ytr), test=len(yte), P=P, part=label, **key_extra)
        name = f"P{P}_{label}" if seed is None else f"P{P}_{label}_seed{seed}"
        got, reused = parts.get(name, inputs, fn)
        done += 1
        return got, reused

    def tell(got, reused, what):
        if progress:
            how = "stored part reused" if reused else f"{float(got['seconds']):.0f} s"
            print(f"  deahes [{done}/{total}] {what}; {how}", flush=True)

    def setup(P, seed):
        """(problems, failure-free schedule, failing schedule, keys) of a seed (None: the shared set-up)."""
        keys = jax.random.split(jax.random.key(0), cfg.seeds) if seed is None else jax.random.key(seed)[None]
        return (problems(P, cfg, Xtr, ytr, Xte, yte, seed=seed or 0),) + schedules_for(P, cfg, seed=seed or 0) + (keys,)

    taus = ", ".join(map(str, cfg.periods))
    for P in WORKERS:
        algs = algorithms(trace=P * cfg.rounds, failure=semantics)
        got_by = {m: [] for m in algs}
        # a0 from failure-free EAHES-O runs (the same compiled program as the failing runs below): on
        # the reported seeds where they are shared, else on a calibration seed of its own, disjoint
        # from the reported ones (one calibration per P, not per seed: the out-of-sample reading)
        cal_seed = None if not cfg.resample else CALIBRATION_SEED
        shared = setup(P, None) if cal_seed is None else None

        def calibrate():
            probs, clean, _, keys = shared if shared is not None else setup(P, cal_seed)
            calib = sweep(algs["EAHES-O"][0], probs["overlap"], clean, keys, {"period": periods}, P, cfg)
            return {"a0": KAPPA * trend_spread(calib.state)}

        cal, reused = part(P, "calibration", cal_seed, {} if cal_seed is None else {"seed": cal_seed}, calibrate)
        a0 = np.asarray(cal["a0"], np.float64)
        out[f"a0_P{P}"], out[f"a0_seconds_P{P}"] = a0, float(cal["seconds"])
        tell(cal, reused, f"P={P}: a0 = {KAPPA:g} × spread of a without failures = "
                          f"{', '.join(f'{v:.3g}' for v in a0)} (τ = {taus})"
                          + ("" if cal_seed is None else f", on calibration seed {cal_seed}"))
        for seed in _units(cfg):
            probs, clean, failing, keys = shared if seed is None else setup(P, seed)
            at = "" if seed is None else f" seed {seed}"
            for m, (alg, split) in algs.items():
                hp = {"period": periods}
                if m == "DEAHES-O":  # the default reading: the ramp from a = −a0 to −2 a0, h1 up to 0.5 (algos.elastic.deahes_o)
                    hp["a0"] = a0.astype(np.float32)
                    hp["a_start"] = (-DEAD_ZONE * a0).astype(np.float32)

                def run_method(alg=alg, split=split, hp=hp, m=m, probs=probs, failing=failing, keys=keys):
                    res = sweep(alg, probs[split], failing, keys, hp, P, cfg)
                    got = {"loss": np.asarray(res.metrics["loss"]), "accuracy": np.asarray(res.metrics["test_accuracy"]),
                           "diverged": np.asarray(int(np.sum(res.diverged_at >= 0))),
                           "round": np.asarray(res.metrics["events"]) / P}
                    if m in ("EAHES-O", "DEAHES-O"):
                        det = metrics.detection_auc(res.state)
                        got.update(auc=det["auc"], positives=det["positives"], negatives=det["negatives"])
                    return got

                extra = {"a0": [round(float(v), 12) for v in a0]} if m == "DEAHES-O" else {}
                got, reused = part(P, m, seed, extra if seed is None else {**extra, "seed": seed}, run_method)
                got_by[m].append(got)
                tell(got, reused, f"P={P}{at} {m:9s} final loss (τ = {taus}) "
                                  f"{', '.join(f'{v:.3f}' for v in got['loss'][:, :, -1].mean(1))}")
        # the seeds' sweeps side by side (axis 1 of every [τ, seeds, ...] array)
        for m in algs:
            gs = got_by[m]
            run = {k: np.concatenate([g[k] for g in gs], axis=1) for k in gs[0] if k not in ("round", "seconds", "diverged")}
            run["seconds"] = float(sum(float(g["seconds"]) for g in gs))
            run["diverged"] = int(sum(int(g["diverged"]) for g in gs))
            out["runs"][(P, m)] = run
            out["round"] = np.asarray(gs[0]["round"])
    return out


_SEMANTICS = {"suppressed": "a cut-off worker trains on without the exchange",
              "stale": "a failed worker makes no progress and its first exchange after recovery carries its "
                       "old parameters"}


def _failures(data) -> str:
    """The failure model in words, from the preset the data were computed with."""
    def frac(x: float) -> str:
        return str(fractions.Fraction(x).limit_denominator(100))

    if data.get("failures", "iid") != "outages":
        return f"exchanges lost with probability {frac(FAILURE_P)}"
    cfg = PRESETS.get(data.get("preset", ""))
    if cfg is None:  # stored data from a preset not in PRESETS: the defaults
        default = {f.name: f.default for f in dataclasses.fields(Preset)}
        (lo, hi), share = default["outage_lengths"], default["outage_fraction"]
    else:
        (lo, hi), share = cfg.outage_lengths, cfg.outage_fraction
    return (f"long outages: each worker loses blocks of {lo}–{hi} consecutive exchanges covering a fraction "
            f"{frac(share)} of its exchanges")


_RESAMPLED = ("each seed draws its own split, initial model, evaluation subset, minibatches, Hutchinson probes and "
              "outages")
_SHARED = ("the seeds vary minibatches and Hutchinson probes; the split, the initial model and the failure draws are "
           "shared")


def _slack(p) -> float:
    """How near a holding "below" or "noninferior" comparison is to failing: its interval's upper
    end less the bound it must stay under."""
    return p.interval.hi - p.margin


def _counts(parts) -> str:
    n = {w: sum(p.verdict == w for p in parts) for w in (HOLDS, FAILS)}
    return f"{len(parts)} comparisons: {n[HOLDS]} hold, {n[FAILS]} do not hold at the corrected level"


def _shown(ps) -> str:
    """One setting's comparisons in words: those that do not hold or are undecided, else the one
    nearest to failing."""
    bad = [p for p in ps if p.verdict != HOLDS]
    if not bad:
        p = max(ps, key=_slack)
        return f"all hold; nearest to failing: {p.name} {p.interval}"
    return "; ".join(f"{p.name} {p.interval} {p.verdict}" + (f" (at the corrected level {p.corrected})"
                                                            if p.verdict == FAILS else "") for p in bad)


def _deciding(v, where: dict) -> tuple:
    """(setting, words) of the comparison that decides verdict ``v``: the nearest to failing when
    it holds, the first that does not hold, else the first undecided."""
    if v.verdict == HOLDS:
        p = max(v.parts, key=_slack)
        return where[id(p)], f"nearest to failing: {p.name} {p.interval}"
    if v.verdict == FAILS:
        p = next(p for p in v.parts if p.verdict == FAILS)
        return where[id(p)], f"{p.name} {p.interval} (corrected {p.corrected})"
    p = next(p for p in v.parts if p.verdict != HOLDS)
    return where[id(p)], f"e.g. {p.name} {p.interval}"


def _oracle_note(data: dict, configs: list, loss: dict) -> str:
    """What the oracle is, and what its reset does to a worker under the data's failure semantics,
    from the runs: the resets per run (delivered exchanges that follow a failure, counted on
    DEAHES-O's trace, whose failure draws every method of a seed shares) and the oracle's final
    loss against EAHES-O's, which runs the same split and draws without the reset."""
    note = ("the oracle EAHES-OM is our reconstruction of the paper's (docs/theory.md §9.6), read as the full reset: "
            "(h1, h2) = (1, 0) on each exchange that follows a failure")
    R = data["runs"]
    if not all((P, m) in R for P in data["workers"] for m in ("DEAHES-O", "EAHES-O", "EAHES-OM")):
        return note
    gap = [loss[P, t, "EAHES-OM"] - loss[P, t, "EAHES-O"] for P, t in configs]
    resets, jobs = [], []
    for P in data["workers"]:
        pos, neg = (np.asarray(R[(P, "DEAHES-O")][k], np.float64) for k in ("positives", "negatives"))
        resets.append(f"{pos.mean():.1f} at P = {P}")
        attempts = P * data["rounds"]
        jobs.append(1.0 + float(np.mean(attempts - pos - neg)) / max(float(pos.mean()), 1e-12))
    if data.get("semantics", "suppressed") == "suppressed":
        note += ("; under suppressed failures a cut-off worker trains on, so each reset replaces its parameters by the "
                 "master's and discards the progress of its jobs since its last delivered exchange (on average "
                 f"{min(jobs):.1f}–{max(jobs):.1f} jobs of τ local steps: one plus the failed exchanges per reset): "
                 f"{', '.join(resets)} resets per run")
    else:
        note += ("; under stale failures the returning worker carries its parameters from before the failure, which the "
                 f"reset replaces by the master's: {', '.join(resets)} resets per run")
    return note + (f"; the oracle's final loss less EAHES-O's (mean over seeds) ranges over {min(gap):+.4f} to "
                   f"{max(gap):+.4f} across the {len(configs)} settings")


def _final(run: dict, key: str) -> np.ndarray:
    """[τ, seeds]: the last logged value."""
    return run[key][:, :, -1]


def _present(data: dict, P: int) -> list:
    """The methods with runs at P: all six, but for a run of some of them only."""
    return [m for m in METHODS if (P, m) in data["runs"]]


def findings(data: dict) -> str:
    return _report(data)[0]


def verdicts(data: dict) -> list:
    """One row per claim judged (:data:`paper_figures._figure.VERDICT_KEYS`)."""
    return _report(data)[1]


def _conditions(data: dict) -> str:
    return (f"{data['preset']}: {data['dataset']}, P ∈ {{{', '.join(map(str, data['workers']))}}}, "
            f"τ ∈ {{{', '.join(map(str, data['periods']))}}}, {data['rounds']} rounds, {data['seeds']} seeds"
            + (" (each resampling every source)" if data.get("resample", False) else " (minibatches and probes)")
            + f", {'long outages' if data.get('failures', 'iid') == 'outages' else 'i.i.d. losses 1/3'} "
            f"({data.get('semantics', 'suppressed')}), η = 0.01 untuned")


def _report(data: dict) -> tuple:
    """(the figure's text, its verdict rows)."""
    R = data["runs"]
    table: list = []
    methods = [m for m in METHODS if all(m in _present(data, P) for P in data["workers"])]
    lines = [f"DEAHES-O Figures 4–5 ({data['preset']} preset): {data['dataset']}, {data['train_size']} training / "
             f"{data['test_size']} test images, {data['rounds']} communication rounds, {data['seeds']} seeds ("
             + (_RESAMPLED if data.get("resample", False) else _SHARED) + "), "
             + _failures(data) + f" ({data.get('semantics', 'suppressed')} semantics: "
             + _SEMANTICS[data.get("semantics", "suppressed")] + ").",
             "Final master training loss and test accuracy (mean ± std over seeds):",
             f"{'P':>2s} {'τ':>2s} " + " ".join(f"{m:>17s}" for m in methods)]
    for P in data["workers"]:
        for t, tau in enumerate(data["periods"]):
            lo = " ".join(f"{_final(R[(P, m)], 'loss')[t].mean():8.4f}±{_final(R[(P, m)], 'loss')[t].std():<8.4f}" for m in methods)
            ac = " ".join(f"{_final(R[(P, m)], 'accuracy')[t].mean():8.4f}±{_final(R[(P, m)], 'accuracy')[t].std():<8.4f}" for m in methods)
            lines.append(f"{P:2d} {tau:2d} {lo}   (loss)")
            lines.append(f"{'':2s} {'':2s} {ac}   (accuracy)")
    configs = [(P, t) for P in data["workers"] for t in range(len(data["periods"]))]
    loss = {(P, t, m): float(_final(R[(P, m)], "loss")[t].mean()) for P, t in configs for m in methods}
    seeds = {(P, t, m): _final(R[(P, m)], "loss")[t].astype(np.float64) for P, t in configs for m in methods}

    def claim(cid, text, needs, comparisons, margin=0.0, oracle=False):
        """comparisons(P, t) -> [(name, d)]; the claim must hold in every setting: one verdict of
        the catalogue (:func:`paper_figures.catalogue.verdict`) whose parts are all settings'
        comparisons, so that "does not hold" is judged at the Bonferroni level of all of them; then
        each setting's comparisons that decide it."""
        missing = [m for m in needs if m not in methods]
        if missing:
            lines.append(f"- {text}: not judged (this run lacks {', '.join(missing)}).")
            return
        per = {(P, t): comparisons(P, t) for P, t in configs}
        v = catalogue.verdict(cid, [c for P, t in configs for c in per[P, t]], margin=margin)
        it = iter(v.parts)
        got = {key: [next(it) for _ in per[key]] for key in configs}
        lines.append(f"- {text}: {v.verdict} ({_counts(v.parts)}, over {len(configs)} settings).")
        for (P, t), ps in got.items():
            lines.append(f"    P = {P}, τ = {data['periods'][t]}: " + _shown(ps))
        where = {id(p): key for key, ps in got.items() for p in ps}
        key, ev = _deciding(v, where)
        table.append(v.row(text, f"{_counts(v.parts)}; {ev} at P = {key[0]}, τ = {data['periods'][key[1]]}",
                           _conditions(data) + (f"; {_oracle_note(data, configs, loss)}" if oracle else "")))

    def below_each(a, others):
        return lambda P, t: [(f"{a} − {b}", seeds[P, t, a] - seeds[P, t, b]) for b in others]

    lines.append(f"The paper's claims, judged by the final training loss at the paper's η = 0.01 for every "
                 f"optimiser (untuned): paired differences over the {data['seeds']} seeds (a seed gives every "
                 "method the same draws), mean ± half-width of the 95% Student-t interval. A claim must hold in "
                 "every setting, and is one verdict over all its comparisons (paper_figures.catalogue): it holds "
                 "when every comparison's 95% interval lies on its side (of 0, or of the margin), does not hold "
                 "when some comparison lies wholly on the other side at the Bonferroni level 1 − 0.05/k over all "
                 "k comparisons of the claim (the corrected interval is shown), and is inconclusive otherwise.")
    claim("adahessian-beats-sgd", "AdaHessian methods beat the SGD methods (each of EAHES, EAHES-O, EAHES-OM, "
          "DEAHES-O below both EASGD and EAMSGD)", HESSIAN + ("EASGD", "EAMSGD"),
          lambda P, t: [c for h in HESSIAN for c in below_each(h, ("EASGD", "EAMSGD"))(P, t)], oracle=True)
    claim("overlap-helps", "Overlap helps (EAHES-O below EAHES)", ("EAHES-O", "EAHES"),
          below_each("EAHES-O", ("EAHES",)))
    others = ("EASGD", "EAMSGD", "EAHES", "EAHES-O", "DEAHES-O")
    claim("oracle-best", "The oracle EAHES-OM (full reset) is the best of the six", ("EAHES-OM",) + others,
          below_each("EAHES-OM", others), oracle=True)
    claim("deahes-beats-baselines", "DEAHES-O beats EASGD, EAMSGD, EAHES and EAHES-O",
          ("DEAHES-O", "EASGD", "EAMSGD", "EAHES", "EAHES-O"), below_each("DEAHES-O", ("EASGD", "EAMSGD", "EAHES", "EAHES-O")))
    claim("deahes-close-to-oracle", f"DEAHES-O comes close to the oracle (full reset): no worse than it by more than "
          f"{EQUAL_MARGIN:.0%} of its loss (non-inferiority, on DEAHES-O − EAHES-OM relative to the oracle's mean loss "
          "in each setting)", ("DEAHES-O", "EAHES-OM"),
          lambda P, t: [(f"(DEAHES-O − EAHES-OM) / {loss[P, t, 'EAHES-OM']:.4f}",
                         (seeds[P, t, "DEAHES-O"] - seeds[P, t, "EAHES-OM"]) / loss[P, t, "EAHES-OM"])],
          margin=EQUAL_MARGIN, oracle=True)
    if "DEAHES-O" in methods and "EAHES-O" in methods:
        same = [(P, data["periods"][t], int(np.sum(np.all(R[(P, "DEAHES-O")]["loss"][t] == R[(P, "EAHES-O")]["loss"][t],
                                                           axis=-1))))
                for P, t in configs]
        lines.append("Did DEAHES-O's rule fire? It runs EAHES-O's arithmetic on the same draws, so where its weights "
                     "never left (α, α) its loss curve equals EAHES-O's bit for bit (a different curve means it fired, "
                     "or that the two programs rounded differently). Runs (of "
                     f"{data['seeds']} seeds) with identical curves: "
                     + ", ".join(f"P = {P}, τ = {tau}: {k}" for P, tau, k in same) + ".")
    if "DEAHES-O" in methods:
        d = [loss[P, t, "DEAHES-O"] for P, t in configs]
        p0, p1, t1 = data["workers"][0], data["workers"][-1], len(data["periods"]) - 1
        lines.append(f"- DEAHES-O across settings (a description, not a verdict: a longer period takes more local "
                     f"steps per round): its final loss ranges over "
                     f"{min(d):.4f}–{max(d):.4f} across the {len(configs)} settings (P = {p0} → {p1} at "
                     f"τ = {data['periods'][0]}: {loss[p0, 0, 'DEAHES-O']:.4f} → {loss[p1, 0, 'DEAHES-O']:.4f}; "
                     f"τ = {data['periods'][0]} → {data['periods'][t1]} at P = {p0}: "
                     f"{loss[p0, 0, 'DEAHES-O']:.4f} → {loss[p0, t1, 'DEAHES-O']:.4f}).")
    scored = [m for m in ("EAHES-O", "DEAHES-O") if m in methods]
    if scored:
        lines.append("The detector (ROC AUC of −a for \"this exchange follows a failure\", mean over seeds; "
                     f"a0 = {KAPPA:g} × the spread of a without failures):")
        for P in data["workers"]:
            for t, tau in enumerate(data["periods"]):
                aucs = ", ".join(f"{np.nanmean(R[(P, m)]['auc'][t]):.3f} on {m}" for m in scored)
                after = (f" ({int(R[(P, 'DEAHES-O')]['positives'][t].sum())} exchanges after a failure)"
                         if "DEAHES-O" in scored else "")
                lines.append(f"  P = {P}, τ = {tau}: a0 = {data[f'a0_P{P}'][t]:.3g}; AUC {aucs}{after}")
    if data.get("failures", "iid") == "outages":
        lines.append("The failure model (long outages, " + data.get("semantics", "suppressed") + " semantics) was chosen "
                     "after deahes-readings, where it was the one setting in which the oracle's mean led; the paper "
                     "reads failures as suppressed exchanges (docs/theory.md §9.6). The verdicts hold for this model only.")
    if data["preset"] != "full":
        lines.append(f"This is the {data['preset']} preset ({data['dataset']}, {data['rounds']} rounds): the curves may "
                     "not have flattened (see the figure), and the comparison may change over longer runs.")
    return "\n".join(lines) + "\n", table


def plot(data: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = dict(zip(METHODS, ("tab:gray", "tab:brown", "tab:blue", "tab:green", "tab:purple", "tab:red")))
    rows = [(P, key) for P in data["workers"] for key in ("loss", "accuracy")]
    fig, axes = plt.subplots(len(rows), len(data["periods"]), figsize=(13, 3.0 * len(rows)), dpi=110, squeeze=False)
    x = data["round"]
    for r, (P, key) in enumerate(rows):
        for c, tau in enumerate(data["periods"]):
            ax = axes[r, c]
            for m in _present(data, P):
                v = data["runs"][(P, m)][key][c]  # [seeds, logs]
                mean, std = v.mean(0), v.std(0)
                ax.plot(x, mean, color=colors[m], lw=1.3, label=m)
                ax.fill_between(x, mean - std, mean + std, color=colors[m], alpha=0.15)
            ax.set_title(f"P = {P}, τ = {tau}", fontsize=9)
            ax.set_xlabel("communication round")
            ax.set_ylabel("master training loss" if key == "loss" else "test accuracy")
            if key == "loss":
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    lost = "long outages" if data.get("failures", "iid") == "outages" else "exchanges lost w.p. 1/3"
    fig.suptitle(f"Elastic averaging with {lost} ({data.get('semantics', 'suppressed')}): {data['dataset']} ({data['preset']} preset, "
                 f"mean ± std over {data['seeds']} seeds)", fontsize=10)
    save_figure(fig, path)


_META = ("preset", "dataset", "rounds", "seeds", "train_size", "test_size", "semantics", "failures", "resample")


def save_data(path: str, data: dict) -> None:
    """Every curve of every seed, the detector scores and a0, as a plain .npz (no pickles)."""
    flat = {"round": np.asarray(data["round"]), "periods": np.asarray(data["periods"]),
            "workers": np.asarray(data["workers"])}
    flat.update({f"meta_{k}": np.asarray(data[k]) for k in _META})
    for P in data["workers"]:
        flat[f"a0_P{P}"], flat[f"a0_seconds_P{P}"] = np.asarray(data[f"a0_P{P}"]), np.asarray(data[f"a0_seconds_P{P}"])
        for m in _present(data, P):
            for k, v in data["runs"][(P, m)].items():
                flat[f"run_P{P}_{m}_{k}"] = np.asarray(v)
    np.savez_compressed(path, **flat)


def load_data(path: str) -> dict:
    """The inverse of :func:`save_data`."""
    with np.load(path, allow_pickle=False) as z:
        data = {k: z[f"meta_{k}"].item() for k in _META if f"meta_{k}" in z.files}  # older files lack some
        data.update(round=z["round"], periods=z["periods"].tolist(), workers=z["workers"].tolist(), runs={})
        for P in data["workers"]:
            data[f"a0_P{P}"], data[f"a0_seconds_P{P}"] = z[f"a0_P{P}"], float(z[f"a0_seconds_P{P}"])
            for m in METHODS:
                pre = f"run_P{P}_{m}_"
                run = {k[len(pre):]: z[k] for k in z.files if k.startswith(pre)}
                if not run:  # a run of some of the methods only
                    continue
                run["seconds"], run["diverged"] = float(run["seconds"]), int(run["diverged"])
                data["runs"][(P, m)] = run
    return data


def rows(data: dict) -> list[dict]:
    """The seed means of every curve, one row per evaluation round."""
    out = []
    for j, r in enumerate(data["round"]):
        row = {"round": float(r)}
        for P in data["workers"]:
            for t, tau in enumerate(data["periods"]):
                for m in _present(data, P):
                    run = data["runs"][(P, m)]
                    row[f"P{P} tau{tau} {m} loss"] = float(run["loss"][t, :, j].mean())
                    row[f"P{P} tau{tau} {m} accuracy"] = float(run["accuracy"][t, :, j].mean())
        out.append(row)
    return out


def stem(data: dict) -> str:
    if data["preset"] == "medium":
        return "deahes_medium"
    semantics = data.get("semantics", "suppressed")
    return "deahes" if semantics == "suppressed" else f"deahes_{semantics}"


FIGURE = Figure("deahes", "DEAHES-O Figs. 4-5: elastic averaging with AdaHessian under failures, P ∈ {4, 8}, τ up to 4",
                PRESETS, compute, plot, findings, rows, stem=stem, module=__file__, convolution=True, save=save_data,
                load=load_data, verdicts=verdicts)
