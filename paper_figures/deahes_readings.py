"""Which reading of DEAHES-O reproduces the paper? A reconstruction study.

The paper's body (its equations for the trend a and the weight maps h1, h2) is not available to
us (docs/theory.md §9.6), so the weight map and the oracle are reconstructions. This figure runs
every reading of them on the same settings and judges the paper's claims under each (:func:`compute`):

* DEAHES-O readings (``algos.elastic.DynamicWeights``): the ramp starts at a = 0, −a0 or −2 a0; h1's
  cap is 1, 0.5 or α; a0 = ``KAPPA`` × the spread of a in a failure-free run of a tuning seed.
  Oracle readings (EAHES-OM, ``delaylab.deahes.ORACLES``): full reset (1, 0) after a failure, master
  side only (α, 0), or reset where stale: (1, 0) only where the worker's parameters are stale.
* Failure models (``sim.schedules``): exchanges lost independently with probability 1/3
  (``with_failures``), or long outages (``with_outages``: per worker, separate blocks of 5–20 rounds
  covering a third of training; on the quick preset's 36 rounds, 5–12 rounds, often one of 12).
* Semantics (``algos.elastic``): "suppressed" (a cut-off worker trains on, unheard) or "stale"
  (it makes no progress, and restarts from its model at the outage's start).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import numpy as np

from delaylab import claims as claims_lib
from delaylab.algos import metrics
from delaylab.claims import FAILS, HOLDS
from delaylab.deahes import (ALPHA, CALIBRATION_SEED, FAMILIES, KAPPA, LR, ORACLES, SOURCES, algorithms, dataset,
                             family, keys, oracle_name, problems, resolution, same_runs, schedules_for, step_settings,
                             stored_bracket, tune)
from delaylab.paper_figures import catalogue
from delaylab.paper_figures._figure import Figure, Parts


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    data: str  # "digits" or "mnist-format"
    workers: int
    period: int
    rounds: int
    seeds: int
    eval_size: Optional[int]
    log_rounds: int
    batching: str = "vmap"
    outage_lengths: tuple = (5, 20)  # rounds
    outage_fraction: float = 1.0 / 3.0
    train_size: Optional[int] = None
    test_size: Optional[int] = None
    pool: int = 1  # images averaged over pool × pool pixel blocks (delaylab.deahes.dataset)
    # η bracketed per optimiser family (delaylab.deahes.FAMILIES) on this many tuning seeds, disjoint
    # from the reported ones; 0: the paper's η alone
    tune_seeds: int = 3
    refine: int = 1  # claims.bracket's refinement rounds once the best η is interior
    max_extend: int = 3  # η added past a grid's edge at most, on each side
    tie: float = 0.02  # tuning scores within 2% of the best count as tied with it (as delaylab.deahes.Preset)


PRESETS = {p.name: p for p in (
    # quick: P = 4, τ = 1 (the paper's main period), 36 rounds so that outages of 5-20 rounds fit
    # logged every 3 rounds: the short-run rule (delaylab.claims.still_falling) reads the last fifth
    Preset("quick", data="digits", workers=4, period=1, rounds=36, seeds=3, eval_size=720, log_rounds=3),
    Preset("full", data="mnist-format", workers=4, period=4, rounds=120, seeds=5, eval_size=10000, log_rounds=10,
           batching="map"),
)}

READINGS = {  # DEAHES-O: (dead zone in units of a0, h1's cap; None: α)
    "no dead zone, cap 1": (0.0, 1.0),
    "dead zone a0, cap 1": (1.0, 1.0),
    "dead zone a0, cap 0.5 (default)": (1.0, 0.5),
    "dead zone 2 a0, cap 1": (2.0, 1.0),
    "no dead zone, cap α (master side)": (0.0, None),
}
DEFAULT_READING = "dead zone a0, cap 0.5 (default)"
FAILURE_MODELS = ("iid 1/3", "outages")
SEMANTICS = ("suppressed", "stale")
BASELINES = ("EASGD", "EAMSGD", "EAHES", "EAHES-O")
EQUAL_MARGIN = 0.02  # "equal": within 2% of EAHES-O's failure-free loss
H1_TOLERANCE = 0.10
TUNING = ("suppressed", "iid 1/3")  # the setting whose runs score η: the paper's reading of its failures


def _reading_hparams(a0: float, tau: int, eta: float) -> dict:
    """One sweep over the readings at step η (traced hyperparameters: one compiled program)."""
    starts = [-z * a0 for z, _ in READINGS.values()]
    caps = [ALPHA if c is None else c for _, c in READINGS.values()]
    n = len(READINGS)
    return {"period": np.full(n, tau, np.int32), "learning_rate": np.full(n, eta, np.float32),
            "a0": np.full(n, a0, np.float32), "a_start": np.asarray(starts, np.float32),
            "h1_cap": np.asarray(caps, np.float32)}


def _hp(tau: int, eta: float) -> dict:
    return {"period": np.asarray([tau], np.int32), "learning_rate": np.asarray([eta], np.float32)}


def _om(reading: str) -> str:
    return f"EAHES-OM ({reading})"


def _algorithms(cfg: Preset, semantics: str) -> dict:
    """name -> (algorithm, split) under ``semantics``, the oracle readings named "EAHES-OM (reading)"."""
    names = {oracle_name(r): _om(r) for r in ORACLES}
    return {names.get(m, m): v for m, v in algorithms(cfg.workers * cfg.rounds, semantics, oracles=ORACLES).items()}


def _members(fam: str) -> list:
    """The methods whose runs score family ``fam``'s η (the oracle at its full reset, the paper's)."""
    return [_om("full reset") if m == "EAHES-OM" else m for m in FAMILIES[fam]]


def _setup(cfg: Preset, seed: int, data) -> tuple:
    """(problems, failure-free schedule, {failure model: failing schedule}, keys) of one seed: its
    own split, overlap subset, initial model, evaluation subset, failure draws of each model and
    minibatch key, each from its own stream (:data:`delaylab.deahes.SOURCES`)."""
    _, Xtr, ytr, Xte, yte = data
    P = cfg.workers
    clean, iid = schedules_for(P, cfg, seed=seed, failures="iid")
    _, outages = schedules_for(P, cfg, seed=seed, failures="outages")
    return problems(P, cfg, Xtr, ytr, Xte, yte, seed=seed), clean, {"iid 1/3": iid, "outages": outages}, keys(seed)


def _run(cfg: Preset, alg, problem, schedule, hp: dict, keys, log_rounds: Optional[int] = None):
    from delaylab import sim

    return sim.sweep(alg, problem, schedule, keys=keys, hparams=hp, runs="map", batching=cfg.batching,
                     log_every=cfg.workers * (log_rounds or cfg.log_rounds))


def _final(res) -> np.ndarray:
    return np.asarray(res.metrics["loss"], np.float64)[:, 0, -1]


def _curve(res) -> np.ndarray:
    """[runs, logs]: the master's training loss at every log (the short-run rule reads it)."""
    return np.asarray(res.metrics["loss"], np.float64)[:, 0]


def _calibrate(cfg: Preset, data, eta: float) -> dict:
    """a0 at step η [CHOICE]: ``KAPPA`` × the spread of the trend a (a = 0 entries left out) in a
    failure-free EAHES-O run on the first tuning seed, ``CALIBRATION_SEED`` (its own split, initial
    model and minibatches: no reported seed is seen), with the trend's mean and spread."""
    probs, clean, _, keys = _setup(cfg, CALIBRATION_SEED, data)
    res = _run(cfg, _algorithms(cfg, "suppressed")["EAHES-O"][0], probs["overlap"], clean, _hp(cfg.period, eta),
               keys, log_rounds=cfg.rounds)
    a = np.asarray(res.state.trace_a, np.float64)[0, 0]
    a = a[a != 0.0]
    return {"a0": float(KAPPA * a.std()), "a_mean": float(a.mean()), "a_sd": float(a.std())}


def _tuning_run(cfg: Preset, data, seed: int, method: str, eta: float, a0: Optional[float]) -> dict:
    """One tuning run: ``method`` at step η on tuning seed ``seed`` in the setting ``TUNING``
    (DEAHES-O at its default reading, with ``a0``); its final training loss."""
    semantics, fm = TUNING
    probs, _, failing, keys = _setup(cfg, seed, data)
    alg, split = _algorithms(cfg, semantics)[method]
    hp = _hp(cfg.period, eta)
    if method == "DEAHES-O":
        hp = {k: v[[list(READINGS).index(DEFAULT_READING)]] for k, v in _reading_hparams(a0, cfg.period, eta).items()}
    return {"loss": float(_final(_run(cfg, alg, probs[split], failing[fm], hp, keys))[0])}


def _seed_part(cfg: Preset, seed: int, data, eta: dict, a0: float, progress: bool) -> dict:
    """The reported runs of one seed at the steps ``eta`` (family -> η), DEAHES-O's readings with
    ``a0``: the sanity check's failure-free pair, then every method under each semantics and
    failure model, with the delivered exchanges that follow a failure (the oracle's resets)."""
    P, tau = cfg.workers, cfg.period
    probs, clean, failing, keys = _setup(cfg, seed, data)

    def run(alg, split, sched, hp):
        return _run(cfg, alg, probs[split], sched, hp, keys)

    def per_exchange(res, stat):  # a worker statistic's mean over the delivered exchanges, per run
        st = res.worker_stats
        return np.asarray(st[stat], np.float64)[:, 0].sum(-1) / np.asarray(st["exchanged"], np.float64)[:, 0].sum(-1)

    def ramp_use(res):  # the mean ramp position s over delivered exchanges: 1 − mean(h2)/α (0: never fired)
        return 1.0 - per_exchange(res, "h2") / ALPHA

    ah = eta["AdaHessian"]
    out = {"lost": {fm: float(np.mean(~s.delivered)) for fm, s in failing.items()}, "attempts": P * cfg.rounds}
    algs = _algorithms(cfg, "suppressed")
    # the sanity check's pair: EAHES-O and DEAHES-O without failures
    out["clean_eahes_o"] = float(_final(run(algs["EAHES-O"][0], "overlap", clean, _hp(tau, ah)))[0])
    sane = run(algs["DEAHES-O"][0], "overlap", clean, _reading_hparams(a0, tau, ah))
    out["clean_deahes_o"], out["clean_h1"], out["clean_ramp"] = _final(sane), per_exchange(sane, "h1"), ramp_use(sane)
    losses, curves, h1s, ramps, aucs, after, delivered = {}, {}, {}, {}, {}, {}, {}
    for semantics in SEMANTICS:
        algs = _algorithms(cfg, semantics)
        for fm, sched in failing.items():
            for name, (alg, split) in algs.items():
                if name == _om("reset where stale"):
                    continue  # its runs are EAHES-O's or the full reset's (delaylab.deahes.same_runs): below
                lr = eta[family(name)]
                res = run(alg, split, sched, _reading_hparams(a0, tau, lr) if name == "DEAHES-O" else _hp(tau, lr))
                losses[(semantics, fm, name)] = _final(res)
                curves[(semantics, fm, name)] = _curve(res)
                out["round"] = np.asarray(res.metrics["events"], np.float64) / P
                if name == "DEAHES-O":
                    h1s[(semantics, fm)], ramps[(semantics, fm)] = per_exchange(res, "h1"), ramp_use(res)
                if name == "EAHES-O":
                    det = metrics.detection_auc(res.state)
                    aucs[(semantics, fm)] = float(det["auc"][0, 0])
                    after[(semantics, fm)] = int(det["positives"][0, 0])
                    delivered[(semantics, fm)] = int(det["positives"][0, 0] + det["negatives"][0, 0])
            alias = same_runs(oracle_name("reset where stale"), semantics)
            twin = _om("full reset") if alias == oracle_name("full reset") else alias
            losses[(semantics, fm, _om("reset where stale"))] = losses[(semantics, fm, twin)]
            curves[(semantics, fm, _om("reset where stale"))] = curves[(semantics, fm, twin)]
            if progress:
                print(f"  deahes-readings: seed {seed}, {semantics}, {fm}: done", flush=True)
    out.update(loss=losses, curve=curves, h1=h1s, ramp=ramps, auc=aucs, after_failure=after, delivered=delivered)
    return out


def compute(preset: Preset, parts: Parts, *, data_path: Optional[str] = None, progress: bool = True) -> dict:
    """Every reading of DEAHES-O and of the oracle (:data:`READINGS`, :data:`ORACLES`) under both
    semantics and failure models, at η tuned per optimiser family and at the paper's η = 0.01,
    each seed one resumable part per η set (:func:`_seed_part`).

    Seeds: the reported seeds 0, 1, … and the tuning seeds 10,000, … each draw their own split,
    overlap subset, initial model, evaluation subset, minibatches, probes and failures; within a
    seed every method sees the same draws. η is bracketed per family (:func:`delaylab.deahes.tune`)
    by the mean final loss of the family's methods over the tuning seeds in the setting ``TUNING``;
    a0 at each η comes from the first tuning seed (:func:`_calibrate`), so nothing fitted sees a
    reported seed and the sanity check (without failures DEAHES-O equals EAHES-O) is out of sample.
    The claims and the sanity check: :func:`claims`, :func:`sanity`."""
    data = dataset(preset, data_path)
    tune_seeds, report = claims_lib.disjoint_seeds(preset.tune_seeds, preset.seeds)
    base = dict(preset=preset, dataset=data[0], readings=READINGS)

    def say(what: str, got: dict, reused: bool) -> None:
        if progress:
            print(f"  deahes-readings: {what}; " + ("stored part reused" if reused else f"{got['seconds']:.0f} s"),
                  flush=True)

    def calibration(eta: float) -> dict:
        got, reused = parts.get(f"calibration_eta{eta:.6g}", {**base, "eta": float(eta), "seed": CALIBRATION_SEED},
                                lambda: _calibrate(preset, data, eta))
        say(f"η = {eta:.4g}: a0 = {got['a0']:.3g} on seed {CALIBRATION_SEED}", got, reused)
        return got

    def tuning_run(seed: int, m: str, eta: float, a0: Optional[float]) -> float:
        name = f"tune_{m.replace(' ', '_')}_eta{eta:.6g}_seed{seed}"
        got, reused = parts.get(name, {**base, "method": m, "eta": float(eta), "seed": seed, "a0": a0},
                                lambda: _tuning_run(preset, data, seed, m, eta, a0))
        say(f"tuning seed {seed} η = {eta:.4g} {m}: final loss {got['loss']:.4f}", got, reused)
        return got["loss"]

    brackets = {}
    for fam in FAMILIES if tune_seeds else ():
        def seed_scores(eta: float, fam=fam) -> list:
            a0 = calibration(eta)["a0"] if "DEAHES-O" in _members(fam) else None
            return [float(np.mean([tuning_run(s, m, eta, a0) for m in _members(fam)])) for s in tune_seeds]

        brackets[fam] = stored_bracket(*tune(fam, seed_scores, preset), preset.tie)
        if progress:
            print(f"  deahes-readings: {fam} family: {claims_lib.Bracket.from_stored(brackets[fam]).note()}; "
                  f"{resolution(brackets[fam])}", flush=True)
    sets = {"paper": {f: LR for f in FAMILIES}}
    settings: dict = {}
    if brackets:
        settings = step_settings({f: claims_lib.Bracket.from_stored(b) for f, b in brackets.items()})
        # every reading's claims compare across the families: a neighbour setting needs both
        settings = {k: v for k, v in settings.items() if set(v) == set(FAMILIES)}
        sets = {"tuned": settings["tuned"], **sets}
    by_set = {}
    for label, eta in {**sets, **{k: v for k, v in settings.items() if k != "tuned"}}.items():
        cal = calibration(eta["AdaHessian"])
        seeds = []
        for s in report:
            inputs = {**base, "seed": s, "eta": {f: float(v) for f, v in eta.items()}, "a0": cal["a0"]}
            got, reused = parts.get(f"{_SLUGS.get(label, label)}_seed{s}", inputs,
                                    lambda s=s: _seed_part(preset, s, data, eta, cal["a0"], progress))
            say(f"η set {label}, seed {s}", got, reused)
            seeds.append(got)
        by_set[label] = {"eta": dict(eta), "calibration": {k: cal[k] for k in ("a0", "a_mean", "a_sd")}, "seeds": seeds}
    return {"preset": preset.name, "dataset": data[0], "workers": preset.workers, "period": preset.period,
            "rounds": preset.rounds, "readings": list(READINGS), "oracles": list(ORACLES), "tune_seeds": len(tune_seeds),
            "sources": list(SOURCES),
            "sets": list(sets), "brackets": brackets, "by_set": by_set, "settings": settings}


_SLUGS = {"neighbours −": "below", "neighbours +": "above"}  # parts' file names


# --- verdicts ----------------------------------------------------------------------------------


def views(data: dict) -> dict:
    """η set label -> its data as one set of runs: ``seeds`` (one dict per reported seed), ``eta``
    (family -> η) and ``calibration`` (a0 and the trend it came from) beside the figure's own keys.
    Data of the earlier layout (one set, the paper's η, a0 per seed) is its one view, "paper"."""
    if "by_set" not in data:
        return {"paper": {**data, "eta": {f: LR for f in FAMILIES}, "label": "paper"}}
    shared = {k: data[k] for k in ("preset", "dataset", "workers", "period", "rounds", "readings", "oracles",
                                   "brackets", "sources") if k in data}

    def view(label: str) -> dict:
        return {**shared, **data["by_set"][label], "label": label, "tune_seeds": data["tune_seeds"]}

    # the tuned set's neighbours (delaylab.deahes.step_settings), which its verdicts are judged at too
    others = {k: view(k) for k in data.get("settings", {}) if k.startswith("neighbours") and k in data["by_set"]}
    return {label: {**view(label), **({"others": others, "settings": data["settings"]} if label == "tuned" else {})}
            for label in data["sets"]}


def _loss(data, semantics, fm, name, reading=None) -> np.ndarray:
    """Final loss over seeds; DEAHES-O's at one reading (its index in READINGS)."""
    v = np.asarray([s["loss"][(semantics, fm, name)] for s in data["seeds"]], np.float64)
    return v[:, data["readings"].index(reading)] if name == "DEAHES-O" else v[:, 0]


def _settings() -> list:
    """The (semantics, failure model) pairs every claim is judged over, as one verdict."""
    return [(sem, fm) for sem in SEMANTICS for fm in FAILURE_MODELS]


def sanity(data, gate=()) -> dict:
    """reading -> (the catalogue's verdict on "without failures DEAHES-O equals EAHES-O", mean h1
    per seed, whether h1 stayed within ``H1_TOLERANCE`` of α). The equivalence is judged on the
    paired differences relative to EAHES-O's mean loss, against the margin ``EQUAL_MARGIN``;
    ``gate``: the brackets of the tuned steps it compares."""
    base = np.asarray([s["clean_eahes_o"] for s in data["seeds"]], np.float64)
    out = {}
    for r, name in enumerate(data["readings"]):
        d = np.asarray([s["clean_deahes_o"][r] for s in data["seeds"]], np.float64) - base
        v = catalogue.verdict("deahes-equals-eahes-o-clean",
                              [("DEAHES-O − EAHES-O, relative to EAHES-O's loss", d / float(base.mean()))],
                              margin=EQUAL_MARGIN, gate=gate)
        h1 = np.asarray([s["clean_h1"][r] for s in data["seeds"]])
        out[name] = (v, h1, bool(np.all(np.abs(h1 / ALPHA - 1) <= H1_TOLERANCE)))
    return out


def passes_sanity(got) -> bool:
    """A reading passes the sanity check when the equivalence holds and its mean h1 stayed near α."""
    v, _, h1_ok = got
    return v.verdict == HOLDS and h1_ok


def _gates(data) -> dict:
    """claim id -> the brackets of the tuned steps it compares (none at the paper's η)."""
    if data.get("label") != "tuned" or not data.get("brackets"):
        return {}
    b = {f: claims_lib.Bracket.from_stored(x) for f, x in data["brackets"].items()}
    return {"oracle-best": list(b.values()), "deahes-beats-baselines": list(b.values()),
            "deahes-close-to-oracle": [b["AdaHessian"]], "deahes-equals-eahes-o-clean": [b["AdaHessian"]]}


def _comparisons(data, reading, oracle) -> dict:
    """claim id -> its comparisons over every (semantics, failure model) setting, in one η set."""
    om, de, base = {}, {}, {}
    for sem, fm in _settings():
        om[sem, fm] = _loss(data, sem, fm, _om(oracle))
        de[sem, fm] = _loss(data, sem, fm, "DEAHES-O", reading)
        base[sem, fm] = {m: _loss(data, sem, fm, m) for m in BASELINES}
    # a baseline whose runs are the oracle reading's (delaylab.deahes.same_runs) is 0 by construction: left out
    return {"oracle-best": [(f"{sem}, {fm}: EAHES-OM − {m}", om[sem, fm] - x) for sem, fm in _settings()
                            for m, x in {**base[sem, fm], "DEAHES-O": de[sem, fm]}.items()
                            if same_runs(_om(oracle), sem) != m],
            "deahes-close-to-oracle": [(f"{sem}, {fm}: (DEAHES-O − EAHES-OM) / {float(np.mean(om[sem, fm])):.4f}",
                                        (de[sem, fm] - om[sem, fm]) / float(np.mean(om[sem, fm])))
                                       for sem, fm in _settings()],
            "deahes-beats-baselines": [(f"{sem}, {fm}: DEAHES-O − {m}", de[sem, fm] - x) for sem, fm in _settings()
                                       for m, x in base[sem, fm].items()],
            "oracle-behind": [(f"{sem}, {fm}", (om[sem, fm] - de[sem, fm]) / float(np.mean(om[sem, fm])))
                              for sem, fm in _settings()]}


def short_run(data) -> Optional[str]:
    """Why the run judges the paper's claims too early (docs/findings.md's short-run rule,
    :func:`delaylab.claims.still_falling` over every method's and reading's mean training
    loss curve), or None where every curve has flattened. Runs that stored only final losses cannot
    show their curves flattened: they are checks of the pipeline too."""
    seeds = data["seeds"]
    if not all("curve" in s for s in seeds):
        return ("a check of the pipeline: this run stored only final losses, so whether its curves flattened, where "
                "the paper states its claims, is not known")
    curves = {}
    for key in seeds[0]["curve"]:
        mean = np.mean([s["curve"][key] for s in seeds], axis=0)  # [runs, logs]: DEAHES-O one run per reading
        for r, c in enumerate(mean):
            curves[key + ((data["readings"][r],) if key[2] == "DEAHES-O" else ())] = c
    got = claims_lib.still_falling(seeds[0]["round"], curves)
    if got is None:
        return None
    share, (sem, fm, name, *reading) = got
    return claims_lib.still_falling_reason(f"{name}{' ' + reading[0] if reading else ''} ({sem}, {fm})", share)


def claims(data, reading, oracle) -> dict:
    """claim id -> its :class:`paper_figures.catalogue.Verdict` at DEAHES-O's ``reading`` and the
    oracle reading ``oracle``: one verdict over every (semantics, failure model) setting, whose parts
    are all the settings' comparisons (so the conjunction's correction for "does not hold" runs over
    all of them). "Close to the oracle" is judged on DEAHES-O − oracle relative to the oracle's mean
    loss in each setting, against the margin ``EQUAL_MARGIN`` (non-inferiority), and is inconclusive,
    set by the reconstruction, where the oracle is itself significantly worse than DEAHES-O. Every
    claim is inconclusive in a run that judges it too early (:func:`short_run`). At
    tuned η each claim is also judged at the grid neighbours (``data["others"]``) and stands only
    where they agree; tuned data without them say no other step setting was run."""
    got = _comparisons(data, reading, oracle)
    g = _gates(data)
    tuned = data.get("label") == "tuned"
    at = None if tuned else False  # the paper's η: one fixed step for every method, untuned
    others = {k: _comparisons(o, reading, oracle) for k, o in data.get("others", {}).items()} if tuned else {}

    def verdict(cid, margin=0.0):
        steps = {"neighbours": {k.split()[-1]: c[cid] for k, c in others.items()}} if others else None
        return catalogue.verdict(cid, got[cid], margin=margin, gate=g.get(cid, ()), at_tuned_steps=at, steps=steps)

    out = {"oracle-best": verdict("oracle-best"),
           "deahes-close-to-oracle": verdict("deahes-close-to-oracle", EQUAL_MARGIN),
           "deahes-beats-baselines": verdict("deahes-beats-baselines")}
    out["deahes-close-to-oracle"] = catalogue.unless_reference_worse(out["deahes-close-to-oracle"],
                                                                     got["oracle-behind"], "EAHES-OM", "DEAHES-O")
    early = short_run(data)
    return {k: catalogue.inconclusive_because(v, early) for k, v in out.items()} if early else out


def _deciding(v) -> str:
    """The comparisons that decide a verdict: the one nearest to failing when all hold, those that
    fail (with their corrected interval) when it does not hold, those undecided otherwise."""
    if all(p.verdict == HOLDS for p in v.parts):  # it holds, or a step it compares sits at a grid's edge
        p = max(v.parts, key=lambda p: p.interval.hi - p.margin)
        return f"nearest to failing: {p.name} {p.interval}"
    bad = [p for p in v.parts if p.verdict == FAILS]
    if bad:
        return "; ".join(f"{p.name} {p.interval} (corrected {p.corrected})" for p in bad)
    undecided = [p for p in v.parts if p.verdict != HOLDS]
    return "undecided: " + "; ".join(f"{p.name} {p.interval}" for p in undecided[:4]) + (
        f"; {len(undecided) - 4} more" if len(undecided) > 4 else "")


def _counts(v) -> str:
    k = len(v.parts)
    n = {w: sum(p.verdict == w for p in v.parts) for w in (HOLDS, FAILS)}
    return f"{k} comparisons: {n[HOLDS]} hold, {n[FAILS]} do not hold at the corrected level"


_WORDS = {"oracle-best": "the oracle EAHES-OM is best",
          "deahes-close-to-oracle": f"DEAHES-O close to the oracle (no worse by more than {EQUAL_MARGIN:.0%} of its loss)",
          "deahes-beats-baselines": "DEAHES-O ahead of EAHES-O, EAHES, EAMSGD, EASGD"}
_ORACLE_RULE = {"full reset": "(h1, h2) = (1, 0) on an exchange after a failure",
                "master side": "(h1, h2) = (α, 0) on an exchange after a failure",
                "reset where stale": "(h1, h2) = (1, 0) on an exchange after a failure where the returning worker's "
                                     "parameters are stale, else (α, α)"}


def _suppressed_gap(data, oracle) -> str:
    """The oracle's final loss less EAHES-O's (which differs from it only in the oracle's rule)
    under suppressed failures, per failure model, mean ± 95% half-width over seeds."""
    return ", ".join(f"{claims_lib.paired_interval(_loss(data, 'suppressed', fm, _om(oracle)) - _loss(data, 'suppressed', fm, 'EAHES-O'))} ({fm})"
                     for fm in FAILURE_MODELS)


def _after_failure(data) -> str:
    """The delivered exchanges that follow a failure per run under suppressed failures (the full
    reset's resets), with the jobs each discards (one plus the failed exchanges per reset), from the
    seeds' EAHES-O traces; empty for data that did not record them."""
    seeds = data["seeds"]
    if not all("after_failure" in s for s in seeds):
        return ""
    out = []
    for fm in FAILURE_MODELS:
        pos = np.mean([s["after_failure"][("suppressed", fm)] for s in seeds])
        failed = np.mean([s["attempts"] - s["delivered"][("suppressed", fm)] for s in seeds])
        out.append(f"{pos:.1f} resets per run, {1 + failed / max(pos, 1e-12):.1f} jobs each ({fm})")
    return "; ".join(out)


def _oracle_conditions(data, oracle) -> str:
    """The oracle reading in words, that it is our reconstruction, and what its rule does to a
    worker cut off under suppressed failures, with the oracle's loss against EAHES-O's there."""
    text = (f"the oracle EAHES-OM is our reconstruction of the paper's (docs/theory.md §9.6), read as {oracle}: "
            f"{_ORACLE_RULE[oracle]}")
    lost = ", ".join(f"{np.mean([s['lost'][fm] for s in data['seeds']]):.2f} ({fm})" for fm in FAILURE_MODELS)
    if oracle == "full reset":
        resets = _after_failure(data)
        text += ("; under suppressed failures (2 of the 4 settings) a cut-off worker trains on, so the reset replaces "
                 "its parameters by the master's and discards the progress of its jobs since its last delivered "
                 f"exchange (exchanges lost: {lost}" + (f"; {resets}" if resets else "") + ")")
    elif oracle == "master side":
        text += ("; under suppressed failures the worker keeps its progress but the master ignores it on the "
                 f"exchange after a failure (exchanges lost: {lost})")
    else:
        return text + ("; under suppressed failures (2 of the 4 settings) a worker's parameters are never stale, so no "
                       "exchange resets and its runs are EAHES-O's (their difference, 0 by construction, is left out of the "
                       "oracle's comparisons); under stale "
                       "failures every returning worker's are, and its runs are the full reset's")
    return text + f"; the oracle's final loss less EAHES-O's under suppressed failures: {_suppressed_gap(data, oracle)}"


def _eta_words(view) -> str:
    eta = view["eta"]
    if view["label"] == "tuned":
        return (f"η tuned per optimiser family on {view['tune_seeds']} tuning seeds (SGD family η = {eta['SGD']:.4g}, "
                f"AdaHessian family η = {eta['AdaHessian']:.4g})")
    return f"the paper's η = {LR} for every optimiser (untuned)"


def findings(data: dict) -> str:
    vs = views(data)
    seeds = next(iter(vs.values()))["seeds"]
    n = len(seeds)
    lines = [f"DEAHES-O readings ({data['preset']} preset): {data['dataset']}, P = {data['workers']}, "
             f"τ = {data['period']}, {data['rounds']} communication rounds, {n} seeds (each resamples the split, "
             "the initialisation, the evaluation subset, minibatches, probes and failure draws, "
             + ("each from its own stream" if "sources" in data else "the split and the evaluation subset from one "
                "generator seed and the initialisation from the root key of the minibatches")
             + "; methods paired within a seed). Verdicts from paired differences over seeds, 95% Student-t "
             "intervals.",
             f"Lost exchanges: iid {np.mean([s['lost']['iid 1/3'] for s in seeds]):.2f}, outages "
             f"{np.mean([s['lost']['outages'] for s in seeds]):.2f} of all (mean over seeds)."]
    if data.get("brackets"):
        fams = "; ".join(f + ": " + ", ".join(_members(f)) for f in FAMILIES)
        lines.append(f"η per optimiser family ({fams}), bracketed on {data['tune_seeds']} tuning seeds (from "
                     f"{CALIBRATION_SEED} on, disjoint from the reported ones) by the mean final training loss of the "
                     f"family's methods under {TUNING[0]} failures, {TUNING[1]} (DEAHES-O at its default reading):")
        for f, b in data["brackets"].items():
            lines.append(f"  {f}: {claims_lib.Bracket.from_stored(b).note()}; {resolution(b)}; steps "
                         + ", ".join(f"{s:.4g} ({v:.4f})" for s, v in zip(b["steps"], b["scores"])))
    for view in vs.values():
        lines += ["", f"At {_eta_words(view)}:"]
        _body(view, lines)
    if data["preset"] != "full":
        lines.append(f"The {data['preset']} preset is small ({data['rounds']} rounds of {data['dataset']}, {n} seeds): "
                     "an inconclusive verdict here says the preset cannot decide (or, at tuned η, that the other step "
                     "settings were not run), not that the claim is false.")
    return "\n".join(lines) + "\n"


def _body(data: dict, lines: list) -> None:
    """One η set's text: a0, the sanity check, the final losses, every reading's claims."""
    seeds = data["seeds"]
    if "calibration" in data:
        c = data["calibration"]
        lines.append(f"a0 = {KAPPA:g} × sd of the failure-free trend a on tuning seed {CALIBRATION_SEED}: {c['a0']:.3g} "
                     f"(the trend's mean {c['a_mean']:+.3f}, sd {c['a_sd']:.3f}).")
    else:
        lines.append(f"a0 = {KAPPA:g} × sd of the failure-free trend a: {', '.join(format(s['a0'], '.3g') for s in seeds)} "
                     f"(the trend's mean {np.mean([s['a_mean'] for s in seeds]):+.3f}, sd "
                     f"{np.mean([s['a_sd'] for s in seeds]):.3f}).")
    g = _gates(data)
    lines += ["", "Sanity check without failures ((DEAHES-O − EAHES-O) / EAHES-O's mean loss, equal within "
              f"±{EQUAL_MARGIN:.0%}; mean h1 within {H1_TOLERANCE:.0%} of α = {ALPHA}):"]
    sane = sanity(data, g.get("deahes-equals-eahes-o-clean", ()))
    for r, (name, (v, h1, h1_ok)) in enumerate(sane.items()):
        use = np.mean([s["clean_ramp"][r] for s in seeds])
        lines.append(f"  {name:36s} {str(v.parts[0].interval):>18s}   mean h1 {', '.join(f'{x:.3f}' for x in h1)}   "
                     f"ramp use {use:.4f}   {v.verdict}" + ("" if h1_ok else "; h1 left α: fails the check"))
    lines += ["", "Final training loss (mean ± 95% half-width over seeds):"]
    names = BASELINES + tuple(_om(o) for o in data["oracles"])
    for semantics in SEMANTICS:
        for fm in FAILURE_MODELS:
            lines.append(f"  {semantics}, {fm}:")
            for m in names:
                lines.append(f"    {m:38s} {_fmt(_loss(data, semantics, fm, m))}")
            for k, r in enumerate(data["readings"]):
                use = np.mean([s["ramp"][(semantics, fm)][k] for s in seeds])
                lines.append(f"    {'DEAHES-O, ' + r:38s} {_fmt(_loss(data, semantics, fm, 'DEAHES-O', r))}"
                             f"   (ramp use {use:.3f})")
    lines += ["", f"The paper's claims per reading, each one verdict over the {len(_settings())} settings (semantics × "
              "failure model) whose comparisons are all the settings' paired differences (paper_figures.catalogue): "
              "it holds when every 95% interval lies on the claim's side, does not hold when one lies wholly on the "
              "other side at the Bonferroni level over all the claim's comparisons (the corrected interval is shown)"
              + (", and is inconclusive where a step it compares sits at its grid's edge:" if g else ":")]
    early = short_run(data)
    if early:
        lines.append(f"  {early[:1].upper() + early[1:]}: every verdict below is inconclusive whatever its word.")
    reproduces = []
    for r in data["readings"]:
        lines.append(f"  DEAHES-O {r}:")
        for k, oracle in enumerate(data["oracles"]):
            got = claims(data, r, oracle)
            for cid, v in got.items():
                if cid == "deahes-beats-baselines" and k:  # a claim without the oracle: once
                    continue
                which = f" (oracle {oracle})" if cid != "deahes-beats-baselines" else ""
                lines.append(f"    {_WORDS[cid]}{which}: {v.verdict} ({_counts(v)}; {_deciding(v)}"
                             + (f"; {v.reason}" if v.reason else "") + ")")
            if all(v.verdict == HOLDS for v in got.values()) and passes_sanity(sane[r]):
                reproduces.append(f"{r} with the {oracle} oracle")
    lines += ["", "Readings that reproduce every claim and pass the sanity check: "
              + ("; ".join(reproduces) if reproduces else
                 f"none can, since every verdict is inconclusive as {early}" if early else
                 "none at tuned η, where no verdict can hold without the other step settings, which this run "
                 "did not run" if data.get("label") == "tuned" and not data.get("others") else "none on this preset")
              + ".",
              f"Default reading (algos.elastic.deahes_o): {DEFAULT_READING}; sanity check: "
              + ("passed" if passes_sanity(sane[DEFAULT_READING]) else "failed") + "."]


def verdicts(data: dict) -> list:
    """The rows of the verdict table (docs/findings.md), per η set at the default reading: the
    sanity check, DEAHES-O ahead of the baselines, and per oracle reading the oracle's two claims,
    each one verdict over every (semantics, failure model) setting (:func:`claims`). The text
    gives every reading's verdicts."""
    out = []
    for view in views(data).values():
        out += _rows(view)
    return out


def _rows(data: dict) -> list:
    at = "at tuned η" if data["label"] == "tuned" else f"at η = {LR}"
    fitted = (f"a0 calibrated on tuning seed {CALIBRATION_SEED}" if "calibration" in data
              else "a0 calibrated per seed")
    cond = (f"{data['preset']}: {data['dataset']}, P = {data['workers']}, τ = {data['period']}, {data['rounds']} rounds, "
            f"{len(data['seeds'])} seeds (each resampling split, init, evaluation subset, minibatches, probes, failures"
            + ("" if "sources" in data else ", two pairs from one seed") + "); "
            f"{_eta_words(data)}; {fitted}; the weight map is a reconstruction (the paper's summary leaves it open), "
            f"and its default reading ({DEFAULT_READING}) was chosen, on an earlier run, as one that passes the sanity "
            "check without failures")
    default = sanity(data, _gates(data).get("deahes-equals-eahes-o-clean", ()))[DEFAULT_READING]
    v, h1, h1_ok = default
    cond += f" (on this run, {at}: {'passes' if passes_sanity(default) else 'does not pass'})"
    ev = (f"{v.parts[0].name} {v.parts[0].interval}; mean h1 {', '.join(f'{x:.3f}' for x in h1)} "
          f"({'within' if h1_ok else 'outside'} {H1_TOLERANCE:.0%} of α = {ALPHA})")
    out = [v.row(f"DEAHES-O ({DEFAULT_READING}) equals EAHES-O without failures (±{EQUAL_MARGIN:.0%} of EAHES-O's "
                 f"loss), {at}", ev, cond)]
    got = {oracle: claims(data, DEFAULT_READING, oracle) for oracle in data["oracles"]}
    v = got[data["oracles"][0]]["deahes-beats-baselines"]  # a claim without the oracle: once
    out.append(v.row(f"{_WORDS[v.claim.id]} (DEAHES-O {DEFAULT_READING}), under every failure model and semantics, {at}",
                     f"{_counts(v)}; {_deciding(v)}", cond))
    for oracle, vs in got.items():
        for cid in ("oracle-best", "deahes-close-to-oracle"):
            out.append(vs[cid].row(f"{_WORDS[cid]} (oracle {oracle}; DEAHES-O {DEFAULT_READING}), under every failure "
                                   f"model and semantics, {at}", f"{_counts(vs[cid])}; {_deciding(vs[cid])}",
                                   f"{cond}; {_oracle_conditions(data, oracle)}"))
    return out


def _fmt(v) -> str:
    iv = claims_lib.paired_interval(v)
    return f"{iv.mean:.4f} ± {iv.half:.4f}"


def rows(data: dict) -> list[dict]:
    out = []
    for label, view in views(data).items():
        for i, s in enumerate(view["seeds"]):
            for (semantics, fm, name), v in s["loss"].items():
                for r, x in enumerate(np.atleast_1d(v)):
                    row = {"eta": label} if "by_set" in data else {}
                    out.append({**row, "seed": i, "semantics": semantics, "failures": fm, "method": name,
                                "reading": data["readings"][r] if name == "DEAHES-O" else "", "final_loss": float(x)})
    return out


def plot(data: dict, path: str) -> None:
    """Every method's and reading's paired difference to EAHES-O per (semantics, failure model),
    at the first η set (tuned, where tuned)."""
    from delaylab.paper_figures._output import pyplot, save_figure

    view = next(iter(views(data).values()))
    plt = pyplot()
    names = list(BASELINES) + [_om(o) for o in view["oracles"]]
    labels = names + [f"DEAHES-O: {r}" for r in view["readings"]]
    fig, axes = plt.subplots(1, 4, figsize=(17, 5.5), sharey=True)
    for ax, (semantics, fm) in zip(axes, [(s, f) for s in SEMANTICS for f in FAILURE_MODELS]):
        ref = _loss(view, semantics, fm, "EAHES-O")
        vals = [_loss(view, semantics, fm, m) - ref for m in names] + [
            _loss(view, semantics, fm, "DEAHES-O", r) - ref for r in view["readings"]]
        ivs = [claims_lib.paired_interval(v) for v in vals]
        y = np.arange(len(labels))
        colors = ["0.6"] * len(BASELINES) + ["tab:green"] * len(view["oracles"]) + ["tab:blue"] * len(view["readings"])
        for iv, yy, c in zip(ivs, y, colors):
            if np.isfinite(iv.half):
                ax.errorbar([iv.mean], [yy], xerr=[[iv.half], [iv.half]], fmt="o", color=c, capsize=3, zorder=3)
        for v, yy in zip(vals, y):
            ax.scatter(v, np.full(len(v), yy), s=8, c="k", alpha=0.4, zorder=4)
        ax.axvline(0.0, color="k", lw=0.8)
        ax.set_title(f"{semantics}, {fm}")
        ax.set_xlabel("final loss − EAHES-O's (same seed)")
        ax.grid(alpha=0.3)
    axes[0].set_yticks(np.arange(len(labels)), labels)
    axes[0].invert_yaxis()
    fig.suptitle(f"DEAHES-O readings: {view['dataset']}, P = {view['workers']}, τ = {view['period']}, "
                 f"{view['rounds']} rounds, {len(view['seeds'])} seeds, {_eta_words(view)}; paired difference to "
                 "EAHES-O, mean and 95% interval (dots: seeds; left of 0: better)")
    fig.tight_layout()
    save_figure(fig, path)


FIGURE = Figure("deahes-readings", "which reading of DEAHES-O reproduces the paper: readings × failure models × semantics",
                PRESETS, compute, plot, findings, rows, stem="deahes_readings", module=__file__, convolution=True,
                verdicts=verdicts)
