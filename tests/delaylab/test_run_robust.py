"""`delaylab run` and `show` on a diverging run, bad output paths and unreadable checkpoints
(issue 25, parts 1-3): a divergence is a result with its own status and exit code, every JSON file
is strict, a bad path or checkpoint is refused in one line and leaves the folder as it was."""

import json
import os

import numpy as np
import pytest

from delaylab import cli, runs


def _strict(path):
    def refuse(name):
        raise ValueError(f"non-finite number {name} in {path}")

    with open(path) as fh:
        return json.loads(fh.read(), parse_constant=refuse)


def test_a_diverged_run_is_a_result(tmp_path, capsys):
    out = str(tmp_path / "div")
    assert cli.main(["run", "--stepsize", "5.0", "--out", out, "--quiet"]) == runs.EXIT_DIVERGED
    said = capsys.readouterr().out
    assert "diverged at event" in said and "last finite" in said
    for name in ("summary", "config", "environment", "schedule"):
        _strict(os.path.join(out, f"{name}.json"))
    s = _strict(os.path.join(out, "summary.json"))
    assert s["status"] == "diverged" and s["diverged"] == 1
    dv = s["divergence"]
    assert dv["event"] > 0 and 0 <= dv["worker"] < 4 and dv["time"] > 0
    assert np.isfinite(s["final_loss"])  # the last finite log point
    assert s["theory"]["by_stepsize"][0]["dist_tail_to_optimum"] is None  # NaN written as null
    assert os.path.getsize(os.path.join(out, "figure.png")) > 10_000
    # show draws it again and says where it diverged; --resume says it is finished, with the same code
    os.remove(os.path.join(out, "figure.png"))
    assert cli.main(["show", out]) == 0
    assert f"diverged at event {dv['event']}" in capsys.readouterr().out
    assert os.path.exists(os.path.join(out, "figure.png"))
    assert cli.main(["run", "--resume", out, "--json"]) == runs.EXIT_DIVERGED
    io = capsys.readouterr()
    assert "already finished (diverged)" in io.err and json.loads(io.out)["status"] == "diverged"
    # a sweep in which one step size diverges: a result with per-run statuses, exit 0
    sweep = str(tmp_path / "sweep")
    assert cli.main(["run", "--stepsize", "0.01,5.0", "--out", sweep, "--quiet", "--json"]) == 0
    s = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(c))
    assert s["status"] == "partly diverged" and s["diverged"] == 1
    assert s["diverged_at"][0] == [-1] and s["diverged_at"][1][0] > 0
    assert np.isfinite(s["final_loss"][1]) and s["final_loss"][0] < s["final_loss"][1]


def test_output_paths_that_cannot_be_folders_are_refused_in_one_line(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert cli.main(["run", "--out", str(afile)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a file, not a folder" in err and str(afile) in err
    missing = tmp_path / "no" / "such" / "run"
    assert cli.main(["run", "--out", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err and str(tmp_path / "no" / "such") in err
    assert not (tmp_path / "no").exists()


def test_unreadable_checkpoint_is_reported_and_the_folder_left_alone(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert cli.main(["run", "--out", out, "--quiet", "--schedule.events", "400"]) == 0
    capsys.readouterr()
    os.remove(os.path.join(out, "summary.json"))  # as if stopped before the end
    ck = os.path.join(out, "checkpoint.npz")
    with open(ck, "rb") as fh:
        data = fh.read()
    with open(ck, "wb") as fh:
        fh.write(data[: len(data) // 3])  # truncated
    before = {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)}
    assert cli.main(["run", "--resume", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be read" in err and "left as it is" in err
    assert cli.main(["show", out]) == 2
    capsys.readouterr()
    assert {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)} == before


def test_a_kill_in_the_middle_of_a_checkpoint_write_leaves_the_previous_one_whole(tmp_path):
    """The process is killed halfway through writing its second checkpoint (the store's test hook):
    the first checkpoint is read as it was, the half-written one is only a temporary file, and the
    resumed run ends with the same bits as an uninterrupted one."""
    import re

    from tests.delaylab.test_run_cli import _cli, _npz

    args = ["--quiet", "--schedule.events", "4000", "--segment", "10", "--checkpoint_every", "0"]
    whole, killed = str(tmp_path / "whole"), str(tmp_path / "killed")
    assert _cli("run", "--out", whole, *args).returncode == 0
    died = _cli("run", "--out", killed, *args, env={"DELAYLAB_TEST_KILL_MID_WRITE": "checkpoint.npz:2"})
    assert died.returncode == -9, died.stderr  # SIGKILL, mid-write
    leftovers = [f for f in os.listdir(killed) if f.startswith(".tmp-")]
    assert len(leftovers) == 1
    assert int(_npz(os.path.join(killed, "checkpoint.npz"))["done"]) == 1  # the first, whole
    resumed = _cli("run", "--resume", killed)
    assert resumed.returncode == 0, resumed.stderr
    assert re.search(r"removed \d+ temporary file", resumed.stderr)
    assert not [f for f in os.listdir(killed) if f.startswith(".tmp-")]
    a, b = _npz(os.path.join(whole, "final.npz")), _npz(os.path.join(killed, "final.npz"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_summaries_and_figures_that_are_not_what_run_wrote_are_refused_in_one_line(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert cli.main(["run", "--out", out, "--quiet", "--schedule.events", "300"]) == 0
    capsys.readouterr()
    good = open(os.path.join(out, "summary.json")).read()
    for bad in ("{}", "[]", '{"status": "complete"}', '{"status": "odd", "final_loss": 1, "diverged": 0}'):
        with open(os.path.join(out, "summary.json"), "w") as fh:
            fh.write(bad)
        for argv in (["show", out], ["run", "--resume", out]):
            assert cli.main(argv) == 2, (argv, bad)
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "not a summary delaylab run wrote" in err, err
    with open(os.path.join(out, "summary.json"), "w") as fh:
        fh.write(good)
    assert cli.main(["show", out, "--out", str(tmp_path / "no" / "fig.png")]) == 2
    assert "does not exist" in capsys.readouterr().err
    with open(os.path.join(out, "metrics.npz"), "r+b") as fh:
        fh.truncate(100)
    assert cli.main(["show", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be drawn" in err
