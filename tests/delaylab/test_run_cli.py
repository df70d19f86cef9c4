"""`delaylab run` / `delaylab show`: configs, run folders, and resume after SIGKILL with the
same final bits as a run that was never interrupted."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from delaylab import cli
from delaylab import config as C
from tests.conftest import SUITE_XLA_FLAGS

pytestmark = pytest.mark.slow  # holds tests of 10 s or more: run first (tests/conftest.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# 31 segments of 2,500 events, a fraction of a second each on a 2-core machine: long enough to kill
# part-way.
LONG = ["--problem.dim", "100", "--problem.workers", "8", "--schedule.taus", "1,1.5,2,2.5,3,3.5,4,8",
        "--schedule.events", "75000", "--log_every", "500", "--segment", "5", "--checkpoint_every", "0",
        "--stepsize", "0.002", "--problem.noise", "0.5"]


def _env(**extra):
    """The subprocesses' environment. They run up to 75,000 events each, so XLA compiles them at its
    default settings, not the suite's (tests/conftest.py): at its level 0 the SIGKILL test took twice
    as long (measured 55 s against 122 s)."""
    flags = os.environ.get("XLA_FLAGS", "").replace(SUITE_XLA_FLAGS, "").strip()
    return dict(os.environ, XLA_FLAGS=flags, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra)


def _cli(*args, env=None, **kw):
    env = _env(**(env or {}))
    return subprocess.run([sys.executable, "-m", "delaylab", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600, **kw)


def _npz(path):
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def _kill_after(args, ckpt_path: str, segments: int) -> int:
    """Start `delaylab ARGS`, SIGKILL it once its checkpoint holds ``segments`` finished segments;
    returns the count the checkpoint holds after the kill."""
    proc = subprocess.Popen([sys.executable, "-m", "delaylab", *args], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(ckpt_path):
            try:
                if int(_npz(ckpt_path)["done"]) >= segments:
                    break
            except (OSError, ValueError, KeyError):  # replaced while being read: try again
                pass
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed part-way"
    return int(_npz(ckpt_path)["done"])


def test_sigkilled_run_resumes_to_the_same_bits(tmp_path, capsys):
    whole, killed = str(tmp_path / "whole"), str(tmp_path / "killed")
    # the uninterrupted run, with --json: the summary on stdout, the progress bar (forced on from
    # the first segment) on stderr only
    done = _cli("run", "--out", whole, "--json", *LONG, env={"DELAYLAB_PROGRESS_AFTER": "0"})
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["status"] == "complete" and summary["events"] == 75000
    assert "75000/75000" in done.stderr.split("\r")[-1]  # the progress bar's last line: every event done

    # killed twice, at segment counts drawn from a seeded generator (about 31 segments in all),
    # resumed in between, and a temporary file of an interrupted write planted before the last resume
    first, second = sorted(np.random.default_rng(25).choice(np.arange(2, 24), size=2, replace=False))
    second = max(second, first + 3)
    ckpt_path = os.path.join(killed, "checkpoint.npz")
    at_kill = _kill_after(["run", "--out", killed, "--quiet", *LONG], ckpt_path, first)
    assert first <= at_kill < 31  # 151 log chunks in segments of 5: 31 segments
    assert not os.path.exists(os.path.join(killed, "summary.json"))

    # what runs nothing runs in this process (each subprocess starts JAX anew)
    assert cli.main(["show", killed]) == 0
    shown = capsys.readouterr().out
    assert "interrupted" in shown and "--resume" in shown

    again = _kill_after(["run", "--resume", killed, "--quiet"], ckpt_path, second)
    assert at_kill < again < 31
    with open(os.path.join(killed, ".tmp-stale0001"), "wb") as fh:
        fh.write(b"half a checkpoint")
    resumed = _cli("run", "--resume", killed)
    assert resumed.returncode == 0, resumed.stderr
    # the planted file, and any a kill left mid-write
    assert re.search(r"removed \d+ temporary file", resumed.stderr), resumed.stderr
    assert not [f for f in os.listdir(killed) if f.startswith(".tmp-")]
    a, b = _npz(os.path.join(whole, "final.npz")), _npz(os.path.join(killed, "final.npz"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    a, b = _npz(os.path.join(whole, "metrics.npz")), _npz(os.path.join(killed, "metrics.npz"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)

    # a resume against a changed config is refused, saying what differs
    assert cli.main(["run", "--resume", killed, "--stepsize", "0.003"]) == 2
    assert "stepsize: (0.002,) → (0.003,)" in capsys.readouterr().err
    assert cli.main(["run", "--out", killed, *LONG]) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_run_folder_from_toml_holds_config_versions_metrics_and_figure(tmp_path, capsys):
    cfg = tmp_path / "sweep.toml"
    cfg.write_text('name = "tiny"\nalgorithm = "rescaled_asgd"\nstepsize = [0.01, 0.02]\nseeds = 3\n\n'
                   '[problem]\nkind = "quadratic"\nworkers = 3\ndim = 4\nnoise = 0.5\n\n'
                   '[schedule]\ntaus = [1.0, 2.0, 5.0]\nevents = 1500\n')
    out = str(tmp_path / "run")
    r = _cli("run", str(cfg), "--out", out, "--quiet")
    assert r.returncode == 0, r.stderr
    for name in ("config.toml", "config.json", "environment.json", "schedule.json", "metrics.npz", "metrics.csv",
                 "final.npz", "summary.json", "figure.png", "checkpoint.npz"):
        assert os.path.exists(os.path.join(out, name)), name
    saved = C.read_toml(os.path.join(out, "config.toml"))
    assert saved == C.read_toml(str(cfg))
    env = json.load(open(os.path.join(out, "environment.json")))
    assert env["git_revision"] and env["packages"]["jax"]
    m = _npz(os.path.join(out, "metrics.npz"))
    assert m["loss"].shape[:2] == (2, 3)  # step sizes × seeds
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["runs"] == 6 and len(summary["theory"]["by_stepsize"]) == 2
    # Rescaled ASGD targets the true objective: its step mass per unit time, counted over the
    # tail window (whole arrivals only), is uniform up to the window's edges
    for row in summary["theory"]["by_stepsize"]:
        assert np.max(np.abs(np.array(row["predicted_weights"]) - 1 / 3)) < 0.01
    os.remove(os.path.join(out, "figure.png"))
    assert cli.main(["show", out]) == 0
    shown = capsys.readouterr().out
    assert "complete" in shown and "rescaled_asgd" in shown
    assert os.path.exists(os.path.join(out, "figure.png"))  # redrawn from the stored metrics


@pytest.mark.parametrize("args, message", [
    (["--stepsize", "-1"], "stepsize: every step size must be finite and > 0"),
    (["--algorithm", "nope"], "algorithm: unknown 'nope'"),
    (["--schedule.taus", "1,2"], "schedule.taus has 2 entries but problem.workers is 4"),
    (["--problem.dim", "x"], "problem.dim: expected int"),
    (["--problem.kind", "cnn"], "problem.kind: 'cnn' is not one of"),
])
def test_bad_settings_are_refused_before_running(args, message, capsys):
    assert cli.main(["run", "--out", "/nonexistent/never", *args]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert not os.path.exists("/nonexistent/never")


def test_config_round_trips_through_toml_and_flags():
    cfg = C.from_flags({"stepsize": "0.1,0.2", "problem.dim": "7", "schedule.noise": "exponential",
                        "schedule.taus": "1,2,3,4", "x64": "false"})
    assert cfg.stepsize == (0.1, 0.2) and cfg.problem.dim == 7 and cfg.is_sweep and cfg.x64 is False
    import tomllib

    assert C.from_dict(tomllib.loads(C.to_toml(cfg))) == cfg
    assert C.differences(cfg, C.RunConfig()) == [
        "stepsize: (0.1, 0.2) → (0.01,)", "x64: False → True", "problem.dim: 7 → 10", "schedule.noise: 'exponential' → 'none'"]
    with pytest.raises(C.ConfigError, match=r"\[problem\]: unknown \['dims'\]"):
        C.from_dict({"problem": {"dims": 3}})
    with pytest.raises(AttributeError):
        cfg.seed = 3  # frozen
    import dataclasses

    for cls in (C.RunConfig, C.ProblemConfig, C.ScheduleConfig):  # every flag has its help line
        fields = {f.name for f in dataclasses.fields(cls)} - {"problem", "schedule"}
        assert set(C.field_help(cls)) == fields, cls.__name__
