"""R5 (docs/theory.md §12, Fig. B, and §7.6): an MLP on MNIST-format data with 100 heterogeneous workers.

Setting (the Ringleader group's protocol, which we assume for the Rescaled paper's Fig. B):
n = 100 workers, Dirichlet(α = 0.1) label split into equal-size shards, MLP 784–128–10 (ReLU),
minibatch 4 per gradient, computation times τ_i + |N(0, i)| (variance i) drawn afresh per job,
τ_i = i. Methods: vanilla ASGD, Rescaled ASGD (γ_i = γ τ_i/τ_H with the expected job times
E[τ_i + |N(0, i)|]), IA²SGD, Malenia SGD (S = n: one gradient from every worker per round
[INFERRED]) and Ringleader ASGD.

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
    refine: int = 0  # rounds of refinement around the bracketed best step (claims.bracket)
    test_size: Optional[int] = None  # the first test_size test images (None: the whole test split)


PRESETS = {p.name: p for p in (
    # quick: ≤ 10 min on 2 cores; the pipeline end to end at a twentieth of the paper's horizon.
    Preset("quick", horizon=1500.0, tune_seeds=2, report_seeds=5, train_size=6000, log_points=25),
    # medium: a fifth of the paper's horizon.
    Preset("medium", horizon=6000.0, tune_seeds=2, report_seeds=6, train_size=6000, log_points=40),
    # control: the medium preset with deterministic τ_i = i (the control for the timing noise).
    Preset("control", horizon=6000.0, tune_seeds=2, report_seeds=6, train_size=6000, log_points=40, timing="fixed"),
    # full: the paper's horizon 3·10⁴ (hours on 2 cores: benchmarks/RESULTS.md; resumable per run).
    Preset("full", horizon=30000.0, tune_seeds=2, report_seeds=6, train_size=12000, log_points=60, refine=1),
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


def build(*, seed: int, train_size: int, horizon: float, data_path: Optional[str] = None, timing: str = "random",
          test_size: Optional[int] = None):
    """Seed ``seed``'s problem (its own subset, split and initial model, the test split for
    accuracy), its schedule (its own job-time draws) and its minibatch key; and the data set's name."""
    mean = expected_durations(timing)
    src = claims.seed_sources(seed, SOURCES)
    ds = _dataset(data_path)
    keep = stratified_subset(ds.y_train, train_size, seed=src["subset"])
    test = slice(None) if test_size is None else slice(0, int(test_size))
    problem = mlp_classifier(ds.x_train[keep], ds.y_train[keep], num_workers=N_WORKERS, split="dirichlet",
                             alpha=ALPHA, hidden=128, batch_size=BATCH, seed=src["split"], init_seed=src["init"],
                             dtype=np.float32, test_images=ds.x_test[test], test_labels=ds.y_test[test])
    events = int(np.ceil(horizon * np.sum(1.0 / mean)))
    i = np.arange(1.0, N_WORKERS + 1)
    if timing == "fixed":
        schedule = schedules.fixed_computation(i, num_events=events)
    else:
        schedule = schedules.random_durations(i, num_events=events, noise="halfnormal", scale=np.sqrt(i),
                                              seed=src["timing"])
    return problem, schedule, jax.random.key(src["minibatches"]), ds.name


def _run(make, stepsize: float, seed: int, cfg: Preset, data_path) -> dict:
    """One run: one method at one step on one seed's problem, schedule and key."""
    problem, schedule, key, _ = build(seed=seed, train_size=cfg.train_size, horizon=cfg.horizon, data_path=data_path,
                                      timing=cfg.timing, test_size=cfg.test_size)
    res = sim.sweep(make(float(stepsize)), problem, schedule, keys=key[None],
                    hparams={"stepsize": np.asarray([stepsize], np.float32)},
                    log_every=max(1, schedule.num_events // cfg.log_points))
    m = res.metrics
    stats = {k: float(np.sum(np.asarray(v)[0, 0])) for k, v in res.worker_stats.items()}  # summed over workers
    return {"stats": stats, "time": np.asarray(m["time"], np.float64), "loss": np.asarray(m["loss"], np.float64)[0, 0],
            "grad_sq": np.asarray(m["grad_norm"], np.float64)[0, 0] ** 2,
            "test_accuracy": np.asarray(m["test_accuracy"], np.float64)[0, 0],
            "diverged_at": int(np.asarray(res.diverged_at)[0, 0]), "end_time": float(schedule.end_time)}


def score_at(run: dict, t: float, horizon: float) -> float:
    """The tuning score of one run: F averaged over the window ending at t (inf if it diverged)."""
    v = float(claims.window_mean(run["time"], run["loss"], t, horizon))
    return v if math.isfinite(v) else math.inf


def compute(preset: Preset, parts: Parts, *, data_path: Optional[str] = None, progress: bool = True) -> dict:
    """Every method: its step bracketed on the tuning seeds, then its runs on the reported seeds.
    Each (method, step, seed) run is one part.

    How the numbers are made (:mod:`delaylab.claims`):

    - **Seeds resample every random source**: a seed s gives, through :func:`claims.seed_sources`,
      its own class-stratified training subset, Dirichlet split, initial model, job-time draws and
      minibatch key (``SOURCES``). The test set is the data set's whole test split, the same for
      every seed (it measures, it is not drawn).
    - **Steps bracketed on tuning seeds**: each method's step is chosen by :func:`claims.bracket`
      from its 3-point starting grid (``GRIDS``), extended past an edge while the best step sits
      there (up to ``max_extend`` steps a side), on ``tune_seeds`` seeds disjoint from the reported
      ones (refined once around the best in the full preset). The score is the mean over tuning seeds
      of F averaged over the last tenth of the horizon (:func:`claims.window_mean`, the window the verdicts
      read; inf if a run diverged).
    - **Reported seeds** run at the chosen step: F (the theory's objective (1/n) Σ F_i; the shards
      are equal and partition the training subset, so it is also the pooled cross-entropy over it),
      ‖∇F‖² and the test accuracy, at ``log_points`` times; curves are the median and interquartile
      range over the reported seeds.
    - **Fig. B's ranking** (Rescaled below Ringleader below Malenia in training loss) is judged at
      the end and, along the same curves (one step per method, tuned for the end, as Fig. B draws one
      curve per method), at a third and two thirds of the horizon: at each time t the value is F
      averaged over the log points in (t − horizon/10, t], the paired difference per seed is of log F
      (the figure's log scale), and :func:`claims.conjunction` gives the verdict (95% Student-t
      intervals; "does not hold" at the Bonferroni level). A verdict that rests on a step at a grid
      edge is inconclusive (:func:`claims.gated`). The text adds, for the earlier times, the steps the
      tuning runs would have chosen for them, since a step tuned for the end need not be best earlier.
    - **Malenia SGD's rounds** run under the event model's deviation (``algos/rounds.py``): a job in
      flight at a round's end runs to completion and is discarded, where the paper stops it; the text
      reports Malenia's rounds and discarded gradients and what the handicap means for the verdict.
    - The Dirichlet shards are handed to workers in a drawn order (``sim.data.split_dirichlet``), so
      the most skewed shards, drawn last from the pools' leftovers, do not always go to the slowest
      workers.

    Every run (method, step, seed) is one part, so a stopped run resumes where it was. Deviation,
    stated in the text: the training set is a class-stratified random subset (``train_size`` images,
    so that F and ‖∇F‖² can be evaluated exactly at every log point on a CPU)."""
    cfg = preset
    tune, report = claims.disjoint_seeds(cfg.tune_seeds, cfg.report_seeds)
    _, schedule0, _, dataset = build(seed=report[0], train_size=cfg.train_size, horizon=cfg.horizon,
                                     data_path=data_path, timing=cfg.timing, test_size=cfg.test_size)
    out = {"preset": cfg.name, "config": dataclasses.asdict(cfg), "dataset": dataset, "n": N_WORKERS,
           "events": int(schedule0.num_events), "tune_seeds": tune, "report_seeds": report, "methods": {}}
    methods = _methods(N_WORKERS, expected_durations(cfg.timing))
    count, held = [0], {}  # held: the runs this process has, so a run read again is neither reloaded nor reprinted

    def run(mi, name, g, seed):
        if (mi, float(g), seed) in held:
            return held[mi, float(g), seed]
        inputs = dict(preset=cfg, dataset=dataset, method=name, stepsize=float(g), seed=int(seed))
        part, reused = parts.get(f"m{mi}_g{float(g):.6g}_s{seed}", inputs,
                                 lambda: _run(methods[name], g, seed, cfg, data_path))
        held[mi, float(g), seed] = part
        count[0] += 1
        if progress:
            how = "stored part reused" if reused else f"{part['seconds']:.0f} s"
            print(f"  r5 [{count[0]}] {name:16s} γ = {float(g):.4g}, seed {seed}: {how}", flush=True)
        return part

    for mi, name in enumerate(methods):
        def score(g, mi=mi, name=name):
            return float(np.mean([score_at(run(mi, name, g, s), cfg.horizon, cfg.horizon) for s in tune]))

        b = claims.bracket(score, GRIDS[name], max_extend=cfg.max_extend, refine=cfg.refine)
        runs = [run(mi, name, b.best, s) for s in report]
        # every tuning run's F at each check time: which step an earlier time would have chosen (text only)
        checks = _check_times(cfg.horizon)
        tuning = np.asarray([[[score_at(run(mi, name, g, s), t, cfg.horizon) for t in checks] for s in tune]
                             for g in b.steps])  # [steps, tuning seeds, check times]
        out["methods"][name] = {"times": np.stack([r["time"] for r in runs]),  # [seeds, logs]: a seed's own job times
            "bracket": {"steps": list(b.steps), "scores": list(b.scores), "best": b.best, "interior": b.interior,
                        "edge": b.edge, "extended": b.extended},
            **{k: np.stack([r[k] for r in runs]) for k in ("loss", "grad_sq", "test_accuracy")},
            "diverged": int(sum(r["diverged_at"] >= 0 for r in runs)), "tuning_at_checks": tuning,
            "stats": {k: np.asarray([r["stats"][k] for r in runs]) for k in runs[0]["stats"]},
            "end_times": [r["end_time"] for r in runs]}
        if progress:
            print(f"  r5 {name:16s} {b.note()}", flush=True)
    # the log points' times differ a little from seed to seed (each draws its own job times); the
    # curves are drawn against their median, the verdicts read each seed at its own times
    out["time"] = np.median(next(iter(out["methods"].values()))["times"], axis=0)
    return out


def at_time(data: dict, key: str, t: float) -> dict:
    """name -> per reported seed, ``key`` averaged over that seed's log points in the window ending
    at t (:func:`claims.window_mean`)."""
    h = float(data["config"]["horizon"])
    return {name: claims.window_mean(m["times"], m[key], t, h) for name, m in data["methods"].items()}


def ranking_claim(data: dict, t: float) -> dict:
    """Fig. B's ranking at time t (:func:`compute`): verdict, the two comparisons, the reason."""
    f = at_time(data, "loss", t)
    if not set(RANKING) <= set(f):
        return {"verdict": claims.INCONCLUSIVE, "parts": [], "why": "this run lacks " +
                ", ".join(k for k in RANKING if k not in f)}
    logs = {k: np.log(f[k]) for k in RANKING}
    bad = [k for k in RANKING if not np.all(np.isfinite(logs[k]))]
    if bad:
        return {"verdict": claims.INCONCLUSIVE, "parts": [],
                "why": f"{', '.join(bad)} diverged on some reported seed (F is NaN from then on)"}
    verdict, parts = claims.conjunction([
        (f"{a} below {b}", "below", logs[a] - logs[b]) for a, b in zip(RANKING, RANKING[1:])])
    verdict, why = claims.gated(verdict, [claims.Bracket.from_stored(data["methods"][k]["bracket"]) for k in RANKING])
    return {"verdict": verdict, "parts": parts, "why": why}


def _check_times(horizon: float) -> list:
    return [horizon / 3, 2 * horizon / 3, horizon]


def check_times(data: dict) -> list:
    return _check_times(float(data["config"]["horizon"]))


def _fmt_ratio(iv) -> str:
    return f"{math.exp(iv.mean):.3g} [{math.exp(iv.lo):.3g}, {math.exp(iv.hi):.3g}]"


def findings(data: dict) -> str:
    cfg = data["config"]
    timing = "τ_i = i exactly" if cfg["timing"] == "fixed" else "τ_i = i + |N(0, i)|"
    lines = [f"R5 ({data['preset']} preset): {data['dataset']}, {cfg['train_size']} training images per seed "
             f"(class-stratified subset), n = {data['n']}, Dirichlet α = {ALPHA}, MLP 784–128–10, batch {BATCH}, "
             f"{timing}; {data['events']} events to simulated time {cfg['horizon']:g}.",
             f"Seeds: steps bracketed on tuning seeds {data['tune_seeds']}, reported on seeds {data['report_seeds']}; "
             "each seed draws its own " + ", ".join(SOURCES) + " (the test split is the same for every seed).",
             f"{'method':16s} {'γ':>8s} {'F (end)':>9s} {'‖∇F‖²':>10s} {'test acc':>9s}  bracket (γ: tuning score)"]
    h = float(cfg["horizon"])
    end = {k: at_time(data, key, h) for k, key in (("F", "loss"), ("g2", "grad_sq"), ("acc", "test_accuracy"))}
    for name, m in data["methods"].items():
        b = claims.Bracket.from_stored(m["bracket"])
        grid = ", ".join(f"{g:.4g}: {s:.3g}" for g, s in zip(b.steps, b.scores))
        lines.append(f"{name:16s} {b.best:8.3g} {np.median(end['F'][name]):9.4f} {np.median(end['g2'][name]):10.4g} "
                     f"{np.median(end['acc'][name]):9.3f}  {grid}")
        if not b.interior:
            lines.append(f"  ({name}: {b.note()})")
        if m["diverged"]:
            lines.append(f"  ({name}: {m['diverged']} reported run(s) diverged)")
    lines.append("(medians over the reported seeds of the values averaged over the last tenth of the run)")
    lines.append("Fig. B's ranking, Rescaled below Ringleader below Malenia in training loss F, read along the curves "
                 "(each method at its step tuned for the end of the horizon, one curve per method as in Fig. B; the "
                 "paper states the ranking at its end only): per comparison the geometric mean over seeds of "
                 "F_A/F_B with its 95% t interval (of the mean log ratio; \"does not hold\" at the Bonferroni level).")
    for t in check_times(data):
        c = ranking_claim(data, t)
        parts = "; ".join(f"{p.name}: ratio {_fmt_ratio(p.interval)} ({p.verdict})" for p in c["parts"])
        lines.append(f"  t = {t:g}: {c['verdict']}" + (f" ({parts})" if parts else "") + (f"; {c['why']}" if c["why"] else ""))
    lines += _earlier_tuning(data)
    if "Malenia SGD" in data["methods"]:
        st = data["methods"]["Malenia SGD"]["stats"]
        lines.append("Malenia SGD runs rounds, and a job in flight at a round's end is not cancelled (the event model "
                     "fixes job times ahead): its gradient is discarded on arrival and the worker starts anew, so a round "
                     "waits for the slowest worker to finish a stale job and then a fresh one, up to twice as long as with "
                     f"cancelling (docs/theory.md §7.5). Here: {np.median(st['rounds']):.0f} rounds and {np.median(st['discarded']):.0f} "
                     "discarded gradients per run (medians). This handicaps Malenia against the paper's algorithm: "
                     "\"Ringleader below Malenia\" may hold here because of it, and a \"does not hold\" for it is the stronger finding.")
    if data["preset"] != "full":
        lines.append(f"This is the {data['preset']} preset: horizon {h:g}, not the paper's 3·10⁴ (which holds some "
                     "150–250 of the slowest worker's jobs); at this horizon the round methods have made only a few "
                     "updates, so its rows check the pipeline more than Fig. B.")
    lines.append(f"{len(data['report_seeds'])} reported seeds, against ≥ 10 planned (the paper: 30), for runtime "
                 "(benchmarks/RESULTS.md).")
    return "\n".join(lines) + "\n"


def _earlier_tuning(data: dict) -> list:
    """For each earlier check time: the step each method's tuning runs would have chosen for that
    time, and the ranking of the three on the tuning seeds at those steps (no interval: 2 seeds)."""
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
    out = []
    for t in check_times(data):
        c = ranking_claim(data, t)
        ev = "; ".join(f"F ratio {p.name.replace(' below ', '/')} {_fmt_ratio(p.interval)}" for p in c["parts"])
        out.append({"claim": f"Fig. B's ranking at t = {t:g}: Rescaled below Ringleader below Malenia in training loss "
                             "(along the curves, steps tuned for the end)",
                    "verdict": c["verdict"], "evidence": ev + (f"; {c['why']}" if c["why"] else ""),
                    "conditions": f"{data['preset']}: {data['dataset']}, horizon {cfg['horizon']:g}, "
                                  f"{'fixed' if cfg['timing'] == 'fixed' else 'random'} "
                                  f"times, steps bracketed on {len(data['tune_seeds'])} tuning seeds, "
                                  f"{len(data['report_seeds'])} reported seeds (each resampling {', '.join(SOURCES)}); "
                                  "intervals conditional on the tuned steps"})
    return out


def plot(data: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = ("tab:red", "tab:blue", "tab:purple", "tab:orange", "tab:green")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), dpi=110)
    t = np.asarray(data["time"])
    for (name, m), color in zip(data["methods"].items(), colors):
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
                 f"{len(data['report_seeds'])} seeds resampling data, split, init, times; steps bracketed on "
                 f"{len(data['tune_seeds'])} other seeds; dotted: where the ranking is judged)", fontsize=9)
    save_figure(fig, path)


def rows(data: dict) -> list[dict]:
    out = []
    for j, t in enumerate(data["time"]):
        row = {"time": float(t)}
        for name, m in data["methods"].items():
            for key in ("loss", "grad_sq", "test_accuracy"):
                row[f"{name} {key}"] = float(np.nanmedian(np.asarray(m[key])[:, j]))
        out.append(row)
    return out


def stem(data: dict) -> str:
    return "r5_mnist" if data["preset"] == "full" else f"r5_mnist_{data['preset']}"


FIGURE = Figure("r5", "MNIST-format MLP, n = 100, Dirichlet 0.1: Rescaled, Malenia, Ringleader, IA²SGD, vanilla", PRESETS,
                compute, plot, findings, rows, stem=stem, module=__file__, verdicts=verdicts)
