"""A figure killed (SIGKILL) while it writes its parts, at a point drawn from a seeded generator,
resumes to the same outputs as a run never interrupted (issue 25, part 5); a part is never
half-written (written under a temporary name, then renamed), and a temporary file a kill leaves is
removed, with a note, when the figure resumes."""

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import SUITE_XLA_FLAGS
from tests.delaylab.test_run_cli import ROOT, _env

pytestmark = pytest.mark.slow

# hetero-difficulty on a tiny preset: 2 timings × 2 methods × 1 seed = 4 parts, each a run of its own
SCRIPT = """
import sys
from delaylab import cli
from delaylab.paper_figures import hetero_difficulty as hd
hd.PRESETS["test"] = hd.Preset("test", train=600, test=200, pool=1, hidden=8, batch=4, workers=8, events=1500,
                               seeds=1, step=0.05)
sys.exit(cli.main(["figure", "hetero-difficulty", "--preset", "test", "--out", sys.argv[1]]))
"""


def _figure(out: str, *, kill_after: int | None = None) -> subprocess.CompletedProcess | int:
    args = [sys.executable, "-c", SCRIPT, out]
    # the suite's XLA settings (fast compiling): these runs are tiny, compiling is most of their time;
    # every process of the test compiles alike, so their bits compare
    env = {**_env(), "XLA_FLAGS": SUITE_XLA_FLAGS}
    if kill_after is None:
        return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    parts = os.path.join(out, ".parts", "hetero-difficulty_test")
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.isdir(parts) and sum(f.endswith(".npz") for f in os.listdir(parts)) >= kill_after:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the figure ended before it could be killed part-way"
    return sum(f.endswith(".npz") for f in os.listdir(parts))


def test_a_killed_figure_resumes_to_the_same_outputs(tmp_path, monkeypatch):
    whole, killed = str(tmp_path / "whole"), str(tmp_path / "killed")
    # the uninterrupted run in this process (the suite's XLA settings, as the subprocesses have)
    from delaylab import cli
    from delaylab.paper_figures import hetero_difficulty as hd

    monkeypatch.setitem(hd.PRESETS, "test", hd.Preset("test", train=600, test=200, pool=1, hidden=8, batch=4,
                                                      workers=8, events=1500, seeds=1, step=0.05))
    assert cli.main(["figure", "hetero-difficulty", "--preset", "test", "--out", whole]) == 0
    # one kill, after a number of parts drawn from a seeded generator (the run test kills twice; each
    # subprocess here costs its own start and compilation, about 7 s)
    first = int(np.random.default_rng(7).integers(1, 4))
    n1 = _figure(killed, kill_after=first)
    assert first <= n1 < 4
    parts = os.path.join(killed, ".parts", "hetero-difficulty_test")
    with open(os.path.join(parts, ".tmp-stale0001"), "wb") as fh:
        fh.write(b"half a part")
    resumed = _figure(killed)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming; finished parts" in resumed.stdout
    assert re.search(r"removed \d+ temporary file", resumed.stdout)  # the planted one, and any a kill left
    assert not os.path.exists(os.path.join(killed, ".parts"))  # deleted once the figure is written
    for name in ("hetero_difficulty.csv", "hetero_difficulty.verdicts.json"):
        with open(os.path.join(whole, name), "rb") as a, open(os.path.join(killed, name), "rb") as b:
            assert a.read() == b.read(), name
    with open(os.path.join(whole, "hetero_difficulty.txt")) as a, open(os.path.join(killed, "hetero_difficulty.txt")) as b:
        assert a.read().splitlines()[:-1] == b.read().splitlines()[:-1]  # all but the computing time
