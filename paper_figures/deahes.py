"""DEAHES-O, Figures 4 and 5 (docs/theory.md §9, §12): elastic averaging under worker failures.

Setting (docs/theory.md §9.4, §9.6): P ∈ {4, 8} workers, communication period τ ∈ {1, 2, 4} local
steps, the two-convolution CNN (sim.models.CNN), minibatch 64; each worker's exchange with the
master is lost with probability 1/3 per communication round. Both failure semantics of §9.6 are
presets: "suppressed" (the default; the worker trains on without the exchange) and "stale"
(``quick-stale``, ``full-stale``, written as ``deahes_stale.*``: the failed worker makes no
progress and its first exchange after recovery carries its old parameters). The methods of §9.4
(EASGD, EAMSGD with δ = 0.5, EAHES, EAHES-O, DEAHES-O) and the oracle EAHES-OM in three readings;
α = 0.1, AdaHessian with β = (0.9, 0.999), one Hutchinson probe, spatial averaging, ε = 1e-4 and
weight decay 0; the -O methods on the overlapping split with r = 1/P, the others on disjoint
shards. Every claim is judged twice: at η tuned per optimiser family, and at the paper's η = 0.01
for every optimiser. Seeds, tuning and a0: :func:`compute`; the presets (``quick``, ``full``,
``medium``, the deciding one under the paper's failure model, and ``medium-outages``, written as
``deahes_medium.*`` and ``deahes_medium_outages.*``): :mod:`delaylab.deahes` and :func:`compute`.
"""

from __future__ import annotations

import collections
import dataclasses
import fractions
from typing import Optional

import numpy as np

from delaylab import claims
from delaylab.algos import metrics
from delaylab.claims import FAILS, HOLDS
from delaylab.deahes import (CALIBRATION_SEED, FAILURE_P, FAMILIES, HESSIAN, KAPPA, LR, METHODS, PRESETS, SOURCES,
                             WORKERS, Preset, algorithms, dataset, family, keys, oracle_name, problems, resolution,
                             same_runs, schedules_for, step_settings, stored_bracket, sweep, sweep_hparams,
                             trend_spread, tune)
from delaylab.paper_figures import catalogue
from delaylab.paper_figures._figure import Figure, Parts
from delaylab.paper_figures._output import save_figure

EQUAL_MARGIN = 0.02  # "close": 2% of the oracle's loss, the margin of deahes-readings' sanity check


def _constants() -> dict:
    """The module constants a run's texts print, stored with its data so that a text redrawn later
    prints the run's own values."""
    return {"lr": LR, "kappa": KAPPA, "failure_p": FAILURE_P, "calibration_seed": CALIBRATION_SEED,
            "equal_margin": EQUAL_MARGIN}


def _const(data: dict, name: str):
    """Constant ``name`` of the run behind ``data`` (data stored before the constants were kept:
    the code's value, which they were computed with)."""
    return data.get("constants", {}).get(name, _constants()[name])


def methods_of(cfg: Preset) -> tuple:
    """The methods a preset runs: the six of docs/theory.md §9.4, the oracle in each of its readings."""
    oracles = tuple(oracle_name(r) for r in cfg.oracles)
    return ("EASGD", "EAMSGD", "EAHES", "EAHES-O") + oracles + ("DEAHES-O",)


def compute(preset: Preset, parts: Parts, *, data_path: Optional[str] = None, progress: bool = True) -> dict:
    """Every (η set, P, seed, method) as one compiled sweep over τ (:class:`_Runs`), each a part, so
    that a stopped run resumes where it was.

    Seeds: the reported seeds 0, 1, … and the tuning seeds 10,000, … (:func:`claims.disjoint_seeds`)
    each draw their own split, initial model, evaluation subset, minibatches, Hutchinson probes and
    failures, each from its own stream (:data:`delaylab.deahes.SOURCES`); within a seed every method sees the same draws, so the claims are judged on paired
    differences over the reported seeds. Steps: with ``tune_seeds``, η is bracketed per optimiser
    family (:data:`delaylab.deahes.FAMILIES`) on the tuning seeds (:func:`_tune`), and every method
    then runs at its family's tuned η and again at the paper's η = 0.01; and, for the tuned verdicts'
    robustness to the step (:func:`delaylab.deahes.step_settings`), at each family's grid neighbours of its tuned η
    (a run asked for twice is computed once). DEAHES-O's a0 at each η
    comes from a failure-free EAHES-O run on the first tuning seed (:meth:`_Runs.a0`), so nothing
    fitted sees a reported seed. Training loss: the master's loss over ``eval_size`` training
    examples; test accuracy over the test set; both every ``log_rounds`` rounds."""
    cfg = preset
    runs = _Runs(cfg, parts, dataset(cfg, data_path), progress)
    tune_seeds, report = claims.disjoint_seeds(cfg.tune_seeds, cfg.seeds)
    out = {"preset": cfg.name, "dataset": runs.name, "rounds": cfg.rounds, "seeds": cfg.seeds,
           "train_size": runs.train_size, "test_size": runs.test_size, "semantics": cfg.semantics,
           "periods": list(cfg.periods), "workers": list(WORKERS), "failures": cfg.failures, "resample": True,
           "sources": list(SOURCES),
           "oracles": list(cfg.oracles), "tune_seeds": len(tune_seeds),
           "tune_workers": list(cfg.tune_workers or WORKERS), "runs": {}, "eta": {}, "brackets": {}, "a0": {},
           "constants": _constants()}
    sets = {"paper": {f: LR for f in FAMILIES}}
    others: dict = {}
    if tune_seeds:
        tuned = {f: _tune(runs, f, tune_seeds, progress) for f in FAMILIES}
        brackets = {f: b for f, (b, _) in tuned.items()}
        out["brackets"] = {f: stored_bracket(b, per_seed, cfg.tie) for f, (b, per_seed) in tuned.items()}
        out["settings"] = step_settings(brackets)
        sets = {"tuned": out["settings"]["tuned"], **sets}
        others = {label: at for label, at in out["settings"].items() if label != "tuned"}
    out["sets"] = list(sets)  # the η sets reported (text, verdict rows, figure); `others` feed the tuned verdicts
    for label, eta in {**sets, **others}.items():
        out["eta"][label] = dict(eta)
        for P in WORKERS:
            a0 = runs.a0(P, eta["AdaHessian"]) if "AdaHessian" in eta else np.zeros(len(cfg.periods))
            out["a0"][(label, P)] = a0
            got = {m: [runs.run(P, m, s, eta[family(m)], a0) for s in report] for m in methods_of(cfg)
                   if family(m) in eta}
            for m, gs in got.items():  # the seeds' sweeps side by side (axis 1 of every [τ, seeds, ...] array)
                run = {k: np.concatenate([g[k] for g in gs], axis=1) for k in gs[0]
                       if k not in ("round", "seconds", "diverged")}
                run["seconds"] = float(sum(float(g["seconds"]) for g in gs))
                run["diverged"] = int(sum(int(g["diverged"]) for g in gs))
                out["runs"][(label, P, m)] = run
                out["round"] = np.asarray(gs[0]["round"])
    return out


class _Runs:
    """The figure's sweeps, each a part named by (P, method, η, seed): a run asked for twice (a0 at
    an η the tuning calibrated already, a method whose runs are another's) is computed once."""

    def __init__(self, cfg: Preset, parts: Parts, data, progress: bool):
        self.cfg, self.parts, self.progress = cfg, parts, progress
        self.name, self.Xtr, self.ytr, self.Xte, self.yte = data
        self.train_size, self.test_size = len(self.ytr), len(self.yte)
        self.setups: collections.OrderedDict = collections.OrderedDict()
        oracles = cfg.oracles + (("full reset",) if "reset where stale" in cfg.oracles else ())  # its runs' twin
        self.algs = {P: algorithms(trace=P * cfg.rounds, failure=cfg.semantics, oracles=tuple(dict.fromkeys(oracles)))
                     for P in WORKERS}

    def setup(self, P: int, seed: int) -> tuple:
        """(problems, failure-free schedule, failing schedule, keys) of one seed: its own split,
        initial model, evaluation subset and failure draws, and its key for minibatches and probes.
        The last few are kept (the tuning visits each seed once per step)."""
        if (P, seed) not in self.setups:
            probs = problems(P, self.cfg, self.Xtr, self.ytr, self.Xte, self.yte, seed=seed)
            self.setups[(P, seed)] = (probs,) + schedules_for(P, self.cfg, seed=seed) + (keys(seed),)
            while len(self.setups) > 2 * max(1, self.cfg.tune_seeds):
                self.setups.popitem(last=False)
        self.setups.move_to_end((P, seed))
        return self.setups[(P, seed)]

    def _part(self, name: str, inputs: dict, fn, what) -> dict:
        """The part ``name`` (:meth:`Parts.get`), its progress line ``what(part)``."""
        base = dict(preset=self.cfg, dataset=self.name, train=self.train_size, test=self.test_size)
        got, reused = self.parts.get(name, {**base, **inputs}, fn)
        if self.progress:
            how = "stored part reused" if reused else f"{float(got['seconds']):.0f} s"
            print(f"  deahes: {what(got)}; {how}", flush=True)
        return got

    def a0(self, P: int, eta: float) -> np.ndarray:
        """DEAHES-O's scale a0 per τ at step η [CHOICE]: ``KAPPA`` = 2 standard deviations of the
        trend a (a = 0 before a worker holds p = 3 values left out) in a failure-free EAHES-O run
        on the first tuning seed, ``CALIBRATION_SEED``; the ramp of the weight map starts at
        a = −a0 and h1 rises to 0.5 at its end (``algos.elastic.deahes_o``)."""
        def calibrate():
            probs, clean, _, keys = self.setup(P, CALIBRATION_SEED)
            res = sweep(self.algs[P]["EAHES-O"][0], probs["overlap"], clean, keys,
                        sweep_hparams(self.cfg.periods, eta), P, self.cfg)
            return {"a0": KAPPA * trend_spread(res.state)}

        got = self._part(f"P{P}_calibration_eta{eta:.6g}", dict(P=P, part="calibration", eta=float(eta),
                                                                   seed=CALIBRATION_SEED), calibrate,
                         lambda g: f"P={P} η = {eta:.4g}: a0 = " + ", ".join(f"{v:.3g}" for v in g["a0"])
                         + f" (τ = {', '.join(map(str, self.cfg.periods))}) on seed {CALIBRATION_SEED}")
        return np.asarray(got["a0"], np.float64)

    def run(self, P: int, m: str, seed: int, eta: float, a0: np.ndarray) -> dict:
        """Method ``m`` at P workers, seed ``seed`` and step η, one run per τ on the failing
        schedule (DEAHES-O with ``a0``): final curves, divergences, and on EAHES-O and DEAHES-O the
        detector's score. A method whose runs are another's (:func:`delaylab.deahes.same_runs`)
        returns that method's."""
        alias = same_runs(m, self.cfg.semantics)
        if alias is not None:
            return self.run(P, alias, seed, eta, a0)
        alg, split = self.algs[P][m]
        a0 = a0 if m == "DEAHES-O" else None

        def compute_run():
            probs, _, failing, keys = self.setup(P, seed)
            res = sweep(alg, probs[split], failing, keys, sweep_hparams(self.cfg.periods, eta, a0), P, self.cfg)
            got = {"loss": np.asarray(res.metrics["loss"]), "accuracy": np.asarray(res.metrics["test_accuracy"]),
                   "diverged": np.asarray(int(np.sum(res.diverged_at >= 0))),
                   "round": np.asarray(res.metrics["events"]) / P}
            if m in ("EAHES-O", "DEAHES-O"):
                det = metrics.detection_auc(res.state)
                got.update(auc=det["auc"], positives=det["positives"], negatives=det["negatives"])
            return got

        extra = {} if a0 is None else {"a0": [round(float(v), 12) for v in a0]}
        return self._part(f"P{P}_{_slug(m)}_eta{eta:.6g}_seed{seed}",
                          dict(P=P, part=m, eta=float(eta), seed=seed, **extra), compute_run,
                          lambda g: f"P={P} seed {seed} η = {eta:.4g} {m}: final loss "
                          + ", ".join(f"{v:.3f}" for v in g["loss"][:, 0, -1]))


def _slug(m: str) -> str:
    return m.replace(" ", "_").replace("(", "").replace(")", "")


def _tune(runs: _Runs, fam: str, seeds: list, progress: bool) -> tuple[claims.Bracket, dict]:
    """η of optimiser family ``fam`` (:func:`delaylab.deahes.tune`), scored on each tuning seed by
    the mean final training loss of the family's methods over the preset's ``tune_workers`` and
    every τ; the family's score is the mean over the seeds. DEAHES-O runs with a0 calibrated at the
    same η. Returns the bracket and η -> per-seed scores."""
    cfg = runs.cfg

    def seed_scores(eta: float) -> list:
        a0 = {P: runs.a0(P, eta) for P in cfg.tune_workers or WORKERS} if "DEAHES-O" in FAMILIES[fam] else {}
        return [float(np.mean([runs.run(P, m, s, eta, a0.get(P))["loss"][:, 0, -1]
                               for P in cfg.tune_workers or WORKERS for m in FAMILIES[fam]])) for s in seeds]

    b, per_seed = tune(fam, seed_scores, cfg)
    if progress:
        print(f"  deahes: {fam} family: {b.note()}; {resolution(stored_bracket(b, per_seed, cfg.tie))}", flush=True)
    return b, per_seed


_SEMANTICS = {"suppressed": "a cut-off worker trains on without the exchange",
              "stale": "a failed worker makes no progress and its first exchange after recovery carries its "
                       "old parameters"}
_RULE = {"full reset": "(h1, h2) = (1, 0) on each exchange that follows a failure",
         "master side": "(h1, h2) = (α, 0) on each exchange that follows a failure",
         "reset where stale": "(h1, h2) = (1, 0) on an exchange that follows a failure where the returning "
                              "worker's parameters are stale, else (α, α)"}


def _failures(data) -> str:
    """The failure model in words, from the preset the data were computed with."""
    def frac(x: float) -> str:
        return str(fractions.Fraction(x).limit_denominator(100))

    if data.get("failures", "iid") != "outages":
        return f"exchanges lost with probability {frac(_const(data, 'failure_p'))}"
    cfg = PRESETS.get(data.get("preset", ""))
    if cfg is None:  # stored data from a preset not in PRESETS: the defaults
        default = {f.name: f.default for f in dataclasses.fields(Preset)}
        (lo, hi), share = default["outage_lengths"], default["outage_fraction"]
    else:
        (lo, hi), share = cfg.outage_lengths, cfg.outage_fraction
    return (f"long outages: each worker loses blocks of {lo}–{hi} consecutive exchanges covering a fraction "
            f"{frac(share)} of its exchanges")


_RESAMPLED = ("each seed draws its own split, initial model, evaluation subset, minibatches, Hutchinson probes and "
              "failures")
_SHARED = ("the seeds vary minibatches and Hutchinson probes; the split, the initial model and the failure draws are "
           "shared")
# runs stored before each source had its own stream (delaylab.deahes.SOURCES)
_PAIRED = ("the split and the evaluation subset came from one generator seed, and the initial model from the root "
           "key of the minibatches")


def _seeding(data: dict) -> str:
    """What the seeds resample, in words, for the run behind ``data``."""
    if not data.get("resample", False):
        return _SHARED
    return _RESAMPLED + (", the minibatches and probes from one stream and every other source from its own"
                         if "sources" in data else f"; {_PAIRED}")


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


def _decisive_failure(parts):
    """Of the comparisons that do not hold, the one farthest past its bound, in half-widths of its
    corrected interval (the one that decides "does not hold" most clearly)."""
    def past(p) -> float:
        gap = abs(p.interval.mean) - p.margin if p.kind == "equal" else abs(p.interval.mean - p.margin)
        return gap / p.corrected.half if p.corrected.half > 0 else float("inf")

    return max((p for p in parts if p.verdict == FAILS), key=past)


def _deciding(v, where: dict) -> tuple:
    """(setting, words) of the comparison that decides verdict ``v``: the nearest to failing when
    it holds, the one farthest past its bound when it does not hold, else the first undecided."""
    if all(p.verdict == HOLDS for p in v.parts):  # it holds, or a step it compares sits at a grid's edge
        p = max(v.parts, key=_slack)
        return where[id(p)], f"nearest to failing: {p.name} {p.interval}"
    if v.verdict == FAILS:
        p = _decisive_failure(v.parts)
        return where[id(p)], f"{p.name} {p.interval} (corrected {p.corrected})"
    p = next(p for p in v.parts if p.verdict != HOLDS)
    return where[id(p)], f"e.g. {p.name} {p.interval}"


def _oracle_note(data: dict, R: dict, configs: list, loss: dict, reading: str) -> str:
    """What the oracle reading is, that it is our reconstruction, and what its rule does to a
    returning worker under the data's failure semantics, from the runs: the exchanges that follow a
    failure per run (counted on DEAHES-O's trace; every method of a seed shares its failure draws)
    and the oracle's final loss against EAHES-O's, which runs the same split and draws without it."""
    name = oracle_name(reading)
    note = (f"the oracle EAHES-OM is our reconstruction of the paper's (docs/theory.md §9.6), read as {reading}: "
            f"{_RULE[reading]}")
    if not all((P, m) in R for P in data["workers"] for m in ("DEAHES-O", "EAHES-O", name)):
        return note
    after, jobs = [], []
    for P in data["workers"]:
        pos, neg = (np.asarray(R[(P, "DEAHES-O")][k], np.float64) for k in ("positives", "negatives"))
        after.append(f"{pos.mean():.1f} at P = {P}")
        jobs.append(1.0 + float(np.mean(P * data["rounds"] - pos - neg)) / max(float(pos.mean()), 1e-12))
    after = ", ".join(after)
    suppressed = data.get("semantics", "suppressed") == "suppressed"
    if reading == "full reset" and suppressed:
        note += ("; under suppressed failures a cut-off worker trains on, so each reset replaces its parameters by the "
                 "master's and discards the progress of its jobs since its last delivered exchange (on average "
                 f"{min(jobs):.1f}–{max(jobs):.1f} jobs of τ local steps: one plus the failed exchanges per reset): "
                 f"{after} resets per run")
    elif reading == "full reset" or (reading == "reset where stale" and not suppressed):
        note += ("; under stale failures the returning worker carries its parameters from before the failure, which the "
                 f"reset replaces by the master's: {after} resets per run"
                 + ("; so every exchange after a failure resets, and its runs are the full reset's"
                    if reading == "reset where stale" else ""))
    elif reading == "master side":
        note += (f"; the master takes nothing from the returning worker on the {after} exchanges per run that follow a "
                 "failure, and the worker keeps its parameters, pulled by α" + (
                     " (under suppressed failures, its progress while cut off)" if suppressed else ""))
    else:
        note += ("; under suppressed failures a worker's parameters are never stale, so no exchange resets and the rule "
                 "is EASGD's: its runs are EAHES-O's, and its difference to EAHES-O is 0 by construction")
    gap = [loss[P, t, name] - loss[P, t, "EAHES-O"] for P, t in configs]
    return note + (f"; the oracle's final loss less EAHES-O's (mean over seeds) ranges over {min(gap):+.4f} to "
                   f"{max(gap):+.4f} across the {len(configs)} settings")


def _final(run: dict, key: str) -> np.ndarray:
    """[τ, seeds]: the last logged value."""
    return run[key][:, :, -1]


def still_falling(data: dict, label: str) -> Optional[tuple]:
    """(share, method, P, τ) of the mean training loss's largest fall over the last fifth of the
    logged rounds, as a share of its whole fall, where it exceeds ``claims.FLAT`` in η set ``label``
    (:func:`delaylab.claims.still_falling`); None where every curve has flattened. The paper
    states its claims where the curves have flattened ("rounds: enough for the curves to
    flatten"), so a run whose curves still fall judges them early: a check of the pipeline
    (docs/findings.md)."""
    curves = {(m, P, data["periods"][t]): curve for (P, m), run in _runs(data, label).items()
              for t, curve in enumerate(np.asarray(run["loss"], np.float64).mean(axis=1))}  # [τ, logs], mean over seeds
    got = claims.still_falling(data["round"], curves)
    return None if got is None else (got[0],) + got[1]


def _fall_shares(data: dict, label: str) -> list:
    """Every mean training-loss curve's fall over the last fifth, as a share of its whole fall
    (:func:`delaylab.claims.fall_share`; curves that did not fall left out), in η set ``label``."""
    out = [claims.fall_share(data["round"], curve) for run in _runs(data, label).values()
           for curve in np.asarray(run["loss"], np.float64).mean(axis=1)]
    return [f for f in out if np.isfinite(f)]


def _runs(data: dict, label: str) -> dict:
    """(P, method) -> run, of η set ``label``."""
    return {(P, m): run for (lab, P, m), run in data["runs"].items() if lab == label}


def _present(data: dict, label: str, P: int) -> list:
    """The methods with runs at P in η set ``label`` (in the figure's order)."""
    R = _runs(data, label)
    order = ["EASGD", "EAMSGD", "EAHES", "EAHES-O"] + [oracle_name(r) for r in data.get("oracles", ["full reset"])] + [
        "DEAHES-O"]
    return [m for m in order if (P, m) in R]


def _eta_words(data: dict, label: str) -> str:
    eta = data["eta"][label]
    if label == "tuned":
        return (f"η tuned per optimiser family on {data['tune_seeds']} tuning seeds (SGD family η = {eta['SGD']:.4g}, "
                f"AdaHessian family η = {eta['AdaHessian']:.4g})")
    return f"the paper's η = {_const(data, 'lr')} for every optimiser (untuned)"


def _outside(data: dict, label: str) -> str:
    """At a fixed η (the paper's), the families whose bracketed steps it lies outside, with their
    tuning scores: there that family trains far from its best, and a comparison with it measures
    the step as much as the method (empty where no family was tuned, or η lies inside)."""
    if label == "tuned" or not data.get("brackets"):
        return ""
    eta, out = data["eta"][label], []
    for f, b in data["brackets"].items():
        lo, hi = min(b["steps"]), max(b["steps"])
        if not lo <= eta[f] <= hi:
            edge = lo if eta[f] < lo else hi
            out.append(f"the {f} family's bracketed steps ({lo:.4g}–{hi:.4g}; the nearest, {edge:.4g}, scored "
                       f"{b['scores'][b['steps'].index(edge)]:.4f} on the tuning seeds against its best's "
                       f"{min(b['scores']):.4f})")
    if not out:
        return ""
    return (f"the fixed step η = {eta[next(iter(eta))]:.4g} lies outside " + " and ".join(out) + ": there that family trains far "
            "from its best, so a comparison with it measures the step as much as the method")


def _conditions(data: dict, label: str) -> str:
    resampled = data.get("resample", False)
    return (f"{data['preset']}: {data['dataset']}, P ∈ {{{', '.join(map(str, data['workers']))}}}, "
            f"τ ∈ {{{', '.join(map(str, data['periods']))}}}, {data['rounds']} rounds, {data['seeds']} seeds"
            + (" (each resampling every source" + (")" if "sources" in data else ", two pairs from one seed)")
               if resampled else " (minibatches and probes)")
            + f", {'long outages' if data.get('failures', 'iid') == 'outages' else 'i.i.d. losses 1/3'} "
            f"({data.get('semantics', 'suppressed')}), {_eta_words(data, label)}"
            + (f"; a0 calibrated on tuning seed {_const(data, 'calibration_seed')}" if data.get("tune_seeds", 0) else
               f"; a0 calibrated on seed {_const(data, 'calibration_seed')}, disjoint from the reported ones" if resampled else
               "; a0 calibrated on the reported seeds' shared draws (in sample)")
            + ("; this failure model was chosen after deahes-readings, as the one setting where the oracle's mean "
               "led" if data.get("failures", "iid") == "outages" else "")
            + "".join(f"; {x}" for x in (_outside(data, label),) if x))


def findings(data: dict) -> str:
    return _report(data)[0]


def verdicts(data: dict) -> list:
    """One row per claim judged, per η set (:data:`paper_figures._figure.VERDICT_KEYS`)."""
    return _report(data)[1]


def _report(data: dict) -> tuple:
    """(the figure's text, its verdict rows)."""
    lines = [f"DEAHES-O Figures 4–5 ({data['preset']} preset): {data['dataset']}, {data['train_size']} training / "
             f"{data['test_size']} test images, {data['rounds']} communication rounds, {data['seeds']} seeds ("
             + _seeding(data) + "), "
             + _failures(data) + f" ({data.get('semantics', 'suppressed')} semantics: "
             + _SEMANTICS[data.get("semantics", "suppressed")] + ")."]
    if data.get("brackets"):
        fams = "; ".join(f + ": " + ", ".join(ms) for f, ms in FAMILIES.items())
        lines.append(f"η per optimiser family ({fams}), bracketed on {data['tune_seeds']} tuning seeds (from "
                     f"{_const(data, 'calibration_seed')} on, disjoint from the reported ones) by the mean final training loss of the "
                     "family's methods over the tuning seeds, P ∈ {" + ", ".join(map(str, data["tune_workers"]))
                     + "} and every τ:")
        for f, b in data["brackets"].items():
            lines.append(f"  {f}: {claims.Bracket.from_stored(b).note()}; {resolution(b)}; steps "
                         + ", ".join(f"{s:.4g} ({v:.4f})" for s, v in zip(b["steps"], b["scores"])))
    table: list = []
    for label in data["sets"]:
        lines.append("")
        table += _judge(data, label, lines)
    if data.get("failures", "iid") == "outages":
        lines.append("The failure model (long outages, " + data.get("semantics", "suppressed") + " semantics) was chosen "
                     "after deahes-readings, where it was the one setting in which the oracle's mean led; the paper "
                     "reads failures as suppressed exchanges (docs/theory.md §9.6). The verdicts hold for this model only.")
    if data["preset"] != "full":
        lines.append(f"This is the {data['preset']} preset ({data['dataset']}, {data['rounds']} rounds): the curves may "
                     "not have flattened (see the figure), and the comparison may change over longer runs.")
    return "\n".join(lines) + "\n", table


def _tables(data: dict, label: str, methods: list) -> tuple:
    """(seeds, loss) of η set ``label``: (P, τ index, method) -> final training loss per seed, and
    its mean over seeds (None where the set lacks a run)."""
    R = _runs(data, label)
    if not all((P, m) in R for P in data["workers"] for m in methods):
        return None
    seeds = {(P, t, m): _final(R[(P, m)], "loss")[t].astype(np.float64)
             for P in data["workers"] for t in range(len(data["periods"])) for m in methods}
    return seeds, {k: float(v.mean()) for k, v in seeds.items()}


def _steps_text(at: dict) -> str:
    """A step setting's η per family (a family at that edge of its grid has none there)."""
    return ", ".join(f"{f} η = {at[f]:.4g}" if f in at else f"{f}: none (its grid's edge)" for f in FAMILIES)


def _reading(label: str, word: str, parts: list) -> str:
    """One step setting's reading of a claim: its word (marked thin where it rests on comparisons
    within two half-widths of their bound, :func:`delaylab.claims.thin`), its counts and the
    comparison that decides it."""
    if all(p.verdict == HOLDS for p in parts):
        p = max(parts, key=_slack)
        ev = f"nearest to failing: {p.name} {p.interval}"
    elif word == FAILS:
        p = _decisive_failure(parts)
        ev = f"{p.name} {p.interval} (corrected {p.corrected})"
    else:
        p = next(p for p in parts if p.verdict != HOLDS)
        ev = f"e.g. {p.name} {p.interval}"
    thin = " (thin: decided within two half-widths on fewer than 10 seeds)" if claims.thin(word, parts) else ""
    return f"{label}: {word}{thin} ({_counts(parts)}; {ev})"


def _judge(data: dict, label: str, lines: list) -> list:
    """The claims at η set ``label``: its text appended to ``lines``; returns its verdict rows. At
    the tuned set, each claim is also judged at each family's grid neighbours the data hold
    (``data["settings"]``, :func:`delaylab.deahes.step_settings`), and its verdict is the tuned one
    only where all agree (:func:`paper_figures.catalogue.verdict`)."""
    R = _runs(data, label)
    table: list = []
    methods = [m for m in _present(data, label, data["workers"][0])
               if all(m in _present(data, label, P) for P in data["workers"])]
    gate = {f: claims.Bracket.from_stored(b) for f, b in data.get("brackets", {}).items()} if label == "tuned" else {}
    # the neighbours' settings (delaylab.deahes.step_settings; a common η of an earlier layout is no reading)
    settings = ({k: v for k, v in data.get("settings", {}).items() if k.startswith("neighbours")}
                if label == "tuned" else {})
    semantics = data.get("semantics", "suppressed")
    lines += [f"At {_eta_words(data, label)}: final master training loss and test accuracy (mean ± sample standard deviation over seeds):",
              f"{'P':>2s} {'τ':>2s} " + " ".join(f"{m:>17s}" for m in methods)]
    for P in data["workers"]:
        for t, tau in enumerate(data["periods"]):
            lo = " ".join(f"{_final(R[(P, m)], 'loss')[t].mean():8.4f}±{_final(R[(P, m)], 'loss')[t].std(ddof=1):<8.4f}" for m in methods)
            ac = " ".join(f"{_final(R[(P, m)], 'accuracy')[t].mean():8.4f}±{_final(R[(P, m)], 'accuracy')[t].std(ddof=1):<8.4f}" for m in methods)
            lines.append(f"{P:2d} {tau:2d} {lo}   (loss)")
            lines.append(f"{'':2s} {'':2s} {ac}   (accuracy)")
    configs = [(P, t) for P in data["workers"] for t in range(len(data["periods"]))]
    seeds, loss = _tables(data, label, methods)
    at = "at tuned η" if label == "tuned" else f"at η = {_const(data, 'lr')}"

    def claim(cid, text, needs, comparisons, margin=0.0, oracle=None, reference=None):
        """comparisons(seeds, loss, P, t) -> [(name, d)]; the claim must hold in every setting: one
        verdict of the catalogue (:func:`paper_figures.catalogue.verdict`) whose parts are all
        settings' comparisons, so that "does not hold" is judged at the Bonferroni level of all of
        them (at tuned η, inconclusive where a family's step it compares sits at a grid's edge, or
        where another step setting gives another word); then each setting's comparisons that decide
        it, and at tuned η each step setting's reading. ``oracle``: the oracle reading it compares.
        ``reference``: (method, other) for a non-inferiority of ``other`` to ``method``, which says
        nothing of closeness to the best where ``method`` is itself worse than ``other``: then it
        is inconclusive, set by the reconstruction."""
        missing = [m for m in needs if m not in methods]
        if missing:
            lines.append(f"- {text}: not judged (this run lacks {', '.join(missing)}).")
            return
        # an oracle reading whose runs are another method's adds no measurement of its own: its
        # comparisons are that method's (or 0 by construction, where that method is compared too)
        alias = {m: same_runs(m, semantics) for m in needs if same_runs(m, semantics) is not None}
        if alias:
            zero = any(a in needs for a in alias.values())
            lines.append(f"- {text}: not judged: under {semantics} failures "
                         + ", ".join(f"{m}'s runs are {a}'s" for m, a in alias.items())
                         + " (delaylab.deahes.same_runs), so "
                         + (f"its comparison with {', '.join(a for a in alias.values() if a in needs)} is 0 by "
                            "construction, and its others are that method's." if zero else
                            "this reading adds no measurement of its own (its comparisons are that method's)."))
            return
        per = {(P, t): comparisons(seeds, loss, P, t) for P, t in configs}
        steps, tuned, unmeasured = None, False, []
        if label == "tuned":
            at_steps = {}
            for lab in settings:
                tab = _tables(data, lab, list(needs))
                if tab is None:
                    unmeasured.append(lab)
                else:
                    at_steps[lab] = [c for P, t in configs for c in comparisons(*tab, P, t)]
            steps, tuned = claims.split_settings({"tuned": None, **at_steps})[1], None
        v = catalogue.verdict(cid, [c for P, t in configs for c in per[P, t]], margin=margin, steps=steps, at_tuned_steps=tuned,
                              gate=[gate[f] for f in sorted({family(m) for m in needs}) if f in gate])
        if reference is not None:
            ref, other = reference
            v = catalogue.unless_reference_worse(
                v, [(f"P = {P}, τ = {data['periods'][t]}", (seeds[P, t, ref] - seeds[P, t, other]) / loss[P, t, ref])
                    for P, t in configs], ref, other)
        if falling is not None:
            v = catalogue.inconclusive_because(v, falling_why)
        it = iter(v.parts)
        got = {key: [next(it) for _ in per[key]] for key in configs}
        lines.append(f"- {text}: {v.verdict} ({_counts(v.parts)}, over {len(configs)} settings"
                     + (f"; {v.reason}" if v.reason else "") + ").")
        p0 = v.parts[0] if v.parts else None
        if p0 is not None and 2 <= p0.interval.n < 10:
            n = p0.interval.n
            se = [abs(p.interval.mean - p.margin) / (p.interval.half / claims.decisive_t(n, p.level) * 2)
                  for p in v.parts if p.interval.half > 0]
            lines.append(f"    (on {n} seeds a word stands, not thin, only where a comparison's mean lies at least "
                         f"{claims.decisive_t(n, p0.level):.1f} standard errors from its bound to hold, and "
                         f"{claims.decisive_t(n, p0.corrected_level):.0f} at the level corrected over the claim's "
                         f"{len(v.parts)} comparisons not to hold"
                         + (f"; at these steps the farthest of its comparisons lies {max(se):.1f} standard errors "
                            "from it" if se
                            else "") + "; from 10 seeds on the two-half-width rule no longer applies)")
        for (P, t), ps in got.items():
            lines.append(f"    P = {P}, τ = {data['periods'][t]}: " + _shown(ps))
        for lab, (word, ps) in (v.readings or {}).items() if label == "tuned" and data.get("settings") else ():
            key = "tuned" if lab == "tuned steps" else lab
            lines.append(f"    step setting {_reading(lab, word, ps)} at {_steps_text(data['settings'][key])}")
        for lab in unmeasured:
            lines.append(f"    step setting {lab}: not measured (a family it compares has no grid step on that side "
                         "of its tuned η: an edge)")
        where = {id(p): key for key, ps in got.items() for p in ps}
        key, ev = _deciding(v, where)
        table.append(v.row(f"{text}, {at}", f"{_counts(v.parts)}; {ev} at P = {key[0]}, τ = {data['periods'][key[1]]}",
                           _conditions(data, label)
                           + (f"; {_oracle_note(data, R, configs, loss, oracle)}" if oracle else "")))

    def below_each(a, others):
        return lambda S, L, P, t: [(f"{a} − {b}", S[P, t, a] - S[P, t, b]) for b in others]

    outside = _outside(data, label)
    if outside:
        lines.append(outside[:1].upper() + outside[1:] + ".")
    falling = still_falling(data, label)
    falling_why = "" if falling is None else claims.still_falling_reason(
        f"{falling[1]} at P = {falling[2]}, τ = {falling[3]}", falling[0])
    if falling is not None:
        shares = _fall_shares(data, label)
        every = (f" (every one of the {len(shares)} mean curves still fell by at least {min(shares):.1%}: at this "
                 "preset's length no claim can be judged)" if shares and min(shares) > claims.FLAT else "")
        lines.append(falling_why[:1].upper() + falling_why[1:] + every + ": every verdict below is inconclusive "
                     "whatever its word.")
    lines.append(f"The paper's claims at {_eta_words(data, label)}, judged by the final training loss: paired "
                 f"differences over the {data['seeds']} seeds (a seed gives every method the same initial model, "
                 "minibatch and probe keys and failure draws, and the methods on disjoint and on overlapping shards "
                 "that seed's split of each kind), mean ± "
                 "half-width of the 95% Student-t interval. A claim must hold in every setting, and is one verdict "
                 "over all its comparisons (paper_figures.catalogue): it holds when every comparison's 95% interval "
                 "lies on its side (of 0, or of the margin), does not hold when some comparison lies wholly on the "
                 "other side at the Bonferroni level 1 − 0.05/k over all k comparisons of the claim (the corrected "
                 "interval is shown), and is inconclusive otherwise"
                 + (" or where a step it compares sits at its grid's edge" if gate else "")
                 + ("; at tuned η a verdict stands only where each family's grid neighbours of its tuned η give "
                    "the same word (no common η: the two families' steps share no scale, and within a family the "
                    "tuned η is common)" if label == "tuned" else "; at the paper's η every method runs at one fixed "
                    "step, untuned, so no other step is asked for")
                 + "; and none decides within two half-widths of its bound on fewer than 10 seeds.")
    claim("adahessian-beats-sgd", "AdaHessian methods beat the SGD methods (each of EAHES, EAHES-O, EAHES-OM (full "
          "reset), DEAHES-O below both EASGD and EAMSGD)", HESSIAN + ("EASGD", "EAMSGD"),
          lambda S, L, P, t: [c for h in HESSIAN for c in below_each(h, ("EASGD", "EAMSGD"))(S, L, P, t)],
          oracle="full reset")
    claim("overlap-helps", "Overlap helps (EAHES-O below EAHES)", ("EAHES-O", "EAHES"),
          below_each("EAHES-O", ("EAHES",)))
    others = ("EASGD", "EAMSGD", "EAHES", "EAHES-O", "DEAHES-O")
    readings = data.get("oracles", ["full reset"])
    for r in readings:
        claim("oracle-best", f"The oracle EAHES-OM ({r}) is the best of the six", (oracle_name(r),) + others,
              below_each(oracle_name(r), others), oracle=r)
    claim("deahes-beats-baselines", "DEAHES-O beats EASGD, EAMSGD, EAHES and EAHES-O",
          ("DEAHES-O", "EASGD", "EAMSGD", "EAHES", "EAHES-O"), below_each("DEAHES-O", ("EASGD", "EAMSGD", "EAHES", "EAHES-O")))
    for r in readings:
        om = oracle_name(r)
        claim("deahes-close-to-oracle", f"DEAHES-O comes close to the oracle ({r}): no worse than it by more than "
              f"{_const(data, 'equal_margin'):.0%} of its loss (non-inferiority, on DEAHES-O − EAHES-OM relative to the oracle's mean "
              "loss in each setting)", ("DEAHES-O", om),
              lambda S, L, P, t, om=om: [(f"(DEAHES-O − {om}) / {L[P, t, om]:.4f}",
                                          (S[P, t, "DEAHES-O"] - S[P, t, om]) / L[P, t, om])],
              margin=_const(data, 'equal_margin'), oracle=r, reference=(om, "DEAHES-O"))
    if "DEAHES-O" in methods and "EAHES-O" in methods:
        same = [(P, data["periods"][t], int(np.sum(np.all(R[(P, "DEAHES-O")]["loss"][t] == R[(P, "EAHES-O")]["loss"][t],
                                                           axis=-1))))
                for P, t in configs]
        lines.append("Did DEAHES-O's rule stay idle? It runs EAHES-O's arithmetic on the same draws, so where its "
                     "weights never left (α, α) its loss curve can equal EAHES-O's bit for bit: an identical curve "
                     "shows the rule idle, while a different one shows only that it fired or that the two programs "
                     "rounded differently (this check cannot tell those apart). Runs (of "
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
                     f"a0 = {_const(data, 'kappa'):g} × the spread of a without failures):")
        for P in data["workers"]:
            for t, tau in enumerate(data["periods"]):
                aucs = ", ".join(f"{np.nanmean(R[(P, m)]['auc'][t]):.3f} on {m}" for m in scored)
                after = (f" ({float(np.mean(R[(P, 'DEAHES-O')]['positives'][t])):.1f} exchanges after a failure per run)"
                         if "DEAHES-O" in scored else "")
                lines.append(f"  P = {P}, τ = {tau}: a0 = {data['a0'][(label, P)][t]:.3g}; AUC {aucs}{after}")
    return table


_COLORS = {"EASGD": "tab:gray", "EAMSGD": "tab:brown", "EAHES": "tab:blue", "EAHES-O": "tab:green",
           "EAHES-OM": "tab:purple", "EAHES-OM (master side)": "tab:pink", "EAHES-OM (reset where stale)": "tab:olive",
           "DEAHES-O": "tab:red"}


def plot(data: dict, path: str) -> None:
    """Loss and accuracy curves per (P, τ): the first η set (tuned, where tuned) with ± std bands,
    the other as thin dashed lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(P, key) for P in data["workers"] for key in ("loss", "accuracy")]
    fig, axes = plt.subplots(len(rows), len(data["periods"]), figsize=(13, 3.0 * len(rows)), dpi=110, squeeze=False)
    x = data["round"]
    for r, (P, key) in enumerate(rows):
        for c, tau in enumerate(data["periods"]):
            ax = axes[r, c]
            for k, label in enumerate(data["sets"]):
                for m in _present(data, label, P):
                    v = data["runs"][(label, P, m)][key][c]  # [seeds, logs]
                    mean, std = v.mean(0), v.std(0)
                    if k == 0:
                        ax.plot(x, mean, color=_COLORS[m], lw=1.3, label=m)
                        ax.fill_between(x, mean - std, mean + std, color=_COLORS[m], alpha=0.15)
                    else:
                        ax.plot(x, mean, color=_COLORS[m], lw=0.8, ls="--")
            ax.set_title(f"P = {P}, τ = {tau}", fontsize=9)
            ax.set_xlabel("communication round")
            ax.set_ylabel("master training loss" if key == "loss" else "test accuracy")
            if key == "loss":
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    lost = "long outages" if data.get("failures", "iid") == "outages" else "exchanges lost w.p. 1/3"
    sets = "; ".join(("solid: " if k == 0 else "dashed: ") + _eta_words(data, label) for k, label in enumerate(data["sets"]))
    fig.suptitle(f"Elastic averaging with {lost} ({data.get('semantics', 'suppressed')}): {data['dataset']} ({data['preset']} preset, "
                 f"mean ± std over {data['seeds']} seeds)" + (f"\n{sets}" if len(data["sets"]) > 1 else ""), fontsize=10)
    save_figure(fig, path)


def save_data(path: str, data: dict) -> None:
    """Every curve of every seed, the detector scores, a0 and the tuning brackets, as a plain .npz
    (:func:`paper_figures._figure.save_data`: no pickles)."""
    from delaylab.paper_figures._figure import save_data as save

    save(path, data)


_META = ("preset", "dataset", "rounds", "seeds", "train_size", "test_size", "semantics", "failures", "resample")


def load_data(path: str) -> dict:
    """The inverse of :func:`save_data`; a file of the earlier layout (one η set, the paper's; the
    full-reset oracle alone; keys ``run_P{P}_{method}_{key}``) is read into the same structure."""
    from delaylab.paper_figures._figure import load_data as load

    with np.load(path, allow_pickle=False) as z:
        if "structure" in z.files:
            return load(path)
        data = {k: z[f"meta_{k}"].item() for k in _META if f"meta_{k}" in z.files}  # older files lack some
        data.update(round=z["round"], periods=z["periods"].tolist(), workers=z["workers"].tolist(), runs={},
                    sets=["paper"], eta={"paper": {f: LR for f in FAMILIES}}, brackets={}, oracles=["full reset"],
                    tune_seeds=0, a0={})
        for P in data["workers"]:
            data["a0"][("paper", P)] = z[f"a0_P{P}"]
            for m in METHODS:
                pre = f"run_P{P}_{m}_"
                run = {k[len(pre):]: z[k] for k in z.files if k.startswith(pre)}
                if not run:  # a run of some of the methods only
                    continue
                run["seconds"], run["diverged"] = float(run["seconds"]), int(run["diverged"])
                data["runs"][("paper", P, m)] = run
    return data


def rows(data: dict) -> list[dict]:
    """The seed means of every curve, one row per evaluation round (columns prefixed by the η set
    where there are two)."""
    out = []
    for j, r in enumerate(data["round"]):
        row = {"round": float(r)}
        for label in data["sets"]:
            pre = f"{label} " if len(data["sets"]) > 1 else ""
            for P in data["workers"]:
                for t, tau in enumerate(data["periods"]):
                    for m in _present(data, label, P):
                        run = data["runs"][(label, P, m)]
                        row[f"{pre}P{P} tau{tau} {m} loss"] = float(run["loss"][t, :, j].mean())
                        row[f"{pre}P{P} tau{tau} {m} accuracy"] = float(run["accuracy"][t, :, j].mean())
        out.append(row)
    return out


def stem(data: dict) -> str:
    if data["preset"].startswith("medium"):  # medium, medium-outages
        return "deahes_" + data["preset"].replace("-", "_")
    semantics = data.get("semantics", "suppressed")
    return "deahes" if semantics == "suppressed" else f"deahes_{semantics}"


FIGURE = Figure("deahes", "DEAHES-O Figs. 4-5: elastic averaging with AdaHessian under failures, P ∈ {4, 8}, τ up to 4",
                PRESETS, compute, plot, findings, rows, stem=stem, module=__file__, convolution=True, save=save_data,
                load=load_data, verdicts=verdicts)
