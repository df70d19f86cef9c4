"""DEAHES-O, Figures 4 and 5 (specs/easgd_deahes.md §5): elastic averaging under worker failures.

Setting (spec §1, §4): P ∈ {4, 8} workers, communication period τ ∈ {1, 2, 4} local steps, the
two-convolution CNN (sim.models.CNN), minibatch 64; each worker's exchange with the master is
lost with probability 1/3 per communication round. Spec §4 names two failure semantics and both
are presets: "suppressed" (the default; the worker trains on without the exchange) and "stale"
(``quick-stale``, ``full-stale``: the failed worker makes no progress and its first exchange after
recovery carries its old parameters); the stale figure is written as ``deahes_stale.*``.
Six methods (spec §3): EASGD, EAMSGD (δ = 0.5), EAHES, EAHES-O, EAHES-OM (oracle) and
DEAHES-O; η = 0.01 for every local optimiser, α = 0.1, AdaHessian with β = (0.9, 0.999), one
Hutchinson probe, spatial averaging, the reference code's ε = 1e-4 and weight decay
5e-4; the -O methods use the overlapping split with r = 1/P, the others disjoint shards.

DEAHES-O's scale a0 [CHOICE]: for each (P, τ), EAHES-O is first run without failures, and a0 is
``KAPPA`` = 2 standard deviations of the trend a observed there (a = 0 before a worker holds p = 3
values is left out). The detector is then scored on the failing runs: the ROC AUC of −a for
"this exchange follows a failure", on EAHES-O (whose weights ignore a) and on DEAHES-O.

Each (P, method) is one compiled :func:`sim.sweep` over τ × seeds (the period is a traced
hyperparameter; runs one after another inside the call, which on CPU is as fast as batching
them and compiles sooner; a round's P worker jobs are batched by the preset's ``batching``, the
faster on its image size). One schedule per P: equal job durations (one time unit per
communication period), so rounds are the x-axis for every τ; the failure draws are shared by
all methods and seeds (a paired comparison); seeds vary minibatches and Hutchinson probes.
Training loss: the master's loss over ``eval_size`` training examples (each once); test accuracy
over the test set; both every ``log_rounds`` rounds.

Presets: ``quick`` uses scikit-learn's 8×8 digits (the CNN unchanged, its convolutions on 8×8 and
4×4 images) and 20 rounds; ``full`` uses MNIST where present, else Fashion-MNIST (Debian), and
150 rounds; it is sized for an accelerator. Each finished (P, method) sweep is stored under
``<out>/.parts/deahes_<preset>/`` and reused when a stopped run is restarted with the same
configuration and code; the parts are deleted once the figure is written. Every curve is kept in
``deahes.npz``, from which ``delaylab figure deahes --redraw`` redraws the figure and text.
"""

from __future__ import annotations

import os
from typing import Optional

import jax
import numpy as np

import sim
from algos import elastic as ea
from paper_figures import _parts
from paper_figures._output import save_figure, write_outputs
from sim import schedules
from sim.data import digits, load_mnist_format
from sim.models import cnn_classifier

PRESETS = {
    # quick: 20 rounds and F on 720 of the 1,437 training images keep it under 15 minutes on 2 cores
    # (25 rounds and all 1,437: 16.7 min alone on the machine with the evaluation in chunks of 128,
    # and on course for about 15.5 min with today's one pass)
    "quick": dict(data="digits", rounds=20, seeds=3, train_size=None, eval_size=720, test_size=None, log_rounds=1,
                  batching="vmap"),
    # full: the master is evaluated (10,000 training and 10,000 test images) every 5 rounds (every
    # round, that evaluation took over half of a round's time on the 2-core CPU); the workers' jobs
    # run one after another (lax.map), 1.5x faster than vmap on 28×28 (benchmarks/workers.py), while
    # on 8×8 digits vmap is as fast or faster (benchmarks/RESULTS.md)
    "full": dict(data="mnist-format", rounds=150, seeds=3, train_size=None, eval_size=10000, test_size=None,
                 log_rounds=5, batching="map"),
}
# The same runs with the other failure semantics of spec §4: a failed worker is crashed (no
# progress) and its first exchange after recovery carries its old parameters.
PRESETS["quick-stale"] = dict(PRESETS["quick"], semantics="stale")
PRESETS["full-stale"] = dict(PRESETS["full"], semantics="stale")
WORKERS = (4, 8)
PERIODS = (1, 2, 4)
LR, MOMENTUM, ALPHA, FAILURE_P, BATCH, KAPPA = 0.01, 0.5, 0.1, 1.0 / 3.0, 64, 2.0
METHODS = ("EASGD", "EAMSGD", "EAHES", "EAHES-O", "EAHES-OM", "DEAHES-O")
HESSIAN = ("EAHES", "EAHES-O", "EAHES-OM", "DEAHES-O")


def _algorithms(trace: int, failure: str = "suppressed") -> dict:
    """name -> (algorithm, split); each a composition of local optimiser × split × exchange rule."""
    f = dict(alpha=ALPHA, failure=failure)
    return {
        "EASGD": (ea.easgd(learning_rate=LR, **f), "iid"),
        "EAMSGD": (ea.eamsgd(learning_rate=LR, momentum=MOMENTUM, **f), "iid"),
        "EAHES": (ea.eahes(learning_rate=LR, **f), "iid"),
        "EAHES-O": (ea.eahes(learning_rate=LR, trace=trace, **f), "overlap"),
        "EAHES-OM": (ea.eahes_om(learning_rate=LR, **f), "overlap"),
        "DEAHES-O": (ea.deahes_o(learning_rate=LR, trace=trace, **f), "overlap"),
    }


def _dataset(cfg: dict, data_path: Optional[str]):
    ds = digits() if cfg["data"] == "digits" else load_mnist_format(data_path)
    n_tr = cfg["train_size"] or len(ds.y_train)
    n_te = cfg["test_size"] or len(ds.y_test)
    return ds.name, ds.x_train[:n_tr], ds.y_train[:n_tr], ds.x_test[:n_te], ds.y_test[:n_te]


def _trend_spread(state) -> np.ndarray:
    """Standard deviation of the recorded trends a (a = 0 entries, before p values, left out), per τ."""
    a = np.asarray(state.trace_a, np.float64)  # [τ, seeds, K]
    out = []
    for t in range(a.shape[0]):
        v = a[t][(a[t] != 0.0)]
        out.append(float(np.std(v)) if v.size else 1.0)
    return np.asarray(out)


def _problems(P: int, cfg: dict, Xtr, ytr, Xte, yte) -> dict:
    """split -> the CNN problem for P workers: "iid" (disjoint shards) and "overlap" (r = 1/P)."""
    return {split: cnn_classifier(Xtr, ytr, Xte, yte, num_workers=P, split=split,
                                  overlap=(1.0 / P if split == "overlap" else 0.0), batch_size=BATCH,
                                  eval_size=cfg["eval_size"], dtype=np.float32)
            for split in ("iid", "overlap")}


def _schedules(P: int, rounds: int):
    """(failure-free, failing) schedules of ``rounds`` communication rounds: equal job durations,
    each exchange lost with probability ``FAILURE_P``; the failure draws depend on P only."""
    clean = schedules.fixed_computation(np.ones(P), num_events=P * rounds)
    return clean, schedules.with_failures(clean, probability=FAILURE_P, seed=P)


def _sweep(alg, problem, schedule, keys, hparams: dict, P: int, cfg: dict):
    """One part's compiled sweep over τ × seeds, logged and batched as the preset says (the figure
    and ``benchmarks/deahes_full`` both run their parts through this)."""
    return sim.sweep(alg, problem, schedule, keys=keys, hparams=hparams, log_every=P * cfg["log_rounds"], runs="map",
                     batching=cfg["batching"])


def _part_names() -> list:
    return [(P, m) for P in WORKERS for m in ("calibration",) + METHODS]


def compute(*, quick: bool = False, preset: Optional[str] = None, data_path: Optional[str] = None,
            progress: bool = True, parts_dir: Optional[str] = None) -> dict:
    """Every (P, method) as one compiled sweep over τ × seeds. With ``parts_dir``, each finished
    sweep (and each a0 calibration) is stored there and a rerun with the same configuration and
    code reuses it (:mod:`paper_figures._parts`), so a stopped run resumes where it was."""
    name = preset or ("quick" if quick else "full")
    cfg = PRESETS[name]
    semantics = cfg.get("semantics", "suppressed")
    dataset, Xtr, ytr, Xte, yte = _dataset(cfg, data_path)
    keys = jax.random.split(jax.random.key(0), cfg["seeds"])
    periods = np.asarray(PERIODS, np.int32)
    out = {"preset": name, "dataset": dataset, "rounds": cfg["rounds"], "seeds": cfg["seeds"], "train_size": len(ytr),
           "test_size": len(yte), "semantics": semantics, "periods": list(PERIODS), "workers": list(WORKERS),
           "runs": {}}
    code = _parts.code_hash(__file__)
    _parts.announce_resume(parts_dir, "deahes")
    total, done = len(_part_names()), 0

    def part(P, label, key_extra, fn):
        nonlocal done
        key = _parts.make_key(code=code, cfg=cfg, dataset=dataset, train=len(ytr), test=len(yte), P=P, part=label,
                              **key_extra)
        got, reused = _parts.load_or_compute(parts_dir, f"P{P}_{label}", key, fn)
        done += 1
        return got, reused

    for P in WORKERS:
        problems = _problems(P, cfg, Xtr, ytr, Xte, yte)
        clean, failing = _schedules(P, cfg["rounds"])
        algs = _algorithms(trace=P * cfg["rounds"], failure=semantics)

        def calibrate():  # a0 from failure-free EAHES-O runs (same compiled program as the failing runs below)
            calib = _sweep(algs["EAHES-O"][0], problems["overlap"], clean, keys, {"period": periods}, P, cfg)
            return {"a0": KAPPA * _trend_spread(calib.state)}

        cal, reused = part(P, "calibration", {}, calibrate)
        a0 = np.asarray(cal["a0"], np.float64)
        out[f"a0_P{P}"] = a0
        out[f"a0_seconds_P{P}"] = float(cal["seconds"])
        if progress:
            how = "stored part reused" if reused else f"{float(cal['seconds']):.0f} s"
            print(f"  deahes [{done}/{total}] P={P}: a0 = {KAPPA:g} × spread of a without failures = "
                  f"{', '.join(f'{v:.3g}' for v in a0)} (τ = {PERIODS}); {how}", flush=True)
        for m, (alg, split) in algs.items():
            hp = {"period": periods}
            if m == "DEAHES-O":
                hp["a0"] = a0.astype(np.float32)

            def run_method(alg=alg, split=split, hp=hp, m=m):
                res = _sweep(alg, problems[split], failing, keys, hp, P, cfg)
                got = {"loss": np.asarray(res.metrics["loss"]), "accuracy": np.asarray(res.metrics["test_accuracy"]),
                       "diverged": np.asarray(int(np.sum(res.diverged_at >= 0))),
                       "round": np.asarray(res.metrics["events"]) / P}
                if m in ("EAHES-O", "DEAHES-O"):
                    det = ea.detection_auc(res.state)
                    got.update(auc=det["auc"], positives=det["positives"], negatives=det["negatives"])
                return got

            got, reused = part(P, m, {"a0": [round(float(v), 12) for v in a0]} if m == "DEAHES-O" else {}, run_method)
            run = {k: v for k, v in got.items() if k != "round"}
            run["seconds"], run["diverged"] = float(got["seconds"]), int(got["diverged"])
            out["runs"][(P, m)] = run
            out["round"] = np.asarray(got["round"])
            if progress:
                how = "stored part reused" if reused else f"{run['seconds']:.0f} s"
                print(f"  deahes [{done}/{total}] P={P} {m:9s} final loss (τ = {', '.join(map(str, PERIODS))}) "
                      f"{', '.join(f'{v:.3f}' for v in run['loss'][:, :, -1].mean(1))}; {how}", flush=True)
    return out


_SEMANTICS = {"suppressed": "a cut-off worker trains on without the exchange",
              "stale": "a failed worker makes no progress and its first exchange after recovery carries its "
                       "old parameters"}


def _final(run: dict, key: str) -> np.ndarray:
    """[τ, seeds]: the last logged value."""
    return run[key][:, :, -1]


def findings(data: dict) -> str:
    R = data["runs"]
    lines = [f"DEAHES-O Figures 4–5 ({data['preset']} preset): {data['dataset']}, {data['train_size']} training / "
             f"{data['test_size']} test images, {data['rounds']} communication rounds, {data['seeds']} seeds, "
             f"exchanges lost with probability 1/3 ({data.get('semantics', 'suppressed')} semantics: "
             + _SEMANTICS[data.get("semantics", "suppressed")] + ").",
             "Final master training loss and test accuracy (mean ± std over seeds):",
             f"{'P':>2s} {'τ':>2s} " + " ".join(f"{m:>17s}" for m in METHODS)]
    for P in data["workers"]:
        for t, tau in enumerate(data["periods"]):
            lo = " ".join(f"{_final(R[(P, m)], 'loss')[t].mean():8.4f}±{_final(R[(P, m)], 'loss')[t].std():<8.4f}" for m in METHODS)
            ac = " ".join(f"{_final(R[(P, m)], 'accuracy')[t].mean():8.4f}±{_final(R[(P, m)], 'accuracy')[t].std():<8.4f}" for m in METHODS)
            lines.append(f"{P:2d} {tau:2d} {lo}   (loss)")
            lines.append(f"{'':2s} {'':2s} {ac}   (accuracy)")
    configs = [(P, t) for P in data["workers"] for t in range(len(data["periods"]))]
    loss = {(P, t, m): float(_final(R[(P, m)], "loss")[t].mean()) for P, t in configs for m in METHODS}

    def count(pred):
        k = sum(bool(pred(P, t)) for P, t in configs)
        verdict = "holds" if k == len(configs) else ("does NOT hold" if k == 0 else "holds in part")
        return f"{verdict} ({k} of {len(configs)} settings)"

    lines.append("The paper's claims, judged by the final training loss:")
    lines.append("- AdaHessian methods beat the SGD methods (each of EAHES, EAHES-O, EAHES-OM, DEAHES-O below both "
                 "EASGD and EAMSGD): " + count(lambda P, t: max(loss[P, t, m] for m in HESSIAN)
                                                < min(loss[P, t, "EASGD"], loss[P, t, "EAMSGD"])) + ".")
    lines.append("- Overlap helps (EAHES-O below EAHES): " + count(lambda P, t: loss[P, t, "EAHES-O"] < loss[P, t, "EAHES"]) + ".")
    lines.append("- The oracle EAHES-OM is the best of the six: "
                 + count(lambda P, t: loss[P, t, "EAHES-OM"] <= min(loss[P, t, m] for m in METHODS)) + ".")
    lines.append("- DEAHES-O beats EASGD, EAMSGD, EAHES and EAHES-O: "
                 + count(lambda P, t: loss[P, t, "DEAHES-O"] < min(loss[P, t, m] for m in ("EASGD", "EAMSGD", "EAHES", "EAHES-O"))) + ".")
    d = [loss[P, t, "DEAHES-O"] for P, t in configs]
    p0, p1, t1 = data["workers"][0], data["workers"][-1], len(data["periods"]) - 1
    lines.append(f"- More workers or a longer period do not visibly hurt: DEAHES-O's final loss ranges over "
                 f"{min(d):.4f}–{max(d):.4f} across the {len(configs)} settings (P = {p0} → {p1} at "
                 f"τ = {data['periods'][0]}: {loss[p0, 0, 'DEAHES-O']:.4f} → {loss[p1, 0, 'DEAHES-O']:.4f}; "
                 f"τ = {data['periods'][0]} → {data['periods'][t1]} at P = {p0}: "
                 f"{loss[p0, 0, 'DEAHES-O']:.4f} → {loss[p0, t1, 'DEAHES-O']:.4f}).")
    lines.append("The detector (ROC AUC of −a for \"this exchange follows a failure\", mean over seeds; "
                 f"a0 = {KAPPA:g} × the spread of a without failures):")
    for P in data["workers"]:
        for t, tau in enumerate(data["periods"]):
            aucs = {m: np.nanmean(R[(P, m)]["auc"][t]) for m in ("EAHES-O", "DEAHES-O")}
            lines.append(f"  P = {P}, τ = {tau}: a0 = {data[f'a0_P{P}'][t]:.3g}; AUC {aucs['EAHES-O']:.3f} on EAHES-O, "
                         f"{aucs['DEAHES-O']:.3f} on DEAHES-O ({int(R[(P, 'DEAHES-O')]['positives'][t].sum())} exchanges "
                         "after a failure)")
    if data["preset"] != "full":
        lines.append(f"This is the {data['preset']} preset ({data['dataset']}, {data['rounds']} rounds): the curves have "
                     "not flattened, and the comparison may change over the full preset.")
    return "\n".join(lines) + "\n"


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
            for m in METHODS:
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
    fig.suptitle(f"Elastic averaging with exchanges lost w.p. 1/3 ({data.get('semantics', 'suppressed')}): {data['dataset']} ({data['preset']} preset, "
                 f"mean ± std over {data['seeds']} seeds)", fontsize=10)
    save_figure(fig, path)


_META = ("preset", "dataset", "rounds", "seeds", "train_size", "test_size", "semantics")


def save_data(path: str, data: dict) -> None:
    """Every curve of every seed, the detector scores and a0, as a plain .npz (no pickles)."""
    flat = {"round": np.asarray(data["round"]), "periods": np.asarray(data["periods"]),
            "workers": np.asarray(data["workers"])}
    flat.update({f"meta_{k}": np.asarray(data[k]) for k in _META})
    for P in data["workers"]:
        flat[f"a0_P{P}"], flat[f"a0_seconds_P{P}"] = np.asarray(data[f"a0_P{P}"]), np.asarray(data[f"a0_seconds_P{P}"])
        for m in METHODS:
            for k, v in data["runs"][(P, m)].items():
                flat[f"run_P{P}_{m}_{k}"] = np.asarray(v)
    np.savez_compressed(path, **flat)


def load_data(path: str) -> dict:
    """The inverse of :func:`save_data`."""
    with np.load(path, allow_pickle=False) as z:
        data = {k: z[f"meta_{k}"].item() for k in _META}
        data.update(round=z["round"], periods=z["periods"].tolist(), workers=z["workers"].tolist(), runs={})
        for P in data["workers"]:
            data[f"a0_P{P}"], data[f"a0_seconds_P{P}"] = z[f"a0_P{P}"], float(z[f"a0_seconds_P{P}"])
            for m in METHODS:
                pre = f"run_P{P}_{m}_"
                run = {k[len(pre):]: z[k] for k in z.files if k.startswith(pre)}
                run["seconds"], run["diverged"] = float(run["seconds"]), int(run["diverged"])
                data["runs"][(P, m)] = run
    return data


def write(out_dir: str, *, quick: bool = False, preset: Optional[str] = None, data: Optional[dict] = None) -> str:
    """Run (or, given ``data`` from :func:`load_data`, only redraw) and write the outputs: PNG, CSV
    of the seed means, findings text and the ``.npz`` of every curve."""
    fresh = data is None
    stem = "deahes"
    if fresh:
        name = preset or ("quick" if quick else "full")
        # Finished parts are kept under the output folder (ignored by git) until the figure is written.
        parts_dir = os.path.join(out_dir, ".parts", f"deahes_{name}")
        data = compute(quick=quick, preset=preset, parts_dir=parts_dir)
    if data.get("semantics", "suppressed") != "suppressed":
        stem = f"deahes_{data['semantics']}"
    if fresh:
        os.makedirs(out_dir, exist_ok=True)
        save_data(os.path.join(out_dir, f"{stem}.npz"), data)
    rows = []
    for j, r in enumerate(data["round"]):
        row = {"round": float(r)}
        for P in data["workers"]:
            for t, tau in enumerate(data["periods"]):
                for m in METHODS:
                    run = data["runs"][(P, m)]
                    row[f"P{P} tau{tau} {m} loss"] = float(run["loss"][t, :, j].mean())
                    row[f"P{P} tau{tau} {m} accuracy"] = float(run["accuracy"][t, :, j].mean())
        rows.append(row)
    path = write_outputs(out_dir, stem, data, plot, rows, findings(data))
    if fresh:  # everything is written; the parts were only there to resume a stopped run
        _parts.remove(parts_dir)
    return path
