"""R4 (docs/theory.md §8, §12): does Rescaled ASGD's time to ε keep pace with Malenia SGD's as ε → 0?

The claim (Rescaled ASGD's poster, docs/theory.md §8.1): Rescaled ASGD's time to an ε-stationary point has
the optimal leading term τ_A σ² LΔ/(nε²), the one Malenia SGD attains (the heterogeneous lower
bound, docs/theory.md §8); heterogeneity and staleness enter only at lower orders, (τ_max/τ_H) τ_A √(σ²+ζ²)/ε^1.5
and τ_max/ε. So the ratio T_Rescaled(ε)/T_Malenia(ε) should stay bounded as ε → 0. Tested on a
smooth nonconvex finite sum (:func:`sim.problems.nonconvex_quadratic`) in a noise regime and a
heterogeneity regime, τ_i evenly spaced, each method's step bracketed per ε on tuning seeds; the
verdict is on the slope of log(T_Rescaled/T_Malenia) against log(1/ε) over seeds. The protocol in
full (problems, regimes, speeds, steps, horizons, time to ε, seeds, verdict): :func:`compute`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import jax
import numpy as np

from delaylab import algos, sim, claims
from delaylab.paper_figures import catalogue
from delaylab.paper_figures._figure import Figure, Parts
from delaylab.paper_figures._output import save_figure
from delaylab.sim import schedules

D, PENALTY = 10, 4.0
REGIMES = {"noise": (1.0, 0.01), "heterogeneity": (0.01, 1.0)}  # (σ², ζ²)
LOG_POINTS, SMOOTH = 400, 5
SLOPE_BOUND = 0.25
REFINE = 2  # rounds of refinement around the bracketed best step (delaylab.claims.bracket)
LONGER = 2  # times the horizon may be made 4× longer for a method that misses ε on some seed
CLAIM = ("Rescaled", "Malenia")


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    problems: tuple  # "nonconvex" and/or "quadratic"
    workers: tuple  # n
    spreads: tuple  # τ_n/τ_1
    methods: tuple  # keys of METHODS
    eps_steps: int  # ε = σ² · 2^-k / 10 for k < eps_steps
    events: int  # the horizon at the largest ε (E(ε) grows as (ε_0/ε)^horizon_power)
    tune_seeds: int
    report_seeds: int
    grid: tuple  # the starting step grid (per-update γ; round methods: γ·n)
    max_extend: int = 3
    # E(ε) = events · (ε_0/ε)^horizon_power, made 4× longer up to LONGER times for a method that
    # misses ε: 2 is the nonconvex worst case's 1/ε²; 1 the growth measured near a nondegenerate
    # minimiser, with the two retries (4² = (ε_0/ε)^1 at ε_0/16) reaching the worst case's horizon
    # only where a method needs it. A shorter horizon cannot hide a better step: a step that misses
    # ε within it is slower than one that reaches it.
    horizon_power: int = 2
    profiles: tuple = ("even",)  # τ profiles (:func:`taus_of`)
    other_spreads: Optional[tuple] = None  # the spreads the profiles besides "even" run at (None: all)
    share_eps: bool = False  # one set of runs per method and horizon serves every ε (:func:`_shared`)


METHODS = ("Rescaled", "Malenia", "Ringleader", "IA²SGD", "vanilla", "Rennala", "minibatch")
LABELS = {"Rescaled": "Rescaled ASGD", "Malenia": "Malenia SGD (S = n)", "Ringleader": "Ringleader ASGD",
          "Rennala": "Rennala SGD (S = n)",
          "IA²SGD": "IA²SGD", "vanilla": "vanilla ASGD", "minibatch": "minibatch SGD"}

PRESETS = {
    "quick": Preset("quick", problems=("nonconvex",), workers=(8,), spreads=(2, 8, 32, 128), methods=CLAIM,
                    eps_steps=4, events=1000, tune_seeds=3, report_seeds=5, grid=(0.001, 0.003, 0.01, 0.03)),
    # full: 2 problems × n ∈ {8, 32} × 2 regimes × (3 even spreads + 2 double-max ones) = 40 settings,
    # about 3 min each on 2 cores (benchmarks/RESULTS.md)
    "full": Preset("full", problems=("nonconvex", "quadratic"), workers=(8, 32), spreads=(2, 8, 128),
                   methods=METHODS[:-1], eps_steps=5, events=1500, tune_seeds=4, report_seeds=10,
                   grid=(0.001, 0.003, 0.01, 0.03), horizon_power=1, profiles=("even", "double-max"),
                   other_spreads=(8, 128), share_eps=True),
}
PROFILES = {"even": "τ_i evenly spaced from 1 to τ_n/τ_1",
            "double-max": "the even profile's τ_A with twice its τ_max: one worker at 2·τ_n/τ_1, the others evenly "
                          "spaced from 1"}


def taus_of(profile: str, n: int, spread: float) -> np.ndarray:
    """The workers' computation times: "even", τ_i evenly spaced from 1 to ``spread``; "double-max",
    the same mean τ_A = (1 + spread)/2 with τ_max = 2·spread: one worker there, the other n − 1
    evenly spaced from 1 to the b that keeps the mean (a ValueError where b would fall below 1, e.g.
    n = 2; the full preset's n and spreads give b from 1.29 to 116). Its τ_H moves too, so the two
    profiles are not a one-variable contrast: they show whether the ratio's level moves with τ_max at
    one τ_A (Rescaled ASGD's lower-order terms carry τ_max/τ_H, docs/theory.md §8.1), nothing more."""
    even = np.linspace(1.0, float(spread), n)
    if profile == "even":
        return even
    if profile != "double-max":
        raise ValueError(f"unknown τ profile {profile!r}; allowed: {sorted(PROFILES)}")
    rest = (n * even.mean() - 2.0 * spread) / (n - 1)  # the other workers' mean
    b = 2.0 * rest - 1.0
    if b < 1.0:
        raise ValueError(f"no double-max profile for n = {n}, spread {spread}: the others' times would fall below 1")
    return np.r_[np.linspace(1.0, b, n - 1), 2.0 * float(spread)]


def key5(key: tuple) -> tuple:
    """A setting's key as (problem, n, regime, spread, profile): data stored before profiles were
    added keyed the even profile by the first four."""
    return tuple(key) if len(key) == 5 else (*key, "even")


def _algorithm(method: str, taus: np.ndarray):
    """(algorithm, schedule kind, step scale): round methods take one step per round, so their
    grid is the per-update one times n."""
    n = len(taus)
    return {
        "Rescaled": (algos.rescaled_asgd(stepsize=0.01, taus=taus), "async", 1.0),
        "Malenia": (algos.malenia_sgd(stepsize=0.05, batch=n), "async", float(n)),
        "Ringleader": (algos.ringleader_asgd(stepsize=0.01), "async", 1.0),
        "IA²SGD": (algos.ia2sgd(stepsize=0.01), "async", 1.0),
        "vanilla": (algos.asgd(stepsize=0.01), "async", 1.0),
        "Rennala": (algos.rennala_sgd(stepsize=0.05, batch=n), "async", float(n)),
        "minibatch": (algos.minibatch_sgd(stepsize=0.05), "barrier", float(n)),
    }[method]


def eps_levels(sigma2: float, steps: int) -> np.ndarray:
    return sigma2 * 0.1 * 0.5 ** np.arange(steps)


def _setting(p: Preset, problem_kind: str, n: int, regime: str, spread: float, profile: str = "even") -> dict:
    """One setting: every method's bracketed step and time to every ε, on tuning and reported seeds.
    The problem instance depends on (problem, n, regime, spread) only, so the two τ profiles of a
    spread run on one instance."""
    sigma2, zeta2 = REGIMES[regime]
    taus = taus_of(profile, n, spread)
    instance_seed = claims.seed_sources(0, [f"{problem_kind} n{n} {regime} {spread}"])[f"{problem_kind} n{n} {regime} {spread}"]
    prob = sim.problems.nonconvex_quadratic(n, D, penalty=PENALTY if problem_kind == "nonconvex" else 0.0,
                                            heterogeneity=zeta2, noise=math.sqrt(sigma2), x0=np.ones(D),
                                            seed=instance_seed)
    tune, report = claims.disjoint_seeds(p.tune_seeds, p.report_seeds)
    keys = jax.vmap(jax.random.key)(np.asarray(tune + report, np.uint32))
    eps = eps_levels(sigma2, p.eps_steps)
    out = {"eps": eps, "taus": taus, "methods": {}}
    for m in p.methods:
        alg, kind, scale = _algorithm(m, taus)
        if p.share_eps:
            out["methods"][m] = _shared(alg, kind, scale, prob, taus, keys, len(tune), eps, p)
            continue
        per_eps = []
        for e in eps:
            if per_eps and not np.isfinite(min(per_eps[-1]["scores"], default=math.inf)):
                # it missed a larger ε at every step it tried, at the longest horizon: a smaller ε is
                # not run (a method biased under heterogeneity, Rennala's weighting, would spend the
                # longest horizons on every ε below its floor)
                per_eps.append(_not_run(per_eps[-1], len(report)))
                continue
            for longer in range(LONGER + 1):  # the horizon, ×4 while the method misses ε on some seed
                events = int(math.ceil(p.events * (eps[0] / e) ** p.horizon_power)) * 4 ** longer
                entry = _bracketed(alg, kind, scale, prob, taus, keys, len(tune), e, events, p)
                if np.isfinite(min(entry["scores"])) and np.all(np.isfinite(entry["report"])):
                    break
            per_eps.append(entry)
        out["methods"][m] = per_eps
    out["sigma2"], out["zeta2"] = sigma2, zeta2
    return out


def _schedule(kind: str, taus: np.ndarray, events: int):
    """A method's schedule of ``events`` fixed-computation events ("barrier": the rounds that fit
    in the same time)."""
    asched = schedules.fixed_computation(taus, num_events=events)
    return asched if kind == "async" else schedules.synchronous(taus, num_rounds=max(1, int(asched.end_time // taus.max())))


def _crossings(alg, prob, sched, keys, step: float, log_every: int, eps, strides) -> np.ndarray:
    """[seeds, ε]: each seed's time to ‖∇F‖² ≤ ε_k at ``step`` (the algorithm's own units), the
    curve logged every ``log_every`` events and read at every ``strides[k]``-th log point."""
    res = sim.sweep(alg, prob, sched, keys=keys, hparams={"stepsize": np.asarray([step])}, log_every=log_every)
    t = np.asarray(res.metrics["time"], np.float64)
    g2 = np.asarray(res.metrics["grad_norm"], np.float64)[0] ** 2  # [seeds, logs]
    return np.asarray([[claims.first_crossing(t[::st], g2[s, ::st], e, SMOOTH) for e, st in zip(eps, strides)]
                       for s in range(g2.shape[0])])


def _entry(b: claims.Bracket, times, n_tune: int, sched, events: int, **more) -> dict:
    """One ε's stored entry: its bracket, the reported seeds' times at the best step and (for the
    readings at the tuned steps' neighbours, which then cost no run) at every evaluated step.
    ``times(g)``: every seed's time to this ε at step g; ``events``: the events the run was asked for."""
    return {"step": b.best, "interior": b.interior, "edge": b.edge, "note": b.note(), "report": times(b.best)[n_tune:],
            "steps": list(b.steps), "scores": list(b.scores), "events": events,
            "horizon": float(sched.end_time), **more, "report_all": np.stack([times(g)[n_tune:] for g in b.steps])}


def _shared(alg, kind, scale, prob, taus, keys, n_tune, eps, p) -> list:
    """One method's entries for every ε, from runs shared across ε. A pass runs every step it
    needs at one horizon H (the first: E(ε) of the smallest ε, as in :func:`compute`), logging
    ‖∇F‖² every ``p.events // LOG_POINTS`` events on every pass, and reads ε_k from every
    (E(ε_k)/E(ε_0))-th log point: each ε is read at one spacing whatever pass settles it (a run's
    noise is keyed by event, so a longer run repeats a shorter one's path: a longer horizon only
    turns "not reached" into a time). An ε settles when its bracket's best reaches it on every
    tuning and reported seed. The next pass runs at 4·H, for the unsettled ε whose horizon so far
    is short of E(ε)·4^``LONGER`` (the cap the separate runs had); while a larger ε is reached at
    no step, the smaller ones are not bracketed (they cannot be reached first), and those never
    bracketed are not run (:func:`_not_run`). One program is compiled per method and pass."""
    ratio = [(eps[0] / e) ** p.horizon_power for e in eps]
    stride = [max(1, int(round(r))) for r in ratio]
    cap = [int(math.ceil(p.events * r)) * 4 ** LONGER for r in ratio]
    log_every = max(1, p.events // LOG_POINTS)
    entries: list = [None] * len(eps)
    pending = list(range(len(eps)))
    events = int(math.ceil(p.events * ratio[-1]))
    while pending:
        sched = _schedule(kind, taus, events)
        cache: dict = {}

        def times(g, sched=sched, cache=cache):  # [seeds, ε]: time to each ε at step g
            if g not in cache:
                cache[g] = _crossings(alg, prob, sched, keys, g * scale, log_every, eps, stride)
            return cache[g]

        left, unreached = [], False
        for k in pending:
            if unreached:  # a larger ε was reached at no step at this horizon
                left.append(k)
                continue
            b = claims.bracket(lambda g: float(np.median(times(g)[:n_tune, k])), p.grid, max_extend=p.max_extend,
                               refine=REFINE)
            entries[k] = _entry(b, lambda g: times(g)[:, k], n_tune, sched, events,
                                spacing=float(sched.end_time) * log_every * stride[k] / sched.num_events)
            if not (np.isfinite(min(b.scores)) and np.all(np.isfinite(entries[k]["report"]))):
                left.append(k)
                unreached = unreached or not np.isfinite(min(b.scores))
        events *= 4
        pending = [k for k in left if events <= cap[k]]
    missed = None
    for k in range(len(eps)):
        if entries[k] is None:
            entries[k] = _not_run(missed, len(keys) - n_tune)
        elif not np.isfinite(min(entries[k]["scores"])):
            missed = missed or entries[k]
    return entries


def _not_run(missed: dict, report_seeds: int) -> dict:
    """The entry of an ε not run after ``missed``, a larger ε reached at no step (times inf)."""
    return {"step": math.nan, "interior": False, "edge": missed["edge"],
            "note": "not run: a larger ε was reached at no step", "report": np.full(report_seeds, np.inf),
            "steps": [], "scores": [], "events": 0, "horizon": float(missed["horizon"]),
            "report_all": np.zeros((0, report_seeds))}


def _bracketed(alg, kind, scale, prob, taus, keys, n_tune, e, events, p) -> dict:
    """One method's bracketed step for ε at a horizon of ``events`` events, and its times."""
    sched = _schedule(kind, taus, events)
    cache: dict = {}

    def times(g):  # time to ε at step g (per-update units), every seed
        if g not in cache:
            cache[g] = _crossings(alg, prob, sched, keys, g * scale, max(1, sched.num_events // LOG_POINTS), [e], [1])[:, 0]
        return cache[g]

    b = claims.bracket(lambda g: float(np.median(times(g)[:n_tune])), p.grid, max_extend=p.max_extend, refine=REFINE)
    return _entry(b, times, n_tune, sched, events)


def _settings(p: Preset) -> list:
    """Every setting's key: (problem, n, regime, spread), with the profile fifth where it is not "even"."""
    return [(k, n, r, s) if prof == "even" else (k, n, r, s, prof)
            for k in p.problems for n in p.workers for r in REGIMES for s in p.spreads for prof in p.profiles
            if prof == "even" or p.other_spreads is None or s in p.other_spreads]


def compute(preset: Preset, parts: Parts, progress: bool = True) -> dict:
    """Every setting's runs and verdict. Tested as:

    - **Problems.** The smooth nonconvex finite sum of :func:`sim.problems.nonconvex_quadratic`
      (F_i = ½(x − b_i)ᵀA(x − b_i) + λ Σ_j x_j²/(1 + x_j²), λ = 4, d = 10: its Hessian has negative
      eigenvalues where coordinates are near ±1, so F is nonconvex; runs start at x0 = 1, where the
      Hessian is A − 2I, with an eigenvalue as low as −1), and (full preset) the same with λ = 0, a
      quadratic. A is shared, so the heterogeneity ∇F_i − ∇F = −Aδ_i is the same at every x and
      ζ² = (1/n) Σ‖Aδ_i‖² is exact. Near a nondegenerate minimiser either problem is locally strongly
      convex, so the last stretch to a small ε behaves as on a quadratic: measured times grow like
      1/ε, not like the worst-case 1/ε²; the leading terms' exponent is not what is tested, their
      ratio is.
    - **Regimes.** "noise": σ² = 1 ≫ ζ² = 0.01; "heterogeneity": σ² = 0.01 ≪ ζ² = 1. ε levels are
      fractions of σ² (ε = σ² · 2^-k/10). By the bounds with constants 1, Rescaled's σ² term leads
      Malenia's only at smaller ε than these once τ_n/τ_1 ≥ 8 (its ε^-1.5 term is 1.7–19× larger at
      the smallest ε): what is measured is the approach to the asymptote, and the theory's shape of
      the ratio over the same ε is printed beside each verdict.
    - **Speeds.** Fixed computation τ_i evenly spaced from 1 to τ_n/τ_1 ∈ ``spreads``; n ∈ ``workers``;
      with ``profiles``, also the "double-max" profile of the same τ_A and twice the τ_max
      (:func:`taus_of`), at ``other_spreads``.
    - **Steps, per method and per ε**, chosen by :func:`delaylab.claims.bracket` on tuning seeds
      disjoint from the reported ones (score: the median time to ε over the tuning seeds, inf when not
      reached): the starting grid is extended by its own ratio while the best step is at an edge, up
      to ``max_extend`` steps a side, then refined twice around the best (ratio 3.2 → 1.33: a grid
      as coarse as the ε spacing would move the step between grid points from one ε to the next and
      the slope with it); a verdict that rests on a step left at an edge is inconclusive.
      Rescaled ASGD's normalisation is a reconstruction (γ_i = γ τ_i/τ_H here, docs/theory.md §6.2); with the
      step tuned, the other reading (γ τ_i/τ_max) runs the same iterates at γ·τ_max/τ_H, so it
      cannot change a verdict as long as the grid brackets the optimum.
    - **Horizon per ε**: E(ε) = ``events`` · (ε_0/ε)^``horizon_power`` events (2: ∝ 1/ε², the
      nonconvex worst case; 1 in the full preset, see :class:`Preset`), made 4× longer (up to
      ``LONGER`` times) for a method that misses ε on a tuning or reported seed; with ``share_eps``
      one set of runs per method and horizon serves every ε (:func:`_shared`),
      so that the slowest method's time fits and faster ones are not compared on their floors (a fixed
      horizon of 1,000 events misses the largest ε at spreads 32 and 128).
    - **Time to ε**: ‖∇F‖² is logged ``LOG_POINTS`` times per run, smoothed by a centred mean over
      ``SMOOTH`` log points (fewer at the ends, so the first points count), and the time is where the
      smoothed curve first crosses ε, interpolated linearly between log points (not quantised to them).
    - **Seeds** resample the gradient noise (the only random source of a run: timing is fixed
      computation and x0 = 1). The problem instance (A, b̄, δ_i) is drawn once per setting and held
      fixed: the claim concerns the time on a given problem, and every method and seed sees the same one.
    - **Verdict, per regime** (catalogue ``rescaled-malenia-bounded``, a trend): per setting, over
      the three smallest ε that Rescaled and Malenia reach on every reported seed, the slope of
      log(T_Rescaled/T_Malenia) against log(1/ε), per seed; the setting's part is the slopes minus
      ``SLOPE_BOUND`` (below 0: the ratio grows slower than ε^-0.25, flattening). A setting where
      Malenia reaches a smaller ε on every seed and Rescaled does not has no slope (dropping that
      level would hide the evidence against the claim): its part is inconclusive. The regime's
      settings form one conjunction (:func:`paper_figures.catalogue.verdict`), inconclusive where a
      step sits at its grid's edge, and, the claim being between tuned methods, decided only where
      the tuned steps' grid neighbours (read from the runs every bracket already made, on the
      reported seeds) give the same word; the two methods' steps share no scale, so there is no
      common step. The ratio at the smallest ε
      is printed with its interval (a t interval of the mean log ratio, exponentiated), and the
      theory's own shape for the ratio (the two upper bounds with constants 1) beside it, as a shape."""
    out = {"preset": preset.name, "settings": {}, "config": dataclasses.asdict(preset)}
    todo = _settings(preset)
    for key in parts.order(todo):  # each setting is a part of its own (for helpers)
        i = todo.index(key)
        k, n, r, s, prof = key5(key)
        tag = "" if prof == "even" else f"_{prof}"
        got, reused = parts.get(f"{k}_n{n}_{r}_{s}{tag}", dict(preset=preset, setting=list(key)),
                                lambda: _setting(preset, k, n, r, s, prof))
        out["settings"][key] = got
        if progress:
            print(f"  r4 [{i + 1}/{len(todo)}] {k}, n = {n}, {r}, τ_n/τ_1 = {s}, {prof}: "
                  + ("stored part reused" if reused else f"{float(got['seconds']):.0f} s"), flush=True)
    out["settings"] = {key: out["settings"][key] for key in todo}  # in the preset's order, whoever computed what
    return out


def _bound_shape(method: str, taus: np.ndarray, sigma2: float, zeta2: float, eps: np.ndarray) -> np.ndarray:
    """The upper bounds with constants 1 (L = Δ = 1): a shape only (docs/theory.md §8)."""
    n, tA, tmax, tH = len(taus), taus.mean(), taus.max(), 1.0 / np.mean(1.0 / taus)
    if method == "Rescaled":
        return tA * sigma2 / (n * eps ** 2) + (tmax / tH) * tA * np.sqrt(sigma2 + zeta2) / eps ** 1.5 + tmax / eps
    return tmax / eps + tA * sigma2 / (n * eps ** 2)  # Malenia: the heterogeneous lower bound's shape


CLAIM_ID = "rescaled-malenia-bounded"


def ratio_claim(setting: dict) -> dict:
    """The measurements behind "T_Rescaled/T_Malenia bounded as ε → 0" in one setting (:func:`compute`):
    ``d``, the per-seed slopes minus SLOPE_BOUND (the setting's trend part; empty, with the reason
    in ``why``, where no slope is measured), the brackets of the steps it rests on, the slope's
    interval, the ratio at the smallest ε and the theory's shape slope. ``why`` also names a step
    at its grid's edge."""
    R, M = setting["methods"]["Rescaled"], setting["methods"]["Malenia"]
    eps = np.asarray(setting["eps"])
    none = {"d": np.zeros(0), "brackets": [], "eps": [], "ratio": None, "slope": None, "readings": {}}
    both = [j for j in range(len(eps)) if np.all(np.isfinite(R[j]["report"])) and np.all(np.isfinite(M[j]["report"]))]
    if len(both) < 3:
        return {**none, "why": f"both reach only {len(both)} of the ε levels on every seed"}
    use = both[-3:]
    mal_only = [j for j in range(len(eps)) if j > use[-1] and np.all(np.isfinite(M[j]["report"]))]
    if mal_only:
        j = mal_only[0]
        k = int(np.sum(~np.isfinite(R[j]["report"])))
        return {**none, "why": f"Malenia reaches ε = {eps[j]:.3g} on every seed, Rescaled not on {k} of "
                               f"{len(R[j]['report'])} within the horizon ({R[j]['horizon']:.4g})"}
    logr = np.log(np.stack([np.asarray(R[j]["report"]) / np.asarray(M[j]["report"]) for j in use]))  # [3, seeds]
    x = np.log(1.0 / eps[use])
    xc = x - x.mean()
    slopes = (xc @ (logr - logr.mean(0))) / (xc @ xc)  # per seed
    keyed = {(m, j): claims.Bracket.from_stored(e[j], best="step") for m, e in (("Rescaled", R), ("Malenia", M))
             for j in use}
    brackets = list(keyed.values())
    why = claims.gated(claims.HOLDS, brackets)[1]  # the reason an edge step gives, if any
    readings = {}  # step setting -> the slopes minus SLOPE_BOUND there (empty: a time not reached)
    if all("report_all" in e[j] for e in (R, M) for j in use):
        for label, at in claims.step_settings(keyed, common=False).items():
            if label != "tuned":
                with np.errstate(divide="ignore", invalid="ignore"):  # a time not reached: inf
                    lr = np.log(np.stack([_times_at(R[j], at["Rescaled", j]) / _times_at(M[j], at["Malenia", j])
                                          for j in use]))
                readings[label] = ((xc @ (lr - lr.mean(0))) / (xc @ xc) - SLOPE_BOUND if np.all(np.isfinite(lr))
                                   else np.zeros(0))
    last = claims.paired_interval(logr[-1])
    shape = _bound_shape("Rescaled", np.asarray(setting["taus"]), setting["sigma2"], setting["zeta2"], eps[use]) / \
        _bound_shape("Malenia", np.asarray(setting["taus"]), setting["sigma2"], setting["zeta2"], eps[use])
    shape_slope = float(np.polyfit(x, np.log(shape), 1)[0])
    return {"d": slopes - SLOPE_BOUND, "brackets": brackets, "why": why, "eps": eps[use].tolist(),
            "slope": claims.paired_interval(slopes), "ratio": (math.exp(last.mean), math.exp(last.lo), math.exp(last.hi)),
            "shape_slope": shape_slope, "readings": readings}


def _times_at(entry: dict, g: float) -> np.ndarray:
    """The reported seeds' times to ε at step ``g`` of ``entry``'s bracket (``report_all``)."""
    steps = np.asarray(entry["steps"], np.float64)
    i = int(np.argmin(np.abs(np.log(steps) - math.log(g))))
    if not math.isclose(steps[i], g, rel_tol=1e-9):
        raise KeyError(f"step {g} was not evaluated (evaluated: {steps.tolist()})")
    return np.asarray(entry["report_all"][i], np.float64)


def _label(data: dict, key: tuple) -> str:
    cfg = data["config"]
    k, n, _, s, prof = key5(key)
    return (f"τ_n/τ_1 = {s}" + ("" if prof == "even" else f", {prof}")
            + (f" (n = {n}, {k})" if len(cfg["workers"]) > 1 or len(cfg["problems"]) > 1 else ""))


def regime_verdict(data: dict, regime: str):
    """(the catalogue's verdict on the regime, [(setting, :func:`ratio_claim`)]): one trend part per
    setting, gated by every step the slopes rest on; None when the regime was not run."""
    got = [(key, ratio_claim(st)) for key, st in data["settings"].items() if key[2] == regime]
    if not got:
        return None, []
    labels = sorted({lb for _, c in got for lb in c["readings"]})
    steps = None if not labels else {"neighbours": {
        lb.split()[-1]: [(_label(data, key), c["readings"].get(lb, np.zeros(0))) for key, c in got] for lb in labels}}
    v = catalogue.verdict(CLAIM_ID, [(_label(data, key), c["d"]) for key, c in got], steps=steps,
                          gate=[b for _, c in got for b in c["brackets"]])
    unmeasured = [_label(data, key) for key, c in got
                  if c["d"].size and steps is not None and any(c["readings"].get(lb, np.zeros(0)).size == 0 for lb in labels)]
    if unmeasured and v.verdict != claims.INCONCLUSIVE:  # its tuned reading was never checked at other steps
        v = catalogue.inconclusive_because(v, "robustness to the step not measured at " + ", ".join(unmeasured)
                                           + " (a time not reached at the tuned steps' neighbours)")
    return v, got


def findings(data: dict) -> str:
    cfg = data["config"]
    lines = [f"R4 ({data['preset']} preset): time to ‖∇F‖² ≤ ε, Rescaled ASGD against Malenia SGD (S = n)"
             + (f" and {', '.join(LABELS[m] for m in cfg['methods'] if m not in CLAIM)}" if len(cfg["methods"]) > 2 else "")
             + f"; d = {D}, λ = {PENALTY:g} (nonconvex); steps bracketed per method and ε on {cfg['tune_seeds']} "
             f"tuning seeds, times on {cfg['report_seeds']} other seeds (gradient noise; instance fixed per setting); "
             f"horizon {cfg['events']}·(ε_0/ε)^{cfg.get('horizon_power', 2)} events (×4, up to {LONGER} times, for a "
             f"method that misses ε); ‖∇F‖² smoothed over {SMOOTH} of {LOG_POINTS} log points, crossing interpolated"
             + (f"; one set of runs per method and pass serves every ε (each pass 4× the last, from the smallest "
                f"ε's horizon), logged every {max(1, cfg['events'] // LOG_POINTS)} events and each ε read at every "
                "(E(ε)/E(ε_0))-th log point. " if cfg.get("share_eps") else ". ") +
             "τ profiles: " + "; ".join(f"{pr}: {PROFILES[pr]}" for pr in cfg.get("profiles", ("even",))) + ".",
             f"Claim: T_Rescaled/T_Malenia bounded as ε → 0, judged per regime by the slope of the log ratio against "
             f"log(1/ε) over the three smallest ε both reach, per seed, minus {SLOPE_BOUND} (a trend: each setting's 95% "
             "t interval over seeds below 0 for the regime to hold, one above 0 at the Bonferroni level for it not to). "
             "Between tuned methods: decided only where the tuned steps and both sets of the tuned steps' grid "
             "neighbours (every cell one refined step below, or above, its best; the two methods' steps have no "
             "common scale) give one word. Per setting: its part's reading at the tuned steps, then at the "
             "neighbours. Theory's shape: the slope of the two bounds' ratio with constants 1."]
    for r in REGIMES:
        v, got = regime_verdict(data, r)
        if v is None:
            continue
        for (key, c), part in zip(got, v.parts):
            k, n, rr, s, prof = key5(key)
            st = data["settings"][key]
            where = f"{k}, n = {n}, {rr}, τ_n/τ_1 = {s}" + ("" if prof == "even" else f", {prof}")
            if c["ratio"] is None:
                lines.append(f"  {where}: {part.verdict} ({c['why']})")
                continue
            ratio = c["ratio"]
            nb = "; ".join(f"{lb}: slope − {SLOPE_BOUND} " + (str(claims.paired_interval(d)) if d.size else
                                                              "not measured (a time not reached)")
                           for lb, d in c["readings"].items())
            lines.append(f"  {where} (σ² = {st['sigma2']:g}, ζ² = {st['zeta2']:g}): "
                         f"{part.verdict}; slope {c['slope']} (theory's shape {c['shape_slope']:+.2f}) over ε = "
                         f"{', '.join(f'{e:.3g}' for e in c['eps'])}; ratio at ε = {c['eps'][-1]:.3g}: {ratio[0]:.2f} "
                         f"[{ratio[1]:.2f}, {ratio[2]:.2f}]" + (f"; at the {nb}" if nb else "")
                         + (f"; {c['why']}" if c["why"] else ""))
        words = [p.verdict for p in v.parts]
        lines.append(f"Regime {r}: {v.verdict} over its {len(words)} settings "
                     f"({words.count(claims.HOLDS)} hold, {words.count(claims.FAILS)} do not, "
                     f"{words.count(claims.INCONCLUSIVE)} inconclusive at the tuned steps)"
                     + (f"; {v.reason}" if v.reason else "") + ".")
    spans = [np.median(e["report"]) / e.get("spacing", e["horizon"] / LOG_POINTS) for st in data["settings"].values()
             for per in st["methods"].values() for e in per if np.isfinite(np.median(e["report"]))]
    if spans:
        lines.append(f"Resolution: every median time reported spans at least {min(spans):.1f} log intervals of its run "
                     "(crossings are interpolated within an interval).")
    lines.append("Times to ε on the reported seeds (median; step chosen on the tuning seeds; * = step at a grid edge):")
    for key, st in data["settings"].items():
        k, n, r, s, prof = key5(key)
        for m, per in st["methods"].items():
            cells = " ".join(f"{np.median(e['report']):9.4g}{'*' if not e['interior'] else ' '}" for e in per)
            lines.append(f"  {k:9s} n={n:<3d} {r:13s} {s:>4} {prof:10s} {LABELS[m]:22s}{cells}")
    return "\n".join(lines) + "\n"


def _log_axes(ax, ylabel: str, title: str) -> None:
    ax.set_xscale("log")
    ys = np.concatenate([np.asarray(line.get_ydata(), np.float64) for line in ax.lines] or [np.zeros(0)])
    if np.any(np.isfinite(ys) & (ys > 0)):
        ax.set_yscale("log")
    else:  # no method reached any ε on every seed: nothing to draw on a log scale
        ax.text(0.5, 0.5, "no ε reached on every seed", transform=ax.transAxes, ha="center", fontsize=8)
    ax.set_xlabel("1/ε")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6)


def verdicts(data: dict) -> list:
    """One row per regime: "T_Rescaled/T_Malenia bounded as ε → 0" over its settings."""
    cfg, out = data["config"], []
    for r in REGIMES:
        v, got = regime_verdict(data, r)
        if v is None:
            continue
        ev = "; ".join(_label(data, key) + (f": slope {c['slope']}, ratio {c['ratio'][0]:.2f} at ε = {c['eps'][-1]:.3g}"
                                            if c["ratio"] else f": {c['why']}") for key, c in got)
        out.append(v.row(f"T_Rescaled/T_Malenia stays bounded as ε → 0 ({r} regime: σ² = {REGIMES[r][0]:g}, "
                         f"ζ² = {REGIMES[r][1]:g}); slope of the log ratio against log(1/ε) below {SLOPE_BOUND}", ev,
                         f"{data['preset']}: {', '.join(cfg['problems'])}, n ∈ {{{', '.join(map(str, cfg['workers']))}}}, "
                         f"τ profiles {', '.join(cfg.get('profiles', ('even',)))}, steps bracketed per ε on "
                         f"{cfg['tune_seeds']} tuning seeds"
                         + ("" if any(c["readings"] for _, c in got) else
                            " (no runs at the tuned steps' neighbours)")
                         + f", {cfg['report_seeds']} reported seeds (gradient noise)"))
    return out


def plot(data: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(data["settings"])
    regimes = [r for r in REGIMES if any(k[2] == r for k in keys)]
    fig, axes = plt.subplots(2, len(regimes), figsize=(5.5 * len(regimes), 8), dpi=110, squeeze=False)
    for c, r in enumerate(regimes):
        ax = axes[0, c]
        for key in [k for k in keys if k[2] == r]:
            st = data["settings"][key]
            eps = np.asarray(st["eps"])
            R, M = st["methods"]["Rescaled"], st["methods"]["Malenia"]
            ratio = [np.exp(np.mean(np.log(np.asarray(a["report"]) / np.asarray(b["report"]))))
                     if np.all(np.isfinite(a["report"])) and np.all(np.isfinite(b["report"])) else np.nan for a, b in zip(R, M)]
            ax.plot(1 / eps, ratio, "o-" if key5(key)[4] == "even" else "s--", ms=3, label=_label(data, key))
        _log_axes(ax, "T_Rescaled / T_Malenia (geometric mean over seeds)", f"{r} regime")
        ax = axes[1, c]  # times at the largest spread of the first problem and n
        key = max((k for k in keys if k[2] == r),
                  key=lambda k: (k[0] == keys[0][0], k[1] == keys[0][1], k[3], key5(k)[4] == "even"))
        st = data["settings"][key]
        eps = np.asarray(st["eps"])
        for m, per in st["methods"].items():
            ax.plot(1 / eps, [np.median(e["report"]) for e in per], "o-", ms=3, label=LABELS[m])
        mal = np.asarray([np.median(e["report"]) for e in st["methods"]["Malenia"]])
        shape = _bound_shape("Malenia", np.asarray(st["taus"]), st["sigma2"], st["zeta2"], eps)
        if np.isfinite(mal[0]):
            ax.plot(1 / eps, shape * mal[0] / shape[0], "k--", lw=1,
                    label="T_heter's shape (no constants), anchored at Malenia's first point")
        _log_axes(ax, "simulated time to ε (median)", f"{key[0]}, n = {key[1]}, " + _label(data, key))
    fig.suptitle("R4: Rescaled ASGD against Malenia SGD as ε → 0 (steps bracketed per ε)", fontsize=10)
    save_figure(fig, path)


def rows(data: dict) -> list[dict]:
    out = []
    for key, st in data["settings"].items():
        k, n, r, s, prof = key5(key)
        for m, per in st["methods"].items():
            for e, entry in zip(st["eps"], per):
                out.append({"problem": k, "n": n, "regime": r, "spread": s, "profile": prof, "method": m, "eps": float(e),
                            "step": float(entry["step"]), "interior": int(bool(entry["interior"])),
                            "median_time": float(np.median(entry["report"]))})
    return out


FIGURE = Figure("r4", "T_Rescaled/T_Malenia as ε → 0, per regime and speed spread, steps bracketed per ε", PRESETS,
                compute, plot, findings, rows, stem="r4_time_to_eps", module=__file__, verdicts=verdicts, units="settings")
