"""Real seconds against simulated ones: a real asynchronous run (Ray workers, :mod:`sim.real`), its
exact replay in the simulator, and two timing models fitted to it.

Vanilla ASGD on synthetic logistic regression (4 workers, minibatches of 16, float32), the workers
slowed by injected sleeps of 2, 4, 8 and 16 ms per job, worker 1 stalling once for 0.15 s. Curves
of the loss against seconds: **real** (the server's model, snapshotted every ``log_every`` updates,
against the clock); **replay** (``sim.run`` on ``sim.schedules.from_trace`` of the trace, whose
event times are the real application times: it must lie on the real curve); **fixed model**
(``fixed_computation`` with τ_i = worker i's mean measured job time: it ignores the round trip
through the server and the stall, so it runs ahead of reality); **server model** (``served`` with
the job times, service times and links ``sim.schedules.fit`` reads off the trace; docs/theory.md
§14). The second panel shows cumulative updates per worker, real against both models.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

import jax
import numpy as np

from delaylab.paper_figures._figure import Figure, Parts


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    num_events: int
    log_every: int


PRESETS = {"quick": Preset("quick", num_events=300, log_every=10), "full": Preset("full", num_events=1500, log_every=25)}
SLEEP = (0.002, 0.004, 0.008, 0.016)
STALL = (1, 20, 0.15)  # worker 1 stalls for 0.15 s before its job 20
STEPSIZE = 0.02
STEM = "wallclock"


def _problem():
    from delaylab import sim

    return sim.problems.synthetic_logistic(4, 128, 8, heterogeneity=1.0, l2=0.05, batch_size=16, seed=3,
                                           dtype=np.float32)


def compute(preset: Preset, parts: Parts) -> dict:
    """A real run is not repeatable, so the whole figure is one part: a stopped run that had
    finished it redraws from it. The trace is written beside the figure (``<stem>_trace.csv``)."""
    return parts.get("all", dataclasses.asdict(preset), lambda: _compute(preset, parts.out_dir))[0]


def _compute(cfg: Preset, out_dir) -> dict:
    from delaylab import algos, sim
    from delaylab.sim import real, schedules
    from delaylab.theory import queueing
    problem, alg = _problem(), algos.asgd(stepsize=STEPSIZE)
    res = real.run(alg, problem, num_events=cfg.num_events, key=jax.random.key(0), log_every=cfg.log_every,
                   slowdown=real.Slowdown(sleep=SLEEP, stalls=(STALL,)))
    out_dir = out_dir or tempfile.mkdtemp(prefix="wallclock-")
    os.makedirs(out_dir, exist_ok=True)
    trace = res.write_trace(os.path.join(out_dir, f"{STEM}_trace.csv"))
    objective = jax.jit(problem.fns.objective)
    real_loss = np.array([float(objective(problem.data, res.snapshot_params[j]))
                          for j in range(res.snapshot_time.shape[0])])

    replay_sched = schedules.from_trace(trace)
    replay = sim.run(alg, problem, replay_sched, key=real.replay_key(trace), log_every=cfg.log_every)
    taus = replay_sched.mean_durations  # mean measured job duration per worker (start to finish on the worker)
    fixed_sched = schedules.fixed_computation(taus, num_events=res.num_events)
    fixed = sim.run(alg, problem, fixed_sched, key=jax.random.key(0), log_every=cfg.log_every)
    w = res.trace["worker"]
    cycle = np.array([np.mean(np.diff(np.r_[0.0, res.trace["applied"][w == i]])) for i in range(4)])
    fitted = schedules.fit(res.trace)
    served_sched = fitted.schedule(res.num_events)
    served = sim.run(alg, problem, served_sched, key=jax.random.key(0), log_every=cfg.log_every)
    x = queueing.throughputs(fitted.think(), fitted.server.service)
    return {
        "preset": cfg.name,
        "real_time": res.snapshot_time, "real_loss": real_loss,
        "replay_time": replay.metrics["time"], "replay_loss": np.asarray(replay.metrics["loss"], np.float64),
        "fixed_time": fixed.metrics["time"], "fixed_loss": np.asarray(fixed.metrics["loss"], np.float64),
        "real_applied": res.trace["applied"], "real_worker": w,
        "fixed_finish": fixed_sched.finish, "fixed_worker": fixed_sched.worker,
        "taus": taus, "cycle": cycle,
        "replay_rel_diff": float(np.linalg.norm(np.asarray(replay.params, np.float64) - res.params)
                                 / np.linalg.norm(res.params)),
        "real_seconds": res.wall_seconds, "fixed_seconds": fixed_sched.end_time,
        "real_counts": np.bincount(w, minlength=4), "fixed_counts": fixed_sched.arrivals_per_worker(),
        "served_time": served.metrics["time"], "served_loss": np.asarray(served.metrics["loss"], np.float64),
        "served_finish": served_sched.finish, "served_worker": served_sched.worker,
        "served_seconds": served_sched.end_time, "served_counts": served_sched.arrivals_per_worker(),
        "closed_form_share": x / x.sum(), "service_mean": fitted.server.service,
        "service_shape": fitted.server.shape if fitted.server.kind == "lognormal" else 0.0,
        "uplink": np.asarray(fitted.server.links(4)[0]), "downlink": np.asarray(fitted.server.links(4)[1]),
        "num_events": res.num_events,
        "f_star": float(objective(problem.data, np.asarray(problem.minimiser, np.float32))),
    }


def plot(data: dict, path: str) -> None:
    from delaylab.paper_figures._output import pyplot, save_figure

    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    f_star = data["f_star"]
    a.plot(data["real_time"], data["real_loss"] - f_star, "o", ms=4, color="k", label="real run (Ray workers), wall clock")
    a.plot(data["replay_time"], data["replay_loss"] - f_star, "-", color="C0", lw=1.4,
           label="replay of its trace, simulated")
    a.plot(data["fixed_time"], data["fixed_loss"] - f_star, "--", color="C3", lw=1.4,
           label="fixed-computation model, τ̂ = measured means")
    if "served_time" in data:
        a.plot(data["served_time"], data["served_loss"] - f_star, "-.", color="C2", lw=1.4,
               label="server model fitted to the trace")
    a.set(xlabel="seconds (real, or simulated)", ylabel="F(x) − F(x*)", yscale="log",
          title="ASGD, logistic regression, 4 workers")
    a.legend(fontsize=8)
    a.grid(alpha=0.3)
    for i in range(4):
        t_real = np.sort(data["real_applied"][data["real_worker"] == i])
        t_fix = np.sort(data["fixed_finish"][data["fixed_worker"] == i])
        line, = b.step(t_real, np.arange(1, t_real.size + 1), where="post", label=f"worker {i}, real")
        b.step(t_fix, np.arange(1, t_fix.size + 1), where="post", ls="--", color=line.get_color(),
               label=f"worker {i}, fixed model")
        if "served_finish" in data:
            t_srv = np.sort(data["served_finish"][data["served_worker"] == i])
            b.step(t_srv, np.arange(1, t_srv.size + 1), where="post", ls="-.", color=line.get_color(),
                   label=f"worker {i}, server model")
    b.set(xlabel="seconds", ylabel="updates applied", title="who delivers when")
    b.legend(fontsize=7, ncol=2)
    b.grid(alpha=0.3)
    save_figure(fig, path)


def findings(data: dict) -> str:
    taus, cycle = data["taus"], data["cycle"]
    ahead = data["real_seconds"] / data["fixed_seconds"]
    real_share = data["real_counts"] / data["real_counts"].sum()
    fixed_share = data["fixed_counts"] / data["fixed_counts"].sum()
    lines = [
        f"Wall-clock figure ({data['preset']} preset): vanilla ASGD, synthetic logistic regression, 4 Ray workers with "
        f"injected sleeps {', '.join(f'{1000 * s:g}' for s in SLEEP)} ms per job and one 0.15 s stall of worker 1; "
        f"{data['num_events']} updates.",
        "",
        f"- The replay of the recorded trace ends at the real run's final model: relative difference "
        f"{data['replay_rel_diff']:.1e} (the test suite requires <= 1e-6), and its loss curve lies on the real one.",
        f"- Measured mean job durations τ̂ = {', '.join(f'{1000 * t:.1f}' for t in taus)} ms; measured mean time between "
        f"a worker's updates {', '.join(f'{1000 * c:.1f}' for c in cycle)} ms. The difference is the round trip "
        "through the server (result to the driver, the server's update, the new model back), which the "
        "fixed-computation model leaves out, plus the stall.",
        f"- The real run took {data['real_seconds']:.2f} s; the fixed model fitted to τ̂ needs "
        f"{data['fixed_seconds']:.2f} s of simulated time for the same number of updates: reality is "
        + (f"{ahead:.2f}x slower." if ahead >= 1 else f"{1 / ahead:.2f}x faster."),
        f"- Updates per worker, real: {data['real_counts'].tolist()}; fixed model: {data['fixed_counts'].tolist()}. "
        f"Share of the fastest worker: real {100 * real_share[0]:.0f} %, model {100 * fixed_share[0]:.0f} %; of the "
        f"slowest: real {100 * real_share[-1]:.0f} %, model {100 * fixed_share[-1]:.0f} %. "
        + ("The model overstates how much the fast workers deliver: a fixed overhead per update lengthens "
           "short cycles proportionally more." if fixed_share[0] > real_share[0] else
           "The model does not overstate the fastest worker's share here."),
    ]
    if "served_counts" in data:
        srv_share = data["served_counts"] / data["served_counts"].sum()
        err = {name: float(np.max(np.abs(sh - real_share))) for name, sh in
               (("fixed", fixed_share), ("served", srv_share), ("closed", data["closed_form_share"]))}
        lines += [
            f"- The server model fitted to the same trace (docs/theory.md §14; sim.schedules.fit): service "
            f"{1000 * data['service_mean']:.2f} ms on average (lognormal spread {data['service_shape']:.2f}), uplink "
            f"{', '.join(f'{1000 * u:.2f}' for u in data['uplink'])} ms and downlink "
            f"{', '.join(f'{1000 * d:.2f}' for d in data['downlink'])} ms per worker. Simulated, it needs "
            f"{data['served_seconds']:.2f} s for the run's updates ({100 * (data['served_seconds'] / data['real_seconds'] - 1):+.0f}% "
            f"against the real {data['real_seconds']:.2f} s; the fixed model {data['fixed_seconds']:.2f} s); its updates per "
            f"worker {data['served_counts'].tolist()}. It is fitted to the whole trace it is compared with (in sample; "
            "`delaylab figure server-timing` fits on one half and scores on the other), and it has no stall.",
            f"- Shares of the updates, workers 0–3: real {', '.join(f'{100 * v:.1f}' for v in real_share)} %; fixed model "
            f"{', '.join(f'{100 * v:.1f}' for v in fixed_share)} % (largest error {100 * err['fixed']:.1f} points); "
            f"server model simulated {', '.join(f'{100 * v:.1f}' for v in srv_share)} % ({100 * err['served']:.1f} "
            f"points), by the closed form {', '.join(f'{100 * v:.1f}' for v in data['closed_form_share'])} % "
            f"({100 * err['closed']:.1f} points). One run: these errors carry the run's own randomness.",
        ]
    lines += [
        "",
        "Conditions: one 2-core machine, Ray's local instance, tiny jobs (a minibatch gradient of a 9-parameter "
        "model), so the per-update overhead of the runtime is of the order of the injected sleeps. With jobs that "
        "take seconds the overhead, and the model's error, would be proportionally smaller.",
    ]
    return "\n".join(lines) + "\n"


def rows(data: dict) -> list[dict]:
    out = [{"source": "real", "seconds": float(t), "loss": float(v)} for t, v in zip(data["real_time"], data["real_loss"])]
    out += [{"source": "replay", "seconds": float(t), "loss": float(v)} for t, v in zip(data["replay_time"], data["replay_loss"])]
    out += [{"source": "fixed_model", "seconds": float(t), "loss": float(v)}
            for t, v in zip(data["fixed_time"], data["fixed_loss"])]
    if "served_time" in data:
        out += [{"source": "server_model", "seconds": float(t), "loss": float(v)}
                for t, v in zip(data["served_time"], data["served_loss"])]
    return out


FIGURE = Figure("wallclock", "a real Ray run against its exact replay, and the fixed-computation and server models "
                "fitted to it, in seconds",
                PRESETS, compute, plot, findings, rows, stem=STEM, module=__file__)
