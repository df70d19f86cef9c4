"""`lint-imports` on delaylab as it is installed: ``python -m tests.lint_imports [lint-imports options]``.

The folders algos/, theory/, sim/ and paper_figures/ install as delaylab.algos, ... (pyproject.toml's
[tool.setuptools.package-dir]), but import-linter (grimp) builds its graph from each root package's
folder on disk, and delaylab/ in the checkout holds none of them: from the checkout's root,
``lint-imports`` would not see delaylab.algos at all (and stops: its contracts name modules that do
not exist). So this lays delaylab out as installed, in a temporary folder of symbolic links
(delaylab/<file> -> the checkout's delaylab/<file>, delaylab/algos -> algos/, ...; grimp follows
links), puts the other root packages (benchmarks) beside it and runs lint-imports there with the
checkout's pyproject.toml. The sources read are the checkout's own: nothing is copied or installed.

It also checks that the layers contracts leave none of delaylab's direct children out: the
library layer lists delaylab's own modules by name, and a module added to delaylab/ later must be
added there (a module in no layer would be checked by nothing).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = "delaylab"


def children(folder: str) -> set[str]:
    out = set()
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name.endswith(".py") and name != "__init__.py":
            out.add(name[:-3])
        elif os.path.isfile(os.path.join(path, "__init__.py")):
            out.add(name)
    return out


def layout(config: dict, into: str) -> None:
    package_dir = config["tool"]["setuptools"].get("package-dir", {})
    pkg = os.path.join(into, PKG)
    os.mkdir(pkg)
    for name in os.listdir(os.path.join(ROOT, PKG)):
        if name != "__pycache__":
            os.symlink(os.path.join(ROOT, PKG, name), os.path.join(pkg, name))
    for dotted, folder in package_dir.items():
        parts = dotted.split(".")
        if parts[0] != PKG or len(parts) != 2:
            raise SystemExit(f"package-dir {dotted!r}: only {PKG}.<name> mappings are laid out here")
        if os.path.lexists(os.path.join(pkg, parts[1])):
            raise SystemExit(f"{PKG}/{parts[1]} exists in the checkout and would hide {folder}/")
        os.symlink(os.path.join(ROOT, folder), os.path.join(pkg, parts[1]))
    for root in config["tool"]["importlinter"].get("root_packages", []):
        if root != PKG:
            os.symlink(os.path.join(ROOT, root), os.path.join(into, root))


def unlisted(config: dict, tree: str) -> list[str]:
    """delaylab's direct children that no layers contract (without containers) names."""
    named = set()
    layered = False
    for c in config["tool"]["importlinter"].get("contracts", []):
        if c.get("type") != "layers" or c.get("containers"):
            continue
        layered = True
        for layer in c["layers"]:
            for part in layer.replace("|", ":").split(":"):
                named.add(part.strip().strip("()").strip())
    if not layered:
        return []
    have = {f"{PKG}.{n}" for n in children(os.path.join(tree, PKG))}
    return sorted(m for m in have if m not in named)


def main(argv: list[str]) -> int:
    config_path = os.path.join(ROOT, "pyproject.toml")
    with open(config_path, "rb") as fh:
        config = tomllib.load(fh)
    args = [a for a in argv if not a.endswith(".toml")] or []
    configs = [os.path.abspath(a) for a in argv if a.endswith(".toml")] or [config_path]
    with tempfile.TemporaryDirectory(prefix="lint-imports-") as tree:
        layout(config, tree)
        missing = unlisted(config, tree)
        if missing:
            print(f"{', '.join(missing)}: in no layer of pyproject.toml's layers contract; add each to the "
                  f"layer it belongs to", file=sys.stderr)
            return 1
        command = os.path.join(os.path.dirname(sys.executable), "lint-imports")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the laid-out tree, not the checkout
        return subprocess.run([command, *configs, *args], cwd=tree, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
