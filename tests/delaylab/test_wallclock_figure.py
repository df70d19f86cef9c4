"""`delaylab figure wallclock --quick` regenerates: a real Ray run, its replay and the fitted model."""

import csv
import os

import pytest

pytest.importorskip("ray")


def test_wallclock_figure_regenerates(tmp_path):
    from delaylab import cli

    out = str(tmp_path / "wc")
    assert cli.main(["figure", "wallclock", "--quick", "--out", out]) == 0
    for name in ("wallclock.png", "wallclock.csv", "wallclock.txt", "wallclock_trace.csv", "wallclock_trace.csv.json"):
        assert os.path.getsize(os.path.join(out, name)) > 0, name
    with open(os.path.join(out, "wallclock.csv")) as fh:
        sources = {row["source"] for row in csv.DictReader(fh)}
    assert sources == {"real", "replay", "fixed_model"}
    text = open(os.path.join(out, "wallclock.txt")).read()
    rel = float(text.split("relative difference ")[1].split(" ")[0])
    assert rel <= 1e-6  # the replay ends at the real run's model
    import ray

    ray.shutdown()
