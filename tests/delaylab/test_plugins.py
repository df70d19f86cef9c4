"""Plugins: a researcher's own methods registered from a file, a module or an entry point, seen by
run, verify and show like built-in ones; every broken plugin refused in one line, naming it."""

import os
import subprocess
import sys
import textwrap

import pytest

from delaylab import plugins, registry
from tests.conftest import SUITE_XLA_FLAGS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DC = os.path.join(ROOT, "notebooks", "dc_asgd.py")


@pytest.fixture(autouse=True)
def clean_registry(monkeypatch):
    """Plugins register into process-wide tables: restore them after each test (and scan the
    entry points afresh in each)."""
    algs, sources, loaded = dict(registry.ALGORITHMS), dict(registry.SOURCES), dict(plugins._LOADED)
    monkeypatch.setattr(plugins, "_ENTRY_POINTS", None)
    yield
    for table, saved in ((registry.ALGORITHMS, algs), (registry.SOURCES, sources), (plugins._LOADED, loaded)):
        table.clear()
        table.update(saved)


def _write(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


GOOD = """
    from delaylab import algos
    from delaylab.registry import AlgorithmEntry

    def make(g, s):
        return algos.asgd(stepsize=g)

    def delaylab_algorithms():
        return [AlgorithmEntry("{name}", make, "constant", "vanilla under another name")]
"""


def test_a_file_plugin_registers_its_methods_with_their_source():
    p = plugins.load(DC)
    assert p.names == ("dc_asgd", "dc_asgd_a")
    assert registry.source("dc_asgd") == DC
    assert registry.algorithm("dc_asgd").rule == "constant"
    assert plugins.load(DC) is p  # a second load registers nothing new
    assert registry.source("asgd") is None


def test_a_module_plugin_and_an_entry_point(tmp_path, monkeypatch):
    (tmp_path / "myplug.py").write_text(textwrap.dedent(GOOD.format(name="asgd_again")))
    dist = tmp_path / "myplug-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[delaylab.algorithms]\nmine = myplug\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = plugins.load_all()
    assert any(p.names == ("asgd_again",) and p.source == "myplug" for p in loaded)
    assert registry.source("asgd_again") == "myplug"


@pytest.mark.parametrize("body,expect", [
    ("raise RuntimeError('boom')\n", "failed to import: RuntimeError: boom"),
    ("def f(:\n", "failed to import: SyntaxError"),
    ("x = 1\n", "defines no delaylab_algorithms()"),
    ("def delaylab_algorithms():\n    raise KeyError('k')\n", "delaylab_algorithms() raised KeyError"),
    ("def delaylab_algorithms():\n    return [1]\n", "returned a int, not a delaylab.registry.AlgorithmEntry"),
    ("def delaylab_algorithms():\n    return 3\n", "must return AlgorithmEntry objects"),
    ("from delaylab.registry import AlgorithmEntry\n"
     "def delaylab_algorithms():\n    return [AlgorithmEntry('x', lambda g, s: 'not an algorithm', 'constant', '')]\n",
     "algorithm 'x' breaks the protocol: TypeError: an algorithm must be a delaylab.algos.Algorithm"),
    ("import algos\nfrom delaylab.registry import AlgorithmEntry\n"
     "def delaylab_algorithms():\n"
     "    a = algos.asgd(stepsize=0.1)\n"
     "    both = a._replace(server=a.server._replace(apply_round=a.server.apply))\n"
     "    return [AlgorithmEntry('y', lambda g, s: both, 'constant', '')]\n",
     "exactly one of apply"),
    ("import algos\nfrom delaylab.registry import AlgorithmEntry\n"
     "def delaylab_algorithms():\n"
     "    return [AlgorithmEntry('z', lambda g, s: algos.asgd(stepsize=g), 'no_such_rule', '')]\n",
     "rule 'no_such_rule' is neither"),
    ("import algos\nfrom delaylab.registry import AlgorithmEntry\n"
     "def delaylab_algorithms():\n"
     "    return [AlgorithmEntry('asgd', lambda g, s: algos.asgd(stepsize=g), 'constant', '')]\n",
     "'asgd' is already registered"),
])
def test_a_broken_plugin_is_refused_in_one_line_naming_it(tmp_path, body, expect):
    path = _write(tmp_path, "broken.py", body)
    before = dict(registry.ALGORITHMS)
    with pytest.raises(plugins.PluginError) as err:
        plugins.load(path)
    msg = str(err.value)
    assert "\n" not in msg and path in msg and expect in msg, msg
    assert registry.ALGORITHMS == before  # nothing half-registered


def test_missing_plugins_are_refused():
    with pytest.raises(plugins.PluginError, match="no such file"):
        plugins.load("does/not/exist.py")
    with pytest.raises(plugins.PluginError, match="failed to import: ModuleNotFoundError"):
        plugins.load("no_module_of_this_name_anywhere")


def _cli(*args, cwd):
    env = dict(os.environ, XLA_FLAGS=os.environ.get("XLA_FLAGS", "").replace(SUITE_XLA_FLAGS, "").strip(),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "delaylab", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_run_records_the_plugin_so_show_and_resume_need_no_flag(tmp_path):
    folder = str(tmp_path / "dc")
    small = ["--algorithm", "dc_asgd", "--schedule.events", "400", "--problem.workers", "3", "--schedule.taus",
             "1,2,4", "--problem.dim", "4", "--quiet"]
    ran = _cli("run", "--plugin", DC, *small, "--out", folder, cwd=str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    with open(os.path.join(folder, "config.toml")) as fh:
        assert DC in fh.read()
    shown = _cli("show", folder, cwd=ROOT)  # a new process, another directory, no --plugin
    assert shown.returncode == 0, shown.stderr
    assert "dc_asgd" in shown.stdout
    again = _cli("run", "--resume", folder, cwd=ROOT)
    assert again.returncode == 0 and "already finished" in again.stderr, again.stderr
    unknown = _cli("run", *small, "--out", str(tmp_path / "x"), cwd=ROOT)  # without the plugin
    assert unknown.returncode == 2 and "unknown 'dc_asgd'" in unknown.stderr


def test_the_command_line_refuses_a_broken_plugin_before_anything_runs(tmp_path):
    bad = _write(tmp_path, "bad.py", "raise ImportError('needs torch')\n")
    out = _cli("verify", "--plugin", bad, "--scenario", "tau-i", "--no-out", cwd=str(tmp_path))
    assert out.returncode == 2
    assert out.stderr.strip() == f"delaylab verify: plugin {bad}: failed to import: ImportError: needs torch"


MOMENTUM = """
    from typing import NamedTuple
    import jax, jax.numpy as jnp
    from delaylab.algos import Server, Worker, algorithm
    from delaylab.registry import AlgorithmEntry

    class S(NamedTuple):
        params: object
        m: object

    def init(h, x, n):
        return S(x, jnp.zeros_like(x))

    def params(s):
        return s.params

    def apply(h, s, g, e):
        m = h["beta"] * s.m + g
        x = s.params - h["stepsize"] * m
        return {ret}

    def make(g, sch):
        return algorithm("momentum", {{"stepsize": g, "beta": 0.5}}, Worker(), Server(init, params, apply=apply))

    def delaylab_algorithms():
        return [AlgorithmEntry("momentum", make, None, "momentum ASGD", exact_arrival_map=False,
                               weights_fn=lambda g, s: None)]
"""


@pytest.mark.parametrize("ret,expect", [
    ("S(x, m), x", "server.apply must return (state, next_point, stats); got tuple of 2"),
    ("(x, m), x, {}", "server.apply must return a state of the structure"),
    ("S(x, m), S(x, m), {}", "server.apply's next point must have the structure and shapes of the worker's start point"),
    ("S(x, m), x, {'stepsize': h['stepsize'] * x}", "server.apply's stats must be a dict of scalars"),
    ("S(x, m), x, [h['stepsize']]", "server.apply's stats must be a dict of scalars"),
    ("S(x, m), x, {'beta': h['bta']}", "tracing one job and one arrival on this problem failed: KeyError: 'bta'"),
])
def test_a_method_whose_halves_break_the_protocol_is_refused_before_a_run_folder_is_made(tmp_path, ret, expect):
    import contextlib
    import io

    from delaylab import cli

    path = _write(tmp_path, "momentum.py", MOMENTUM.format(ret=ret))
    folder = tmp_path / "run"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = cli.main(["run", "--plugin", path, "--algorithm", "momentum", "--schedule.events", "50", "--out",
                       str(folder), "--quiet"])
    assert rc == 2 and err.getvalue().count("\n") == 1, err.getvalue()
    assert f"momentum: {expect}" in err.getvalue(), err.getvalue()
    assert not folder.exists()


def test_a_well_formed_momentum_plugin_runs(tmp_path):
    import contextlib
    import io

    from delaylab import cli

    path = _write(tmp_path, "momentum.py", MOMENTUM.format(ret="S(x, m), x, {'stepsize': h['stepsize']}"))
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main(["run", "--plugin", path, "--algorithm", "momentum", "--schedule.events", "50", "--out",
                       str(tmp_path / "run"), "--quiet"])
    assert rc == 0
