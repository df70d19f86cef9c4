"""Asynchronous SGD against minibatch SGD on real workers, one of them 100× slower (the experiment
of Mishchenko, Bach, Even, Woodworth 2022, at a smaller size; a control preset has no slow worker),
beside the simulator's predictions from a server model fitted to a real run (docs/theory.md §14).

Least squares (rows uniform / √d, targets from a random solution plus noise), every worker sampling
minibatches from all the rows; n Ray workers (:mod:`sim.real`) whose jobs sleep ``fast`` seconds,
worker n − 1's ``slow`` times longer. A calibration run of vanilla ASGD fits the server model
(``sim.schedules.fit``); each method's step is bracketed in the simulator under it on tuning seeds;
then real runs at the tuned steps and each method's grid neighbours (run r: problem seed r, key r,
the methods alternating), each beside its predictions under the fitted server model
(``served``/``served_rounds``, draws seeded r) and fixed computation (τ̂, no server).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os

import jax
import numpy as np

from delaylab.paper_figures._figure import Figure, Parts, progress


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    workers: int
    fast: float  # seconds each fast worker's job sleeps; the slow worker's, ``slow`` times that
    budget: float  # the time budget T, seconds
    runs: int  # reported runs of each method at each step setting (problem seed and key r)
    tune_seeds: int
    rows: int
    dim: int
    batch: int
    calibration_events: int
    refine: int = 2  # twice: a tuned step beside a diverging one leaves its neighbour closer to it
    slow: float = 100.0  # worker n − 1's jobs sleep this many times the others'


PRESETS = {
    "quick": Preset("quick", workers=4, fast=0.001, budget=4.0, runs=3, tune_seeds=2, rows=1000, dim=40, batch=32,
                    calibration_events=600),
    "full": Preset("full", workers=8, fast=0.002, budget=12.0, runs=10, tune_seeds=3, rows=2000, dim=80, batch=64,
                   calibration_events=1500),
    # the control: the quick preset with no slow worker, where the comparison is open
    "quick-control": Preset("quick-control", workers=4, fast=0.001, budget=4.0, runs=3, tune_seeds=2, rows=1000,
                            dim=40, batch=32, calibration_events=600, slow=1.0),
}
SOURCES = ("problem seed r: the rows, the solution and the targets' noise", "key r: every minibatch (real and "
           "simulated)", "the fitted model's job and service draws, seeded r (predictions only)")
FIXED = ("the calibration run (one real run, on tuning seed {seed})", "the initial model x0 = 0",
         "the real runs' own timing (no seed: the machine's)")
NOISE = 0.01  # the targets' noise
METHODS = ("ASGD", "minibatch SGD")
GRIDS = {"ASGD": (0.1, 0.3, 1.0), "minibatch SGD": (0.3, 1.0, 3.0)}
EPS = (0.1, 0.01)  # time to ε: F − F* ≤ ε · (F(x0) − F*), for each ε here
MARGIN = 1.5  # real runs are sized to end at MARGIN · T by the fitted model (a run ending before T is flagged)
LOG_POINTS = 100  # snapshots of a real run up to T, about
CLAIM = "async-beats-minibatch"
CONTROL_CLAIM = "async-beats-minibatch-no-straggler"
STEM = "async_vs_minibatch"


def claim_id(data: dict) -> str:
    """The paper's claim (one worker slower), or the control's question (none slower)."""
    return CLAIM if float(data["slow"]) != 1.0 else CONTROL_CLAIM


def _problem(n: int, cfg: Preset, seed: int, dtype):
    """Problem seed ``seed``: its rows, solution and noise; every worker holds all the rows."""
    from delaylab import sim

    rng = np.random.default_rng((seed, 0xA5))
    M = rng.random((cfg.rows, cfg.dim)) / np.sqrt(cfg.dim)
    y = M @ rng.standard_normal(cfg.dim) + NOISE * rng.standard_normal(cfg.rows)
    return sim.problems.least_squares(np.broadcast_to(M, (n,) + M.shape), np.broadcast_to(y, (n, cfg.rows)),
                                      batch_size=cfg.batch, dtype=dtype)


def _sleeps(cfg: Preset) -> tuple:
    """Each worker's injected sleep per job: ``fast``, the last worker's ``slow`` times that."""
    return (cfg.fast,) * (cfg.workers - 1) + (cfg.fast * cfg.slow,)


def _alg(method: str, step: float):
    from delaylab import algos

    return algos.asgd(stepsize=step) if method == "ASGD" else algos.minibatch_sgd(stepsize=step)


def _gap(problem) -> tuple:
    """(F as a function of the model, F*), evaluated in float32 as the runs compute."""
    objective = jax.jit(problem.fns.objective)
    f_star = float(objective(problem.data, problem.minimiser.astype(np.float32)))
    return (lambda x: float(objective(problem.data, np.asarray(x, np.float32)))), f_star


def _schedule(method: str, model, n: int, budget: float):
    """The fitted model's (``model``: a :class:`sim.schedules.Fit`, its draws seeded) or fixed
    computation's (``model``: τ̂) schedule of ``method`` up to past ``MARGIN`` · ``budget``."""
    from delaylab.sim import schedules

    end = MARGIN * budget
    if isinstance(model, schedules.Fit):
        fit = model
        if method == "ASGD":
            rate = float(np.sum(1.0 / (fit.think() + fit.server.service)))  # no queue: more events than needed
            return _head(fit.schedule(int(math.ceil(end * rate)) + n), end)
        per_round = float(np.max(fit.think()) + fit.server.service)  # below the mean round (a max of draws): sizing only
        return fit.rounds(int(math.ceil(end / per_round)) + 1)
    taus = np.asarray(model, np.float64)
    if method == "ASGD":
        return _head(schedules.fixed_computation(taus, num_events=int(math.ceil(end * np.sum(1.0 / taus))) + n), end)
    return schedules.barrier(schedules.FixedTiming(taus), num_rounds=int(math.ceil(end / taus.max())) + 1)


def _head(sched, end: float):
    return sched.head(max(1, int(np.sum(sched.finish <= end))))


def _simulate(method: str, step: float, problem, sched, key, log_every: int) -> dict:
    from delaylab import sim

    res = sim.run(_alg(method, step), problem, sched, key=key, log_every=log_every)
    return {"time": np.asarray(res.metrics["time"], np.float64), "loss": np.asarray(res.metrics["loss"], np.float64),
            "diverged": int(np.asarray(res.diverged_at)) >= 0}


def _score(curve: dict, f_star: float, budget: float) -> float:
    """log of F − F* averaged over the last tenth of the budget, the verdict's reading (inf if
    diverged)."""
    from delaylab import claims

    if curve["diverged"] and float(curve["time"][-1]) < budget:  # its curve stops at the divergence
        return math.inf
    v = float(claims.window_mean(curve["time"], curve["loss"] - f_star, budget, budget))
    return math.log(v) if math.isfinite(v) and v > 0 else math.inf


def compute(preset: Preset, parts: Parts) -> dict:
    """Calibration, tuning in the simulator, then the real runs (one part each: a real run is not
    repeatable, so a stopped figure keeps the runs it has)."""
    from delaylab import claims
    from delaylab.deahes import stored_bracket
    from delaylab.sim import schedules

    cfg, n = preset, preset.workers
    say = progress("async-vs-minibatch")
    tune, report = claims.disjoint_seeds(cfg.tune_seeds, cfg.runs)
    out = {"preset": cfg.name, "config": dataclasses.asdict(cfg), "slow": cfg.slow, "eps": list(EPS), "window": "time",
           "tune_seeds": tune, "report_seeds": report, "methods": list(METHODS), "runs": {},
           "machine": {"cpus": os.cpu_count(), "load": list(os.getloadavg())}}
    calib, _ = parts.get("calibration", dict(cfg=dataclasses.asdict(cfg)), lambda: _calibrate(cfg, tune[0]))
    out["calibration"] = calib
    trace = {k: np.asarray(v) for k, v in calib["trace"].items()}
    made = hashlib.sha256(np.ascontiguousarray(trace["applied"], np.float64).tobytes()).hexdigest()  # keys the parts
    out["halves"] = _halves(trace, cfg)

    def tuned(method: str) -> dict:
        def score(step):
            vals = []
            for s in tune:
                problem = _problem(n, cfg, s, np.float32)
                _, f_star = _gap(problem)
                sched = _schedule(method, schedules.fit(trace, seed=s), n, cfg.budget)
                curve = _simulate(method, step, problem, sched, jax.random.key(s), max(1, sched.num_events // 200))
                vals.append(_score(curve, f_star, cfg.budget))
            return float(np.mean(vals))

        b = claims.bracket(score, GRIDS[method], max_extend=3, refine=cfg.refine)
        return stored_bracket(b)

    brackets = {}
    for method in METHODS:
        brackets[method], _ = parts.get(f"tune_{method.replace(' ', '_')}",
                                        dict(cfg=dataclasses.asdict(cfg), grid=GRIDS[method], calibration=made),
                                        lambda m=method: tuned(m))
        say(f"{method}: γ = {brackets[method]['best']:.3g} (tuned in the simulator, "
            f"{'interior' if brackets[method]['interior'] else 'at an edge'})")
    out["brackets"] = {m: {k: v for k, v in b.items() if k != "seconds"} for m, b in brackets.items()}
    settings = claims.step_settings({m: claims.Bracket.from_stored(b) for m, b in brackets.items()}, common=False)
    out["settings"] = settings
    total, done = len(settings) * len(METHODS) * len(report), 0
    for label, steps in settings.items():
        for r in report:  # the methods alternate (ABBA) so that a drift in the machine's load is not a method's
            for method in (METHODS if r % 2 == 0 else METHODS[::-1]):
                got, reused = parts.get(f"{label}_{method}_run{r}".replace(" ", "_"),
                                   dict(cfg=dataclasses.asdict(cfg), step=steps[method], run=r, calibration=made),
                                   lambda m=method, g=steps[method], r=r: _one_run(cfg, m, g, r, trace))
                out["runs"][(label, method, r)] = {k: v for k, v in got.items() if k != "seconds"}
                done += 1
                say(f"[{done}/{total}] {label}, {method} γ = {steps[method]:.3g}, run {r}: "
                    + ("stored part reused" if reused else f"{got['seconds']:.0f} s"))
    return out


def _halves(trace: dict, cfg: Preset) -> dict:
    """The server model fitted to each half of the calibration trace, and what each predicts (ASGD's
    updates by T, minibatch SGD's mean round): how much one calibration run pins the model down."""
    from delaylab.sim import schedules

    half = trace["served"] >= 0.5 * trace["served"][-1]
    out = {}
    for name, keep in (("first", ~half), ("second", half)):
        fit = schedules.fit({k: v[keep] for k, v in trace.items()}, seed=0)
        a = _schedule("ASGD", fit, cfg.workers, cfg.budget)
        b = _schedule("minibatch SGD", fit, cfg.workers, cfg.budget)
        out[name] = {"updates": int(np.sum(a.finish <= cfg.budget)), "round": float(b.end_time / (b.round.max() + 1)),
                     "service": float(fit.server.service)}
    return out


def _calibrate(cfg: Preset, seed: int) -> dict:
    from delaylab import algos
    from delaylab.sim import real

    problem = _problem(cfg.workers, cfg, seed, np.float32)
    res = real.run(algos.asgd(stepsize=GRIDS["ASGD"][0]), problem, num_events=cfg.calibration_events,
                   key=jax.random.key(seed), slowdown=real.Slowdown(sleep=_sleeps(cfg)))
    return {"trace": {k: np.asarray(v) for k, v in res.trace.items()}, "seconds_real": res.wall_seconds}


def _one_run(cfg: Preset, method: str, step: float, r: int, trace: dict) -> dict:
    """One real run of ``method`` at ``step`` on problem seed r with key r, its size from the
    server model fitted to the calibration ``trace`` (its draws seeded r), and the two
    predictions of it."""
    from delaylab.sim import real, schedules

    n = cfg.workers
    problem = _problem(n, cfg, r, np.float32)
    F, f_star = _gap(problem)
    model = schedules.fit(trace, seed=r)
    predicted = _schedule(method, model, n, cfg.budget)
    events = predicted.num_events if method == "ASGD" else n * int(predicted.round.max() + 1)
    up_to_t = int(np.sum(predicted.finish <= cfg.budget))
    log_every = max(1, up_to_t // LOG_POINTS) if method == "ASGD" else n
    key = jax.random.key(r)  # the real run's minibatches, and both predictions'
    res = real.run(_alg(method, step), problem, num_events=int(events), key=key, log_every=log_every,
                   slowdown=real.Slowdown(sleep=_sleeps(cfg)))
    real_loss = np.array([F(res.snapshot_params[j]) for j in range(res.snapshot_time.shape[0])])
    fixed = _schedule(method, model.job_mean, n, cfg.budget)
    w, t = res.trace["worker"], res.trace["served"]  # counted when served, as the models count
    within = t <= cfg.budget
    rounds = np.unique(res.trace["served"][res.trace["round"] >= 0]) if method != "ASGD" else np.array([])
    out = {
        "step": step, "f_star": f_star, "f0": F(problem.x0),
        "real": {"time": np.asarray(res.snapshot_time, np.float64), "loss": real_loss},
        "server": _simulate(method, step, problem, predicted, key, log_every),
        "fixed": _simulate(method, step, problem, fixed, key, log_every),
        "real_end": float(res.wall_seconds), "real_events": int(np.sum(within)),
        "server_events": up_to_t, "fixed_events": int(np.sum(fixed.finish <= cfg.budget)),
        "real_share": np.bincount(w[within], minlength=n) / max(1, int(np.sum(within))),
        "server_share": np.bincount(predicted.worker[predicted.finish <= cfg.budget], minlength=n) / max(1, up_to_t),
        "real_round": float(np.mean(np.diff(np.r_[0.0, rounds]))) if rounds.size else float("nan"),
        "server_round": (float(predicted.end_time / (predicted.round.max() + 1)) if method != "ASGD" else float("nan")),
    }
    return out


# --- reading the runs -----------------------------------------------------------------------------


def at_budget(data: dict, label: str, method: str, source: str = "real") -> np.ndarray:
    """Per reported run: F − F* of ``source`` (real, server, fixed) averaged over the last tenth of
    the budget (:func:`claims.window_mean`, the output's reading); inf where the run diverged or its
    value is not finite."""
    from delaylab import claims

    T = float(data["config"]["budget"])
    out = []
    for r in data["report_seeds"]:
        got = data["runs"][(label, method, r)]
        c = got[source]
        v = float(claims.window_mean(c["time"], c["loss"] - got["f_star"], T, T, weight=claims.reading(data)))
        # a simulated run keeps its curve up to its divergence: one that diverged after T reads as it stood at T
        early = c.get("diverged", False) and float(np.asarray(c["time"])[-1]) < T
        out.append(math.inf if early or not math.isfinite(v) else v)
    return np.asarray(out)


def time_to_eps(data: dict, label: str, method: str, source: str = "real", level: float = EPS[-1]) -> np.ndarray:
    """Per reported run: the first time F − F* ≤ ``level`` · (F(x0) − F*), inf if not by the budget
    T (every source read to the same T, though a real run goes on past it)."""
    from delaylab import claims

    T = float(data["config"]["budget"])
    out = []
    for r in data["report_seeds"]:
        got = data["runs"][(label, method, r)]
        c = got[source]
        t = claims.first_crossing(c["time"], c["loss"] - got["f_star"], level * (got["f0"] - got["f_star"]))
        out.append(t if t <= T else math.inf)
    return np.asarray(out)


def unstable(data: dict) -> list:
    """(setting, method, runs, of) where most real runs end with F − F* at T above their start
    (diverging or not descending): the method's step there lies past its stable range."""
    out = []
    for label in data["settings"]:
        for m in METHODS:
            runs = [data["runs"][(label, m, r)] for r in data["report_seeds"]]
            up = int(np.sum(~(at_budget(data, label, m) <= np.array([g["f0"] - g["f_star"] for g in runs]))))
            if 2 * up > len(runs):
                out.append((label, m, up, len(runs)))
    return out


def vacuous(data: dict) -> list:
    """The neighbour settings whose comparison says nothing about the claim: minibatch SGD's step
    lies past its stable range there and ASGD's does not (:func:`unstable`), so ASGD wins by
    minibatch SGD's divergence. A setting where ASGD's step is unstable stays: there the claim's
    favourite fails, which the robustness check must see."""
    bad = {(label, m) for label, m, *_ in unstable(data)}
    return [label for label in data["settings"] if label != "tuned" and (label, "minibatch SGD") in bad
            and (label, "ASGD") not in bad]


def short_runs(data: dict) -> list:
    """(setting, method, run, its end) of every real run that ended before the budget T."""
    T = float(data["config"]["budget"])
    return [(label, m, r, float(g["real_end"])) for (label, m, r), g in data["runs"].items() if g["real_end"] < T]


def verdict(data: dict):
    """``async-beats-minibatch`` through the catalogue: log of ASGD's F − F* at T less minibatch
    SGD's, paired over the runs, at the tuned steps and at the neighbours. A neighbour setting at
    which an arm's step lies past its stable range (:func:`unstable`) is left out of the
    robustness check (its comparison is lopsided), and the reason says so; a real run that ended
    before T makes the verdict inconclusive."""
    from delaylab import claims
    from delaylab.paper_figures import catalogue

    fails = {label for label, m, *_ in unstable(data) if m == "ASGD"}

    def parts(label):
        if label in fails:  # the claim's favourite past its stable range: the comparison is undecided there
            return [("ASGD below minibatch SGD", np.full(len(data["report_seeds"]), np.nan))]
        with np.errstate(divide="ignore", invalid="ignore"):
            d = np.log(at_budget(data, label, "ASGD")) - np.log(at_budget(data, label, "minibatch SGD"))
        return [("ASGD below minibatch SGD", d)]

    dropped = vacuous(data)
    values = {label: parts(label) for label in data["settings"] if label not in dropped}
    tuned, steps = claims.split_settings(values)
    v = catalogue.verdict(claim_id(data), tuned, steps=steps,
                          gate=[claims.Bracket.from_stored(data["brackets"][m]) for m in METHODS])
    if dropped:
        kept = [k for k in data["settings"] if k != "tuned" and k not in dropped]
        v = dataclasses.replace(v, reason="; ".join(x for x in (v.reason, "robustness to the step tested at "
                                                                + (", ".join(kept) if kept else "no neighbour")
                                                                + f" only ({len(kept)} of {len(kept) + len(dropped)} "
                                                                "neighbour settings): at " + ", ".join(dropped)
                                                                + " minibatch SGD's step lies past its stable range "
                                                                "and ASGD's does not") if x))
    at_tuned = [m for label, m, *_ in unstable(data) if label == "tuned"]
    if at_tuned:
        v = catalogue.inconclusive_because(v, f"at the tuned steps {' and '.join(at_tuned)} ends above its start in "
                                              "most runs")
    short = short_runs(data)
    if short:
        v = catalogue.inconclusive_because(v, f"{len(short)} real run(s) ended before the budget (the earliest at "
                                              f"{min(e for *_, e in short):.2f} s)")
    return v


def _unstable_words(data: dict) -> str:
    return "; ".join(f"at {label} {m}'s real runs end above their start in {k} of {n}" for label, m, k, n in
                     unstable(data))


def verdicts(data: dict) -> list:
    v = verdict(data)
    cfg = data["config"]
    lopsided = _unstable_words(data)
    return [v.row("asynchronous SGD below minibatch SGD in F − F* at the time budget, one worker "
                  f"{data['slow']:g}× slower (real Ray workers)" if data["slow"] != 1 else
                  "asynchronous SGD below minibatch SGD in F − F* at the time budget, no slow worker (real Ray "
                  "workers; the control)",
                  v.evidence(".3g", scale=math.exp) + (f"; {lopsided} (a step past the stable range: that "
                                                       "setting's comparison is lopsided)" if lopsided else ""),
                  f"least squares {cfg['rows']}×{cfg['dim']}, every worker sampling all rows, minibatch {cfg['batch']}, "
                  f"n = {cfg['workers']}, fast jobs {1000 * cfg['fast']:g} ms, T = {cfg['budget']:g} s, "
                  f"{cfg['runs']} runs; steps tuned in the simulator under the server model fitted to a calibration "
                  f"run; {data['preset']} preset")]


def _steps_text(steps: dict) -> str:
    return ", ".join(f"{m} γ = {g:.3g}" for m, g in steps.items())


def _times(v: np.ndarray) -> str:
    """Times to ε: how many runs reached it by T, and their median."""
    v = np.asarray(v, np.float64)
    fin = v[np.isfinite(v)]
    return f"{fin.size} of {v.size}" + (f", median {np.median(fin):.3g} s" if fin.size else "")


def _gaps(data: dict) -> str:
    """Where the real runs fall outside what the calibration's halves predict (ASGD's updates by T,
    minibatch SGD's round), in words."""
    lo, hi = sorted((data["halves"]["first"]["updates"], data["halves"]["second"]["updates"]))
    rlo, rhi = sorted((data["halves"]["first"]["round"], data["halves"]["second"]["round"]))
    runs = [data["runs"][("tuned", m, r)] for m in METHODS for r in data["report_seeds"]]
    upd = np.mean([g["real_events"] for g in runs if np.isnan(g["real_round"])])
    rnd = np.mean([g["real_round"] for g in runs if not np.isnan(g["real_round"])])
    out = []
    for what, v, a, b, f in (("ASGD's updates by T", upd, lo, hi, "{:.0f}"),
                             ("minibatch SGD's round (ms)", 1000 * rnd, 1000 * rlo, 1000 * rhi, "{:.1f}")):
        inside = a <= v <= b
        out.append(f"{what}: real {f.format(v)}, the halves' models {f.format(a)} to {f.format(b)}"
                   + (" (inside)" if inside else f" (outside, by {100 * (v / (a if v < a else b) - 1):+.0f}%)"))
    return "At the tuned steps, against the spread of one calibration run: " + "; ".join(out) + "."


def _g(v: np.ndarray) -> str:
    v = np.asarray(v, np.float64)
    if np.all(np.isinf(v)):
        return "inf"
    fin = v[np.isfinite(v)]
    return f"{np.mean(fin):.3g}" + (f" ({int(np.sum(~np.isfinite(v)))} inf)" if fin.size < v.size else "")


def findings(data: dict) -> str:
    cfg, T = data["config"], float(data["config"]["budget"])
    n, k = cfg["workers"], float(data["slow"])
    seed0 = data["tune_seeds"][0]
    lines = [f"Asynchronous SGD against minibatch SGD on real workers ({data['preset']} preset): least squares "
             f"{cfg['rows']} × {cfg['dim']} (rows uniform / √d, targets from a random solution plus noise "
             f"{NOISE:g}; our reconstruction of the authors' recipe), every worker sampling minibatches of "
             f"{cfg['batch']} from all the rows, n = {n} Ray workers whose jobs sleep {1000 * cfg['fast']:g} ms"
             + (f", worker {n - 1} {k:g}× longer" if k != 1 else ", none slower (the control: no straggler)")
             + f"; time budget T = {T:g} s; {cfg['runs']} runs per method and step, the methods alternating. "
             f"A run r resamples {'; '.join(SOURCES)}. Fixed for every run: "
             + "; ".join(FIXED).format(seed=seed0) + ". F − F* is averaged over time in the budget's last tenth; "
             "time to ε is the first time F − F* ≤ ε · (F(x0) − F*), for ε = "
             + " and ".join(f"{e:g}" for e in data["eps"]) + ", counted only by T.", ""]
    cal, halves = data["calibration"]["trace"], data["halves"]
    lines.append(f"Calibration: a real ASGD run of {len(cal['worker'])} updates on tuning seed {seed0}; the server "
                 "model fitted to it sets every step and every run's length, and predicts the runs. Fitted to each "
                 f"half of it alone, the model predicts {halves['first']['updates']} and {halves['second']['updates']} "
                 f"ASGD updates by T and minibatch rounds of {1000 * halves['first']['round']:.1f} and "
                 f"{1000 * halves['second']['round']:.1f} ms (service {1000 * halves['first']['service']:.2f} and "
                 f"{1000 * halves['second']['service']:.2f} ms): the spread one calibration run leaves. The rounds "
                 "model (sim.schedules.served_rounds) takes one service time per round, the mean the fit measured "
                 "per asynchronous update: a modelling choice.")
    for m in METHODS:
        b = data["brackets"][m]
        grid = ", ".join(f"{g:.3g}: {s:.3f}" for g, s in zip(b["steps"], b["scores"]))
        lines.append(f"  {m}: γ = {b['best']:.3g} (in the simulator, log of the mean F − F* over the window, mean over "
                     f"{len(data['tune_seeds'])} tuning seeds: {grid})" + ("" if b["interior"] else " — at the grid's edge"))
    lines.append("")
    lines.append("Per step setting, real runs against the predictions (F − F* at T: means over the runs; time to ε: "
                 "runs that reached it by T, and their median):")
    best = {m: {} for m in METHODS}
    for label, steps in data["settings"].items():
        lines.append(f"- {label} ({_steps_text(steps)}):")
        for m in METHODS:
            f = {s: at_budget(data, label, m, s) for s in ("real", "server", "fixed")}
            best[m][label] = float(np.exp(np.mean(np.log(f["real"]))))
            runs = [data["runs"][(label, m, r)] for r in data["report_seeds"]]
            per = 1 if m == "ASGD" else n  # a minibatch update takes n gradients
            ev = {s: np.mean([g[f"{s}_events"] for g in runs]) / per for s in ("real", "server", "fixed")}
            if m != "ASGD":
                extra = (f"; a round takes {1000 * np.mean([g['real_round'] for g in runs]):.1f} ms real, "
                         f"{1000 * np.mean([g['server_round'] for g in runs]):.1f} ms in the server model")
            else:
                err = np.mean([np.max(np.abs(g["real_share"] - g["server_share"])) for g in runs])
                slow = np.mean([g["real_share"][-1] for g in runs])
                extra = (f"; worker {n - 1}'s share of the updates {100 * slow:.2f}% real, largest share error of the "
                         f"server model {100 * err:.1f} points")
            lines.append(f"    {m}: F − F* real {_g(f['real'])}, server model {_g(f['server'])}, fixed computation "
                         f"{_g(f['fixed'])}; "
                         + "; ".join(f"time to ε = {e:g}: real {_times(time_to_eps(data, label, m, 'real', e))}, "
                                     f"server {_times(time_to_eps(data, label, m, 'server', e))}, fixed "
                                     f"{_times(time_to_eps(data, label, m, 'fixed', e))}" for e in data["eps"])
                         + f"; model updates by T real {ev['real']:.0f}, server {ev['server']:.0f}, fixed "
                         f"{ev['fixed']:.0f}" + extra)
    ends = {m: [float(g["real_end"]) for (_, mm, _), g in data["runs"].items() if mm == m] for m in METHODS}
    lines.append("Real runs, sized by the model to end at " f"{MARGIN:g} T, ended at "
                 + "; ".join(f"{min(e) / T:.2f} to {max(e) / T:.2f} T ({m})" for m, e in ends.items())
                 + ". On the real runs the lowest F − F* at T (geometric mean over runs) is at "
                 + "; ".join(f"{m}'s {min(best[m], key=best[m].get)}" for m in METHODS) + ".")
    v = verdict(data)
    lines += ["", f"Claim ({claim_id(data)}): asynchronous SGD below minibatch SGD in F − F* at T (geometric mean over the "
              "runs of the ratio, with the interval that decided the word): " + v.verdict
              + (f" ({v.reason})" if v.reason else "")]
    lines += v.setting_lines(data["settings"], _steps_text, fmt=".3g", scale=math.exp)
    if unstable(data):
        lines.append(f"  ({_unstable_words(data)}: a step past the stable range. A neighbour setting where only "
                     "minibatch SGD's step is unstable is left out of the robustness check (ASGD would win by "
                     "minibatch SGD's divergence); one where ASGD's is stays in it, its comparison undecided)")
        scores = dict(zip(data["brackets"]["ASGD"]["steps"], data["brackets"]["ASGD"]["scores"]))
        for label, m, *_ in unstable(data):
            g = data["settings"][label]["ASGD"]
            if m == "ASGD" and math.isfinite(scores.get(g, math.inf)):
                lines.append(f"  (ASGD's γ = {g:.3g} at {label} diverges on the real runs though the simulator's "
                             f"tuning scored it {scores[g]:.2f}: the real stable range ends below the model's)")
    tuned = data["settings"]["tuned"]
    rounds = np.mean([data["runs"][("tuned", "minibatch SGD", r)]["real_events"] for r in data["report_seeds"]]) / n
    updates = np.mean([data["runs"][("tuned", "ASGD", r)]["real_events"] for r in data["report_seeds"]])
    tb = {m: dict(zip(data["brackets"][m]["steps"], data["brackets"][m]["scores"]))[tuned[m]] for m in METHODS}
    pred = {s: np.mean([data["runs"][("tuned", "ASGD", r)][f"{s}_events"] for r in data["report_seeds"]])
            for s in ("server", "fixed")}
    gap = tb["minibatch SGD"] - tb["ASGD"]
    lines += ["", f"How far the set-up decides it: by T minibatch SGD took {rounds:.1f} steps (rounds) and ASGD "
              f"{updates:.0f} updates, {updates / max(rounds, 1e-9):.1f} per round; the workers' job times alone "
              f"(fixed computation) predict {pred['fixed'] / max(rounds, 1e-9):.1f} and the fitted server model "
              f"{pred['server'] / max(rounds, 1e-9):.1f} per real round. In the simulator's tuning ({len(data['tune_seeds'])} "
              f"tuning seeds) minibatch SGD's best score is {tb['minibatch SGD']:.2f} against ASGD's {tb['ASGD']:.2f} "
              "(log F − F*)"
              + (f": {gap:.1f} apart, more than a factor of 10, so that no step tried lets minibatch SGD reach ASGD's "
                 "level in the time; with one worker this much slower the outcome is set by the set-up more than "
                 "tested. The control preset (no slow worker) runs the same comparison without the straggler."
                 if k > 1 and gap > math.log(10.0) else
                 f": {gap:+.1f} apart, within a factor of 10, so the simulator leaves the comparison open."
                 if k > 1 else ": the control, every worker equally fast, so no straggler handicaps minibatch SGD; the "
                 f"direction measured here is in the claim's rows above."),
              _gaps(data)
              + " Which cost the model misses there (the driver's loop, the cores the workers share) is a hypothesis, "
              "not measured here.",
              f"Conditions: this machine ({data['machine']['cpus']} cores, load average "
              f"{data['machine']['load'][0]:.1f} when the figure started), Ray's local instance, the runs one after "
              "another reusing Ray's actor processes."]
    return "\n".join(lines) + "\n"


def plot(data: dict, path: str) -> None:
    from delaylab.paper_figures._output import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.3), sharey=True)
    T = float(data["config"]["budget"])
    styles = {"real": ("-", 1.0), "server": ("--", 0.9), "fixed": (":", 0.9)}
    for ax, m in zip(axes, METHODS):
        for r in data["report_seeds"]:
            got = data["runs"][("tuned", m, r)]
            for k, (ls, alpha) in styles.items():
                c = got[k]
                ax.plot(c["time"], np.maximum(c["loss"] - got["f_star"], 1e-12), ls, alpha=alpha,
                        color={"real": "k", "server": "C2", "fixed": "C3"}[k],
                        label={"real": "real (Ray)", "server": "server model (fitted)",
                               "fixed": "fixed computation"}[k] if r == data["report_seeds"][0] else None)
        ax.axvline(T, color="0.5", lw=0.8)
        ax.set(xlabel="seconds", ylabel="F(x) − F*", yscale="log", xlim=(0, 1.3 * T),
               title=f"{m}, γ = {data['settings']['tuned'][m]:.3g}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    who = f"one {data['slow']:g}× slower" if data["slow"] != 1 else "none slower (control)"
    fig.suptitle(f"least squares, n = {data['config']['workers']} Ray workers, {who}; "
                 f"every run at the tuned steps ({data['preset']} preset)", fontsize=10)
    save_figure(fig, path)


def rows(data: dict) -> list:
    out = []
    for label in data["settings"]:
        for m in METHODS:
            f = {s: at_budget(data, label, m, s) for s in ("real", "server", "fixed")}
            te = {(s, e): time_to_eps(data, label, m, s, e) for s in ("real", "server", "fixed") for e in data["eps"]}
            for i, r in enumerate(data["report_seeds"]):
                out.append({"setting": label, "method": m, "run": r, "step": data["settings"][label][m],
                            "real_end": float(data["runs"][(label, m, r)]["real_end"]),
                            **{f"gap_{s}": float(f[s][i]) for s in f},
                            **{f"time_to_eps{e:g}_{s}": float(v[i]) for (s, e), v in te.items()}})
    return out


FIGURE = Figure("async-vs-minibatch", "asynchronous against minibatch SGD on real Ray workers, one 100× slower, "
                "beside the fitted server model's and fixed computation's predictions", PRESETS, compute, plot,
                findings, rows, stem=lambda data: (STEM if data["preset"] == "full" else
                                                   f"{STEM}_{data['preset'].replace('-', '_')}"),
                module=__file__, verdicts=verdicts)
