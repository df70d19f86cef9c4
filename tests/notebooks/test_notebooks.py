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


def test_the_notebooks_exist():
    assert NOTEBOOKS == ["01_quickstart.ipynb", "02_new_algorithm.ipynb", "03_heterogeneity.ipynb",
                         "04_your_method.ipynb"]


def test_notebook_04_holds_its_plugin_file():
    """Notebook 04 writes the method in a cell; the command line loads the same code from
    notebooks/dc_asgd.py: the two must not drift apart."""
    nb = nbformat.read(os.path.join(FOLDER, "04_your_method.ipynb"), as_version=4)
    with open(os.path.join(FOLDER, "dc_asgd.py")) as fh:
        plugin = fh.read()
    assert any(c.cell_type == "code" and c.source.strip() == plugin.strip() for c in nb.cells)


def test_notebooks_run(monkeypatch):
    """The notebooks, top to bottom, one after another in one kernel with its namespace
    cleared between them (``%reset -f``: a notebook that leans on another's variables fails). One
    kernel, not one per notebook: a kernel's start and imports cost 7 s of the suite's time each
    (measured 2026-12-06), and the imports a notebook makes stay loaded for the next."""
    monkeypatch.setenv("DELAYLAB_NOTEBOOK_QUICK", "1")
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # the kernel runs the notebooks as a user would: XLA at its defaults, not the suite's settings
    # (tests/conftest.py); measured: 01 in 23 s at the defaults against 30 s at level 0, and the
    # three together 46 s with or without the fusion emitters
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", "").replace(SUITE_XLA_FLAGS, ""))
    combined = nbformat.v4.new_notebook()
    owner = []  # the notebook each combined cell came from
    for name in NOTEBOOKS:
        nb = nbformat.read(os.path.join(FOLDER, name), as_version=4)
        for cell in nb.cells:
            assert not cell.get("outputs"), f"{name} is committed with outputs; clear them"
        combined.cells.append(nbformat.v4.new_code_cell("%reset -f"))
        owner.append(name)
        combined.cells += nb.cells
        owner += [name] * len(nb.cells)
    client = NotebookClient(combined, timeout=600, kernel_name="python3", resources={"metadata": {"path": ROOT}})
    try:
        client.execute()
    except Exception as e:  # nbclient stops at the first failing cell: say which notebook it was in
        failed = [owner[i] for i, c in enumerate(combined.cells) if c.cell_type == "code"
                  and any(o.output_type == "error" for o in c.get("outputs", []))]
        raise AssertionError(f"{failed[0] if failed else 'a notebook'} failed: {e}") from None
    ran = {owner[i] for i, c in enumerate(combined.cells) if c.cell_type == "code" and c.get("execution_count")}
    assert ran == set(NOTEBOOKS)
