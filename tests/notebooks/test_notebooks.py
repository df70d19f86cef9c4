"""The notebooks run top to bottom on their small preset (``DELAYLAB_NOTEBOOK_QUICK=1``); each
ends its sections with assertions against the theory, so a change that breaks one fails here."""

import os

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import SUITE_XLA_FLAGS

pytestmark = pytest.mark.slow  # holds tests of 10 s or more: run first (tests/conftest.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDER = os.path.join(ROOT, "notebooks")
NOTEBOOKS = sorted(f for f in os.listdir(FOLDER) if f.endswith(".ipynb"))


def test_the_three_notebooks_exist():
    assert NOTEBOOKS == ["01_quickstart.ipynb", "02_new_algorithm.ipynb", "03_heterogeneity.ipynb"]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, monkeypatch):
    monkeypatch.setenv("DELAYLAB_NOTEBOOK_QUICK", "1")
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # the kernel runs the notebook as a user would: XLA at its defaults, not the suite's settings
    # (tests/conftest.py); measured: 01 in 23 s at the defaults against 30 s at level 0, and the
    # three together 46 s with or without the fusion emitters
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", "").replace(SUITE_XLA_FLAGS, ""))
    nb = nbformat.read(os.path.join(FOLDER, name), as_version=4)
    for cell in nb.cells:
        assert not cell.get("outputs"), f"{name} is committed with outputs; clear them"
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": ROOT}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
