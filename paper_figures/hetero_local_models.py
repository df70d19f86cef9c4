"""Heterogeneity lab: specialisation where workers keep models of their own.

    delaylab figure hetero-local-models --quick     # ≤ 10 min on 2 cores
    delaylab figure hetero-local-models             # the full preset

``hetero-specialisation`` asked whether fast workers become early-layer specialists on vanilla
ASGD, where a worker's "model" is the server model it was last handed: there the only possible
answer is staleness, the same in every layer. Here the question is asked of methods whose workers
train a model of their own for several steps before it reaches the server: EASGD (each worker keeps
a persistent model, pulled toward the master at each exchange, 4 local steps per exchange),
asynchronous local SGD with Delayed Nesterov outer momentum (4 local SGD steps from the handed
model; Liu et al. 2024) and FedAsync (4 local steps, mixed into the server model with a staleness
weight (1 + δ)^(−½); Xie et al. 2019). Each worker's model is read **after its local steps**
(:class:`sim.telemetry.AfterLocalSteps`: the method's own job run from the point the worker holds,
on its own shard; for EASGD from its persistent model). Set-up and claim: :func:`compute`.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from delaylab import algos
import delaylab.algos.elastic
from delaylab import sim, claims
from delaylab.paper_figures import _hetero as lab, catalogue
from delaylab.paper_figures._figure import Figure, Parts
from delaylab.paper_figures._output import pyplot, save_figure
from delaylab.sim import schedules
from delaylab.sim import telemetry as T

SPLITS = ("iid", "dirichlet 1")
H = 4  # local steps per job
CLAIM_ID = "fast-workers-specialise"
UNIFORM_MARGIN = float(np.log(1.5))  # "layer-uniform": the first layer's ratio within ×1.5 of the last's


def methods() -> dict:
    """name -> algorithm (each says, through its worker half, which model a worker holds after its job)."""
    return {
        "EASGD": algos.elastic.easgd(learning_rate=0.05, alpha=0.1, period=H),
        "async local SGD (DN)": algos.async_local_sgd(stepsize=0.5, local_stepsize=0.05, local_steps=H, momentum=0.5),
        "FedAsync": algos.fedasync(mixing=0.5, local_stepsize=0.05, local_steps=H),
    }


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    train: int
    test: int
    pool: int
    hidden: int
    batch: int
    events: int  # jobs per run
    seeds: int
    ratios: tuple
    probes: int
    logs: int


PRESETS = {
    "quick": Preset("quick", train=8000, test=2000, pool=2, hidden=64, batch=32, events=2000, seeds=5,
                    ratios=(1, 4, 16), probes=128, logs=20),
    "full": Preset("full", train=16000, test=2000, pool=2, hidden=128, batch=32, events=5000, seeds=8,
                   ratios=(1, 2, 4, 8, 16), probes=256, logs=40),
}


@functools.lru_cache(maxsize=4)
def _representations(p: Preset):
    """One Representations telemetry per preset (its probes are constants of the compiled program:
    one object, one program for every run of a method)."""
    _, px, py = lab.probes(p)
    return T.Representations(lab.mlp_module(p), px, py)


def one_run(p: Preset, method: str, split: str, ratio: float, seed: int) -> dict:
    probe_seed = claims.seed_sources(seed, ("telemetry",))["telemetry"]  # a stream apart from the run's own
    prob, timing_seed, key = lab.seeded_problem(p, seed, split=split)
    alg = methods()[method]
    # the recomputed jobs draw their minibatches from the seed too (one compiled program per method and seed)
    tel = T.AfterLocalSteps(_representations(p), seed=probe_seed)
    taus = lab.two_speed_taus(ratio)
    sched = schedules.asynchronous(lab.timing_noise(taus, timing_seed), num_events=p.events)
    res = sim.run(alg, prob, sched, key=key, telemetry=tel,
                  log_every=max(1, p.events // p.logs))
    m = res.metrics
    mask = lab.second_half(np.asarray(m["time"]))
    layers = sorted(k[len("telemetry/cka/"):] for k in m if k.startswith("telemetry/cka/"))
    out = {"layers": layers, "accuracy": float(np.asarray(m["test_accuracy"])[-1]),
           "diverged": res.divergence is not None}
    for layer in layers:
        div = 1.0 - np.asarray(m[f"telemetry/cka/{layer}"], np.float64)[mask]  # [logs, n]
        cos = np.asarray(m[f"telemetry/grad_cos/{layer}"], np.float64)[mask]
        for grp, sl in (("fast", lab.FAST), ("slow", lab.SLOW)):
            out[f"div_{layer}_{grp}"] = float(div[:, sl].mean())
            out[f"cos_{layer}_{grp}"] = float(cos[:, sl].mean())
    return out


def compute(p: Preset, parts: Parts) -> dict:
    """Set-up: an MLP (pixels → hidden → 10) on Fashion-MNIST pooled to 14×14 (scikit-learn's digits
    where it is not installed), 8 workers, 4 fast (job time 1) and 4 slow (job time R) plus
    exponential noise of mean 0.1 τ, R ∈ {1, 4, 16} (R = 1: the labels "fast" and "slow" are
    arbitrary, a control); i.i.d. shards and Dirichlet α = 1 shards. Per layer, averaged over the
    second half of training: how far each worker's model is from the server's in representation
    (1 − linear CKA on a fixed probe batch of test images) and how well its probe gradient aligns with
    the server's (cosine). Step sizes are each method's usual ones, not tuned (stated in the text).

    The claim "fast workers become early-layer specialists" is read as: the fast workers' divergence
    relative to the slow workers' is larger in the first layer than in the last,
    s = log(div_fast/div_slow)|first − log(div_fast/div_slow)|last, and more so the larger the speed
    gap: the effect s(R) − s(1), paired by seed (R = 1 is the control, the groups differing by label
    only), judged over seeds (95% Student-t interval; holds if above 0, does not hold if below,
    inconclusive otherwise); the headline is one conjunction over every cell (:func:`paper_figures.catalogue.verdict`). Seeds
    resample the split, the initial model, the job times and the minibatches (:data:`paper_figures._hetero.SOURCES`), and
    the minibatches of the recomputed jobs that read the workers' models (a stream of their own)."""
    runs, seconds = {}, 0.0
    for method in methods():
        for split in SPLITS:
            for r in p.ratios:
                cell = []
                for s in range(p.seeds):
                    part, reused = parts.get(f"{lab.slug(method)}_{lab.slug(split)}_R{r:g}_s{s}",
                                             {"preset": p, "method": method, "split": split, "ratio": r, "seed": s},
                                             lambda method=method, split=split, r=r, s=s: one_run(p, method, split, r, s))
                    if not reused:
                        lab.progress(f"hetero-local-models {method}, {split}, R = {r:g}, seed {s}: "
                                     f"{part['seconds']:.1f} s")
                    seconds += float(part["seconds"])
                    cell.append(part)
                runs[(method, split, float(r))] = cell
    return {"dataset": lab.tuning_images(p)[0], "preset": p.name, "runs": runs, "ratios": list(map(float, p.ratios)),
            "seconds": seconds, "events": p.events}


def _ok(cell):
    return [r for r in cell if not r["diverged"]]


def _s(cell: list) -> np.ndarray:
    """Per seed (in seed order; NaN where the run diverged): s = first layer's log(div_fast/div_slow)
    minus the last layer's."""
    out = []
    for r in cell:
        if r["diverged"]:
            out.append(np.nan)
            continue
        first, last = r["layers"][0], r["layers"][-1]
        out.append(np.log(r[f"div_{first}_fast"] / r[f"div_{first}_slow"])
                   - np.log(r[f"div_{last}_fast"] / r[f"div_{last}_slow"]))
    return np.array(out)


def analyse(cell: list, control: list | None = None) -> dict:
    """Per layer, log(div_fast/div_slow) and the cosine gap (fast − slow) over seeds; s; and, given
    the R = 1 cell of the same method and split (``control``), the effect s(R) − s(1) paired by seed
    with its verdicts: the claim (effect > 0) and layer-uniformity (|effect| ≤ log 1.5)."""
    runs = _ok(cell)
    layers = list(runs[0]["layers"])
    lr = {L: np.log(np.array([r[f"div_{L}_fast"] / r[f"div_{L}_slow"] for r in runs])) for L in layers}
    gap = {L: np.array([r[f"cos_{L}_fast"] - r[f"cos_{L}_slow"] for r in runs]) for L in layers}
    s = _s(cell)
    out = {"layers": layers, "log_ratio": {L: claims.paired_interval(v) for L, v in lr.items()},
           "cos_gap": {L: claims.paired_interval(v) for L, v in gap.items()},
           "s": claims.paired_interval(s[np.isfinite(s)]), "seeds": len(runs), "diverged": len(cell) - len(runs),
           "accuracy": float(np.mean([r["accuracy"] for r in runs]))}
    if control is not None:
        e = s - _s(control)
        e = e[np.isfinite(e)]
        out["effect"] = e
        out["effect_interval"] = claims.paired_interval(e)
        out["verdict"] = catalogue.verdict(CLAIM_ID, [("effect", -e)]).verdict  # the claim on this cell alone
        out["uniform"] = claims.equal(e, UNIFORM_MARGIN)[0]
    return out


def _iv(iv) -> str:
    return f"{iv.mean:+.3f} [{iv.lo:+.3f}, {iv.hi:+.3f}]"


def judged(d: dict) -> list:
    """(method, split, R, analysis) of every cell with R > 1, each against its R = 1 control."""
    r1 = min(d["ratios"])
    return [(m, sp, r, analyse(c, d["runs"][(m, sp, r1)])) for (m, sp, r), c in d["runs"].items() if r > r1]


def headline(d: dict):
    """The catalogue's verdict over every judged cell's effect, d = −(s(R) − s(1)) per seed (holds
    when every cell holds; does not hold when one fails at the Bonferroni level)."""
    return catalogue.verdict(CLAIM_ID, [(f"{m}, {sp}, R = {r:g}", -a["effect"]) for m, sp, r, a in judged(d)])


def findings(d: dict) -> str:
    L = [f"Specialisation with models of the workers' own ({d['dataset']}, MLP, n = 8: 4 fast at τ = 1, 4 slow at "
         f"τ = R, {d['events']} jobs of {H} local steps; each worker's model read after its local steps; second half "
         "of training; steps untuned: EASGD η = 0.05, α = 0.1; async local SGD η_outer = 0.5, β = 0.5, η_local = 0.05; "
         "FedAsync α = 0.5, η_local = 0.05).",
         "Per layer: log(1−CKA of the fast workers / of the slow workers) and the probe-gradient cosine gap "
         "(fast − slow), mean over seeds with 95% intervals; s = first layer's log ratio − last layer's; the effect "
         "of speed is s(R) − s(1), paired by seed (seeds are shared across R: the same split, initial model and "
         "minibatch key, whose draws follow the event order, which R changes; the job-time noise draws are the same, "
         "scaled by R).", ""]
    effects = {(m, sp, r): a for m, sp, r, a in judged(d)}
    for (method, split, r), cell in d["runs"].items():
        a = analyse(cell)
        parts = "; ".join(f"{L_}: log ratio {_iv(a['log_ratio'][L_])}, cos gap {_iv(a['cos_gap'][L_])}"
                          for L_ in a["layers"])
        line = (f"{method}, {split}, R = {r:g} ({a['seeds']} seeds"
                + (f", {a['diverged']} diverged" if a["diverged"] else "") + f", test accuracy {a['accuracy']:.3f}): "
                f"{parts}; s {_iv(a['s'])}")
        if (method, split, r) in effects:
            e = effects[(method, split, r)]
            line += (f"; effect s(R) − s(1) {_iv(e['effect_interval'])} → fast workers early-layer specialists: "
                     f"{e['verdict']}; layer-uniform within ×1.5: {e['uniform']}")
        else:
            line += " (the control)"
        L.append(line)
    v = headline(d)
    verdict, words = v.verdict, [p.verdict for p in v.parts]
    uniform = [a["uniform"] for a in effects.values()]
    L.append("")
    L.append(f"VERDICT — fast workers become early-layer specialists (every method, both splits, R > 1, against R = 1): "
             f"{verdict} ({words.count(claims.HOLDS)} cells hold, {words.count(claims.FAILS)} do not at the "
             f"Bonferroni level, {len(words) - words.count(claims.HOLDS) - words.count(claims.FAILS)} inconclusive of "
             f"{len(words)}).")
    L.append(f"Layer-uniform (|s(R) − s(1)| ≤ log 1.5, an equivalence margin: speed changes the fast/slow ratio of the "
             f"first layer by less than ×1.5 relative to the last's) in {uniform.count(claims.HOLDS)} of {len(uniform)} "
             f"cells ({uniform.count(claims.FAILS)} not, the rest inconclusive).")
    L.append("Reading: a log ratio above 0 means the fast workers' models are further from the server's than the slow "
             "workers' in that layer. s is symmetric between the groups (s > 0 may as well mean the slow workers' "
             "divergence is relatively larger in the last layer); CKA is taken on activations, so the last layer's "
             "includes what changed before it; and the MLP has two layers, so \"early against late\" is hidden "
             "against logits.")
    r1 = min(d["ratios"])
    controls = [analyse(c)["s"] for (m, sp, r), c in d["runs"].items() if r == r1]
    away = sum(1 for iv in controls if iv.lo > 0 or iv.hi < 0)
    L.append(f"At R = {r1:g}, where the groups differ only by label (seed-to-seed differences in the shards and the "
             f"recomputed jobs' draws), s's 95% interval excludes 0 in {away} of {len(controls)} cells; speed's effect "
             "is read against R = 1 seed by seed all the same, so that what the labels alone produce cancels.")
    return "\n".join(L) + f"\n(preset {d['preset']}, computed in {float(d['seconds']):.0f} s)\n"


def verdicts(d: dict) -> list:
    v = headline(d)
    words = [p.verdict for p in v.parts]
    return [v.row("fast workers become early-layer specialists (methods with models of the workers' own)",
                  f"{words.count(claims.HOLDS)} of {len(words)} cells hold, {words.count(claims.FAILS)} do not "
                  "(s(R) − s(1), s = first-layer − last-layer log divergence ratio, fast over slow)",
                  f"EASGD, async local SGD (DN), FedAsync; i.i.d. and Dirichlet 1 shards; {d['dataset']} MLP, "
                  f"n = 8, R ∈ {{{', '.join(f'{r:g}' for r in d['ratios'])}}}; steps untuned; {d['preset']} preset")]


def rows(d: dict) -> list:
    out = []
    for (method, split, r), cell in d["runs"].items():
        for s, run in enumerate(cell):
            for layer in run["layers"]:
                for grp in ("fast", "slow"):
                    out.append({"method": method, "split": split, "ratio": r, "seed": s, "layer": layer, "group": grp,
                                "one_minus_cka": run[f"div_{layer}_{grp}"], "grad_cos": run[f"cos_{layer}_{grp}"],
                                "test_accuracy": run["accuracy"]})
    return out


def plot(d: dict, path: str) -> None:
    plt = pyplot()
    ms = list(dict.fromkeys(k[0] for k in d["runs"]))
    fig, ax = plt.subplots(len(SPLITS), len(ms), figsize=(5 * len(ms), 4 * len(SPLITS)), dpi=110, squeeze=False)
    for i, split in enumerate(SPLITS):
        for j, method in enumerate(ms):
            a_ = ax[i, j]
            layers = analyse(d["runs"][(method, split, d["ratios"][0])])["layers"]
            for L, c in zip(layers, ("tab:purple", "tab:orange", "tab:green")):
                ivs = [analyse(d["runs"][(method, split, r)])["log_ratio"][L] for r in d["ratios"]]
                a_.errorbar(d["ratios"], [v.mean for v in ivs], yerr=[v.half for v in ivs], color=c, marker="o",
                            ms=3, capsize=3, label=L)
            a_.axhline(0, color="k", lw=0.8)
            a_.set_xscale("log", base=2)
            a_.set_xlabel("compute ratio R")
            a_.set_ylabel("log(1−CKA fast / 1−CKA slow)")
            a_.set_title(f"{method}, {split}", fontsize=9)
            a_.grid(alpha=0.3)
            a_.legend(fontsize=7)
    save_figure(fig, path)


FIGURE = Figure("hetero-local-models", "specialisation where workers keep their own models: EASGD, async local SGD, "
                "FedAsync, read after the local steps", PRESETS, compute, plot, findings, rows,
                stem="hetero_local_models", module=__file__, verdicts=verdicts)
