"""What `delaylab run` runs: a frozen dataclass config, read from TOML or flags, built into
an algorithm, a problem and a schedule.

A config is three flat records: the run itself (:class:`RunConfig`: algorithm, step sizes, seeds,
logging), its :class:`ProblemConfig` and its :class:`ScheduleConfig`. In TOML the last two are the
tables ``[problem]`` and ``[schedule]``; on the command line every field is a flag
(``--stepsize 0.01,0.02``, ``--problem.dim 20``, ``--schedule.taus 1,2,4,8``). Several step sizes
or ``seeds > 1`` make the run a sweep (one compiled call for all of them).
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
import typing
from typing import Any, Optional

import numpy as np

PROBLEM_KINDS = ("quadratic", "logistic", "mlp")
POLICIES = ("async", "sync")
NOISES = ("none", "exponential", "lognormal", "uniform", "halfnormal")


@dataclasses.dataclass(frozen=True)
class ProblemConfig:
    """The problem (each worker samples only its own data). One line per field (the flags' help):

    kind: "quadratic" (closed-form optimum), "logistic" (synthetic, full local batches) or "mlp" (MNIST-format data, i.i.d. shards)
    workers: the number of workers n
    dim: parameters (quadratic) or features (logistic); the MLP ignores it
    condition: the quadratics' eigenvalues lie in [1, condition]
    spread: the spread of the quadratics' minimisers across workers
    diagonal: diagonal curvature (quadratic)
    noise: gradient noise σ (quadratic)
    samples: examples per worker (logistic) or training images in all (mlp)
    heterogeneity: logistic regression's shift between workers' distributions
    l2: logistic regression's ridge term λ
    hidden: the MLP's hidden width
    batch: the MLP's minibatch size
    seed: the problem's random seed
    """

    kind: str = "quadratic"
    workers: int = 4
    dim: int = 10
    condition: float = 4.0
    spread: float = 2.0
    diagonal: bool = False
    noise: float = 0.0
    samples: int = 80
    heterogeneity: float = 1.5
    l2: float = 0.05
    hidden: int = 64
    batch: int = 32
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class ScheduleConfig:
    """The virtual cluster's timing. One line per field (the flags' help):

    policy: "async" (a worker restarts the moment it reports) or "sync" (barrier rounds)
    taus: mean job duration τ_i of each worker, as many as the problem has workers
    noise: "none" (every job takes τ_i) or the distribution of each job's extra time: exponential, lognormal, uniform, halfnormal
    scale: the extra time's scale
    events: arrivals in all (sync: rounds = events / workers)
    failures: the probability that a result is lost
    seed: the timing's random seed (durations, failures)
    """

    policy: str = "async"
    taus: tuple = (1.0, 2.0, 3.0, 4.0)
    noise: str = "none"
    scale: float = 1.0
    events: int = 4000
    failures: float = 0.0
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A run (or a sweep). One line per field (the flags' help):

    name: a label; the default output folder is out/runs/NAME
    algorithm: a registered name (asgd, rescaled_asgd, malenia_sgd, ...: delaylab.registry) or one a --plugin adds
    stepsize: the step size γ, or several: a sweep over them
    seed: the base PRNG seed
    seeds: runs per step size (keys split from the base seed); more than 1 makes a sweep
    log_every: events per log point (0: about 100 log points)
    segment: log points per compiled segment (0: about 20 segments)
    checkpoint_every: seconds between checkpoints (0: after every segment)
    x64: float64 (the problems' dtype follows it)
    plugins: plugin files or modules whose algorithms the run may name (files recorded by absolute path)
    """

    name: str = "run"
    algorithm: str = "asgd"
    stepsize: tuple = (0.01,)
    seed: int = 0
    seeds: int = 1
    log_every: int = 0
    segment: int = 0
    checkpoint_every: float = 60.0
    x64: bool = True
    plugins: tuple = ()
    problem: ProblemConfig = ProblemConfig()
    schedule: ScheduleConfig = ScheduleConfig()

    @property
    def is_sweep(self) -> bool:
        return len(self.stepsize) > 1 or self.seeds > 1

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class ConfigError(ValueError):
    pass


_TUPLE_FIELDS = {"stepsize", "taus"}
_NAME_TUPLE_FIELDS = {"plugins"}


def _types(cls) -> dict:
    return typing.get_type_hints(cls)


def _coerce(cls, name: str, value, where: str, relative_to: Optional[str] = None):
    """``value`` as field ``name`` of ``cls`` wants it, or a ConfigError saying what is allowed."""
    want = _types(cls)[name]
    label = f"{where}{name}"
    try:
        if name in _NAME_TUPLE_FIELDS:
            if isinstance(value, str):
                value = [v for v in value.split(",") if v.strip()]
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in value):
                raise ValueError
            from delaylab import plugins

            return tuple(plugins.source_of(v.strip(), relative_to=relative_to) for v in value)
        if name in _TUPLE_FIELDS:
            if isinstance(value, str):
                value = [v for v in value.replace(" ", "").split(",") if v]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = [value]
            out = tuple(float(v) for v in value)
            if not out:
                raise ValueError
            return out
        if want is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
                return value.lower() in ("true", "1", "yes")
            raise ValueError
        if want is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if want is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if want is str:
            if not isinstance(value, str):
                raise ValueError
            return value
    except (TypeError, ValueError):
        kind = ("a list of numbers (comma-separated on the command line)" if name in _TUPLE_FIELDS else
                "a list of file paths or module names" if name in _NAME_TUPLE_FIELDS else want.__name__)
        raise ConfigError(f"{label}: expected {kind}; got {value!r}") from None
    raise ConfigError(f"{label}: unsupported field type {want}")


MAX_EVENTS = 50_000_000  # a run's schedule lives in host memory: 5e7 events is about 5 GB


def _check(cfg: RunConfig) -> RunConfig:
    from delaylab import plugins, registry

    p, s = cfg.problem, cfg.schedule
    try:
        plugins.load_all(cfg.plugins)
    except plugins.PluginError as err:
        raise ConfigError(f"plugins: {err}") from None
    if cfg.algorithm not in registry.ALGORITHMS:
        raise ConfigError(f"algorithm: unknown {cfg.algorithm!r}; registered: {sorted(registry.ALGORITHMS)}")
    if p.kind not in PROBLEM_KINDS:
        raise ConfigError(f"problem.kind: {p.kind!r} is not one of {list(PROBLEM_KINDS)}")
    if s.policy not in POLICIES:
        raise ConfigError(f"schedule.policy: {s.policy!r} is not one of {list(POLICIES)}")
    if s.noise not in NOISES:
        raise ConfigError(f"schedule.noise: {s.noise!r} is not one of {list(NOISES)}")
    if len(s.taus) != p.workers:
        raise ConfigError(f"schedule.taus has {len(s.taus)} entries but problem.workers is {p.workers}; "
                          "give one mean duration per worker")
    fin = math.isfinite
    checks = [
        ("stepsize", all(g > 0 and fin(g) for g in cfg.stepsize), "every step size must be finite and > 0"),
        ("seeds", 1 <= cfg.seeds <= 10**6, "must be in [1, 10^6]"),
        ("log_every", cfg.log_every >= 0, "must be >= 0 (0: about 100 log points)"),
        ("segment", cfg.segment >= 0, "must be >= 0 (0: about 20 segments)"),
        ("checkpoint_every", cfg.checkpoint_every >= 0, "must be >= 0 seconds"),
        ("problem.workers", p.workers >= 1, "must be >= 1"),
        ("problem.dim", p.dim >= 1, "must be >= 1"),
        ("problem.condition", 1 <= p.condition <= 1e12, "must be in [1, 1e12] (beyond, the eigenvalues lose meaning)"),
        ("problem.samples", p.samples >= 1, "must be >= 1"),
        ("problem.batch", p.batch >= 1, "must be >= 1"),
        ("problem.hidden", p.hidden >= 1, "must be >= 1"),
        ("problem.noise", p.noise >= 0 and fin(p.noise), "must be finite and >= 0"),
        ("problem.spread", p.spread >= 0 and fin(p.spread), "must be finite and >= 0"),
        ("problem.heterogeneity", p.heterogeneity >= 0 and fin(p.heterogeneity) and p.heterogeneity <= 1e6,
         "must be in [0, 1e6]"),
        ("problem.l2", p.l2 >= 0 and fin(p.l2), "must be finite and >= 0"),
        ("schedule.taus", all(1e-300 < t and fin(t) for t in s.taus), "every τ_i must be finite and > 1e-300"),
        ("schedule.events", max(1, p.workers if s.policy == "sync" else 1) <= s.events <= MAX_EVENTS,
         f"must be >= 1 (sync: >= workers, one round) and at most {MAX_EVENTS:.0e} (the schedule is held in "
         "memory, about 100 bytes an event)"),
        ("schedule.failures", 0 <= s.failures < 1, "must be in [0, 1)"),
        ("schedule.scale", s.scale >= 0 and fin(s.scale), "must be finite and >= 0"),
    ]
    for name, ok, what in checks:
        if not ok:
            raise ConfigError(f"{name}: {what}")
    return cfg


def from_dict(d: dict, *, base: Optional[RunConfig] = None, relative_to: Optional[str] = None) -> RunConfig:
    """A config from nested dicts (TOML's shape); unknown keys are errors; missing ones keep
    ``base``'s values (default: the defaults). Relative plugin paths are taken from
    ``relative_to`` (default: the working directory)."""
    base = base or RunConfig()
    sub = {"problem": ProblemConfig, "schedule": ScheduleConfig}
    top = {}
    for key, value in d.items():
        if key in sub:
            if not isinstance(value, dict):
                raise ConfigError(f"{key}: expected a table ([{key}]); got {value!r}")
            cls = sub[key]
            names = {f.name for f in dataclasses.fields(cls)}
            unknown = set(value) - names
            if unknown:
                raise ConfigError(f"[{key}]: unknown {sorted(unknown)}; allowed: {sorted(names)}")
            top[key] = dataclasses.replace(getattr(base, key),
                                           **{k: _coerce(cls, k, v, f"{key}.") for k, v in value.items()})
        else:
            names = {f.name for f in dataclasses.fields(RunConfig)} - set(sub)
            if key not in names:
                raise ConfigError(f"unknown setting {key!r}; allowed: {sorted(names | set(sub))}")
            top[key] = _coerce(RunConfig, key, value, "", relative_to)
    return _check(dataclasses.replace(base, **top))


def read_toml(path: str, *, base: Optional[RunConfig] = None) -> RunConfig:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err})") from None
    except UnicodeDecodeError as err:  # tomllib decodes the bytes as UTF-8 before parsing
        raise ConfigError(f"{path}: not UTF-8 (byte {err.start}); a config file must be UTF-8 TOML") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror})") from None
    return from_dict(data, base=base, relative_to=os.path.dirname(os.path.abspath(path)))


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, int):
        return str(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_toml(cfg: RunConfig) -> str:
    """The config as TOML that :func:`read_toml` reads back to an equal config."""
    d = cfg.to_dict()
    lines = [f"{k} = {_toml_value(v)}" for k, v in d.items() if not isinstance(v, dict)]
    for table in ("problem", "schedule"):
        lines += ["", f"[{table}]"] + [f"{k} = {_toml_value(v)}" for k, v in d[table].items()]
    return "\n".join(lines) + "\n"


def field_help(cls) -> dict:
    """Each field's description, from the class docstring's "name[, name]: text" lines (first line)."""
    import re

    out = {}
    for line in (cls.__doc__ or "").splitlines():
        m = re.match(r"^\s{4}([a-z_0-9]+(?:, [a-z_0-9]+)*): (.+)$", line)
        if m:
            for name in m.group(1).split(", "):
                out[name] = m.group(2).rstrip()
    return out


def flag_fields() -> list[tuple[str, Any]]:
    """(flag name, dataclass) of every field, as ``--name`` / ``--problem.name``."""
    out = [(f.name, RunConfig) for f in dataclasses.fields(RunConfig) if f.name not in ("problem", "schedule", "plugins")]
    out += [(f"problem.{f.name}", ProblemConfig) for f in dataclasses.fields(ProblemConfig)]
    out += [(f"schedule.{f.name}", ScheduleConfig) for f in dataclasses.fields(ScheduleConfig)]
    return out


def from_flags(values: dict, *, base: Optional[RunConfig] = None) -> RunConfig:
    """Apply ``{"stepsize": "0.1,0.2", "problem.dim": "20", ...}`` (strings from the command line)."""
    nested: dict = {}
    for name, value in values.items():
        if "." in name:
            table, key = name.split(".", 1)
            nested.setdefault(table, {})[key] = value
        else:
            nested[name] = value
    return from_dict(nested, base=base)


def differences(a: RunConfig, b: RunConfig) -> list[str]:
    """Fields that differ, as 'name: a → b'."""
    da, db = a.to_dict(), b.to_dict()
    out = []
    for k in da:
        if isinstance(da[k], dict):
            out += [f"{k}.{kk}: {da[k][kk]!r} → {db[k][kk]!r}" for kk in da[k] if da[k][kk] != db[k][kk]]
        elif da[k] != db[k]:
            out.append(f"{k}: {da[k]!r} → {db[k]!r}")
    return out


# --- building -----------------------------------------------------------------------------------


def build_problem(cfg: RunConfig):
    from delaylab import sim
    from delaylab.sim import data as sim_data
    from delaylab.sim import models

    p = cfg.problem
    dtype = np.float64 if cfg.x64 else np.float32
    if p.kind == "quadratic":
        return sim.problems.random_quadratic(p.workers, p.dim, diagonal=p.diagonal, condition=p.condition,
                                             spread=p.spread, noise=p.noise, seed=p.seed, dtype=dtype)
    if p.kind == "logistic":
        return sim.problems.synthetic_logistic(p.workers, p.samples, p.dim, heterogeneity=p.heterogeneity,
                                               l2=p.l2, seed=p.seed)
    ds = sim_data.load_mnist_format()
    n = min(p.samples, ds.x_train.shape[0])
    return models.mlp_classifier(ds.x_train[:n], ds.y_train[:n], num_workers=p.workers, split="iid", hidden=p.hidden,
                                 batch_size=p.batch, seed=p.seed, dtype=dtype)


def build_schedule(cfg: RunConfig):
    from delaylab.sim import schedules

    s = cfg.schedule
    taus = np.asarray(s.taus, np.float64)
    if s.policy == "async":
        if s.noise == "none":
            sched = schedules.fixed_computation(taus, num_events=s.events)
        else:
            sched = schedules.random_durations(taus, num_events=s.events, noise=s.noise, scale=s.scale, seed=s.seed)
    else:
        rounds = max(1, s.events // len(taus))
        sched = schedules.synchronous(taus, num_rounds=rounds, noise=None if s.noise == "none" else s.noise,
                                      scale=s.scale, seed=s.seed)
    if s.failures > 0:
        sched = schedules.with_failures(sched, probability=s.failures, seed=s.seed + 1)
    return sched


def build_algorithm(cfg: RunConfig, schedule):
    """The algorithm at the first step size, and the hyperparameter grid of a sweep over step
    sizes: the registry's construction at each γ, with the hyperparameters that change with γ."""
    from delaylab import registry

    entry = registry.algorithm(cfg.algorithm)
    algs = [entry.make(g, schedule) for g in cfg.stepsize]
    if len(algs) == 1:
        return algs[0], None
    varying = {k for k in algs[0].hparams
               if any(not np.array_equal(np.asarray(a.hparams[k]), np.asarray(algs[0].hparams[k])) for a in algs)}
    return algs[0], {k: np.stack([np.asarray(a.hparams[k]) for a in algs]) for k in sorted(varying)}

