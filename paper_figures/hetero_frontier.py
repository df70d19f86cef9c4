"""Heterogeneity lab, experiment ``frontier``: see :mod:`paper_figures._hetero` for the set-up the
lab shares.

Is there an optimal level of heterogeneity? Each scheme's test accuracy at a fixed simulated time,
and its time to a target accuracy, against the spread of worker speeds h at fixed total compute
(τ_i = e^{h z_i}, z_i evenly spaced normal quantiles, scaled so that Σ 1/τ_i = n), for synchronous
SGD, backup workers (b = 2), vanilla and Rescaled ASGD, hierarchical SGD, and grouped
synchronisation (GSP: two groups by speed, SSP bound 2 within each, a group forwards its gradients
every 4 pushes), with the claims harness (:mod:`delaylab.claims`; how: :func:`compute`).

    delaylab figure hetero-frontier --quick     # the quick preset (i.i.d. shards)
    delaylab figure hetero-frontier             # the full preset (i.i.d. shards)
    delaylab figure hetero-frontier --preset full-dirichlet   # the full preset on Dirichlet α = 1 shards
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from delaylab import algos, claims, theory
from delaylab.paper_figures import _hetero as lab
from delaylab.paper_figures import catalogue
from delaylab.paper_figures._figure import Figure
from delaylab.paper_figures._hetero import N, Preset

# The lab's presets on i.i.d. shards, and each on Dirichlet α = 1 shards (the lab's non-i.i.d. split,
# as in experiment 4): with shards of different distributions vanilla ASGD's bias toward fast workers
# weights different data, which i.i.d. shards cannot show.
# Rescaled ASGD's largest step per update is γ·τ_max/τ_H, which grows with the spread h, so its
# tuned γ falls several-fold from h = 0 to h = 2: the frontier lets a bracket extend
# up to FRONTIER_EXTEND steps past a starting grid's edge (the lab's 3 left it at an edge there).
# Only a bracket whose best sits at an edge extends, so the other cells run what they ran before.
DIRICHLET = "dirichlet 1"
FRONTIER_EXTEND = 5
# its full presets screen their tuning (claims.bracket's screen: SCREEN below), which on the quick
# preset picked the same step in every cell as full brackets (benchmarks/RESULTS.md)
SCREEN = 0.25
_FRONTIER = {k: dataclasses.replace(v, max_extend=FRONTIER_EXTEND, screen=SCREEN if k == "full" else 0.0)
             for k, v in lab.PRESETS.items()}
PRESETS = {**_FRONTIER, **{f"{k}-dirichlet": dataclasses.replace(v, name=f"{k}-dirichlet", split=DIRICHLET)
                           for k, v in _FRONTIER.items()}}
# The quick preset with its tuning screened (claims.bracket's screen: a step whose first tuning seed
# scores 25% worse than the best step's is not run on the other two): run beside --quick, it shows
# whether screening picks the same steps as full brackets (benchmarks/RESULTS.md).
PRESETS["quick-screened"] = dataclasses.replace(PRESETS["quick"], name="quick-screened", screen=SCREEN)
from delaylab.paper_figures._output import pyplot, save_figure
from delaylab.sim import schedules


# --- 3. frontier ------------------------------------------------------------------------------

LEVELS_H = (0.0, 0.5, 1.0, 1.5, 2.0)
GAMMAS_ASYNC = (0.05, 0.1, 0.2)  # starting grids (claims.bracket extends them): one gradient per step
GAMMAS_SYNC = (0.2, 0.4, 0.8)  # steps on the average of up to 8 gradients (or of 8 models)
GAMMAS_GSP = tuple(g * N for g in GAMMAS_ASYNC)  # GSP steps γ/n per push: the same per-push steps as ASGD's

ROUND_BASED = ("synchronous SGD", "backup workers (b = 2)", "hierarchical SGD")  # wait for rounds
HIER = {2: 4, 4: 8}  # groups of 4 average every 2 steps, all 8 every 4
GSP_GROUPS, GSP_BOUND, GSP_FORWARD = 2, 2, 4  # two speed groups, SSP bound 2 within each, forward every 4 pushes
WAITING = ROUND_BASED + ("grouped (GSP)",)  # schemes whose workers wait (rounds, or GSP's SSP bound)


def frontier_schemes(taus: np.ndarray, horizon: float) -> dict:
    """name -> :class:`lab.Scheme` for the frontier at speeds ``taus``, counts guessed for ``horizon``."""
    rate = float(np.sum(1.0 / taus))
    rounds = int(horizon / (np.max(taus) * 1.3))
    groups = algos.groups_by_speed(taus, GSP_GROUPS)
    asynchronous = lambda tm, c: schedules.asynchronous(tm, num_events=c)  # noqa: E731
    return {
        "synchronous SGD": lab.Scheme(lambda g: algos.minibatch_sgd(stepsize=g),
                                      lambda tm, c: schedules.barrier(tm, num_rounds=c), rounds, GAMMAS_SYNC),
        "backup workers (b = 2)": lab.Scheme(lambda g: algos.minibatch_sgd(stepsize=g),
                                             lambda tm, c: schedules.backup_workers(tm, num_rounds=c, backups=2),
                                             rounds, GAMMAS_SYNC),
        "vanilla ASGD": lab.Scheme(lambda g: algos.asgd(stepsize=g), asynchronous, int(horizon * rate), GAMMAS_ASYNC),
        "Rescaled ASGD": lab.Scheme(lambda g: algos.rescaled_asgd(stepsize=g, taus=lab.timing_noise(taus).mean_durations),
                                    asynchronous, int(horizon * rate), GAMMAS_ASYNC),
        "hierarchical SGD": lab.Scheme(lambda g: algos.hierarchical_sgd(stepsize=g, levels=HIER),
                                       lambda tm, c: schedules.hierarchical(tm, num_steps=c, levels=HIER),
                                       int(horizon / np.max(taus)), GAMMAS_SYNC),
        "grouped (GSP)": lab.Scheme(lambda g: algos.gsp(stepsize=g, groups=groups, forward_every=GSP_FORWARD),
                                    lambda tm, c: schedules.stale_synchronous(tm, num_jobs=c, groups=groups,
                                                                              bound=GSP_BOUND),
                                    int(horizon * rate), GAMMAS_GSP),
    }


def _time_to(t: np.ndarray, acc: np.ndarray, target: float, horizon: float = math.inf) -> float:
    """The first log time at or before ``horizon`` with accuracy ≥ ``target`` (inf: none)."""
    hit = np.flatnonzero((np.asarray(acc) >= target) & (np.asarray(t) <= horizon + 1e-9))
    return float(t[hit[0]]) if hit.size else math.inf


SHARE = 1.1  # a scheme whose levels' lengths differ by at most this factor runs one length at every h


def run_counts(horizon: float) -> dict:
    """(h, name) -> (count, events): each run is built with ``count`` (events, rounds, steps or
    reports) and cut to ``events`` events by :func:`schedule_of`: the length that takes timing-noise
    seed 0 to ``horizon``, with a margin that takes every seed past it (:func:`lab.with_margin`).
    One length means one compiled program (the engine compiles one per schedule length, some 8 s
    each here), so every seed of a cell runs one length (GSP's release
    events make its length vary with the draws), and a scheme whose levels need lengths within a
    factor ``SHARE`` of each other (the asynchronous ones: total compute is the same at every h)
    runs the longest of them at every h; the round-based ones, whose rounds slow down as the
    slowest worker does, get a length per level. Runs that pass the budget are read at it
    (:func:`lab.tail`)."""
    need: dict = {}
    for h in LEVELS_H:
        taus = lab.spread_taus(h)
        for name, sc in frontier_schemes(taus, horizon).items():
            c = lab.with_margin(lab.count_until(lambda k, sc=sc: sc.build(lab.timing_noise(taus, 0), k), horizon,
                                                sc.guess))
            need[h, name] = (c, sc.build(lab.timing_noise(taus, 0), c).num_events)
    out = {}
    for name in dict.fromkeys(n for _, n in need):
        levels = {h: ce for (h, n), ce in need.items() if n == name}
        events = [e for _, e in levels.values()]
        if max(events) <= SHARE * min(events):
            longest = max(levels.values(), key=lambda ce: ce[1])
            out.update({(h, name): (max(c for c, _ in levels.values()), longest[1]) for h in levels})
        else:
            out.update({(h, name): ce for h, ce in levels.items()})
    return out


def schedule_of(sc: lab.Scheme, timing, count: int, events: int):
    """``sc``'s schedule on ``timing`` with exactly ``events`` events: built with ``count``, or more
    until it has them, and cut to them (:meth:`sim.schedules.Schedule.head`)."""
    s = sc.build(timing, count)
    while s.num_events < events:
        count = int(count * 1.25) + 1
        s = sc.build(timing, count)
    return s if s.num_events == events else s.head(events)


def compute(p: Preset, parts) -> dict:
    """Every (h, scheme) cell: its step bracketed on the tuning seeds, its reported runs.

    - every (h, scheme) cell has its own step, bracketed by :func:`claims.bracket` on tuning seeds
      disjoint from the reported ones, by the validation accuracy (training-split images outside the
      training set) at the time budget; the reported seeds log the test accuracy;
    - a seed draws its own split (the preset's: i.i.d. or Dirichlet), initial model, job-time noise and minibatches
      (:data:`paper_figures._hetero.SOURCES`); a seed is the same at every h (paired across h);
    - every seed of a cell runs one length (:func:`run_counts`), the one that takes timing-noise
      seed 0 to the time budget, so that a cell compiles one program (an asynchronous scheme, whose
      length hardly changes with h, one program for all h); a run is read at the budget, its value
      the time average over the budget's last tenth (:func:`paper_figures._hetero.tail`);
    - two claims per scheme, judged on paired differences over the reported seeds (95% Student-t
      intervals): "heterogeneity costs accuracy" (acc(h = 2) < acc(h = 0)), and "an intermediate
      level is optimal" (acc(h_k) above both ends, with h_k the interior level the tuning seeds
      rank best, so that the level is not chosen on the seeds that judge it). A claim whose cells
      have a step at a grid's edge is inconclusive (:func:`claims.gated`)."""
    tune, report = claims.disjoint_seeds(p.tune_seeds, p.seeds)
    dsname = lab.tuning_images(p)[0]
    out = {"preset": p.name, "split": p.split, "levels": np.array(LEVELS_H), "dataset": dsname, "horizon": p.horizon,
           "tune_seeds": tune, "report_seeds": report, "tie": p.tie, "refine": p.refine, "more_seeds": p.more_seeds,
           "max_extend": p.max_extend, "screen": p.screen, "cells": {}, "window": "time"}
    counts = run_counts(p.horizon)
    cells, brackets = {}, {}
    todo = [(h, name) for h in LEVELS_H for name in frontier_schemes(lab.spread_taus(h), p.horizon)]
    for h, name in parts.order(todo):  # each cell tuned and run on its own (for helpers)
        taus = lab.spread_taus(h)
        sc = frontier_schemes(taus, p.horizon)[name]
        count, events = counts[h, name]

        def make_run(g, seed, validation, sc=sc, count=count, events=events, taus=taus):
            prob, timing_seed, key = lab.seeded_problem(p, seed, validation=validation, split=p.split)
            sched = schedule_of(sc, lab.timing_noise(taus, timing_seed), count, events)
            return lab.one_run(sc, g, prob, sched, key, p)

        c = cells[h, name] = lab.Cell(parts, p, f"h{h:g} {name}", {"h": h, "method": name, "count": count,
                                                                    "events": events}, make_run)
        b = brackets[h, name] = c.tune(sc, score=lambda r: 1.0 - lab.tail(r, "accuracy", p.horizon))
        runs = c.report(b.best)
        out["cells"][(h, name)] = {"bracket": lab.stored_bracket(b), "runs": runs, "count": count, "events": events}
        lab.progress(f"frontier: h = {h:g}, {name}: {b.note()}")
    # in the preset's order whoever computed what (the claims below and the sums read them in it)
    cells, brackets = {k: cells[k] for k in todo}, {k: brackets[k] for k in todo}
    out["cells"] = {k: out["cells"][k] for k in todo}
    out["claims"] = {}

    def value(r):
        return {"accuracy": lab.tail(r, "accuracy", p.horizon), "applied": float(r["applied"])}

    lo, hi, inner = LEVELS_H[0], LEVELS_H[-1], LEVELS_H[1:-1]
    for name in dict.fromkeys(n for _, n in cells):
        k = interior_level({h: brackets[h, name] for h in inner})
        for claim_id, levels in (("heterogeneity-costs-accuracy", (lo, hi)),
                                 ("intermediate-heterogeneity-optimal", (lo, k, hi))):
            keyed = {(h, name): brackets[h, name] for h in levels}
            settings = claims.step_settings(keyed)
            seeds = p.seeds
            values = lab.at_settings(cells, settings, value, seeds, parts)
            if p.more_seeds > seeds and claims.needs_seeds(_claim_verdict(claim_id, name, levels, values).readings,
                                                           seeds=p.more_seeds):
                seeds = p.more_seeds
                values = lab.at_settings(cells, settings, value, seeds, parts)
            out["claims"][(claim_id, name)] = {"levels": list(levels), "settings": settings, "values": values,
                                               "seeds": seeds}
    out["seconds"] = sum(sum(c.seconds.values()) for c in cells.values())
    return out


def interior_level(brackets: dict) -> float:
    """The interior level the tuning seeds rank best (their best score at the bracketed step), so
    that the level an "intermediate optimum" is judged at is not chosen on the seeds that judge it."""
    return min(brackets, key=lambda h: brackets[h].scores[brackets[h].steps.index(brackets[h].best)])


def _parts(claim_id: str, name: str, levels, at: dict) -> list:
    """The claim's comparisons from one step setting's values (``at``: (h, name) -> values)."""
    acc = {h: at[(h, name)]["accuracy"] for h in levels}
    if claim_id == "heterogeneity-costs-accuracy":
        lo, hi = levels
        return [(f"acc(h = {hi:g}) − acc(h = {lo:g})", acc[hi] - acc[lo])]
    lo, k, hi = levels
    return [(f"acc(h = {e:g}) below acc(h = {k:g})", acc[e] - acc[k]) for e in (lo, hi)]


def _claim_verdict(claim_id: str, name: str, levels, values: dict, gate=()):
    """The claim's verdict from its values at every step setting (label -> cell -> values)."""
    tuned, steps = claims.split_settings(values)
    as_parts = {kind: {label: _parts(claim_id, name, levels, at) for label, at in by.items()}
                for kind, by in steps.items()}
    return catalogue.verdict(claim_id, _parts(claim_id, name, levels, tuned), steps=as_parts, gate=gate)


def _names(d: dict) -> list:
    return list(dict.fromkeys(k[1] for k in d["cells"]))


def final_accuracy(d: dict) -> dict:
    """(h, name) -> the reported seeds' test accuracy at the time budget (:func:`lab.tail`)."""
    return {k: np.array([lab.tail(r, "accuracy", d["horizon"], claims.reading(d)) for r in c["runs"]])
            for k, c in d["cells"].items()}


def target(d: dict) -> float:
    """95% of the best mean accuracy any scheme reached at h = 0."""
    acc = final_accuracy(d)
    return round(0.95 * max(float(np.nanmean(a)) for (h, _), a in acc.items() if h == 0.0), 3)


def times_to_target(d: dict) -> dict:
    tg = target(d)
    return {k: np.array([_time_to(r["time"], r["accuracy"], tg, d["horizon"]) for r in c["runs"]])
            for k, c in d["cells"].items()}


def _vanilla_schedule(d: dict, h: float):
    """Vanilla ASGD's schedule at level h for timing-noise seed 0, rebuilt from the stored length
    (milliseconds): what the texts' schedule properties are read from, not measurements of training."""
    count = int(d["cells"][(h, "vanilla ASGD")]["count"])
    return schedules.asynchronous(lab.timing_noise(lab.spread_taus(float(h)), 0), num_events=count)


def vanilla_staleness(d: dict) -> dict:
    """h -> (mean, median) staleness of vanilla ASGD's updates by the budget (updates between a
    job's dispatch and its arrival), on its schedule for timing-noise seed 0 (:func:`_vanilla_schedule`)."""
    out = {}
    for h in d["levels"]:
        s = _vanilla_schedule(d, h)
        st = s.staleness[s.finish <= d["horizon"]]
        out[float(h)] = (float(np.mean(st)), float(np.median(st)))
    return out


def fast_share(d: dict) -> dict:
    """h -> (the two fastest workers' share of vanilla ASGD's updates by the budget, τ_max/τ_min,
    the slowest worker's arrivals by the budget), on its schedule for timing-noise seed 0
    (:func:`_vanilla_schedule`)."""
    out = {}
    for h in d["levels"]:
        taus = lab.spread_taus(float(h))
        s = _vanilla_schedule(d, h)
        w = s.worker[s.finish <= d["horizon"]]
        fast = np.argsort(taus)[:2]
        out[float(h)] = (float(np.isin(w, fast).mean()), float(taus.max() / taus.min()),
                         int(np.sum(w == np.argmax(taus))))
    return out


def applied(d: dict) -> dict:
    """(h, name) -> the reported seeds' gradients delivered by the budget."""
    return {k: np.array([r["applied"] for r in c["runs"]]) for k, c in d["cells"].items()}


def read_times(d: dict) -> dict:
    """(h, name) -> the reported seeds' read times (:func:`lab.read_time`)."""
    return {k: np.array([lab.read_time(r, d["horizon"]) for r in c["runs"]]) for k, c in d["cells"].items()}


def identical(d: dict) -> list:
    """(h, scheme, scheme) where two schemes gave bit-identical accuracies on every reported seed
    (the same computation at that length: one measurement, not two)."""
    acc, names = final_accuracy(d), _names(d)
    return [(h, a, b) for h in d["levels"] for i, a in enumerate(names) for b in names[i + 1:]
            if np.array_equal(acc[(h, a)], acc[(h, b)])]


def _bracket(d: dict, h: float, name: str) -> claims.Bracket:
    return claims.Bracket.from_stored(d["cells"][(h, name)]["bracket"])


def claims_of(d: dict) -> list:
    """Per scheme, its two claims (catalogue ``heterogeneity-costs-accuracy`` and
    ``intermediate-heterogeneity-optimal``), each judged at the tuned steps, at the common step
    and at the tuned steps' grid neighbours: [{scheme, claim, verdict, seeds, settings, why}]."""
    out = []
    for (claim_id, nm), c in d["claims"].items():
        levels = [float(h) for h in c["levels"]]
        v = _claim_verdict(claim_id, nm, levels, c["values"], gate=[_bracket(d, h, nm) for h in levels])
        tuned = c["values"]["tuned"]
        why = ""
        # could it have come out otherwise? say what the set-up does
        got = [float(np.median(tuned[(h, nm)]["applied"])) for h in levels]
        if nm in WAITING and all(a > b for a, b in zip(got, got[1:])):
            waits = "for rounds" if nm in ROUND_BASED else "for its group within the SSP bound"
            # fewer gradients predict "costs accuracy" and no intermediate optimum; "set by the
            # set-up" only where the measured word is that prediction and the scheme waits for
            # rounds (GSP's gradients fall too, but its accuracy need not follow them)
            expect = claims.HOLDS if claim_id == "heterogeneity-costs-accuracy" else claims.FAILS
            lead = ("set by the set-up" if v.verdict == expect and nm in ROUND_BASED else
                    "predicted by the set-up" if v.verdict == expect else
                    f"the set-up predicts '{expect}', measured '{v.verdict}'")
            why = (f"{lead}: it waits {waits}, and the gradients it has applied by the budget fall from "
                   + " to ".join(f"{a:.0f} at h = {h:g}" for a, h in zip(got, levels))
                   + ("" if claim_id == "heterogeneity-costs-accuracy" else
                      ", which an intermediate optimum would have to overcome"))
        elif nm == "Rescaled ASGD" and claim_id == "heterogeneity-costs-accuracy":
            lo, hi = levels
            b_hi = _bracket(d, hi, nm)
            r = theory.rescaled_stepsizes(1.0, lab.spread_taus(hi))  # γ_i / γ = τ_i / τ_H
            why = (f"shaped by the set-up: Rescaled scales the slow workers' steps up with τ_i (at h = {hi:g} its "
                   f"step per update runs from γ·{r.min():.2g} to γ·{r.max():.3g}, {b_hi.best * r.min():.2g} to "
                   f"{b_hi.best * r.max():.2g} at the tuned γ, and the budget is "
                   f"{d['horizon'] / lab.spread_taus(hi).max():.2g} τ_max), and its tuned γ falls from "
                   f"{_bracket(d, lo, nm).best:.3g} at h = {lo:g} (tied within {d['tie']:.0%}: "
                   f"{_tied_range(_bracket(d, lo, nm), d['tie'])}) to {b_hi.best:.3g} at h = {hi:g} "
                   f"({_tied_range(b_hi, d['tie'])})"
                   + ("" if b_hi.interior else " (at its grid's edge: the optimum lies lower)"))
        words = (f"heterogeneity costs accuracy: acc(h = {levels[-1]:g}) < acc(h = {levels[0]:g})"
                 if claim_id == "heterogeneity-costs-accuracy" else
                 f"an intermediate level is optimal: acc(h = {levels[1]:g}) above acc(h = {levels[0]:g}) and "
                 f"acc(h = {levels[2]:g}) (h = {levels[1]:g}, the level the tuning seeds rank best, is the only "
                 "one judged)")
        out.append({"scheme": nm, "claim": words, "verdict": v, "seeds": c["seeds"], "settings": c["settings"],
                    "why": why, "levels": levels})
    return out


def _tied_range(b: claims.Bracket, tie: float) -> str:
    t = b.tied(tie)
    return f"{min(t):.3g} alone" if len(t) == 1 else f"{min(t):.3g} to {max(t):.3g}"


def resolution_lines(d: dict) -> list:
    """The tuning's resolution: cells whose bracket used every extension allowed or whose tied
    steps span more than a factor 2, and, where both ran, the scores of vanilla and Rescaled ASGD
    at h = 0, whose steps are the same (τ_i/τ_H = 1): their scores' difference is noise the
    tuning cannot resolve (rounding in two programs is the one difference known)."""
    tie, limit = d["tie"], int(d.get("max_extend", 3))
    loose = []
    for (h, nm) in d["cells"]:
        b = _bracket(d, h, nm)
        t = b.tied(tie)
        if b.interior and (b.extended >= limit or max(t) > 2 * min(t)):
            loose.append(f"{nm} at h = {h:g}: {b.best:.3g}, tied {_tied_range(b, tie)}"
                         + (f", interior after {b.extended} extension(s), the limit" if b.extended >= limit else ""))
    out = [("Where the tuning resolves little (steps tied within "
            f"{tie:.0%} of the best span more than a factor 2, or the bracket used every extension allowed): "
            + "; ".join(loose) + ".") if loose else
           f"In every cell the steps tied within {tie:.0%} of the best span at most a factor 2."]
    if (0.0, "vanilla ASGD") in d["cells"] and (0.0, "Rescaled ASGD") in d["cells"]:
        a, b = _bracket(d, 0.0, "vanilla ASGD"), _bracket(d, 0.0, "Rescaled ASGD")
        both = sorted((set(a.steps) - set(a.screened)) & (set(b.steps) - set(b.screened)))
        rel = {g: abs(a.scores[a.steps.index(g)] - b.scores[b.steps.index(g)]) / abs(a.scores[a.steps.index(g)])
               for g in both if math.isfinite(a.scores[a.steps.index(g)]) and math.isfinite(b.scores[b.steps.index(g)])}
        if rel:
            at_best = (f", {rel[a.best]:.1%} at vanilla's tuned γ = {a.best:.3g}" if a.best in rel else "")
            out.append(f"At h = 0 Rescaled ASGD's steps equal vanilla ASGD's (τ_i/τ_H = 1), yet their tuning scores "
                       f"differ by {min(rel.values()):.1%} to {max(rel.values()):.1%} over the {len(rel)} steps both "
                       f"evaluated{at_best} (tuned γ {a.best:.3g} and {b.best:.3g}): rounding in two compiled programs, "
                       "amplified by training, is the one difference we know of, so this measures how far the tuning's "
                       f"scores move for nothing, beside the {tie:.0%} tie.")
    return out


def _iv(iv) -> str:
    return f"{iv.mean:+.3f} [{iv.lo:+.3f}, {iv.hi:+.3f}]"


def split_of(d: dict) -> str:
    """The run's split: "iid" or "dirichlet α" (data stored before the split was recorded: "iid")."""
    return str(d.get("split", "iid"))


def shards(d: dict) -> str:
    """The run's shards in words."""
    s = split_of(d)
    return "i.i.d. shards" if s == "iid" else f"Dirichlet α = {s.split()[1]} shards"


def stem(d: dict) -> str:
    """hetero_frontier for the quick preset, hetero_frontier_<preset> for the others."""
    return "hetero_frontier" if d["preset"] == "quick" else "hetero_frontier_" + d["preset"].replace("-", "_")


def findings_frontier(d: dict) -> str:
    acc, tt = final_accuracy(d), times_to_target(d)
    names = _names(d)
    lines = [f"Frontier ({d['dataset']}, n = {N}, τ_i = e^(h z_i) scaled to the same total compute, simulated time "
             f"budget {d['horizon']:g}, {shards(d)}). Each (h, scheme) cell at its own step, bracketed from the "
             f"starting grid {', '.join(f'{g:g}' for g in GAMMAS_ASYNC)} (ASGD), "
             f"{', '.join(f'{g:g}' for g in GAMMAS_SYNC)} (synchronous, hierarchical) or "
             f"{', '.join(f'{g:g}' for g in GAMMAS_GSP)} (GSP, which steps γ/n per push) on tuning seeds "
             f"{d['tune_seeds']} by the validation accuracy at the budget (scores within {d['tie']:.0%} "
             f"of the best count as tied, and a tie at an edge extends the grid, by up to {int(d.get('max_extend', 3))} "
             f"steps a side; refined {d['refine']} time(s)"
             + (f"; a step whose first tuning seed scores over {d['screen']:.0%} worse than the best step's is not run "
                "on the other tuning seeds" if d.get("screen", 0.0) > 0 else "") + "); reported "
             f"seeds {d['report_seeds']} ({d['more_seeds']} for a claim decided within two half-widths), "
             f"each drawing its own {', '.join(lab.SOURCES)} of the fixed training images (timing: each job's "
             "exponential jitter, of mean 0.1 τ_i, on the fixed speed profile; the test and validation images are the "
             "same for every seed, so the intervals leave out their sampling); a seed's split, initial "
             "model and job-time noise are the same at every h (its minibatches are keyed by event, so they differ "
             f"between schedules). Target accuracy {target(d):.3f} (95% of the best mean at h = 0).",
             "h | " + " | ".join(names) + "   (test accuracy at the budget, mean over seeds / median time to target, "
                                          "inf: not reached; γ; * marks a step at its grid's edge)"]
    rt = read_times(d)
    for h in d["levels"]:
        cells = []
        for nm in names:
            b = _bracket(d, float(h), nm)
            early = np.median(rt[(h, nm)]) < 0.9 * d["horizon"]
            cells.append(f"{np.nanmean(acc[(h, nm)]):.3f} / {np.median(tt[(h, nm)]):.4g} "
                         f"(γ={b.best:.3g}{'' if b.interior else '*'}"
                         + (f"; read at t = {np.median(rt[(h, nm)]):.0f}" if early else "") + ")")
        lines.append(f"{h:g} | " + " | ".join(cells))
    lines.append("(\"read at t\": no log point falls in the budget's last tenth, so the model read is the last one "
                 "before the budget, after the scheme's last round that ended by then.)")
    same = identical(d)
    if same:
        lines.append("Bit-identical accuracies on every seed, read at the same time after the same rounds (the runs "
                     "coincide up to the read point; one measurement counted twice in the family): "
                     + "; ".join(f"{a} and {b} at h = {h:g}" for h, a, b in same) + ".")
    k = catalogue.claim("intermediate-heterogeneity-optimal").family_size
    lines.append("Claims per scheme (paired differences of test accuracy over the reported seeds, each comparison "
                 f"with the interval that decides its word: holds at level 1 − 0.05/{k}, the family of {k} schemes, "
                 "does not hold at that level's Bonferroni correction over its comparisons; judged at the tuned steps, "
                 "at the common step (of the steps every cell's bracket evaluated, the one whose tuning scores are "
                 f"jointly nearest each cell's best) and at the tuned steps' neighbours on the refined grid (a factor "
                 f"{2 ** (0.5 ** d['refine']):.3g}); holds or does not hold only where all agree):")
    for c in claims_of(d):
        v = c["verdict"]
        lines.append(f"  {c['scheme']}: {c['claim']}: {v.verdict} ({c['seeds']} seeds)"
                     + (f"; {v.reason}" if v.reason else "") + (f"; {c['why']}" if c["why"] else ""))
        lines += v.setting_lines(c["settings"], lambda st: ", ".join(f"h = {h:g}: γ = {g:.3g}" for (h, _), g in st.items()),
                                 fmt="+.3f")
    edge = [f"{nm} at h = {h:g} ({_bracket(d, h, nm).note()})" for (h, nm) in d["cells"] if not _bracket(d, h, nm).interior]
    lines.append(("Steps at a grid's edge after extension: " + "; ".join(edge) + ".") if edge else
                 "Every cell's step is interior to its bracket.")
    lines += resolution_lines(d)
    st = vanilla_staleness(d) if "vanilla ASGD" in names else {}
    share = fast_share(d) if "vanilla ASGD" in names else {}
    h_max = max(share, default=None)
    text = ("How to read this: synchronous schemes wait for the slowest worker of each round, so a spread of "
            "speeds at fixed total compute costs them rounds (their \"heterogeneity costs accuracy\" is "
            "predicted by the set-up, as the claims above say). Asynchronous schemes do not wait; "
            + ("on i.i.d. shards vanilla ASGD's bias toward fast workers (r1, r2) weights shards of one distribution, "
               "and why vanilla ASGD's accuracy moves with h is not measured here." if split_of(d) == "iid" else
               f"on {shards(d)}, whose class mixes differ from worker to worker, vanilla ASGD weights each worker's "
               "shard by its share of the updates (r1, r2; docs/theory.md §2); the two fastest workers' share of its "
               "updates by the budget (on a representative schedule, timing-noise seed 0, not one of the reported "
               "runs'): "
               + ", ".join(f"h = {h:g}: {sh:.0%}" for h, (sh, _, _) in share.items())
               + ". Its claims above measure the net effect of h, which lowers the staleness as well (below), not the "
               "weighting's cost alone; why its accuracy moves with h is not measured here.")
            + (" Rescaled ASGD steps γ·τ_i/τ_H, which evens the weighting out in expectation only over budgets much "
               f"longer than τ_max: at h = {h_max:g} τ_max/τ_min = {share[h_max][1]:.0f} and the slowest worker "
               f"arrives {share[h_max][2]} times by the budget (on timing-noise seed 0's schedule, not a reported run's)."
               if share and "Rescaled ASGD" in names
               else ""))
    if st:
        text += (" Vanilla ASGD's updates' mean and median staleness by the budget (updates between a job's dispatch and its "
                 "arrival; n − 1 = 7 jobs are always in flight): "
                 + ", ".join(f"h = {h:g}: mean {m:.2f}, median {md:g}" for h, (m, md) in st.items()) + ".")
    if "Rescaled ASGD" in names:
        lv = [float(h) for h in d["levels"]]
        text += (" Rescaled ASGD gives the slow workers' stale gradients proportionally larger steps; its tuned γ "
                 "by h: " + ", ".join(f"{h:g}: {_bracket(d, h, 'Rescaled ASGD').best:.3g}" for h in lv) + ".")
    lines.append(text + (" These runs are on i.i.d. shards only (the -dirichlet presets run the same on Dirichlet "
                         "shards)." if split_of(d) == "iid" else ""))
    return "\n".join(lines) + "\n"


def verdicts(d: dict) -> list:
    return [c["verdict"].row(
        f"{c['scheme']}: {c['claim']}",
        f"at the tuned steps {c['verdict'].evidence('+.3f')}" + (f"; {c['why']}" if c["why"] else ""),
        f"{d['preset']}: {d['dataset']}, n = {N}, {shards(d)}, time budget {d['horizon']:g}, steps bracketed per "
        f"cell on {len(d['tune_seeds'])} tuning seeds (validation accuracy), {c['seeds']} reported seeds (each "
        f"resampling {', '.join(lab.SOURCES)})")
        for c in claims_of(d)]


def plot_frontier(d: dict, path: str) -> None:
    plt = pyplot()

    acc, tt = final_accuracy(d), times_to_target(d)
    names = _names(d)
    levels = np.asarray(d["levels"], float)
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.4), dpi=110)
    palette = ("k", "tab:purple", "tab:red", "tab:blue", "tab:green", "tab:orange", "tab:brown", "tab:olive")
    for j, (nm, color) in enumerate(zip(names, palette)):
        x = levels + (j - (len(names) - 1) / 2) * 0.012  # a small offset so the interval bars do not overlap
        ivs = [claims.paired_interval(acc[(h, nm)]) for h in levels]
        ax[0].errorbar(x, [iv.mean for iv in ivs], yerr=[iv.half for iv in ivs], color=color, marker="o", ms=3,
                       capsize=2, lw=1.2, label=nm)
        edge = [not _bracket(d, h, nm).interior for h in levels]
        if any(edge):
            ax[0].scatter(x[edge], np.array([iv.mean for iv in ivs])[edge], s=60, facecolors="none", edgecolors=color)
        med = np.array([np.median(tt[(h, nm)]) for h in levels])
        ax[1].plot(levels, np.where(np.isfinite(med), med, np.nan), marker="o", ms=3, color=color, label=nm)
        lo = np.array([np.min(tt[(h, nm)]) for h in levels])
        hi = np.array([np.max(tt[(h, nm)]) for h in levels])
        ax[1].fill_between(levels, np.where(np.isfinite(lo), lo, np.nan), np.where(np.isfinite(hi), hi, np.nan),
                           color=color, alpha=0.15)
    ax[0].set_ylabel(f"test accuracy at time {d['horizon']:g} (mean, 95% t interval)")
    ax[1].set_ylabel(f"time to accuracy {target(d):.3f} (median, range)")
    for a in ax:
        a.set_xlabel("heterogeneity h  (τ_i = e^(h z_i), same total compute)")
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle(f"each cell at its own bracketed step (circled: at a grid's edge); {len(d['report_seeds'])} seeds "
                 f"({d['more_seeds']} for a claim decided within two half-widths) "
                 f"resampling {', '.join(lab.SOURCES)} ({d['preset']} preset)", fontsize=9)
    save_figure(fig, path)


def rows(d: dict) -> list[dict]:
    """One row per (h, scheme, reported seed) at the cell's tuned step, then one per (claim,
    step setting, cell, seed) behind the verdicts (their seeds may be more than the cells')."""
    acc, tt = final_accuracy(d), times_to_target(d)
    out = [{"claim": "", "setting": "tuned", "h": float(h), "method": nm, "gamma": _bracket(d, h, nm).best,
            "interior": _bracket(d, h, nm).interior, "seed": int(s), "final_accuracy": float(acc[(h, nm)][i]),
            "time_to_target": float(tt[(h, nm)][i])}
           for (h, nm) in d["cells"] for i, s in enumerate(d["report_seeds"])]
    for (claim_id, nm), c in d.get("claims", {}).items():
        for label, at in c["values"].items():
            for (h, _), v in at.items():
                out += [{"claim": claim_id, "setting": label, "h": float(h), "method": nm,
                         "gamma": float(c["settings"][label][(h, nm)]), "interior": _bracket(d, h, nm).interior,
                         "seed": i, "final_accuracy": float(x), "time_to_target": float("nan")}
                        for i, x in enumerate(v["accuracy"])]
    return out


FIGURE = Figure("hetero-frontier", "accuracy and time to target against heterogeneity, six schemes at their bracketed steps",
                PRESETS, compute, plot_frontier, lab.with_footer(findings_frontier), rows,
                stem=stem, module=__file__, convolution=False, verdicts=verdicts, units="cells")
