"""The import direction of docs/layout.md (theory < algos < sim < delaylab < figures and benchmarks;
sim knows only the protocol module of algos), as import-linter contracts in pyproject.toml, checked
by import-linter's own command, ``lint-imports``, run on delaylab laid out as installed
(``python -m tests.lint_imports``: the mapped subpackages are not under delaylab/ on disk)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_contracts_hold():
    command = [sys.executable, "-m", "tests.lint_imports"]  # lint-imports on delaylab as installed
    out = subprocess.run([*command, os.path.join(ROOT, "pyproject.toml"), "--no-cache"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Contracts: 4 kept, 0 broken." in out.stdout  # every contract was read and checked
