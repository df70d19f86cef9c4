"""Heterogeneity lab: duration and difficulty. Do slow jobs, or slow workers, end up holding harder
examples, when nothing in how durations are made looks at the images?

    delaylab figure hetero-difficulty --quick     # ≤ 10 min on 2 cores
    delaylab figure hetero-difficulty             # the full preset

``hetero-specialisation`` made a job's duration proportional to the ink of the images it drew, so
its correlation between duration and difficulty measured how ink relates to difficulty in the
data set, not anything about training. Here durations are drawn independently of the images
(random per-example costs, or per-worker speeds that change over time: :func:`timing_for`), so
that any link between a job's (or a worker's) speed and the difficulty of its examples has to come
from training. 32 workers on i.i.d. shards, an MLP on Fashion-MNIST (14×14), vanilla ASGD and
Rescaled ASGD as the control (docs/theory.md §2); what is measured and judged: :func:`compute`.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
from scipy import stats as sps

from delaylab import algos, sim, claims
from delaylab.paper_figures import _hetero as lab, catalogue
from delaylab.paper_figures._figure import Figure, Parts
from delaylab.paper_figures._output import pyplot, save_figure
from delaylab.sim import schedules
from delaylab.sim.models import mlp_classifier

SOURCES = ("split", "init", "costs", "speeds", "minibatches")
TIMINGS = ("costs", "varying")
METHODS = ("vanilla ASGD", "Rescaled ASGD")
SPREAD = 8.0  # slowest base slowness over fastest
BLOCK = 25.0  # "varying": length of a block of constant speed, in simulated time
FACTORS = (0.5, 1.0, 2.0)
CLAIM_ID = "slow-workers-harder-shards"
JOB_MARGIN = 0.05  # the negative control's equivalence margin on the within-worker job-level ρ
NO_LINK = 0.3  # Rescaled's "no link": |ρ| ≤ 0.3 (an equivalence margin: a weak correlation at most)


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    train: int
    test: int
    pool: int
    hidden: int
    batch: int
    workers: int
    events: int
    seeds: int
    step: float
    average_from: float = 0.75


PRESETS = {
    "quick": Preset("quick", train=8000, test=2000, pool=2, hidden=64, batch=16, workers=32, events=30000, seeds=6,
                    step=0.05),
    "full": Preset("full", train=16000, test=2000, pool=2, hidden=64, batch=16, workers=64, events=80000, seeds=10,
                   step=0.05),
}


def slowness(n: int, seed: int) -> np.ndarray:
    """Base slowness s_i: normal quantiles at (i + ½)/n scaled to a SPREAD× range (geometric mean 1),
    in an order drawn from ``seed`` (no worker index is tied to a speed)."""
    z = sps.norm.ppf((np.arange(n) + 0.5) / n)
    s = np.exp(z * math.log(SPREAD) / (z[-1] - z[0]))
    return s[np.random.default_rng(seed).permutation(n)]


def timing_for(kind: str, p: Preset, src: dict, m: int, key) -> schedules.Timing:
    """The timing model ``kind`` of one seed for shards of ``m`` examples:

    * **costs**: every example carries a cost drawn at random (log-normal, σ = 0.5), independent of
      its image; a job of worker i takes s_i (0.2 + 0.8 · its batch's mean cost / the mean cost), s_i
      a base slowness with an 8× spread (normal quantiles, handed to workers in a drawn order);
    * **varying**: every example costs the same; worker i's speed changes over time: in each block
      of 25 time units its jobs run ``factor`` times slower, the factor drawn from {½, 1, 2} per
      worker and block, on top of the same base slowness s_i."""
    n = p.workers
    s = slowness(n, src["speeds"])
    if kind == "costs":
        costs = np.random.default_rng(src["costs"]).lognormal(0.0, 0.5, size=(n, m))
        per = 0.8 * s / (p.batch * costs.mean())
        return schedules.ExampleCostTiming(costs, batch_size=p.batch, key=key, time_per_cost=per, overhead=0.2 * s)
    if kind == "varying":
        base = schedules.ExampleCostTiming(np.ones((n, m)), batch_size=p.batch, key=key, time_per_cost=0.0,
                                           overhead=s)
        # blocks up to well past the run's end: n workers share the events, each job about s_i long
        horizon = 4.0 * p.events / np.sum(1.0 / s)
        rng = np.random.default_rng(src["costs"])
        blocks = int(math.ceil(horizon / BLOCK))
        f = rng.choice(FACTORS, size=(n, blocks))
        intervals = tuple((i, b * BLOCK, (b + 1) * BLOCK, float(f[i, b])) for i in range(n) for b in range(blocks)
                          if f[i, b] != 1.0)
        return schedules.SlowdownTiming(base, intervals)
    raise ValueError(f"timing must be one of {TIMINGS}; got {kind!r}")


def one_run(p: Preset, kind: str, method: str, seed: int) -> dict:
    src = claims.seed_sources(seed, SOURCES)
    _, xtr, ytr, held = lab.tuning_images(p)
    xe, ye = held["test"]
    prob = mlp_classifier(xtr, ytr, num_workers=p.workers, split="iid", hidden=p.hidden, batch_size=p.batch,
                          seed=src["split"], init_seed=src["init"], dtype=np.float32, test_images=xe, test_labels=ye)
    X = np.asarray(prob.data["X"])
    m = X.shape[1]
    key = jax.random.key(src["minibatches"])
    timing = timing_for(kind, p, src, m, key)
    sched = schedules.asynchronous(timing, num_events=p.events)
    n = p.workers
    mean_time = np.array([sched.durations[sched.worker == i].mean() for i in range(n)])
    alg = algos.asgd(stepsize=p.step) if method == "vanilla ASGD" else \
        algos.rescaled_asgd(stepsize=p.step, taus=mean_time)
    res = sim.run(alg, prob, sched, key=key, log_every=max(1, p.events // 10), average_from=p.average_from)
    module = prob.fns.local_objectives.module
    params = res.tail_average

    def losses(Xi, yi):
        import optax

        return optax.softmax_cross_entropy_with_integer_labels(module.apply({"params": params}, Xi), yi)

    difficulty = np.stack([np.asarray(losses(prob.data["X"][i], prob.data["y"][i]), np.float64) for i in range(n)])
    base = timing.base if kind == "varying" else timing
    jobs = sched.job_number
    second = sched.finish >= 0.5 * sched.end_time
    most = int(jobs.max()) + 1  # one length for every worker: one compiled draw, not one per job count
    drawn = {i: base.drawn_indices(i, most) for i in range(n)}
    job_difficulty = np.array([difficulty[w][drawn[w][k]].mean() for w, k in zip(sched.worker, jobs)])
    shard_difficulty = difficulty.mean(axis=1)
    ink = X.reshape(n, m, -1).sum(axis=2)  # [n, m]: each training image's ink
    return {
        "diverged": res.divergence is not None,
        # within workers: a job's duration over its worker's mean against its batch's difficulty over its
        # shard's mean (pooled over workers, the slow workers' harder shards would show up as a job-level link)
        "rho_job": float(sps.spearmanr((sched.durations / mean_time[sched.worker])[second],
                                       (job_difficulty - shard_difficulty[sched.worker])[second])[0]),
        "rho_job_pooled": float(sps.spearmanr(sched.durations[second], job_difficulty[second])[0]),
        "rho_worker": float(sps.spearmanr(mean_time, shard_difficulty)[0]),
        "rho_ink": float(sps.spearmanr(ink.ravel(), difficulty.ravel())[0]),
        "mean_time": mean_time, "shard_difficulty": shard_difficulty,
        "updates": np.bincount(sched.worker, minlength=n).astype(np.float64),
        "test_accuracy": float(np.asarray(res.metrics["test_accuracy"])[-1]),
        "jobs": int(second.sum()),
    }


def compute(p: Preset, parts: Parts) -> dict:
    """Every timing model's runs. n = 32 workers (one seed's worker-level Spearman test has power
    0.82 against ρ = 0.5, 0.37 against ρ = 0.3; the text states it) on i.i.d. shards of an MLP on
    Fashion-MNIST (14×14), vanilla ASGD, and Rescaled ASGD (γ_i ∝ each worker's realised mean job
    time) as the control: theory (docs/theory.md §2) predicts that vanilla weights
    worker i's shard by p_i ∝ 1/τ_i, so the slow workers' shards are fitted less (their training loss
    ends higher: a link from training), and that Rescaled weights the shards equally (no link).
    Difficulty of an example: its loss under the tail-averaged model (the server's parameters
    averaged over the last quarter of simulated time). Measured per seed: Spearman ρ over the jobs of the second half between a job's
    duration and its batch's mean difficulty, both taken relative to the job's worker (duration over
    the worker's mean, difficulty minus the shard's mean: pooled over workers, the worker-level link
    below shows up at the job level too, and is printed beside it); Spearman ρ over the 32 workers between a worker's
    mean job duration and its shard's mean difficulty; and, as a property of the data set, Spearman
    ρ over the training examples between an image's ink and its difficulty. Seeds resample the
    split, the initial model, the costs and speeds, the job times and the minibatches
    (:data:`SOURCES`); verdicts are on the per-seed ρ (95% Student-t intervals over seeds,
    :mod:`delaylab.claims`), vanilla against Rescaled paired by seed."""
    out = {"dataset": lab.tuning_images(p)[0], "preset": p.name, "workers": p.workers, "events": p.events,
           "runs": {}}
    seconds = 0.0
    for kind in TIMINGS:
        for method in METHODS:
            runs = []
            for s in range(p.seeds):
                part, reused = parts.get(f"{kind}_{lab.slug(method)}_s{s}",
                                         {"preset": p, "timing": kind, "method": method, "seed": s},
                                         lambda kind=kind, method=method, s=s: one_run(p, kind, method, s))
                if not reused:
                    lab.progress(f"hetero-difficulty {kind}, {method}, seed {s}: {part['seconds']:.1f} s")
                seconds += float(part["seconds"])
                runs.append(part)
            out["runs"][(kind, method)] = runs
    out["seconds"] = seconds
    return out


def power(n: int, rho: float, alpha: float = 0.05) -> float:
    """Power of a two-sided test of Spearman's ρ = 0 over n points against a true ρ, by Fisher's z
    with the Spearman variance 1.06/(n − 3) (Fieller, Hartley and Pearson 1957)."""
    se = math.sqrt(1.06 / (n - 3))
    z = math.atanh(rho) / se
    c = sps.norm.ppf(1 - alpha / 2)
    return float(sps.norm.sf(c - z) + sps.norm.cdf(-c - z))


def _iv(iv) -> str:
    return f"{iv.mean:+.3f} [{iv.lo:+.3f}, {iv.hi:+.3f}]"


def analyse(d: dict) -> dict:
    """Per timing: the intervals and verdicts of :func:`compute`."""
    out = {}
    for kind in TIMINGS:
        v, r = d["runs"][(kind, "vanilla ASGD")], d["runs"][(kind, "Rescaled ASGD")]
        ok = np.array([not (a["diverged"] or b["diverged"]) for a, b in zip(v, r)])
        wv = np.array([a["rho_worker"] for a in v])[ok]
        wr = np.array([b["rho_worker"] for b in r])[ok]
        jv = np.array([a["rho_job"] for a in v])[ok]
        out[kind] = {
            # training makes the slow workers' shards harder under vanilla (predicted ρ > 0): the
            # catalogue's claim on this timing alone, d = −ρ per seed ...
            "worker_vanilla": (catalogue.verdict(CLAIM_ID, [(kind, -wv)]).verdict, claims.paired_interval(wv)),
            "worker_d": -wv,
            # ... and not under Rescaled, which weights the shards equally: vanilla's ρ above Rescaled's
            "worker_vs_rescaled": claims.below(wr - wv),
            "worker_rescaled": claims.paired_interval(wr),
            "worker_rescaled_none": claims.equal(wr, NO_LINK)[0],
            "job_vanilla": claims.paired_interval(jv),
            # 'varying': durations do not look at the examples, so no within-worker link (|ρ| ≤ 0.05)
            "job_null": claims.equal(jv, JOB_MARGIN)[0],
            "job_pooled": claims.paired_interval(np.array([a["rho_job_pooled"] for a in v])[ok]),
            "ink": claims.paired_interval(np.array([a["rho_ink"] for a in v])[ok]),
            "seeds": int(ok.sum()),
        }
    return out


def findings(d: dict) -> str:
    a = analyse(d)
    n = d["workers"]
    L = [f"Duration and difficulty ({d['dataset']}, MLP, n = {n} workers on i.i.d. shards, {d['events']} events, "
         "vanilla ASGD and Rescaled ASGD; durations drawn independently of the images; difficulty = loss under the "
         "server model averaged over the last quarter of simulated time). Per-seed Spearman ρ; mean over seeds "
         "with its 95% interval.", ""]
    for kind in TIMINGS:
        k = a[kind]
        how = ("per-example costs drawn independently of the images" if kind == "costs" else
               "every example costs the same; each worker's speed changes every 25 time units (×½, ×1, ×2)")
        L.append(f"Timing '{kind}' ({how}; base slowness spread {SPREAD:g}×), {k['seeds']} seeds:")
        wv_verdict, wv = k["worker_vanilla"]
        L.append(f"    workers, vanilla: ρ(mean job time, shard's difficulty) {_iv(wv)} → predicted > 0 (the "
                 f"frequency bias fits the slow workers' shards less): {wv_verdict}")
        L.append(f"    workers, Rescaled (shards weighted equally): ρ {_iv(k['worker_rescaled'])} (|ρ| ≤ {NO_LINK}: "
                 f"{k['worker_rescaled_none']}); vanilla above "
                 f"Rescaled: {k['worker_vs_rescaled'][0]} (paired difference {_iv(k['worker_vs_rescaled'][1])} of "
                 "Rescaled − vanilla)")
        L.append(f"    jobs, vanilla, within workers: ρ(job duration / its worker's mean, batch difficulty − its shard's "
                 f"mean) {_iv(k['job_vanilla'])}; pooled over workers {_iv(k['job_pooled'])} (the pooled ρ mixes in "
                 "the worker-level link above) over about "
                 f"{int(np.mean([r['jobs'] for r in d['runs'][(kind, 'vanilla ASGD')]]))} second-half jobs per seed"
                 + (" (a job's duration follows its examples' random costs; the only way training could link them is "
                    "the one stale gradient of a long job, against some 60 draws of each example over the run: no "
                    "link was expected)" if kind == "costs" else
                    f" (durations do not depend on the examples at all: a negative control, predicted |ρ| ≤ {JOB_MARGIN}: "
                    f"{k['job_null']})"))
        L.append("")
    L.append(f"VERDICT — with durations independent of the data, slow workers end with harder shards under vanilla "
             f"ASGD (both timings, one conjunction): {headline(d).verdict}.")
    L.append("Reading: on i.i.d. shards the examples are exchangeable between workers, so a slow worker's shard "
             "ending with a higher loss is under-fitting (its examples reach the server less often: p_i ∝ 1/τ_i), "
             f"not harder examples; under Rescaled ASGD, which weights the shards equally, the link is at most weak "
             f"(|ρ| ≤ {NO_LINK} by the equivalence test above). Within a "
             "worker, a job's duration says nothing about its examples' difficulty under either timing.")
    L.append("")
    ink = a["costs"]["ink"]
    L.append(f"A property of the data set as a trained model sees it, not of the timing: ρ(ink of an image, its "
             f"difficulty) over the training examples {_iv(ink)} (under vanilla's tail-averaged models, timing "
             "'costs'). This is the correlation hetero-specialisation's ink-defined durations measured.")
    L.append(f"Power: one seed's worker-level test over {n} workers detects ρ = 0.3 with probability "
             f"{power(n, 0.3):.2f} and ρ = 0.5 with {power(n, 0.5):.2f} (two-sided, 5%; Fisher z). The verdicts are "
             f"a different test: the 95% Student-t interval of the mean ρ over {a['costs']['seeds']} seeds lying above 0 (one-sided, 2.5%). "
             f"With 8 workers (the earlier test) "
             f"the power against ρ = 0.5 was {power(8, 0.5):.2f}.")
    return "\n".join(L) + f"\n(preset {d['preset']}, computed in {float(d['seconds']):.0f} s)\n"


def headline(d: dict):
    """The catalogue's verdict on "slow workers end with harder shards under vanilla ASGD": one
    superiority part per timing model, d = −ρ(mean job time, shard loss) per seed (below 0: ρ > 0)."""
    a = analyse(d)
    return catalogue.verdict(CLAIM_ID, [(f"timing '{kind}'", a[kind]["worker_d"]) for kind in TIMINGS])


def verdicts(d: dict) -> list:
    a = analyse(d)
    ev = "; ".join(f"timing '{kind}': ρ(mean job time, shard loss) {_iv(a[kind]['worker_vanilla'][1])} "
                   f"(Rescaled {_iv(a[kind]['worker_rescaled'])})" for kind in TIMINGS)
    seeds = sorted({a[kind]["seeds"] for kind in TIMINGS})
    return [headline(d).row("with durations independent of the data, slow workers end with harder shards under vanilla "
                            "ASGD (a link made by training, the frequency bias)", ev,
                            f"timings {' and '.join(repr(k) for k in TIMINGS)}, {d['dataset']} MLP, n = {d['workers']}, "
                            f"i.i.d. shards, {'/'.join(map(str, seeds))} seeds, {d['preset']} preset")]


def rows(d: dict) -> list:
    return [{"timing": kind, "method": method, "seed": s, "rho_job": r["rho_job"],
             "rho_job_pooled": r["rho_job_pooled"], "rho_worker": r["rho_worker"],
             "rho_ink": r["rho_ink"], "test_accuracy": r["test_accuracy"]}
            for (kind, method), runs in d["runs"].items() for s, r in enumerate(runs)]


def plot(d: dict, path: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4), dpi=110)
    colors = {"vanilla ASGD": "tab:red", "Rescaled ASGD": "tab:blue"}
    for j, kind in enumerate(TIMINGS):
        for method in METHODS:
            r = d["runs"][(kind, method)][0]
            ax[j].scatter(r["mean_time"], r["shard_difficulty"], s=12, color=colors[method],
                          label=f"{method}: ρ = {r['rho_worker']:+.2f}")
        ax[j].set_xscale("log")
        ax[j].xaxis.set_minor_formatter(plt.NullFormatter())
        ax[j].set_xlabel("worker's mean job time")
        ax[j].set_ylabel("its shard's mean loss (difficulty)")
        ax[j].set_title(f"timing '{kind}', seed 0: one point per worker")
    keys = [(k, m) for k in TIMINGS for m in METHODS]
    for x, (kind, method) in enumerate(keys):
        for col, key, mk in (("k", "rho_worker", "o"), ("0.5", "rho_job", "s")):
            v = [r[key] for r in d["runs"][(kind, method)]]
            ax[2].scatter(np.full(len(v), x + (0.15 if key == "rho_job" else -0.15)), v, color=col, marker=mk, s=12,
                          label=("workers" if key == "rho_worker" else "jobs") if x == 0 else None)
    ax[2].axhline(0, color="k", lw=0.8)
    ax[2].set_xticks(range(len(keys)), [f"{k}\n{m}" for k, m in keys], fontsize=7)
    ax[2].set_ylabel("Spearman ρ, per seed")
    ax[2].set_title("speed against difficulty")
    for a_ in ax:
        a_.grid(alpha=0.3)
        a_.legend(fontsize=7)
    save_figure(fig, path)


FIGURE = Figure("hetero-difficulty", "slow jobs and slow workers against the difficulty of their examples, durations "
                "independent of the data", PRESETS, compute, plot, findings, rows, stem="hetero_difficulty",
                module=__file__, verdicts=verdicts)
