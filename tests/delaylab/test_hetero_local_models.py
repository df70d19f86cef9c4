"""hetero-local-models (paper_figures.hetero_local_models): its specialisation statistic on made-up
runs, and the figure end to end on a tiny preset with one method."""

import csv

import numpy as np
import pytest

from delaylab import claims, cli
from delaylab.paper_figures import hetero_local_models as hl

pytestmark = pytest.mark.slow


def _run(fast, slow):
    """A made-up run: per layer (first, last) the fast and slow workers' divergence."""
    out = {"layers": ["Dense_0", "Dense_1"], "accuracy": 0.8, "diverged": False}
    for L, f, s in zip(out["layers"], fast, slow):
        out.update({f"div_{L}_fast": f, f"div_{L}_slow": s, f"cos_{L}_fast": 0.5, f"cos_{L}_slow": 0.4})
    return out


def test_speed_effect_is_s_at_R_minus_s_at_R1_paired_by_seed():
    noise = [1.0, 1.1, 0.9, 1.05, 0.95]
    control = [_run((0.1 * e, 0.1), (0.1, 0.1)) for e in noise]  # s = log e per seed
    # at R: fast workers 3× further than slow in the first layer, equally far in the last, on top of the control's
    early = [_run((0.3 * e, 0.1), (0.1, 0.1)) for e in noise]
    a = hl.analyse(early, control)
    np.testing.assert_allclose(a["effect"], np.log(3.0), rtol=1e-12)  # the seed's own offset cancels
    assert a["verdict"] == claims.HOLDS and a["uniform"] == claims.FAILS
    assert a["s"].mean == pytest.approx(np.log(3) + np.mean(np.log(noise)), abs=1e-12)
    # the same s as its control: no effect of speed, layer-uniform
    same = hl.analyse(control, control)
    assert same["verdict"] == claims.INCONCLUSIVE and np.all(same["effect"] == 0)
    late = [_run((0.1 * e, 0.3), (0.1, 0.1)) for e in noise]
    assert hl.analyse(late, control)["verdict"] == claims.FAILS

    # the row: one superiority part per (method, split, R > 1) cell against its R = 1 control
    def data(**at_r4):
        return {"runs": {**{(m, "iid", 1.0): control for m in at_r4}, **{(m, "iid", 4.0): c for m, c in at_r4.items()}},
                "ratios": [1.0, 4.0], "dataset": "made-up", "preset": "test"}

    row, = hl.verdicts(data(EASGD=early, FedAsync=early))
    assert (row["id"], row["kind"], row["verdict"]) == ("fast-workers-specialise", "superiority", claims.HOLDS)
    assert row["evidence"].startswith("2 of 2 cells hold, 0 do not")
    assert hl.verdicts(data(EASGD=early, FedAsync=control))[0]["verdict"] == claims.INCONCLUSIVE
    assert hl.verdicts(data(EASGD=early, FedAsync=late))[0]["verdict"] == claims.FAILS


def test_figure_end_to_end_on_a_tiny_preset(tmp_path, monkeypatch):
    tiny = hl.Preset("test", train=600, test=200, pool=1, hidden=8, batch=4, events=60, seeds=2, ratios=(1, 4),
                     probes=16, logs=4)
    monkeypatch.setitem(hl.PRESETS, "test", tiny)
    every = hl.methods()
    monkeypatch.setattr(hl, "methods", lambda: {"FedAsync": every["FedAsync"]})
    assert cli.main(["figure", "hetero-local-models", "--preset", "test", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "hetero_local_models.txt").read_text()
    assert "VERDICT — fast workers become early-layer specialists" in text
    import json

    got = json.loads((tmp_path / "hetero_local_models.verdicts.json").read_text())
    assert [(r["id"], r["kind"]) for r in got] == [("fast-workers-specialise", "superiority")]
    with open(tmp_path / "hetero_local_models.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 2 * 2 * 2 * 2  # splits × ratios × seeds × layers × groups
    assert all(0.0 <= float(r["one_minus_cka"]) <= 1.0 + 1e-9 for r in rows)
