"""R5 (docs/theory.md §12, Fig. B, and §7.6): an MLP on MNIST-format data with 100 heterogeneous workers.

Setting (the Ringleader group's protocol, which we assume for the Rescaled paper's Fig. B):
n = 100 workers, Dirichlet(α = 0.1) label split into equal-size shards, MLP 784–128–10 (ReLU),
minibatch 4 per gradient, computation times τ_i + |N(0, i)| (variance i) drawn afresh per job,
τ_i = i. Methods: vanilla ASGD, Rescaled ASGD (γ_i = γ τ_i/τ_H with the expected job times
E[τ_i + |N(0, i)|]), IA²SGD, Malenia SGD (S = n: one gradient from every worker per round
[INFERRED]; its round's end read as "stop" or "ignore", docs/theory.md §7.5) and Ringleader ASGD.

How the numbers are made, with the claims harness (:mod:`delaylab.claims`): :func:`compute`.
Deviation, stated in the text: the training set is a class-stratified random subset
(``train_size`` images, so that F and ‖∇F‖² can be evaluated exactly at every log point on a CPU).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Optional

import jax
import numpy as np

from delaylab import algos, sim, claims
from delaylab.paper_figures import catalogue
from delaylab.paper_figures._figure import Figure, Parts
from delaylab.paper_figures._output import save_figure
from delaylab.sim import schedules
from delaylab.sim.data import load_mnist_format, stratified_subset
from delaylab.sim.models import mlp_classifier

# Starting grids per method (ratio about 3.3); claims.bracket extends them past an edge. Their
# middle values were the best of a shorter probe (horizon 1500, 2 seeds, tail loss):
# vanilla 0.01, Rescaled 0.003, IA²SGD 0.01, Malenia 0.2, Ringleader 0.005 (Ringleader makes n
# updates per round, so its step must be about n times smaller than Malenia's).
GRIDS = {
    "vanilla ASGD": (0.003, 0.01, 0.03),
    "Rescaled ASGD": (0.001, 0.003, 0.01),
    "IA²SGD": (0.003, 0.01, 0.03),
    "Malenia SGD": (0.07, 0.2, 0.7),
    "Ringleader ASGD": (0.0015, 0.005, 0.015),
}
SOURCES = ("subset", "split", "init", "timing", "minibatches")
RANKING = ("Rescaled ASGD", "Ringleader ASGD", "Malenia SGD")  # Fig. B, lowest training loss first
CLAIM = "fig-b-ranking"  # paper_figures.catalogue
PAPER_HORIZON = 30000.0  # the end of Fig. B's time axis, where its ranking is read
# Malenia SGD's round end (docs/theory.md §7.5): "stop" cancels the jobs in flight at a round's close
# (schedules.every_worker_rounds), "ignore" lets them run on and discards their gradients on arrival
READINGS = ("stop", "ignore")


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    horizon: float  # simulated time
    tune_seeds: int
    report_seeds: int
    train_size: int  # training images (class-stratified subset, drawn per seed)
    log_points: int
    timing: str = "random"  # "random": τ_i + |N(0, i)| per job; "fixed": exactly τ_i = i
    max_extend: int = 2  # steps added past a starting grid's edge, per side
    refine: int = 1  # rounds of refinement around the bracketed best step (claims.bracket)
    test_size: Optional[int] = None  # the first test_size test images (None: the whole test split)
    malenia: str = "stop"  # Malenia SGD's round end, one of READINGS

    def __post_init__(self):
        if self.malenia not in READINGS:
            raise ValueError(f"malenia must be one of {READINGS}; got {self.malenia!r}")


# Every preset: 3 tuning seeds, 10 reported seeds (a verdict decided within two half-widths on fewer
# is inconclusive: claims.marginal), brackets refined once, Malenia's "stop" reading.
PRESETS = {p.name: p for p in (
    # quick: the pipeline end to end at a twentieth of the paper's horizon.
    Preset("quick", horizon=1500.0, tune_seeds=3, report_seeds=10, train_size=6000, log_points=25),
    # quick-ignore: the quick preset with Malenia's "ignore" reading.
    Preset("quick-ignore", horizon=1500.0, tune_seeds=3, report_seeds=10, train_size=6000, log_points=25,
           malenia="ignore"),
    # medium: a fifth of the paper's horizon.
    Preset("medium", horizon=6000.0, tune_seeds=3, report_seeds=10, train_size=6000, log_points=40),
    # control: the medium preset with deterministic τ_i = i (the control for the timing noise).
    Preset("control", horizon=6000.0, tune_seeds=3, report_seeds=10, train_size=6000, log_points=40, timing="fixed"),
    # full: the paper's horizon 3·10⁴ (hours on 2 cores: benchmarks/RESULTS.md; resumable per run).
    Preset("full", horizon=30000.0, tune_seeds=3, report_seeds=10, train_size=12000, log_points=60),
    # full-ignore: the full preset with Malenia's "ignore" reading.
    Preset("full-ignore", horizon=30000.0, tune_seeds=3, report_seeds=10, train_size=12000, log_points=60,
           malenia="ignore"),
)}

N_WORKERS = 100
ALPHA = 0.1
BATCH = 4


def _methods(n: int, taus: np.ndarray) -> dict:
    return {
        "vanilla ASGD": lambda g: algos.asgd(stepsize=g),
        "Rescaled ASGD": lambda g: algos.rescaled_asgd(stepsize=g, taus=taus),
        "IA²SGD": lambda g: algos.ia2sgd(stepsize=g),
        "Malenia SGD": lambda g: algos.malenia_sgd(stepsize=g, batch=n),
        "Ringleader ASGD": lambda g: algos.ringleader_asgd(stepsize=g),
    }


def expected_durations(timing: str) -> np.ndarray:
    """E[job time] per worker: i + √i·√(2/π) for τ_i + |N(0, i)|, exactly i for "fixed"."""
    i = np.arange(1.0, N_WORKERS + 1)
    if timing == "fixed":
        return i
    if timing != "random":
        raise ValueError(f"timing must be 'random' or 'fixed'; got {timing!r}")
    return schedules.RandomTiming(i, noise="halfnormal", scale=np.sqrt(i)).mean_durations


@functools.lru_cache(maxsize=2)
def _dataset(data_path: Optional[str]):
    return load_mnist_format(data_path)


def timing_model(seed: int, timing: str = "random"):
    """Seed ``seed``'s job-time model: τ_i + |N(0, i)| drawn from its own stream, or τ_i = i exactly."""
    i = np.arange(1.0, N_WORKERS + 1)
    if timing == "fixed":
        return schedules.FixedTiming(i)
    if timing != "random":
        raise ValueError(f"timing must be 'random' or 'fixed'; got {timing!r}")
    return schedules.RandomTiming(i, noise="halfnormal", scale=np.sqrt(i),
                                  seed=claims.seed_sources(seed, SOURCES)["timing"])


def build(*, seed: int, train_size: int, horizon: float, data_path: Optional[str] = None, timing: str = "random",
          test_size: Optional[int] = None):
    """Seed ``seed``'s problem (its own subset, split and initial model, the test split for
    accuracy), its asynchronous schedule (its own job-time draws) and its minibatch key; and the
    data set's name."""
    mean = expected_durations(timing)
    src = claims.seed_sources(seed, SOURCES)
    ds = _dataset(data_path)
    keep = stratified_subset(ds.y_train, train_size, seed=src["subset"])
    test = slice(None) if test_size is None else slice(0, int(test_size))
    problem = mlp_classifier(ds.x_train[keep], ds.y_train[keep], num_workers=N_WORKERS, split="dirichlet",
                             alpha=ALPHA, hidden=128, batch_size=BATCH, seed=src["split"], init_seed=src["init"],
                             dtype=np.float32, test_images=ds.x_test[test], test_labels=ds.y_test[test])
    events = int(np.ceil(horizon * np.sum(1.0 / mean)))
    schedule = schedules.asynchronous(timing_model(seed, timing), num_events=events)
    return problem, schedule, jax.random.key(src["minibatches"]), ds.name


def stop_schedule(seed: int, horizon: float, timing: str = "random", events: Optional[int] = None):
    """Seed ``seed``'s schedule for Malenia's "stop" reading (``schedules.every_worker_rounds`` on the
    seed's job times): its first ``events`` events (one length for every seed, so that the runs share
    one compiled program), or, with ``events=None``, the events up to ``horizon``."""
    tm = timing_model(seed, timing)
    rounds = int(np.ceil(horizon / float(np.max(tm.mean_durations)))) + 2
    while True:
        s = schedules.every_worker_rounds(tm, num_rounds=rounds)
        if s.end_time > horizon and (events is None or s.num_events >= events):
            break
        rounds *= 2
    k = int(np.searchsorted(s.finish, horizon, side="right")) if events is None else int(events)
    return s.head(max(k, 1))


def _run(make, stepsize: float, seed: int, cfg: Preset, data_path, stop_events: Optional[int] = None) -> dict:
    """One run: one method at one step on one seed's problem, schedule and key (``stop_events``:
    on the seed's "stop" schedule of that many events instead of its asynchronous one)."""
    problem, schedule, key, _ = build(seed=seed, train_size=cfg.train_size, horizon=cfg.horizon, data_path=data_path,
                                      timing=cfg.timing, test_size=cfg.test_size)
    if stop_events is not None:
        schedule = stop_schedule(seed, cfg.horizon, cfg.timing, stop_events)
    res = sim.sweep(make(float(stepsize)), problem, schedule, keys=key[None],
                    hparams={"stepsize": np.asarray([stepsize], np.float32)},
                    log_every=max(1, schedule.num_events // cfg.log_points))
    m = res.metrics
    stats = {k: float(np.sum(np.asarray(v)[0, 0])) for k, v in res.worker_stats.items()}  # summed over workers
    return {"stats": stats, "time": np.asarray(m["time"], np.float64), "loss": np.asarray(m["loss"], np.float64)[0, 0],
            "grad_sq": np.asarray(m["grad_norm"], np.float64)[0, 0] ** 2,
            "test_accuracy": np.asarray(m["test_accuracy"], np.float64)[0, 0],
            "diverged_at": int(np.asarray(res.diverged_at)[0, 0]), "end_time": float(schedule.end_time),
            **_cancelled(schedule, cfg.horizon)}


def _cancelled(schedule, horizon: float) -> dict:
    """The jobs a schedule cancels (``pull_only`` events: a job cut off at a round's close) before
    ``horizon``, and the worker time they had taken (from their start to the close)."""
    cut = np.zeros(schedule.num_events, bool) if schedule.pull_only is None else np.asarray(schedule.pull_only, bool)
    cut = cut & (np.asarray(schedule.finish) <= horizon)
    return {"cancelled": int(np.sum(cut)),
            "cancelled_time": float(np.sum((np.asarray(schedule.finish) - np.asarray(schedule.start))[cut]))}


def score_at(run: dict, t: float, horizon: float) -> float:
    """The tuning score of one run: F averaged over the window ending at t (inf if it diverged)."""
    v = float(claims.window_mean(run["time"], run["loss"], t, horizon))
    return v if math.isfinite(v) else math.inf


def compute(preset: Preset, parts: Parts, *, data_path: Optional[str] = None, progress: bool = True) -> dict:
    """Every method's step bracketed on the tuning seeds, then its runs on the reported seeds; for
    Fig. B's three methods also the runs at the other step settings its verdict needs
    (:func:`claims.step_settings`: each method one step of its refined grid below, and above, its
    tuned step; a common step only where the catalogue's claim has one). Every run (method, step,
    seed) is one part, so a stopped run resumes where it was.

    Seeds resample every random source (``SOURCES``, :func:`claims.seed_sources`); the test split
    is the same for every seed (it measures, it is not drawn). A step is chosen by
    :func:`claims.bracket` from its starting grid (``GRIDS``), extended past an edge while the best
    sits there (up to ``max_extend`` a side), refined ``refine`` times, on tuning seeds disjoint from
    the reported ones, by the mean over them of F averaged over the last tenth of the horizon
    (:func:`claims.window_mean`, the window the verdict reads; inf if a run diverged). Malenia SGD
    runs on the asynchronous schedule ("ignore") or on :func:`stop_schedule` ("stop"), one length
    for every seed, sized by the first reported seed's events up to the horizon."""
    cfg = preset
    tune, report = claims.disjoint_seeds(cfg.tune_seeds, cfg.report_seeds)
    _, schedule0, _, dataset = build(seed=report[0], train_size=cfg.train_size, horizon=cfg.horizon,
                                     data_path=data_path, timing=cfg.timing, test_size=cfg.test_size)
    stop_events = (stop_schedule(report[0], cfg.horizon, cfg.timing).num_events if cfg.malenia == "stop" else None)
    out = {"preset": cfg.name, "config": dataclasses.asdict(cfg), "dataset": dataset, "n": N_WORKERS,
           "events": int(schedule0.num_events), "malenia_events": int(stop_events or schedule0.num_events),
           "tune_seeds": tune, "report_seeds": report, "methods": {}, "window": "time"}
    methods = _methods(N_WORKERS, expected_durations(cfg.timing))
    index = {name: mi for mi, name in enumerate(methods)}
    count, held = [0], {}  # held: the runs this process has, so a run read again is neither reloaded nor reprinted

    def run(name, g, seed):
        mi = index[name]
        if (mi, float(g), seed) in held:
            return held[mi, float(g), seed]
        events = stop_events if name == "Malenia SGD" else None
        inputs = dict(preset=cfg, dataset=dataset, method=name, stepsize=float(g), seed=int(seed),
                      stop_events=events)
        part, reused = parts.get(f"m{mi}_g{float(g):.6g}_s{seed}", inputs,
                                 lambda: _run(methods[name], g, seed, cfg, data_path, events))
        held[mi, float(g), seed] = part
        count[0] += 1
        if progress:
            how = "stored part reused" if reused else f"{part['seconds']:.0f} s"
            print(f"  r5 [{count[0]}] {name:16s} γ = {float(g):.4g}, seed {seed}: {how}", flush=True)
        return part

    brackets = {}
    for name in parts.order(methods):  # each method's tuning and runs a unit of its own (for helpers)
        def score(g, name=name):
            return float(np.mean([score_at(run(name, g, s), cfg.horizon, cfg.horizon) for s in tune]))

        b = brackets[name] = claims.bracket(score, GRIDS[name], max_extend=cfg.max_extend, refine=cfg.refine)
        runs = [run(name, b.best, s) for s in report]
        # every tuning run's F at each read time: which step an earlier time would have chosen (text only)
        checks = _check_times(cfg.horizon)
        tuning = np.asarray([[[score_at(run(name, g, s), t, cfg.horizon) for t in checks] for s in tune]
                             for g in b.steps])  # [steps, tuning seeds, read times]
        # [seeds, logs]: a seed's own log times (its own job times; Malenia's "stop" schedule logs at
        # other events): the curves are drawn against a method's median, the verdicts read each seed
        out["methods"][name] = {"times": np.stack([r["time"] for r in runs]),
            "bracket": {"steps": list(b.steps), "scores": list(b.scores), "best": b.best, "interior": b.interior,
                        "edge": b.edge, "extended": b.extended},
            **{k: np.stack([r[k] for r in runs]) for k in ("loss", "grad_sq", "test_accuracy")},
            "diverged": int(sum(r["diverged_at"] >= 0 for r in runs)), "tuning_at_checks": tuning,
            "stats": {k: np.asarray([r["stats"][k] for r in runs]) for k in runs[0]["stats"]},
            "cancelled": np.asarray([r["cancelled"] for r in runs]),
            "cancelled_time": np.asarray([r["cancelled_time"] for r in runs]), "end_times": [r["end_time"] for r in runs]}
        if progress:
            print(f"  r5 {name:16s} {b.note()}", flush=True)
    out["methods"] = {name: out["methods"][name] for name in methods}  # in the given order, whoever ran what
    if set(RANKING) <= set(methods):  # Fig. B's three methods at every step setting of the verdict
        settings = claims.step_settings({k: brackets[k] for k in RANKING}, common=catalogue.claim(CLAIM).common_step)
        out["ranking"] = {"settings": settings, "runs": {}}
        got = {}
        for label, name in parts.order([(lb, nm) for lb, steps in settings.items() for nm in steps]):  # units
            runs = [run(name, settings[label][name], s) for s in report]
            got[label, name] = {"times": np.stack([r["time"] for r in runs]), "loss": np.stack([r["loss"] for r in runs])}
        for label, steps in settings.items():
            out["ranking"]["runs"][label] = {name: got[label, name] for name in steps}
    return out


def reading(data: dict) -> str:
    """Malenia SGD's reading in ``data``: a run stored before the choice existed ran "ignore"."""
    return str(data["config"].get("malenia", "ignore"))


def at_time(data: dict, key: str, t: float) -> dict:
    """name -> per reported seed, ``key`` averaged over the window ending at t, as the run was read
    (:func:`claims.window_mean`, :func:`claims.reading`)."""
    h, weight = float(data["config"]["horizon"]), claims.reading(data)
    return {name: claims.window_mean(m["times"], m[key], t, h, weight=weight) for name, m in data["methods"].items()}


def _comparisons(f: dict) -> list:
    """Fig. B's consecutive comparisons from F per seed (name -> values): (name, log F_A − log F_B)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return [(f"{a} below {b}", np.log(f[a]) - np.log(f[b])) for a, b in zip(RANKING, RANKING[1:])]


def _diverged(f: dict) -> dict:
    """name -> reported seeds whose F is not finite (a diverged run), where any."""
    return {k: int(np.sum(~np.isfinite(f[k]))) for k in RANKING if not np.all(np.isfinite(f[k]))}


def setting_values(data: dict) -> dict:
    """label -> {name: F per reported seed at the horizon} at each step setting of the verdict (the
    tuned steps are the reported runs); only the tuned steps for data stored without the others."""
    h = float(data["config"]["horizon"])
    out = {"tuned": {k: v for k, v in at_time(data, "loss", h).items() if k in RANKING}}
    for label, by in data.get("ranking", {}).get("runs", {}).items():
        if label != "tuned":
            out[label] = {k: claims.window_mean(r["times"], r["loss"], h, h, weight=claims.reading(data))
                          for k, r in by.items()}
    return out


def settings_of(data: dict) -> dict:
    """label -> {name: step} of :func:`setting_values`."""
    return data.get("ranking", {}).get("settings") or {"tuned": {k: data["methods"][k]["bracket"]["best"]
                                                                 for k in RANKING}}


def ranking_verdict(data: dict) -> catalogue.Verdict:
    """Fig. B's ranking at the end of the horizon through the catalogue (claim ``fig-b-ranking``):
    the consecutive log-F differences at the tuned steps, judged with the same comparisons at the
    other step settings in the data (the catalogue reads those its claim admits), gated on the
    brackets. Data without other settings: inconclusive, robustness to the step not measured."""
    if not set(RANKING) <= set(data["methods"]):
        return catalogue.Verdict(catalogue.claim(CLAIM), claims.INCONCLUSIVE, [], "this run lacks " +
                                 ", ".join(k for k in RANKING if k not in data["methods"]))
    tuned, steps = claims.split_settings({k: _comparisons(v) for k, v in setting_values(data).items()})
    v = catalogue.verdict(CLAIM, tuned, steps=steps,
                          gate=[claims.Bracket.from_stored(data["methods"][k]["bracket"]) for k in RANKING])
    if "ranking" not in data and "robustness to the step" not in v.reason:  # said whatever the tuned word
        v = catalogue.inconclusive_because(v, "robustness to the step not measured (these data hold the tuned "
                                              "steps' runs only)")
    h = float(data["config"]["horizon"])
    if h < PAPER_HORIZON:  # the claim is stated at the end of Fig. B's axis: earlier, whatever the word
        v = catalogue.inconclusive_because(v, f"judged at t = {h:g}, {h / PAPER_HORIZON:.2g} of the paper's horizon "
                                              f"{PAPER_HORIZON:g} where Fig. B states its ranking: a check of the "
                                              "pipeline, not a verdict on the claim")
    return v


def protocol_changes(data: dict) -> list:
    """How the stored run's configuration differs from its preset's as the code defines it now
    (fields a stored run lacks read as the code's defaults of that time: Malenia's "ignore")."""
    now = PRESETS.get(data["preset"])
    if now is None:
        return []
    stored = {**data["config"], "malenia": reading(data)}
    return [f"{k} {stored[k]!r} (now {v!r})" for k, v in dataclasses.asdict(now).items()
            if k in stored and stored[k] != v]


def _check_times(horizon: float) -> list:
    return [horizon / 3, 2 * horizon / 3, horizon]


def check_times(data: dict) -> list:
    return _check_times(float(data["config"]["horizon"]))


def _fmt_ratio(iv) -> str:
    return f"{math.exp(iv.mean):.3g} [{math.exp(iv.lo):.3g}, {math.exp(iv.hi):.3g}]"


def _fmt_setting(f: dict) -> str:
    """One setting's comparisons as a description: the geometric-mean ratio F_A/F_B with its 95% t
    interval, or which methods diverged on how many seeds."""
    bad = _diverged(f)
    if bad:
        n = len(next(iter(f.values())))
        return "diverged: " + ", ".join(f"{k} on {c} of {n} seeds" for k, c in bad.items())
    return "; ".join(f"{name.replace(' below ', '/')} {_fmt_ratio(claims.paired_interval(d))}"
                     for name, d in _comparisons(f))


def _steps_text(steps: dict) -> str:
    return ", ".join(f"{k.split()[0]} γ = {g:.3g}" for k, g in steps.items())


def findings(data: dict) -> str:
    cfg = data["config"]
    timing = "τ_i = i exactly" if cfg["timing"] == "fixed" else "τ_i = i + |N(0, i)|"
    h = float(cfg["horizon"])
    mean = expected_durations(cfg["timing"])
    lines = [f"R5 ({data['preset']} preset): {data['dataset']}, {cfg['train_size']} training images per seed "
             f"(class-stratified subset), n = {data['n']}, Dirichlet α = {ALPHA}, MLP 784–128–10, batch {BATCH}, "
             f"{timing}; {data['events']} events to simulated time {h:g} (Malenia SGD under the \"{reading(data)}\" "
             f"reading of its round's end, docs/theory.md §7.5" + (f": {data['malenia_events']} events" if
                                                                    reading(data) == "stop" else "") + ").",
             f"Seeds: steps bracketed on tuning seeds {data['tune_seeds']}, reported on seeds {data['report_seeds']}; "
             "each seed draws its own " + ", ".join(SOURCES) + " (the test split is the same for every seed).",
             f"{'method':16s} {'γ':>8s} {'runner-up':>20s} {'F (end)':>9s} {'‖∇F‖²':>10s} {'test acc':>9s}  "
             "bracket (γ: tuning score)"]
    end = {k: at_time(data, key, h) for k, key in (("F", "loss"), ("g2", "grad_sq"), ("acc", "test_accuracy"))}
    for name, m in data["methods"].items():
        b = claims.Bracket.from_stored(m["bracket"])
        second, rel = b.resolution()
        grid = ", ".join(f"{g:.4g}: {s:.3g}" for g, s in zip(b.steps, b.scores))
        runner = f"{second:.3g} ({rel:+.1%})" if math.isfinite(rel) else "none"
        lines.append(f"{name:16s} {b.best:8.3g} {runner:>20s} {np.median(end['F'][name]):9.4f} "
                     f"{np.median(end['g2'][name]):10.4g} {np.median(end['acc'][name]):9.3f}  {grid}")
        if not b.interior:
            lines.append(f"  ({name}: {b.note()})")
        if m["diverged"]:
            lines.append(f"  ({name}: {m['diverged']} reported run(s) diverged)")
    lines.append(f"(medians over the reported seeds of {claims.window_words(data, 'the values', 0.9 * h, h)}; runner-up: "
                 "the second-best step of the bracket and its tuning score relative to the best's)")
    v = ranking_verdict(data)
    common = catalogue.claim(CLAIM).common_step
    lines.append(f"Fig. B's ranking, Rescaled below Ringleader below Malenia in training loss F, judged at the end of "
                 f"the horizon, t = {h:g} ({claims.window_words(data, 'F', 0.9 * h, h)}; the paper states it "
                 "at the end of its axis), through the catalogue "
                 f"({CLAIM}, {v.claim.kind}): per comparison the geometric mean over seeds of F_A/F_B with the interval "
                 "that decided its word and that interval's level (of the mean log ratio; \"does not hold\" at the "
                 "Bonferroni level). It holds or does not hold only where the tuned steps"
                 + (", a common step" if common else "") + " and the tuned steps' grid neighbours give the same word, "
                 "and none is decided within two half-widths on fewer than 10 seeds"
                 + ("" if common else " (no common step: the three methods' steps share no scale, Malenia's being "
                                      "one step per round of n gradients)") + ".")
    lines.append(f"  verdict: {v.verdict}" + (f" ({v.reason})" if v.reason else ""))
    if set(RANKING) <= set(data["methods"]):
        values, settings = setting_values(data), settings_of(data)
        lines += v.setting_lines(settings, _steps_text, fmt=".3g", scale=math.exp, indent="  ")
        for label, f in values.items():
            if _diverged(f):
                lines.append(f"  ({label}: {_fmt_setting(f)})")
        lines.append("Along the same curves at earlier times (each method at its step tuned for the end; a "
                     "description, not a verdict: the paper states no ranking there):")
        for t in check_times(data)[:-1]:
            f = {k: v for k, v in at_time(data, "loss", t).items() if k in RANKING}
            lines.append(f"  t = {t:g}: {_fmt_setting(f)}")
    lines += _earlier_tuning(data)
    lines += _malenia_note(data)
    slowest = float(mean[-1])
    if data["preset"] != "full" and h < PAPER_HORIZON:
        lines.append(f"This is the {data['preset']} preset: horizon {h:g}, about {h / slowest:.0f} of the slowest "
                     f"worker's expected jobs, against the paper's {PAPER_HORIZON:g} (about {PAPER_HORIZON / slowest:.0f}); "
                     "its rows check the pipeline more than Fig. B.")
    lines.append(f"{len(data['report_seeds'])} reported seeds (the paper: 30).")
    changed = protocol_changes(data)
    if changed:
        lines.append(f"These data were computed under an earlier protocol of the {data['preset']} preset: "
                     + ", ".join(changed) + "; rerun the preset for the current one.")
    return "\n".join(lines) + "\n"


def _cancelled_text(data: dict, m: dict) -> str:
    """The jobs cancelled before the horizon and their share of the workers' time up to it; stored
    data of the earlier protocol counted cancelled jobs only, over the whole schedule."""
    if "cancelled_time" not in m:
        return f"{np.median(m['cancelled']):.0f} cancelled jobs (counted over the whole schedule, past the horizon too)"
    share = np.asarray(m["cancelled_time"], np.float64) / (N_WORKERS * float(data["config"]["horizon"]))
    return (f"{np.median(m['cancelled']):.0f} jobs cancelled before the horizon, which had taken "
            f"{np.median(share):.1%} of the workers' time")


def _malenia_note(data: dict) -> list:
    """What Malenia's reading did in these runs: rounds, cancelled jobs, discarded gradients."""
    if "Malenia SGD" not in data["methods"]:
        return []
    m = data["methods"]["Malenia SGD"]
    st, rounds = m["stats"], float(np.median(m["stats"]["rounds"]))
    length = float(np.median(np.asarray(m["end_times"]) / np.maximum(np.asarray(st["rounds"]), 1)))
    if reading(data) == "stop":
        return [f"Malenia SGD, \"stop\": each round closes once every worker has one gradient at the round's point; "
                f"the jobs then in flight are cancelled and every worker starts the next round. Here: {rounds:.0f} "
                f"rounds of {length:.0f} time units, {_cancelled_text(data, m)} and "
                f"{np.median(st['discarded']):.0f} discarded gradients per run (medians)."]
    return [f"Malenia SGD, \"ignore\": a job in flight at a round's end runs on; its gradient is discarded on arrival "
            "and its worker starts anew, so a round can wait for the slowest worker to finish a stale job and then a "
            f"fresh one. Here: {rounds:.0f} rounds of {length:.0f} time units and {np.median(st['discarded']):.0f} "
            "discarded gradients per run (medians). The \"stop\" reading (every preset's default now, but for the "
            "\"-ignore\" ones) cancels those jobs."]


def _earlier_tuning(data: dict) -> list:
    """For each earlier read time: the step each method's tuning runs would have chosen for that
    time, and the order of the three on the tuning seeds at those steps (no interval)."""
    if not set(RANKING) <= set(data["methods"]):
        return []
    out = []
    for j, t in enumerate(check_times(data)[:-1]):
        best = {}
        for k in RANKING:
            m = data["methods"][k]
            v = np.mean(np.asarray(m["tuning_at_checks"])[:, :, j], axis=1)  # [steps]
            i = int(np.argmin(v))
            best[k] = (m["bracket"]["steps"][i], float(v[i]))
        order = " < ".join(sorted(RANKING, key=lambda k: best[k][1]))
        out.append(f"  tuned for t = {t:g} instead (tuning seeds only, among the steps evaluated): "
                   + ", ".join(f"{k} γ = {g:.3g}, F {f:.3g}" for k, (g, f) in best.items()) + f"; order {order}.")
    return out


def verdicts(data: dict) -> list:
    cfg = data["config"]
    h = float(cfg["horizon"])
    v = ranking_verdict(data)
    ev = "F ratios at the tuned steps (geometric means over seeds): " + v.evidence(".3g", scale=math.exp)
    changed = protocol_changes(data)
    return [v.row(f"Fig. B's ranking at the end of the horizon (t = {h:g}): Rescaled below Ringleader below Malenia "
                  f"in training loss (Malenia SGD's \"{reading(data)}\" reading)",
                  ev if v.parts else "no comparison",
                  f"{data['preset']}: {data['dataset']}, horizon {h:g}, "
                  f"{'fixed' if cfg['timing'] == 'fixed' else 'random'} times, steps bracketed on "
                  f"{len(data['tune_seeds'])} tuning seeds, {len(data['report_seeds'])} reported seeds (each "
                  f"resampling {', '.join(SOURCES)}); intervals conditional on the tuned steps"
                  + ("; computed under an earlier protocol of the preset: " + ", ".join(changed) if changed else ""))]


def plot(data: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = ("tab:red", "tab:blue", "tab:purple", "tab:orange", "tab:green")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), dpi=110)
    for (name, m), color in zip(data["methods"].items(), colors):
        t = np.median(np.asarray(m["times"]), axis=0)  # a method's own log times (Malenia's "stop" schedule differs)
        for ax, key in zip(axes, ("loss", "grad_sq", "test_accuracy")):
            v = np.asarray(m[key])
            med = np.nanmedian(v, axis=0)
            lo, hi = np.nanpercentile(v, [25, 75], axis=0)
            ax.plot(t, med, color=color, lw=1.4, label=f"{name} (γ = {m['bracket']['best']:.3g})")
            ax.fill_between(t, lo, hi, color=color, alpha=0.2)
    for ax, label in zip(axes, ("training cross-entropy F", "‖∇F‖²", "test accuracy")):
        if label != "test accuracy":
            ax.set_yscale("log")
        ax.set_xlabel("simulated time")
        ax.set_ylabel(f"{label} (median, IQR band)")
        ax.grid(alpha=0.3)
    for t_check in check_times(data):
        axes[0].axvline(t_check, color="0.6", lw=0.8, ls=":")
    axes[0].legend(fontsize=8)
    cfg = data["config"]
    timing = "τ_i = i" if cfg["timing"] == "fixed" else "τ_i = i + |N(0, i)|"
    fig.suptitle(f"R5: {data['dataset']}, n = {data['n']}, Dirichlet α = {ALPHA}, {timing} ({data['preset']} preset, "
                 f"{len(data['report_seeds'])} seeds each resampling " + ", ".join(SOURCES) + ";\nsteps bracketed on "
                 f"{len(data['tune_seeds'])} other seeds; Malenia \"{reading(data)}\"; dotted: read times, the ranking judged at "
                 "the last)", fontsize=9)
    save_figure(fig, path)


def rows(data: dict) -> list[dict]:
    """One row per (method, log point): the median over the reported seeds of the log time and of
    each logged value (each method logs at its own times)."""
    out = []
    for name, m in data["methods"].items():
        t = np.median(np.asarray(m["times"]), axis=0)
        for j in range(t.shape[0]):
            out.append({"method": name, "time": float(t[j]),
                        **{key: float(np.nanmedian(np.asarray(m[key])[:, j])) for key in ("loss", "grad_sq", "test_accuracy")}})
    return out


def stem(data: dict) -> str:
    return "r5_mnist" if data["preset"] == "full" else f"r5_mnist_{data['preset']}"


FIGURE = Figure("r5", "MNIST-format MLP, n = 100, Dirichlet 0.1: Rescaled, Malenia, Ringleader, IA²SGD, vanilla", PRESETS,
                compute, plot, findings, rows, stem=stem, module=__file__, verdicts=verdicts, units="methods")
