"""Plugins: a researcher's own algorithms, registered with their theory entries.

A plugin is a Python file (a notebook's cell saved as a ``.py``) or an importable module that
defines ``delaylab_algorithms()``, returning :class:`delaylab.registry.AlgorithmEntry` objects. An
installed package can also name one in the entry-point group ``delaylab.algorithms`` (a module,
or the function itself). :func:`load` imports it, checks every entry (its algorithm built on a
small schedule must keep the protocol of :mod:`algos.base`) and registers them, so that
``delaylab run | verify | show | figure --plugin`` and the Python API see them like built-in ones.
Every failure is a :class:`PluginError` whose one line names the plugin and what is wrong, raised
before anything compiles.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util
import os
import sys
import types
from typing import Iterable

ENTRY_POINT_GROUP = "delaylab.algorithms"
HOOK = "delaylab_algorithms"


class PluginError(ValueError):
    """A plugin that cannot be used; the message (one line) names it and says why."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


@dataclasses.dataclass(frozen=True)
class Plugin:
    """A loaded plugin: ``source`` (the absolute file path, or the module name) and the names of
    the algorithms it registered."""

    source: str
    names: tuple


_LOADED: dict[str, Plugin] = {}


def source_of(spec: str, *, relative_to: str | None = None) -> str:
    """How a plugin given as ``spec`` is recorded: a file's absolute path (a relative one taken
    from ``relative_to``, default the working directory), or a module's dotted name."""
    if not isinstance(spec, str) or not spec.strip():
        raise PluginError(f"plugin: expected a file path or a module name; got {spec!r}")
    if _is_path(spec):
        return os.path.abspath(os.path.join(relative_to or os.getcwd(), os.path.expanduser(spec)))
    return spec


def _is_path(spec: str) -> bool:
    return spec.endswith(".py") or os.sep in spec or "/" in spec


def _import_file(path: str):
    if not os.path.isfile(path):
        raise PluginError(f"plugin {path}: no such file")
    stem = os.path.splitext(os.path.basename(path))[0]
    known = sys.modules.get(stem)
    if known is not None and getattr(known, "__file__", None) and os.path.exists(known.__file__) \
            and os.path.samefile(known.__file__, path):
        return known  # already imported (a notebook that imports its own plugin): the same functions
    name = stem if stem.isidentifier() and known is None else f"delaylab_plugin_{abs(hash(path)):x}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"plugin {path}: not a Python file that can be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _import_module(name: str):
    """``name`` from ``sys.path``, or else from the working directory (where the console script,
    unlike ``python -m``, does not look)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name != name.split(".")[0] or os.getcwd() in sys.path:
            raise
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(os.getcwd())


def _entries_of(obj, where: str) -> list:
    from delaylab.registry import AlgorithmEntry

    hook = getattr(obj, HOOK, None) if isinstance(obj, types.ModuleType) else obj
    if not callable(hook):
        raise PluginError(f"plugin {where}: defines no {HOOK}() function (it must return the AlgorithmEntry "
                          "objects to register)")
    try:
        entries = hook()
    except (Exception, SystemExit) as err:  # noqa: BLE001 - the plugin's own code: reported in one line
        raise PluginError(f"plugin {where}: {HOOK}() raised {type(err).__name__}: {err}") from None
    if isinstance(entries, AlgorithmEntry):
        entries = [entries]
    try:
        entries = list(entries)
    except TypeError:
        raise PluginError(f"plugin {where}: {HOOK}() must return AlgorithmEntry objects (a list); "
                          f"got {type(entries).__name__}") from None
    for e in entries:
        if not isinstance(e, AlgorithmEntry):
            raise PluginError(f"plugin {where}: {HOOK}() returned a {type(e).__name__}, not a "
                              "delaylab.registry.AlgorithmEntry")
    return entries


def check_entry(entry, where: str) -> None:
    """Build ``entry``'s algorithm on a small schedule and check it keeps the protocol (nothing is
    compiled); raise :class:`PluginError` naming the plugin and the entry otherwise."""
    import numpy as np

    from delaylab.algos.base import check_protocol
    from delaylab.sim import schedules
    from delaylab.theory import model

    name = entry.name
    if not isinstance(name, str) or not name.isidentifier():
        raise PluginError(f"plugin {where}: algorithm name {name!r} must be an identifier (letters, digits, _)")
    if entry.rule is not None and not isinstance(entry.rule, model.StepRule) and entry.rule not in model.RULES:
        raise PluginError(f"plugin {where}: algorithm {name!r}: rule {entry.rule!r} is neither a theory.StepRule "
                          f"nor one of {sorted(model.RULES)}")
    if not callable(entry.make):
        raise PluginError(f"plugin {where}: algorithm {name!r}: make must be a function (γ, schedule) -> algorithm")
    try:
        alg = entry.make(0.01, schedules.fixed_computation(np.array([1.0, 2.0]), num_events=8))
        check_protocol(alg)
    except (Exception, SystemExit) as err:  # noqa: BLE001 - the plugin's own code
        raise PluginError(f"plugin {where}: algorithm {name!r} breaks the protocol: {type(err).__name__}: "
                          f"{err}") from None


def _register(entries: list, source: str, where: str) -> Plugin:
    from delaylab import registry

    for e in entries:
        check_entry(e, where)
    done = []
    try:
        for e in entries:
            registry.register(e, source=source)
            done.append(e.name)
    except ValueError as err:
        for n in done:
            registry.unregister(n)
        raise PluginError(f"plugin {where}: {err}") from None
    plugin = Plugin(source, tuple(done))
    _LOADED[source] = plugin
    return plugin


def load(spec: str, *, relative_to: str | None = None) -> Plugin:
    """Import the plugin ``spec`` (a file path or a module name), check and register its
    algorithms. Loading the same plugin twice registers nothing new."""
    source = source_of(spec, relative_to=relative_to)
    if source in _LOADED:
        return _LOADED[source]
    try:
        module = _import_file(source) if _is_path(spec) else _import_module(source)
    except PluginError:
        raise
    except (Exception, SystemExit) as err:  # noqa: BLE001 - any failure while importing the user's module
        raise PluginError(f"plugin {source}: failed to import: {type(err).__name__}: {err}") from None
    return _register(_entries_of(module, source), source, source)


_ENTRY_POINTS: list[Plugin] | None = None  # the entry-point group's plugins, once loaded in this process


def load_all(specs: Iterable[str] = (), *, relative_to: str | None = None) -> list[Plugin]:
    """Every plugin of the entry-point group ``delaylab.algorithms`` (the installed packages are
    scanned once per process), then ``specs``."""
    global _ENTRY_POINTS
    if _ENTRY_POINTS is None:
        _ENTRY_POINTS = _load_entry_points()
    return _ENTRY_POINTS + [load(s, relative_to=relative_to) for s in specs]


def _load_entry_points() -> list[Plugin]:
    out = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        where = f"{ep.name} ({ep.value}, entry point)"
        if ep.value in _LOADED:
            out.append(_LOADED[ep.value])
            continue
        try:
            obj = ep.load()
        except (Exception, SystemExit) as err:  # noqa: BLE001
            raise PluginError(f"plugin {where}: failed to import: {type(err).__name__}: {err}") from None
        out.append(_register(_entries_of(obj, where), ep.value, where))
    return out


def loaded() -> list[str]:
    """The sources of the plugins loaded in this process, in loading order."""
    return list(_LOADED)
